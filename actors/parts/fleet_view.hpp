#pragma once
// What the fleet knows of its actors, from what they push: the last status
// of each link, image, proxy and proxy's health; when each actor was spawned;
// the counters the metrics need; and the events a watcher sees. A plain
// class the fleet actor owns, so all of it is tested without actors
// (tests/unit/fleet_view.cpp). Nothing is sampled on a timer: every figure
// here comes from a push the fleet receives anyway.

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "actors/parts/rotation_book.hpp"
#include "messages/types.hpp"

namespace egress {

/// A cumulative Prometheus histogram with fixed upper bounds (seconds).
struct histogram {
  std::vector<double> bounds;
  std::vector<uint64_t> counts = std::vector<uint64_t>(bounds.size(), 0);
  double sum = 0;
  uint64_t count = 0;

  void observe(double value);
};

/// A link's death reason as a label value with few values: what a dashboard
/// groups by (the full reason is in the status and the log).
std::string death_cause(const std::string& reason);

class fleet_view {
public:
  /// Stores a push and returns the events it makes for watchers; none are
  /// built unless `watched` (nothing is built that no one reads). The
  /// metrics' counters are updated either way.
  std::vector<engine_event> record(link_status s, bool watched);
  std::vector<engine_event> record(image_status s, bool watched);
  std::vector<engine_event> record(proxy_status s, bool watched);
  std::vector<engine_event> record(proxy_health h, bool watched);
  std::vector<engine_event> record(gateway_status s, bool watched);

  /// A retired actor's entries go (a proxy's health and rotation place
  /// with it).
  void forget_link(const std::string& host);
  void forget_image(const std::string& key); // "<image>@<host>"
  std::vector<engine_event> forget_proxy(const std::string& name, bool watched = false);

  /// A new health actor: every proxy re-earns its place in the rotation.
  std::vector<engine_event> clear_rotation(bool watched = false);

  /// Declared proxies count in the metrics and may be in the rotation (with
  /// their spec's tags and port); an erased one keeps its last status (phase
  /// deleted) in the view, but is no longer declared.
  void declare_proxy(const proxy_spec& p);
  std::vector<engine_event> undeclare_proxy(const std::string& name, bool watched = false);

  /// A proxy the fleet is about to delete or replace leaves the rotation
  /// (and, through it, the gateway) whatever its probes say, until its
  /// actor is retired.
  std::vector<engine_event> set_retiring(const std::string& name, bool retiring,
                                         bool watched = false);
  bool retiring(const std::string& name) const { return retiring_.contains(name); }

  /// The rotation as its consumers see it (rotation_book).
  const rotation_book& rotation() const { return rotation_; }

  /// An actor was spawned now ("link/hv1", "image/base@hv1", "proxy/px-1",
  /// "health/health"): the inspector's directory shows when.
  void spawned(const std::string& what);
  std::string spawned_at(const std::string& what) const;
  /// When each was spawned, by "<kind>/<name>" (a listing walks it in order).
  const std::map<std::string, std::string>& spawn_times() const { return spawned_; }

  void reload_applied(const std::string& summary);
  void reload_rejected(const std::string& reason);
  const std::string& last_reload() const { return last_reload_; }

  /// The fleet's status: each proxy with its health, the rotation.
  fleet_status status(const std::string& node, const std::string& entry) const;

  /// The Prometheus text exposition (format 0.0.4), families in a fixed
  /// order (actors/fleet_metrics.cpp).
  std::string metrics() const;

  const std::map<std::string, link_status>& links() const { return links_; }
  const std::map<std::string, image_status>& images() const { return images_; }
  const std::map<std::string, proxy_status>& proxies() const { return proxies_; }
  const std::map<std::string, proxy_health>& health() const { return health_; }
  const gateway_status& gateway() const { return gateway_; }

private:
  /// Puts `name` into the rotation or takes it out, from its health, its
  /// declaration and whether it retires; the events a watcher sees.
  std::vector<engine_event> place(const std::string& name, bool watched);

  std::map<std::string, link_status> links_;
  std::map<std::string, image_status> images_; // by "<image>@<host>"
  std::map<std::string, proxy_status> proxies_;
  std::map<std::string, proxy_health> health_;
  gateway_status gateway_;
  struct declared {
    std::vector<std::string> tags;
    uint32_t port = 0;
  };
  std::map<std::string, declared> declared_;
  std::set<std::string> retiring_;
  rotation_book rotation_;
  std::map<std::string, std::string> spawned_;
  uint64_t reloads_ = 0;
  std::string last_reload_;
  // (host, cause) -> deaths: "budget_overrun", "killed", "transport", ...
  std::map<std::pair<std::string, std::string>, uint64_t> link_deaths_;
  histogram probe_seconds_{{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}};
  histogram reconcile_seconds_{{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}};
};

/// The events between a view's last entry (nullptr: none yet) and its new
/// one, for a person (actors/fleet_events.cpp).
std::vector<engine_event> events_between(const link_status* before, const link_status& now);
std::vector<engine_event> events_between(const image_status* before, const image_status& now);
std::vector<engine_event> events_between(const proxy_status* before, const proxy_status& now);
std::vector<engine_event> events_between(const gateway_status* before, const gateway_status& now);
/// A join or leave of the rotation, with its generation; `why` is the last
/// probe or the reason it left.
engine_event rotation_event_of(const rotation_book::change& c, const std::string& why);

/// The proxy groups' and drains' families of the metrics
/// (actors/fleet_metrics.cpp): empty without groups.
std::string group_metrics(const std::vector<group_status>& groups, uint64_t replacements,
                          const std::vector<host_drain>& drains);

/// The cluster's families (engine.cluster): this node's phase and lease
/// age, the hosts it owns, ownership changes and fencing refusals
/// (actors/fleet_metrics.cpp). Empty without a cluster.
std::string cluster_metrics(const cluster_status& s);

} // namespace egress
