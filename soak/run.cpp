#include "soak/run.hpp"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <map>
#include <set>
#include <thread>
#include <utility>

#include <dirent.h>
#include <unistd.h>

#include "messages/error.hpp"
#include "providers/mirror/sha256.hpp"
#include "soak/checked_run.hpp"
#include "testbed/testbed.hpp"

namespace egress::soak {

namespace {

using namespace std::chrono_literals;

// Set by the handler; the run's next check throws interruption.
volatile std::sig_atomic_t interrupted = 0;

void on_interrupt(int sig) {
  interrupted = sig;
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

// A status answer past the call budget + 1 s is a held caller; through
// caf-shell the bound also covers the shell's start and its TLS dial.
double held_bound_s(const engine_driver& eng) {
  return eng.kind() == "caf-run" ? 9.0 : 6.0;
}

// The run owns the engine; the course of the run, the declared fleet, the
// checker, the nemesis and the log are soak/checked_run.hpp's.
class soak_run final : public checked_run {
public:
  soak_run(const run_options& o, std::vector<std::unique_ptr<soak_host>>& hosts,
           soak_mirror* mirror, std::unique_ptr<engine_driver> eng)
    : checked_run(o, hosts, mirror, held_bound_s(*eng), 250ms,
                  {"t_s,declared,running,in_rotation,links_up,hosts_held,violations,"
                   "threads,fds,rss_kib,events",
                   "soak/soak.gp"}),
      eng_(std::move(eng)) {}

  // run_hooks: what the nemesis does to the engine.
  caf::expected<std::string> reload(const declared_fleet& fleet) override {
    return eng_->reload(config_of(fleet, hosts_, mirror_));
  }

  void cordon(const std::string& host, bool on) override {
    if (auto d = eng_->cordon(host, on); !d)
      check_.add(now_s(), std::string{on ? "drain-host " : "undrain-host "} + host
                            + " refused: " + render(d.error()));
  }

  void restart_engine(bool hard, int /*node: one engine*/) override {
    if (!hard)
      stop_engine();
    else if (auto err = eng_->kill())
      check_.add(now_s(), "engine kill: " + render(err));
    start_engine();
  }

private:
  // The engine, started and stopped.
  void start_engine() override;
  void stop_engine() override;
  // Its checks: the status every tick, the hosts and the proxies' traffic.
  void tick(bool hosts_too) override;
  void check_boots(soak_host& h, const std::vector<domain_reading>& ours);
  void probe_through_proxies();
  // Its convergence, and what is measured or printed around it.
  bool converged() override;
  std::set<std::string> declared_on(const std::string& host) const;
  std::string not_converged_at_start() const override {
    return "the fleet did not converge at the start within 120 s";
  }
  void converged_at_start(double s) override;
  void explain_unconverged() override;
  void check_after_the_faults() override;
  // The timeline's row: the fleet as the engine said, the process's footprint.
  std::string row() override;

  std::set<std::string> booted_; // "host/name/uuid" seen running at the last read
  double next_probe_s_ = 0;
  std::unique_ptr<engine_driver> eng_;
  footprint baseline_;
  fleet_status last_;
};

void soak_run::start_engine() {
  try {
    eng_->start(config_of(fleet_, hosts_, mirror_));
  } catch (const std::exception& e) {
    throw did_not_come_up{std::string{"the engine did not come up: "} + e.what()};
  }
}

void soak_run::stop_engine() {
  if (auto err = eng_->stop())
    check_.add(now_s(), "engine stop: " + render(err));
}

// One check of the engine (every tick) and of the hosts (`hosts_too`).
void soak_run::tick(bool hosts_too) {
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
  read_hosts([this](soak_host& h, const std::vector<domain_reading>& ours,
                    clock_type::time_point read_at) {
    check_.on_host(h.name(), ours, declared_on(h.name()), read_at, now_s());
    if (mirror_)
      check_boots(h, ours);
  });
}

// Every domain of ours seen running anew (a create or a start) boots from
// files with the configured digests: never a partial, unverified or
// replaced image. Not judged on a host whose image the nemesis removed
// a moment ago (the file may go while the check reads it).
void soak_run::check_boots(soak_host& h, const std::vector<domain_reading>& ours) {
  std::map<std::string, std::string> digest;
  for (auto& i : mirror_->images())
    digest[i.name] = i.sha256;
  bool recent_loss = nemesis_.lost_image_within(h.name(), 15s);
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
void soak_run::probe_through_proxies() {
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
bool soak_run::converged() {
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
  auto declared = fleet_.proxies().size() + static_cast<size_t>(fleet_.members());
  if (good != declared || st->proxies.size() != good) {
    last_unconverged_ = std::to_string(good) + "/" + std::to_string(declared)
                        + " proxies ready" + (bad.empty() ? "" : "; first not: " + bad);
    return false;
  }
  for (auto& l : st->links)
    if (l.state != link_state::up) {
      last_unconverged_ = "link " + l.host + " " + to_string(l.state) + " " + l.reason;
      return false;
    }
  return hosts_converged([this](const std::string& host) { return declared_on(host); });
}

// The hand-declared proxies of `host`, and the group members the engine
// last said run there (the engine places them).
std::set<std::string> soak_run::declared_on(const std::string& host) const {
  auto out = fleet_.on(host);
  for (auto& p : last_.proxies)
    if (p.host == host && p.name.rfind(group + "-", 0) == 0)
      out.insert(p.name);
  return out;
}

void soak_run::converged_at_start(double s) {
  baseline_ = footprint::of(eng_->pid());
  std::printf("soak: converged at the start in %.1f s; baseline threads %zu, fds %zu, RSS"
              " %ld KiB\n",
              s, baseline_.threads, baseline_.fds, baseline_.rss_kib);
}

// What a convergence failure leaves to read: every proxy and image as the
// engine last said, and what each host holds.
void soak_run::explain_unconverged() {
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

// The engine's process after the faults, against the baseline.
void soak_run::check_after_the_faults() {
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

std::string soak_run::row() {
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
  return buf;
}

} // namespace

void stop_on_interrupt() {
  struct sigaction sa{};
  sa.sa_handler = on_interrupt;
  sa.sa_flags = SA_RESETHAND; // a second one ends a teardown that hangs
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM})
    ::sigaction(sig, &sa, nullptr);
}

void throw_if_interrupted() {
  if (interrupted != 0)
    throw interruption{static_cast<int>(interrupted)};
}

int run_soak(const run_options& o, std::vector<std::unique_ptr<soak_host>>& hosts,
             soak_mirror* mirror, std::unique_ptr<engine_driver> eng,
             const std::vector<fault>& schedule, double nemesis_s) {
  soak_run run{o, hosts, mirror, std::move(eng)};
  return run.run(schedule, nemesis_s);
}

} // namespace egress::soak
