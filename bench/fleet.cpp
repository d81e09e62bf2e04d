// bench/fleet: a cold fleet of real VMs on several hosts, from nothing to
// every proxy in the rotation, and where each host's time goes.
//
//   bench-fleet [--hosts H (1..8, default 8)] [--rounds R (default 2)]
//               [--disk-mib M (default 128; 0: none)] [--timeout S (per run, default 300)]
//               [--stage] [--disk-files F]
//                                                       (root; exit 77 otherwise)
//
// Test bed: H test::local_host (each a private libvirtd with the QEMU driver
// under TCG, a private sshd, an isolated dnsmasq network and a target page,
// all in a network namespace of its own) and one HTTP mirror of the
// appliance (scripts/appliance/build), shared by all hosts.
//
// Cold: before each run every host's pool is emptied (no image, no seed)
// and it has no domain, so the engine dials each host for the first time,
// downloads and verifies the appliance's kernel and initrd once per host
// and uploads them, and with --disk-mib the proxies' disk image too (a raw
// image of M MiB of random bytes, made by qemu-img and filled, served by a
// second mirror; each proxy gets a qcow2 overlay on it), writes a seed per
// proxy, defines and starts one proxy
// VM per host, finds its lease and probes it (HTTP, every 2 s, rise 2) as
// test::appliance_config sets it up. Nothing else runs.
//
// Against what a user would otherwise do: a script that, per host in
// parallel, runs one virsh process over the host's SSH (the OpenSSH client
// into the same sshd) doing "vol-create-as; vol-upload" of the kernel and the
// initrd (and the disk image, then an overlay on it: vol-create-as
// --backing-vol) from the files the mirrors serve, then the seed and the domain as
// bench/e2e's virsh side does ("vol-create-as; vol-upload; define; start"),
// then polls `virsh domifaddr --source lease` every 500 ms and fetches the
// target page through the proxy until it comes back. It neither downloads
// nor checks a digest: its images are local files already. The clock of
// both starts with nothing running.
//
// Printed per run and host: when its link was up, its images ready, its VM
// started, its address known, its proxy forwarding and (engine) in the
// rotation, and the guest's own boot time (uptime at its READY line); then
// the medians, and engine / script for "all forwarding". Figures only.
//
// --disk-files F: the disk image holds an ext4 file system with F MiB of
// random files (mke2fs -d), zeros elsewhere, as a real proxy disk would:
// the engine sends its zeros as holes (docs/spec.md 45) and the script
// uploads it with `vol-upload --sparse` (the file is sparse as mke2fs left
// it), the best a script does with it.
//
// --stage: each round runs the engine a second time, cold again, with
// engine.stage-dir (an empty directory): the appliance and the disk image
// are fetched and verified once for the node and uploaded from there to
// every host, instead of once per host.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include "base/ids.hpp"
#include "base/log.hpp"
#include "base/time_text.hpp"
#include "messages/error.hpp"
#include "providers/cloudinit/seed.hpp"
#include "providers/libvirt/domain_xml.hpp"
#include "providers/mirror/sha256.hpp"
#include "providers/provision/proxy_vm.hpp"
#include "runtime/engine.hpp"
#include "testbed/disk_images.hpp"
#include "testbed/local_host.hpp"
#include "testbed/testbed.hpp"

#include "vm_bench.hpp"
#include "proc_cpu.hpp"
#include "figures.hpp"

using namespace egress;
using egress::test::figures;
using egress::bench_cli::median;
using egress::bench_cli::parse_int;
using egress::bench_cli::script_domain;
using egress::bench_cli::seed_and_start_script;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr const char* entry = "fleet";

struct options {
  int hosts = 8;
  int rounds = 2;
  int timeout_s = 300;
  int disk_mib = 128;
  int disk_files_mib = 0; // > 0: the disk image is a file system with this much data
  bool stage = false;     // also the engine with engine.stage-dir
};

/// The proxies' raw disk image, served over HTTP like the appliance.
struct disk_image {
  std::string dir, file, sha256;
  uint64_t size = 0;
  bool sparse = false; // a file system: uploaded by the script with --sparse
};

std::string sha256_of_file(const std::string& path) {
  auto text = testbed::read_file(path);
  mirror::sha256 h;
  h.update(text);
  return h.hex();
}

disk_image make_disk(const std::string& dir, int mib, int files_mib) {
  disk_image d{dir, dir + "/data.raw", {}, uint64_t(mib) << 20, files_mib > 0};
  if (d.sparse) {
    test::make_ext4_file(d.file, d.size, static_cast<uint64_t>(files_mib));
    d.sha256 = sha256_of_file(d.file);
    return d;
  }
  auto made = testbed::run({"qemu-img", "create", "-q", "-f", "raw", d.file,
                            std::to_string(mib) + "M"},
                           60s);
  if (!made.ok())
    throw std::runtime_error("qemu-img create: " + made.output);
  auto filled = testbed::run({"dd", "if=/dev/urandom", "of=" + d.file, "bs=1M",
                              "count=" + std::to_string(mib), "conv=notrunc", "status=none"},
                             120s);
  if (!filled.ok())
    throw std::runtime_error("dd: " + filled.output);
  d.sha256 = sha256_of_file(d.file);
  return d;
}

double since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}



/// One host's times in a run, seconds from its start (< 0: not reached).
struct host_times {
  std::string host, proxy, address;
  double link_up = -1, images_ready = -1, started = -1, got_address = -1, forwarding = -1,
         rotation = -1, guest_boot = -1;
};

struct run_result {
  std::string label, error;
  std::vector<host_times> hosts;
  double all_forwarding = -1, all_rotation = -1, cpu_self = 0;
};

double cpu_self() {
  timespec t{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

class fleet_bench {
public:
  fleet_bench(const options& o, std::vector<std::unique_ptr<test::local_host>>& hosts,
              const test::appliance& app, test::file_mirror& mirror, caf::actor_system& sys,
              const disk_image* disk, const test::file_mirror* disk_mirror)
    : o_(o), hosts_(hosts), app_(app), mirror_(mirror), sys_(sys), disk_(disk),
      disk_mirror_(disk_mirror) {}

  /// The appliance config, with the disk image when there is one.
  engine_config config(const std::vector<const test::local_host*>& hs,
                       const std::vector<std::pair<std::string, std::string>>& proxies) const {
    auto cfg = test::appliance_config(entry, app_, mirror_, hs, proxies);
    if (!disk_)
      return cfg;
    image_config d = cfg.images.front();
    d.name = "data-disk";
    d.url = disk_mirror_->url("data.raw");
    d.sha256 = disk_->sha256;
    d.size = disk_->size;
    d.format = "raw";
    cfg.images.push_back(d);
    for (auto& p : cfg.proxies)
      p.image = "data-disk";
    return cfg;
  }

  // -- between runs -------------------------------------------------------------

  /// No domain and an empty pool on every host.
  void make_cold() {
    for (auto& h : hosts_) {
      auto doms = h->virsh({"list", "--all", "--name"});
      for (auto& d : lines(doms.output)) {
        h->virsh({"destroy", d});
        h->virsh({"undefine", d});
      }
      for (auto& v : volumes(*h))
        h->virsh({"vol-delete", "--pool", "egress", v});
      auto left = volumes(*h);
      for (auto& d : lines(h->virsh({"list", "--all", "--name"}).output))
        left.push_back(d);
      if (!left.empty())
        throw std::runtime_error(h->name() + " is not empty after cleaning: [" + left.front()
                                 + "]");
    }
  }

  // -- the engine ---------------------------------------------------------------

  /// `stage_dir`: the engine with engine.stage-dir there (emptied first).
  run_result engine_run(int round, const std::string& stage_dir = {}) {
    run_result res{stage_dir.empty() ? "engine" : "engine-copy", {}, {}, -1, -1, 0};
    std::vector<std::pair<std::string, std::string>> proxies;
    std::vector<const test::local_host*> hs;
    for (auto& h : hosts_) {
      hs.push_back(h.get());
      proxies.emplace_back("r" + std::to_string(round) + "-" + h->name(), h->name());
      res.hosts.push_back({h->name(), proxies.back().first, {}});
    }
    auto cfg = config(hs, proxies);
    if (!stage_dir.empty()) {
      std::filesystem::remove_all(stage_dir);
      cfg.stage_dir = stage_dir;
    }
    std::atomic<bool> stop{false};
    auto cpu0 = cpu_self();
    auto t0 = clock_type::now();
    auto eng = engine::start(sys_, cfg);
    if (!eng) {
      res.error = "engine::start: " + render(eng.error());
      return res;
    }
    std::vector<std::thread> fetchers;
    std::mutex mtx;
    for (size_t i = 0; i < hosts_.size(); ++i)
      fetchers.emplace_back([&, i] {
        auto& t = res.hosts[i];
        while (!stop) {
          std::string a;
          {
            std::lock_guard<std::mutex> guard{mtx};
            a = t.address;
          }
          if (!a.empty() && hosts_[i]->fetch_through(a, 2s).find("egress target") != std::string::npos) {
            t.forwarding = since(t0);
            return;
          }
          std::this_thread::sleep_for(a.empty() ? 20ms : 100ms);
        }
      });
    auto deadline = t0 + std::chrono::seconds(o_.timeout_s);
    fleet_status last;
    while (clock_type::now() < deadline) {
      if (auto st = eng->status()) {
        last = *st;
        observe(res, *st, since(t0), mtx);
        if (st->rotation.size() == hosts_.size() && res.all_rotation < 0)
          res.all_rotation = since(t0);
      }
      bool all_fwd = std::all_of(res.hosts.begin(), res.hosts.end(),
                                 [](auto& t) { return t.forwarding >= 0; });
      if (res.all_rotation >= 0 && all_fwd)
        break;
      std::this_thread::sleep_for(20ms);
    }
    stop = true;
    for (auto& f : fetchers)
      f.join();
    res.cpu_self = cpu_self() - cpu0;
    finish(res);
    if (res.all_rotation < 0 && res.error.empty()) {
      res.error = "timed out";
      for (auto& p : last.proxies)
        res.error += "\n    " + p.name + " " + to_string(p.phase) + " " + p.last_error;
      for (auto& i : last.images)
        res.error += "\n    image " + i.image + "@" + i.host + " " + to_string(i.state) + " "
                     + i.last_error;
    }
    if (auto err = eng->stop())
      std::printf("  (engine stop: %s)\n", render(err).c_str());
    return res;
  }

  // -- the script ---------------------------------------------------------------

  run_result script_run(int round, const std::string& work_dir) {
    run_result res{"script", {}, {}, -1, -1, 0};
    std::vector<std::thread> workers;
    std::mutex mtx;
    for (auto& h : hosts_)
      res.hosts.push_back({h->name(), "v" + std::to_string(round) + "-" + h->name(), {}});
    auto cpu0 = cpu_self();
    auto t0 = clock_type::now();
    for (size_t i = 0; i < hosts_.size(); ++i)
      workers.emplace_back([&, i] {
        try {
          one_host(res.hosts[i], *hosts_[i], work_dir, t0);
        } catch (const std::exception& e) {
          std::lock_guard<std::mutex> guard{mtx};
          res.error += "\n    " + hosts_[i]->name() + ": " + e.what();
        }
      });
    for (auto& w : workers)
      w.join();
    res.cpu_self = cpu_self() - cpu0;
    finish(res);
    return res;
  }

private:
  static std::vector<std::string> lines(const std::string& text) {
    std::vector<std::string> out;
    for (size_t at = 0; at < text.size();) {
      auto end = std::min(text.find('\n', at), text.size());
      auto line = text.substr(at, end - at);
      if (line.find_first_not_of(' ') != std::string::npos)
        out.push_back(line.substr(line.find_first_not_of(' ')));
      at = end + 1;
    }
    return out;
  }

  // The pool's volumes: `vol-list` has no --name in libvirt 9.0; its table's
  // first column, below the header and the dashes.
  static std::vector<std::string> volumes(test::local_host& h) {
    std::vector<std::string> out;
    auto rows = lines(h.virsh({"vol-list", "egress"}).output);
    for (size_t i = 2; i < rows.size(); ++i)
      out.push_back(rows[i].substr(0, rows[i].find(' ')));
    return out;
  }

  void observe(run_result& res, const fleet_status& st, double now, std::mutex& mtx) {
    for (auto& t : res.hosts) {
      for (auto& l : st.links)
        if (l.host == t.host && l.state == link_state::up && t.link_up < 0)
          t.link_up = now;
      bool any = false, all = true;
      for (auto& i : st.images)
        if (i.host == t.host) {
          any = true;
          all = all && i.state == image_state::ready;
        }
      if (any && all && t.images_ready < 0)
        t.images_ready = now;
      for (auto& p : st.proxies)
        if (p.name == t.proxy) {
          if (t.started < 0
              && (p.phase == proxy_phase::provisioning || p.phase == proxy_phase::running))
            t.started = now;
          if (t.got_address < 0 && !p.address.empty()) {
            t.got_address = now;
            std::lock_guard<std::mutex> guard{mtx};
            t.address = p.address;
          }
          if (t.rotation < 0 && p.in_rotation)
            t.rotation = now;
        }
    }
  }

  /// libvirt's own SSH transport with the OpenSSH client, into the host's
  /// sshd; the wrapper pins its known_hosts and reads no config or agent.
  static std::string openssh_uri(test::local_host& h, const std::string& work_dir) {
    auto wrapper = work_dir + "/sshwrap-" + h.name();
    testbed::write_file(wrapper,
                        "#!/bin/sh\nexec ssh -F /dev/null -o BatchMode=yes -o IdentitiesOnly=yes"
                        " -o IdentityAgent=none -o StrictHostKeyChecking=yes"
                        " -o GlobalKnownHostsFile=/dev/null -o UserKnownHostsFile="
                          + h.sshd().known_hosts() + " \"$@\"\n",
                        0755);
    return "qemu+ssh://root@" + h.sshd().address() + ":" + std::to_string(h.sshd().port())
           + "/system?keyfile=" + h.sshd().client_key() + "&no_verify=0&no_tty=1&command="
           + wrapper;
  }

  /// What the script does for one host: images, seed, domain, lease, fetch.
  void one_host(host_times& t, test::local_host& h, const std::string& work_dir,
                clock_type::time_point t0) {
    auto deadline = t0 + std::chrono::seconds(o_.timeout_s);
    auto uri = openssh_uri(h, work_dir);
    auto virsh = [&](const std::string& script, std::chrono::seconds limit) {
      return testbed::run({"virsh", "-q", "-c", uri, script}, limit);
    };
    auto pool_dir = h.pool_dir();
    auto kernel = "k-" + t.proxy, initrd = "i-" + t.proxy;
    auto upload = [&](const std::string& vol, const std::string& file, bool sparse = false) {
      auto size = std::to_string(std::filesystem::file_size(file));
      return "vol-create-as egress " + vol + " " + size + " --format raw; vol-upload --pool egress "
             + vol + " " + file + (sparse ? " --sparse" : "") + "; ";
    };
    auto cfg = config({&h}, {{t.proxy, h.name()}});
    auto& spec = cfg.proxies.front();
    auto& hc = cfg.hosts.front();
    auto ds = script_domain(spec, hc);
    ds.kernel = pool_dir + "/" + kernel;
    ds.initrd = pool_dir + "/" + initrd;
    ds.mark = {spec.name, now_rfc3339(), entry, std::string(64, '0'), {}, h.name(), {}, 0};
    ds.mark.uid = new_uid();
    auto script = upload(kernel, app_.dir + "/vmlinux") + upload(initrd, app_.dir + "/initrd.gz");
    if (disk_) {
      auto base = "d-" + t.proxy, overlay = "o-" + t.proxy;
      script += upload(base, disk_->file, disk_->sparse) + "vol-create-as egress " + overlay + " "
                + std::to_string(disk_->size) + " --format qcow2 --backing-vol " + base
                + " --backing-vol-format raw; ";
      ds.disk = pool_dir + "/" + overlay;
      ds.disk_format = "qcow2";
    }
    auto start = seed_and_start_script(ds, spec, entry, pool_dir, work_dir);
    auto r = virsh(script, 600s);
    if (!r.ok())
      throw std::runtime_error("virsh images: " + r.output);
    t.images_ready = since(t0);
    script = start;
    r = virsh(script, 120s);
    if (!r.ok())
      throw std::runtime_error("virsh start: " + r.output);
    t.started = since(t0);
    while (clock_type::now() < deadline && t.address.empty()) {
      auto l = h.virsh({"domifaddr", spec.name, "--source", "lease"});
      if (auto at = l.output.find("ipv4"); l.ok() && at != std::string::npos) {
        at = l.output.find_first_not_of(' ', at + 4);
        t.address = l.output.substr(at, l.output.find_first_of("/ \n", at) - at);
        t.got_address = since(t0);
        break;
      }
      std::this_thread::sleep_for(500ms);
    }
    while (!t.address.empty() && clock_type::now() < deadline && t.forwarding < 0) {
      if (h.fetch_through(t.address, 2s).find("egress target") != std::string::npos)
        t.forwarding = since(t0);
      else
        std::this_thread::sleep_for(100ms);
    }
  }

  void finish(run_result& res) {
    double f = 0;
    bool all = true;
    for (auto& t : res.hosts) {
      auto& h = *std::find_if(hosts_.begin(), hosts_.end(),
                              [&](auto& x) { return x->name() == t.host; });
      auto text = testbed::read_file(h->console_log(t.proxy));
      if (auto at = text.find("EGRESS READY"); at != std::string::npos)
        if (auto u = text.find("uptime=", at); u != std::string::npos)
          t.guest_boot = std::atof(text.c_str() + u + 7);
      all = all && t.forwarding >= 0;
      f = std::max(f, t.forwarding);
    }
    if (all)
      res.all_forwarding = f;
    else if (res.error.empty())
      res.error = "not every proxy forwarded";
  }

  const options& o_;
  std::vector<std::unique_ptr<test::local_host>>& hosts_;
  const test::appliance& app_;
  test::file_mirror& mirror_;
  caf::actor_system& sys_;
  const disk_image* disk_;
  const test::file_mirror* disk_mirror_;
};

void print_run(const run_result& r) {
  std::printf("  %-6s all forwarding %6.2f s", r.label.c_str(), r.all_forwarding);
  if (r.all_rotation >= 0)
    std::printf(", all in rotation %6.2f s", r.all_rotation);
  std::printf("; CPU of this process %.1f s\n", r.cpu_self);
  if (!r.error.empty())
    std::printf("  %-6s FAILED: %s\n", r.label.c_str(), r.error.c_str());
  std::printf("           host  link up  images  started  address  forwarding  rotation"
              "  guest boot\n");
  for (auto& t : r.hosts)
    std::printf("  %14s  %7.2f  %6.2f  %7.2f  %7.2f  %10.2f  %8.2f  %10.2f\n", t.host.c_str(),
                t.link_up, t.images_ready, t.started, t.got_address, t.forwarding, t.rotation,
                t.guest_boot);
}

void record(figures& csv, int round, const run_result& r) {
  for (auto& t : r.hosts)
    csv.row({std::to_string(round), r.label, t.host, figures::cell(t.link_up),
             figures::cell(t.images_ready), figures::cell(t.started),
             figures::cell(t.got_address), figures::cell(t.forwarding),
             figures::cell(t.rotation), figures::cell(t.guest_boot)});
}


} // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    const char* next = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--hosts")
      o.hosts = parse_int("--hosts", next, 1, 8);
    else if (a == "--rounds")
      o.rounds = parse_int("--rounds", next, 1, 20);
    else if (a == "--disk-mib")
      o.disk_mib = parse_int("--disk-mib", next, 0, 4096);
    else if (a == "--disk-files")
      o.disk_files_mib = parse_int("--disk-files", next, 1, 4096);
    else if (a == "--timeout")
      o.timeout_s = parse_int("--timeout", next, 30, 1800);
    else if (a == "--stage") {
      o.stage = true;
      continue;
    } else {
      std::fprintf(stderr, "usage: bench-fleet [--hosts H (1..8)] [--rounds R] [--disk-mib M]"
                           " [--timeout S] [--stage] [--disk-files F]\n");
      return 2;
    }
    ++i;
  }
  if (o.disk_files_mib > 0 && o.disk_files_mib + 16 > o.disk_mib) {
    std::fprintf(stderr, "bench-fleet: --disk-files takes at most --disk-mib less 16 (the file"
                         " system's own blocks)\n");
    return 2;
  }
  testbed::require_root_or_skip();
  if (auto why = test::local_host::cannot_run(); !why.empty())
    testbed::skip(why);
  std::string why;
  auto app = test::appliance::load(test::appliance::default_dir(), &why);
  if (!app.ok())
    testbed::skip(why);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  log::set_level(log::level::error);
  try {
    auto t_setup = clock_type::now();
    test::file_mirror mirror{app.dir};
    std::vector<std::unique_ptr<test::local_host>> hosts;
    for (int i = 1; i <= o.hosts; ++i)
      hosts.push_back(std::make_unique<test::local_host>(
        test::local_host_options{"hv" + std::to_string(i), 7, 0}));
    testbed::temp_dir work{"fleet-bench"};
    testbed::temp_dir disk_dir{"fleet-disk"};
    std::optional<disk_image> disk;
    std::optional<test::file_mirror> disk_mirror;
    if (o.disk_mib > 0) {
      disk = make_disk(disk_dir.path(), o.disk_mib, o.disk_files_mib);
      disk_mirror.emplace(disk_dir.path());
    }
    caf::actor_system_config cfg;
    cfg.set("logger.file-verbosity", caf::atom("quiet"));
    configure(cfg);
    caf::actor_system sys{cfg};
    fleet_bench b{o, hosts, app, mirror, sys, disk ? &*disk : nullptr,
                  disk_mirror ? &*disk_mirror : nullptr};
    std::printf("bench-fleet: a cold fleet of %d hosts, one appliance VM each (1 vCPU, 128 MiB,"
                " QEMU/TCG; kernel %.1f MiB, initrd %.1f MiB, raw disk image %d MiB per host%s);"
                " %ld cores; setup %.1f s\n",
                o.hosts, app.kernel_size / 1048576.0, app.initrd_size / 1048576.0, o.disk_mib,
                o.disk_files_mib > 0
                  ? (", ext4 with " + std::to_string(o.disk_files_mib) + " MiB of files").c_str()
                  : "",
                ::sysconf(_SC_NPROCESSORS_ONLN), since(t_setup));
    figures csv{"round", "run", "host", "link_up_s", "images_s", "started_s", "address_s",
                "forwarding_s", "rotation_s", "guest_boot_s"};
    std::vector<double> eng, scr, rot, staged;
    for (int k = 0; k < o.rounds; ++k) {
      std::printf("\n[round %d/%d] load %s\n", k + 1, o.rounds, procfs::load_average().c_str());
      run_result er, sr, xr;
      auto do_engine = [&] {
        b.make_cold();
        er = b.engine_run(k);
        print_run(er);
        record(csv, k + 1, er);
        if (!o.stage)
          return;
        b.make_cold();
        xr = b.engine_run(k, work.path() + "/stage");
        print_run(xr);
        record(csv, k + 1, xr);
        if (xr.all_forwarding > 0)
          staged.push_back(xr.all_forwarding);
      };
      auto do_script = [&] {
        b.make_cold();
        sr = b.script_run(k, work.path());
        print_run(sr);
        record(csv, k + 1, sr);
      };
      if (k % 2 == 0) {
        do_engine();
        do_script();
      } else {
        do_script();
        do_engine();
      }
      if (er.all_forwarding > 0 && sr.all_forwarding > 0) {
        eng.push_back(er.all_forwarding);
        scr.push_back(sr.all_forwarding);
        rot.push_back(er.all_rotation);
      }
    }
    b.make_cold();
    if (eng.empty())
      return 1;
    std::printf("\nsummary over %zu round(s), %d hosts, medians: engine all forwarding %.2f s,"
                " all in rotation %.2f s; script all forwarding %.2f s;"
                " engine / script = %.2f (forwarding)\n",
                eng.size(), o.hosts, median(eng), median(rot), median(scr),
                median(eng) / median(scr));
    if (!staged.empty())
      std::printf("with engine.stage-dir (the mirror read once, not once per host): all"
                  " forwarding %.2f s; / the engine without %.2f; / script %.2f\n",
                  median(staged), median(staged) / median(eng), median(staged) / median(scr));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench-fleet: %s\n", e.what());
    return 1;
  }
}
