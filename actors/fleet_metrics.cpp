// The fleet's Prometheus metrics (fleet_view::metrics): the text exposition,
// format 0.0.4, rendered on request from the view's last statuses and the
// counters it accumulated from the pushes. A scrape costs one message to the
// fleet and nothing else.
#include <algorithm>
#include <cstdio>

#include "actors/parts/fleet_view.hpp"

namespace egress {

void histogram::observe(double value) {
  for (size_t i = 0; i < bounds.size(); ++i)
    if (value <= bounds[i])
      ++counts[i];
  sum += value;
  ++count;
}

std::string death_cause(const std::string& reason) {
  // The prefixes host_link.cpp writes; anything else is a libvirt error.
  static const std::pair<const char*, const char*> causes[] = {
    {"budget overrun", "budget_overrun"},
    {"killed", "killed"},
    {"transport ended", "transport"},
    {"connect timed out", "connect_timeout"},
    {"connect failed", "connect_failed"},
    {"libvirt open", "open_failed"},
    {"shutdown", "shutdown"},
  };
  for (auto& [prefix, cause] : causes)
    if (reason.rfind(prefix, 0) == 0)
      return cause;
  return "libvirt_error";
}

namespace {

// Label values escape backslash, double quote and newline (format 0.0.4).
std::string label(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\' || c == '"')
      out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.15g", v);
  return buf;
}

class exposition {
public:
  void family(const char* name, const char* type, const char* help) {
    out_ += std::string{"# HELP "} + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }
  // Appended piece by piece (cheaper, and GCC 12 at -O3 warns falsely,
  // -Wrestrict, on `" " + number(v)`).
  void sample(const std::string& name, const std::string& labels, double v) {
    out_ += name;
    if (!labels.empty())
      out_.append("{").append(labels).append("}");
    out_.append(" ").append(number(v)).append("\n");
  }
  void histogram_of(const char* name, const histogram& h) {
    for (size_t i = 0; i < h.bounds.size(); ++i)
      sample(std::string{name} + "_bucket", "le=\"" + number(h.bounds[i]) + "\"",
             static_cast<double>(h.counts[i]));
    sample(std::string{name} + "_bucket", "le=\"+Inf\"", static_cast<double>(h.count));
    sample(std::string{name} + "_sum", "", h.sum);
    sample(std::string{name} + "_count", "", static_cast<double>(h.count));
  }
  std::string take() { return std::move(out_); }

private:
  std::string out_;
};

std::string kv(const char* key, const std::string& value) {
  return std::string{key} + "=\"" + label(value) + "\"";
}

} // namespace

namespace {

void gateway_metrics(exposition& x, const gateway_status& g) {
  x.family("egress_gateway_state", "gauge",
           "1 for the state the gateway's HAProxy is in (off without engine.gateway).");
  for (auto state : {haproxy_state::off, haproxy_state::connecting, haproxy_state::in_sync,
                     haproxy_state::out_of_sync, haproxy_state::unreachable}) {
    std::string name = to_string(state);
    std::replace(name.begin(), name.end(), ' ', '_');
    x.sample("egress_gateway_state", kv("state", name), g.state == state ? 1 : 0);
  }
  struct per_backend {
    const char* name;
    const char* help;
    uint32_t gateway_backend_status::*field;
  };
  static const per_backend backend_families[] = {
    {"egress_gateway_servers", "Proxies of the rotation HAProxy serves in this backend.",
     &gateway_backend_status::servers},
    {"egress_gateway_desired", "Proxies of the rotation this backend should serve.",
     &gateway_backend_status::desired},
    {"egress_gateway_draining", "Servers that left the rotation, their connections in flight "
                                "still running (up to the drain grace).",
     &gateway_backend_status::draining},
  };
  for (auto& f : backend_families) {
    x.family(f.name, "gauge", f.help);
    for (auto& b : g.backends)
      x.sample(f.name, kv("backend", b.name), static_cast<double>(b.*(f.field)));
  }
  struct counter {
    const char* name;
    const char* help;
    uint64_t value;
  };
  const counter counters[] = {
    {"egress_gateway_syncs_total", "Syncs that reached HAProxy.", g.syncs},
    {"egress_gateway_commands_total", "Commands HAProxy accepted.", g.commands},
    {"egress_gateway_refused_total", "Commands HAProxy refused.", g.refused},
    {"egress_gateway_resyncs_total",
     "Restarts (or reloads) of HAProxy the gateway saw and filled again.",
     g.resyncs},
    {"egress_gateway_drains_total", "Servers removed from HAProxy after their drain.", g.drains},
  };
  for (auto& c : counters) {
    x.family(c.name, "counter", c.help);
    x.sample(c.name, "", static_cast<double>(c.value));
  }
  x.family("egress_gateway_errors_total", "counter",
           "Syncs that could not talk to HAProxy, by cause.");
  x.sample("egress_gateway_errors_total", kv("cause", "gone"), static_cast<double>(g.errors_gone));
  x.sample("egress_gateway_errors_total", kv("cause", "timeout"),
           static_cast<double>(g.errors_timeout));
  x.sample("egress_gateway_errors_total", kv("cause", "garbage"),
           static_cast<double>(g.errors_garbage));
}

} // namespace

std::string fleet_view::metrics() const {
  exposition x;

  x.family("egress_link_state", "gauge",
           "1 for the state each host link is in (dialing, up, dead).");
  for (auto& [host, s] : links_)
    for (auto state : {link_state::dialing, link_state::up, link_state::dead})
      x.sample("egress_link_state", kv("host", host) + "," + kv("state", to_string(state)),
               s.state == state ? 1 : 0);
  x.family("egress_link_deaths_total", "counter",
           "Times a host link was declared dead, by cause.");
  for (auto& [key, n] : link_deaths_)
    x.sample("egress_link_deaths_total", kv("host", key.first) + "," + kv("cause", key.second),
             static_cast<double>(n));
  // One sample per host from its link's status.
  struct per_link {
    const char* name;
    const char* type;
    const char* help;
    double (*value)(const link_status&);
  };
  static const per_link link_families[] = {
    {"egress_link_calls_in_flight", "gauge",
     "libvirt calls running for a waiting caller, per host.",
     [](const link_status& s) { return double(s.in_flight); }},
    {"egress_link_calls_queued", "gauge", "Calls waiting for the host's concurrency limit.",
     [](const link_status& s) { return double(s.queued); }},
    {"egress_link_calls_abandoned_running", "gauge",
     "Calls given up on (budget, link death) whose threads still run.",
     [](const link_status& s) { return double(s.abandoned_calls); }},
    {"egress_link_budget_overruns_total", "counter",
     "Calls that ran past their budget (the link's current incarnation).",
     [](const link_status& s) { return double(s.overruns); }},
    {"egress_link_domain_events_total", "counter",
     "libvirt domain events the link received (its current incarnation).",
     [](const link_status& s) { return double(s.events); }},
    {"egress_link_bulk_reads_total", "counter",
     "Bulk reads of every domain's state: after each dial and as the safety net.",
     [](const link_status& s) { return double(s.bulk_reads); }},
    {"egress_link_lease_reads_total", "counter",
     "Bulk reads that listed the host's DHCP leases (one call per network).",
     [](const link_status& s) { return double(s.lease_reads); }},
  };
  for (auto& f : link_families) {
    x.family(f.name, f.type, f.help);
    for (auto& [host, s] : links_)
      x.sample(f.name, kv("host", host), f.value(s));
  }

  x.family("egress_image_state", "gauge",
           "1 for the state each cached image is in, per host.");
  for (auto& [key, s] : images_)
    for (auto state : {image_state::absent, image_state::fetching, image_state::ready,
                       image_state::failed})
      x.sample("egress_image_state",
               kv("image", s.image) + "," + kv("host", s.host) + ","
                 + kv("state", to_string(state)),
               s.state == state ? 1 : 0);
  x.family("egress_image_transferred_bytes_total", "counter",
           "Bytes uploaded into the host's pool, read from the mirror or, with "
           "engine.stage-dir, from the node's copy (a resumed prefix is not counted again).");
  for (auto& [key, s] : images_)
    x.sample("egress_image_transferred_bytes_total",
             kv("image", s.image) + "," + kv("host", s.host),
             static_cast<double>(s.moved_total));

  x.family("egress_proxies", "gauge", "Declared proxies by phase.");
  std::map<std::string, uint64_t> phases;
  for (auto p : {proxy_phase::pending, proxy_phase::creating, proxy_phase::provisioning,
                 proxy_phase::running, proxy_phase::failed, proxy_phase::deleting,
                 proxy_phase::deleted})
    phases[to_string(p)] = 0;
  for (auto& [name, s] : proxies_)
    if (declared_.contains(name))
      ++phases[to_string(s.phase)];
  for (auto& [phase, n] : phases)
    x.sample("egress_proxies", kv("phase", phase), static_cast<double>(n));
  x.family("egress_rotation_size", "gauge", "Proxies in the rotation (passing their probes).");
  x.sample("egress_rotation_size", "", static_cast<double>(rotation_.size()));
  x.family("egress_rotation_generation", "counter",
           "Joins and leaves of the rotation so far (GET /rotation's generation).");
  x.sample("egress_rotation_generation", "", static_cast<double>(rotation_.generation()));
  x.family("egress_probe_duration_seconds", "histogram",
           "Latency of passing probes (a request through the proxy).");
  x.histogram_of("egress_probe_duration_seconds", probe_seconds_);
  x.family("egress_reconcile_duration_seconds", "histogram",
           "A reconcile read-back of one proxy (its VM state and address through the host link), from the request to the answer.");
  x.histogram_of("egress_reconcile_duration_seconds", reconcile_seconds_);
  gateway_metrics(x, gateway_);
  x.family("egress_reloads_total", "counter", "Configurations applied after the first.");
  x.sample("egress_reloads_total", "", static_cast<double>(reloads_));
  return x.take();
}

std::string group_metrics(const std::vector<group_status>& groups, uint64_t replacements,
                          const std::vector<host_drain>& drains) {
  exposition x;
  if (groups.empty())
    return {};
  x.family("egress_group_members", "gauge", "Placed members of each proxy group, by host.");
  for (auto& g : groups)
    for (auto& [host, n] : g.per_host)
      x.sample("egress_group_members", kv("group", g.name) + "," + kv("host", host),
               static_cast<double>(n));
  x.family("egress_group_unplaced", "gauge",
           "Members of each proxy group that no host can take now (status says why).");
  for (auto& g : groups)
    x.sample("egress_group_unplaced", kv("group", g.name),
             static_cast<double>(g.count - std::min(g.count, g.placed)));
  x.family("egress_group_replacing", "gauge",
           "Members placed again off a lost host and not in the rotation yet.");
  for (auto& g : groups)
    x.sample("egress_group_replacing", kv("group", g.name), static_cast<double>(g.replacing));
  x.family("egress_group_held", "gauge",
           "1 while more than half of a group's hosts are down and nothing of it is placed.");
  for (auto& g : groups)
    x.sample("egress_group_held", kv("group", g.name), g.held.empty() ? 0 : 1);
  x.family("egress_group_replacements_total", "counter",
           "Members placed again off lost hosts so far.");
  x.sample("egress_group_replacements_total", "", static_cast<double>(replacements));
  x.family("egress_drain_members", "gauge",
           "Group members still on a host being drained (drain-host), by host.");
  for (auto& d : drains)
    x.sample("egress_drain_members", kv("host", d.host), static_cast<double>(d.members));
  x.family("egress_drain_moving", "gauge",
           "Replacements being made for a drained host's members, by host.");
  for (auto& d : drains)
    x.sample("egress_drain_moving", kv("host", d.host), static_cast<double>(d.moving));
  return x.take();
}

std::string cluster_metrics(const cluster_status& s) {
  exposition x;
  if (!s.enabled)
    return {};
  x.family("egress_cluster_phase", "gauge",
           "1 for this node's phase in the cluster (joining, member, fenced, stopping).");
  for (auto phase : {"joining", "member", "fenced", "stopping"})
    x.sample("egress_cluster_phase", kv("phase", phase), s.phase == phase ? 1 : 0);
  x.family("egress_cluster_lease_age_seconds", "gauge",
           "Since the last keepalive that confirmed this node's lease was sent (-1: none yet).");
  x.sample("egress_cluster_lease_age_seconds", "", s.lease_age_s);
  uint32_t mine = 0;
  for (auto& h : s.hosts)
    mine += h.state.starts_with("mine") ? 1 : 0;
  x.family("egress_cluster_hosts_owned", "gauge", "Hosts this node owns in the store.");
  x.sample("egress_cluster_hosts_owned", "", static_cast<double>(mine));
  x.family("egress_cluster_nodes", "gauge", "Nodes with a live lease, as this node sees the store.");
  x.sample("egress_cluster_nodes", "", static_cast<double>(s.nodes.size()));
  x.family("egress_cluster_claims_total", "counter", "Hosts this node claimed and won.");
  x.sample("egress_cluster_claims_total", "", static_cast<double>(s.claims_won));
  x.family("egress_cluster_hosts_lost_total", "counter",
           "Hosts that stopped being this node's to change (given up, fenced, expired).");
  x.sample("egress_cluster_hosts_lost_total", "", static_cast<double>(s.hosts_lost));
  x.family("egress_cluster_fenced_total", "counter",
           "Times this node stopped being a member (its lease unconfirmed or gone).");
  x.sample("egress_cluster_fenced_total", "", static_cast<double>(s.fenced));
  x.family("egress_cluster_refusals_total", "counter",
           "Calls refused by a closed fence, and domains refused for a newer owner's mark.");
  x.sample("egress_cluster_refusals_total", "", static_cast<double>(s.refusals));
  x.family("egress_cluster_store_errors_total", "counter", "etcd requests that failed.");
  x.sample("egress_cluster_store_errors_total", "", static_cast<double>(s.store_errors));
  return x.take();
}

} // namespace egress
