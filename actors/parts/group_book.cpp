#include "actors/parts/group_book.hpp"

#include <algorithm>

#include "base/time_text.hpp"

namespace egress {

namespace {

// "eu-12" -> ("eu", 12); n == 0 when `name` is not shaped like a member.
std::pair<std::string, uint32_t> split_member(const std::string& name) {
  auto dash = name.rfind('-');
  if (dash == std::string::npos || dash == 0 || dash + 1 == name.size()
      || name.size() - dash - 1 > 6 || name[dash + 1] == '0')
    return {{}, 0};
  uint32_t n = 0;
  for (auto i = dash + 1; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9')
      return {{}, 0};
    n = n * 10 + static_cast<uint32_t>(name[i] - '0');
  }
  return {name.substr(0, dash), n};
}

bool lists(const group_config& g, const std::string& host) {
  return std::find(g.hosts.begin(), g.hosts.end(), host) != g.hosts.end();
}

} // namespace

// -- what it is fed ---------------------------------------------------------------

void group_book::configure(const engine_config& cfg, clock::time_point now) {
  groups_ = cfg.groups;
  index_.clear();
  for (size_t i = 0; i < groups_.size(); ++i)
    index_[groups_[i].name] = i;
  hosts_.clear();
  for (auto& h : cfg.hosts)
    hosts_[h.name] = h;
  hand_load_.clear();
  for (auto& p : cfg.proxies)
    ++hand_load_[p.host];
  grace_ = cfg.host_grace;
  std::erase_if(state_, [&](auto& x) { return !hosts_.contains(x.first); });
  for (auto& h : cfg.hosts)
    if (!state_.contains(h.name))
      state_[h.name].since = now;
  std::erase_if(host_of_, [&](auto& x) {
    return !is_member(x.first) || !hosts_.contains(x.second);
  });
  std::erase_if(replacing_, [&](auto& x) { return !host_of_.contains(x); });
  dirty_ = true;
}

void group_book::link_changed(const std::string& host, link_state state,
                              clock::time_point now) {
  auto i = state_.find(host);
  if (i == state_.end())
    return;
  auto& h = i->second;
  h.failed_once = h.failed_once || state == link_state::dead;
  bool up = state == link_state::up;
  if (up == h.up)
    return;
  h.up = up;
  h.since = now;
  h.loss_seen = false;
  dirty_ = true;
}

void group_book::surveyed(const std::string& host, host_survey survey) {
  if (auto i = state_.find(host); i != state_.end()) {
    i->second.survey = std::move(survey);
    dirty_ = true;
  }
}

void group_book::removed(const std::string& host, const std::vector<std::string>& names) {
  if (auto i = state_.find(host); i != state_.end() && i->second.survey)
    for (auto& n : names)
      i->second.survey->marked.erase(n);
}

void group_book::cordon(const std::string& host, bool on) {
  if (auto i = state_.find(host); i != state_.end() && i->second.cordoned != on) {
    i->second.cordoned = on;
    dirty_ = true;
  }
}

bool group_book::cordoned(const std::string& host) const {
  auto i = state_.find(host);
  return i != state_.end() && i->second.cordoned;
}

void group_book::handed_over(const std::string& member, const std::string& host) {
  if (is_member(member) && hosts_.contains(host)) {
    host_of_[member] = host;
    dirty_ = true;
  }
}

// -- what it says ---------------------------------------------------------------

std::pair<std::string, std::string>
group_book::successor_host(const std::string& member,
                           const std::map<std::string, uint32_t>& in_flight) const {
  auto g = group_of(member);
  auto at = host_of_.find(member);
  if (!g || at == host_of_.end())
    return {{}, "not a placed member"};
  auto now = host_of_;
  now.erase(member);
  auto hosts = room();
  hosts[at->second].cordoned = true; // never back where it leaves
  std::vector<placement_group> all;
  for (auto& x : groups_)
    all.push_back({x.name, x.count, x.hosts, x.member.memory_mib, {}});
  std::set<std::string> only{member};
  auto load = hand_load_;
  for (auto& [host, n] : in_flight)
    load[host] += n;
  auto result = place(all, hosts, now, load, &only);
  auto i = result.host_of.find(member);
  if (i != result.host_of.end())
    return {i->second, {}};
  for (auto& u : result.unplaced)
    if (u.member == member)
      return {{}, u.reason};
  return {{}, "no host of group " + g->name + " can take it"};
}

bool group_book::is_member(const std::string& name) const {
  return group_of(name) != nullptr;
}

const group_config* group_book::group_of(const std::string& member) const {
  auto [group, n] = split_member(member);
  auto i = index_.find(group);
  if (n == 0 || i == index_.end() || n > groups_[i->second].count)
    return nullptr;
  return &groups_[i->second];
}

bool group_book::lost(const host_state& h, clock::time_point now) const {
  return !h.up && now - h.since >= grace_;
}

bool group_book::listed(const std::string& host) const {
  return std::any_of(groups_.begin(), groups_.end(), [&](auto& g) { return lists(g, host); });
}

bool group_book::surveyed(const std::string& host) const {
  auto i = state_.find(host);
  return i != state_.end() && i->second.survey.has_value();
}

bool group_book::is_lost(const std::string& host, clock::time_point now) const {
  auto i = state_.find(host);
  return i == state_.end() || lost(i->second, now);
}

bool group_book::due(clock::time_point now) const {
  if (dirty_ || !replacing_.empty())
    return true;
  return std::any_of(state_.begin(), state_.end(),
                     [&](auto& x) { return !x.second.loss_seen && lost(x.second, now); });
}

uint32_t group_book::down_hosts(const group_config& g) const {
  uint32_t n = 0;
  for (auto& h : g.hosts)
    if (auto i = state_.find(h); i == state_.end() || !i->second.up)
      ++n;
  return n;
}

std::string group_book::held(const group_config& g) const {
  auto down = down_hosts(g);
  if (down * 2 <= g.hosts.size())
    return {};
  return std::to_string(down) + " of " + std::to_string(g.hosts.size()) + " hosts of group "
         + g.name + " are down: nothing of it is placed until at most half are";
}

// Every host surveyed, or failed at least once: a copy of a member not
// found yet can only be on a host that has not answered.
bool group_book::ready(const group_config& g) const {
  return std::all_of(g.hosts.begin(), g.hosts.end(), [&](auto& h) {
    auto i = state_.find(h);
    return i != state_.end() && (i->second.survey || i->second.failed_once);
  });
}

// Members no one placed yet take the host that has a copy, the group's
// hosts in order.
void group_book::adopt_found(const group_config& g) {
  for (auto& host : g.hosts) {
    auto i = state_.find(host);
    if (i == state_.end() || !i->second.survey)
      continue;
    for (auto& [name, _] : i->second.survey->marked)
      if (!host_of_.contains(name) && group_of(name) == &g)
        host_of_[name] = host;
  }
}

// The members of `g` that leave lost hosts in this step: none while the
// group is held, at most max-surge not in the rotation yet.
std::vector<std::string> group_book::take_off_lost(const group_config& g,
                                                   clock::time_point now) {
  std::vector<std::string> out;
  if (!held(g).empty())
    return out;
  uint32_t in_flight = 0;
  for (auto& name : replacing_)
    in_flight += group_of(name) == &g ? 1 : 0;
  for (uint32_t n = 1; n <= g.count && in_flight + out.size() < g.max_surge; ++n) {
    auto name = member_name(g.name, n);
    auto at = host_of_.find(name);
    if (at == host_of_.end())
      continue;
    if (auto h = state_.find(at->second); h != state_.end() && lost(h->second, now))
      out.push_back(name);
  }
  return out;
}

// What each host can still take: its max-proxies, and the memory libvirt
// reported free at its survey plus what the members running there then
// use, less its reserve (unknown memory limits nothing).
std::map<std::string, placement_host> group_book::room() const {
  std::map<std::string, placement_host> out;
  for (auto& [name, h] : hosts_) {
    auto& r = out[name];
    r.max_proxies = h.max_proxies;
    r.zone = h.zone;
    r.free_memory_mib = std::numeric_limits<uint64_t>::max();
    auto s = state_.find(name);
    if (s == state_.end())
      continue;
    r.alive = s->second.up;
    r.cordoned = s->second.cordoned;
    if (!s->second.survey || !s->second.survey->free_memory_mib)
      continue;
    uint64_t free = *s->second.survey->free_memory_mib;
    for (auto& [member, running] : s->second.survey->marked)
      if (auto g = group_of(member); g && running) {
        auto at = host_of_.find(member);
        free += at != host_of_.end() && at->second == name ? g->member.memory_mib : 0;
      }
    r.free_memory_mib = free - std::min(free, h.memory_reserve_mib);
  }
  return out;
}

bool group_book::place_now(clock::time_point now) {
  // Compared with the result: an adoption is a change too (after a start,
  // every member may be found and none placed anew).
  auto before = host_of_;
  std::vector<placement_group> wanted;
  std::map<std::string, std::string> leaving; // member -> the lost host it leaves
  for (auto& g : groups_) {
    adopt_found(g);
    placement_group pg{g.name, g.count, g.hosts, g.member.memory_mib, held(g)};
    if (pg.frozen.empty() && !ready(g)) {
      std::string unsurveyed;
      for (auto& h : g.hosts)
        if (auto i = state_.find(h); i == state_.end() || !i->second.survey)
          unsurveyed += (unsurveyed.empty() ? "" : ", ") + h;
      pg.frozen = "waiting for the survey of " + unsurveyed;
    }
    wanted.push_back(std::move(pg));
  }
  auto keep = host_of_; // with the adopted
  for (auto& g : groups_)
    for (auto& name : take_off_lost(g, now)) {
      leaving[name] = keep[name];
      keep.erase(name);
    }
  for (auto& [_, h] : state_)
    h.loss_seen = h.loss_seen || lost(h, now);
  auto result = place(wanted, room(), keep, hand_load_);
  waiting_.clear();
  for (auto& u : result.unplaced) {
    if (auto from = leaving.find(u.member); from != leaving.end()) {
      // Stays on its lost host rather than on none.
      result.host_of[u.member] = from->second;
      waiting_.push_back({u.member, "its host " + from->second
                                      + " is lost and it cannot be placed again: " + u.reason});
      leaving.erase(from);
      continue;
    }
    waiting_.push_back({u.member, u.reason});
  }
  for (auto& [name, from] : leaving) {
    replacing_.insert(name);
    ++replacements_;
  }
  for (auto& [name, host] : result.host_of) {
    auto s = state_.find(host);
    if (s == state_.end() || s->second.up || leaving.contains(name))
      continue;
    auto g = group_of(name);
    auto why = g ? held(*g) : std::string{};
    waiting_.push_back({name, "its host " + host + " is down since "
                                + duration_text(std::chrono::duration_cast<caf::timespan>(
                                  now - s->second.since))
                                + (why.empty() ? " (placed again after host-grace "
                                                   + duration_text(grace_) + ")"
                                               : "; " + why)});
  }
  bool changed = result.host_of != before;
  host_of_ = std::move(result.host_of);
  dirty_ = false;
  return changed;
}

std::map<std::string, std::vector<std::string>> group_book::stale() const {
  std::map<std::string, std::vector<std::string>> out;
  for (auto& [host, h] : state_) {
    if (!h.up || !h.survey)
      continue;
    for (auto& [name, _] : h.survey->marked)
      if (auto at = host_of_.find(name); at != host_of_.end() && at->second != host)
        out[host].push_back(name);
  }
  return out;
}

bool group_book::settled(const std::string& host) const {
  auto s = state_.find(host);
  if (!listed(host))
    return true;
  if (s == state_.end() || !s->second.survey)
    return false;
  return std::all_of(s->second.survey->marked.begin(), s->second.survey->marked.end(),
                     [&](auto& x) {
                       auto g = group_of(x.first);
                       return !g || !lists(*g, host) || host_of_.contains(x.first);
                     });
}

std::vector<group_status> group_book::status() const {
  std::vector<group_status> out;
  for (auto& g : groups_) {
    group_status x;
    x.name = g.name;
    x.count = g.count;
    x.held = held(g);
    out.push_back(std::move(x));
  }
  for (auto& [name, host] : host_of_)
    if (auto g = group_of(name)) {
      auto& x = out[index_.at(g->name)];
      ++x.placed;
      ++x.per_host[host];
    }
  for (auto& name : replacing_)
    if (auto g = group_of(name))
      ++out[index_.at(g->name)].replacing;
  // A status answer stays small however many wait: the first few, then
  // how many more (the reasons repeat).
  constexpr size_t shown = 50;
  std::map<std::string, size_t> more;
  for (auto& w : waiting_)
    if (auto g = group_of(w.member)) {
      auto& x = out[index_.at(g->name)];
      if (x.waiting.size() < shown)
        x.waiting.push_back(w.member + ": " + w.reason);
      else
        ++more[g->name];
    }
  for (auto& [group, n] : more)
    out[index_.at(group)].waiting.push_back("and " + std::to_string(n) + " more");
  return out;
}

} // namespace egress
