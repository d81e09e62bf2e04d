#pragma once
// The health actor: one per fleet. It probes every proxy that runs with an
// address (providers/probe: through the host's SSH server, so the engine
// needs no route into the VM network), keeps per-proxy counters, and keeps
// the rotation, the set of proxies that clients may use.
//
// Membership has hysteresis: `rise` consecutive passes to join, `fall`
// consecutive failures to leave, so one lost probe does not flap the
// rotation. Some things need no vote and remove a proxy at once: it stopped
// running (or lost its address), its address changed, it was retired, or its
// host's link is dead (no effective host).
//
// Invariant 12: one proxy's failure never removes another. Every decision is
// per proxy, from that proxy's own probes; probes of one host run in one
// batch in a detached actor (one prober per host, never shared between
// hosts), so a silent proxy or host delays only its own host's batch.

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <caf/typed_event_based_actor.hpp>

#include "actors/parts/call_ledger.hpp"
#include "messages/actors.hpp"
#include "messages/config.hpp"
#include "providers/probe/probe.hpp"

namespace egress {

struct health_options {
  probe_config probe;
  /// Builds the prober of one host; called once per host, when its first
  /// proxy runs. nullptr: the host's proxies are not probed and the rotation
  /// follows their phase (the test driver's made-up addresses, see fleet.cpp).
  std::function<probe::prober_ptr(const std::string& host)> prober_for;
  caf::timespan tick = std::chrono::milliseconds(250);
  /// How often a proxy outside the rotation is probed (at most the probe
  /// interval): joining should take seconds, not rise x interval.
  caf::timespan join_interval = std::chrono::seconds(1);
  status_sink_actor sink; // receives proxy_health on every change (optional)
};

struct health_target {
  proxy_health view;     // view.address is the endpoint "ip:port" / "[v6]:port"
  bool running = false;  // its last status: running with an address
  bool eligible = false; // running on a live link
  bool in_flight = false;
  std::chrono::steady_clock::time_point next_due{};
};

struct health_host {
  bool resolved = false; // prober_for was asked
  probe::prober_ptr prober;
  bool in_flight = false;
  bool link_dead = false;
};

/// A probe batch in flight: its prober, and whether the rest of it is
/// called off (each probe after a kill would connect anew and wait out its
/// own timeout on a host that does not answer).
struct batch_control {
  probe::prober_ptr prober;
  std::atomic<bool> called_off{false};

  void call_off() noexcept {
    called_off = true;
    prober->kill();
  }
};

struct health_state {
  std::string name = to_string(actor_kind::health);
  health_options opts;
  std::map<std::string, health_target> targets; // by proxy name
  std::map<std::string, health_host> hosts;
  std::vector<std::weak_ptr<batch_control>> batches; // in flight (called off on exit)
  std::vector<rotation_events_actor> subscribers;
  uint32_t rotation_size = 0;
  call_ledger calls; // the probe batches in flight (caf-shell ls calls)
};

using health_pointer = health_actor::stateful_pointer<health_state>;

health_actor::behavior_type make_health(health_pointer self, health_options opts);

} // namespace egress
