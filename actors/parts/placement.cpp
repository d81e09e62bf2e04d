#include "actors/parts/placement.hpp"

#include <algorithm>
#include <tuple>
#include <unordered_map>

namespace egress {

namespace {

// Hosts by position, so that choosing among a group's hosts for each of
// thousands of members compares integers, not names (bench/scale.cpp
// --groups: 10,000 members over 200 hosts).
struct book {
  std::vector<std::string> names;
  std::vector<const placement_host*> hosts;
  std::vector<uint32_t> zone;     // a zone id per host
  std::vector<uint32_t> members;  // taken so far, any group and the others
  std::vector<uint64_t> memory;   // MiB taken so far
  std::unordered_map<std::string, size_t> index;

  explicit book(const std::map<std::string, placement_host>& all) {
    std::unordered_map<std::string, uint32_t> zones;
    for (auto& [name, h] : all) {
      index[name] = names.size();
      names.push_back(name);
      hosts.push_back(&h);
      auto key = h.zone.empty() ? "host:" + name : h.zone;
      zone.push_back(zones.try_emplace(key, static_cast<uint32_t>(zones.size())).first->second);
    }
    members.assign(names.size(), 0);
    memory.assign(names.size(), 0);
  }

  // The position of `host`, or -1 when it is not a declared host.
  long at(const std::string& host) const {
    auto i = index.find(host);
    return i == index.end() ? -1 : static_cast<long>(i->second);
  }

  bool open(size_t h, uint64_t need) const {
    auto& x = *hosts[h];
    return x.alive && !x.cordoned && (x.max_proxies == 0 || members[h] < x.max_proxies)
           && memory[h] + need <= x.free_memory_mib;
  }

  // Why `h` cannot take a member needing `need` MiB (only asked once no
  // host can: the words are built for the unplaced alone).
  std::string refusal(long h, uint64_t need) const {
    if (h < 0)
      return "not a declared host";
    auto& x = *hosts[static_cast<size_t>(h)];
    auto i = static_cast<size_t>(h);
    if (!x.alive)
      return "its link is dead";
    if (x.cordoned)
      return "cordoned";
    if (x.max_proxies > 0 && members[i] >= x.max_proxies)
      return "full (max-proxies " + std::to_string(x.max_proxies) + ")";
    return "no memory for " + std::to_string(need) + " MiB ("
           + std::to_string(x.free_memory_mib - std::min(memory[i], x.free_memory_mib))
           + " MiB left)";
  }

  void take(size_t h, uint64_t need) {
    ++members[h];
    memory[h] += need;
  }
};

// One group's hosts by position (-1: undeclared), with its own counts.
struct group_view {
  std::vector<long> hosts;
  std::vector<uint32_t> of_group;              // per position in `hosts`
  std::unordered_map<uint32_t, uint32_t> of_zone; // zone id -> members of the group

  group_view(const placement_group& g, const book& b) {
    for (auto& h : g.hosts)
      hosts.push_back(b.at(h));
    of_group.assign(hosts.size(), 0);
  }

  // Position in `hosts` of host `h`, or -1.
  long position(long h) const {
    auto i = std::find(hosts.begin(), hosts.end(), h);
    return i == hosts.end() || h < 0 ? -1 : static_cast<long>(i - hosts.begin());
  }

  void count(size_t pos, const book& b) {
    ++of_group[pos];
    ++of_zone[b.zone[static_cast<size_t>(hosts[pos])]];
  }

  uint32_t zone_count(const book& b, size_t h) const {
    auto i = of_zone.find(b.zone[h]);
    return i == of_zone.end() ? 0u : i->second;
  }
};

// The position of the host of `g` a new member goes to, or -1.
long choose(const group_view& v, const book& b, uint64_t need) {
  long best = -1;
  std::tuple<uint32_t, uint32_t, uint32_t, size_t> best_key{};
  for (size_t i = 0; i < v.hosts.size(); ++i) {
    auto h = v.hosts[i];
    if (h < 0 || !b.open(static_cast<size_t>(h), need))
      continue;
    auto hu = static_cast<size_t>(h);
    std::tuple key{v.of_group[i], v.zone_count(b, hu), b.members[hu], i};
    if (best < 0 || key < best_key) {
      best = static_cast<long>(i);
      best_key = key;
    }
  }
  return best;
}

std::string why_nowhere(const placement_group& g, const group_view& v, const book& b) {
  if (g.hosts.empty())
    return "the group names no host";
  std::string out;
  for (size_t i = 0; i < g.hosts.size(); ++i)
    out += (out.empty() ? "" : ", ") + g.hosts[i] + ": " + b.refusal(v.hosts[i], g.memory_mib);
  return out;
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
  book b{hosts};
  for (auto& [host, n] : other_load)
    if (auto h = b.at(host); h >= 0)
      b.members[static_cast<size_t>(h)] += n;
  std::vector<group_view> views;
  for (auto& g : groups)
    views.emplace_back(g, b);
  // First every member that stays where it runs, so that new members see
  // the room the staying ones already take.
  for (size_t k = 0; k < groups.size(); ++k) {
    auto& g = groups[k];
    for (uint32_t n = 1; n <= g.count; ++n) {
      auto name = member_name(g.name, n);
      auto at = now.find(name);
      if (at == now.end())
        continue;
      auto h = b.at(at->second);
      auto pos = views[k].position(h);
      if (pos < 0)
        continue; // not (or no longer) one of its group's hosts
      out.host_of.emplace(std::move(name), at->second);
      b.take(static_cast<size_t>(h), g.memory_mib);
      views[k].count(static_cast<size_t>(pos), b);
    }
  }
  for (size_t k = 0; k < groups.size(); ++k) {
    auto& g = groups[k];
    auto& v = views[k];
    std::string nowhere; // once no host can take one, none takes the next (room only shrinks)
    for (uint32_t n = 1; n <= g.count; ++n) {
      auto name = member_name(g.name, n);
      if (out.host_of.count(name) > 0 || (only != nullptr && only->count(name) == 0))
        continue;
      if (!g.frozen.empty()) {
        out.unplaced.push_back({name, g.frozen});
        continue;
      }
      auto pos = nowhere.empty() ? choose(v, b, g.memory_mib) : -1;
      if (pos < 0) {
        if (nowhere.empty())
          nowhere = "no host of group " + g.name + " can take it: " + why_nowhere(g, v, b);
        out.unplaced.push_back({name, nowhere});
        continue;
      }
      auto h = static_cast<size_t>(v.hosts[static_cast<size_t>(pos)]);
      out.host_of.emplace(std::move(name), b.names[h]);
      b.take(h, g.memory_mib);
      v.count(static_cast<size_t>(pos), b);
    }
  }
  return out;
}

} // namespace egress
