#pragma once
// The engine's inspection point: what caf-shell talks to, local or through
// CAF's middleman. It keeps no copy of the engine's state: `ls` asks the
// fleet for its directory and probes each actor's liveness with CAF's
// built-in sys/get/"info" request under a short timeout, so one wedged actor
// costs the shell that timeout and shows as "no reply", never a hang.

#include <functional>

#include <caf/typed_event_based_actor.hpp>

#include "messages/actors.hpp"

namespace egress {

/// Reads the engine's configuration again (see fleet_hooks::reread_config).
using config_source = std::function<caf::expected<engine_config>()>;

struct inspector_state {
  std::string name = to_string(actor_kind::inspector);
  fleet_actor fleet;
  caf::timespan liveness_timeout = std::chrono::milliseconds(300);
  config_source reread_config; // empty: reload is refused
};

using inspector_pointer = inspector_actor::stateful_pointer<inspector_state>;

inspector_actor::behavior_type
make_inspector(inspector_pointer self, fleet_actor fleet, caf::timespan liveness_timeout,
               config_source reread_config);

} // namespace egress
