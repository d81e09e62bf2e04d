#pragma once
// The fleet's Prometheus metrics: counters it accumulates from the status
// pushes it already receives (link deaths by cause, probe and reconcile
// latencies), and the text exposition (format 0.0.4) rendered on request
// from those and its views. Nothing here is sampled on a timer: a scrape
// costs one message to the fleet.

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "messages/types.hpp"

namespace egress {

struct fleet_state;

/// A cumulative Prometheus histogram with fixed upper bounds (seconds).
struct histogram {
  std::vector<double> bounds;
  std::vector<uint64_t> counts = std::vector<uint64_t>(bounds.size(), 0);
  double sum = 0;
  uint64_t count = 0;

  void observe(double value);
};

struct fleet_metrics {
  // (host, cause) -> deaths: "budget_overrun", "killed", "transport", ...
  std::map<std::pair<std::string, std::string>, uint64_t> link_deaths;
  histogram probe_seconds{{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}};
  histogram reconcile_seconds{{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}};

  void observe(const link_status* before, const link_status& now);
  void observe(const proxy_status* before, const proxy_status& now);
  void observe(const proxy_health* before, const proxy_health& now);
  void observe(const image_status*, const image_status&) {}
};

/// A link's death reason as a label value with few values: what a dashboard
/// groups by (the full reason is in the status and the log).
std::string death_cause(const std::string& reason);

/// The whole exposition, metric families in a fixed order.
std::string render_metrics(const fleet_state& st);

} // namespace egress
