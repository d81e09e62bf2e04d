#pragma once
// The engine's root actor: turns the validated config into one host link per
// host and one proxy per declared proxy, keeps the status view they push, and
// runs the shutdown order (kill links first, then let everything exit).

#include <functional>
#include <map>
#include <string>

#include <caf/typed_event_based_actor.hpp>

#include "messages/actors.hpp"
#include "providers/transport.hpp"
#include "runtime/config.hpp"

namespace egress {

struct fleet_hooks {
  /// Chooses the transport for a host; default: transport_for (by config).
  std::function<transport_factory(const host_config&)> make_transport;
};

struct fleet_state {
  std::string name = "fleet";
  engine_config cfg;
  std::map<std::string, host_link_actor> links;
  std::map<std::string, proxy_actor> proxies;
  std::map<std::string, image_actor> images; // by "<image>@<host>"
  std::map<std::string, image_status> image_view;
  std::map<std::string, link_status> link_view;
  std::map<std::string, proxy_status> proxy_view;
  bool stopping = false;
};

using fleet_pointer = fleet_actor::stateful_pointer<fleet_state>;

fleet_actor::behavior_type make_fleet(fleet_pointer self, engine_config cfg,
                                      fleet_hooks hooks);

/// How long a proxy waits for its link's answer: a dial, a wait in the queue
/// behind one full budget, the call's own budget, and a second of slack.
caf::timespan caller_timeout(const host_config& host);

} // namespace egress
