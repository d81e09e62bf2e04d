// bench/e2e: real VMs, from nothing running to "all N proxies forward HTTP",
// the engine against a plain virsh script, side by side in one run.
//
//   bench-e2e [--proxies N] [--rounds R] [--lease-poll-ms MS] [--timeout S] [--no-stealing]
//                                                      (root; exit 77 otherwise)
//
// Test bed: one test::local_host (a private libvirtd with the QEMU driver
// under TCG, a private sshd in front of it, an isolated libvirt network with
// dnsmasq, a dir pool "egress" and a target page on the bridge, all inside a
// network namespace) and a local HTTP mirror of the appliance
// (scripts/appliance/build; $EGRESS_APPLIANCE_DIR or <dir of this binary>/
// appliance).
//
// Warm-up (not measured): an engine run with N proxies (warm-1..) downloads,
// verifies and uploads the appliance's kernel and initrd into the host's pool,
// and boots them; then it is stopped and its VMs are destroyed, undefined and
// their seed volumes deleted. From then on the images are in place and every
// measured run creates its VMs anew (fresh names per run), so both sides do
// the same work: a seed volume and a domain per proxy, booted from the same
// kernel and initrd volumes.
//
// Each round also runs the engine in a second actor system on CAF's default
// work-stealing scheduler (--no-stealing skips it), which configure()
// replaces by work sharing: the summary prints both engines' times and
// their process CPU side by side.
//
// R rounds (default 2), each one engine run and one virsh run, the order
// alternating per round (engine first in even rounds). Between runs every
// domain is destroyed and undefined and its seed volume deleted (the count of
// domains is checked to be 0), so each run starts with an idle host.
//
//  engine  egress::engine::start with test::appliance_config (entry "bench",
//          N proxies run-<round>-<i>, gc on, poll interval 500 ms, HTTP probes
//          every 2 s with rise 2: as the e2e suite runs it). The clock starts
//          just before engine::start. The bench asks status() every 20 ms and
//          records when each proxy first shows an address, when it is in the
//          rotation, and when rotation.size() == N ("rotation"). Independently,
//          as soon as a proxy shows an address, a thread of the bench fetches
//          the target page through it from inside the host's namespace until
//          the page comes back ("forwarding": the last proxy's first good
//          fetch).
//  virsh   what a plain script does with the images already in place: for
//          each proxy, in parallel, the seed ISO is built (the engine's own
//          writer, cloudinit::render_seed + build_seed_iso, in process) and
//          the domain XML (lv::build_domain_xml with the domain_spec the
//          engine would build: same kernel, initrd, cmdline, network, memory,
//          vCPUs, console log and a mark), then ONE virsh process per proxy
//          runs "vol-create-as; vol-upload; define; start" (all N virsh
//          processes at once), then polls `virsh domifaddr --source lease`
//          every --lease-poll-ms (default: the engine's poll interval, 500 ms)
//          until an address shows, then fetches through it exactly as above.
//          The clock starts before the first seed is built (so it includes
//          that and the seed upload, as the engine's does).
//
// Fetching: python3 urllib with a ProxyHandler run through
// `ip netns exec <ns>` (tests/e2e/real_proxies.cpp's fetch_through), 2 s
// timeout, 100 ms between attempts; identical for both sides. The fetch
// attempts cost some CPU on this machine while VMs boot under TCG; they cost
// the same on both sides.
//
// Output: per run the time to all VMs started, to all addresses, to all
// forwarding, (engine) to all in rotation, and per proxy the same plus the
// guest's own uptime at its "EGRESS READY" console line (its boot time: a
// guest that boots slower was short of CPU); for the engine also when its
// host link was up and its images ready (found verified). CPU: user + system
// of this process over the run (the engine's threads and the fetch threads;
// libvirtd, sshd and QEMU are not in it) and of the processes it waited for
// (virsh, the python fetches). Each run's line shows the load average and
// how many QEMU processes were running on the machine as it started (none of
// them the bench's own: other VMs competing for the 2 cores make figures
// noisy). Then medians, the engine overhead (engine - virsh, seconds) and the
// ratio engine / virsh, for "forwarding" (the like-for-like figure) and for
// "rotation" (what a client of the engine waits for: it includes the probes'
// rise, 2 passes 2 s apart). --verbose: the engine's info log and each run's
// first domain XML (to compare the two sides' domains). Figures only.

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <dirent.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <unistd.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include "actors/proxy.hpp"
#include "base/ids.hpp"
#include "base/log.hpp"
#include "base/time_text.hpp"
#include "messages/error.hpp"
#include "providers/cloudinit/seed.hpp"
#include "providers/images/volume_names.hpp"
#include "providers/libvirt/domain_xml.hpp"
#include "providers/provision/proxy_vm.hpp"
#include "runtime/engine.hpp"
#include "testbed/local_host.hpp"
#include "testbed/testbed.hpp"

#include "vm_bench.hpp"
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

constexpr const char* entry = "bench";

struct options {
  int proxies = 3;
  int rounds = 2;
  int lease_poll_ms = 0; // 0: the engine's poll interval
  int timeout_s = 180;   // per run
  bool verbose = false;
  bool stealing_too = true; // also an engine on CAF's work-stealing scheduler
};

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}


/// The load average and how many QEMU processes run on this machine (when
/// a run starts, none of them is this bench's: other VMs compete for CPU).
std::string load_average() {
  auto text = testbed::read_file("/proc/loadavg");
  auto out = text.substr(0, text.find(' ', text.find(' ', text.find(' ') + 1) + 1));
  int qemus = 0;
  if (DIR* d = ::opendir("/proc")) {
    while (auto* e = ::readdir(d))
      if (std::isdigit(static_cast<unsigned char>(e->d_name[0]))
          && testbed::read_file(std::string("/proc/") + e->d_name + "/comm").rfind("qemu-system", 0)
               == 0)
        ++qemus;
    ::closedir(d);
  }
  return out + ", QEMU processes running: " + std::to_string(qemus);
}

struct cpu_mark {
  double self = 0, children = 0;
  static double secs(const timeval& tv) { return tv.tv_sec + tv.tv_usec / 1e6; }
  static cpu_mark now() {
    rusage s{}, c{};
    ::getrusage(RUSAGE_SELF, &s);
    ::getrusage(RUSAGE_CHILDREN, &c);
    return {secs(s.ru_utime) + secs(s.ru_stime), secs(c.ru_utime) + secs(c.ru_stime)};
  }
};

/// One proxy's times (seconds since the run's start; < 0: not reached).
struct proxy_times {
  std::string name;
  double creating = -1; // engine: phase creating first seen
  double started = -1;  // engine: provisioning or running first seen; virsh: `start` returned
  double address = -1;
  double rotation = -1;
  double forwarding = -1;
  std::string addr;
  int fetches = 0; // attempts until the first good one
  double guest_ready = -1; // the guest's uptime at its "EGRESS READY" console line
};

struct run_result {
  std::string label;
  bool ok = false;
  std::string error;
  double all_address = -1;
  double all_rotation = -1; // engine only
  double all_forwarding = -1;
  double all_started = -1;  // every VM started (see proxy_times::started)
  double link_up = -1;      // engine: the host link first up
  double images_ready = -1; // engine: every image entry ready
  double cpu_self = 0;      // this process (engine threads, fetch threads), s
  double cpu_children = 0;  // processes it ran and waited for (virsh, python fetches), s
  std::vector<proxy_times> proxies;
};

class bench {
public:
  bench(const options& o, test::local_host& host, const test::appliance& app,
        test::file_mirror& mirror, caf::actor_system& sys)
    : o_(o), host_(host), app_(app), mirror_(mirror), sys_(sys) {}

  engine_config config(const std::vector<std::string>& names) const {
    std::vector<std::pair<std::string, std::string>> proxies;
    for (auto& n : names)
      proxies.emplace_back(n, host_.name());
    return test::appliance_config(entry, app_, mirror_, {&host_}, proxies);
  }

  static std::vector<std::string> names(const std::string& prefix, int n) {
    std::vector<std::string> out;
    for (int i = 1; i <= n; ++i)
      out.push_back(prefix + "-" + std::to_string(i));
    return out;
  }

  /// True if the target page came back through the proxy at `address`.
  bool fetch_through(const std::string& address) const {
    return host_.fetch_through(address, 2s).find("egress target") != std::string::npos;
  }

  /// Fetches through `address` until it works or `stop` is set; records the
  /// time of the first good fetch.
  void fetch_until_ok(proxy_times& p, const std::string& address, clock_type::time_point t0,
                      const std::atomic<bool>& stop) const {
    while (!stop) {
      ++p.fetches;
      if (fetch_through(address)) {
        p.forwarding = seconds_since(t0);
        return;
      }
      std::this_thread::sleep_for(100ms);
    }
  }

  static run_result fresh_result(const std::string& label,
                                 const std::vector<std::string>& proxy_names) {
    run_result res;
    res.label = label;
    for (auto& n : proxy_names) {
      res.proxies.emplace_back();
      res.proxies.back().name = n;
    }
    return res;
  }

  // -- the engine -------------------------------------------------------------

  run_result engine_run(const std::string& label, const std::vector<std::string>& proxy_names) {
    auto res = fresh_result(label, proxy_names);
    const size_t n = proxy_names.size();
    auto cfg = config(proxy_names);
    if (auto err = validate(cfg)) {
      res.error = "config: " + render(err);
      return res;
    }
    std::mutex mtx;
    std::map<std::string, std::string> addresses; // name -> address, once known
    std::atomic<bool> stop{false};
    auto cpu0 = cpu_mark::now();
    auto t0 = clock_type::now();
    auto eng = engine::start(sys_, cfg);
    if (!eng) {
      res.error = "engine::start: " + render(eng.error());
      return res;
    }
    std::vector<std::thread> fetchers;
    for (size_t i = 0; i < n; ++i)
      fetchers.emplace_back([&, i] {
        auto& p = res.proxies[i];
        std::string address;
        while (!stop && address.empty()) {
          {
            std::lock_guard<std::mutex> guard{mtx};
            if (auto it = addresses.find(p.name); it != addresses.end())
              address = it->second;
          }
          if (address.empty())
            std::this_thread::sleep_for(20ms);
        }
        if (!address.empty())
          fetch_until_ok(p, address, t0, stop);
      });
    auto deadline = t0 + std::chrono::seconds(o_.timeout_s);
    fleet_status last;
    auto forwarding_done = [&] {
      return std::all_of(res.proxies.begin(), res.proxies.end(),
                         [](const proxy_times& p) { return p.forwarding >= 0; });
    };
    while (clock_type::now() < deadline) {
      if (auto st = eng->status(); st) {
        last = *st;
        double now = seconds_since(t0);
        if (res.link_up < 0 && !st->links.empty() && st->links.front().state == link_state::up)
          res.link_up = now;
        if (res.images_ready < 0 && !st->images.empty()
            && std::all_of(st->images.begin(), st->images.end(),
                           [](auto& i) { return i.state == image_state::ready; }))
          res.images_ready = now;
        for (auto& ps : st->proxies)
          for (auto& p : res.proxies)
            if (p.name == ps.name) {
              if (p.creating < 0 && ps.phase == proxy_phase::creating)
                p.creating = now;
              if (p.started < 0
                  && (ps.phase == proxy_phase::provisioning || ps.phase == proxy_phase::running))
                p.started = now;
              if (p.address < 0 && !ps.address.empty()) {
                p.address = now;
                p.addr = ps.address;
                std::lock_guard<std::mutex> guard{mtx};
                addresses[p.name] = ps.address;
              }
              if (p.rotation < 0 && ps.in_rotation)
                p.rotation = now;
            }
        if (res.all_rotation < 0 && st->rotation.size() == n)
          res.all_rotation = now;
      }
      if (res.all_rotation >= 0 && forwarding_done())
        break;
      std::this_thread::sleep_for(20ms);
    }
    stop = true;
    for (auto& t : fetchers)
      t.join();
    finish(res, cpu0);
    if (!res.ok) {
      res.error = "timed out after " + std::to_string(o_.timeout_s) + " s";
      for (auto& ps : last.proxies)
        res.error += "\n    " + ps.name + " " + to_string(ps.phase) + " " + ps.address
                     + " rotation=" + (ps.in_rotation ? "yes" : "no") + " probe=" + ps.last_probe
                     + " error=" + ps.last_error;
      for (auto& i : last.images)
        res.error += "\n    image " + i.image + " " + to_string(i.state) + " " + i.last_error;
    }
    if (auto err = eng->stop())
      std::printf("  (engine stop: %s)\n", render(err).c_str());
    return res;
  }

  // -- the virsh baseline -----------------------------------------------------

  /// Paths of the appliance volumes the warm-up uploaded into the pool.
  void find_image_paths() {
    auto path_of = [&](const std::string& image, const std::string& sha) {
      auto vol = images::volume_names::of(entry, image, sha).data;
      auto r = host_.virsh({"vol-path", "--pool", "egress", vol});
      if (!r.ok())
        throw std::runtime_error("virsh vol-path " + vol + ": " + r.output);
      auto path = r.output.substr(0, r.output.find('\n'));
      return path;
    };
    kernel_path_ = path_of("appliance-kernel", app_.kernel_sha256);
    initrd_path_ = path_of("appliance-initrd", app_.initrd_sha256);
  }
  const std::string& kernel_path() const { return kernel_path_; }
  const std::string& initrd_path() const { return initrd_path_; }

  /// The address `virsh domifaddr --source lease` shows for `name`, or "".
  std::string lease_of(const std::string& name) const {
    auto r = host_.virsh({"domifaddr", name, "--source", "lease"});
    if (!r.ok())
      return "";
    auto at = r.output.find("ipv4");
    if (at == std::string::npos)
      return "";
    at = r.output.find_first_not_of(' ', at + 4);
    if (at == std::string::npos)
      return "";
    auto end = r.output.find_first_of("/ \n", at);
    return r.output.substr(at, end - at);
  }

  run_result virsh_run(const std::string& label, const std::vector<std::string>& proxy_names,
                       const std::string& work_dir) {
    auto res = fresh_result(label, proxy_names);
    const size_t n = proxy_names.size();
    auto cfg = config(proxy_names);
    const auto& hc = cfg.hosts.front();
    const auto lease_poll = std::chrono::milliseconds(
      o_.lease_poll_ms > 0 ? o_.lease_poll_ms
                           : std::chrono::duration_cast<std::chrono::milliseconds>(
                               cfg.poll_interval).count());
    std::mutex mtx;
    std::vector<std::string> errors;
    auto cpu0 = cpu_mark::now();
    auto t0 = clock_type::now();
    auto deadline = t0 + std::chrono::seconds(o_.timeout_s);
    std::vector<std::thread> workers;
    auto work = [&](size_t i) {
      auto& p = res.proxies[i];
      auto fail = [&](const std::string& what) {
        std::lock_guard<std::mutex> guard{mtx};
        errors.push_back(p.name + ": " + what);
      };
      const auto& spec = cfg.proxies[i];
      // The domain the engine's proxy actor would create (actors/proxy.cpp).
      auto ds = script_domain(spec, hc);
      ds.kernel = kernel_path_;
      ds.initrd = initrd_path_;
      ds.mark.uid = new_uid();
      ds.mark.created_at = now_rfc3339();
      ds.mark.entry = entry;
      ds.mark.spec_hash = spec_hash(spec, hc.domain_type, "", app_.kernel_sha256,
                                    app_.initrd_sha256);
      ds.mark.host = spec.host;
      ds.mark.tags = spec.tags;
      auto script = seed_and_start_script(ds, spec, entry, pool_dir_, work_dir);
      auto r = host_.libvirtd().virsh({script}, 120s);
      if (!r.ok())
        return fail("virsh " + script + ": " + r.output);
      p.started = seconds_since(t0);
      std::string address;
      while (clock_type::now() < deadline) {
        address = lease_of(spec.name);
        if (!address.empty())
          break;
        std::this_thread::sleep_for(lease_poll);
      }
      if (address.empty())
        return;
      p.address = seconds_since(t0);
      p.addr = address;
      while (clock_type::now() < deadline && p.forwarding < 0) {
        ++p.fetches;
        if (fetch_through(address))
          p.forwarding = seconds_since(t0);
        else
          std::this_thread::sleep_for(100ms);
      }
    };
    for (size_t i = 0; i < n; ++i)
      workers.emplace_back([&, i] {
        try {
          work(i);
        } catch (const std::exception& e) {
          std::lock_guard<std::mutex> guard{mtx};
          errors.push_back(res.proxies[i].name + ": " + e.what());
        }
      });
    for (auto& t : workers)
      t.join();
    finish(res, cpu0);
    if (!res.ok) {
      res.error = errors.empty() ? "timed out after " + std::to_string(o_.timeout_s) + " s" : "";
      for (auto& e : errors)
        res.error += "\n    " + e;
    }
    return res;
  }

  void set_pool_dir() {
    auto r = host_.virsh({"pool-dumpxml", "egress"});
    auto at = r.output.find("<path>");
    auto end = r.output.find("</path>");
    if (!r.ok() || at == std::string::npos || end == std::string::npos)
      throw std::runtime_error("virsh pool-dumpxml egress: " + r.output);
    pool_dir_ = r.output.substr(at + 6, end - at - 6);
  }

  // -- between runs -----------------------------------------------------------

  /// Destroys and undefines every domain on the host and deletes the seed
  /// volumes of `proxy_names`; throws if a domain is left.
  void clean(const std::vector<std::string>& proxy_names) const {
    auto list = host_.virsh({"list", "--all", "--name"});
    std::vector<std::string> domains;
    for (size_t at = 0; at < list.output.size();) {
      auto end = list.output.find('\n', at);
      if (end == std::string::npos)
        end = list.output.size();
      auto line = list.output.substr(at, end - at);
      if (!line.empty())
        domains.push_back(line);
      at = end + 1;
    }
    for (auto& d : domains) {
      host_.virsh({"destroy", d});
      host_.virsh({"undefine", d});
    }
    for (auto& n : proxy_names)
      host_.virsh({"vol-delete", "--pool", "egress", provision::proxy_volumes::of(entry, n).seed});
    auto after = host_.virsh({"list", "--all", "--name"});
    if (after.output.find_first_not_of(" \n") != std::string::npos)
      throw std::runtime_error("domains left after cleaning: " + after.output);
  }

private:
  /// The guest's uptime when it printed its READY line (its own boot time).
  double guest_ready(const std::string& proxy) const {
    auto text = testbed::read_file(host_.console_log(proxy));
    auto at = text.find("EGRESS READY");
    if (at == std::string::npos)
      return -1;
    auto line = text.substr(at, text.find('\n', at) - at);
    auto u = line.find("uptime=");
    return u == std::string::npos ? -1 : std::atof(line.c_str() + u + 7);
  }

  void finish(run_result& res, const cpu_mark& cpu0) const {
    auto cpu1 = cpu_mark::now();
    res.cpu_self = cpu1.self - cpu0.self;
    res.cpu_children = cpu1.children - cpu0.children;
    for (auto& p : res.proxies)
      p.guest_ready = guest_ready(p.name);
    res.ok = true;
    double a = 0, f = 0, st = 0;
    bool all_started = true;
    for (auto& p : res.proxies) {
      if (p.started < 0)
        all_started = false;
      st = std::max(st, p.started);
      if (p.address < 0 || p.forwarding < 0)
        res.ok = false;
      a = std::max(a, p.address);
      f = std::max(f, p.forwarding);
    }
    if (all_started)
      res.all_started = st;
    if (res.ok) {
      res.all_address = a;
      res.all_forwarding = f;
    }
    if (res.label == "engine" && res.all_rotation < 0)
      res.ok = false;
  }

  const options& o_;
  test::local_host& host_;
  const test::appliance& app_;
  test::file_mirror& mirror_;
  caf::actor_system& sys_;
  std::string kernel_path_, initrd_path_, pool_dir_;
};

// One row per proxy of a run: when it started, had an address, forwarded and
// (engine runs) entered the rotation, in seconds from the run's start.
void record_run(figures& csv, int round, const run_result& r) {
  for (size_t i = 0; i < r.proxies.size(); ++i) {
    auto& p = r.proxies[i];
    csv.row({std::to_string(round), figures::cell(r.label), std::to_string(i + 1),
             figures::cell(p.started), figures::cell(p.address), figures::cell(p.forwarding),
             figures::cell(p.rotation)});
  }
}

void print_run(const run_result& r) {
  if (!r.ok) {
    std::printf("  %-6s FAILED: %s\n", r.label.c_str(), r.error.c_str());
    return;
  }
  std::printf("  %-6s all forwarding %6.2f s  (all addresses %6.2f s", r.label.c_str(),
              r.all_forwarding, r.all_address);
  if (r.all_rotation >= 0)
    std::printf(", all in rotation %6.2f s", r.all_rotation);
  if (r.all_started >= 0)
    std::printf(", all started %6.2f s", r.all_started);
  std::printf(")\n");
  std::printf("           ");
  if (r.link_up >= 0 || r.images_ready >= 0)
    std::printf("link up %.2f s, images ready %.2f s; ", r.link_up, r.images_ready);
  std::printf("CPU: this process %.2f s, its children (virsh, fetches) %.2f s\n", r.cpu_self,
              r.cpu_children);
  for (auto& p : r.proxies) {
    std::printf("           %-12s %-15s", p.name.c_str(), p.addr.c_str());
    if (p.creating >= 0)
      std::printf(" creating %6.2f ", p.creating);
    std::printf(" started %6.2f  address %6.2f  forwarding %6.2f (%d fetches)", p.started,
                p.address, p.forwarding, p.fetches);
    if (p.rotation >= 0)
      std::printf("  rotation %6.2f", p.rotation);
    if (p.guest_ready >= 0)
      std::printf("  [guest READY at uptime %.2f]", p.guest_ready);
    std::printf("\n");
  }
}


} // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    const char* next = i + 1 < argc ? argv[i + 1] : nullptr;
    if (a == "--proxies") {
      o.proxies = parse_int("--proxies", next, 1, 4);
      ++i;
    } else if (a == "--no-stealing") {
      o.stealing_too = false;
    } else if (a == "--rounds") {
      o.rounds = parse_int("--rounds", next, 1, 20);
      ++i;
    } else if (a == "--lease-poll-ms") {
      o.lease_poll_ms = parse_int("--lease-poll-ms", next, 10, 10000);
      ++i;
    } else if (a == "--timeout") {
      o.timeout_s = parse_int("--timeout", next, 10, 1800);
      ++i;
    } else if (a == "--verbose") {
      o.verbose = true;
    } else {
      std::fprintf(stderr,
                   "usage: bench-e2e [--proxies N (1..4, default 3)] [--rounds R (default 2)]\n"
                   "                 [--lease-poll-ms MS (default: the engine's poll interval)]\n"
                   "                 [--timeout S (per run, default 180)] [--verbose]\n");
      return 2;
    }
  }
  testbed::require_root_or_skip(); // namespaces and tools; reaps stale leftovers
  if (auto why = test::local_host::cannot_run(); !why.empty())
    testbed::skip(why);
  std::string why;
  auto app = test::appliance::load(test::appliance::default_dir(), &why);
  if (!app.ok())
    testbed::skip(why);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  log::set_level(o.verbose ? log::level::info : log::level::error);

  try {
    auto t_setup = clock_type::now();
    test::file_mirror mirror{app.dir};
    test::local_host host;
    testbed::temp_dir work{"e2e-bench"};
    caf::actor_system_config cfg;
    cfg.set("logger.file-verbosity", caf::atom("quiet"));
    configure(cfg);
    caf::actor_system sys{cfg};
    bench b{o, host, app, mirror, sys};
    b.set_pool_dir();
    // The same engine on CAF's default scheduler (work stealing), which
    // runtime/engine.cpp's configure() replaces: its idle workers poll.
    caf::actor_system_config cfg_stealing;
    cfg_stealing.set("logger.file-verbosity", caf::atom("quiet"));
    configure(cfg_stealing);
    cfg_stealing.set("scheduler.policy", caf::atom("stealing"));
    caf::actor_system sys_stealing{cfg_stealing};
    bench bs{o, host, app, mirror, sys_stealing};
    bs.set_pool_dir();
    std::printf("bench-e2e: %d proxies (appliance, 1 vCPU, 128 MiB, QEMU/TCG) on one local host;"
                " %d round(s); %ld cores; setup %.1f s\n",
                o.proxies, o.rounds, ::sysconf(_SC_NPROCESSORS_ONLN), seconds_since(t_setup));
    std::printf("  appliance %s\n", app.dir.c_str());

    // Warm-up: the images go into the pool; its VMs are then removed.
    std::printf("\n[warm-up] engine run (downloads and uploads the appliance), load %s\n",
                load_average().c_str());
    auto warm_names = bench::names("warm", o.proxies);
    auto warm = b.engine_run("engine", warm_names);
    print_run(warm);
    if (!warm.ok)
      return 1;
    b.clean(warm_names);
    b.find_image_paths();
    bs.find_image_paths();
    auto ecfg = b.config(warm_names);
    std::printf("  images in place: %s, %s\n", b.kernel_path().c_str(), b.initrd_path().c_str());
    std::printf("  engine: poll interval %lld ms, probes %s every %lld ms, rise %u; virsh lease"
                " poll %d ms\n",
                static_cast<long long>(
                  std::chrono::duration_cast<std::chrono::milliseconds>(ecfg.poll_interval).count()),
                ecfg.probe.mode.c_str(),
                static_cast<long long>(
                  std::chrono::duration_cast<std::chrono::milliseconds>(ecfg.probe.interval).count()),
                static_cast<unsigned>(ecfg.probe.rise),
                o.lease_poll_ms > 0
                  ? o.lease_poll_ms
                  : static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                       ecfg.poll_interval).count()));

    std::vector<double> eng_fwd, eng_rot, vir_fwd, diffs, steal_fwd, steal_cpu, share_cpu;
    figures csv{"round", "run", "proxy", "started_s", "address_s", "forwarding_s", "rotation_s"};
    bool failed = false;
    for (int k = 0; k < o.rounds; ++k) {
      std::printf("\n[round %d/%d]\n", k + 1, o.rounds);
      run_result er, vr;
      auto do_engine = [&] {
        auto names = bench::names("run-" + std::to_string(k), o.proxies);
        std::printf("  engine run, load %s\n", load_average().c_str());
        er = b.engine_run("engine", names);
        print_run(er);
        record_run(csv, k + 1, er);
        if (o.verbose)
          std::printf("%s\n", host.virsh({"dumpxml", names.front()}).output.c_str());
        b.clean(names);
      };
      auto do_virsh = [&] {
        auto names = bench::names("virsh-" + std::to_string(k), o.proxies);
        std::printf("  virsh run, load %s\n", load_average().c_str());
        vr = b.virsh_run("virsh", names, work.path());
        print_run(vr);
        record_run(csv, k + 1, vr);
        if (o.verbose)
          std::printf("%s\n", host.virsh({"dumpxml", names.front()}).output.c_str());
        b.clean(names);
      };
      run_result sr;
      auto do_stealing = [&] {
        if (!o.stealing_too)
          return;
        auto names = bench::names("steal-" + std::to_string(k), o.proxies);
        std::printf("  engine run on the work-stealing scheduler, load %s\n",
                    load_average().c_str());
        sr = bs.engine_run("engine/stealing", names);
        print_run(sr);
        record_run(csv, k + 1, sr);
        bs.clean(names);
      };
      if (k % 2 == 0) {
        do_engine();
        do_stealing();
        do_virsh();
      } else {
        do_virsh();
        do_stealing();
        do_engine();
      }
      if (o.stealing_too && sr.ok) {
        steal_fwd.push_back(sr.all_forwarding);
        steal_cpu.push_back(sr.cpu_self);
      }
      if (er.ok)
        share_cpu.push_back(er.cpu_self);
      if (!er.ok || !vr.ok) {
        failed = true;
        continue;
      }
      eng_fwd.push_back(er.all_forwarding);
      eng_rot.push_back(er.all_rotation);
      vir_fwd.push_back(vr.all_forwarding);
      diffs.push_back(er.all_forwarding - vr.all_forwarding);
      std::printf("  round %d: engine - virsh = %+.2f s (forwarding), ratio %.2f;"
                  " rotation - virsh forwarding = %+.2f s\n",
                  k + 1, er.all_forwarding - vr.all_forwarding,
                  er.all_forwarding / vr.all_forwarding, er.all_rotation - vr.all_forwarding);
    }

    if (!eng_fwd.empty()) {
      double ef = median(eng_fwd), er = median(eng_rot), vf = median(vir_fwd);
      std::printf("\nsummary over %zu round(s), %d proxies, medians:\n", eng_fwd.size(),
                  o.proxies);
      std::printf("  engine  all forwarding %6.2f s   all in rotation %6.2f s\n", ef, er);
      std::printf("  virsh   all forwarding %6.2f s\n", vf);
      std::printf("  engine overhead (forwarding): %+.2f s, ratio %.2f  (median of per-round"
                  " differences %+.2f s)\n",
                  ef - vf, ef / vf, median(diffs));
      std::printf("  engine overhead (rotation vs virsh forwarding): %+.2f s, ratio %.2f\n",
                  er - vf, er / vf);
      if (!steal_fwd.empty())
        std::printf("  engine on work stealing: all forwarding %6.2f s (overhead %+.2f s);"
                    " engine process CPU per run: sharing %.2f s, stealing %.2f s (ratio %.2f)\n",
                    median(steal_fwd), median(steal_fwd) - vf, median(share_cpu),
                    median(steal_cpu), median(steal_cpu) / std::max(0.01, median(share_cpu)));
      std::printf("  claimed goal: overhead <= 2 s -> forwarding %s, rotation %s\n",
                  ef - vf <= 2 ? "met" : "NOT met", er - vf <= 2 ? "met" : "NOT met");
    }
    return failed ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench-e2e: %s\n", e.what());
    return 1;
  }
}
