#pragma once
// The Prometheus endpoint: a CAF broker (the middleman's own I/O loop, no
// thread of its own) that answers `GET /metrics` with the fleet's text
// exposition. It binds one loopback address (the config refuses others: the
// endpoint has no authentication) and serves one request per connection.

#include <cstdint>
#include <future>
#include <memory>
#include <string>

#include <caf/expected.hpp>
#include <caf/io/broker.hpp>

#include "messages/actors.hpp"

namespace egress {

struct metrics_server_options {
  fleet_actor fleet;
  std::string address = "127.0.0.1";
  uint16_t port = 9464; // 0: any free port
  /// Set once the socket is bound: the port, or why it could not be bound.
  std::shared_ptr<std::promise<caf::expected<uint16_t>>> bound;
};

caf::behavior make_metrics_server(caf::io::broker* self, metrics_server_options opts);

/// Spawns the server and waits until it listens (or failed to). Blocking:
/// call it from main(), not from an actor.
caf::expected<std::pair<caf::actor, uint16_t>>
start_metrics_server(caf::actor_system& sys, fleet_actor fleet, const std::string& address,
                     uint16_t port);

} // namespace egress
