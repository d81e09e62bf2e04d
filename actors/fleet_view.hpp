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

  /// A retired actor's entries go (a proxy's health with it).
  void forget_link(const std::string& host);
  void forget_image(const std::string& key); // "<image>@<host>"
  void forget_proxy(const std::string& name);

  /// A new health actor: every proxy re-earns its place in the rotation.
  void clear_rotation();

  /// Declared proxies count in the metrics; an erased one keeps its last
  /// status (phase deleted) in the view, but is no longer declared.
  void declare_proxy(const std::string& name, bool declared);

  /// An actor was spawned now ("link/hv1", "image/base@hv1", "proxy/px-1",
  /// "health/health"): the inspector's directory shows when.
  void spawned(const std::string& what);
  std::string spawned_at(const std::string& what) const;

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

private:
  std::map<std::string, link_status> links_;
  std::map<std::string, image_status> images_; // by "<image>@<host>"
  std::map<std::string, proxy_status> proxies_;
  std::map<std::string, proxy_health> health_;
  std::set<std::string> declared_;
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
std::vector<engine_event> events_between(const proxy_health* before, const proxy_health& now);

} // namespace egress
