#pragma once
// One sync of HAProxy's servers with the rotation: for each backend, read
// its servers (`show servers state`, and `show stat` while some drain), plan
// (sync_plan.hpp) and send the commands, one connection each. Blocking: the
// gateway runs it on a worker thread of its own, under its call budget, and
// kills the runtime_api when it gives up (actors/gateway.hpp).

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <caf/expected.hpp>

#include "providers/haproxy/runtime_api.hpp"
#include "providers/haproxy/sync_plan.hpp"

namespace egress::haproxy {

struct backend_request {
  std::string backend;
  std::vector<wanted_server> wanted;
  std::map<std::string, clock::time_point> draining_since;
};

struct sync_request {
  std::vector<backend_request> backends;
  clock::time_point deadline{};
  std::chrono::nanoseconds grace{std::chrono::seconds(30)};
};

struct backend_report {
  std::string backend;
  bool reached = false; // its servers were read (false: HAProxy refused, see refusals)
  std::set<std::string> listed;  // the servers HAProxy had before the commands
  std::set<std::string> missing; // wanted ones it did not have (added now)
  std::set<std::string> present; // the servers it has after the commands
  std::map<std::string, clock::time_point> draining_since;
  uint32_t wanted = 0;   // the rotation's servers for this backend
  uint32_t serving = 0;  // of them, those HAProxy has and took every command for
  uint32_t draining = 0; // unwanted servers still listed, carrying sessions
  uint32_t removed = 0;  // unwanted servers deleted by this sync
};

struct sync_report {
  process_info process; // who answered (show info)
  std::vector<backend_report> backends;
  uint64_t commands = 0;               // accepted
  std::vector<std::string> refusals;   // HAProxy's refusals, rendered
};

/// Runs one sync. An error (transient gateway_unreachable or
/// gateway_garbage) means HAProxy could not be read or stopped answering
/// midway; refused commands are in the report, and the others still run.
caf::expected<sync_report> sync(runtime_api& api, const sync_request& req);

} // namespace egress::haproxy
