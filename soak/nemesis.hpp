#pragma once
// The soak's nemesis: it inflicts the faults of the schedule drawn from the
// seed (soak/schedule.hpp) and heals them, and it tells the checker
// (soak/checker.hpp) what each one excuses and for how long. Either run
// (soak/checked_run.hpp) plays it, fault by fault, between the checker's
// reads.
//
// The faults: partitions, libvirtd stopped or killed and restarted, sshd
// killed and restarted, domains destroyed or undefined behind the engine's
// back, reloads that remove, add and change proxies, engine restarts (half
// of them a SIGKILL when the engine is a caf-run process); on the VM bed also
// a cached image file (data or marker) removed from a pool with a VM there
// destroyed or undefined, the mirror stalling, cutting, corrupting or
// answering 500 for a while, and a pool's filesystem (a 256 MiB tmpfs)
// filled by a file not ours, with a cached image lost there too so that the
// engine must write into it; in a cluster of nodes also a node killed,
// stopped or cut from etcd, and etcd restarted (the run does those: they are
// its bed's, soak/cluster_bed.hpp).
//
// It acts on the bed (soak/bed.hpp) itself; the engine is the run's, so a
// reload and a restart go through the run (run_hooks below), which owns the
// engine and what a failed start or stop of it means.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <caf/expected.hpp>

#include "soak/bed.hpp"
#include "soak/checker.hpp"
#include "soak/fleet.hpp"
#include "soak/schedule.hpp"

namespace egress::soak {

/// What the nemesis asks of the run that plays it.
class run_hooks {
public:
  virtual ~run_hooks() = default;
  /// Seconds since the run started: the time of notes and violations.
  virtual double now_s() const = 0;
  /// One line of the log, and one event of the timeline's row.
  virtual void note(const std::string& what) = 0;
  /// The engine reloads the config declaring `fleet`; its answer.
  virtual caf::expected<std::string> reload(const declared_fleet& fleet) = 0;
  /// The engine stopped (`hard`: SIGKILLed, where it is a process) and
  /// started again; in a cluster, node `node` of it. A failed stop or kill
  /// is a violation; a start that fails throws, and ends the run.
  virtual void restart_engine(bool hard, int node) = 0;
  /// drain-host (on) or undrain-host; a refusal is a violation.
  virtual void cordon(const std::string& host, bool on) = 0;
  /// A cluster's fault (holds_node(f.kind), restart_etcd) inflicted, and
  /// healed on `node` (f.node). Only a run of several nodes draws them.
  virtual void inflict_cluster_fault(const fault& f);
  virtual void heal_cluster_fault(fault_kind kind, int node);
};

class nemesis {
public:
  /// `mirror` is the VM bed's, null on the test driver. `fleet` is the
  /// run's declared fleet: a reload the engine takes changes it.
  nemesis(std::vector<std::unique_ptr<soak_host>>& hosts, soak_mirror* mirror,
          declared_fleet& fleet, checker& check, run_hooks& run);

  /// Starts `f`, its excuses given to the checker first. A fault that holds
  /// (held(f.kind)) lasts until heal().
  void inflict(const fault& f);
  /// Ends a held fault: the host's daemons back, the mirror fixed, the pool
  /// freed, the node or etcd back. Its excuse outlives the heal by a grace
  /// (30 s), the checker's patience by the retries' backoff. `index`: the
  /// fault's node for a cluster's fault (f.node), its host otherwise.
  void heal(fault_kind kind, int index);

  /// Until when the checker is patient (a broken mirror, a full pool);
  /// the epoch if it never was.
  clock_type::time_point patient_until() const { return patient_until_; }
  /// Whether `host` lost a cached image (lose_image) less than `within` ago.
  bool lost_image_within(const std::string& host, clock_type::duration within) const;
  /// The faults inflicted so far, by kind (to_string(fault_kind)).
  const std::map<std::string, size_t>& counts() const { return counts_; }

private:
  soak_host& host(int index) const;
  void reload(const fault& f, soak_host& h);
  void restart_engine(const fault& f);
  void lose_image(soak_host& h, uint64_t pick);
  void heal_mirror();
  void free_pool(soak_host& h);
  void be_patient(const std::string& cause, clock_type::time_point until);

  std::vector<std::unique_ptr<soak_host>>& hosts_;
  soak_mirror* mirror_;
  declared_fleet& fleet_;
  checker& check_;
  run_hooks& run_;
  soak_mirror::breakage breakage_ = soak_mirror::breakage::stall;
  clock_type::time_point patient_until_{};
  std::map<std::string, clock_type::time_point> patience_; // cause -> until
  std::map<std::string, clock_type::time_point> lost_at_; // host -> its last lose_image
  std::map<std::string, size_t> counts_;
};

/// Plays `schedule` from `t0` on one thread: each fault inflicted at its
/// offset and healed at its end, `between(hosts_due)` called every `period`
/// in between (`hosts_due` once a second: when the hosts are read too).
/// Returns once the last fault is healed.
void play(nemesis& n, const std::vector<fault>& schedule, clock_type::time_point t0,
          clock_type::duration period, const std::function<void(bool hosts_due)>& between);

} // namespace egress::soak
