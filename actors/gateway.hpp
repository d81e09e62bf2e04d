#pragma once
// The gateway: makes HAProxy's servers follow the rotation, so that one
// address (HAProxy's frontend) always leads to a healthy proxy. HAProxy is
// the data plane the operator runs; this actor is the control plane's hand
// on it, through HAProxy's runtime API (providers/haproxy).
//
// It keeps the last rotation the fleet published and syncs every named
// backend with it: a sync reads the backend's servers back and sends only
// what differs (providers/haproxy/sync_plan.hpp), so a restarted HAProxy,
// which has lost every server the engine added, is filled again by the next
// sync, and no command is sent twice for one change. A change starts a sync
// at once (or right after the one in flight); with nothing changing, a sync
// every resync-interval reads HAProxy back, every 250 ms while a server
// drains.
//
// HAProxy is a peer that fails. A sync runs on a worker thread of its own
// (a call worker, as a host link's calls do: actors/call_worker.hpp) under
// the call budget; past it the sync's socket is shut down, the worker is
// abandoned (listed by `caf-shell ls calls` until its thread ends) and the
// gateway is unreachable, retried with exponential backoff. Nothing the
// fleet does waits on it: a drain asked while HAProxy cannot be reached is
// answered at once.
//
// What the gateway is doing is one gateway_activity, changed only by
// transition() in actors/gateway.cpp.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <caf/typed_event_based_actor.hpp>

#include "actors/parts/call_ledger.hpp"
#include "messages/actors.hpp"
#include "messages/config.hpp"
#include "providers/haproxy/runtime_api.hpp"
#include "providers/haproxy/servers.hpp"

namespace egress {

struct gateway_options {
  gateway_config cfg;
  status_sink_actor sink; // receives gateway_status on every change
  /// The fastest resync while a server drains.
  caf::timespan drain_interval = std::chrono::milliseconds(250);
  /// Backoff after a failed sync: from min, doubling, to max.
  caf::timespan retry_min = std::chrono::milliseconds(200);
  caf::timespan retry_max = std::chrono::seconds(5);
};

enum class gateway_activity : uint8_t {
  idle,    // waiting for a change, a drain or the resync timer
  syncing, // a sync runs on the worker
  waiting, // the last sync failed: the retry timer runs
};

const char* to_string(gateway_activity x);

/// A drain the fleet asked for, answered once its servers are gone.
struct gateway_drain {
  std::vector<std::string> names;
  caf::typed_response_promise<bool> promise;
};

struct gateway_state {
  std::string name = to_string(actor_kind::gateway);
  gateway_options opts;
  gateway_activity activity = gateway_activity::idle;
  bool changed_meanwhile = false; // a change arrived while a sync ran: sync again after it
  gateway_status status;
  rotation_snapshot rotation;        // the last the fleet published
  std::set<std::string> retiring;    // drained out of every backend whatever the rotation says
  std::vector<gateway_drain> drains; // waiting for their servers to go
  // Per backend: when each unwanted server began to drain, and the servers
  // HAProxy had after the last sync (to tell a restarted HAProxy).
  std::map<std::string, std::map<std::string, std::chrono::steady_clock::time_point>> draining;
  std::map<std::string, std::set<std::string>> present;
  call_worker_actor worker;                      // idle between syncs; a new one after an abandon
  std::shared_ptr<haproxy::runtime_api> api;     // the sync in flight's (killed on abandon)
  haproxy::process_info process; // who answered the last sync (a new pid: a restart)
  caf::timespan backoff{0};
  uint64_t timer = 0; // the current timer's number
  call_ledger calls;
};

using gateway_pointer = gateway_actor::stateful_pointer<gateway_state>;

gateway_actor::behavior_type make_gateway(gateway_pointer self, gateway_options opts);

} // namespace egress
