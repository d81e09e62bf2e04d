#pragma once
// The engine's HTTP listener (engine.metrics): a CAF broker (the
// middleman's own I/O loop, no thread of its own) that answers
//   GET /metrics                the fleet's Prometheus text exposition;
//   GET /rotation               the rotation as JSON (rotation_json);
//   GET /rotation?after=G       the same, once its generation passes G
//                               (at most wait_timeout; then the current one),
//                               so that a consumer follows the rotation with
//                               curl alone.
// It binds one loopback address (the config refuses others: the listener
// has no authentication) and serves one request per connection.
//
// Whoever can reach the port is unauthenticated, so nothing it sends decides
// what the server holds (docs/spec.md 24): a request is at most
// max_request_bytes, headers included; a connection that has not sent a
// whole request within the idle timeout is closed; at most max_connections
// are reading or being answered. At that cap, the oldest connection that has
// sent no whole request within header_deadline is closed to admit the new
// one, so idle connections held open (a slow-loris client) cannot keep a
// real scrape out; only when none is that old is the new one refused with a
// 503 (logged, at most once per 10 s, with a count). A long-poll waiter of
// /rotation?after= has sent its request and is never taken for an idle one;
// waiters have a cap of their own (max_waiters), past which a request gets a
// 503. A connection's buffer goes with it, whoever closes it; bytes after
// the request are not read (one response, then a clean close).

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

#include "actors/parts/metrics_request.hpp"
#include "messages/actors.hpp"

namespace egress {

struct metrics_server_options {
  fleet_actor fleet;
  std::string address = "127.0.0.1";
  uint16_t port = 9464; // 0: any free port
  size_t max_connections = 64;
  std::chrono::seconds idle_timeout{10};
  /// At the cap, a connection without a whole request after this long is
  /// closed to admit a new one.
  std::chrono::milliseconds header_deadline{100};
  size_t max_waiters = 64;
  std::chrono::seconds wait_timeout{30};
  /// Set once the socket is bound: the port, or why it could not be bound.
  std::shared_ptr<std::promise<caf::expected<uint16_t>>> bound;
};

struct metrics_connection {
  enum class phase : uint8_t {
    reading,   // no whole request yet
    answering, // a request is being answered
    waiting,   // GET /rotation?after=G: until the generation passes G
  };
  std::string buf;
  std::chrono::steady_clock::time_point since;
  phase now = phase::reading;
  uint64_t after = 0;   // waiting: the generation to pass
  bool head = false;    // waiting: a HEAD request
};

struct metrics_server_state {
  std::string name = to_string(actor_kind::metrics);
  metrics_server_options opts;
  std::map<caf::io::connection_handle, metrics_connection> connections;
  rotation_snapshot rotation; // the last the fleet published (for waiters)
  uint64_t refused = 0; // over the cap since the last log line
  uint64_t evicted = 0; // idle ones closed at the cap since the last log line
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
