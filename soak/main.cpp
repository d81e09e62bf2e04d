// soak: randomized faults across many hosts, the engine's promises checked
// all along (every 250 ms, between the nemesis's actions).
//
//   soak [--hosts N] [--proxies P] [--members G] [--minutes M] [--seed S]
//        [--out DIR] [--bed test-driver|vms] [--engine in-process|caf-run]
//        [--nodes N]                             (root; exit 77 otherwise)
//   EGRESS_CAF_RUN, EGRESS_CAF_SHELL: other binaries than the build's (an
//   installed engine, or copies that a rebuild does not replace mid-run);
//   EGRESS_APPLIANCE_DIR: the appliance for --bed vms.
//
// The bed (soak/bed.hpp): N hosts, each a private libvirtd and, in front of
// it, an sshd in a network namespace of its own (the engine's only way in);
// P proxies round-robin over them (soak/fleet.hpp), gc on; with --members,
// a proxy group of G members over every host, and drain-host and host
// losses past host-grace among the faults. On the test
// driver the proxies are image-less records and probes are off (the test
// driver's addresses are made up). On the VM bed (--bed vms: the e2e suite's
// hosts, QEMU under TCG) they are the appliance, booted from a kernel and an
// initrd the engine fetches from the soak's mirror, and probed over HTTP.
// The engine (soak/engine_driver.hpp) runs in this process through its
// public API (egress::engine), or, with --engine caf-run, as a caf-run
// process: reloaded by SIGHUP, restarted after SIGTERM or SIGKILL, read
// through caf-shell --json. The nemesis (soak/nemesis.hpp) plays the
// schedule drawn from the seed (soak/schedule.hpp); the last 30 s (at least)
// hold no fault. The run (soak/run.hpp) checks the engine all along and says
// what a violation is.
//
// With --nodes N (2..5; the test driver and caf-run only), N caf-run nodes of
// one cluster share the hosts through a private etcd (soak/cluster_bed.hpp),
// the nemesis also kills, stops and cuts nodes from etcd and restarts etcd,
// and the run of several nodes (soak/cluster_run.hpp) checks the fencing
// tokens and the take-overs from outside.
//
// This file reads the command line, draws the schedule, and sets up the bed
// and the engine's driver for the run; it tears the bed down on the way out.
//
// Output: DIR/timeline.csv (one row a second), DIR/violations.csv,
// DIR/timeline.svg (gnuplot, soak/soak.gp) and one summary line
//   soak: seed=S minutes=M faults=F partition=.. ... violations=V
//         converged_after_last_heal_s=T
// Exit 0 without violations, 1 with. The same seed plays the same schedule.

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include "base/log.hpp"
#include "runtime/engine.hpp"
#include "soak/bed.hpp"
#include "soak/cluster_bed.hpp"
#include "soak/cluster_run.hpp"
#include "soak/engine_driver.hpp"
#include "soak/run.hpp"
#include "soak/schedule.hpp"
#include "testbed/testbed.hpp"

using namespace egress;
using namespace egress::soak;

namespace {

void print_usage(std::FILE* to, const char* argv0) {
  std::fprintf(to,
               "usage: %s [--hosts N] [--proxies P] [--members G] [--minutes M] [--seed S]"
               " [--out DIR] [--bed test-driver|vms] [--engine in-process|caf-run]"
               " [--nodes N]\n",
               argv0);
}

int usage_error(const char* argv0, const std::string& why) {
  std::fprintf(stderr, "%s\n", why.c_str());
  print_usage(stderr, argv0);
  return 2;
}

// --nodes implies caf-run on the test driver (the nodes are processes; a
// cluster refuses groups): anything else said with it is a usage error.
std::optional<int> check_nodes(const char* argv0, run_options& o, bool engine_given) {
  if (o.nodes == 0)
    return std::nullopt;
  if (engine_given && o.engine != "caf-run")
    return usage_error(argv0, "--nodes runs caf-run nodes: it cannot go with --engine " + o.engine);
  if (o.bed != "test-driver")
    return usage_error(argv0, "--nodes needs --bed test-driver, not " + o.bed);
  if (o.members > 0)
    return usage_error(argv0, "--nodes cannot go with --members (a cluster refuses groups)");
  o.engine = "caf-run";
  return std::nullopt;
}

// The command line into `o`; an exit code when the soak ends here (--help:
// 0, a bad option: 2).
std::optional<int> parse(int argc, char** argv, run_options& o) {
  bool engine_given = false;
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
    } else if (a == "--members") {
      o.members = static_cast<int>(std::strtol(v.c_str(), &end, 10));
      if (*end != '\0' || o.members < 0 || o.members > 5000)
        return usage_error(argv[0], "--members takes 0..5000: " + v);
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
      engine_given = true;
    } else if (a == "--nodes") {
      o.nodes = static_cast<int>(std::strtol(v.c_str(), &end, 10));
      if (*end != '\0' || o.nodes < 2 || o.nodes > 5)
        return usage_error(argv[0], "--nodes takes 2..5: " + v);
    } else if (a == "--bed") {
      if (v != "test-driver" && v != "vms")
        return usage_error(argv[0], "--bed takes test-driver or vms: " + v);
      o.bed = v;
    } else {
      return usage_error(argv[0], "unknown option " + a);
    }
  }
  if (o.members > 0 && o.bed != "test-driver")
    return usage_error(argv[0], "--members needs --bed test-driver");
  if (auto done = check_nodes(argv[0], o, engine_given))
    return done;
  if (!o.seed_given)
    o.seed = std::random_device{}() | (uint64_t{std::random_device{}()} << 32);
  if (o.out.empty())
    o.out = "soak-" + std::to_string(o.seed);
  return std::nullopt;
}

// The faults drawn from the seed, printed before the run so that a log
// shows what the seed replays.
std::vector<fault> draw_schedule(const run_options& o, schedule_options& so) {
  so.seed = o.seed;
  so.hosts = o.hosts;
  so.seconds = o.minutes * 60;
  so.quiet_s = std::max(30.0, so.seconds / 10);
  so.images = o.bed == "vms";
  so.groups = o.members > 0;
  so.nodes = o.nodes;
  so.lease_ttl_s = static_cast<double>(cluster_lease_ttl.count());
  auto schedule = make_schedule(so);
  std::printf("soak: seed=%llu (replay: --seed %llu), %d hosts, %d proxies, %g minutes, %zu"
              " faults scheduled, output %s\n",
              static_cast<unsigned long long>(o.seed), static_cast<unsigned long long>(o.seed),
              o.hosts, o.proxies, o.minutes, schedule.size(), o.out.c_str());
  if (o.nodes > 0)
    std::printf("soak: %d caf-run nodes in one cluster, a private etcd, lease-ttl %g s\n",
                o.nodes, so.lease_ttl_s);
  for (auto& f : schedule)
    std::printf("soak: scheduled %s\n", describe(f).c_str());
  return schedule;
}

} // namespace

int main(int argc, char** argv) {
  run_options o;
  if (auto done = parse(argc, argv, o))
    return *done;
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
  auto schedule = draw_schedule(o, so);
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
    if (o.nodes > 0) {
      soak_cluster cluster{o.nodes, o.out}; // after the hosts: its nodes stop first
      return run_cluster_soak(o, hosts, cluster, schedule, so.seconds);
    }
    caf::actor_system_config cfg;
    cfg.set("logger.file-verbosity", caf::atom("quiet"));
    egress::configure(cfg);
    caf::actor_system sys{cfg};
    auto driver = o.engine == "caf-run" ? make_process_driver(o.out)
                                        : make_in_process_driver(sys);
    return run_soak(o, hosts, mirror.get(), std::move(driver), schedule, so.seconds);
  } catch (const interruption& e) {
    std::printf("soak: interrupted by signal %d; the bed is torn down\n", e.signal);
    return 128 + e.signal;
  } catch (const std::exception& e) {
    std::printf("soak: FAILED (the bed, not the engine): %s\n", e.what());
    return 2;
  }
}
