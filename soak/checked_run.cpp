#include "soak/checked_run.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <utility>

#include <unistd.h>

#include "messages/error.hpp"
#include "testbed/testbed.hpp"

namespace egress::soak {

namespace {

constexpr double start_bound_s = 120;   // the first convergence
constexpr double converge_bound_s = 90; // after the last heal
constexpr double orphan_bound_s = 90;

std::vector<std::string> host_names(const std::vector<std::unique_ptr<soak_host>>& hs) {
  std::vector<std::string> out;
  for (auto& h : hs)
    out.push_back(h->name());
  return out;
}

double seconds_until(clock_type::time_point t) {
  return std::max(0.0, std::chrono::duration<double>(t - clock_type::now()).count());
}

// A free text in one field of a CSV file.
std::string without_commas(std::string text) {
  std::replace(text.begin(), text.end(), ',', ';');
  return text;
}

} // namespace

checked_run::checked_run(const run_options& o, std::vector<std::unique_ptr<soak_host>>& hosts,
                         soak_mirror* mirror, double held_bound_s, clock_type::duration period,
                         timeline_format timeline)
  : o_(o), hosts_(hosts), mirror_(mirror),
    // No group in a cluster: soak/main.cpp refuses --members with --nodes.
    fleet_(o.proxies, host_names(hosts), maker_for(hosts), o.members),
    check_(held_bound_s, orphan_bound_s), nemesis_(hosts, mirror, fleet_, check_, *this),
    period_(period), timeline_format_(std::move(timeline)) {}

int checked_run::run(const std::vector<fault>& schedule, double nemesis_s) {
  t0_ = clock_type::now();
  try {
    return play_and_check(schedule, nemesis_s);
  } catch (const did_not_come_up& e) {
    check_.add(now_s(), e.what());
    return finish(-1);
  }
}

void checked_run::note(const std::string& what) {
  std::printf("soak: %7.1f s  %s\n", now_s(), what.c_str());
  events_ += (events_.empty() ? "" : "; ") + what;
}

int checked_run::play_and_check(const std::vector<fault>& schedule, double nemesis_s) {
  start_engine();
  auto first = converge_at_start();
  if (!first) {
    check_.add(now_s(), not_converged_at_start());
    return finish(-1);
  }
  converged_at_start(*first);
  play(schedule);
  auto after = converge_after_heal();
  check_after_the_faults();
  check_steady_state(nemesis_s);
  check_at_the_end(after.has_value());
  return finish(after ? *after : -1);
}

// The rotation's churn while the fleet first converges is not checked.
std::optional<double> checked_run::converge_at_start() {
  check_.restart(clock_type::time_point::max());
  auto first = wait_converged(start_bound_s);
  check_.restart(clock_type::now());
  return first;
}

// The nemesis starts and heals faults on their schedule while the run
// checks every period in between.
void checked_run::play(const std::vector<fault>& schedule) {
  nemesis_t0_ = clock_type::now();
  soak::play(nemesis_, schedule, nemesis_t0_, period_,
             [this](bool hosts_due) { check_once(hosts_due); });
}

// A proxy waiting for an image may stay out of the rotation until 60 s
// after the checker's patience ends (soak/run.hpp), so the bound waits as
// long.
std::optional<double> checked_run::converge_after_heal() {
  auto bound = std::max(converge_bound_s, 60 + seconds_until(nemesis_.patient_until()));
  auto after = wait_converged(bound);
  if (!after) {
    check_.add(now_s(), "not converged within " + std::to_string(int(bound))
                          + " s of the last heal: " + last_unconverged_);
    explain_unconverged();
  }
  return after;
}

// The rest of the nemesis's time: steady state, checked.
void checked_run::check_steady_state(double nemesis_s) {
  while (since(nemesis_t0_) < nemesis_s) {
    check_once(true);
    std::this_thread::sleep_for(period_);
  }
}

std::optional<double> checked_run::wait_converged(double bound_s) {
  auto t = clock_type::now();
  while (since(t) < bound_s) {
    if (converged())
      return since(t);
    check_once(true);
    std::this_thread::sleep_for(period_);
  }
  return std::nullopt;
}

// A SIGINT or SIGTERM ends the run here, between two checks, so that the
// soak tears its bed down.
void checked_run::check_once(bool hosts_due) {
  throw_if_interrupted();
  tick(hosts_due);
  row_if_due();
}

void checked_run::read_hosts(const marks_check& check) {
  for (auto& h : hosts_) {
    if (!h->readable())
      continue; // libvirtd is stopped or killed by the nemesis
    auto read_at = clock_type::now();
    if (auto ours = h->marked(entry))
      check(*h, *ours, read_at);
    else
      check_.add(now_s(), "the soak cannot read " + h->name() + ": " + render(ours.error()));
    if (auto intact = h->foreign_intact())
      check_.on_foreign(h->name(), *intact, now_s());
    else
      check_.add(now_s(), "the soak cannot read " + h->name() + ": " + render(intact.error()));
  }
}

bool checked_run::hosts_converged(const declared_of& declared, const domain_fits& fits) {
  for (auto& h : hosts_) {
    auto ours = h->marked(entry);
    if (!ours) {
      last_unconverged_ = render(ours.error());
      return false;
    }
    std::set<std::string> names;
    for (auto& d : *ours) {
      names.insert(d.name);
      if (fits && !fits(h->name(), d))
        return false;
    }
    auto want = declared(h->name());
    if (names != want) {
      last_unconverged_ = h->name() + " holds " + std::to_string(names.size())
                          + " domains of ours, " + std::to_string(want.size()) + " declared";
      return false;
    }
  }
  return true;
}

// One row a second: the run's values, then what was noted since the last.
void checked_run::row_if_due() {
  if (now_s() < next_row_s_)
    return;
  timeline_ += row() + without_commas(events_) + "\n";
  events_.clear();
  next_row_s_ = now_s() + 1;
}

int checked_run::finish(double converged_s) {
  stop_engine();
  write_timeline();
  write_violations();
  plot();
  print_summary(converged_s);
  return check_.violations().empty() ? 0 : 1;
}

void checked_run::write_timeline() {
  testbed::write_file(o_.out + "/timeline.csv", timeline_format_.columns + "\n" + timeline_);
}

void checked_run::write_violations() {
  std::string v = "t_s,violation\n";
  for (auto& x : check_.violations())
    v += std::to_string(x.t_s) + "," + without_commas(x.what) + "\n";
  testbed::write_file(o_.out + "/violations.csv", v);
}

void checked_run::plot() {
  if (::access("/usr/bin/gnuplot", X_OK) != 0) {
    std::printf("soak: no /usr/bin/gnuplot (gnuplot-nox): no plot\n");
    return;
  }
  auto r = testbed::run({"/usr/bin/gnuplot", "-e",
                         "csv='" + o_.out + "/timeline.csv'; out='" + o_.out
                           + "/timeline.svg'",
                         std::string{EGRESS_SOURCE_DIR} + "/" + timeline_format_.plot});
  if (r.ok())
    std::printf("soak: plot %s/timeline.svg\n", o_.out.c_str());
  else
    std::printf("soak: gnuplot failed: %s\n", r.output.c_str());
}

// The nodes are said only in a cluster (the run of one engine has none).
void checked_run::print_summary(double converged_s) {
  size_t faults = 0;
  std::string by_kind;
  for (auto& [kind, n] : nemesis_.counts()) {
    faults += n;
    by_kind += " " + kind + "=" + std::to_string(n);
  }
  auto nodes = o_.nodes > 0 ? " nodes=" + std::to_string(o_.nodes) : std::string{};
  std::printf("soak: seed=%llu minutes=%g hosts=%d proxies=%d%s bed=%s engine=%s faults=%zu%s"
              " violations=%zu converged_after_last_heal_s=%.1f%s\n",
              static_cast<unsigned long long>(o_.seed), o_.minutes, o_.hosts, o_.proxies,
              nodes.c_str(), o_.bed.c_str(), o_.engine.c_str(), faults, by_kind.c_str(),
              check_.violations().size(), converged_s, summary_tail().c_str());
}

} // namespace egress::soak
