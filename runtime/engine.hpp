#pragma once
// The engine as a library: start it inside any caller's actor_system, talk to
// it through the typed fleet interface (messages/actors.hpp), stop it.
//
//   caf::actor_system_config cfg;
//   egress::configure(cfg);            // message types + error rendering
//   caf::actor_system sys{cfg};
//   auto eng = egress::engine::start(sys, my_config);
//   auto st = eng->status();           // or request(eng->fleet(), ...) from an actor
//   eng->stop();                       // before sys goes out of scope
//
// stop() must run before the actor system is destroyed: it kills every host
// link first, so no detached call actor is left blocked on a dead host, and
// the system's destructor (which joins every detached thread) cannot hang.

#include <chrono>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/expected.hpp>

#include "actors/fleet.hpp"
#include "messages/actors.hpp"
#include "messages/config.hpp"

namespace egress {

/// Adds the engine's message types and error renderer to `cfg`. Call it
/// before constructing the actor_system the engine will run in.
void configure(caf::actor_system_config& cfg);

class engine {
public:
  /// Validates `cfg` and spawns the fleet. A config error is returned before
  /// any actor starts. Sets SIGPIPE to ignored if it has its default action
  /// (a killed transport must not end the process).
  static caf::expected<engine> start(caf::actor_system& sys, engine_config cfg,
                                     fleet_hooks hooks = {});

  const fleet_actor& fleet() const noexcept { return fleet_; }
  /// This node's own actors, for in-process inspection.
  const inspector_actor& inspector() const noexcept { return inspector_; }
  /// What caf-shell and the other nodes talk to: this node and its peers
  /// (engine.node, engine.peers). caf-run publishes it on the middleman; an
  /// embedding application may publish it too.
  const node_actor& node() const noexcept { return node_; }
  /// A new node actor in place of one that ended (an exit `kill` from a
  /// connected party is the one message it cannot refuse), for the
  /// launcher to publish again.
  const node_actor& renew_node();
  const engine_config& config() const noexcept { return cfg_; }

  /// Blocking convenience for non-actor code (never call it from an actor).
  caf::expected<fleet_status>
  status(caf::timespan timeout = std::chrono::seconds(5)) const;

  /// Applies a new configuration (validated strictly; an invalid one is
  /// refused with the reason and the running fleet is untouched). Returns
  /// the summary of what changed. Blocking: not from an actor (an actor
  /// sends atom::reload to fleet() itself).
  caf::expected<std::string> reload(engine_config next,
                                    caf::timespan timeout = std::chrono::seconds(10));

  /// Subscribes `who` to rotation changes (rotation_event).
  void subscribe(const rotation_events_actor& who) const;

  /// Kills the links, stops the fleet and waits until it is gone, at most
  /// `timeout` (default: the config's shutdown-timeout).
  caf::error stop(caf::timespan timeout = caf::timespan{0});

private:
  static node_actor spawn_node(caf::actor_system& sys, const engine_config& cfg,
                               const inspector_actor& inspector);

  engine(caf::actor_system& sys, fleet_actor f, inspector_actor i, node_actor n,
         engine_config cfg)
    : sys_(&sys), fleet_(std::move(f)), inspector_(std::move(i)), node_(std::move(n)),
      cfg_(std::move(cfg)) {}

  caf::actor_system* sys_;
  fleet_actor fleet_;
  inspector_actor inspector_;
  node_actor node_;
  engine_config cfg_;
};

} // namespace egress
