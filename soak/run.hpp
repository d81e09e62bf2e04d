#pragma once
// The soak's checking run (soak/main.cpp sets up its bed): the engine
// started on the bed's hosts, the fleet's first convergence awaited, then the
// nemesis (soak/nemesis.hpp) plays the schedule while the checker
// (soak/checker.hpp) reads the engine every 250 ms and the hosts every
// second, all on this one thread. Once the last fault is healed the fleet
// must converge, and the rest of the time is steady state, checked as well.
//
// Violations, each with its time:
//  - a status request answered later than the call budget + 1 s;
//  - a proxy leaving the rotation while nothing excuses it (no fault on its
//    host, its VM untouched, its spec unchanged, no engine restart; a
//    drain-host excuses nothing), or out of it for more than 60 s with
//    nothing excusing it (a group member placed again off a lost host is
//    made on its new host within that);
//  - a name twice in the rotation;
//  - a domain with our mark that no proxy declares on its host, for longer
//    than 90 s (a removed proxy's VM left behind; a group member's copy on a
//    host it no longer runs on);
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

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "soak/bed.hpp"
#include "soak/engine_driver.hpp"
#include "soak/schedule.hpp"

namespace egress::soak {

/// The command line (soak/main.cpp).
struct run_options {
  int hosts = 3;
  int proxies = 30;
  int members = 0; // --members: a proxy group over every host (draws drain_host, lose_host)
  double minutes = 2;
  uint64_t seed = 0;
  bool seed_given = false;
  std::string out;
  std::string bed = "test-driver";
  std::string engine = "in-process";
  int nodes = 0; // --nodes: that many caf-run nodes in one cluster (soak/cluster_run.hpp)
};

/// Thrown at the run's next check after SIGINT or SIGTERM, so that the
/// soak tears its bed down (engine, daemons, VMs, namespaces, mounts) on
/// the way out.
struct interruption : std::runtime_error {
  explicit interruption(int sig) : std::runtime_error("interrupted"), signal(sig) {}
  int signal;
};

/// Installs the handlers for SIGINT and SIGTERM; a second one ends a
/// teardown that hangs.
void stop_on_interrupt();

/// Throws interruption if SIGINT or SIGTERM came since stop_on_interrupt().
void throw_if_interrupted();

/// Runs `schedule` (its faults within `nemesis_s` seconds of the first
/// convergence) against the engine `eng` on `hosts` (and the VM bed's
/// `mirror`, null on the test driver), and writes o.out's timeline.csv,
/// violations.csv and timeline.svg. Prints the summary line; returns 0
/// without violations, 1 with. Throws interruption.
int run_soak(const run_options& o, std::vector<std::unique_ptr<soak_host>>& hosts,
             soak_mirror* mirror, std::unique_ptr<engine_driver> eng,
             const std::vector<fault>& schedule, double nemesis_s);

} // namespace egress::soak
