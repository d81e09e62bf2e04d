// The fleet in a cluster (engine.cluster): it runs only the hosts the
// cluster actor says are this node's now, and its rotation's followers get
// every node's share (docs/architecture.md, "Node failover").
#include <algorithm>

#include "actors/cluster.hpp"
#include "actors/fleet.hpp"
#include "base/log.hpp"

namespace egress {

engine_config owned_only(const engine_config& full, const std::map<std::string, int64_t>& owned) {
  auto out = full;
  std::erase_if(out.hosts, [&](const host_config& h) { return !owned.contains(h.name); });
  for (auto& h : out.hosts)
    h.fencing_token = owned.at(h.name);
  std::erase_if(out.proxies, [&](const proxy_spec& p) { return !owned.contains(p.host); });
  return out;
}

engine_config running_config(const fleet_state& st) {
  auto placed = with_members(st.declared, st.groups);
  if (!st.cluster)
    return placed;
  static const std::map<std::string, int64_t> none;
  return owned_only(placed, st.clustered ? st.clustered->hosts : none);
}

void start_cluster(fleet_pointer self) {
  auto& st = self->state;
  st.fences = std::make_shared<fence_board>();
  cluster_options o;
  o.cfg = st.declared.cluster;
  o.node = st.declared.node;
  o.entry = st.declared.entry;
  o.guards = guards_of(st.declared);
  o.fences = st.fences;
  o.fleet = caf::actor_cast<fleet_actor>(self);
  st.cluster = self->spawn(make_cluster, std::move(o));
  self->monitor(st.cluster);
  st.view.spawned(actor_name(actor_kind::cluster, st.declared.node));
}

namespace {

// The hosts the fleet runs that the view does not give it (or gives it
// under another token: a new claim is a new start).
std::vector<std::string> hosts_to_drop(const fleet_state& st, const cluster_view& v) {
  std::vector<std::string> out;
  for (auto& h : st.cfg.hosts) {
    auto i = v.hosts.find(h.name);
    if (i == v.hosts.end() || i->second != h.fencing_token)
      out.push_back(h.name);
  }
  return out;
}

} // namespace

void take_cluster_view(fleet_pointer self, cluster_snapshot v) {
  auto& st = self->state;
  if (st.stopping || !v)
    return;
  auto drop = hosts_to_drop(st, *v);
  st.clustered = std::move(v);
  for (auto& h : drop)
    drop_host(self, h, "the host is not this node's any more (given up, taken, or the lease "
                       "is gone)");
  std::set<std::string> before;
  for (auto& h : st.cfg.hosts)
    before.insert(h.name);
  auto next = running_config(st);
  for (auto& h : next.hosts)
    if (!before.contains(h.name)) {
      log::info(to_string(actor_kind::fleet), h.name + ": taken over (token "
                                                + std::to_string(h.fencing_token) + ")");
      st.gc_owed.insert(h.name); // collected once its link is up, as after a restart
    }
  if (!drop.empty() || next.hosts.size() != before.size())
    converge_to(self, std::move(next));
  auto snap = followed_rotation(st);
  for (auto& f : st.followers)
    self->send(f, snap);
}

void cluster_ended(fleet_pointer self, const caf::error& reason) {
  auto& st = self->state;
  if (st.stopping)
    return;
  log::error(to_string(actor_kind::fleet), "the cluster actor ended (" + caf::to_string(reason)
                                             + "): its hosts are dropped and it starts again");
  auto none = std::make_shared<cluster_view>();
  take_cluster_view(self, none);
  start_cluster(self);
}

rotation_snapshot followed_rotation(fleet_state& st) {
  auto own = st.view.rotation().snapshot(st.cfg.node);
  if (!st.cluster)
    return own;
  std::map<std::string, rotation_member> merged;
  if (st.clustered)
    for (auto& [node, members] : st.clustered->others)
      for (auto& m : members)
        merged[m.name] = m;
  for (auto& m : own->members)
    merged[m.name] = m; // this node's word on its own proxies wins
  std::vector<rotation_member> members;
  members.reserve(merged.size());
  for (auto& [_, m] : merged)
    members.push_back(std::move(m));
  // A new generation for a join, a leave or a move, never for a latency
  // alone (rotation_view's promise).
  auto same_but_latency = [](const std::vector<rotation_member>& a,
                             const std::vector<rotation_member>& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](auto x, auto y) {
      x.probe_ms = y.probe_ms = 0;
      return x == y;
    });
  };
  if (!same_but_latency(members, st.merged_last)) {
    ++st.merged_generation;
    st.merged_last = members;
  }
  auto out = std::make_shared<rotation_view>();
  out->node = st.cfg.node;
  out->generation = st.merged_generation;
  out->members = std::move(members);
  return out;
}

} // namespace egress
