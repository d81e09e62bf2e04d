#pragma once
// Every typed actor interface of the engine, in one header (the model is
// Tenzir/VAST's actors.hpp). An embedding application needs only this file,
// the vocabulary and runtime/engine.hpp to talk to a running engine.

#include <any>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/expected.hpp>
#include <caf/replies_to.hpp>
#include <caf/timespan.hpp>
#include <caf/typed_actor.hpp>

#include "messages/config.hpp"
#include "messages/types.hpp"
#include "messages/vocabulary.hpp"

namespace egress {

namespace lv {
class connection;
} // namespace lv

/// One blocking libvirt operation, shipped to a host link. The function runs
/// in a detached call actor with the link's current connection; it must only
/// call providers/. It never travels beyond this process.
struct call_job {
  std::string what;  // for logs, errors and the inspector: "define px-1"
  std::function<caf::expected<std::any>(lv::connection&)> fn;
  caf::timespan budget{0}; // 0: the host's call-budget
  /// A VM's creation: at most max-creates of them run at once on a link
  /// (actors/parts/call_pool.hpp), the other calls pass them in the queue.
  bool create = false;
};

/// The value a job produced, type-erased; see link_call() for the typed side.
struct call_result {
  std::any value;
};

/// A blocking function for a detached call actor (runs once, answers once)
/// or for a worker of a link's call pool.
struct blocking_work {
  std::string what;
  std::function<caf::expected<std::any>()> fn;
};

/// The rotation as the fleet last published it: immutable and shared, so
/// that every follower in this process reads one copy (a fleet of 10,000
/// proxies is a megabyte of members). Never crosses the middleman.
using rotation_snapshot = std::shared_ptr<const rotation_view>;

/// What the cluster actor tells the fleet (actors/cluster): the hosts this
/// node may change now with their fencing tokens, the other nodes' share
/// of the rotation, and its status. Immutable and shared; never crosses the
/// middleman.
struct cluster_view {
  bool member = false; // the lease is confirmed: this node's own rotation is live
  std::map<std::string, int64_t> hosts;
  std::map<std::string, std::vector<rotation_member>> others; // by node
  cluster_status status;
};

using cluster_snapshot = std::shared_ptr<const cluster_view>;

} // namespace egress

// Local-only: closures and std::any cannot be serialized. These types never
// cross the middleman; the shell sees status types only.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(egress::call_job)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(egress::call_result)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(egress::blocking_work)
// A whole configuration for a reload: holds durations and paths of this
// machine, so it is local too (caf-shell asks the node to re-read its file).
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(egress::engine_config)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(egress::rotation_snapshot)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(egress::cluster_snapshot)

namespace egress {

/// Receives the broadcast a host link sends when it dies, before its kill.
using link_events_actor = caf::typed_actor<caf::reacts_to<link_down>>;

/// Receives status snapshots pushed by links and proxies when they change.
/// A proxy that finds a newer owner's token in its domain's mark says so
/// (host, token): in a cluster, the host is not this node's any more.
using status_sink_actor = caf::typed_actor<caf::reacts_to<link_status>,
                                           caf::reacts_to<proxy_status>,
                                           caf::reacts_to<image_status>,
                                           caf::reacts_to<proxy_health>,
                                           caf::reacts_to<gateway_status>,
                                           caf::reacts_to<atom::superseded, std::string, int64_t>>;

/// Receives engine_events (caf-shell's watch; may live on another node).
using engine_events_actor = caf::typed_actor<caf::reacts_to<engine_event>>;

/// Receives every change of the rotation (a proxy joined or left).
using rotation_events_actor = caf::typed_actor<caf::reacts_to<rotation_event>>;

/// Follows the rotation: gets the fleet's rotation_snapshot when it
/// subscribes and after every change (at most one per 20 ms: the fleet
/// gathers the changes of one burst into one snapshot). The gateway and the
/// HTTP listener's GET /rotation follow it.
using rotation_follower_actor = caf::typed_actor<caf::reacts_to<rotation_snapshot>>;

// -- parts several interfaces share (composed with extend_with) -------------

/// Answers with its last status snapshot.
template <class Status>
using status_interface = caf::typed_actor<caf::replies_to<atom::status>::with<Status>>;

/// Lists the detached calls it started (its call ledger, actors/parts/call_ledger):
/// running ones, and abandoned ones until a while after their threads ended
/// (kind "call"; caf-shell ls calls).
using call_ledger_interface
  = caf::typed_actor<caf::replies_to<atom::ls>::with<std::vector<actor_row>>>;

/// One of the fleet's actors with its handle: what the inspector probes.
/// The handles stay in this process; the shell gets actor_row only.
struct directory_row {
  actor_row row;
  caf::actor handle;
  // Set for an actor that starts detached calls (a link, an image, the
  // health actor, the gateway): where the inspector asks for them.
  call_ledger_interface calls;
};

/// Gives up what it is doing, for the reason given, and answers at once with
/// its status (a link marks itself dead and kills its transport; an image
/// abandons its fill).
template <class Status>
using kill_interface
  = caf::typed_actor<caf::replies_to<atom::kill, std::string>::with<Status>>;

/// A detached actor that runs one blocking_work and then quits. Its caller
/// abandons it on timeout; the link's kill is what unblocks the work.
using call_actor = caf::typed_actor<
  caf::replies_to<atom::run>::with<call_result>>;

/// A long-lived detached worker of a host link's call pool: runs one
/// blocking_work per request, in order, and waits for the next. A worker
/// its link abandoned gets an exit and quits once its work returns.
using call_worker_actor = caf::typed_actor<
  caf::replies_to<atom::run, blocking_work>::with<call_result>>;

/// One per declared proxy: reconciles one VM.
using proxy_actor = status_interface<proxy_status>::extend<
  caf::reacts_to<atom::poll>,
  // Reconcile now (an operator's request): one read-back outside the poll
  // schedule (right after the step in flight, if there is one).
  caf::reacts_to<atom::reconcile>,
  // Its domain changed on the host (a libvirt event): it reads the domain
  // back, and leaves running at once when the change says it no longer runs.
  caf::reacts_to<domain_event>,
  // Its domain as the link's bulk read saw it: read back if that is not what
  // the proxy believes (an event was missed, the link was dead); its leased
  // addresses, if the link read the host's leases.
  caf::reacts_to<domain_brief>,
  // Deletes the VM (destroy, undefine) and answers once it is gone.
  caf::replies_to<atom::erase>::with<proxy_status>>;

/// One per host: owns the transport and the pooled libvirt connection. Its
/// calls are jobs, dials, the pump and kills. A kill marks the link dead with
/// the given reason and kills its transport; it answers at once, even while
/// the kill itself is still running, and the next call redials (after
/// backoff).
using host_link_actor = status_interface<link_status>::extend_with<
  call_ledger_interface, kill_interface<link_status>>::extend<
  // Runs a job under the host's concurrency limit and the job's budget. On
  // budget overrun the caller gets transient budget_exceeded and the link dies.
  caf::replies_to<atom::call, call_job>::with<call_result>,
  // Adds a subscriber for link_down broadcasts (kept until it terminates).
  caf::reacts_to<atom::subscribe, link_events_actor>,
  // A proxy watches its domain (by name): the link sends it every
  // domain_event of that name and its domain_brief from every bulk read
  // (kept until the proxy terminates).
  caf::reacts_to<atom::subscribe, std::string, proxy_actor>,
  // A watching proxy names its domain's MACs and whether it waits for an
  // address: its briefs then carry its leased addresses, read every lease
  // interval while any proxy waits (docs/spec.md 28).
  caf::reacts_to<address_watch>,
  // Internal: the lease timer, running while a proxy waits for an address.
  caf::reacts_to<atom::lease>,
  // Internal: libvirt's event loop hands an event on (actors/host_link_watch).
  caf::reacts_to<domain_event>,
  // Internal: the safety net's timer (a bulk read of every domain's state).
  caf::reacts_to<atom::poll>,
  // Internal: a dead link with watched domains redials once its backoff ends.
  caf::reacts_to<atom::link>,
  // Internal: the push of the call counts, due since they changed.
  caf::reacts_to<atom::counts>>;

/// One per (provider entry, image) on each host: the verified base image in
/// the host's pool. The first ensure starts one fill (over a dedicated
/// connection, in a detached actor, under the transfer budget); later ones
/// join it. A waiter that gives up (its own timeout) disturbs nothing. Its
/// call is its fill, while it runs or after it was abandoned; a kill abandons
/// a running fill (its transports are killed, its waiters get transient),
/// and the next ensure starts over once the fill has ended.
using image_actor = status_interface<image_status>::extend_with<
  call_ledger_interface, kill_interface<image_status>>::extend<
  caf::replies_to<atom::ensure>::with<image_ready>,
  // A proxy's create or start found this data volume gone from the pool: a
  // ready image with that volume is forgotten, and the next ensure fills again.
  caf::reacts_to<atom::forget, std::string>,
  // Internal: the progress tick (rate, ETA, budget) while a fill runs.
  caf::reacts_to<atom::poll>>;

/// One per fleet: probes running proxies and keeps the rotation.
using health_actor = status_interface<std::vector<proxy_health>>::extend_with<
  call_ledger_interface>::extend<
  // What to probe: a proxy's phase and address, as the fleet sees them.
  caf::reacts_to<proxy_status>,
  // A dead link takes its host's proxies out of rotation at once.
  caf::reacts_to<link_status>,
  // A retired proxy (erased, or gone from the config) leaves at once.
  caf::reacts_to<atom::forget, std::string>,
  // (from, to): the target `from` is `to` from now on, its verdict kept,
  // and the old `to` goes without a leave: a drain's replacement, probed
  // under its own key (member@host), takes its member's name
  // (actors/fleet_drain.cpp).
  caf::reacts_to<atom::rename, std::string, std::string>,
  // Drops (and kills) a host's prober: its settings changed or it was
  // removed. The next probe of that host builds a new one.
  caf::reacts_to<atom::kill, std::string>,
  // Adds a subscriber for rotation events (kept until it terminates).
  caf::reacts_to<atom::subscribe, rotation_events_actor>,
  // Its calls are its probe batches.
  // Drain (true) takes a proxy out of the rotation and keeps it out, probes
  // going on; undrain (false) lets it back on its probes' verdict.
  caf::replies_to<atom::drain, std::string, bool>::with<proxy_health>,
  // Internal: the probe tick.
  caf::reacts_to<atom::poll>>;

/// One per engine with engine.gateway: makes the servers of HAProxy's
/// backends follow the rotation through HAProxy's runtime API, one sync at a
/// time on a worker thread of its own under the gateway's call budget
/// (actors/gateway.hpp).
using gateway_actor = status_interface<gateway_status>::extend_with<call_ledger_interface>::extend<
  // The rotation changed: a sync follows at once (or after the one in flight).
  caf::reacts_to<rotation_snapshot>,
  // Drains these proxies out of every backend before the engine deletes or
  // replaces their VMs: no new connection at once, then removed once their
  // sessions ended (or the drain grace passed). Answers true once they are
  // gone from HAProxy, false at once when HAProxy cannot be reached (the
  // fleet never waits on a gateway that is down).
  caf::replies_to<atom::drain, std::vector<std::string>>::with<bool>,
  // Internal: the timer of the next sync (resync, drain, or retry); the
  // number tells a current timer from a stale one.
  caf::reacts_to<atom::poll, uint64_t>>;

/// One per engine with engine.cluster: this node's lease in etcd, its
/// claims on hosts and its share of the rotation (actors/cluster.hpp).
using cluster_actor = caf::typed_actor<
  // This node's own rotation (the fleet's, before the other nodes' are
  // added): published under its lease.
  caf::reacts_to<rotation_snapshot>,
  // Its links' states: a host whose link stays down is given up.
  caf::reacts_to<link_status>,
  // A proxy found a newer owner's token in its domain's mark: the host is
  // not this node's any more, whatever the store said last.
  caf::reacts_to<atom::superseded, std::string, int64_t>,
  // Revokes the lease (the hosts go to the other nodes at once) and answers.
  caf::replies_to<atom::shutdown>::with<bool>,
  // A reload's config: the hosts to own from now on (a host that left it is
  // released).
  caf::reacts_to<atom::reload, engine_config>,
  // Internal: the keepalive tick, the claim tick, the watch's restart.
  caf::reacts_to<atom::lease, atom::poll>,
  // Internal: the deadline of the last confirmed keepalive (the phase
  // leaves member then, not at the next tick).
  caf::reacts_to<atom::lease>,
  caf::reacts_to<atom::claim, atom::poll>,
  caf::reacts_to<atom::watch, atom::poll>,
  // Internal: one batch of the store's watch (its number, its revision).
  caf::reacts_to<atom::watch, uint64_t, int64_t, std::vector<store_change>>>;

/// The engine's root: desired state from config, status for everyone.
using fleet_actor = status_interface<fleet_status>::extend<
  // The actors the fleet runs that the query names, with their state and
  // handle (the inspector's directory); for kind "call", the actors that
  // own calls.
  caf::replies_to<atom::ls, ls_query>::with<std::vector<directory_row>>,
  caf::replies_to<atom::link, std::string>::with<host_link_actor>,
  caf::replies_to<atom::kill, std::string>::with<link_status>,
  // Drains (true) or undrains (false) one proxy (the health actor's).
  caf::replies_to<atom::drain, std::string, bool>::with<proxy_health>,
  // drain-host (true): cordons the host and moves its group members to other
  // hosts, each replacement in the rotation before its original is drained
  // and deleted; undrain-host (false) lifts the cordon (actors/fleet_drain.cpp).
  caf::replies_to<atom::cordon, std::string, bool>::with<host_drain>,
  // Internal: a handed-over member's old VM goes now (its connections had
  // the drain grace).
  caf::reacts_to<atom::erase, atom::poll, std::string>,
  // Asks one proxy to reconcile now; answers with its last status.
  caf::replies_to<atom::reconcile, std::string>::with<proxy_status>,
  // Deletes one proxy's VM and retires its actor (until the next config).
  caf::replies_to<atom::erase, std::string>::with<proxy_status>,
  // Applies a new configuration: validated strictly first (an invalid one is
  // refused with the reason and changes nothing), then only the difference:
  // new proxies start, removed ones are deleted, changed ones are replaced,
  // changed hosts get a new link. Answers with a summary of what changed.
  caf::replies_to<atom::reload, engine_config>::with<std::string>,
  // Runs garbage collection now on every host (also run after start and
  // after each reload when engine.gc is on).
  caf::replies_to<atom::gc>::with<std::vector<gc_report>>,
  // Internal: the collection schedule (retried until a pass succeeded on
  // every host, then periodic).
  caf::reacts_to<atom::gc, atom::poll>,
  // Internal: the placement tick (group members placed anew, or again off
  // a lost host).
  caf::reacts_to<atom::place, atom::poll>,
  // The Prometheus text exposition of the fleet's metrics (fleet_metrics.cpp).
  caf::replies_to<atom::metrics>::with<std::string>,
  // Adds a subscriber for rotation changes.
  caf::reacts_to<atom::subscribe, rotation_events_actor>,
  // Adds a follower of the rotation (sent the current one at once).
  caf::reacts_to<atom::subscribe, rotation_follower_actor>,
  // The rotation now (GET /rotation, an embedding application).
  caf::replies_to<atom::rotation>::with<rotation_view>,
  // Internal: the rotation changed a moment ago; publish it to followers.
  caf::reacts_to<atom::rotation, atom::poll>,
  // Adds a watcher of engine_events (dropped when it goes down).
  caf::reacts_to<atom::subscribe, engine_events_actor>,
  // Stops the engine: links are killed first (so no detached call stays
  // blocked), then proxies and links exit, then the fleet itself.
  caf::replies_to<atom::shutdown>::with<bool>,
  caf::reacts_to<link_down>,
  caf::reacts_to<link_status>,
  caf::reacts_to<proxy_status>,
  caf::reacts_to<image_status>,
  caf::reacts_to<proxy_health>,
  caf::reacts_to<gateway_status>,
  // A proxy saw a newer owner's token in its domain's mark (passed on to
  // the cluster actor).
  caf::reacts_to<atom::superseded, std::string, int64_t>,
  // The cluster's view changed: the hosts this node runs, the other nodes'
  // rotation (engine.cluster only).
  caf::reacts_to<cluster_snapshot>>;

/// This node's inspection point: this process's actors only. The node actor
/// below fronts it (and its peers') for caf-shell. Everything it answers is
/// serializable.
using inspector_actor = status_interface<fleet_status>::extend<
  // The fleet's actors the query names (a kind or all, a name or all, with
  // or without their details), each with its state and a liveness probe:
  // CAF's built-in sys/get/"info" request with a short timeout, so a wedged
  // actor shows as "no reply" instead of hanging the shell.
  caf::replies_to<atom::ls, ls_query>::with<std::vector<actor_row>>,
  // watch: the watcher gets every engine_event from now on.
  caf::reacts_to<atom::subscribe, engine_events_actor>,
  // kill-link: declares the host's link dead now (it redials on the next call).
  caf::replies_to<atom::kill, std::string>::with<link_status>,
  // reconcile: the proxy reads its VM back now (and acts on what it finds).
  caf::replies_to<atom::reconcile, std::string>::with<proxy_status>,
  // drain / undrain: out of the rotation until undrained.
  caf::replies_to<atom::drain, std::string, bool>::with<proxy_health>,
  // drain-host / undrain-host (the fleet's).
  caf::replies_to<atom::cordon, std::string, bool>::with<host_drain>,
  // reload: re-reads the configuration the way the engine was started (the
  // node's own file; never a config sent over the wire) and applies only the
  // difference; answers with the summary, or refuses with the reasons and
  // changes nothing.
  caf::replies_to<atom::reload>::with<std::string>>;

/// A peer node's node actor as a receiver of this node's own events, each
/// with the token this node was given for them.
using node_events_actor = caf::typed_actor<caf::reacts_to<engine_event, std::string>>;

/// This process as one node among several (engine.node, engine.peers): what
/// caf-run publishes on the middleman (127.0.0.1 by default) for caf-shell
/// and for the other nodes, and the only actor of the engine that ever talks
/// to another process. It answers for every node it is connected to and
/// reports the nodes it cannot reach.
///
/// A party first says hello, a mutual challenge over the shared secret
/// (engine.inspect.secret-file; see actors/parts/admission.hpp: the secret itself
/// never crosses the wire) that ends with a token. Every other request
/// carries that token as its first argument. The sender of a message is
/// never trusted: BASP lets a connected party name any sender. Without a
/// configured secret the proofs use the empty secret and any token passes.
using node_actor = caf::typed_actor<
  // hello: (party nonce) -> (node nonce, node's proof); then (node nonce,
  // party nonce, party's proof) -> (this node's name, token).
  caf::replies_to<atom::hello, std::string>::with<std::string, std::string>,
  caf::replies_to<atom::hello, std::string, std::string, std::string>::with<std::string,
                                                                           std::string>,
  // (token, query, here only): every node's actors the query names (kind
  // "node" for the nodes themselves: up, dialing, or down since when and
  // why), each with the node it runs on. A node that does not answer in
  // time is listed as such. "here only": this node's actors (a peer asks).
  caf::replies_to<atom::ls, std::string, ls_query, bool>::with<std::vector<actor_row>>,
  // (token): this node's fleet.
  caf::replies_to<atom::status, std::string>::with<fleet_status>,
  // (token, watcher): watch: every node's events, plus nodes going up and
  // down.
  caf::reacts_to<atom::subscribe, std::string, engine_events_actor>,
  // (token, peer, its token): a peer's node actor, for this node's own
  // events only (it relays them; a relay of relays would loop between nodes
  // that list each other), each sent with the peer's token.
  caf::reacts_to<atom::subscribe, std::string, node_events_actor, std::string>,
  // (token, name, here only): kill-link, reconcile, drain, asked of this
  // node and every reachable peer at once; the owner of the name answers.
  caf::replies_to<atom::kill, std::string, std::string, bool>::with<link_status>,
  caf::replies_to<atom::reconcile, std::string, std::string, bool>::with<proxy_status>,
  caf::replies_to<atom::drain, std::string, std::string, bool, bool>::with<proxy_health>,
  caf::replies_to<atom::cordon, std::string, std::string, bool, bool>::with<host_drain>,
  // (token): reload: this node's own file.
  caf::replies_to<atom::reload, std::string>::with<std::string>,
  // (token, the dialing peer's node actor, a token of that peer's for this
  // node, its name, its inspector's address): a peer this node lists
  // dialed it first. It is taken as connected, so this node does not dial
  // it too (two dials between two nodes make two connections, and CAF's
  // OpenSSL module drops both routes when it closes the second).
  caf::reacts_to<atom::link, std::string, caf::actor, std::string, std::string, std::string>,
  // Events of this node's fleet (through a local relay) and of the peers',
  // with the token this node gave each of them.
  caf::reacts_to<engine_event, std::string>,
  // Internal: (own token, address) dial the configured peer at this
  // address again.
  caf::reacts_to<atom::poll, std::string, std::string>>;

} // namespace egress

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<egress::directory_row>)
