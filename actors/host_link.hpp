#pragma once
// One actor per host: dialing -> up -> dead(reason) -> (next call) dialing.
//
// It owns the host's transport and its pooled libvirt connection, admits
// calls under a per-host limit, runs them on a pool of at most that many
// long-lived workers (actors/call_worker), gives each call a budget and, on
// any death cause, marks itself dead exactly once: record the reason, broadcast
// link_down, fail every pending caller with transient, and only then kill the
// transport (invariant 2). Nothing here is shared with another host's link
// (invariant 5): a stalled host can only stall its own callers.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include "actors/parts/call_ledger.hpp"
#include "actors/parts/call_pool.hpp"
#include "actors/parts/dial_backoff.hpp"
#include "actors/parts/domain_watch.hpp"
#include "actors/parts/host_fence.hpp"
#include "messages/actors.hpp"
#include "providers/transport.hpp"

namespace egress {

// Made from the host's config by link_options_of (actors/parts/transport_choice),
// with no defaults of its own but for what no config key sets.
struct host_link_options {
  std::string host;
  uint32_t max_calls = 0;
  // libvirt connections the link keeps through its transport (1..max_calls):
  // max_calls where libvirt's client must not run two calls at once on one
  // connection (actors/parts/transport_choice), so that each call has its own; 1
  // where it may. The first is opened by the dial, the others by the first
  // call that needs each. The transport must carry as many.
  uint32_t connections = 0;
  caf::timespan call_budget{0};
  caf::timespan connect_timeout{0};
  caf::timespan redial_min{0};
  caf::timespan redial_max{0};
  // libvirt keepalive: ping every interval, dead after count misses. With the
  // config's defaults (1 s, 3) a silent peer releases its callers in about 4 s.
  int keepalive_interval_s = 0;
  unsigned keepalive_count = 0;
  // Abandoned calls still running (workers a kill did not free) past which
  // the link stays dead instead of redialing: each redial could abandon more.
  // 0: twice max_calls.
  uint32_t abandoned_cap = 0;
  // VM creates running at once, at most (the host's max-creates; 0: no
  // limit of their own); other calls pass queued creates.
  uint32_t max_creates = 0;
  // The safety net under libvirt's events: a bulk read of every domain's
  // state this often while proxies watch their domains (actors/host_link_watch).
  caf::timespan bulk_read_interval{0};
  // While a watching proxy waits for an address (none yet, or inside its IP
  // grace), the bulk read with the host's leases runs this often instead
  // (the engine's poll interval): what each proxy's own poll did before.
  caf::timespan lease_interval{0};
  // The call counts (in flight, queued, connections) change twice per call;
  // the sink gets them at most this long after they changed, in one push.
  // A change of state (dialing, up, dead) is pushed at once. Not a config
  // key: the figure is docs/spec.md 26's.
  caf::timespan counts_delay = std::chrono::milliseconds(100);
  transport_factory make_transport;
  // In a cluster: the host's fence (actors/parts/host_fence.hpp). Every
  // call checks it on its worker right before it runs and is refused
  // (transient/fenced) while it is closed. Null: no cluster, no check.
  host_fence_ptr fence;
  status_sink_actor sink; // receives link_status: a change of state at once,
                          // the counts within counts_delay (optional)
};

// The dial machine and the parts it drives: a reader finds what a host link
// holds here, where a call waits in actors/parts/call_pool.hpp, and what the
// watch over the host's domains keeps in actors/parts/domain_watch.hpp.
struct host_link_state {
  using clock = std::chrono::steady_clock;

  // Timers of which at most one each is due at a time.
  struct armed_timers {
    bool redial = false; // the dead link's own redial
    bool counts = false; // the push of the call counts
  };

  std::string name = to_string(actor_kind::link);
  host_link_options opts;
  link_state state = link_state::dialing;
  std::string reason; // why it is dead (causes that arrived later appended)
  // This generation's path to the host. The link holds it before connect()
  // starts, so that a kill can always reach a dial that hangs.
  transport_ptr transport;
  // Each dial starts a new generation; answers and events from an older one
  // are stale.
  uint64_t generation = 0;
  dial_backoff backoff;
  // The queue, the calls in flight, the workers and the connections. Only
  // workers and the kill ever hold a connection's last reference (a close
  // may block): the link hands them all to the kill at its death.
  call_pool pool;
  domain_watch watch;
  // Every detached call this link started (jobs, dials, its pump, kills):
  // what `caf-shell ls calls` shows.
  call_ledger calls;
  std::vector<link_events_actor> subscribers;
  armed_timers armed;

  link_status snapshot() const;
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
