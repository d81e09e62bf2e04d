#include "soak/run.hpp"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include <dirent.h>
#include <unistd.h>

#include "messages/error.hpp"
#include "providers/mirror/sha256.hpp"
#include "soak/checker.hpp"
#include "soak/fleet.hpp"
#include "soak/nemesis.hpp"
#include "testbed/testbed.hpp"

namespace egress::soak {

namespace {

using namespace std::chrono_literals;

constexpr double converge_bound_s = 90; // after the last heal
constexpr double orphan_bound_s = 90;

// Set by the handler; the run's next check throws interruption.
volatile std::sig_atomic_t interrupted = 0;

void on_interrupt(int sig) {
  interrupted = sig;
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

std::vector<std::string> host_names(const std::vector<std::unique_ptr<soak_host>>& hs) {
  std::vector<std::string> out;
  for (auto& h : hs)
    out.push_back(h->name());
  return out;
}

// The run owns the engine, the declared fleet, the checker and the log; the
// nemesis reaches the engine and the log through the run_hooks.
class soak_run final : public run_hooks {
public:
  soak_run(const run_options& o, std::vector<std::unique_ptr<soak_host>>& hosts,
           soak_mirror* mirror, std::unique_ptr<engine_driver> eng)
    : o_(o), hosts_(hosts), mirror_(mirror), eng_(std::move(eng)),
      fleet_(o.proxies, host_names(hosts), maker_for(hosts), o.members),
      // A status answer past the call budget + 1 s is a held caller; through
      // caf-shell the bound also covers the shell's start and its TLS dial.
      check_(eng_->kind() == "caf-run" ? 9.0 : 6.0, orphan_bound_s),
      nemesis_(hosts, mirror, fleet_, check_, *this) {}

  int run(const std::vector<fault>& schedule, double nemesis_s) {
    t0_ = clock_type::now();
    try {
      return play_and_check(schedule, nemesis_s);
    } catch (const engine_gone& e) {
      check_.add(now_s(), std::string{"the engine did not come up: "} + e.what());
      return finish(-1);
    }
  }

  // run_hooks: what the nemesis does to the engine, and its log.
  double now_s() const override { return since(t0_); }

  void note(const std::string& what) override {
    std::printf("soak: %7.1f s  %s\n", now_s(), what.c_str());
    events_ += (events_.empty() ? "" : "; ") + what;
  }

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
  // An engine that does not come up is the engine's failure, not the bed's.
  struct engine_gone : std::runtime_error {
    using std::runtime_error::runtime_error;
  };

  int play_and_check(const std::vector<fault>& schedule, double nemesis_s);
  void play(const std::vector<fault>& schedule);
  void start_engine();
  void stop_engine();
  void row_if_due();
  void tick(bool hosts_too);
  void check_boots(soak_host& h, const std::vector<domain_reading>& ours);
  void probe_through_proxies();
  bool converged();
  bool hosts_converged();
  std::set<std::string> declared_on(const std::string& host) const;
  void print_fleet();
  std::optional<double> wait_converged(double bound_s);
  void settle_and_check_footprint();
  void row();
  int finish(double converged_s);
  void plot();

  static double seconds_until(clock_type::time_point t) {
    return std::max(0.0, std::chrono::duration<double>(t - clock_type::now()).count());
  }

  const run_options& o_;
  std::vector<std::unique_ptr<soak_host>>& hosts_;
  soak_mirror* mirror_; // the VM bed's; null on the test driver
  std::set<std::string> booted_; // "host/name/uuid" seen running at the last read
  double next_probe_s_ = 0;
  std::unique_ptr<engine_driver> eng_;
  declared_fleet fleet_;
  checker check_;
  nemesis nemesis_;
  clock_type::time_point t0_, nemesis_t0_;
  double next_row_s_ = 0;
  footprint baseline_;
  fleet_status last_;
  std::string last_unconverged_;
  std::string events_, timeline_;
};

int soak_run::play_and_check(const std::vector<fault>& schedule, double nemesis_s) {
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
  auto bound = std::max(converge_bound_s, 60 + seconds_until(nemesis_.patient_until()));
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

// The nemesis starts and heals faults on their schedule while the checker
// runs every tick in between.
void soak_run::play(const std::vector<fault>& schedule) {
  soak::play(nemesis_, schedule, nemesis_t0_, 250ms, [this](bool hosts_due) {
    tick(hosts_due);
    row_if_due();
  });
}

void soak_run::start_engine() {
  try {
    eng_->start(config_of(fleet_, hosts_, mirror_));
  } catch (const std::exception& e) {
    throw engine_gone{e.what()};
  }
}

void soak_run::stop_engine() {
  if (auto err = eng_->stop())
    check_.add(since(t0_), "engine stop: " + render(err));
}

void soak_run::row_if_due() {
  if (now_s() < next_row_s_)
    return;
  row();
  next_row_s_ = now_s() + 1;
}

// One check of the engine (every tick) and of the hosts (`hosts_too`).
void soak_run::tick(bool hosts_too) {
  if (interrupted != 0)
    throw interruption{static_cast<int>(interrupted)};
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
      check_.on_host(h->name(), *ours, declared_on(h->name()), clock_type::now(), now_s());
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
  return hosts_converged();
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

// Exactly the declared domains of ours on every host.
bool soak_run::hosts_converged() {
  for (auto& h : hosts_) {
    auto ours = h->marked(entry);
    if (!ours) {
      last_unconverged_ = render(ours.error());
      return false;
    }
    std::set<std::string> names;
    for (auto& d : *ours)
      names.insert(d.name);
    if (names != declared_on(h->name())) {
      last_unconverged_ = h->name() + " holds " + std::to_string(names.size())
                          + " domains of ours, " + std::to_string(declared_on(h->name()).size())
                          + " declared";
      return false;
    }
  }
  return true;
}

// What a convergence failure leaves to read: every proxy and image as the
// engine last said, and what each host holds.
void soak_run::print_fleet() {
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

std::optional<double> soak_run::wait_converged(double bound_s) {
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

void soak_run::settle_and_check_footprint() {
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

void soak_run::row() {
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

int soak_run::finish(double converged_s) {
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
  for (auto& [kind, n] : nemesis_.counts()) {
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

void soak_run::plot() {
  if (::access("/usr/bin/gnuplot", X_OK) != 0) {
    std::printf("soak: no /usr/bin/gnuplot (gnuplot-nox): no plot\n");
    return;
  }
  auto r = testbed::run({"/usr/bin/gnuplot", "-e",
                         "csv='" + o_.out + "/timeline.csv'; out='" + o_.out
                           + "/timeline.svg'",
                         std::string{EGRESS_SOURCE_DIR} + "/soak/soak.gp"});
  if (r.ok())
    std::printf("soak: plot %s/timeline.svg\n", o_.out.c_str());
  else
    std::printf("soak: gnuplot failed: %s\n", r.output.c_str());
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
