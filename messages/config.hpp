#pragma once
// The engine's configuration: what every component is given, whether it
// came from a CAF INI file (runtime/config_file.hpp reads one) or was built in
// code by an embedding application; and validate(), the one set of semantic
// checks both go through (names, references, ranges, the rules of
// invariant 20 for what may listen where).

#include <optional>
#include <string>
#include <vector>

#include <caf/expected.hpp>
#include <caf/timespan.hpp>

#include "messages/types.hpp"

namespace egress {

struct host_config {
  std::string name;
  std::string uri;          // libvirt URI; for `test-node` the resolved test:///<abs path>
  std::string domain_type;  // "test" for test:// URIs unless set; otherwise "kvm" unless set
  std::string pool;         // storage pool for the engine's volumes ("" = none yet)
  std::string network;      // default libvirt network for proxies on this host ("" = no NIC)
  // Where the host keeps each proxy's serial console log,
  // <dir>/<proxy>.console.log (absolute, on the host; "" = no log). The
  // directory must exist and be writable by the hypervisor's user.
  std::string console_log_dir;
  uint32_t max_calls = 5;   // libvirtd's max_client_requests default
  // VM creates at once, at most (a reload or a re-placement must not swamp
  // one libvirtd; the other calls pass queued creates).
  uint32_t max_creates = 3;
  // SSH sessions one image upload to this host uses at once, each with a
  // range of the image (docs/notes/transport.md#several-upload-streams: one
  // session encrypts on one thread). 1: measured fastest where the engine
  // shares two cores with the hosts' daemons; more pays only where the
  // engine has cores to spare.
  uint32_t upload_streams = 1;
  caf::timespan call_budget = std::chrono::seconds(30);
  caf::timespan connect_timeout = std::chrono::seconds(10);
  std::vector<std::string> address_sources{"lease", "agent", "arp"};

  // -- the path to the host -----------------------------------------------------
  // "direct": libvirt opens `uri` itself (the test driver, local tooling).
  // "ssh": the engine's own SSH link; `uri` is the libvirt URI on the host.
  // "local-socket": the engine's bridge in front of a local daemon socket.
  // ssh and local-socket share one pump and one kill path (docs/architecture.md).
  std::string transport = "direct";
  std::string address;          // ssh: numeric IP of the SSH server
  uint32_t port = 22;
  std::string user = "root";
  std::string key_file;         // ssh: ed25519 private key (absolute)
  std::string known_hosts;      // ssh: OpenSSH known_hosts (absolute), mandatory
  std::string remote_socket = "/var/run/libvirt/libvirt-sock";
  std::string remote_command;   // ssh: exec this instead of direct-streamlocal
  std::string socket;           // local-socket: the daemon's socket (absolute)
  std::string bridge_dir = "/tmp";
  // Liveness: libvirt keepalive (interval 0 disables), the SSH keepalive and
  // the pump's watchdog, and TCP_USER_TIMEOUT. The defaults release callers
  // of a silent peer within about 4 s.
  caf::timespan keepalive_interval = std::chrono::seconds(1);
  uint32_t keepalive_count = 3;
  caf::timespan ssh_keepalive = std::chrono::seconds(1);
  caf::timespan ssh_watchdog = std::chrono::seconds(3);
  caf::timespan tcp_user_timeout = std::chrono::seconds(10);
  // -- room for the members of proxy groups (actors/parts/placement.hpp) -------
  uint32_t max_proxies = 0;          // proxies of any kind at most (0: no limit)
  uint64_t memory_reserve_mib = 1024; // kept back from what libvirt reports free
  std::string zone; // members of a group spread over zones too ("": its own)
  /// In a cluster, the fencing token of this node's claim on the host (set
  /// by the fleet, never read from a file; 0: no cluster). Written into
  /// every mark the host's proxies write; a new claim is a new host for the
  /// difference of two configs, so its link and proxies start anew.
  int64_t fencing_token = 0;

  bool operator==(const host_config&) const = default;
};

/// A base image the cache keeps verified in each host's pool that needs it.
struct image_config {
  std::string name;
  std::string url;          // http://, https:// or file://
  std::string sha256;       // 64 hex digits, stored lowercase
  uint64_t size = 0;        // bytes; 0 = as the server declares it
  /// The most an image without a declared size may be: checked against the
  /// server's length before a volume is made (a hostile mirror must not
  /// fill a host's pool before the digest could tell it is wrong).
  uint64_t max_size = uint64_t{16} << 30; // 16 GiB
  std::string format = "qcow2"; // qcow2, raw, kernel or initrd
  caf::timespan transfer_budget = std::chrono::minutes(30);

  bool operator==(const image_config&) const = default;
};

/// A proxy group: `count` members named <name>-<n> (n from 1), which the
/// engine places on `hosts` by room and spread (actors/parts/placement.hpp)
/// and places again elsewhere when one of them stays lost (actors/parts/group_book.hpp).
/// Each member is `member` with its name and host filled in, and its
/// host's network where `member` names none.
struct group_config {
  std::string name;
  uint32_t count = 0;
  std::vector<std::string> hosts; // in the operator's order
  proxy_spec member;              // name and host empty
  /// Members placed again off a lost host that are not in the rotation yet,
  /// at most (the others wait).
  uint32_t max_surge = 1;

  bool operator==(const group_config&) const = default;
};

/// How the health actor probes proxies (docs/spec.md 12).
struct probe_config {
  /// "http": a request through the proxy to `target` must pass; "tcp": the
  /// proxy's port must accept; "off": no probes, the rotation follows the
  /// phase (for hosts whose addresses are not real, like the test driver's).
  std::string mode = "tcp";
  std::string target;      // http:// URL, required by and only for "http"
  caf::timespan interval = std::chrono::seconds(5); // between probes of one proxy in rotation
  caf::timespan timeout = std::chrono::seconds(3);  // bounds one probe
  uint32_t rise = 2;       // consecutive passes to join the rotation
  uint32_t fall = 3;       // consecutive failures to leave it

  bool operator==(const probe_config&) const = default;
};

/// A socket caf-run listens on: engine.inspect (CAF's middleman, for
/// caf-shell and the other nodes; the embedding API ignores it, an
/// application publishes engine::node() itself) and engine.metrics
/// (Prometheus, GET /metrics). Numeric addresses. The metrics endpoint
/// authenticates no one, so it is loopback only. The inspector always
/// speaks TLS with certificates checked on both sides (docs/spec.md 24):
/// its own CA's from CAF's [openssl] section (tls = true), or else the
/// identity caf-run generates on this machine (identity-dir). It may bind
/// off loopback only with tls = true and a shared secret; anything else is
/// refused before anything starts (invariant 20).
struct listen_config {
  bool enabled = true;
  std::string address = "127.0.0.1";
  uint32_t port = 0; // 0: any free port (caf-run logs which)
  /// engine.inspect only: the certificates are the operator's (CAF's
  /// [openssl] certificate, key, and cafile or capath): every shell and every
  /// peer node needs a certificate of that CA. Otherwise the generated
  /// identity below: TLS either way.
  bool tls = false;
  /// engine.inspect only, without tls: where the generated identity lives
  /// (providers/crypto/identity.hpp; "" = its default for this user).
  std::string identity_dir;
  /// engine.inspect only: a file holding the secret every shell and peer
  /// must present (hello) before anything else is answered. Resolved against
  /// the config file; mode 0600 or stricter; 16 characters at least.
  std::string secret_file;

  bool operator==(const listen_config&) const = default;
};

/// One HAProxy backend the gateway fills with servers: every proxy of the
/// rotation, or only those that carry `tag`. The backend belongs to the
/// engine: any server in it that is not in the rotation is drained and
/// removed.
struct gateway_backend {
  std::string name;
  std::string tag; // "" = every proxy of the rotation

  bool operator==(const gateway_backend&) const = default;
};

/// engine.gateway: HAProxy in front of the rotation, driven through its
/// runtime API (actors/gateway). HAProxy is the operator's process; the
/// engine only adds, drains and removes servers in the named backends.
struct gateway_config {
  bool enabled = false;
  /// HAProxy's admin socket (`stats socket ... level admin`): an absolute
  /// path, or IP:PORT on a loopback address.
  std::string socket;
  std::vector<gateway_backend> backends{{"egress", ""}};
  /// How long a proxy that left keeps its connections in flight before
  /// HAProxy is told to end them and the server is removed.
  caf::timespan drain_grace = std::chrono::seconds(30);
  /// One sync with HAProxy (every command of it) must end within this.
  caf::timespan call_budget = std::chrono::seconds(2);
  /// How often HAProxy's servers are read back and compared with the
  /// rotation when nothing changed (a restarted HAProxy has lost them).
  caf::timespan resync_interval = std::chrono::seconds(2);

  bool operator==(const gateway_config&) const = default;
};

/// CAF's own [openssl] settings, which engine.inspect.tls needs (paths
/// resolved against the config file; caf-run hands them back to CAF).
struct tls_files {
  std::string certificate;
  std::string key;
  std::string cafile;
  std::string capath;

  bool operator==(const tls_files&) const = default;
};

/// engine.cluster: several nodes share the hosts through leases in etcd
/// (actors/cluster, docs/architecture.md "Node failover"). Off: the node runs
/// every host of its config, needing no etcd.
struct cluster_config {
  bool enabled = false;
  /// etcd's client URLs (http://host:port or https://), tried in order.
  std::vector<std::string> etcd;
  /// The node's lease: kept alive every third of it; the node stops
  /// changing its hosts once its last confirmed keepalive is older than two
  /// thirds of it, and its hosts go to other nodes when etcd expires it.
  caf::timespan lease_ttl = std::chrono::seconds(10);
  /// Bounds one request to one etcd endpoint.
  caf::timespan request_timeout = std::chrono::seconds(2);
  /// A host whose link stays down this long while etcd answers is given up,
  /// so that a node that can reach it may take it (0: never).
  caf::timespan unreachable_release = std::chrono::seconds(60);
  /// Keys live under <prefix>/<entry>/ (nodes/, hosts/, rotation/).
  std::string prefix = "/egress-engine";
  /// https: etcd's CA (absolute after loading), and a client certificate.
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  /// etcd's own authentication: a user and the file holding its password
  /// (private, like the inspector's secret).
  std::string user;
  std::string password_file;
  std::string password; // the file's content; never dumped

  bool operator==(const cluster_config&) const = default;
};

struct engine_config {
  std::string config_file;  // the file it came from ("" when built in code)
  /// The packaged example says so (engine.unedited): it is refused, with
  /// what to do, until an operator has made it theirs.
  bool unedited = false;
  std::string entry;        // provider entry: written into every mark
  caf::timespan poll_interval = std::chrono::seconds(2);
  // Each link's bulk read of every domain's state: the safety net under
  // libvirt's events (actors/host_link_watch).
  caf::timespan bulk_read_interval = std::chrono::seconds(30);
  uint32_t address_grace = 3; // polls a running proxy keeps its last address
  caf::timespan shutdown_timeout = std::chrono::seconds(10);
  caf::timespan redial_min = std::chrono::milliseconds(500);
  caf::timespan redial_max = std::chrono::seconds(30);
  /// Delete domains (and their volumes) whose mark names this entry but that
  /// no proxy declares, on start and after every reload. Unmarked domains
  /// and other entries' are never touched, whatever this says.
  bool gc = true;
  probe_config probe;
  listen_config inspect{true, "127.0.0.1", 4040, false, {}, {}};
  listen_config metrics{true, "127.0.0.1", 9464, false, {}, {}};
  gateway_config gateway;
  tls_files tls;
  /// engine.inspect.secret-file's content ("": none required). Never dumped.
  std::string inspect_secret;
  /// This process's name among several engine nodes (default: the entry).
  /// Nodes of one entry must own disjoint hosts and have distinct names.
  std::string node;
  /// Other nodes' inspectors ("HOST:PORT"): the node actor dials each one
  /// through the middleman and keeps redialing it, so that caf-shell attached
  /// to any node sees every node's actors. Settled at start (a reload that
  /// changes it is refused).
  std::vector<std::string> peers;
  cluster_config cluster;
  /// engine.stage-dir: where this node keeps its own verified copy of each
  /// image, fetched from the mirror once and uploaded from there to every
  /// host that lacks it (providers/images/stage.hpp). "": each host's fill
  /// downloads the image itself. Settled at start.
  std::string stage_dir;
  std::vector<host_config> hosts;
  std::vector<image_config> images;
  std::vector<proxy_spec> proxies; // network already defaulted from the host
  std::vector<group_config> groups;
  /// How long a host's link must stay down before its group members are
  /// placed on other hosts of their groups.
  caf::timespan host_grace = std::chrono::minutes(5);
};

/// Validates an engine_config: names, references, duplicates, ranges. Every
/// problem found is reported (not just the first), one per line, as
/// "<file>: <key path>: <problem>", inside a permanent ec::config_invalid
/// error. The file loader runs the same checks after its own.
caf::error validate(const engine_config& cfg);

/// engine.node, or the entry when it is not set.
std::string node_name(const engine_config& cfg);

/// "HOST:PORT" split at its last colon; nullopt unless the port is 1..65535
/// and the host is not empty.
std::optional<std::pair<std::string, uint16_t>> split_host_port(const std::string& s);

} // namespace egress
