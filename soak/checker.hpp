#pragma once
// The soak's checker (soak/run.cpp): fed every status answer and every
// host's domain list as the run goes, it records each broken promise with the
// time it was seen. What a fault excuses is said by the nemesis: a host's
// proxies may leave the rotation while their host is held and for a grace
// after the heal; a proxy whose VM was destroyed or whose spec changed, for
// a grace; every proxy, across an engine restart. A proxy out of the rotation
// with nothing excusing it for longer than a bound is stuck.

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "messages/types.hpp"

namespace egress::soak {

using clock_type = std::chrono::steady_clock;

/// Seconds since `t0` on the soak's clock.
inline double since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

/// A duration as the violations of both checkers (this one and
/// soak/cluster_checker.hpp) say it: "12.34 s".
std::string seconds_text(double s);

struct violation {
  double t_s = 0;
  std::string what;
};

class checker {
public:
  /// `held_bound_s`: a status answer slower than this is a caller held past
  /// its budget; `orphan_bound_s`: how long a domain of ours that no proxy
  /// declares may stay (a removal waiting for its host counts in it).
  /// `stuck_bound_s`: how long a proxy may stay out of the rotation with
  /// nothing excusing it (a new or replaced one is created in that time).
  checker(double held_bound_s, double orphan_bound_s, double stuck_bound_s = 60)
    : held_bound_s_(held_bound_s), orphan_bound_s_(orphan_bound_s),
      stuck_bound_s_(stuck_bound_s) {}

  void excuse_host(const std::string& host, clock_type::time_point until) {
    host_until_[host] = until;
  }
  void excuse_proxy(const std::string& name, clock_type::time_point until) {
    proxy_until_[name] = until;
  }
  /// A domain may be made anew (a new uid in its mark) until `until`: the
  /// nemesis undefined it or changed its spec (a proxy), or its libvirtd
  /// lost every domain (a host). What the cluster's checker
  /// (soak/cluster_checker.hpp) asks before it calls a new uid a proxy
  /// created twice.
  void excuse_remake_proxy(const std::string& name, clock_type::time_point until) {
    remake_proxy_until_[name] = until;
  }
  void excuse_remake_host(const std::string& host, clock_type::time_point until) {
    remake_host_until_[host] = until;
  }
  bool remake_excused(const std::string& host, const std::string& name,
                      clock_type::time_point now) const;
  /// While the mirror is broken and for a while after: a proxy waiting for
  /// an image it must fetch again may stay out of the rotation (it may not
  /// leave it).
  void be_patient(clock_type::time_point until) { patient_until_ = until; }
  /// After an engine restart: nothing of the old engine's rotation carries over.
  void restart(clock_type::time_point until) {
    all_until_ = until;
    was_in_rotation_.clear();
  }

  void on_status(const fleet_status& st, double answer_s, clock_type::time_point now, double t_s);
  void on_status_failed(const std::string& why, double answer_s, double t_s);
  /// `ours`: the marked domains of `host` read over the soak's own
  /// connection; `declared`: the proxies the config puts there.
  void on_host(const std::string& host, const std::vector<domain_reading>& ours,
               const std::set<std::string>& declared, clock_type::time_point now, double t_s);
  void on_foreign(const std::string& host, bool intact, double t_s);
  /// The soak's own request through a proxy (the VM bed). A proxy the
  /// engine keeps in the rotation while its requests fail for longer than
  /// `probe_bound_s` is a dead proxy served to clients.
  void on_probe(const std::string& proxy, bool in_rotation, bool passed,
                clock_type::time_point now, double t_s);

  void add(double t_s, std::string what);
  const std::vector<violation>& violations() const { return violations_; }

private:
  bool excused(const proxy_status& p, clock_type::time_point now) const;
  static constexpr double probe_bound_s = 20; // the engine's fall: 3 x 2 s + a 2 s timeout, and slack

  double held_bound_s_, orphan_bound_s_, stuck_bound_s_;
  std::map<std::string, clock_type::time_point> host_until_, proxy_until_;
  std::map<std::string, clock_type::time_point> remake_host_until_, remake_proxy_until_;
  clock_type::time_point all_until_{}, patient_until_{};
  std::map<std::string, clock_type::time_point> failing_since_; // in rotation, requests failing
  std::set<std::string> dead_served_reported_;
  std::set<std::string> was_in_rotation_;
  std::map<std::string, clock_type::time_point> out_since_; // unexcused, out of rotation
  std::set<std::string> stuck_reported_;
  std::map<std::string, clock_type::time_point> orphan_since_; // "host/name"
  std::set<std::string> orphans_reported_;
  std::set<std::string> foreign_reported_; // hosts
  std::vector<violation> violations_;
};

} // namespace egress::soak
