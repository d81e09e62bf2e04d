#pragma once
// Plain data that travels between the engine's actors (and, later, to
// caf-shell over the middleman). Every type has an inspect() overload so CAF
// can copy, print and serialize it. No handles, no pointers: state that is
// read back from libvirt, never remembered.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <caf/meta/type_name.hpp>
#include <caf/timespan.hpp>

#include "messages/actor_kind.hpp"

namespace egress {

/// The metadata mark the engine writes into every domain it creates. It is how
/// a restarted engine recognizes its own VMs (adopt) and how it decides what
/// it may garbage-collect (only marks naming its own provider entry).
struct domain_mark {
  std::string uid;        // random, assigned at creation, stable across restarts
  std::string created_at; // RFC 3339 UTC
  std::string entry;      // the provider entry that owns this domain
  std::string spec_hash;  // sha256 over the declared spec: a change means replace
  std::vector<std::string> tags;
  // The host that created it ("" in marks written before it existed).
  // Two hosts that reach one daemon must not collect each other's VMs.
  std::string host;
  // In a cluster (engine.cluster): the node that last claimed the host and
  // its fencing token. A node never changes a domain whose mark carries a
  // newer token than its own claim ("" and 0 outside a cluster).
  std::string owner;
  int64_t token = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, domain_mark& x) {
  return f(caf::meta::type_name("domain_mark"), x.uid, x.created_at, x.entry,
           x.spec_hash, x.tags, x.host, x.owner, x.token);
}

/// One declared proxy, as validated from the config.
struct proxy_spec {
  std::string name;
  std::string host;
  uint32_t vcpus = 1;
  uint32_t memory_mib = 128;
  std::string network;
  std::vector<std::string> tags;
  std::string image; // the declared image its disk is based on ("" = none)
  uint32_t port = 8888;                      // the proxy's port in the VM (seed)
  std::string allow_from = "192.168.122.0/24"; // clients it serves (seed)
  // Kernel boot (an appliance that runs from its initramfs): declared images
  // of format kernel and initrd, referenced by path; no disk needed.
  std::string kernel;
  std::string initrd;
  std::string cmdline;

  bool operator==(const proxy_spec&) const = default;

  /// Every declared image this proxy needs, disk first.
  std::vector<std::string> images() const {
    std::vector<std::string> out;
    for (auto* x : {&image, &kernel, &initrd})
      if (!x->empty())
        out.push_back(*x);
    return out;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, proxy_spec& x) {
  return f(caf::meta::type_name("proxy_spec"), x.name, x.host, x.vcpus,
           x.memory_mib, x.network, x.tags, x.image, x.port, x.allow_from, x.kernel,
           x.initrd, x.cmdline);
}

/// Everything the libvirt provider needs to define one domain.
struct domain_spec {
  std::string name;
  std::string domain_type; // "test" for the test driver, "qemu" or "kvm"
  uint32_t vcpus = 1;
  uint32_t memory_mib = 128;
  std::string network;     // libvirt network for the NIC; empty = no NIC
  std::string console_log; // path of the serial console log; empty = none
  std::string disk;        // path of the system disk (the overlay); empty = none
  std::string disk_format; // its format: qcow2 or raw
  std::string seed;        // path of the cloud-init seed ISO; empty = none
  std::string kernel;      // path of the kernel to boot directly; empty = none
  std::string initrd;      // its initramfs (only with a kernel)
  std::string cmdline;     // its command line (only with a kernel)
  std::string mac;         // its NIC's MAC ("52:54:00:..."); empty = libvirt picks one
  domain_mark mark;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, domain_spec& x) {
  return f(caf::meta::type_name("domain_spec"), x.name, x.domain_type, x.vcpus,
           x.memory_mib, x.network, x.console_log, x.disk, x.disk_format, x.seed,
           x.kernel, x.initrd, x.cmdline, x.mac, x.mark);
}

/// libvirt's virDomainState, in our own words.
enum class domain_state : uint8_t {
  nostate = 0,
  running = 1,
  blocked = 2,
  paused = 3,
  shutdown = 4,
  shutoff = 5,
  crashed = 6,
  pmsuspended = 7,
};

const char* to_string(domain_state x);

/// What a host says happened to one of its domains: libvirt's lifecycle
/// and agent events in our words.
enum class domain_change : uint8_t {
  defined = 0,
  undefined = 1,
  started = 2,
  suspended = 3,
  resumed = 4,
  stopped = 5,
  shutdown = 6,   // the guest is shutting down (it still runs)
  crashed = 7,
  pmsuspended = 8,
  agent = 9,      // its guest agent connected or went away
  other = 10,     // an event this engine has no name for: read it back
  metadata = 11,  // its mark was rewritten (in a cluster: by a newer owner)
};

const char* to_string(domain_change x);

/// True for a change after which the domain no longer runs.
bool ends_running(domain_change x);

/// One change of one domain, sent by the host's link to the domain's proxy.
/// `generation` is the link's dial that saw it (older ones are dropped).
struct domain_event {
  std::string host;
  std::string name;
  domain_change change = domain_change::other;
  uint64_t generation = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, domain_event& x) {
  return f(caf::meta::type_name("domain_event"), x.host, x.name, x.change, x.generation);
}

/// Whether a bulk read listed the host's DHCP leases (docs/spec.md 28).
enum class lease_view : uint8_t {
  not_read = 0,    // not asked this time (no MAC known to the link)
  read = 1,        // read: `addresses` is what the leases give its MACs (maybe none)
  unsupported = 2, // the host cannot list leases (the test driver): read your own
  failed = 3,      // the lease list failed this time: read your own until it works
};

const char* to_string(lease_view x);

/// One domain as a bulk read sees it: enough for its proxy to tell whether
/// it is what the proxy believes (a bulk read pushes one to every watching
/// proxy; one whose domain is missing gets exists == false), and, from the
/// host's lease lists, the addresses of its MACs.
struct domain_brief {
  std::string name;
  bool exists = true;
  std::string uuid; // a domain undefined and defined again gets a new one
  domain_state state = domain_state::nostate;
  // When the bulk read started (steady clock, this process): a brief older
  // than the proxy's own last read-back tells it nothing new.
  caf::timespan taken{0};
  lease_view leases = lease_view::not_read;
  std::vector<std::string> addresses; // with leases == read: its leased addresses
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, domain_brief& x) {
  return f(caf::meta::type_name("domain_brief"), x.name, x.exists, x.uuid, x.state, x.taken,
           x.leases, x.addresses);
}

/// A proxy tells its link the MACs of its domain, and whether it waits for
/// an address (none yet, or inside its IP grace): while any proxy waits, the
/// link reads the host's leases every lease interval instead of only with
/// its safety-net bulk read.
struct address_watch {
  std::string name;
  std::vector<std::string> macs;
  bool waiting = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, address_watch& x) {
  return f(caf::meta::type_name("address_watch"), x.name, x.macs, x.waiting);
}

/// What one read-back of one domain found.
struct domain_reading {
  std::string name;
  bool exists = false;
  std::string uuid; // which domain of that name (libvirt's handle knows it: no round trip)
  domain_state state = domain_state::nostate;
  bool has_mark = false;
  domain_mark mark;
  std::vector<std::string> addresses; // "10.0.0.5" (no prefix length)
  std::vector<std::string> macs;      // its NICs' MACs, when asked for or known from its spec
  std::vector<std::string> notes;     // per-source failures that did not fail the read
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, domain_reading& x) {
  return f(caf::meta::type_name("domain_reading"), x.name, x.exists, x.uuid, x.state,
           x.has_mark, x.mark, x.addresses, x.macs, x.notes);
}

// -- status snapshots ---------------------------------------------------------

enum class link_state : uint8_t { dialing = 0, up = 1, dead = 2 };

const char* to_string(link_state x);

struct link_status {
  std::string host;
  link_state state = link_state::dialing;
  std::string reason;   // why it is dead (empty otherwise)
  uint32_t in_flight = 0;
  uint32_t queued = 0;
  uint32_t limit = 0;
  // libvirt connections held: open, opening, or (their lazy open failed)
  // to be opened again by the next call given them
  uint32_t connections = 0;
  uint64_t dials = 0;   // transports dialed so far
  uint64_t deaths = 0;  // times this link was marked dead
  uint64_t overruns = 0;        // calls that ran past their budget
  uint32_t abandoned_calls = 0; // given up on, their threads still running
  uint64_t events = 0;          // domain events received (all generations)
  uint64_t bulk_reads = 0;      // bulk reads of every domain's state done
  uint64_t lease_reads = 0;     // of them, those that listed the host's DHCP leases
  lease_view leases = lease_view::not_read; // what its last lease list found
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, link_status& x) {
  return f(caf::meta::type_name("link_status"), x.host, x.state, x.reason,
           x.in_flight, x.queued, x.limit, x.connections, x.dials, x.deaths, x.overruns,
           x.abandoned_calls, x.events, x.bulk_reads, x.lease_reads, x.leases);
}

enum class proxy_phase : uint8_t {
  pending = 0,      // declared, nothing done yet
  creating = 1,     // define + start in progress
  provisioning = 2, // running, no address yet
  running = 3,      // running with an address
  failed = 4,       // a permanent error; needs a config change or operator
  deleting = 5,
  deleted = 6,
};

const char* to_string(proxy_phase x);

struct proxy_status {
  std::string name;
  std::string host;
  proxy_phase phase = proxy_phase::pending;
  std::string address;
  std::string uid;
  std::string created_at; // from the mark: survives restarts
  bool adopted = false;   // found by its mark instead of created by us
  std::string last_error; // rendered error, empty when the last poll was fine
  std::string last_error_kind;
  uint64_t polls = 0;
  uint32_t grace_left = 0; // > 0: running on its last address while reads show none
  uint64_t replaced = 0;   // times its VM was replaced after a spec change
  uint32_t last_poll_ms = 0; // the last reconcile read-back, request to answer
  // From the health actor (filled in by the fleet's status):
  bool in_rotation = false;
  uint64_t probes_ok = 0;
  uint64_t probes_failed = 0;
  int32_t probe_streak = 0;  // > 0: consecutive passes; < 0: consecutive failures
  std::string last_probe;    // the last probe's outcome, for people
  uint32_t probe_ms = 0;     // latency of the last passing probe
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, proxy_status& x) {
  return f(caf::meta::type_name("proxy_status"), x.name, x.host, x.phase,
           x.address, x.uid, x.created_at, x.adopted, x.last_error,
           x.last_error_kind, x.polls, x.grace_left, x.replaced, x.last_poll_ms,
           x.in_rotation,
           x.probes_ok, x.probes_failed, x.probe_streak, x.last_probe, x.probe_ms);
}

/// One proxy as the health actor sees it: probe counters and rotation
/// membership. Pushed to the fleet on every change.
struct proxy_health {
  std::string name;
  std::string host;
  std::string address; // the address the probes went to
  bool in_rotation = false;
  uint64_t probes_ok = 0;
  uint64_t probes_failed = 0;
  int32_t streak = 0;
  std::string last_probe;
  uint32_t probe_ms = 0;
  bool drained = false; // an operator took it out (caf-shell drain); probes go on
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, proxy_health& x) {
  return f(caf::meta::type_name("proxy_health"), x.name, x.host, x.address,
           x.in_rotation, x.probes_ok, x.probes_failed, x.streak, x.last_probe,
           x.probe_ms, x.drained);
}

/// A change of the rotation (the healthy set), for subscribers.
struct rotation_event {
  std::string proxy;
  std::string host;
  std::string address;
  bool joined = false; // false: left
  std::string reason;  // "2 probes passed", "3 probes failed: HTTP 502", "link down: ..."
  uint32_t size = 0;   // the rotation's size after the change
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, rotation_event& x) {
  return f(caf::meta::type_name("rotation_event"), x.proxy, x.host, x.address,
           x.joined, x.reason, x.size);
}

/// One proxy of the rotation as its consumers see it (GET /rotation, the
/// gateway): where a client's traffic may leave.
struct rotation_member {
  std::string name;
  std::string host;
  std::string address; // the proxy's IP, without the port
  uint32_t port = 0;   // the proxy's port in the VM
  std::vector<std::string> tags;
  std::string joined_at; // RFC 3339, when it joined this time
  uint32_t probe_ms = 0; // its last passing probe's latency (0: not probed)

  bool operator==(const rotation_member&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, rotation_member& x) {
  return f(caf::meta::type_name("rotation_member"), x.name, x.host, x.address, x.port, x.tags,
           x.joined_at, x.probe_ms);
}

/// The rotation at one generation: the generation grows by one with every
/// join and every leave (never with a latency alone), so a consumer that
/// saw generation G and is shown G again has missed nothing.
struct rotation_view {
  std::string node;
  uint64_t generation = 0;
  std::vector<rotation_member> members; // sorted by name
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, rotation_view& x) {
  return f(caf::meta::type_name("rotation_view"), x.node, x.generation, x.members);
}

/// What the gateway (actors/gateway) knows of the HAProxy it drives.
enum class haproxy_state : uint8_t {
  off = 0,         // no engine.gateway
  connecting = 1,  // no sync has reached HAProxy yet
  in_sync = 2,     // the last sync left HAProxy's servers as the rotation says
  out_of_sync = 3, // HAProxy answered, but refused a command (last_error says which)
  unreachable = 4, // the last sync could not talk to HAProxy (gone, hung, garbage)
};

const char* to_string(haproxy_state x);

/// One HAProxy backend the gateway fills.
struct gateway_backend_status {
  std::string name;
  std::string tag;       // "" = every proxy of the rotation
  uint32_t servers = 0;  // ours in HAProxy, ready at the rotation's address
  uint32_t desired = 0;  // the rotation's members for this backend
  uint32_t draining = 0; // left the rotation, still serving connections in flight
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, gateway_backend_status& x) {
  return f(caf::meta::type_name("gateway_backend_status"), x.name, x.tag, x.servers, x.desired,
           x.draining);
}

struct gateway_status {
  std::string socket; // HAProxy's admin socket (path or IP:PORT)
  haproxy_state state = haproxy_state::off;
  std::string reason;     // why unreachable or out of sync
  uint64_t generation = 0; // the rotation generation the last good sync applied
  std::vector<gateway_backend_status> backends;
  uint64_t syncs = 0;      // syncs that reached HAProxy
  uint64_t commands = 0;   // commands HAProxy accepted
  uint64_t refused = 0;    // commands HAProxy refused
  uint64_t resyncs = 0;    // restarts of HAProxy seen (a new pid), each filled again
  uint64_t drains = 0;     // servers removed after their drain
  uint64_t errors_gone = 0;    // the socket refused or missing
  uint64_t errors_timeout = 0; // no whole answer within the call budget
  uint64_t errors_garbage = 0; // an answer that is not HAProxy's, or too long
  int64_t retry_in_ms = 0;     // unreachable: until the next attempt
  std::string last_sync_at;    // RFC 3339 of the last sync that reached HAProxy
  uint32_t last_sync_ms = 0;   // how long it took
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, gateway_status& x) {
  return f(caf::meta::type_name("gateway_status"), x.socket, x.state, x.reason, x.generation,
           x.backends, x.syncs, x.commands, x.refused, x.resyncs, x.drains, x.errors_gone,
           x.errors_timeout, x.errors_garbage, x.retry_in_ms, x.last_sync_at, x.last_sync_ms);
}

/// What one garbage-collection pass on one host removed.
struct gc_report {
  std::string host;
  std::vector<std::string> domains; // marked with our entry, declared nowhere
  std::vector<std::string> volumes; // their overlay and seed volumes
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, gc_report& x) {
  return f(caf::meta::type_name("gc_report"), x.host, x.domains, x.volumes);
}


enum class image_state : uint8_t {
  absent = 0,   // not checked or fetched yet
  fetching = 1, // a fill runs: check, download + upload, verify
  ready = 2,    // the verified data volume is in the pool
  failed = 3,   // the last fill failed; transient ones retry after retry_in_ms
};

const char* to_string(image_state x);

/// One image cached image on one host.
struct image_status {
  std::string image;
  std::string host;
  image_state state = image_state::absent;
  std::string volume;        // the data volume, once ready
  uint64_t bytes = 0;        // of the image, during and after a transfer
  uint64_t total = 0;        // 0 until known
  uint64_t rate_bps = 0;     // bytes per second over the last progress tick
  uint64_t eta_s = 0;        // at that rate; 0 when unknown
  uint64_t resumed_from = 0; // the offset the last transfer resumed at
  uint64_t fills = 0;        // fills started (checks and transfers)
  uint64_t transfers = 0;    // fills that moved bytes
  uint32_t waiters = 0;
  std::string last_error;
  std::string last_error_kind;
  int64_t retry_in_ms = 0;   // failed and transient: until the next fill may start
  uint64_t moved_total = 0;  // bytes streamed from the mirror into the pool, all fills
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, image_status& x) {
  return f(caf::meta::type_name("image_status"), x.image, x.host, x.state, x.volume,
           x.bytes, x.total, x.rate_bps, x.eta_s, x.resumed_from, x.fills, x.transfers,
           x.waiters, x.last_error, x.last_error_kind, x.retry_in_ms, x.moved_total);
}

/// What a waiter gets once the image is in the pool, verified.
struct image_ready {
  std::string image;
  std::string host;
  std::string volume;
  std::string path;
  uint64_t length = 0;       // bytes in the data volume
  uint64_t virtual_size = 0; // the disk a guest sees (qcow2: from its header)
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, image_ready& x) {
  return f(caf::meta::type_name("image_ready"), x.image, x.host, x.volume, x.path,
           x.length, x.virtual_size);
}

/// A proxy group as status and metrics show it.
struct group_status {
  std::string name;
  uint32_t count = 0;
  uint32_t placed = 0;    // members with a host
  uint32_t replacing = 0; // placed again off a lost host, not in the rotation yet
  std::string held;       // why nothing of it is placed now, or ""
  std::map<std::string, uint32_t> per_host;
  std::vector<std::string> waiting; // "eu-3: why it does not run where it should"
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, group_status& x) {
  return f(caf::meta::type_name("group_status"), x.name, x.count, x.placed, x.replacing,
           x.held, x.per_host, x.waiting);
}

/// A host's cordon and drain (caf-shell drain-host, ls hosts, status).
struct host_drain {
  std::string host;
  bool cordoned = false;
  bool draining = false;  // drain-host asked: its members leave, one wave at a time
  uint32_t members = 0;   // group members still running there
  uint32_t moving = 0;    // replacements being made elsewhere
  uint32_t moved = 0;     // handed over since the drain began
  std::string waiting;    // why a member cannot leave now, or ""
};

/// "cordoned, draining: 2 member(s) left, 1 moving, 3 moved (waiting: ...)":
/// the one line ls, status and the shell print for a drain.
std::string describe(const host_drain& x);

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, host_drain& x) {
  return f(caf::meta::type_name("host_drain"), x.host, x.cordoned, x.draining, x.members,
           x.moving, x.moved, x.waiting);
}

/// A change of a key in the cluster's store (etcd), as its watch reports it:
/// a put (with its value) or a delete.
struct store_change {
  bool deleted = false;
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t lease = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, store_change& x) {
  return f(caf::meta::type_name("store_change"), x.deleted, x.key, x.value,
           x.create_revision, x.mod_revision, x.lease);
}

/// A host as the cluster sees it: which node owns it under which fencing
/// token, and whether this node may change it yet (caf-shell ls hosts).
struct host_owner {
  std::string host;
  std::string owner;       // "" = nobody (claimable)
  int64_t token = 0;       // the revision of the owner's claim
  std::string state;       // "mine", "mine, guard 12 s left", "claiming", "theirs", "free"
  std::string wanted_by;   // the node the hosts are spread to (rendezvous)
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, host_owner& x) {
  return f(caf::meta::type_name("host_owner"), x.host, x.owner, x.token, x.state,
           x.wanted_by);
}

/// A node of the cluster as the store lists it (caf-shell ls nodes).
struct cluster_member {
  std::string name;
  int64_t lease = 0;
  uint32_t hosts = 0;                // hosts it owns
  std::vector<std::string> avoid;    // hosts it gave up for want of a link
  uint32_t rotation = 0;             // its proxies in the rotation
  double lease_age_s = 0;            // since this node first saw it under this lease
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, cluster_member& x) {
  return f(caf::meta::type_name("cluster_member"), x.name, x.lease, x.hosts, x.avoid,
           x.rotation, x.lease_age_s);
}

/// This node in the cluster: its lease, what it owns, what it refused.
struct cluster_status {
  bool enabled = false;
  std::string phase;          // joining, member, fenced (actors/cluster.hpp)
  std::string reason;         // why it is not a member, or ""
  int64_t lease = 0;
  double lease_age_s = -1;    // since the last confirmed keepalive was sent (-1: none)
  int64_t revision = 0;       // the store's revision last seen
  std::vector<cluster_member> nodes;
  std::vector<host_owner> hosts;
  uint64_t claims_won = 0;
  uint64_t hosts_lost = 0;    // owned hosts that left this node (given up, expired)
  uint64_t fenced = 0;        // times this node stopped changing its hosts
  uint64_t refusals = 0;      // calls refused by a closed fence or a newer mark
  uint64_t store_errors = 0;  // etcd requests that failed
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, cluster_status& x) {
  return f(caf::meta::type_name("cluster_status"), x.enabled, x.phase, x.reason, x.lease,
           x.lease_age_s, x.revision, x.nodes, x.hosts, x.claims_won, x.hosts_lost, x.fenced,
           x.refusals, x.store_errors);
}

struct fleet_status {
  std::string node;  // engine.node: this process among several (caf-shell ls nodes)
  std::string entry;
  std::vector<link_status> links;
  std::vector<proxy_status> proxies;
  std::vector<image_status> images;
  std::vector<std::string> rotation; // the healthy set, sorted by name
  uint64_t reloads = 0;              // configs applied after the first
  std::string last_reload;           // "applied: +1 -0 ~2" or the rejection
  uint64_t generation = 0;           // the rotation's (rotation_view)
  gateway_status gateway;            // state off without engine.gateway
  std::vector<group_status> groups;
  uint64_t replacements = 0;         // members placed again off lost hosts
  std::vector<host_drain> drains;    // cordoned hosts
  cluster_status cluster;            // enabled = false without engine.cluster
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, fleet_status& x) {
  return f(caf::meta::type_name("fleet_status"), x.node, x.entry, x.links, x.proxies, x.images,
           x.rotation, x.reloads, x.last_reload, x.generation, x.gateway, x.groups,
           x.replacements, x.drains, x.cluster);
}

/// A change worth showing to a person watching the engine (caf-shell
/// watch): a link going up or down, an image's progress or state, a proxy's
/// phase or address, the rotation. Derived by the fleet from the status
/// pushes it keeps anyway.
struct engine_event {
  std::string at;    // RFC 3339, when the fleet saw it
  // What it is about: an actor_kind's to_string (link, image, proxy,
  // gateway, node), or "rotation" (a proxy joined or left it).
  std::string kind;
  std::string name;  // host, image@host, proxy, node
  std::string what;  // "down: killed: by operator", "45% of 66 MB, 12 MB/s, ETA 3 s", ...
  std::string node;  // the node whose fleet saw it (engine.node)
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, engine_event& x) {
  return f(caf::meta::type_name("engine_event"), x.at, x.kind, x.name, x.what, x.node);
}

/// What an `ls` asks for: the actors of one kind (an actor_kind's
/// to_string; "" for every kind), of one name or of every name (""), and
/// whether their detail lines come with them. caf-shell's `ls` prints no
/// detail and `show` wants one actor: at 100,000 proxies the details were
/// most of a listing's bytes and of the fleet's time to build it
/// (docs/notes/scale.md#ls-proxies).
struct ls_query {
  std::string kind;
  std::string name;
  bool details = true;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ls_query& x) {
  return f(caf::meta::type_name("ls_query"), x.kind, x.name, x.details);
}

/// One actor as the inspector shows it (caf-shell's ls and show).
struct actor_row {
  actor_kind kind = actor_kind::fleet;
  std::string name;       // host, image@host, proxy name, "fleet"
  std::string state;      // from its status: up/dead, ready, running, ...
  std::string started_at; // RFC 3339, when the fleet spawned it
  std::string liveness;   // "ok 0.4 ms", "no reply within 300 ms", "ended"
  std::vector<std::string> details; // "key: value" lines for `show`
  std::string node;       // the node it runs on (filled by the node actor)
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, actor_row& x) {
  return f(caf::meta::type_name("actor_row"), x.kind, x.name, x.state, x.started_at,
           x.liveness, x.details, x.node);
}

/// Broadcast by a host link when it dies, before its transport is killed.
struct link_down {
  std::string host;
  std::string reason;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, link_down& x) {
  return f(caf::meta::type_name("link_down"), x.host, x.reason);
}

} // namespace egress
