#pragma once
// The checker of a soak of several nodes (soak/cluster_run.cpp), in the
// style of soak/checker.hpp: fed what the run reads from outside the nodes
// (the owner keys from etcd, the marks of our domains from each libvirtd)
// and told what the nemesis did to them, it records each broken promise of
// docs/spec.md 37-40 with what was seen. Its violations go to the soak's
// checker, so that one list holds them all:
//  - per host, the fencing token (the owner key's create revision) only
//    grows, and so does the token in each domain's mark: a mark that goes
//    from a newer token back to an older one was written by a node whose
//    claim was superseded;
//  - a domain's uid (its mark's) never changes while its host's owner key
//    stays the same claim, unless the nemesis made that happen (the domain
//    undefined, its spec changed, its libvirtd's domains lost): a proxy is
//    never created twice while its owner kept it, and the proxies of hosts
//    whose owner did not change are not touched;
//  - a domain that appears (or comes back with another uid) carries no
//    token older than its host's claim once that claim is a guard old: it
//    was made by a node whose claim was superseded;
//  - every host an owner held when it died, was stopped, cut from etcd or
//    restarted is owned again within the bound: a new claim (a greater
//    token) and every declared domain there stamped with it. Where a host
//    fault held the host at some point of the wait, only the claim is
//    awaited: its proxies could not read their domains, and the new owner's
//    link may be in its redial backoff after the heal. A claim the claimer
//    hands over before its domains carry it (the lost node came back and
//    is wanted for the host: docs/spec.md 40) starts the bound again, for
//    the next claim. A stopped or cut owner that runs again with its lease
//    still alive (etcd, restarted meanwhile, extended every lease) resumes
//    with its claims: the host is kept, not taken over, once its key has
//    outlived the owner's return by a lease TTL. The bound's clock stops
//    while etcd is down or no node can act, and a host not claimed yet is
//    judged anew when it starts again (etcd back extends every lease).

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "messages/types.hpp"
#include "soak/checker.hpp"

namespace egress::soak {

struct owner_key {
  std::string node;
  int64_t token = 0; // the key's create revision: the host's fencing token
};

/// host -> its owner key; a host without one is free.
using owner_map = std::map<std::string, owner_key>;

/// A host owned again after its owner was lost.
struct takeover {
  std::string host, lost_node, cause, new_node;
  int64_t token = 0;    // the new claim's
  double claimed_s = 0; // counted seconds from the loss to the first new claim
  double owned_s = 0;   // ... to the domains stamped with the last claim
  int handovers = 0;    // claims handed over before their domains carried them
  bool claim_only = false; // a host fault held the host: its stamps were not awaited
  bool kept = false;       // no take-over: the owner resumed under its lease (owned_s: when)
};

class cluster_checker {
public:
  /// `guard_s`: the host's guard (docs/spec.md 38), how long a call of the
  /// old owner may still land after a new claim. The bound of a
  /// take-over is the lease TTL + the guard + 5 s, counted while the clock
  /// runs (tick()).
  cluster_checker(checker& check, double lease_ttl_s, double guard_s)
    : check_(check), ttl_s_(lease_ttl_s), guard_s_(guard_s),
      bound_s_(lease_ttl_s + guard_s + 5) {}

  /// `node` died, was stopped, cut from etcd or restarted (`cause`) at
  /// `now`: every host the last reading said it owned must be owned again.
  /// A host already waiting for its owner starts its clock again.
  void owner_lost(const std::string& node, const std::string& cause, clock_type::time_point now);
  /// `node`, stopped or cut, runs again (the same process, its lease
  /// perhaps alive).
  void owner_back(const std::string& node, clock_type::time_point now);
  /// The owner keys as etcd holds them, read at `now`.
  void on_owners(const owner_map& owners, clock_type::time_point now, double t_s);
  /// `ours`: the marked domains of `host` read from its libvirtd;
  /// `declared`: the proxies the config puts there.
  void on_marks(const std::string& host, const std::vector<domain_reading>& ours,
                const std::set<std::string>& declared, clock_type::time_point now, double t_s);
  /// Once a tick, after the readings: advances the waiting hosts' clocks
  /// while `clock_runs` (etcd up and some node able to act), notes which of
  /// them a host fault holds now (`held`), and reports a host waiting past
  /// the bound.
  void tick(bool clock_runs, const std::set<std::string>& held, clock_type::time_point now,
            double t_s);

  double bound_s() const { return bound_s_; }
  const owner_map& owners() const { return owners_; }
  const std::vector<takeover>& takeovers() const { return done_; }
  /// The hosts still waiting to be owned again, and since what.
  std::vector<std::string> waiting() const;

private:
  struct waiting_host {
    takeover t;
    int64_t old_token = 0;
    int64_t new_token = 0; // 0 until a new claim is seen
    double counted_s = 0; // since the loss
    double judged_s = 0;  // since the loss or the last hand-over: against the bound
    clock_type::time_point counted_until; // the clock's last advance
    std::optional<clock_type::time_point> back_at; // its owner runs again since
    double back_counted_s = 0;                     // counted_s then
    bool host_held = false;
    bool reported = false;
  };
  struct domain_seen {
    std::string uid;
    uint64_t epoch = 0; // its host's owner epoch when the uid was read
    int64_t max_token = 0;
    std::string max_owner;
  };

  struct host_reading {
    clock_type::time_point at;
    std::set<std::string> names;
  };

  void check_token_grows(const std::string& host, const owner_key& k, double t_s);
  void check_token_back(const std::string& key, const domain_reading& d,
                        const domain_seen& seen, double t_s);
  void check_uid_kept(const std::string& host, const domain_reading& d, const domain_seen& seen,
                      clock_type::time_point now, double t_s);
  void check_not_superseded(const std::string& host, const domain_reading& d,
                            clock_type::time_point now, double t_s);
  void remember(const std::string& host, const domain_reading& d, domain_seen& seen);
  static bool stamped(const std::vector<domain_reading>& ours,
                      const std::set<std::string>& declared, int64_t token);
  bool kept_by_owner(const std::string& host, const waiting_host& w,
                     clock_type::time_point now) const;
  std::string why_waiting(const std::string& host, const waiting_host& w) const;
  void complete(waiting_host& w, double t_s);

  checker& check_;
  double ttl_s_, guard_s_, bound_s_;
  owner_map owners_; // at the last reading
  bool read_once_ = false;
  std::map<std::string, int64_t> max_token_; // host -> the greatest owner token seen
  std::map<std::string, uint64_t> epoch_;    // host -> bumped at every change of its owner key
  std::map<std::string, clock_type::time_point> claim_seen_; // host -> its claim first read
  bool clock_ran_ = true; // the last tick's clock_runs
  std::map<std::string, host_reading> last_read_;            // host -> its last marks reading
  std::map<std::string, domain_seen> domains_; // "host/name"
  std::map<std::string, std::string> last_marks_; // host -> "name=token ..." as last read
  std::set<std::string> reported_;             // violations already said, by key
  std::map<std::string, waiting_host> waiting_; // host
  std::vector<takeover> done_;
};

} // namespace egress::soak
