#pragma once
// What the soak's two runs share: the run of one engine (soak/run.cpp) and
// the run of several nodes (soak/cluster_run.cpp) differ in what they start
// and read, not in how a run goes or what it leaves. Here: the run's clock
// and the log the nemesis writes to, the declared fleet, the checker and the
// nemesis, the course of a run, and its report.
//
// The course: the engine started (in a cluster every node) and the fleet's
// first convergence awaited for 120 s, the rotation's churn meanwhile not
// checked; the schedule played, checked every period; convergence again
// within 90 s of the last heal (60 s after the checker's patience ends, if
// later: a broken mirror, a full pool); then steady state, checked as well,
// until the nemesis's time is up. The report: the engine stopped,
// timeline.csv (a row a second, with the notes since the last one),
// violations.csv and timeline.svg in o.out, and the summary line.
//
// Each run says what is its own (the pure virtuals below): how its engine
// starts and stops, what one check reads, when its fleet has converged, and
// what a timeline row and the summary line hold; the optional steps default
// to nothing.

#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "soak/bed.hpp"
#include "soak/checker.hpp"
#include "soak/fleet.hpp"
#include "soak/nemesis.hpp"
#include "soak/run.hpp"
#include "soak/schedule.hpp"

namespace egress::soak {

class checked_run : public run_hooks {
public:
  /// Plays `schedule` (its faults within `nemesis_s` seconds of the first
  /// convergence) and writes the report. Returns 0 without violations, 1
  /// with. Throws interruption.
  int run(const std::vector<fault>& schedule, double nemesis_s);

  // run_hooks: the run's clock and its log.
  double now_s() const override { return since(t0_); }
  void note(const std::string& what) override;

protected:
  /// What the run's timeline.csv holds and how it is drawn.
  struct timeline_format {
    std::string columns; // the header: row()'s columns, then "events"
    std::string plot;    // the gnuplot script, below the source tree
  };

  /// `mirror`: the VM bed's, null on the test driver. `held_bound_s`: the
  /// checker's (soak/checker.hpp). `period`: between two checks.
  checked_run(const run_options& o, std::vector<std::unique_ptr<soak_host>>& hosts,
              soak_mirror* mirror, double held_bound_s, clock_type::duration period,
              timeline_format timeline);

  /// An engine (a node) that does not come up: the engine's failure, not the
  /// bed's. It ends the run as a violation that says what().
  struct did_not_come_up : std::runtime_error {
    using std::runtime_error::runtime_error;
  };

  /// The engine started; in a cluster, every node. Throws did_not_come_up.
  virtual void start_engine() = 0;
  /// The engine stopped at the end; a failed stop is a violation.
  virtual void stop_engine() = 0;
  /// One check of the engine, and of the hosts too (`hosts_due`, once a
  /// second): every period, from the start to the end of the run.
  virtual void tick(bool hosts_due) = 0;
  /// Whether the fleet has converged; if not, says why in last_unconverged_.
  virtual bool converged() = 0;
  /// The violation when the fleet did not converge at the start.
  virtual std::string not_converged_at_start() const = 0;
  /// What the run measures and prints once the fleet first converged
  /// (after `s` seconds).
  virtual void converged_at_start(double s) = 0;
  /// What a convergence failure after the last heal leaves to read.
  virtual void explain_unconverged() {}
  /// What is checked once the faults are over, before the steady state.
  virtual void check_after_the_faults() {}
  /// What is checked once the steady state is over (`converged_after_heal`:
  /// whether the fleet did converge after the last heal).
  virtual void check_at_the_end(bool /*converged_after_heal*/) {}
  /// A timeline row's values for the columns before "events", each one
  /// followed by a comma (its first one the time, now_s()).
  virtual std::string row() = 0;
  /// The summary, the run's last line: a run adds its own figures in
  /// summary_tail(), or prints lines before it in an override.
  virtual void print_summary(double converged_s);
  /// What the summary line adds at its end, " name=value" pairs.
  virtual std::string summary_tail() const { return ""; }

  /// How one host's marked domains are checked: read over the soak's own
  /// connection, the reading begun at `read_at`.
  using marks_check = std::function<void(soak_host& h, const std::vector<domain_reading>& ours,
                                         clock_type::time_point read_at)>;
  /// Every host the soak can reach (a libvirtd the nemesis stopped or killed
  /// is passed over): its marked domains to `check`, its unmarked domain
  /// "foreign" to the checker. A host the soak cannot read is a violation.
  void read_hosts(const marks_check& check);

  /// The names of the proxies whose domains belong on `host`.
  using declared_of = std::function<std::set<std::string>(const std::string& host)>;
  /// Whether a domain of ours on `host` is as the run wants it; if not,
  /// why in last_unconverged_.
  using domain_fits = std::function<bool(const std::string& host, const domain_reading& d)>;
  /// Exactly the domains of ours `declared` says on every host, each one as
  /// `fits` wants it (any, without); if not, why in last_unconverged_.
  bool hosts_converged(const declared_of& declared, const domain_fits& fits = {});

  const run_options& o_;
  std::vector<std::unique_ptr<soak_host>>& hosts_;
  soak_mirror* const mirror_; // the VM bed's; null on the test driver
  declared_fleet fleet_;
  checker check_;
  nemesis nemesis_;
  std::string last_unconverged_;

private:
  int play_and_check(const std::vector<fault>& schedule, double nemesis_s);
  std::optional<double> converge_at_start();
  void play(const std::vector<fault>& schedule);
  std::optional<double> converge_after_heal();
  /// Checks every period until the fleet converges (its time, in seconds)
  /// or `bound_s` is over (none).
  std::optional<double> wait_converged(double bound_s);
  void check_steady_state(double nemesis_s);
  void check_once(bool hosts_due);
  void row_if_due();
  int finish(double converged_s);
  void write_timeline();
  void write_violations();
  void plot();

  const clock_type::duration period_;
  const timeline_format timeline_format_;
  clock_type::time_point t0_, nemesis_t0_;
  double next_row_s_ = 0;
  std::string events_, timeline_;
};

} // namespace egress::soak
