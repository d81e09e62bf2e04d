#pragma once
// etcd v3 (Debian 12's etcd-server 3.4) through its HTTP/JSON gateway, with
// libcurl and nlohmann_json: the store engine nodes share (which node owns
// which host, each node's lease, each node's share of the rotation;
// docs/architecture.md, "Node failover"). Synchronous: every call blocks its
// thread for at most `timeout`, so callers run it in a detached call actor.
//
//   auto c = etcd::client::make({.endpoints = {"http://127.0.0.1:2379"}});
//   auto l = c->grant(std::chrono::seconds(10));         // {id, ttl}
//   auto won = c->claim("/egress/e/hosts/hv1", "node-a", l->id);
//   if (won && won->won) token = won->revision;         // the fencing token
//
// Keys and values are bytes (the gateway's base64 is this file's business).
// Endpoints are tried in order: a refused or silent endpoint makes the
// request go to the next one within the same call (each gets `timeout`),
// and the one that answered is tried first next time. Errors:
//   transient/store_unreachable  no endpoint answered (refused, reset,
//                                timeout, etcd without quorum: "etcdserver:
//                                request timed out", HTTP 503)
//   transient/store_garbage      an answer that is not JSON of the expected
//                                shape (or larger than max_answer)
//   permanent/store_refused      etcd refused (auth, a bad request; for
//                                keepalive and revoke see there), or TLS
//                                did: the server's certificate does not
//                                verify, ours or its key is unusable
//   permanent/invalid_argument   make(): no endpoint, an endpoint that is
//                                not http(s)://host:port, a TLS file missing

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

namespace egress::etcd {

// Every member has an initializer, so that designated initializers naming
// only some of them (as above) compile under -Wextra (GCC's
// -Wmissing-field-initializers skips members that have one).
struct client_options {
  /// http://host:port or https://host:port, in the order to try them.
  std::vector<std::string> endpoints{};
  /// https: the CA that signed the servers' certificates (absolute; "" =
  /// the system's), and a client certificate and key when the server asks
  /// for one.
  std::string ca_file{};
  std::string cert_file{};
  std::string key_file{};
  /// etcd's own authentication (/v3/auth/authenticate): when user is set,
  /// a token is fetched on first use and again when etcd says it expired;
  /// every request carries it in the Authorization header.
  std::string user{};
  std::string password{};
  /// Bounds one request to one endpoint, connect included.
  std::chrono::milliseconds timeout{2000};
  /// The longest answer read (a range of every host's key is small).
  size_t max_answer = size_t{16} << 20;
};

struct key_value {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t lease = 0; // 0: none
};

struct lease {
  int64_t id = 0;
  int64_t ttl = 0; // seconds, as granted
};

struct claim_result {
  bool won = false;
  /// Won: the revision of the put (the key's create_revision): the fencing
  /// token. Lost: the revision of the store when it answered.
  int64_t revision = 0;
  /// Lost: the key as it is (its owner), when it still existed.
  std::optional<key_value> holder;
};

struct range_result {
  int64_t revision = 0; // the store's revision when it answered
  std::vector<key_value> kvs; // sorted by key
};

struct watch_event {
  bool deleted = false; // false: a put
  key_value kv;         // deleted: key and mod_revision (the deletion's) only
};

class client {
public:
  /// Checks the options (no I/O): invalid_argument naming what is wrong.
  static caf::expected<std::shared_ptr<client>> make(client_options opts);

  ~client();
  client(const client&) = delete;
  client& operator=(const client&) = delete;

  /// /v3/lease/grant. etcd grants no less than its minimum TTL (2 s with
  /// its default election timeout; docs/notes/etcd.md#leases): the lease's
  /// ttl says what was granted.
  caf::expected<lease> grant(std::chrono::seconds ttl);

  /// One /v3/lease/keepalive round trip: the lease's TTL as renewed, or 0
  /// when the lease no longer exists (expired or revoked: never an error).
  caf::expected<int64_t> keepalive(int64_t lease_id);

  /// /v3/kv/lease/revoke: deletes every key attached to the lease. A lease
  /// that no longer exists is not an error.
  caf::error revoke(int64_t lease_id);

  /// A transaction that puts `key` = `value` attached to `lease_id` only if
  /// the key does not exist (its create_revision is 0); otherwise reads it.
  caf::expected<claim_result> claim(const std::string& key, const std::string& value,
                                    int64_t lease_id);

  /// An unconditional put (lease_id 0: none); the revision of the put.
  caf::expected<int64_t> put(const std::string& key, const std::string& value,
                             int64_t lease_id);

  /// Deletes `key` only if its mod_revision is still `mod_revision` (a
  /// transaction): true if it was deleted by this call, false if the key had
  /// changed or was gone.
  caf::expected<bool> release(const std::string& key, int64_t mod_revision);

  /// Every key that starts with `prefix`, with the store's revision.
  caf::expected<range_result> range(const std::string& prefix);

  /// Streams the changes of every key under `prefix` from `start_revision`
  /// (inclusive; 0 = from now) through /v3/watch, calling `on_events` once per
  /// batch of events etcd sends, with that batch's header revision, on the
  /// calling thread (progress notifications carry no events and are not
  /// passed on). The endpoints are tried in order until one confirms the
  /// watch (each within `timeout`); a stream that breaks after that ends the
  /// call. Returns when `cancel` becomes true (checked at least every
  /// 100 ms: a silent stream does not hold it), or with an error when the
  /// stream breaks or etcd cancels the watch (a compacted start_revision:
  /// store_refused, the caller ranges again). `idle` bounds silence: a
  /// stream silent for longer than `idle` ends transient. The watch asks
  /// for progress notifications, but etcd 3.4 sends them only every
  /// --experimental-watch-progress-notify-interval, 10 minutes unless set
  /// (docs/notes/etcd.md#watch): against a store whose interval is not
  /// below `idle`, a quiet watch ends every `idle` and the caller watches
  /// again from the revision it has seen.
  caf::error watch(const std::string& prefix, int64_t start_revision,
                   const std::function<void(int64_t, std::vector<watch_event>)>& on_events,
                   const std::atomic<bool>& cancel,
                   std::chrono::milliseconds idle = std::chrono::seconds(30));

private:
  struct impl;
  explicit client(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

using client_ptr = std::shared_ptr<client>;

/// The end of a prefix range: `prefix` with its last byte incremented (what
/// etcd calls range_end for "every key with this prefix").
std::string prefix_end(const std::string& prefix);

} // namespace egress::etcd
