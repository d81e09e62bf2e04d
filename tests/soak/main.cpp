// soak: randomized faults across many hosts, the engine's promises checked
// all along (every 250 ms, between the nemesis's actions).
//
//   soak [--hosts N] [--proxies P] [--minutes M] [--seed S] [--out DIR]
//        [--bed test-driver|vms] [--engine in-process|caf-run]
//                                                (root; exit 77 otherwise)
//   EGRESS_CAF_RUN, EGRESS_CAF_SHELL: other binaries than the build's (an
//   installed engine, or copies that a rebuild does not replace mid-run);
//   EGRESS_APPLIANCE_DIR: the appliance for --bed vms.
//
// The bed (tests/soak/bed.hpp): N hosts, each a private libvirtd and, in
// front of it, an sshd in a network namespace of its own (the engine's only
// way in); P proxies round-robin over them, gc on. On the test driver the
// proxies are image-less records and probes are off (the test driver's
// addresses are made up). On the VM bed (--bed vms: the e2e suite's hosts,
// QEMU under TCG) they are the appliance, booted from a kernel and an
// initrd the engine fetches from the soak's mirror, and probed over HTTP. The engine (tests/soak/engine_driver.hpp) runs in this
// process through its public API (egress::engine), or, with --engine
// caf-run, as a caf-run process: reloaded by SIGHUP, restarted after SIGTERM
// or SIGKILL, read through caf-shell --json. The nemesis plays the schedule drawn from the seed
// (tests/soak/schedule.hpp): partitions, libvirtd stopped or killed and
// restarted, sshd killed and restarted, domains destroyed or undefined behind
// the engine's back, reloads that remove, add and change proxies, engine
// restarts (half of them a SIGKILL when the engine is a caf-run process);
// on the VM bed also a cached image file (data or marker) removed from a
// pool with a VM there destroyed or undefined, the mirror stalling,
// cutting, corrupting or answering 500 for a while, and a pool's filesystem
// (a 256 MiB tmpfs) filled by a file not ours, with a cached image lost
// there too so that the engine must write into it. The last 30 s (at
// least) hold no fault: once the last fault is healed the fleet must
// converge, and the rest of the time is steady state, checked as well.
//
// Violations (tests/soak/checker.hpp), each with its time:
//  - a status request answered later than the call budget + 1 s;
//  - a proxy leaving the rotation while nothing excuses it (no fault on its
//    host, its VM untouched, its spec unchanged, no engine restart), or out
//    of it for more than 60 s with nothing excusing it;
//  - a domain with our mark that no proxy declares on its host, for longer
//    than 90 s (a removed proxy's VM left behind);
//  - the unmarked domain "foreign" stopped, started or removed; the
//    unmarked file that fills a pool removed;
//  - the VM bed: a proxy kept in the rotation while the soak's own requests
//    through it (from its host's namespace, every 5 s) fail for over 20 s;
//    a domain of ours seen running anew whose kernel or initrd file is
//    missing or not the configured digest (an unverified or partial image);
//  - not converged (every declared proxy running, with an address, in
//    rotation, and exactly the declared domains on each host) within 90 s
//    of the last heal (a broken mirror or a full pool makes the checker
//    patient: a proxy waiting for an image may stay out of the rotation, not
//    leave it, until 90 s after the mirror is fixed or the pool freed, 330 s
//    after a corrupt body, whose digest failure the image actor retries
//    after 5 min);
//  - after convergence, the engine process's threads above the baseline + 4,
//    fds above the baseline + 8, RSS above the baseline + 64 MiB (the
//    baseline is read at the first convergence), where each link may also
//    have grown to its limit since: max-calls workers, and before libvirt
//    10.4 max-calls connections of two fds each (docs/spec.md 26).
//
// Output: DIR/timeline.csv (one row a second), DIR/violations.csv,
// DIR/timeline.svg (gnuplot, tests/soak/soak.gp) and one summary line
//   soak: seed=S minutes=M faults=F partition=.. ... violations=V
//         converged_after_last_heal_s=T
// Exit 0 without violations, 1 with. The same seed plays the same schedule.

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <dirent.h>
#include <unistd.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include "base/log.hpp"
#include "messages/error.hpp"
#include "providers/images/volume_names.hpp"
#include "providers/mirror/sha256.hpp"
#include "runtime/engine.hpp"
#include "soak/bed.hpp"
#include "soak/checker.hpp"
#include "soak/engine_driver.hpp"
#include "soak/schedule.hpp"
#include "support/testbed.hpp"

using namespace egress;
using namespace egress::soak;
using namespace std::chrono_literals;

namespace {

const std::string entry = "soak";
constexpr auto grace = std::chrono::seconds(30); // a fault's excuse outlives its heal by this
constexpr double converge_bound_s = 90; // after the last heal
constexpr double orphan_bound_s = 90;

struct options {
  int hosts = 3;
  int proxies = 30;
  double minutes = 2;
  uint64_t seed = 0;
  bool seed_given = false;
  std::string out;
  std::string bed = "test-driver";
  std::string engine = "in-process";
};

// SIGINT or SIGTERM: the soak stops at its next check and tears its bed
// down (engine, daemons, VMs, namespaces, mounts) on the way out.
volatile std::sig_atomic_t interrupted = 0;

struct interruption : std::runtime_error {
  interruption() : std::runtime_error("interrupted") {}
};

void on_interrupt(int sig) {
  interrupted = sig;
}

void stop_on_interrupt() {
  struct sigaction sa{};
  sa.sa_handler = on_interrupt;
  sa.sa_flags = SA_RESETHAND; // a second one ends a teardown that hangs
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM})
    ::sigaction(sig, &sa, nullptr);
}

double since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

size_t count_dir(const char* path) {
  size_t n = 0;
  if (DIR* d = ::opendir(path)) {
    while (auto* e = ::readdir(d))
      n += e->d_name[0] != '.';
    ::closedir(d);
  }
  return n;
}

// What the engine's process holds: compared with the first convergence's.
struct footprint {
  size_t threads = 0, fds = 0;
  long rss_kib = 0;
  static footprint of(pid_t pid) {
    footprint u;
    auto proc = "/proc/" + std::to_string(pid);
    u.threads = count_dir((proc + "/task").c_str());
    u.fds = count_dir((proc + "/fd").c_str());
    long pages = 0, resident = 0;
    if (FILE* f = std::fopen((proc + "/statm").c_str(), "r")) {
      if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2)
        resident = 0;
      std::fclose(f);
    }
    u.rss_kib = resident * (::sysconf(_SC_PAGESIZE) / 1024);
    return u;
  }
};

// How the bed's proxies are declared: image-less 64 MiB records on the test
// driver, the appliance (128 MiB, its kernel and initrd from the mirror,
// clients from its VM network) on the VM bed. A spec change toggles the
// memory between `memory_mib` and `memory_mib` + 16.
struct proxy_maker {
  std::function<proxy_spec(const std::string& name, const std::string& host)> make;
  uint32_t memory_mib = 64;
};

proxy_maker maker_for(const std::vector<std::unique_ptr<soak_host>>& hosts) {
  if (hosts.front()->vm_host() == nullptr)
    return {[](const std::string& name, const std::string& host) {
              proxy_spec p;
              p.name = name;
              p.host = host;
              p.vcpus = 1;
              p.memory_mib = 64;
              p.network = "default";
              return p;
            },
            64};
  std::map<std::string, const test::local_host*> by_name;
  for (auto& h : hosts)
    by_name[h->name()] = h->vm_host();
  return {[by_name](const std::string& name, const std::string& host) {
            return test::appliance_proxy(name, *by_name.at(host));
          },
          128};
}

// The declared fleet and its changes (the reload fault).
class declared_fleet {
public:
  declared_fleet(int proxies, const std::vector<std::string>& hosts, proxy_maker maker)
    : maker_(std::move(maker)) {
    for (int i = 0; i < proxies; ++i)
      add(hosts[static_cast<size_t>(i) % hosts.size()]);
  }

  const std::vector<proxy_spec>& proxies() const { return proxies_; }

  std::set<std::string> on(const std::string& host) const {
    std::set<std::string> out;
    for (auto& p : proxies_)
      if (p.host == host)
        out.insert(p.name);
    return out;
  }

  std::optional<std::string> pick_on(const std::string& host, uint64_t pick) const {
    auto names = on(host);
    if (names.empty())
      return std::nullopt;
    return *std::next(names.begin(), static_cast<long>(pick % names.size()));
  }

  /// One change from `pick`: remove a proxy, add one on `host`, or change
  /// one's memory (a spec change: the engine replaces its VM). Returns what
  /// it did and the proxy whose rotation the change excuses ("" for none).
  std::pair<std::string, std::string> change(uint64_t pick, const std::string& host) {
    auto what = pick % 3;
    if (what == 0 && proxies_.size() > 1) {
      auto i = (pick / 3) % proxies_.size();
      auto name = proxies_[i].name;
      proxies_.erase(proxies_.begin() + static_cast<long>(i));
      return {"removed " + name, ""};
    }
    if (what == 1 || proxies_.empty()) {
      auto& p = add(host);
      return {"added " + p.name + " on " + host, ""};
    }
    auto& p = proxies_[(pick / 3) % proxies_.size()];
    p.memory_mib = p.memory_mib == maker_.memory_mib ? maker_.memory_mib + 16 : maker_.memory_mib;
    return {"changed " + p.name + " to " + std::to_string(p.memory_mib) + " MiB", p.name};
  }

private:
  proxy_spec& add(const std::string& host) {
    char name[16];
    std::snprintf(name, sizeof name, "s%04d", next_++);
    proxies_.push_back(maker_.make(name, host));
    return proxies_.back();
  }

  proxy_maker maker_;
  std::vector<proxy_spec> proxies_;
  int next_ = 0;
};

class soak_run {
public:
  soak_run(const options& o, std::vector<std::unique_ptr<soak_host>>& hosts,
           soak_mirror* mirror, std::unique_ptr<engine_driver> eng)
    : o_(o), hosts_(hosts), mirror_(mirror), eng_(std::move(eng)),
      fleet_(o.proxies, host_names(hosts), maker_for(hosts)),
      // A status answer past the call budget + 1 s is a held caller; through
      // caf-shell the bound also covers the shell's start and its TLS dial.
      check_(eng_->kind() == "caf-run" ? 9.0 : 6.0, orphan_bound_s) {}

  int run(const std::vector<fault>& schedule, double nemesis_s) {
    t0_ = clock_type::now();
    try {
      return play_and_check(schedule, nemesis_s);
    } catch (const engine_gone& e) {
      check_.add(now_s(), std::string{"the engine did not come up: "} + e.what());
      return finish(-1);
    }
  }

private:
  // An engine that does not come up is the engine's failure, not the bed's.
  struct engine_gone : std::runtime_error {
    using std::runtime_error::runtime_error;
  };

  int play_and_check(const std::vector<fault>& schedule, double nemesis_s) {
    start_engine();
    // The rotation's churn while the fleet first converges is not checked.
    check_.restart(clock_type::time_point::max());
    auto first = wait_converged(120);
    check_.restart(clock_type::now());
    if (!first) {
      check_.add(since(t0_), "the fleet did not converge at the start within 120 s");
      return finish(-1);
    }
    baseline_ = footprint::of(eng_->pid());
    std::printf("soak: converged at the start in %.1f s; baseline threads %zu, fds %zu, RSS"
                " %ld KiB\n",
                *first, baseline_.threads, baseline_.fds, baseline_.rss_kib);
    nemesis_t0_ = clock_type::now();
    play(schedule);
    auto bound = std::max(converge_bound_s, 60 + seconds_until(patient_until_));
    auto after = wait_converged(bound);
    if (!after) {
      check_.add(since(t0_), "not converged within " + std::to_string(int(bound))
                               + " s of the last heal: " + last_unconverged_);
      print_fleet();
    }
    settle_and_check_footprint();
    while (since(nemesis_t0_) < nemesis_s) { // the rest of the time: steady state, checked
      tick(true);
      row_if_due();
      std::this_thread::sleep_for(250ms);
    }
    return finish(after ? *after : -1);
  }

  static std::vector<std::string> host_names(const std::vector<std::unique_ptr<soak_host>>& hs) {
    std::vector<std::string> out;
    for (auto& h : hs)
      out.push_back(h->name());
    return out;
  }

  engine_config config() const { return config_of(fleet_); }

  engine_config config_of(const declared_fleet& fleet) const {
    engine_config cfg;
    cfg.entry = entry;
    cfg.shutdown_timeout = 10s;
    cfg.probe.mode = "off";
    cfg.gc = true;
    for (auto& h : hosts_)
      cfg.hosts.push_back(h->config());
    cfg.proxies = fleet.proxies();
    if (mirror_) {
      // As the e2e suite probes (support/local_host.cpp): every host's VM
      // network has the same subnet, each in its own namespace.
      cfg.images = mirror_->images();
      cfg.poll_interval = 500ms;
      cfg.probe.mode = "http";
      cfg.probe.target = hosts_.front()->vm_host()->target();
      cfg.probe.interval = 2s;
      cfg.probe.timeout = 2s;
      cfg.probe.rise = 2;
      cfg.probe.fall = 3;
    }
    return cfg;
  }

  void start_engine() {
    try {
      eng_->start(config());
    } catch (const std::exception& e) {
      throw engine_gone{e.what()};
    }
  }

  void stop_engine() {
    if (auto err = eng_->stop())
      check_.add(since(t0_), "engine stop: " + render(err));
  }

  double now_s() const { return since(t0_); }

  static double seconds_until(clock_type::time_point t) {
    return std::max(0.0, std::chrono::duration<double>(t - clock_type::now()).count());
  }

  // The nemesis: starts and heals faults on their schedule while the
  // checker runs every tick in between.
  void play(const std::vector<fault>& schedule) {
    struct holding_fault {
      double until_s;
      fault_kind kind;
      int host;
    };
    std::vector<holding_fault> holding;
    size_t next = 0;
    double next_hosts = 0;
    // Heals every fault held until `t` or before.
    auto heal_until = [&](double t) {
      for (auto it = holding.begin(); it != holding.end();) {
        if (it->until_s > t) {
          ++it;
          continue;
        }
        heal(it->kind, it->host);
        it = holding.erase(it);
      }
    };
    while (next < schedule.size() || !holding.empty()) {
      double t = since(nemesis_t0_);
      heal_until(t);
      while (next < schedule.size() && schedule[next].at_s <= t) {
        auto& f = schedule[next++];
        // Behind the schedule (an action that took long, an engine restart
        // that waited on its bound), the faults due are played in their
        // order, each one's heals first: the schedule's one-fault-per-host
        // holds only then.
        heal_until(f.at_s);
        inflict(f);
        if (held(f.kind))
          holding.push_back({f.at_s + f.hold_s, f.kind, f.host});
      }
      tick(t >= next_hosts);
      if (t >= next_hosts)
        next_hosts = t + 1;
      row_if_due();
      std::this_thread::sleep_for(250ms);
    }
  }

  void row_if_due() {
    if (now_s() < next_row_s_)
      return;
    row();
    next_row_s_ = now_s() + 1;
  }

  void inflict(const fault& f) {
    auto& h = *hosts_[static_cast<size_t>(f.host) % hosts_.size()];
    ++counts_[to_string(f.kind)];
    auto far = clock_type::time_point::max();
    auto excuse = clock_type::now() + grace;
    std::string what = std::string{to_string(f.kind)} + " " + h.name();
    switch (f.kind) {
      case fault_kind::partition:
      case fault_kind::stop_libvirtd:
      case fault_kind::kill_libvirtd:
      case fault_kind::kill_sshd:
        // A killed sshd listener leaves the open session, and the link on
        // it, alone: its proxies have no excuse to leave the rotation.
        if (f.kind != fault_kind::kill_sshd)
          check_.excuse_host(h.name(), far);
        h.apply(f.kind == fault_kind::partition       ? host_fault::partitioned
                : f.kind == fault_kind::stop_libvirtd ? host_fault::libvirtd_stopped
                : f.kind == fault_kind::kill_libvirtd ? host_fault::libvirtd_killed
                                                      : host_fault::sshd_killed);
        note(what);
        return;
      case fault_kind::destroy_domain:
      case fault_kind::undefine_domain: {
        auto name = fleet_.pick_on(h.name(), f.pick);
        if (!name) {
          note(what + ": no proxy there");
          return;
        }
        check_.excuse_proxy(*name, excuse);
        auto err = h.destroy(*name, f.kind == fault_kind::undefine_domain);
        note(what + " " + *name + (err ? " (" + render(err) + ")" : ""));
        return;
      }
      case fault_kind::reload: {
        // The change counts once the engine took it: a refused reload
        // leaves the declared fleet as the engine has it.
        auto next = fleet_;
        auto [did, changed] = next.change(f.pick, h.name());
        auto answer = eng_->reload(config_of(next));
        note("reload: " + did + (answer ? "" : " REFUSED: " + render(answer.error())));
        if (!answer) {
          check_.add(now_s(), "a valid reload was refused: " + render(answer.error()));
          return;
        }
        fleet_ = std::move(next);
        if (!changed.empty())
          check_.excuse_proxy(changed, clock_type::now() + grace);
        return;
      }
      case fault_kind::lose_image:
        lose_image(h, f.pick);
        return;
      case fault_kind::break_mirror: {
        breakage_ = soak_mirror::pick(f.pick);
        mirror_->breaks(breakage_);
        be_patient("mirror", far);
        note(std::string{"break_mirror ("} + soak_mirror::to_string(breakage_) + ")");
        return;
      }
      case fault_kind::fill_pool:
        // With an image lost too: the engine must write into the full pool
        // (a fetch again, a seed), or the fill would rarely meet a write.
        h.fill_pool();
        be_patient("pool " + h.name(), far);
        note(what);
        lose_image(h, f.pick);
        return;
      case fault_kind::restart_engine: {
        // Half of them, drawn from the pick, SIGKILL a caf-run engine.
        bool hard = f.pick % 2 == 1;
        auto t = clock_type::now();
        if (!hard)
          stop_engine();
        else if (auto err = eng_->kill())
          check_.add(now_s(), "engine kill: " + render(err));
        start_engine();
        check_.restart(clock_type::now() + grace);
        char buf[96];
        std::snprintf(buf, sizeof buf, " (%s + start %.2f s)",
                      hard ? "kill" : "stop", since(t));
        note("restart_engine" + std::string{buf});
        return;
      }
    }
  }

  // One of the host's cached image files (data or marker) removed behind
  // libvirt's back, and one of its VMs destroyed (or undefined) so that the
  // engine has to boot from the images again.
  void lose_image(soak_host& h, uint64_t pick) {
    auto files = h.pool_volumes(images::volume_names::entry_prefix(entry));
    std::erase_if(files, [](const std::string& n) {
      return n.find(".proxy.") != std::string::npos // a proxy's own overlay or seed
             || n.ends_with(".partial");
    });
    std::string what = "lose_image " + h.name();
    if (files.empty()) {
      note(what + ": no image there");
      return;
    }
    auto file = files[pick % files.size()];
    h.remove_from_pool(file);
    lost_at_[h.name()] = clock_type::now();
    what += " " + file;
    if (auto name = fleet_.pick_on(h.name(), pick / 7)) {
      check_.excuse_proxy(*name, clock_type::now() + grace);
      bool undefine = (pick / 7) % 2 == 1;
      auto err = h.destroy(*name, undefine);
      what += std::string{undefine ? ", undefined " : ", destroyed "} + *name
              + (err ? " (" + render(err) + ")" : "");
    }
    note(what);
  }

  void heal_mirror() {
    mirror_->heal();
    // A corrupt body fails its digest, a permanent failure the image actor
    // retries after its retry_max (5 min, actors/image.hpp); a stalled one
    // ends at the low-speed limit (30 s) and backs off.
    auto patience = breakage_ == soak_mirror::breakage::corrupt ? 330s : 90s;
    be_patient("mirror", clock_type::now() + patience);
    note("heal mirror");
  }

  // A full pool fails every fill and every create there (a seed, an image)
  // until it is freed; then the retries' backoff, as for the mirror.
  void free_pool(soak_host& h) {
    if (!h.free_pool())
      check_.add(now_s(), h.name() + ": the file filling the pool (not ours) was removed");
    be_patient("pool " + h.name(), clock_type::now() + 90s);
    note("free pool " + h.name());
  }

  // The checker is patient until the last of its causes ends.
  void be_patient(const std::string& cause, clock_type::time_point until) {
    patience_[cause] = until;
    patient_until_ = {};
    for (auto& [c, t] : patience_)
      patient_until_ = std::max(patient_until_, t);
    check_.be_patient(patient_until_);
  }

  void heal(fault_kind kind, int host) {
    auto& h = *hosts_[static_cast<size_t>(host) % hosts_.size()];
    if (kind == fault_kind::break_mirror) {
      heal_mirror();
      return;
    }
    if (kind == fault_kind::fill_pool) {
      free_pool(h);
      return;
    }
    h.heal();
    check_.excuse_host(h.name(), clock_type::now() + grace);
    note("heal " + h.name());
  }

  void note(const std::string& what) {
    std::printf("soak: %7.1f s  %s\n", now_s(), what.c_str());
    events_ += (events_.empty() ? "" : "; ") + what;
  }

  // One check of the engine (every tick) and of the hosts (`hosts_too`).
  void tick(bool hosts_too) {
    if (interrupted != 0)
      throw interruption{};
    auto t = clock_type::now();
    auto st = eng_->status();
    auto answer_s = since(t);
    if (!st) {
      check_.on_status_failed(render(st.error()), answer_s, now_s());
    } else {
      // Excuses are judged as of the request: the answer may describe it.
      check_.on_status(*st, answer_s, t, now_s());
      last_ = *st;
    }
    if (!hosts_too)
      return;
    if (mirror_ && now_s() >= next_probe_s_) {
      probe_through_proxies();
      next_probe_s_ = now_s() + 5;
    }
    for (auto& h : hosts_) {
      if (!h->readable())
        continue; // libvirtd is stopped or killed by the nemesis
      if (auto ours = h->marked(entry)) {
        check_.on_host(h->name(), *ours, fleet_.on(h->name()), clock_type::now(), now_s());
        if (mirror_)
          check_boots(*h, *ours);
      } else
        check_.add(now_s(), "the soak cannot read " + h->name() + ": " + render(ours.error()));
      if (auto intact = h->foreign_intact())
        check_.on_foreign(h->name(), *intact, now_s());
      else
        check_.add(now_s(), "the soak cannot read " + h->name() + ": " + render(intact.error()));
    }
  }

  // Every domain of ours seen running anew (a create or a start) boots from
  // files with the configured digests: never a partial, unverified or
  // replaced image. Not judged on a host whose image the nemesis removed
  // a moment ago (the file may go while the check reads it).
  void check_boots(soak_host& h, const std::vector<domain_reading>& ours) {
    std::map<std::string, std::string> digest;
    for (auto& i : mirror_->images())
      digest[i.name] = i.sha256;
    auto lost = lost_at_.find(h.name());
    bool recent_loss = lost != lost_at_.end() && clock_type::now() - lost->second < 15s;
    std::set<std::string> running;
    for (auto& d : ours) {
      if (d.state != domain_state::running)
        continue;
      auto key = h.name() + "/" + d.name + "/" + d.uuid;
      running.insert(key);
      if (booted_.count(key) != 0 || recent_loss)
        continue;
      auto files = h.booted_from(d.name);
      if (!files)
        continue; // gone again, or its host held
      for (auto& [path, image] : {std::pair{files->kernel, std::string{"appliance-kernel"}},
                                  std::pair{files->initrd, std::string{"appliance-initrd"}}}) {
        auto bytes = testbed::read_file(path);
        if (!bytes.empty() && mirror::sha256_hex(bytes) == digest[image])
          continue;
        check_.add(now_s(), d.name + " on " + h.name() + " started from " + image + " file "
                              + path + " that is not the verified image ("
                              + (bytes.empty() ? "missing" : "another digest") + ")");
      }
    }
    std::erase_if(booted_, [&](const std::string& k) { return k.rfind(h.name() + "/", 0) == 0; });
    booted_.insert(running.begin(), running.end());
  }

  // The soak's own request through every proxy the last status had in the
  // rotation, from inside its host's namespace (the VM bed).
  void probe_through_proxies() {
    for (auto& p : last_.proxies) {
      auto h = std::find_if(hosts_.begin(), hosts_.end(),
                            [&](auto& x) { return x->name() == p.host; });
      bool in = p.in_rotation && !p.address.empty() && h != hosts_.end();
      bool passed = in && (*h)->fetch_through(p.address);
      check_.on_probe(p.name, in, passed, clock_type::now(), now_s());
    }
  }

  // Every declared proxy running with an address and in rotation, every
  // link up, exactly the declared domains on every host.
  bool converged() {
    auto st = eng_->status();
    if (!st) {
      last_unconverged_ = "status: " + render(st.error());
      return false;
    }
    last_ = *st;
    size_t good = 0;
    std::string bad;
    for (auto& p : st->proxies) {
      if (p.phase == proxy_phase::running && !p.address.empty() && p.in_rotation)
        ++good;
      else if (bad.empty())
        bad = p.name + " " + to_string(p.phase) + " " + p.last_error;
    }
    if (good != fleet_.proxies().size() || st->proxies.size() != good) {
      last_unconverged_ = std::to_string(good) + "/" + std::to_string(fleet_.proxies().size())
                          + " proxies ready" + (bad.empty() ? "" : "; first not: " + bad);
      return false;
    }
    for (auto& l : st->links)
      if (l.state != link_state::up) {
        last_unconverged_ = "link " + l.host + " " + to_string(l.state) + " " + l.reason;
        return false;
      }
    for (auto& h : hosts_) {
      auto ours = h->marked(entry);
      if (!ours) {
        last_unconverged_ = render(ours.error());
        return false;
      }
      std::set<std::string> names;
      for (auto& d : *ours)
        names.insert(d.name);
      if (names != fleet_.on(h->name())) {
        last_unconverged_ = h->name() + " holds " + std::to_string(names.size())
                            + " domains of ours, " + std::to_string(fleet_.on(h->name()).size())
                            + " declared";
        return false;
      }
    }
    return true;
  }

  // What a convergence failure leaves to read: every proxy and image as the
  // engine last said, and what each host holds.
  void print_fleet() {
    for (auto& p : last_.proxies)
      std::printf("soak:   proxy %s on %s: %s%s address=%s error=%s\n", p.name.c_str(),
                  p.host.c_str(), to_string(p.phase), p.in_rotation ? " in rotation" : "",
                  p.address.c_str(), p.last_error.c_str());
    for (auto& i : last_.images)
      std::printf("soak:   image %s on %s: %s fills=%llu transfers=%llu error=%s\n",
                  i.image.c_str(), i.host.c_str(), to_string(i.state),
                  static_cast<unsigned long long>(i.fills),
                  static_cast<unsigned long long>(i.transfers), i.last_error.c_str());
    for (auto& h : hosts_)
      if (auto ours = h->marked(entry))
        for (auto& d : *ours)
          std::printf("soak:   %s holds %s: %s\n", h->name().c_str(), d.name.c_str(),
                      to_string(d.state));
  }

  std::optional<double> wait_converged(double bound_s) {
    auto t = clock_type::now();
    while (since(t) < bound_s) {
      if (converged())
        return since(t);
      tick(true);
      row_if_due();
      std::this_thread::sleep_for(250ms);
    }
    return std::nullopt;
  }

  void settle_and_check_footprint() {
    std::this_thread::sleep_for(5s); // abandoned call threads end once their host answers
    auto u = footprint::of(eng_->pid());
    std::printf("soak: after convergence threads %zu (baseline %zu), fds %zu (%zu), RSS %ld KiB"
                " (%ld)\n",
                u.threads, baseline_.threads, u.fds, baseline_.fds, u.rss_kib,
                baseline_.rss_kib);
    // Each link's pool and connections may have grown to max-calls since
    // the baseline (the default, 5; the bed's hosts do not change it).
    auto links = hosts_.size();
    auto pools = links * host_config{}.max_calls;
    if (u.threads > baseline_.threads + 4 + pools)
      check_.add(now_s(), "threads " + std::to_string(u.threads) + " after the faults, baseline "
                            + std::to_string(baseline_.threads));
    if (u.fds > baseline_.fds + 8 + 2 * pools)
      check_.add(now_s(), "fds " + std::to_string(u.fds) + " after the faults, baseline "
                            + std::to_string(baseline_.fds));
    if (u.rss_kib > baseline_.rss_kib + 64 * 1024)
      check_.add(now_s(), "RSS " + std::to_string(u.rss_kib) + " KiB after the faults, baseline "
                            + std::to_string(baseline_.rss_kib));
  }

  void row() {
    size_t running = 0, rotation = 0, up = 0;
    for (auto& p : last_.proxies) {
      running += p.phase == proxy_phase::running;
      rotation += p.in_rotation;
    }
    for (auto& l : last_.links)
      up += l.state == link_state::up;
    size_t held = 0;
    for (auto& h : hosts_)
      held += h->fault() != host_fault::none;
    auto u = footprint::of(eng_->pid());
    char buf[256];
    std::snprintf(buf, sizeof buf, "%.1f,%zu,%zu,%zu,%zu,%zu,%zu,%zu,%zu,%ld,", now_s(),
                  fleet_.proxies().size(), running, rotation, up, held,
                  check_.violations().size(), u.threads, u.fds, u.rss_kib);
    std::string ev = events_;
    std::replace(ev.begin(), ev.end(), ',', ';');
    timeline_ += buf + ev + "\n";
    events_.clear();
  }

  int finish(double converged_s) {
    stop_engine();
    testbed::write_file(o_.out + "/timeline.csv",
                        "t_s,declared,running,in_rotation,links_up,hosts_held,violations,"
                        "threads,fds,rss_kib,events\n"
                          + timeline_);
    std::string v = "t_s,violation\n";
    for (auto& x : check_.violations()) {
      std::string what = x.what;
      std::replace(what.begin(), what.end(), ',', ';');
      v += std::to_string(x.t_s) + "," + what + "\n";
    }
    testbed::write_file(o_.out + "/violations.csv", v);
    plot();
    size_t faults = 0;
    std::string by_kind;
    for (auto& [kind, n] : counts_) {
      faults += n;
      by_kind += " " + kind + "=" + std::to_string(n);
    }
    std::printf("soak: seed=%llu minutes=%g hosts=%d proxies=%d bed=%s engine=%s faults=%zu%s"
                " violations=%zu converged_after_last_heal_s=%.1f\n",
                static_cast<unsigned long long>(o_.seed), o_.minutes, o_.hosts, o_.proxies,
                o_.bed.c_str(), eng_->kind().c_str(), faults, by_kind.c_str(),
                check_.violations().size(), converged_s);
    return check_.violations().empty() ? 0 : 1;
  }

  void plot() {
    if (::access("/usr/bin/gnuplot", X_OK) != 0) {
      std::printf("soak: no /usr/bin/gnuplot (gnuplot-nox): no plot\n");
      return;
    }
    auto r = testbed::run({"/usr/bin/gnuplot", "-e",
                           "csv='" + o_.out + "/timeline.csv'; out='" + o_.out
                             + "/timeline.svg'",
                           std::string{EGRESS_SOURCE_DIR} + "/tests/soak/soak.gp"});
    if (r.ok())
      std::printf("soak: plot %s/timeline.svg\n", o_.out.c_str());
    else
      std::printf("soak: gnuplot failed: %s\n", r.output.c_str());
  }

  const options& o_;
  std::vector<std::unique_ptr<soak_host>>& hosts_;
  soak_mirror* mirror_; // the VM bed's; null on the test driver
  soak_mirror::breakage breakage_ = soak_mirror::breakage::stall;
  clock_type::time_point patient_until_{};
  std::map<std::string, clock_type::time_point> patience_; // cause -> until
  std::map<std::string, clock_type::time_point> lost_at_; // host -> its last lose_image
  std::set<std::string> booted_; // "host/name/uuid" seen running at the last read
  double next_probe_s_ = 0;
  std::unique_ptr<engine_driver> eng_;
  declared_fleet fleet_;
  checker check_;
  clock_type::time_point t0_, nemesis_t0_;
  double next_row_s_ = 0;
  footprint baseline_;
  fleet_status last_;
  std::string last_unconverged_;
  std::string events_, timeline_;
  std::map<std::string, size_t> counts_;
};

void print_usage(std::FILE* to, const char* argv0) {
  std::fprintf(to,
               "usage: %s [--hosts N] [--proxies P] [--minutes M] [--seed S] [--out DIR]"
               " [--bed test-driver|vms] [--engine in-process|caf-run]\n",
               argv0);
}

int usage_error(const char* argv0, const std::string& why) {
  std::fprintf(stderr, "%s\n", why.c_str());
  print_usage(stderr, argv0);
  return 2;
}

} // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      print_usage(stdout, argv[0]);
      return 0;
    }
    if (i + 1 >= argc)
      return usage_error(argv[0], "missing value after " + a);
    std::string v = argv[++i];
    char* end = nullptr;
    if (a == "--hosts") {
      o.hosts = static_cast<int>(std::strtol(v.c_str(), &end, 10));
      if (*end != '\0' || o.hosts < 1 || o.hosts > 32)
        return usage_error(argv[0], "--hosts takes 1..32: " + v);
    } else if (a == "--proxies") {
      o.proxies = static_cast<int>(std::strtol(v.c_str(), &end, 10));
      if (*end != '\0' || o.proxies < 1 || o.proxies > 5000)
        return usage_error(argv[0], "--proxies takes 1..5000: " + v);
    } else if (a == "--minutes") {
      o.minutes = std::strtod(v.c_str(), &end);
      if (*end != '\0' || !(o.minutes >= 0.5) || o.minutes > 24 * 60)
        return usage_error(argv[0], "--minutes takes 0.5..1440: " + v);
    } else if (a == "--seed") {
      o.seed = std::strtoull(v.c_str(), &end, 10);
      if (*end != '\0' || v.empty())
        return usage_error(argv[0], "--seed takes an unsigned integer: " + v);
      o.seed_given = true;
    } else if (a == "--out") {
      o.out = v;
    } else if (a == "--engine") {
      if (v != "in-process" && v != "caf-run")
        return usage_error(argv[0], "--engine takes in-process or caf-run: " + v);
      o.engine = v;
    } else if (a == "--bed") {
      if (v != "test-driver" && v != "vms")
        return usage_error(argv[0], "--bed takes test-driver or vms: " + v);
      o.bed = v;
    } else {
      return usage_error(argv[0], "unknown option " + a);
    }
  }
  if (!o.seed_given)
    o.seed = std::random_device{}() | (uint64_t{std::random_device{}()} << 32);
  if (o.out.empty())
    o.out = "soak-" + std::to_string(o.seed);
  testbed::require_root_or_skip(); // exit 77 without root or the bed's tools
  bool vms = o.bed == "vms";
  // Exit 77 (1 with EGRESS_E2E_REQUIRED=1) without what VMs need.
  auto app = vms ? test::require_vms_or_skip() : test::appliance{};
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  log::set_level(log::level::error);
  testbed::run({"mkdir", "-p", o.out});
  // Absolute: caf-run resolves the paths of its config file against that
  // file's directory, caf-shell against its working directory.
  if (char* abs = ::realpath(o.out.c_str(), nullptr)) {
    o.out = abs;
    std::free(abs);
  }

  schedule_options so;
  so.seed = o.seed;
  so.hosts = o.hosts;
  so.seconds = o.minutes * 60;
  so.quiet_s = std::max(30.0, so.seconds / 10);
  so.images = vms;
  auto schedule = make_schedule(so);
  std::printf("soak: seed=%llu (replay: --seed %llu), %d hosts, %d proxies, %g minutes, %zu"
              " faults scheduled, output %s\n",
              static_cast<unsigned long long>(o.seed), static_cast<unsigned long long>(o.seed),
              o.hosts, o.proxies, o.minutes, schedule.size(), o.out.c_str());
  for (auto& f : schedule)
    std::printf("soak: scheduled %s\n", describe(f).c_str());
  stop_on_interrupt();
  try {
    // Before the hosts and the engine, after them gone: fills read from it.
    std::unique_ptr<soak_mirror> mirror;
    if (vms)
      mirror = std::make_unique<soak_mirror>(app);
    std::vector<std::unique_ptr<soak_host>> hosts;
    for (int i = 0; i < o.hosts; ++i)
      hosts.push_back(std::make_unique<soak_host>(
        "hv" + std::to_string(i), vms ? bed_kind::vms : bed_kind::test_driver));
    caf::actor_system_config cfg;
    cfg.set("logger.file-verbosity", caf::atom("quiet"));
    egress::configure(cfg);
    caf::actor_system sys{cfg};
    auto driver = o.engine == "caf-run" ? make_process_driver(o.out)
                                        : make_in_process_driver(sys);
    soak_run run{o, hosts, mirror.get(), std::move(driver)};
    return run.run(schedule, so.seconds);
  } catch (const interruption&) {
    std::printf("soak: interrupted by signal %d; the bed is torn down\n",
                static_cast<int>(interrupted));
    return 128 + interrupted;
  } catch (const std::exception& e) {
    std::printf("soak: FAILED (the bed, not the engine): %s\n", e.what());
    return 2;
  }
}
