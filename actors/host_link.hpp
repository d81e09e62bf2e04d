#pragma once
// One actor per host: dialing -> up -> dead(reason) -> (next call) dialing.
//
// It owns the host's transport and its pooled libvirt connection, admits
// calls under a per-host limit, runs them on a pool of at most that many
// long-lived workers (actors/call_worker), gives each call a budget and, on
// any death
// cause, marks itself dead exactly once: record the reason, broadcast
// link_down, fail every pending caller with transient, and only then kill the
// transport (invariant 2). Nothing here is shared with another host's link
// (invariant 5): a stalled host can only stall its own callers.

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include "actors/call_ledger.hpp"
#include "messages/actors.hpp"
#include "providers/transport.hpp"

namespace egress {

namespace lv {
class lazy_connection;
} // namespace lv

struct host_link_options {
  std::string host;
  uint32_t max_calls = 5;
  // libvirt connections the link keeps through its transport (1..max_calls):
  // max_calls where libvirt's client must not run two calls at once on one
  // connection (actors/transport_choice), so that each call has its own; 1
  // where it may. The first is opened by the dial, the others by the first
  // call that needs each. The transport must take as many (its lanes).
  uint32_t connections = 1;
  caf::timespan call_budget = std::chrono::seconds(30);
  caf::timespan connect_timeout = std::chrono::seconds(10);
  caf::timespan redial_min = std::chrono::milliseconds(500);
  caf::timespan redial_max = std::chrono::seconds(30);
  // libvirt keepalive: ping every interval, dead after count misses. With the
  // defaults (1 s, 3) a silent peer releases its callers in about 4 s.
  int keepalive_interval_s = 1;
  unsigned keepalive_count = 3;
  // Abandoned calls still running (workers a kill did not free) past which
  // the link stays dead instead of redialing: each redial could abandon more.
  // 0: twice max_calls.
  uint32_t abandoned_cap = 0;
  // The safety net under libvirt's events: a bulk read of every domain's
  // state this often while proxies watch their domains (actors/host_link_watch).
  caf::timespan bulk_read_interval = std::chrono::seconds(30);
  // While a watching proxy waits for an address (none yet, or inside its IP
  // grace), the bulk read with the host's leases runs this often instead
  // (the engine's poll interval): what each proxy's own poll did before.
  caf::timespan lease_interval = std::chrono::seconds(2);
  // The call counts (in flight, queued, connections) change twice per call;
  // the sink gets them at most this long after they changed, in one push.
  // A change of state (dialing, up, dead) is pushed at once.
  caf::timespan counts_delay = std::chrono::milliseconds(100);
  transport_factory make_transport;
  status_sink_actor sink; // receives link_status: a change of state at once,
                          // the counts within counts_delay (optional)
};

struct host_link_state {
  using clock = std::chrono::steady_clock;

  struct pending {
    uint64_t id;
    call_job job;
    caf::typed_response_promise<call_result> rp;
  };

  // One of the link's libvirt connections, with the calls running on it.
  struct connection_slot {
    std::shared_ptr<lv::lazy_connection> conn;
    uint32_t calls = 0;
  };

  // A call on one of the pool's workers.
  struct running {
    caf::typed_response_promise<call_result> rp;
    call_worker_actor worker;
    std::shared_ptr<lv::lazy_connection> conn;
  };

  std::string name = "host_link";
  host_link_options opts;
  link_state state = link_state::dialing;
  std::string reason;
  transport_ptr transport;
  // This generation's connections: the first (events registered on it) from
  // the dial, the others added as calls need them, up to opts.connections.
  // Only workers and the kill ever hold the last reference (a close may
  // block): the link drops them all at its death, after the kill.
  std::vector<connection_slot> connections;
  // Each dial starts a new generation; answers from an older one are stale.
  uint64_t generation = 0;
  uint64_t next_id = 0;
  std::deque<pending> queued;
  std::map<uint64_t, running> in_flight;
  // The call pool: idle workers wait here; a busy one is in in_flight; an
  // abandoned one is in neither and quits once its call returns. `workers`
  // holds them all until they quit (the link's end sends each an exit).
  std::vector<call_worker_actor> idle_workers;
  std::shared_ptr<std::map<caf::actor_addr, call_worker_actor>> workers
    = std::make_shared<std::map<caf::actor_addr, call_worker_actor>>();
  uint64_t workers_started = 0;
  uint32_t failures = 0; // consecutive failed dials, for the backoff
  clock::time_point next_dial_at{};
  uint64_t dials = 0;
  uint64_t deaths = 0;
  uint64_t overruns = 0; // calls that ran past their budget
  std::vector<link_events_actor> subscribers;
  // A proxy watching its domain: what it said of its MACs and its wait.
  struct watcher {
    proxy_actor proxy;
    std::vector<std::string> macs;
    bool waiting = false; // for an address: the lease timer runs
  };
  // Proxies watching their domains, by domain name.
  std::map<std::string, watcher> watchers;
  bool bulk_reading = false; // one bulk read at a time
  bool bulk_read_again = false; // asked for while one ran: another after it
  bool redial_armed = false; // one redial timer at a time
  bool lease_armed = false;  // one lease timer at a time
  bool counts_armed = false; // one push of the call counts due at a time
  // Whether this dial's host can list leases: `unsupported` stops asking
  // until the next dial (a host behind the same name may differ then).
  lease_view leases = lease_view::not_read;
  // A call answered since the link came up: the dial backoff starts over
  // only then, so a link that dies before serving anything (a resync past
  // its budget, say) backs off further each time instead of redialing at
  // the shortest backoff forever.
  bool served = false;
  uint64_t events = 0;
  uint64_t bulk_reads = 0;
  uint64_t lease_reads = 0;
  // Every detached call this link started (jobs, dials, its pump, kills):
  // what `caf-shell ls calls` shows.
  call_ledger calls;
  std::minstd_rand rng{std::random_device{}()};

  link_status snapshot() const;
  uint32_t abandoned_cap() const {
    return opts.abandoned_cap > 0 ? opts.abandoned_cap : 2 * opts.max_calls;
  }
};

using host_link_pointer = host_link_actor::stateful_pointer<host_link_state>;

host_link_actor::behavior_type make_host_link(host_link_pointer self,
                                              host_link_options opts);

/// Marks the link dead (idempotent: a second call returns at once). Exposed
/// for the fleet's shutdown path and for tests.
void mark_dead(host_link_pointer self, std::string reason);

/// Dials a dead link again if its backoff is over and not too many of its
/// calls are still running abandoned; otherwise says why not.
std::optional<std::string> redial_if_due(host_link_pointer self);

} // namespace egress
