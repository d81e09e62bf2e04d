#include "actors/parts/ownership.hpp"

#include <algorithm>

namespace egress {

uint64_t rendezvous_score(const std::string& node, const std::string& host) {
  uint64_t h = 14695981039346656037ull;
  auto mix_in = [&h](const std::string& s) {
    for (unsigned char c : s) {
      h ^= c;
      h *= 1099511628211ull;
    }
  };
  mix_in(node);
  mix_in(std::string(1, '\0'));
  mix_in(host);
  // splitmix64's finalizer: FNV alone spreads similar names poorly.
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

ownership::ownership(settings s) : cfg_(std::move(s)) {
}

void ownership::configure(const std::map<std::string, std::chrono::milliseconds>& guards) {
  for (auto& [_, e] : hosts_)
    e.configured = false;
  for (auto& [host, guard] : guards) {
    auto& e = hosts_[host];
    e.configured = true;
    e.guard = guard;
  }
}

void ownership::set_lease(int64_t lease) {
  if (lease == lease_)
    return;
  lease_ = lease;
  for (auto& [_, e] : hosts_) {
    e.won_at.reset();
    e.claiming = false;
    e.release_due = e.release_sent = false;
    e.link_down_since.reset();
  }
}

void ownership::reset(const std::map<std::string, owner_key>& hosts,
                      const std::map<std::string, node_key>& nodes, time_point now) {
  for (auto& [host, k] : hosts)
    host_owned(host, k, now);
  for (auto& [host, e] : hosts_)
    if (!hosts.contains(host) && (e.owner || !e.free_since))
      host_freed(host, now);
  std::erase_if(nodes_, [&](auto& n) { return !nodes.contains(n.first); });
  for (auto& [node, k] : nodes)
    node_put(node, k.avoid, k.lease, now);
}

void ownership::host_owned(const std::string& host, owner_key k, time_point now) {
  auto& e = hosts_[host];
  bool ours = lease_ != 0 && k.lease == lease_;
  if (ours && !(e.owner && e.owner->lease == lease_)) {
    e.won_at = now;
    e.link_down_since.reset(); // a down-time before the claim is not this claim's
  }
  if (!ours) {
    e.won_at.reset();
    e.release_due = e.release_sent = false;
  }
  e.owner = std::move(k);
  e.free_since.reset();
  e.claiming = false;
}

void ownership::host_freed(const std::string& host, time_point now) {
  auto& e = hosts_[host];
  e.owner.reset();
  e.won_at.reset();
  e.free_since = now;
  e.release_due = e.release_sent = false;
  e.link_down_since.reset();
}

void ownership::node_put(const std::string& node, std::vector<std::string> avoid,
                         int64_t lease, time_point now) {
  auto [i, added] = nodes_.try_emplace(node);
  if (added || i->second.lease != lease)
    i->second.since = now;
  i->second.lease = lease;
  i->second.avoid = {avoid.begin(), avoid.end()};
}

void ownership::node_gone(const std::string& node) {
  nodes_.erase(node);
}

void ownership::link_changed(const std::string& host, bool up, time_point now) {
  auto& e = hosts_[host];
  if (up)
    e.link_down_since.reset();
  else if (!e.link_down_since)
    e.link_down_since = now;
}

void ownership::claiming(const std::string& host, bool on) {
  hosts_[host].claiming = on;
}

void ownership::releasing(const std::string& host, bool on) {
  hosts_[host].release_sent = on;
}

bool ownership::mine(const std::string& host) const {
  auto i = hosts_.find(host);
  return lease_ != 0 && i != hosts_.end() && i->second.owner
         && i->second.owner->lease == lease_;
}

std::optional<int64_t> ownership::token_of(const std::string& host) const {
  if (!mine(host))
    return std::nullopt;
  return hosts_.at(host).owner->token;
}

// The live nodes by their score for `host`, best first; nodes that avoid
// it count only when every node does.
std::vector<std::string> ownership::ranking(const std::string& host) const {
  std::set<std::string> live;
  for (auto& [n, _] : nodes_)
    live.insert(n);
  if (lease_ != 0)
    live.insert(cfg_.me);
  auto avoids = [&](const std::string& n) {
    if (n == cfg_.me) {
      auto i = hosts_.find(host);
      return i != hosts_.end() && i->second.avoid_until.has_value();
    }
    auto i = nodes_.find(n);
    return i != nodes_.end() && i->second.avoid.contains(host);
  };
  std::vector<std::string> out;
  for (auto& n : live)
    if (!avoids(n))
      out.push_back(n);
  if (out.empty())
    out.assign(live.begin(), live.end());
  std::sort(out.begin(), out.end(), [&](const std::string& a, const std::string& b) {
    return rendezvous_score(a, host) > rendezvous_score(b, host);
  });
  return out;
}

std::string ownership::wanted(const std::string& host) const {
  auto r = ranking(host);
  return r.empty() ? std::string{} : r.front();
}

// A link down counts from when the host became usable: a link cannot
// come up before the guard lets the fleet dial it.
std::optional<ownership::release_reason>
ownership::wants_release(const std::string& host, const host_entry& e, time_point now) const {
  if (!e.configured)
    return release_reason::unconfigured;
  if (cfg_.unreachable_release.count() > 0 && e.link_down_since && e.won_at
      && now - std::max(*e.link_down_since, usable_at(e)) >= cfg_.unreachable_release)
    return release_reason::unreachable;
  auto w = wanted(host);
  if (w.empty() || w == cfg_.me)
    return std::nullopt;
  // A host is handed over only once it has been this node's to change
  // for a TTL: a node that comes back while the host's interim owner waits
  // out its guard would otherwise cost the host two guards back to back
  // with nothing managed in between.
  auto n = nodes_.find(w);
  if (n != nodes_.end() && e.won_at && n->second.since > *e.won_at
      && now - n->second.since >= cfg_.lease_ttl && now - usable_at(e) >= cfg_.lease_ttl)
    return release_reason::handover;
  return std::nullopt;
}

ownership::step ownership::decide(time_point now) {
  step out;
  if (lease_ == 0)
    return out;
  for (auto& [host, e] : hosts_) {
    if (e.avoid_until && now >= *e.avoid_until)
      e.avoid_until.reset();
    if (mine(host)) {
      if (e.release_due) {
        if (!e.release_sent)
          out.releases.push_back({host, e.owner->mod_revision, release_reason::handover});
        continue;
      }
      auto why = wants_release(host, e, now);
      if (!why)
        continue;
      if (*why == release_reason::unreachable)
        e.avoid_until = now + cfg_.avoid_for;
      e.link_down_since.reset();
      e.release_due = true;
      out.releases.push_back({host, e.owner->mod_revision, *why});
      continue;
    }
    if (e.owner || e.claiming || !e.configured || !e.free_since)
      continue;
    auto r = ranking(host);
    auto at = std::find(r.begin(), r.end(), cfg_.me);
    if (at == r.end())
      continue;
    auto rank = at - r.begin();
    if (rank == 0 || now - *e.free_since >= rank * cfg_.lease_ttl)
      out.claim.push_back(host);
  }
  return out;
}

ownership::time_point ownership::usable_at(const host_entry& e) const {
  // From when this node's claim was seen: a claim follows the host's
  // freeing, never precedes it, so the old owner's last call has had at
  // least a whole guard.
  auto won = e.won_at.value_or(time_point{});
  return won + e.guard;
}

std::map<std::string, int64_t> ownership::usable(time_point now) const {
  std::map<std::string, int64_t> out;
  for (auto& [host, e] : hosts_)
    if (e.configured && mine(host) && e.won_at && !e.release_due && now >= usable_at(e))
      out.emplace(host, e.owner->token);
  return out;
}

std::vector<std::string> ownership::avoiding(time_point now) const {
  std::vector<std::string> out;
  for (auto& [host, e] : hosts_)
    if (e.avoid_until && now < *e.avoid_until)
      out.push_back(host);
  return out;
}

std::vector<host_owner> ownership::hosts(time_point now) const {
  std::vector<host_owner> out;
  for (auto& [host, e] : hosts_) {
    if (!e.configured && !mine(host))
      continue;
    host_owner row;
    row.host = host;
    row.wanted_by = wanted(host);
    if (e.owner) {
      row.owner = e.owner->node;
      row.token = e.owner->token;
    }
    if (mine(host)) {
      auto left = std::chrono::duration_cast<std::chrono::seconds>(usable_at(e) - now);
      row.state = e.won_at && left.count() > 0
                    ? "mine, guard " + std::to_string(left.count()) + " s left"
                    : "mine";
    } else {
      row.state = e.claiming ? "claiming" : e.owner ? "theirs" : "free";
    }
    if (e.avoid_until)
      row.state += ", avoided (no link)";
    out.push_back(std::move(row));
  }
  return out;
}

std::vector<cluster_member> ownership::nodes(time_point now) const {
  std::map<std::string, cluster_member> by_name;
  for (auto& [n, e] : nodes_) {
    auto& m = by_name[n];
    m.name = n;
    m.lease = e.lease;
    m.lease_age_s = std::chrono::duration<double>(now - e.since).count();
    m.avoid.assign(e.avoid.begin(), e.avoid.end());
  }
  for (auto& [_, e] : hosts_)
    if (e.owner) {
      auto& m = by_name[e.owner->node];
      m.name = e.owner->node;
      ++m.hosts;
    }
  std::vector<cluster_member> out;
  for (auto& [_, m] : by_name)
    out.push_back(std::move(m));
  return out;
}

} // namespace egress
