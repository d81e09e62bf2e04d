// bench/image: the image cache's whole path, mirror -> engine -> SSH ->
// libvirtd, against the shell pipeline an operator would use instead, on one
// machine; and where the engine path's time goes.
//
//   bench-image [--mib N] [--runs R]                    (root; exit 77 otherwise)
//
// Test bed (as bench/upload): one private libvirtd (qemu:///system, a dir
// pool) and one private sshd whose sessions see that libvirtd's socket dir as
// /run/libvirt, so OpenSSH's qemu+ssh:// without socket= reaches it; virsh's
// ssh goes through a command= wrapper that pins the sshd's known_hosts. The
// mirror is testbed/http_server.hpp on 127.0.0.1 serving N MiB
// (default 512) of random bytes from memory. Each run, in rotating order:
//  (a) engine: images::fill with the engine's SSH transports (transport_for
//      the host), a fresh entry name, so it checks the pool, writes the
//      partial mark, creates the volume, streams mirror -> sha256 -> libvirt
//      over its dedicated connection, verifies length and digest, writes the
//      marker, deletes the partial mark. Timed from the call to its return.
//  (b) pipeline: one `bash -c` running
//        curl -sSf URL | tee FIFO | virsh -c qemu+ssh://...
//             'vol-create-as ...; vol-upload --pool P V /dev/stdin'
//      with `sha256sum < FIFO` beside it, then comparing that digest with
//      the expected one: create + upload in one virsh connection (as (a)
//      uses one), the digest verified over the same stream (as (a) does).
//      Timed whole (bash, curl, ssh handshake included, as (a) includes its
//      own SSH handshake); a `virsh pool-list` over the same URI is timed
//      too and printed as the pipeline's connect cost, not subtracted.
//  (c) instrumented replica of (a)'s transfer (fill.cpp's steps, minus the
//      volume_info checks, partial mark and marker: small calls, tens of ms)
//      with timers around each call: fill's source cannot be wrapped from outside, so the replica
//      gives the shares, and its total next to (a)'s shows they carry over.
//      download::read() both receives and hashes (it always hashes), so the
//      sha256 share comes from hashing the same bytes once more in a
//      separate timed pass each run (uncontended: a lower bound of what
//      hashing costs inside read); download = read - that. send = time in
//      lv::upload_volume minus time in read (libvirt stream send, waiting on
//      the SSH pump included).
//  (m) mirror ceiling: curl -sS URL -o /dev/null, and its time to first byte:
//      the test server copies the body twice per request before it sends
//      (seconds at 512 MiB in fresh memory here), and (a) and (b) wait for
//      that too; the results also show both paths without it.
// Every volume is compared byte for byte with the image (untimed), then
// deleted, then sync(). Medians over R runs (default 3). Figures only.

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <dirent.h>
#include <unistd.h>

#include "actors/parts/transport_choice.hpp"
#include "base/log.hpp"
#include "messages/error.hpp"
#include "providers/images/dedicated_link.hpp"
#include "providers/images/fill.hpp"
#include "providers/images/volume_names.hpp"
#include "providers/libvirt/connection.hpp"
#include "providers/libvirt/volumes.hpp"
#include "providers/mirror/download.hpp"
#include "providers/mirror/sha256.hpp"
#include "testbed/http_server.hpp"
#include "testbed/ssh_host.hpp"
#include "testbed/testbed.hpp"

#include "proc_cpu.hpp"

using namespace egress;
using namespace egress::procfs;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr uint64_t mib = uint64_t{1} << 20;
const std::string pool = "bench";
const std::string image_name = "img";

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

double thread_cpu() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// N MiB of pseudo-random bytes: incompressible, so no transport's
// compression can flatter a path.
std::string random_image(uint64_t mibs) {
  std::string out(mibs * mib, '\0');
  std::mt19937_64 gen(static_cast<uint64_t>(::getpid()));
  for (size_t at = 0; at < out.size(); at += 8) {
    uint64_t w = gen();
    std::memcpy(out.data() + at, &w, 8);
  }
  return out;
}

double median(std::vector<double> xs) {
  if (xs.empty())
    return 0;
  std::sort(xs.begin(), xs.end());
  auto n = xs.size();
  return n % 2 == 1 ? xs[n / 2] : (xs[n / 2 - 1] + xs[n / 2]) / 2;
}

// The shares of one instrumented transfer (c), in wall seconds.
struct shares {
  double total = 0;
  double connect = 0;   // dedicated_link::open: SSH handshake, pump, libvirt open
  double volumes = 0;   // create the data volume
  double read = 0;      // inside download::read(): receive + hash + copy
  double read_cpu = 0;  // this thread's CPU inside read()
  double first = 0;     // the first read(): HTTP connect and time to first byte
  double upload = 0;    // inside lv::upload_volume, read() included
  double upload_cpu = 0;
  double hash = 0;      // a separate sha256 pass over the same bytes
  double close = 0;     // dedicated_link::close
  double send() const { return upload - read; }
  double send_cpu() const { return upload_cpu - read_cpu; }
  double download() const { return read - hash; }
};

struct bed {
  testbed::temp_dir tmp{"image"};
  std::string body;
  std::string digest;
  testbed::libvirtd lv;
  testbed::sshd ssh;
  test::http_server http; // the mirror
  std::string pool_dir, wrapper, fifo, script;
  host_config host;
  lv::connection_ptr direct; // for deletes only, never timed

  static testbed::libvirtd_options lv_options() {
    testbed::libvirtd_options o;
    o.warm_qemu_caps = false; // storage only
    return o;
  }
  static testbed::sshd_options ssh_options(const testbed::libvirtd& lv) {
    testbed::sshd_options o;
    o.libvirt_socket_dir = lv.socket_dir(); // qemu+ssh without socket= reaches lv
    return o;
  }

  explicit bed(uint64_t mibs)
      : body(random_image(mibs)), digest(mirror::sha256_hex(body)), lv(lv_options()),
        ssh(ssh_options(lv)), http(body) {
    lv.start();
    ssh.start();
    http.start();
    pool_dir = lv.define_dir_pool(pool);
    // libvirt's qemu+ssh runs `<command> [-p port] [-l user] [-i key] host
    // sh -c '...'`: pin the sshd's known_hosts, read no config, agent or key.
    wrapper = tmp / "sshwrap";
    testbed::write_file(wrapper,
                        "#!/bin/sh\nexec ssh -F /dev/null -o BatchMode=yes"
                        " -o IdentitiesOnly=yes -o IdentityAgent=none"
                        " -o StrictHostKeyChecking=yes -o GlobalKnownHostsFile=/dev/null"
                        " -o UserKnownHostsFile="
                          + ssh.known_hosts() + " \"$@\"\n",
                        0755);
    // The pipeline. A FIFO rather than >(...): bash waits for the hasher
    // explicitly, so the timing ends only when the digest is checked.
    fifo = tmp / "fifo";
    script = "set -eu -o pipefail\nrm -f \"$F\"; mkfifo \"$F\"\n"
             "sha256sum < \"$F\" > \"$F.sum\" & h=$!\n"
             "curl -sSf \"$URL\" | tee \"$F\" | virsh -q -c \"$URI\" "
             "\"vol-create-as --pool $POOL $VOL $BYTES --format raw;"
             " vol-upload --pool $POOL $VOL /dev/stdin\"\n"
             "wait $h\nread got rest < \"$F.sum\"\n"
             "[ \"$got\" = \"$SUM\" ] || { echo \"sha256 $got, expected $SUM\"; exit 3; }\n";
    host = test::ssh_host(ssh, lv, "hv1", "qemu:///system");
    host.pool = pool;
    host.call_budget = 600s;
    host.connect_timeout = 10s;
    auto c = lv::connection::open(lv.uri(), lv::keepalive{1, 3});
    if (!c)
      throw std::runtime_error("open " + lv.uri() + ": " + render(c.error()));
    direct = *c;
  }

  uint64_t bytes() const { return body.size(); }
  std::string openssh_uri() const {
    return "qemu+ssh://root@" + ssh.address() + ":" + std::to_string(ssh.port())
           + "/system?keyfile=" + ssh.client_key() + "&no_verify=0&no_tty=1&command="
           + wrapper;
  }
  double path_cpu() const { return tree_cpu_seconds({::getpid(), lv.pid(), ssh.pid()}); }

  // Untimed: the volume must hold exactly the image; then it goes, and the
  // dirty pages are written back so that they do not slow the next path.
  std::string check_and_delete(const std::vector<std::string>& vols) {
    std::string err;
    if (testbed::read_file(pool_dir + "/" + vols.front()) != body)
      err = "volume " + vols.front() + " does not hold the image";
    for (auto& v : vols)
      if (auto e = lv::delete_volume(*direct, pool, v))
        std::printf("  delete %s: %s\n", v.c_str(), render(e).c_str());
    ::sync();
    return err;
  }
};

struct sample {
  double seconds = 0;
  double path_cpu = 0;
  std::string error;
};

// (a) the engine's own fill, as the image actor runs it (minus the actor).
sample engine_fill(bed& b, const std::string& entry) {
  images::fill_request req;
  req.entry = entry;
  req.pool = pool;
  req.image = {image_name, b.http.url(), b.digest, b.bytes(), "raw"};
  req.download_deadline = 600s;
  req.keepalive = lv::keepalive{1, 3};
  auto make = transport_for(b.host);
  req.transfer = make();
  req.cleanup = make();
  images::fill_progress progress;
  sample s;
  auto cpu0 = b.path_cpu();
  auto t0 = clock_type::now();
  auto r = images::fill(req, progress);
  s.seconds = seconds_since(t0);
  s.path_cpu = b.path_cpu() - cpu0;
  if (!r)
    s.error = render(r.error());
  else if (!r->transferred)
    s.error = "found ready: nothing was transferred";
  auto names = images::volume_names::of(entry, image_name, b.digest);
  auto err = b.check_and_delete({names.data, names.marker, names.partial});
  if (s.error.empty())
    s.error = err;
  return s;
}

// (b) curl | tee (sha256sum) | virsh vol-create-as + vol-upload over qemu+ssh.
sample pipeline(bed& b, const std::string& vol) {
  sample s;
  auto cpu0 = b.path_cpu();
  auto t0 = clock_type::now();
  auto r = testbed::run({"env", "F=" + b.fifo, "URL=" + b.http.url(), "URI=" + b.openssh_uri(),
                         "POOL=" + pool, "VOL=" + vol, "BYTES=" + std::to_string(b.bytes()),
                         "SUM=" + b.digest, "bash", "-c", b.script},
                        std::chrono::seconds(900));
  s.seconds = seconds_since(t0);
  s.path_cpu = b.path_cpu() - cpu0;
  if (!r.ok())
    s.error = "exit " + std::to_string(r.exit_code) + ": " + r.output;
  auto err = b.check_and_delete({vol});
  if (s.error.empty())
    s.error = err;
  return s;
}

double connect_cost(bed& b) {
  auto t0 = clock_type::now();
  auto r = testbed::run({"virsh", "-q", "-c", b.openssh_uri(), "pool-list"}, 60s);
  return r.ok() ? seconds_since(t0) : -1;
}

// (m) what the mirror serves at most: curl alone, into /dev/null.
// Its time to first byte is printed too: the test server copies the body
// (twice) before it sends a byte of it.
sample mirror_ceiling(bed& b, double& first_byte) {
  sample s;
  auto cpu0 = b.path_cpu();
  auto t0 = clock_type::now();
  auto r = testbed::run({"curl", "-sSf", b.http.url(), "-o", "/dev/null", "-w",
                         "%{time_starttransfer}"},
                        300s);
  s.seconds = seconds_since(t0);
  s.path_cpu = b.path_cpu() - cpu0;
  if (!r.ok())
    s.error = r.output;
  first_byte = std::strtod(r.output.c_str(), nullptr);
  return s;
}

// (c) fill's transfer step by step, with timers around each call.
caf::expected<shares> instrumented(bed& b, const std::string& entry) {
  auto names = images::volume_names::of(entry, image_name, b.digest);
  shares sh;
  caf::error failure;
  auto t0 = clock_type::now();
  auto link = images::dedicated_link::open(transport_for(b.host)(), lv::keepalive{1, 3});
  if (!link)
    return link.error();
  sh.connect = seconds_since(t0);
  auto& c = (*link)->conn();
  [&] {
    auto tv = clock_type::now();
    auto vol = lv::create_volume(c, pool, names.data, b.bytes(), "raw");
    sh.volumes += seconds_since(tv);
    if (!vol)
      return void(failure = vol.error());
    mirror::fetch_options fo; // as fill sets them
    fo.url = b.http.url();
    fo.expected_length = b.bytes();
    fo.expected_sha256 = b.digest;
    fo.deadline = 600s;
    auto dl = mirror::download::open(fo);
    if (!dl)
      return void(failure = dl.error());
    auto source = [&](char* buf, size_t cap) -> caf::expected<size_t> {
      auto c0 = thread_cpu();
      auto tr = clock_type::now();
      auto n = (*dl)->read(buf, cap);
      if (sh.read == 0)
        sh.first = seconds_since(tr);
      sh.read += seconds_since(tr);
      sh.read_cpu += thread_cpu() - c0;
      return n;
    };
    auto c0 = thread_cpu();
    auto tu = clock_type::now();
    failure = lv::upload_volume(c, pool, names.data, 0, b.bytes(), source);
    sh.upload = seconds_since(tu);
    sh.upload_cpu = thread_cpu() - c0;
    if (failure)
      return;
    char probe[1]; // the end of the source: length and digest are checked here
    auto end = source(probe, 1);
    if (!end || *end != 0 || (*dl)->digest() != b.digest)
      failure = end ? make_error(ec::digest_mismatch, "digest " + (*dl)->digest()) : end.error();
  }();
  auto tc = clock_type::now();
  (*link)->close();
  sh.close = seconds_since(tc);
  sh.total = seconds_since(t0);
  auto err = b.check_and_delete({names.data, names.marker});
  if (failure)
    return failure;
  if (!err.empty())
    return make_error(ec::invalid_argument, err);
  // The separate sha256 pass, in the pieces libcurl hands the download.
  auto th = clock_type::now();
  mirror::sha256 h;
  for (size_t at = 0; at < b.body.size(); at += 16 << 10)
    h.update(b.body.data() + at, std::min<size_t>(16 << 10, b.body.size() - at));
  if (h.hex() != b.digest)
    return make_error(ec::digest_mismatch, "the separate sha256 pass disagrees");
  sh.hash = seconds_since(th);
  return sh;
}

} // namespace

int main(int argc, char** argv) {
  uint64_t mibs = 512;
  int runs = 3;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--mib" && i + 1 < argc) {
      mibs = std::max<uint64_t>(1, std::strtoull(argv[++i], nullptr, 10));
    } else if (a == "--runs" && i + 1 < argc) {
      runs = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: %s [--mib N] [--runs R]\n", argv[0]);
      return 2;
    }
  }
  if (::geteuid() != 0) {
    std::printf("SKIPPED: needs root\n");
    return 77;
  }
  testbed::require_root_or_skip(); // namespaces and tools; reaps stale leftovers
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  log::set_level(log::level::error);
  // As the engine does (engine.cpp, dedicated_link.cpp): a write into a
  // socket the peer closed must be an error, not the end of the process.
  std::signal(SIGPIPE, SIG_IGN);

  try {
    auto t0 = clock_type::now();
    bed b{mibs};
    auto mibf = static_cast<double>(b.bytes()) / static_cast<double>(mib);
    std::printf("bench-image: %llu MiB random image at %s (sha256 %.16s...); libvirtd pid %d,"
                " dir pool %s; sshd %s:%d pid %d; setup %.1f s\n",
                static_cast<unsigned long long>(mibs), b.http.url().c_str(), b.digest.c_str(),
                static_cast<int>(b.lv.pid()), pool.c_str(), b.ssh.address().c_str(),
                b.ssh.port(), static_cast<int>(b.ssh.pid()), seconds_since(t0));
    std::printf("  (b) %s\n", b.openssh_uri().c_str());

    auto print = [&](const char* label, const sample& s) {
      if (!s.error.empty())
        std::printf("  %-34s FAILED: %s\n", label, s.error.c_str());
      else
        std::printf("  %-34s %6.2f s  %7.1f MiB/s  path CPU %5.2f s\n", label, s.seconds,
                    mibf / s.seconds, s.path_cpu);
    };
    // Not counted: the first writes into fresh page-cache memory were several
    // times slower than later ones (bench/upload); whoever went first paid.
    std::printf("\nwarm-up (not counted):\n");
    print("(a) engine images::fill", engine_fill(b, "warm"));

    std::vector<sample> a, p, m;
    std::vector<shares> c;
    std::vector<double> connects, firsts;
    int seq = 0; // fresh entry and volume names: every run really transfers
    auto next = [&](const char* what) { return what + std::to_string(++seq); };
    std::vector<std::function<void()>> steps{
      [&] { print("(a) engine images::fill", a.emplace_back(engine_fill(b, next("a")))); },
      [&] {
        print("(b) curl|tee sha256sum|virsh", p.emplace_back(pipeline(b, next("pipe"))));
        connects.push_back(connect_cost(b));
        std::printf("  %-34s %6.2f s\n", "(b) connect: virsh pool-list", connects.back());
      },
      [&] {
        auto r = instrumented(b, next("c"));
        if (!r)
          return void(std::printf("  (c) FAILED: %s\n", render(r.error()).c_str()));
        auto& s = c.emplace_back(*r);
        std::printf("  %-34s %6.2f s  connect %.2f, volumes %.2f, read %.2f (cpu %.2f),"
                    " send %.2f (cpu %.2f), close %.2f, sha256 pass %.2f\n",
                    "(c) instrumented replica", s.total, s.connect, s.volumes, s.read,
                    s.read_cpu, s.send(), s.send_cpu(), s.close, s.hash);
      },
      [&] {
        print("(m) mirror: curl -o /dev/null",
              m.emplace_back(mirror_ceiling(b, firsts.emplace_back())));
        std::printf("  %-34s %6.2f s\n", "(m) of which time to first byte", firsts.back());
      },
    };
    for (int r = 0; r < runs; ++r) {
      std::printf("\n[run %d/%d] load average %s\n", r + 1, runs, load_average().c_str());
      for (size_t i = 0; i < steps.size(); ++i) // each run starts with the next path
        steps[(i + static_cast<size_t>(r)) % steps.size()]();
    }

    auto ok_med = [](const std::vector<sample>& xs, auto f) {
      std::vector<double> v;
      for (auto& x : xs)
        if (x.error.empty())
          v.push_back(f(x));
      return median(v);
    };
    auto secs = [](const sample& x) { return x.seconds; };
    auto cpu = [](const sample& x) { return x.path_cpu; };
    double ta = ok_med(a, secs), tp = ok_med(p, secs), tm = ok_med(m, secs);
    std::vector<double> per_run;
    for (size_t i = 0; i < a.size() && i < p.size(); ++i)
      if (a[i].error.empty() && p[i].error.empty())
        per_run.push_back(a[i].seconds / p[i].seconds);
    auto rate = [&](double t) { return t > 0 ? mibf / t : 0; };
    std::printf("\n==== results: %llu MiB image, median of %d runs (order rotated) ====\n",
                static_cast<unsigned long long>(mibs), runs);
    std::printf("                                             time s    MiB/s   path CPU s\n");
    std::printf("  (a) engine: images::fill, SSH transport    %6.2f  %7.1f   %6.2f\n", ta,
                rate(ta), ok_med(a, cpu));
    std::printf("  (b) curl | tee sha256sum | virsh qemu+ssh  %6.2f  %7.1f   %6.2f\n", tp,
                rate(tp), ok_med(p, cpu));
    std::printf("      of which connect (virsh pool-list)     %6.2f\n", median(connects));
    std::printf("  (m) mirror ceiling: curl -o /dev/null      %6.2f  %7.1f   %6.2f\n", tm,
                rate(tm), ok_med(m, cpu));
    std::printf("      of which time to first byte            %6.2f\n", median(firsts));
    std::printf("  ratio time (a)/(b) = %.2f  (median of per-run ratios %.2f);"
                " (a) is %.2fx as fast as (b)\n",
                tp > 0 ? ta / tp : 0, median(per_run), ta > 0 ? tp / ta : 0);
    // Both paths wait the same for the test server's first byte (it copies
    // the body before sending); a real mirror would not make them wait.
    double fb = median(firsts);
    std::printf("  without the mirror's time to first byte (%.2f s) in both: (a) %.2f s,"
                " (b) %.2f s, ratio %.2f\n",
                fb, ta - fb, tp - fb, tp - fb > 0 ? (ta - fb) / (tp - fb) : 0);

    // The breakdown of the run whose total is the median (its parts add up
    // to its total), and beside it each part's median share over all runs.
    if (!c.empty()) {
      auto sorted = c;
      std::sort(sorted.begin(), sorted.end(),
                [](const shares& x, const shares& y) { return x.total < y.total; });
      const auto& md = sorted[(sorted.size() - 1) / 2];
      std::printf("\n==== where the engine path's time goes: (c), the median-total run of %zu"
                  " (%.2f s; (a)'s median %.2f s) ====\n",
                  c.size(), md.total, ta);
      std::printf("                                                       s    share"
                  "   median share\n");
      auto row = [&](const char* label, double (*f)(const shares&)) {
        std::vector<double> v;
        for (auto& x : c)
          v.push_back(100 * f(x) / x.total);
        std::printf("  %-48s %6.2f  %5.1f %%  %5.1f %%\n", label, f(md), 100 * f(md) / md.total,
                    median(v));
      };
      row("download (time in read() - sha256 pass)", [](const shares& x) { return x.download(); });
      row("  of it, first read() (connect, first byte)", [](const shares& x) { return x.first; });
      row("sha256 (separate pass over the same bytes)", [](const shares& x) { return x.hash; });
      row("upload (time in upload_volume - in read())", [](const shares& x) { return x.send(); });
      row("connect (dedicated_link::open: SSH + libvirt)",
          [](const shares& x) { return x.connect; });
      row("create the data volume", [](const shares& x) { return x.volumes; });
      row("close + rest", [](const shares& x) {
        return x.total - x.read - x.send() - x.connect - x.volumes;
      });
      std::printf("  fill thread CPU in read() %.2f s of %.2f s; in send %.2f s of %.2f s:"
                  " the rest of each is waiting (mirror; SSH pump and libvirtd)\n",
                  md.read_cpu, md.read, md.send_cpu(), md.send());
    }
    std::printf("\ntotal %.1f s\n", seconds_since(t0));
  } catch (const std::exception& e) {
    std::printf("bench-image: FAILED: %s\n", e.what());
    return 1;
  }
  return 0;
}
