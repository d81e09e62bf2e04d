#include "actors/parts/placement.hpp"

#include <algorithm>
#include <set>
#include <tuple>

namespace egress {

namespace {

// What each host has taken so far in this placement.
struct host_use {
  uint32_t members = 0;
  uint64_t memory_mib = 0;
};

struct book {
  const std::map<std::string, placement_host>& hosts;
  std::map<std::string, host_use> used;

  // Why `host` cannot take a member of `g` now; empty if it can.
  std::string refusal(const std::string& host, const placement_group& g) const {
    auto h = hosts.find(host);
    if (h == hosts.end())
      return "not a declared host";
    if (!h->second.alive)
      return "its link is dead";
    if (h->second.cordoned)
      return "cordoned";
    auto u = used.find(host);
    auto members = u == used.end() ? 0u : u->second.members;
    auto memory = u == used.end() ? uint64_t{0} : u->second.memory_mib;
    if (h->second.max_proxies > 0 && members >= h->second.max_proxies)
      return "full (max-proxies " + std::to_string(h->second.max_proxies) + ")";
    if (memory + g.memory_mib > h->second.free_memory_mib)
      return "no memory for " + std::to_string(g.memory_mib) + " MiB ("
             + std::to_string(h->second.free_memory_mib - std::min(memory,
                                                                   h->second.free_memory_mib))
             + " MiB left)";
    return {};
  }

  void take(const std::string& host, const placement_group& g) {
    auto& u = used[host];
    ++u.members;
    u.memory_mib += g.memory_mib;
  }
};

uint32_t count_of(const std::map<std::string, uint32_t>& m, const std::string& key) {
  auto i = m.find(key);
  return i == m.end() ? 0u : i->second;
}

std::string zone_of(const std::map<std::string, placement_host>& hosts, const std::string& host) {
  auto h = hosts.find(host);
  return h == hosts.end() || h->second.zone.empty() ? "host:" + host : h->second.zone;
}

// The host of `g` a new member goes to, or why none can take it.
std::pair<std::string, std::string> choose(const placement_group& g, const book& b,
                                           const std::map<std::string, uint32_t>& of_group,
                                           const std::map<std::string, uint32_t>& of_zone) {
  std::string best, why;
  std::tuple<uint32_t, uint32_t, uint32_t, size_t> best_key{};
  for (size_t i = 0; i < g.hosts.size(); ++i) {
    auto& host = g.hosts[i];
    if (auto no = b.refusal(host, g); !no.empty()) {
      why += (why.empty() ? "" : ", ") + host + ": " + no;
      continue;
    }
    auto u = b.used.find(host);
    std::tuple key{count_of(of_group, host), count_of(of_zone, zone_of(b.hosts, host)),
                   u == b.used.end() ? 0u : u->second.members, i};
    if (best.empty() || key < best_key) {
      best = host;
      best_key = key;
    }
  }
  if (g.hosts.empty())
    why = "the group names no host";
  return {best, why};
}

} // namespace

std::string member_name(const std::string& group, uint32_t n) {
  return group + "-" + std::to_string(n);
}

placement place(const std::vector<placement_group>& groups,
                const std::map<std::string, placement_host>& hosts,
                const std::map<std::string, std::string>& now,
                const std::map<std::string, uint32_t>& other_load,
                const std::set<std::string>* only) {
  placement out;
  book b{hosts, {}};
  for (auto& [host, n] : other_load)
    b.used[host].members += n;
  // First every member that stays where it runs, so that new members see
  // the room the staying ones already take.
  for (auto& g : groups) {
    std::set<std::string> own(g.hosts.begin(), g.hosts.end());
    for (uint32_t n = 1; n <= g.count; ++n) {
      auto name = member_name(g.name, n);
      if (auto at = now.find(name); at != now.end() && own.count(at->second) > 0) {
        out.host_of[name] = at->second;
        b.take(at->second, g);
      }
    }
  }
  for (auto& g : groups) {
    std::map<std::string, uint32_t> of_group, of_zone;
    for (uint32_t n = 1; n <= g.count; ++n)
      if (auto at = out.host_of.find(member_name(g.name, n)); at != out.host_of.end()) {
        ++of_group[at->second];
        ++of_zone[zone_of(hosts, at->second)];
      }
    for (uint32_t n = 1; n <= g.count; ++n) {
      auto name = member_name(g.name, n);
      if (out.host_of.count(name) > 0 || (only != nullptr && only->count(name) == 0))
        continue;
      if (!g.frozen.empty()) {
        out.unplaced.push_back({name, g.frozen});
        continue;
      }
      auto [host, why] = choose(g, b, of_group, of_zone);
      if (host.empty()) {
        out.unplaced.push_back({name, "no host of group " + g.name + " can take it: " + why});
        continue;
      }
      out.host_of[name] = host;
      b.take(host, g);
      ++of_group[host];
      ++of_zone[zone_of(hosts, host)];
    }
  }
  return out;
}

} // namespace egress
