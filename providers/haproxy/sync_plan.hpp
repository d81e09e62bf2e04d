#pragma once
// How one HAProxy backend is brought to what the rotation says: a pure
// function of (the servers wanted, the servers HAProxy lists, their sessions,
// when each unwanted one began to drain, the time) to the commands to send.
// No I/O, no actor: tests/unit/haproxy.cpp tables it.
//
// The backend belongs to the engine. A wanted server that is missing is
// added and set ready; one at another address is moved; one in maintenance
// or drain is set ready. A server that is not wanted is set to maintenance
// at once, which stops new connections, sticky clients included (HAProxy's
// drain state still admits persistent clients, and a proxy that left the
// rotation must get no new connection); it is deleted once it carries no
// session, or, after the drain grace, its sessions are ended and it is
// deleted (docs/notes/gateway.md).

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "providers/haproxy/servers.hpp"

namespace egress::haproxy {

using clock = std::chrono::steady_clock;

/// A server the rotation wants in the backend.
struct wanted_server {
  std::string name;
  std::string address;
  uint32_t port = 0;
};

struct sync_input {
  std::string backend;
  std::vector<wanted_server> wanted;
  std::vector<server_row> listed; // show servers state
  /// Sessions of listed servers (show stat); a server missing here counts
  /// as still carrying sessions until the grace ends.
  std::map<std::string, uint64_t> sessions;
  /// When each unwanted server began to drain (kept by the caller between
  /// syncs; a server found in maintenance with no entry starts now).
  std::map<std::string, clock::time_point> draining_since;
  clock::time_point now{};
  std::chrono::nanoseconds grace{std::chrono::seconds(30)};
};

struct command {
  std::string text;
  answer_kind answer = answer_kind::empty;
  std::string server;
};

struct sync_plan {
  std::vector<command> commands;
  std::map<std::string, clock::time_point> draining_since; // for the next sync
  uint32_t draining = 0; // unwanted servers still listed after these commands
  uint32_t removed = 0;  // unwanted servers these commands delete
};

/// Whether plan_sync needs `sessions`: some listed server that is not wanted
/// is in maintenance already (its sessions decide whether it goes).
bool needs_sessions(const sync_input& in);

/// The commands that bring `in.backend` to `in.wanted`.
sync_plan plan_sync(const sync_input& in);

} // namespace egress::haproxy
