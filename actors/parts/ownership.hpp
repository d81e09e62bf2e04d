#pragma once
// Which node owns which host, as one node sees the store, and what that
// node should do about it (actors/cluster runs the answers against etcd).
// A plain class: it sends nothing and reads no clock, so its unit suite
// (tests/unit/ownership.cpp) plays whole clusters of it.
//
// The rules (docs/architecture.md, "Node failover"):
// - hosts spread over the live nodes by rendezvous hashing: a host's
//   wanted node is the live node with the highest hash of (node, host), not
//   counting nodes that gave the host up for want of a link (`avoid`) unless
//   every node did. A node's death moves only its own hosts; its return
//   takes back only those.
// - a free host (no owner key) is claimed by its wanted node at once, by
//   the node ranked r after it only once it has been free r lease TTLs (a
//   wanted node that cannot claim does not leave it orphaned).
// - a host this node owns is given up when another node is wanted for it
//   that arrived after this node won the host and has been live a whole TTL,
//   once the host has been this node's to change for a TTL itself
//   (an orderly hand-over: the owner releases, then the wanted node claims;
//   a host taken because its wanted node did not claim it is kept until
//   that node comes back under a new lease), when its link has been down
//   `unreachable_release` (the host is avoided for `avoid_for`), or when
//   the config no longer names it.
// - a host won is changed only `guard` after it was last seen free (a call
//   the old owner sent may still be running inside libvirtd): its guard is
//   the host's call budget and a second.

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "messages/types.hpp"

namespace egress {

/// The owner key of a host as the store holds it.
struct owner_key {
  std::string node;
  int64_t lease = 0;
  int64_t token = 0;        // create_revision: the fencing token
  int64_t mod_revision = 0; // for a release that must not delete a newer claim
};

/// Rendezvous hashing's score of a node for a host (stable across
/// processes and builds: FNV-1a, then a 64-bit mix).
uint64_t rendezvous_score(const std::string& node, const std::string& host);

class ownership {
public:
  using clock = std::chrono::steady_clock;
  using time_point = clock::time_point;

  struct settings {
    std::string me;
    std::chrono::milliseconds lease_ttl{10'000};
    std::chrono::milliseconds unreachable_release{60'000}; // 0: never
    std::chrono::milliseconds avoid_for{600'000};
  };

  /// Why a host this node owns is given up.
  enum class release_reason { unconfigured, unreachable, handover };

  struct release {
    std::string host;
    int64_t mod_revision = 0; // compared by the delete: a newer claim is never deleted
    release_reason why{};
  };

  /// What to do now: claims to try, releases to make. A release stays due
  /// (and the host out of usable()) until the store shows the key gone or
  /// another owner's: one whose request failed is made again.
  struct step {
    std::vector<std::string> claim;
    std::vector<release> releases;
  };

  explicit ownership(settings s);

  /// The hosts of the config, each with its guard. A host that leaves the
  /// config and is this node's is released by the next decide().
  void configure(const std::map<std::string, std::chrono::milliseconds>& guards);

  /// This node's lease (0: none held now: nothing is claimed, nothing is
  /// this node's).
  void set_lease(int64_t lease);
  int64_t lease() const { return lease_; }

  // -- the store ---------------------------------------------------------------
  /// Replaces what is known with a fresh read of every key (after a watch
  /// broke): hosts absent from it are free from `now` on unless already known
  /// free.
  struct node_key {
    std::vector<std::string> avoid;
    int64_t lease = 0;
  };
  void reset(const std::map<std::string, owner_key>& hosts,
             const std::map<std::string, node_key>& nodes, time_point now);
  void host_owned(const std::string& host, owner_key k, time_point now);
  void host_freed(const std::string& host, time_point now);
  /// A node key (its value: the hosts it avoids; its lease: a node that
  /// came back under a new lease counts as arriving now).
  void node_put(const std::string& node, std::vector<std::string> avoid, int64_t lease,
                time_point now);
  void node_gone(const std::string& node);

  // -- this node ---------------------------------------------------------------
  /// Its link to `host` is up, or went down at `now`.
  void link_changed(const std::string& host, bool up, time_point now);
  /// A claim was sent (not repeated until it answers).
  void claiming(const std::string& host, bool on);
  /// A release was sent (not repeated until it answers).
  void releasing(const std::string& host, bool on);

  /// What to do now.
  step decide(time_point now);

  /// The hosts this node owns and may change now (guard passed), with their
  /// tokens.
  std::map<std::string, int64_t> usable(time_point now) const;

  /// Whether `host` is this node's by the store (guard or not).
  bool mine(const std::string& host) const;

  /// The token of this node's claim on `host`, if it has one.
  std::optional<int64_t> token_of(const std::string& host) const;

  /// The hosts this node avoids now (published in its node key).
  std::vector<std::string> avoiding(time_point now) const;

  /// The live node wanted for `host` ("" when no node is live).
  std::string wanted(const std::string& host) const;

  /// Every configured host as ls hosts shows it; every live node.
  std::vector<host_owner> hosts(time_point now) const;
  std::vector<cluster_member> nodes(time_point now) const;

private:
  struct host_entry {
    std::chrono::milliseconds guard{0};
    bool configured = false;
    std::optional<owner_key> owner;
    std::optional<time_point> free_since; // set while nobody owns it
    std::optional<time_point> won_at;     // when this node's claim was seen
    std::optional<time_point> link_down_since;
    std::optional<time_point> avoid_until;
    bool claiming = false;
    bool release_due = false;  // given up, the store's delete not seen yet
    bool release_sent = false; // its request in flight
  };
  struct node_entry {
    std::set<std::string> avoid;
    int64_t lease = 0;
    time_point since; // when it arrived (under this lease)
  };

  std::vector<std::string> ranking(const std::string& host) const;
  std::optional<release_reason> wants_release(const std::string& host, const host_entry& e,
                                              time_point now) const;
  time_point usable_at(const host_entry& e) const;

  settings cfg_;
  int64_t lease_ = 0;
  std::map<std::string, host_entry> hosts_;
  std::map<std::string, node_entry> nodes_;
};

} // namespace egress
