// bench/upload: image upload throughput into a libvirt volume, the engine's
// own SSH link against libvirt's built-in transports, on one machine.
//
//   bench-upload [--mib N] [--chunk-kib K] [--runs R] [--tune-runs T] [--no-tune]
//                [--paths abcdef] [--sessions S] [--rollout H [--rollout-sessions S]]
//                [--disk D]                          (root; exit 77 otherwise)
//
// A file of N MiB (default 512) of random data in a temp dir; one private
// libvirtd (qemu:///system, a dir pool); one private sshd whose sessions see
// that libvirtd's socket dir as /run/libvirt (sshd_options::libvirt_socket_dir),
// so libvirt's own ssh URIs without socket= reach it as on a real host. Then,
// side by side, the same file into a fresh raw volume via:
//  (a) engine: a host link over the engine's SSH transport (libssh2, bridge,
//      pump), a call_job running lv::upload_volume reading the file in
//      chunks of K KiB (default 256); timed from job start to finish;
//  (b) virsh vol-upload over qemu+ssh:// (the OpenSSH client, through a
//      command= wrapper that pins the sshd's known_hosts);
//  (c) virsh vol-upload over qemu+libssh2:// (libvirt's libssh2 transport);
//  (d) the local unix socket (lv.uri()), lv::upload_volume on this thread:
//      the ceiling; and virsh vol-upload on it, for virsh's own cost.
// virsh runs are timed whole; a `virsh pool-list` with the same URI is timed
// as the connect cost and subtracted. Every upload is compared byte for byte
// with the file, then the volume is deleted. Then the chunk size is tuned
// (256 KiB, 1 MiB, 4 MiB; T uploads each, default 1) on (a) and (d). R runs
// (default 1) of the comparison, each starting with the next path; medians
// are printed. --paths runs only the listed paths (e.g. "a" to profile the
// engine alone; the ratios need a, b and c). Figures only, no assertions.
//  (e) the engine's image fill (images::fill, what an image actor runs: a
//      file:// source, its sha256, the marker) over 1..S SSH sessions at
//      once (default 4), each with a range of the image (ranged_upload.hpp).
//  (f) virsh vol-upload --sparse over qemu+ssh://: the file's holes go as
//      holes (for --disk; a random file has none).
// --disk D: the image is a raw disk of N MiB holding an ext4 file system
// with D MiB of random files (mke2fs -d), zeros elsewhere, like a provider's
// raw image: the image fill sends its zero packets as holes
// (lv::upload_volume_sparse), (a) and (d) send every byte, (f) the file's
// holes; the rollout runs virsh with and without --sparse.
// --rollout H: then H more hosts (a libvirtd and an sshd each) and the same
// image to all of them at once: the engine's fills (with --rollout-sessions,
// default the config's upload-streams) against H virsh vol-uploads over
// OpenSSH run in parallel, wall time until the last host holds it.

#include <algorithm>
#include <any>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <thread>

#include <dirent.h>
#include <fcntl.h>
#include <map>
#include <sys/resource.h>
#include <unistd.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include "base/log.hpp"
#include "messages/error.hpp"
#include "providers/libvirt/connection.hpp"
#include "providers/libvirt/volumes.hpp"
#include "providers/images/fill.hpp"
#include "providers/images/volume_names.hpp"
#include "providers/mirror/sha256.hpp"
#include "actors/parts/transport_choice.hpp"
#include "runtime/engine.hpp"
#include "testbed/disk_images.hpp"
#include "testbed/ssh_host.hpp"
#include "testbed/testbed.hpp"

#include "figures.hpp"
#include "proc_cpu.hpp"

using namespace egress;
using namespace egress::procfs;
using egress::test::figures;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr uint64_t mib = uint64_t{1} << 20;
const std::string pool = "bench";

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

double cpu_seconds() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  auto s = [](const timeval& tv) {
    return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) / 1e6;
  };
  return s(ru.ru_utime) + s(ru.ru_stime);
}

// CPU seconds (user + system) of the process trees under `roots`: every
// live process in them plus what their reaped children used (cutime). The
// three paths share two cores with each other's stages (and with whatever
// else runs here), so MiB/s moves with the load; the CPU a path spends per
// byte, summed over every process on it (this one with its threads and
// virsh children, libvirtd, the sshd sessions), moves much less and is what
// a change to the engine's path can actually lower.
// N MiB from xoshiro256**: incompressible, fast to make.
void write_random_file(const std::string& path, uint64_t mibs) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    throw std::runtime_error("create " + path + ": " + std::strerror(errno));
  uint64_t s[4] = {0x9e3779b97f4a7c15ULL, 0xbf58476d1ce4e5b9ULL, 0x94d049bb133111ebULL,
                   static_cast<uint64_t>(::getpid())};
  auto rotl = [](uint64_t x, int k) { return (x << k) | (x >> (64 - k)); };
  std::vector<uint64_t> block(mib / 8);
  for (uint64_t m = 0; m < mibs; ++m) {
    for (auto& w : block) {
      w = rotl(s[1] * 5, 7) * 9;
      uint64_t t = s[1] << 17;
      s[2] ^= s[0];
      s[3] ^= s[1];
      s[1] ^= s[2];
      s[0] ^= s[3];
      s[2] ^= t;
      s[3] = rotl(s[3], 45);
    }
    if (::write(fd, block.data(), mib) != static_cast<ssize_t>(mib)) {
      ::close(fd);
      throw std::runtime_error("write " + path + ": " + std::strerror(errno));
    }
  }
  ::close(fd);
}

std::string file_sha256(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw std::runtime_error("open " + path + ": " + std::strerror(errno));
  mirror::sha256 h;
  std::vector<char> buf(4 * mib);
  for (ssize_t n; (n = ::read(fd, buf.data(), buf.size())) > 0;)
    h.update(buf.data(), static_cast<size_t>(n));
  ::close(fd);
  return h.hex();
}

// Byte-for-byte comparison of two files; "" if equal, else what differs.
std::string compare_files(const std::string& a, const std::string& b) {
  int fa = ::open(a.c_str(), O_RDONLY | O_CLOEXEC);
  int fb = ::open(b.c_str(), O_RDONLY | O_CLOEXEC);
  std::string out;
  if (fa < 0 || fb < 0) {
    out = "cannot open " + (fa < 0 ? a : b);
  } else {
    std::vector<char> x(4 * mib), y(4 * mib);
    uint64_t at = 0;
    for (;;) {
      auto n = ::read(fa, x.data(), x.size());
      auto m = n > 0 ? ::read(fb, y.data(), static_cast<size_t>(n)) : ::read(fb, y.data(), 1);
      if (n != m) {
        out = "sizes differ near byte " + std::to_string(at);
        break;
      }
      if (n <= 0)
        break;
      if (std::memcmp(x.data(), y.data(), static_cast<size_t>(n)) != 0) {
        out = "content differs in the 4 MiB block at byte " + std::to_string(at);
        break;
      }
      at += static_cast<uint64_t>(n);
    }
  }
  if (fa >= 0)
    ::close(fa);
  if (fb >= 0)
    ::close(fb);
  return out;
}

// A source reading a file sequentially.
lv::upload_source file_source(int fd) {
  return [fd](char* buf, size_t cap) -> caf::expected<size_t> {
    for (;;) {
      auto n = ::read(fd, buf, cap);
      if (n >= 0)
        return static_cast<size_t>(n);
      if (errno != EINTR)
        return make_error(ec::invalid_argument,
                          std::string{"image file read: "} + std::strerror(errno));
    }
  };
}

struct setup {
  testbed::temp_dir tmp{"upload"};
  std::string image;
  uint64_t bytes = 0;
  std::string sha256;
  testbed::libvirtd lv;
  testbed::sshd ssh;
  std::string pool_dir;
  std::string wrapper;

  static testbed::libvirtd_options lv_options() {
    testbed::libvirtd_options o;
    o.warm_qemu_caps = false; // storage only
    return o;
  }
  testbed::sshd_options ssh_options() const {
    testbed::sshd_options o;
    o.libvirt_socket_dir = lv.socket_dir();
    return o;
  }

  /// With `same_image`: another host for that setup's image (no file of its
  /// own). `disk_data_mibs` > 0: a raw disk image with that much file data
  /// (test::make_ext4_file) instead of random bytes.
  explicit setup(uint64_t mibs, const setup* same_image = nullptr, uint64_t disk_data_mibs = 0)
    : lv(lv_options()), ssh(ssh_options()) {
    bytes = mibs * mib;
    if (same_image) {
      image = same_image->image;
      sha256 = same_image->sha256;
    } else {
      image = tmp / "image.raw";
      if (disk_data_mibs > 0)
        test::make_ext4_file(image, mibs * mib, disk_data_mibs);
      else
        write_random_file(image, mibs);
      sha256 = file_sha256(image);
    }
    lv.start();
    ssh.start();
    pool_dir = lv.define_dir_pool(pool);
    // libvirt's qemu+ssh runs `<command> [-p port] [-l user] [-i key] ... host
    // sh -c '...'`: the wrapper pins the sshd's known_hosts and reads no
    // config, agent or other key (as the sshwrap in docs/notes/transport.md#built-in-libvirt-transports).
    wrapper = tmp / "sshwrap";
    testbed::write_file(wrapper,
                        "#!/bin/sh\nexec ssh -F /dev/null -o BatchMode=yes"
                        " -o IdentitiesOnly=yes -o IdentityAgent=none"
                        " -o StrictHostKeyChecking=yes -o GlobalKnownHostsFile=/dev/null"
                        " -o UserKnownHostsFile="
                          + ssh.known_hosts() + " \"$@\"\n",
                        0755);
  }

  std::string authority() const {
    return "root@" + ssh.address() + ":" + std::to_string(ssh.port());
  }
  std::string openssh_uri() const {
    return "qemu+ssh://" + authority() + "/system?keyfile=" + ssh.client_key()
           + "&no_verify=0&no_tty=1&command=" + wrapper;
  }
  std::string libssh2_uri() const {
    return "qemu+libssh2://" + authority() + "/system?keyfile=" + ssh.client_key()
           + "&known_hosts=" + ssh.known_hosts() + "&sshauth=privkey";
  }

  host_config host() const {
    auto h = test::ssh_host(ssh, lv, "hv1", "qemu:///system");
    h.call_budget = 600s;
    h.connect_timeout = 10s;
    return h;
  }
};

// The image fill of the setup's image into its host's pool over `sessions`
// SSH sessions, as an image actor would ask for it.
images::fill_request fill_request_for(const setup& s, uint32_t sessions) {
  auto make = transport_for(s.host());
  images::fill_request req;
  req.entry = "bench";
  req.pool = pool;
  req.image = {"up", "file://" + s.image, s.sha256, s.bytes, "raw", 0};
  req.download_deadline = 900s;
  req.keepalive = lv::keepalive{5, 3};
  req.transfer = make();
  req.cleanup = make();
  for (uint32_t k = 1; k < sessions; ++k)
    req.more_transfers.push_back(make());
  return req;
}

struct measurement {
  std::string label;
  double seconds = 0;       // the upload itself
  double total_seconds = 0; // whole command / caller-observed
  double connect_seconds = 0;
  double cpu = 0;           // this process's CPU seconds during the upload
  double path_cpu = 0;      // CPU seconds of every process on the path
  std::string error;        // failure or content mismatch
  double cpu_s_per_gib(uint64_t bytes) const {
    return path_cpu * static_cast<double>(uint64_t{1} << 30) / static_cast<double>(bytes);
  }
  double mib_s(uint64_t bytes) const {
    return seconds > 0 ? static_cast<double>(bytes) / static_cast<double>(mib) / seconds : 0;
  }
};

class bench {
public:
  bench(setup& s, caf::actor_system& sys) : s_(s), sys_(sys) {
    auto c = lv::connection::open(s.lv.uri(), lv::keepalive{1, 3});
    if (!c)
      throw std::runtime_error("open " + s.lv.uri() + ": " + render(c.error()));
    direct_ = *c;
    engine_config cfg;
    cfg.entry = "bench";
    cfg.poll_interval = 2s;
    cfg.shutdown_timeout = 10s;
    cfg.probe.mode = "off"; // no proxies here; nothing to probe
    cfg.hosts.push_back(s.host());
    auto eng = egress::engine::start(sys, cfg);
    if (!eng)
      throw std::runtime_error("engine start: " + render(eng.error()));
    eng_.emplace(std::move(*eng));
    caf::scoped_actor self{sys_};
    self->request(eng_->fleet(), 5s, atom::link_v, std::string{"hv1"})
      .receive([&](host_link_actor& h) { link_ = h; },
               [&](caf::error& err) { throw std::runtime_error("link: " + render(err)); });
    // The first call dials: not part of any figure.
    auto t0 = clock_type::now();
    auto err = call([](lv::connection& c) -> caf::error {
      return lv::delete_volume(c, pool, "warm-up");
    });
    if (err)
      throw std::runtime_error("first call over the link: " + render(err));
    std::printf("link up (dial + first call) in %.0f ms\n", seconds_since(t0) * 1000);
  }

  ~bench() {
    if (eng_)
      if (auto err = eng_->stop())
        std::printf("engine stop: %s\n", render(err).c_str());
  }

  measurement engine(size_t chunk) {
    measurement m;
    m.label = "engine ssh link, chunk " + std::to_string(chunk >> 10) + " KiB";
    auto vol = fresh_volume("up-engine");
    auto job_s = std::make_shared<double>(0);
    auto cpu0 = cpu_seconds();
    auto path0 = path_cpu();
    auto t0 = clock_type::now();
    auto image = s_.image;
    auto bytes = s_.bytes;
    auto err = call([=](lv::connection& c) -> caf::error {
      auto start = clock_type::now();
      int fd = ::open(image.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0)
        return make_error(ec::invalid_argument, "open " + image);
      auto e = lv::upload_volume(c, pool, vol, 0, bytes, file_source(fd), chunk);
      ::close(fd);
      *job_s = seconds_since(start);
      return e;
    });
    m.total_seconds = seconds_since(t0);
    m.cpu = cpu_seconds() - cpu0;
    m.path_cpu = path_cpu() - path0;
    m.seconds = *job_s;
    finish(m, err ? render(err) : "", vol);
    return m;
  }

  // The engine's image fill (images::fill, what an image actor runs) from
  // a file:// source: over `sessions` SSH sessions at once, each with its
  // own range, through the spool and the sha256 over the whole image; 1 is
  // the single stream of before.
  measurement fill(uint32_t sessions) {
    measurement m;
    m.label = "engine image fill, " + std::to_string(sessions) + " session"
              + (sessions > 1 ? "s" : "");
    auto req = fill_request_for(s_, sessions);
    images::fill_progress progress;
    auto cpu0 = cpu_seconds();
    auto path0 = path_cpu();
    auto t0 = clock_type::now();
    auto r = images::fill(req, progress);
    m.seconds = m.total_seconds = seconds_since(t0);
    m.cpu = cpu_seconds() - cpu0;
    m.path_cpu = path_cpu() - path0;
    std::string err;
    if (!r)
      err = render(r.error());
    else if (!r->transferred)
      err = "found ready: nothing was uploaded";
    auto names = images::volume_names::of("bench", "up", s_.sha256);
    finish(m, err, names.data);
    for (auto& v : {names.marker, names.partial})
      if (auto e = lv::delete_volume(*direct_, pool, v))
        std::printf("  delete %s: %s\n", v.c_str(), render(e).c_str());
    return m;
  }

  measurement direct(size_t chunk) {
    measurement m;
    m.label = "unix socket (API), chunk " + std::to_string(chunk >> 10) + " KiB";
    auto vol = fresh_volume("up-direct");
    int fd = ::open(s_.image.c_str(), O_RDONLY | O_CLOEXEC);
    auto cpu0 = cpu_seconds();
    auto path0 = path_cpu();
    auto t0 = clock_type::now();
    auto err = lv::upload_volume(*direct_, pool, vol, 0, s_.bytes, file_source(fd), chunk);
    m.seconds = m.total_seconds = seconds_since(t0);
    m.cpu = cpu_seconds() - cpu0;
    m.path_cpu = path_cpu() - path0;
    ::close(fd);
    finish(m, err ? render(err) : "", vol);
    return m;
  }

  /// `sparse`: vol-upload --sparse, which sends the holes of the file as
  /// holes (the best a script does with a raw disk image it holds sparse).
  measurement virsh(const std::string& label, const std::string& uri, bool sparse = false) {
    measurement m;
    m.label = label;
    auto vol = fresh_volume("up-virsh");
    auto path0 = path_cpu();
    auto t0 = clock_type::now();
    std::vector<std::string> argv{"virsh", "-q", "-c", uri, "vol-upload", "--pool", pool, vol,
                                  s_.image};
    if (sparse)
      argv.push_back("--sparse");
    auto up = testbed::run(argv, std::chrono::seconds(900));
    m.total_seconds = seconds_since(t0);
    auto path1 = path_cpu();
    auto t1 = clock_type::now();
    auto list = testbed::run({"virsh", "-q", "-c", uri, "pool-list"}, std::chrono::seconds(60));
    m.connect_seconds = seconds_since(t1);
    m.seconds = m.total_seconds - m.connect_seconds;
    // The connect's CPU (virsh start, ssh key exchange) goes as its time does.
    m.path_cpu = 2 * path1 - path0 - path_cpu();
    std::string err;
    if (!up.ok())
      err = "vol-upload: exit " + std::to_string(up.exit_code) + ": " + up.output;
    else if (!list.ok())
      err = "pool-list: exit " + std::to_string(list.exit_code) + ": " + list.output;
    finish(m, err, vol);
    return m;
  }

private:
  double path_cpu() const {
    return tree_cpu_seconds({::getpid(), s_.lv.pid(), s_.ssh.pid()});
  }

  caf::error call(std::function<caf::error(lv::connection&)> fn) {
    call_job job;
    job.what = "bench upload";
    job.budget = 600s;
    job.fn = [fn = std::move(fn)](lv::connection& c) -> caf::expected<std::any> {
      if (auto err = fn(c))
        return err;
      return std::any{};
    };
    caf::error out;
    caf::scoped_actor self{sys_};
    self->request(link_, 660s, atom::call_v, std::move(job))
      .receive([](call_result&) {}, [&](caf::error& e) { out = std::move(e); });
    return out;
  }

  std::string fresh_volume(const std::string& name) {
    if (auto err = lv::delete_volume(*direct_, pool, name))
      throw std::runtime_error(render(err));
    auto vol = lv::create_volume(*direct_, pool, name, s_.bytes, "raw");
    if (!vol)
      throw std::runtime_error(render(vol.error()));
    return name;
  }

  void finish(measurement& m, std::string err, const std::string& vol) {
    if (err.empty())
      err = compare_files(s_.image, s_.pool_dir + "/" + vol);
    m.error = std::move(err);
    if (auto e = lv::delete_volume(*direct_, pool, vol))
      std::printf("  delete %s: %s\n", vol.c_str(), render(e).c_str());
  }

  setup& s_;
  caf::actor_system& sys_;
  lv::connection_ptr direct_;
  std::optional<egress::engine> eng_;
  host_link_actor link_;
};

void print(const measurement& m, uint64_t bytes) {
  if (!m.error.empty()) {
    std::printf("  %-40s FAILED: %s\n", m.label.c_str(), m.error.c_str());
    return;
  }
  std::printf("  %-40s %7.1f MiB/s  upload %6.2f s", m.label.c_str(), m.mib_s(bytes),
              m.seconds);
  if (m.connect_seconds > 0)
    std::printf("  (command %.2f s - connect %.2f s)", m.total_seconds, m.connect_seconds);
  else if (m.total_seconds > m.seconds)
    std::printf("  (caller saw %.2f s)", m.total_seconds);
  if (m.cpu > 0)
    std::printf("  bench CPU %.2f s", m.cpu);
  if (m.path_cpu > 0)
    std::printf("  path CPU %.2f s", m.path_cpu);
  std::printf("\n");
}

double median(std::vector<double> xs) {
  if (xs.empty())
    return 0;
  std::sort(xs.begin(), xs.end());
  auto n = xs.size();
  return n % 2 == 1 ? xs[n / 2] : (xs[n / 2 - 1] + xs[n / 2]) / 2;
}

double median_rate(const std::vector<measurement>& ms, uint64_t bytes) {
  std::vector<double> r;
  for (auto& m : ms)
    if (m.error.empty())
      r.push_back(m.mib_s(bytes));
  return median(r);
}

double median_cpu(const std::vector<measurement>& ms, uint64_t bytes) {
  std::vector<double> r;
  for (auto& m : ms)
    if (m.error.empty())
      r.push_back(m.cpu_s_per_gib(bytes));
  return median(r);
}

// The same image to several hosts at once (a base image rolled out to a
// fleet): every host's image fill at once, in a thread each, against every
// host's `virsh vol-upload` over OpenSSH at once; wall time until the last
// host holds it, each pool compared byte for byte with the file.
struct rollout_figures {
  double engine_s = 0, virsh_s = 0, virsh_sparse_s = 0; // 0: not run
  std::string error;
};

double virsh_rollout(std::vector<std::unique_ptr<setup>>& hosts,
                     std::vector<lv::connection_ptr>& direct, bool sparse,
                     std::vector<std::string>& errors) {
  for (size_t i = 0; i < hosts.size(); ++i) {
    (void) lv::delete_volume(*direct[i], pool, "up-virsh");
    if (auto v = lv::create_volume(*direct[i], pool, "up-virsh", hosts[i]->bytes, "raw"); !v)
      throw std::runtime_error(render(v.error()));
  }
  auto t0 = clock_type::now();
  std::vector<std::thread> uploads;
  for (size_t i = 0; i < hosts.size(); ++i)
    uploads.emplace_back([&, i] {
      auto& h = *hosts[i];
      std::vector<std::string> argv{"virsh", "-q", "-c", h.openssh_uri(), "vol-upload",
                                    "--pool", pool, "up-virsh", h.image};
      if (sparse)
        argv.push_back("--sparse");
      auto up = testbed::run(argv, std::chrono::seconds(1800));
      if (!up.ok())
        errors[i] = "vol-upload: exit " + std::to_string(up.exit_code) + ": " + up.output;
    });
  for (auto& t : uploads)
    t.join();
  return seconds_since(t0);
}

rollout_figures rollout(std::vector<std::unique_ptr<setup>>& hosts, uint32_t sessions,
                        bool sparse_virsh) {
  rollout_figures out;
  std::vector<lv::connection_ptr> direct;
  for (auto& h : hosts) {
    auto c = lv::connection::open(h->lv.uri(), lv::keepalive{1, 3});
    if (!c)
      throw std::runtime_error("open " + h->lv.uri() + ": " + render(c.error()));
    direct.push_back(*c);
  }
  auto check_and_clean = [&](const std::string& vol, const std::vector<std::string>& others) {
    for (size_t i = 0; i < hosts.size(); ++i) {
      auto diff = compare_files(hosts[i]->image, hosts[i]->pool_dir + "/" + vol);
      if (!diff.empty() && out.error.empty())
        out.error = "host " + std::to_string(i) + ": " + diff;
      for (auto& v : others)
        (void) lv::delete_volume(*direct[i], pool, v);
    }
  };
  auto names = images::volume_names::of("bench", "up", hosts[0]->sha256);
  std::vector<std::string> errors(hosts.size());
  auto t0 = clock_type::now();
  {
    std::vector<std::thread> fills;
    for (size_t i = 0; i < hosts.size(); ++i)
      fills.emplace_back([&, i] {
        auto req = fill_request_for(*hosts[i], sessions);
        images::fill_progress progress;
        if (auto r = images::fill(req, progress); !r)
          errors[i] = render(r.error());
      });
    for (auto& t : fills)
      t.join();
  }
  out.engine_s = seconds_since(t0);
  for (auto& e : errors)
    if (!e.empty() && out.error.empty())
      out.error = "engine: " + e;
  check_and_clean(names.data, {names.data, names.marker, names.partial});
  for (bool sparse : {false, true}) {
    if (sparse && !sparse_virsh)
      break;
    (sparse ? out.virsh_sparse_s : out.virsh_s) = virsh_rollout(hosts, direct, sparse, errors);
    for (auto& e : errors)
      if (!e.empty() && out.error.empty())
        out.error = e;
    check_and_clean("up-virsh", {"up-virsh"});
  }
  return out;
}

} // namespace

int main(int argc, char** argv) {
  uint64_t mibs = 512;
  size_t chunk_kib = 256;
  int runs = 1;
  int tune_runs = 1;
  std::string paths = "abcde";
  uint64_t disk_data_mibs = 0;
  uint32_t max_sessions = 4;
  int rollout_hosts = 0;
  auto rollout_sessions = host_config{}.upload_streams;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--mib" && i + 1 < argc) {
      mibs = std::max<uint64_t>(1, std::strtoull(argv[++i], nullptr, 10));
    } else if (a == "--chunk-kib" && i + 1 < argc) {
      chunk_kib = std::strtoull(argv[++i], nullptr, 10);
    } else if (a == "--runs" && i + 1 < argc) {
      runs = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--tune-runs" && i + 1 < argc) {
      tune_runs = std::max(0, std::atoi(argv[++i]));
    } else if (a == "--no-tune") {
      tune_runs = 0;
    } else if (a == "--rollout-sessions" && i + 1 < argc) {
      rollout_sessions = static_cast<uint32_t>(std::clamp(std::atoi(argv[++i]), 1, 8));
    } else if (a == "--rollout" && i + 1 < argc) {
      rollout_hosts = std::clamp(std::atoi(argv[++i]), 0, 16);
    } else if (a == "--sessions" && i + 1 < argc) {
      max_sessions = static_cast<uint32_t>(std::clamp(std::atoi(argv[++i]), 1, 8));
    } else if (a == "--paths" && i + 1 < argc) {
      paths = argv[++i];
    } else if (a == "--disk" && i + 1 < argc) {
      disk_data_mibs = std::strtoull(argv[++i], nullptr, 10);
    } else {
      std::fprintf(stderr, "usage: %s [--mib N] [--chunk-kib K] [--runs R] [--tune-runs T]"
                   " [--no-tune] [--paths abcdef] [--sessions N] [--rollout HOSTS]"
                   " [--rollout-sessions N] [--disk DATA_MIB]\n",
                   argv[0]);
      return 2;
    }
  }
  auto chunk = chunk_kib << 10;
  if (chunk < lv::min_upload_chunk || chunk > lv::max_upload_chunk) {
    std::fprintf(stderr, "--chunk-kib must be within [%zu, %zu]\n", lv::min_upload_chunk >> 10,
                 lv::max_upload_chunk >> 10);
    return 2;
  }
  if (paths.empty() || paths.find_first_not_of("abcdef") != std::string::npos) {
    std::fprintf(stderr, "--paths takes letters from abcdef\n");
    return 2;
  }
  if (disk_data_mibs >= mibs) {
    std::fprintf(stderr, "--disk takes the MiB of file data, less than --mib\n");
    return 2;
  }
  if (::geteuid() != 0) {
    std::printf("SKIPPED: needs root\n");
    return 77;
  }
  testbed::require_root_or_skip(); // namespaces and tools; reaps stale leftovers
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  log::set_level(log::level::error);

  try {
    auto t0 = clock_type::now();
    setup s{mibs, nullptr, disk_data_mibs};
    auto what = disk_data_mibs > 0
                  ? "raw disk image (ext4, " + std::to_string(disk_data_mibs) + " MiB of files)"
                  : std::string{"random file"};
    std::printf("bench-upload: %llu MiB %s; libvirtd pid %d (dir pool %s);"
                " sshd %s:%d pid %d; setup %.1f s\n",
                static_cast<unsigned long long>(mibs), what.c_str(), static_cast<int>(s.lv.pid()),
                pool.c_str(), s.ssh.address().c_str(), s.ssh.port(),
                static_cast<int>(s.ssh.pid()), seconds_since(t0));
    std::printf("  (b) %s\n  (c) %s\n  (d) %s\n", s.openssh_uri().c_str(),
                s.libssh2_uri().c_str(), s.lv.uri().c_str());
    caf::actor_system_config cfg;
    cfg.set("logger.file-verbosity", caf::atom("quiet"));
    configure(cfg);
    caf::actor_system sys{cfg};
    {
      bench b{s, sys};
      // Not counted: the first writes of a run into fresh page-cache memory
      // were 3-5x slower than every later one here (a VM whose memory the
      // host backs on first touch); whichever path went first paid for it.
      std::printf("\nwarm-up (not counted):\n");
      print(b.direct(lv::min_upload_chunk), s.bytes);
      std::vector<measurement> a, bo, c, d, dv, f;
      using step = std::function<void()>;
      std::vector<step> steps;
      auto on = [&](char p) { return paths.find(p) != std::string::npos; };
      if (on('a'))
        steps.push_back([&] { print(a.emplace_back(b.engine(chunk)), s.bytes); });
      std::vector<std::vector<measurement>> e(max_sessions + 1);
      if (on('e'))
        for (uint32_t n = 1; n <= max_sessions; ++n)
          steps.push_back([&, n] { print(e[n].emplace_back(b.fill(n)), s.bytes); });
      if (on('b'))
        steps.push_back([&] {
          print(bo.emplace_back(b.virsh("(b) virsh qemu+ssh (OpenSSH)", s.openssh_uri())),
                s.bytes);
        });
      if (on('c'))
        steps.push_back([&] {
          print(c.emplace_back(b.virsh("(c) virsh qemu+libssh2", s.libssh2_uri())), s.bytes);
        });
      if (on('f'))
        steps.push_back([&] {
          print(f.emplace_back(b.virsh("(f) virsh qemu+ssh --sparse", s.openssh_uri(), true)),
                s.bytes);
        });
      if (on('d')) {
        steps.push_back([&] { print(d.emplace_back(b.direct(chunk)), s.bytes); });
        steps.push_back(
          [&] { print(dv.emplace_back(b.virsh("(d) virsh qemu+unix", s.lv.uri())), s.bytes); });
      }
      for (int r = 0; r < runs; ++r) {
        std::printf("\n[run %d/%d] %llu MiB each; load average %s\n", r + 1, runs,
                    static_cast<unsigned long long>(mibs), load_average().c_str());
        // Each run starts with the next path, so none is always first.
        for (size_t i = 0; i < steps.size(); ++i)
          steps[(i + static_cast<size_t>(r)) % steps.size()]();
      }
      auto ra = median_rate(a, s.bytes), rb = median_rate(bo, s.bytes),
           rc = median_rate(c, s.bytes), rd = median_rate(d, s.bytes),
           rdv = median_rate(dv, s.bytes);
      figures csv{"path", "mib_s", "cpu_s_per_gib"};
      // A raw disk image's rows carry "disk_", so that both runs of
      // `make bench` go into one CSV (and one plot) apart.
      auto row = [&](char path, const std::string& label, double rate, double cpu) {
        if (on(path))
          csv.row({(disk_data_mibs > 0 ? "disk_" : "") + label, figures::cell(rate),
                   figures::cell(cpu)});
      };
      row('a', "(a)_engine_ssh_link", ra, median_cpu(a, s.bytes));
      row('b', "(b)_virsh_qemu+ssh", rb, median_cpu(bo, s.bytes));
      row('c', "(c)_virsh_qemu+libssh2", rc, median_cpu(c, s.bytes));
      row('d', "(d)_unix_socket_API", rd, median_cpu(d, s.bytes));
      std::printf("\n==== results (median of %d; connect cost excluded) ====\n", runs);
      std::printf("                                  MiB/s   path CPU s/GiB\n");
      std::printf("  (a) engine ssh link           %7.1f   %6.2f\n", ra,
                  median_cpu(a, s.bytes));
      std::printf("  (b) virsh qemu+ssh (OpenSSH)  %7.1f   %6.2f\n", rb,
                  median_cpu(bo, s.bytes));
      std::printf("  (c) virsh qemu+libssh2        %7.1f   %6.2f\n", rc,
                  median_cpu(c, s.bytes));
      std::printf("  (d) unix socket, API          %7.1f   %6.2f   virsh: %.1f MiB/s, %.2f s/GiB\n",
                  rd, median_cpu(d, s.bytes), rdv, median_cpu(dv, s.bytes));
      std::printf("  engine / (b) OpenSSH = %.2fx  (goal >= 1.5x)\n", rb > 0 ? ra / rb : 0);
      std::printf("  engine / (c) libssh2 = %.2fx  (goal >= 2x)\n", rc > 0 ? ra / rc : 0);
      // The load on this machine drifts over minutes and moves all paths of
      // one run together: the ratio within each run, then its median, is
      // the steadier figure.
      auto per_run = [&](const std::vector<measurement>& x) {
        std::vector<double> r;
        for (size_t i = 0; i < a.size() && i < x.size(); ++i)
          if (a[i].error.empty() && x[i].error.empty() && x[i].mib_s(s.bytes) > 0)
            r.push_back(a[i].mib_s(s.bytes) / x[i].mib_s(s.bytes));
        return median(r);
      };
      std::printf("  median of per-run ratios: engine / (b) = %.2fx, engine / (c) = %.2fx\n",
                  per_run(bo), per_run(c));
      std::printf("  engine / (d) unix    = %.2f of the ceiling\n", rd > 0 ? ra / rd : 0);
      if (on('e')) {
        std::printf("\n  (e) the engine's image fill (file:// source, sha256, marker):\n");
        for (uint32_t n = 1; n <= max_sessions; ++n) {
          auto re = median_rate(e[n], s.bytes);
          row('e', "(e)_fill_" + std::to_string(n) + "_sessions", re,
              median_cpu(e[n], s.bytes));
          std::printf("  %u session(s) %7.1f MiB/s  %6.2f path CPU s/GiB  = %.2f of (d),"
                      " %.2fx (b) OpenSSH, %.2fx (c) libssh2, %.2fx one session\n",
                      n, re, median_cpu(e[n], s.bytes), rd > 0 ? re / rd : 0,
                      rb > 0 ? re / rb : 0, rc > 0 ? re / rc : 0,
                      median_rate(e[1], s.bytes) > 0 ? re / median_rate(e[1], s.bytes) : 0);
        }
        std::printf("  goals: >= 0.9 of (d), >= 2x (b)\n");
      }
      if (on('f')) {
        auto rf = median_rate(f, s.bytes), re = on('e') ? median_rate(e[1], s.bytes) : 0.0;
        row('f', "(f)_virsh_qemu+ssh_sparse", rf, median_cpu(f, s.bytes));
        std::printf("\n  (f) virsh qemu+ssh --sparse %7.1f MiB/s  %6.2f path CPU s/GiB\n", rf,
                    median_cpu(f, s.bytes));
        std::printf("  the image fill (one session) / (f) = %.2fx, / (b) = %.2fx\n",
                    rf > 0 ? re / rf : 0, rb > 0 ? re / rb : 0);
      }
      if (tune_runs > 0) {
        std::printf("\n==== chunk size (%d upload(s) per size and path, interleaved;"
                    " load average %s) ====\n",
                    tune_runs, load_average().c_str());
        const std::vector<size_t> kibs{256, 1024, 4096};
        std::vector<std::vector<measurement>> te(kibs.size()), td(kibs.size());
        for (int r = 0; r < tune_runs; ++r)
          for (size_t i = 0; i < kibs.size(); ++i) {
            print(te[i].emplace_back(b.engine(kibs[i] << 10)), s.bytes);
            print(td[i].emplace_back(b.direct(kibs[i] << 10)), s.bytes);
          }
        std::printf("  median MiB/s by chunk:     engine ssh link   unix socket (API)\n");
        for (size_t i = 0; i < kibs.size(); ++i)
          std::printf("  %5zu KiB               %14.1f   %17.1f\n", kibs[i],
                      median_rate(te[i], s.bytes), median_rate(td[i], s.bytes));
        auto best = median_rate(te[0], s.bytes);
        std::printf("  engine at 256 KiB / (b) OpenSSH = %.2fx, / (c) libssh2 = %.2fx\n",
                    rb > 0 ? best / rb : 0, rc > 0 ? best / rc : 0);
      }
    }
    if (rollout_hosts > 0) {
      std::printf("\n==== rollout: the image to %d hosts at once (load average %s) ====\n",
                  rollout_hosts, load_average().c_str());
      std::vector<std::unique_ptr<setup>> hosts;
      for (int i = 0; i < rollout_hosts; ++i)
        hosts.push_back(std::make_unique<setup>(mibs, &s));
      // A raw disk image: virsh also with --sparse, the best a script does.
      auto f = rollout(hosts, rollout_sessions, disk_data_mibs > 0);
      if (!f.error.empty())
        std::printf("  FAILED: %s\n", f.error.c_str());
      auto total_mib = static_cast<double>(mibs) * rollout_hosts;
      std::printf("  engine image fills (%u sessions each) %7.1f s  %7.1f MiB/s in all\n",
                  rollout_sessions, f.engine_s, total_mib / f.engine_s);
      std::printf("  %d x virsh vol-upload (OpenSSH)     %7.1f s  %7.1f MiB/s in all\n",
                  rollout_hosts, f.virsh_s, total_mib / f.virsh_s);
      std::printf("  engine / virsh = %.2fx faster  (goal >= 2x)\n",
                  f.engine_s > 0 ? f.virsh_s / f.engine_s : 0);
      if (f.virsh_sparse_s > 0)
        std::printf("  %d x virsh vol-upload --sparse      %7.1f s  %7.1f MiB/s in all;"
                    " engine / virsh --sparse = %.2fx faster\n",
                    rollout_hosts, f.virsh_sparse_s, total_mib / f.virsh_sparse_s,
                    f.engine_s > 0 ? f.virsh_sparse_s / f.engine_s : 0);
      // The table's columns: MiB/s here is over every host together.
      figures rc{"path", "mib_s", "cpu_s_per_gib"};
      std::string disk = disk_data_mibs > 0 ? "disk_" : "";
      rc.row({disk + "rollout_engine_" + std::to_string(rollout_hosts) + "_hosts",
              figures::cell(total_mib / f.engine_s), figures::cell(0.0)});
      rc.row({disk + "rollout_virsh_" + std::to_string(rollout_hosts) + "_hosts",
              figures::cell(total_mib / f.virsh_s), figures::cell(0.0)});
      if (f.virsh_sparse_s > 0)
        rc.row({disk + "rollout_virsh_sparse_" + std::to_string(rollout_hosts) + "_hosts",
                figures::cell(total_mib / f.virsh_sparse_s), figures::cell(0.0)});
    }
    std::printf("\ntotal %.1f s\n", seconds_since(t0));
  } catch (const std::exception& e) {
    std::printf("bench-upload: FAILED: %s\n", e.what());
    return 1;
  }
  return 0;
}
