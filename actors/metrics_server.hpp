#pragma once
// The Prometheus endpoint: a CAF broker (the middleman's own I/O loop, no
// thread of its own) that answers `GET /metrics` with the fleet's text
// exposition. It binds one loopback address (the config refuses others: the
// endpoint has no authentication) and serves one request per connection.
//
// Whoever can reach the port is unauthenticated, so nothing it sends decides
// what the server holds (docs/spec.md 24): a request is at most
// max_request_bytes, headers included; a connection that has not sent a
// whole request within the idle timeout is closed; at most max_connections
// are open, and one past that gets a 503 and is closed at once (logged, at
// most once per 10 s, with a count); a connection's buffer goes with it,
// whoever closes it; bytes after the request are not read (one response,
// then a clean close).

#include <chrono>
#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include <caf/expected.hpp>
#include <caf/io/broker.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/metrics_request.hpp"
#include "messages/actors.hpp"

namespace egress {

struct metrics_server_options {
  fleet_actor fleet;
  std::string address = "127.0.0.1";
  uint16_t port = 9464; // 0: any free port
  size_t max_connections = 64;
  std::chrono::seconds idle_timeout{10};
  /// Set once the socket is bound: the port, or why it could not be bound.
  std::shared_ptr<std::promise<caf::expected<uint16_t>>> bound;
};

struct metrics_connection {
  std::string buf;
  std::chrono::steady_clock::time_point since;
  bool answering = false; // a complete request is being answered
};

struct metrics_server_state {
  std::string name = "metrics-server";
  metrics_server_options opts;
  std::map<caf::io::connection_handle, metrics_connection> connections;
  uint64_t refused = 0; // over the cap since the last log line
  std::chrono::steady_clock::time_point last_refusal_log{};
};

using metrics_server_pointer = caf::stateful_actor<metrics_server_state, caf::io::broker>*;

caf::behavior make_metrics_server(metrics_server_pointer self, metrics_server_options opts);

/// Spawns the server and waits until it listens (or failed to). Blocking:
/// call it from main(), not from an actor.
caf::expected<std::pair<caf::actor, uint16_t>>
start_metrics_server(caf::actor_system& sys, fleet_actor fleet, const std::string& address,
                     uint16_t port);

} // namespace egress
