#include "soak/schedule.hpp"

#include <algorithm>
#include <cstdio>
#include <random>

namespace egress::soak {

namespace {

constexpr fault_kind kinds[] = {
  fault_kind::partition,      fault_kind::stop_libvirtd,   fault_kind::kill_libvirtd,
  fault_kind::kill_sshd,      fault_kind::destroy_domain,  fault_kind::undefine_domain,
  fault_kind::reload,         fault_kind::restart_engine,
};

constexpr fault_kind image_kinds[] = {
  fault_kind::partition,      fault_kind::stop_libvirtd,   fault_kind::kill_libvirtd,
  fault_kind::kill_sshd,      fault_kind::destroy_domain,  fault_kind::undefine_domain,
  fault_kind::reload,         fault_kind::restart_engine,  fault_kind::lose_image,
  fault_kind::break_mirror,   fault_kind::fill_pool,
};

constexpr fault_kind group_kinds[] = {
  fault_kind::partition,      fault_kind::stop_libvirtd,   fault_kind::kill_libvirtd,
  fault_kind::kill_sshd,      fault_kind::destroy_domain,  fault_kind::undefine_domain,
  fault_kind::reload,         fault_kind::restart_engine,  fault_kind::drain_host,
  fault_kind::lose_host,      fault_kind::lose_host,
};

constexpr fault_kind node_kinds[] = {
  fault_kind::partition,      fault_kind::stop_libvirtd,   fault_kind::kill_libvirtd,
  fault_kind::kill_sshd,      fault_kind::destroy_domain,  fault_kind::undefine_domain,
  fault_kind::reload,         fault_kind::restart_engine,  fault_kind::kill_node,
  fault_kind::stop_node,      fault_kind::restart_etcd,    fault_kind::cut_node_from_etcd,
};

// std::mt19937_64's output is fixed by the standard; the distributions are
// not (they differ between standard libraries), so the draws are done here.
double uniform(std::mt19937_64& rng, double lo, double hi) {
  return lo + (hi - lo) * static_cast<double>(rng() >> 11) / static_cast<double>(1ull << 53);
}

fault_kind draw_kind(std::mt19937_64& rng, const schedule_options& o) {
  return o.images      ? image_kinds[rng() % std::size(image_kinds)]
         : o.groups    ? group_kinds[rng() % std::size(group_kinds)]
         : o.nodes > 0 ? node_kinds[rng() % std::size(node_kinds)]
                       : kinds[rng() % std::size(kinds)];
}

// The common hold draw, in [min_hold_s, max_hold_s), mapped onto [lo, hi):
// a kind with a range of its own takes no draw of its own, so the draws
// of the other kinds stay those of a seed.
double rescale(double hold, const schedule_options& o, double lo, double hi) {
  return lo + (hold - o.min_hold_s) / std::max(o.max_hold_s - o.min_hold_s, 1e-9) * (hi - lo);
}

double hold_of(fault_kind k, double hold, const schedule_options& o) {
  switch (k) {
    case fault_kind::lose_host: return rescale(hold, o, o.lose_min_s, o.lose_max_s);
    case fault_kind::stop_node: return rescale(hold, o, 2 * o.lease_ttl_s, 3 * o.lease_ttl_s);
    case fault_kind::cut_node_from_etcd: return rescale(hold, o, o.cut_min_s, o.cut_max_s);
    default: return hold;
  }
}

// Until when each thing the faults take is held: what the schedule
// checks a new fault against.
struct occupancy {
  std::vector<double> hosts, pools, nodes;
  double mirror = 0, etcd = 0;
};

size_t held_at(const std::vector<double>& until, double t) {
  size_t n = 0;
  for (double u : until)
    n += u > t;
  return n;
}

// Holds `f` for `hold` (cut to end by `last_heal`) on `until`.
void hold_on(fault& f, double hold, double last_heal, double& until) {
  f.hold_s = std::min(hold, last_heal - f.at_s);
  until = f.at_s + f.hold_s;
}

// Whether `f` fits what is held at its start; if so, its hold is set and
// counted in `busy`.
bool fits(fault& f, double hold, double last_heal, occupancy& busy) {
  const double t = f.at_s;
  // The mirror, each pool and etcd hold one fault at a time; none takes a
  // host out.
  if (f.kind == fault_kind::break_mirror || f.kind == fault_kind::fill_pool
      || f.kind == fault_kind::restart_etcd) {
    auto& until = f.kind == fault_kind::break_mirror ? busy.mirror
                  : f.kind == fault_kind::restart_etcd ? busy.etcd
                                                       : busy.pools[static_cast<size_t>(f.host)];
    if (until > t)
      return false;
    hold_on(f, hold, last_heal, until);
    return true;
  }
  if (f.node >= 0) { // a node fault, or a restart of one node
    auto& until = busy.nodes[static_cast<size_t>(f.node)];
    if (until > t)
      return false; // the node is taken
    if (!holds_node(f.kind))
      return true;
    if (held_at(busy.nodes, t) + 1 >= busy.nodes.size())
      return false; // it would be the last node running
    hold_on(f, hold, last_heal, until);
    return true;
  }
  if (!holds_host(f.kind))
    return true;
  auto& until = busy.hosts[static_cast<size_t>(f.host)];
  if (until > t || held_at(busy.hosts, t) + 1 >= busy.hosts.size())
    return false; // the host is taken, or it would be the last healthy one
  hold_on(f, hold, last_heal, until);
  return true;
}

} // namespace

const char* to_string(fault_kind k) {
  switch (k) {
    case fault_kind::partition: return "partition";
    case fault_kind::stop_libvirtd: return "stop_libvirtd";
    case fault_kind::kill_libvirtd: return "kill_libvirtd";
    case fault_kind::kill_sshd: return "kill_sshd";
    case fault_kind::destroy_domain: return "destroy_domain";
    case fault_kind::undefine_domain: return "undefine_domain";
    case fault_kind::reload: return "reload";
    case fault_kind::restart_engine: return "restart_engine";
    case fault_kind::lose_image: return "lose_image";
    case fault_kind::break_mirror: return "break_mirror";
    case fault_kind::fill_pool: return "fill_pool";
    case fault_kind::drain_host: return "drain_host";
    case fault_kind::lose_host: return "lose_host";
    case fault_kind::kill_node: return "kill_node";
    case fault_kind::stop_node: return "stop_node";
    case fault_kind::restart_etcd: return "restart_etcd";
    case fault_kind::cut_node_from_etcd: return "cut_node_from_etcd";
  }
  return "?";
}

bool holds_host(fault_kind k) {
  return k == fault_kind::partition || k == fault_kind::stop_libvirtd
         || k == fault_kind::kill_libvirtd || k == fault_kind::kill_sshd
         || k == fault_kind::drain_host || k == fault_kind::lose_host;
}

bool holds_node(fault_kind k) {
  return k == fault_kind::kill_node || k == fault_kind::stop_node
         || k == fault_kind::cut_node_from_etcd;
}

bool held(fault_kind k) {
  return holds_host(k) || holds_node(k) || k == fault_kind::break_mirror
         || k == fault_kind::fill_pool || k == fault_kind::restart_etcd;
}

std::vector<fault> make_schedule(const schedule_options& o) {
  std::mt19937_64 rng{o.seed};
  std::vector<fault> out;
  occupancy busy;
  busy.hosts.assign(static_cast<size_t>(std::max(o.hosts, 1)), 0.0);
  busy.pools = busy.hosts;
  busy.nodes.assign(static_cast<size_t>(std::max(o.nodes, 0)), 0.0);
  const double last_heal = o.seconds - o.quiet_s;
  for (double t = uniform(rng, o.min_gap_s, o.max_gap_s); t < last_heal;
       t += uniform(rng, o.min_gap_s, o.max_gap_s)) {
    fault f;
    f.at_s = t;
    f.kind = draw_kind(rng, o);
    f.host = static_cast<int>(rng() % busy.hosts.size());
    f.pick = rng();
    if (o.nodes > 0 && (holds_node(f.kind) || f.kind == fault_kind::restart_engine))
      f.node = static_cast<int>((f.pick / 2) % busy.nodes.size()); // pick % 2: kill or stop
    double hold = hold_of(f.kind, uniform(rng, o.min_hold_s, o.max_hold_s), o);
    if (fits(f, hold, last_heal, busy))
      out.push_back(f);
  }
  return out;
}

std::string describe(const fault& f) {
  char buf[128];
  if (f.kind == fault_kind::restart_etcd)
    std::snprintf(buf, sizeof buf, "%7.1fs %-15s for %.1fs", f.at_s, to_string(f.kind), f.hold_s);
  else if (f.node >= 0 && held(f.kind))
    std::snprintf(buf, sizeof buf, "%7.1fs %-15s node %d for %.1fs", f.at_s, to_string(f.kind),
                  f.node, f.hold_s);
  else if (f.node >= 0)
    std::snprintf(buf, sizeof buf, "%7.1fs %-15s node %d pick %llu", f.at_s, to_string(f.kind),
                  f.node, static_cast<unsigned long long>(f.pick % 1000));
  else if (held(f.kind))
    std::snprintf(buf, sizeof buf, "%7.1fs %-15s host %d for %.1fs", f.at_s, to_string(f.kind),
                  f.host, f.hold_s);
  else
    std::snprintf(buf, sizeof buf, "%7.1fs %-15s host %d pick %llu", f.at_s, to_string(f.kind),
                  f.host, static_cast<unsigned long long>(f.pick % 1000));
  return buf;
}

} // namespace egress::soak
