// drain-host, make-before-break: the host is cordoned (no new member goes
// there), and each of its group members is handed over to another host of
// its group, at most max-surge of a group at a time:
//   1. a replacement proxy actor makes the member's VM on the other host and
//      is probed under the key member@host, outside the rotation;
//   2. once it passes, it takes the member's name: the health actor renames
//      its verdict (the member never leaves the rotation), the rotation's
//      entry moves to the new address in one generation, and the gateway
//      moves HAProxy's server there (new connections go to the replacement);
//   3. after the gateway's drain grace the original deletes its VM and ends.
// undrain-host lifts the cordon; handovers under way finish, members are
// not moved back. The group book (actors/parts/group_book.hpp) says where a
// replacement goes.

#include "actors/fleet.hpp"

#include <algorithm>

#include "base/log.hpp"
#include "messages/error.hpp"

namespace egress {

namespace {

std::string key_of(const std::string& member, const std::string& host) {
  return member + "@" + host;
}

const host_config* host_config_of(const fleet_state& st, const std::string& host) {
  auto i = std::find_if(st.cfg.hosts.begin(), st.cfg.hosts.end(),
                        [&](auto& h) { return h.name == host; });
  return i == st.cfg.hosts.end() ? nullptr : &*i;
}

// The handover whose replacement sent the current message and has not
// taken its member's name yet.
handover* sent_by_replacement(fleet_pointer self, std::string* member) {
  auto sender = self->current_sender();
  if (!sender)
    return nullptr;
  for (auto& [m, h] : self->state.handovers)
    if (!h.original && h.replacement && h.replacement.address() == sender->address()) {
      *member = m;
      return &h;
    }
  return nullptr;
}

uint32_t moving_in(const fleet_state& st, const group_config& g) {
  uint32_t n = 0;
  for (auto& [m, h] : st.handovers)
    n += !h.original && st.groups.group_of(m) == &g ? 1 : 0;
  return n;
}

void start_replacement(fleet_pointer self, const std::string& member, const std::string& from,
                       const std::string& to) {
  auto& st = self->state;
  auto g = st.groups.group_of(member);
  auto h = host_config_of(st, to);
  if (!g || !h)
    return;
  auto& ho = st.handovers[member];
  ho.from = from;
  ho.to = to;
  ho.link = st.links.at(to);
  ho.started = std::chrono::steady_clock::now();
  ho.replacement = start_proxy(self, member_spec(*g, member, *h));
  log::info(to_string(actor_kind::fleet),
            member + ": its replacement is made on " + to + " (drain of " + from + ")");
}

// The replacement passed: it is the member now (step 2 above).
void take_name(fleet_pointer self, const std::string& member, handover& ho) {
  auto& st = self->state;
  auto g = st.groups.group_of(member);
  auto h = host_config_of(st, ho.to);
  if (!g || !h)
    return;
  auto spec = member_spec(*g, member, *h);
  if (auto i = st.proxies.find(member); i != st.proxies.end()) {
    ho.original = i->second;
    st.silenced.insert(ho.original.address());
  }
  st.proxies[member] = ho.replacement;
  if (auto i = st.spec_at.find(member); i != st.spec_at.end())
    st.cfg.proxies[i->second] = spec;
  st.view.declare_proxy(spec);
  st.groups.handed_over(member, ho.to);
  self->send(st.health, atom::rename_v, key_of(member, ho.to), member);
  auto last = ho.last;
  last.name = member;
  record_status(self, std::move(last));
  if (auto d = st.host_drains.find(ho.from); d != st.host_drains.end())
    ++d->second.moved;
  log::info(to_string(actor_kind::fleet), member + ": handed over from " + ho.from + " to "
                                            + ho.to + "; the original goes after the drain grace");
  // Connections made through the gateway before the move may still run to
  // the original: it goes after the gateway's drain grace (at once without
  // one).
  auto grace = st.gateway ? st.cfg.gateway.drain_grace : caf::timespan{0};
  self->delayed_send(self, grace, atom::erase_v, atom::poll_v, member);
}

// `gone`: the original deleted its VM. Otherwise the copy stays in the
// survey of its host, whose stale removal takes it.
void finish_handover(fleet_pointer self, const std::string& member, bool gone) {
  auto& st = self->state;
  auto i = st.handovers.find(member);
  if (i == st.handovers.end())
    return;
  auto from = i->second.from;
  st.handovers.erase(i);
  if (gone)
    st.groups.removed(from, {member});
  if (auto d = st.host_drains.find(from); d != st.host_drains.end()) {
    bool left = std::any_of(st.groups.host_of().begin(), st.groups.host_of().end(),
                            [&](auto& x) { return x.second == from; });
    if (!left)
      log::info(to_string(actor_kind::fleet), from + ": drained: no group member runs there");
  }
  advance_drains(self);
}

} // namespace

caf::result<host_drain> cordon_host(fleet_pointer self, const std::string& host, bool on) {
  auto& st = self->state;
  if (!host_config_of(st, host))
    return make_error(ec::unknown_name, "no host named \"" + host + "\"");
  if (st.stopping)
    return make_error(ec::shutting_down, "the engine is stopping");
  if (on) {
    auto& d = st.host_drains[host];
    d.host = host;
    d.cordoned = true;
    d.draining = true;
  } else {
    st.host_drains.erase(host);
  }
  st.groups.cordon(host, on);
  log::info(to_string(actor_kind::fleet),
            host + (on ? ": cordoned; its group members are handed over to other hosts"
                       : ": cordon lifted (members are not moved back)"));
  advance_drains(self);
  for (auto& d : drain_rows(st))
    if (d.host == host)
      return d;
  host_drain out;
  out.host = host;
  return out;
}

// A replacement that has not passed within this is given up and made
// again (elsewhere, if its host is the trouble).
constexpr auto handover_bound = std::chrono::minutes(10);

void advance_drains(fleet_pointer self) {
  auto& st = self->state;
  if (st.stopping)
    return;
  auto now = std::chrono::steady_clock::now();
  std::vector<std::string> stuck;
  for (auto& [m, h] : st.handovers) {
    auto link = st.links.find(h.to);
    if (!h.original
        && (link == st.links.end() || link->second != h.link || st.groups.is_lost(h.to, now)
            || now - h.started > handover_bound))
      stuck.push_back(m);
  }
  cancel_handovers(self, stuck);
  std::map<std::string, uint32_t> in_flight; // replacements by host they go to
  for (auto& [_, h] : st.handovers)
    if (!h.original)
      ++in_flight[h.to];
  for (auto& [host, d] : st.host_drains) {
    d.waiting.clear();
    std::vector<std::string> leaving;
    for (auto& [member, at] : st.groups.host_of())
      if (at == host && !st.handovers.contains(member) && st.proxies.contains(member))
        leaving.push_back(member);
    for (auto& member : leaving) {
      auto g = st.groups.group_of(member);
      if (!g || moving_in(st, *g) >= g->max_surge)
        continue;
      auto [to, why] = st.groups.successor_host(member, in_flight);
      if (to.empty()) {
        if (d.waiting.empty())
          d.waiting = member + ": " + why;
        continue;
      }
      start_replacement(self, member, host, to);
      ++in_flight[to];
    }
  }
}

bool take_replacement_status(fleet_pointer self, const proxy_status& s) {
  std::string member;
  auto ho = sent_by_replacement(self, &member);
  if (!ho)
    return false;
  ho->last = s;
  probe_as(self, s, key_of(member, ho->to));
  return true;
}

bool take_replacement_health(fleet_pointer self, const proxy_health& h) {
  auto at = h.name.rfind('@');
  if (at == std::string::npos)
    return false;
  auto& st = self->state;
  auto i = st.handovers.find(h.name.substr(0, at));
  if (i != st.handovers.end() && !i->second.original && i->second.to == h.name.substr(at + 1)
      && h.in_rotation)
    take_name(self, i->first, i->second);
  return true; // a key is no name: never in the view
}

bool from_silenced(fleet_pointer self) {
  auto sender = self->current_sender();
  return sender && self->state.silenced.contains(sender->address());
}

void erase_original(fleet_pointer self, const std::string& member) {
  auto& st = self->state;
  auto i = st.handovers.find(member);
  if (i == st.handovers.end() || !i->second.original)
    return;
  auto h = host_config_of(st, i->second.from);
  auto timeout = h ? caller_timeout(*h) : caf::timespan{std::chrono::minutes(1)};
  auto original = i->second.original;
  self->request(original, timeout, atom::erase_v)
    .then([self, member](proxy_status&) { finish_handover(self, member, true); },
          [self, member, original](caf::error& err) {
            // Its VM stays where its host could not be reached: stale there,
            // removed by mark once the host answers (fleet_groups.cpp). Its
            // actor must not live on to recreate it.
            log::warn(to_string(actor_kind::fleet),
                      member + ": the original was not deleted: " + render(err));
            self->send_exit(original, caf::exit_reason::user_shutdown);
            finish_handover(self, member, false);
          });
}

void cancel_handovers(fleet_pointer self, const std::vector<std::string>& members) {
  auto& st = self->state;
  for (auto& m : members) {
    auto i = st.handovers.find(m);
    if (i == st.handovers.end() || i->second.original)
      continue; // none, or the name is taken: the original goes as planned
    auto r = i->second.replacement;
    st.silenced.insert(r.address());
    self->send(st.health, atom::forget_v, key_of(m, i->second.to));
    auto h = host_config_of(st, i->second.to);
    self->request(r, h ? caller_timeout(*h) : caf::timespan{std::chrono::minutes(1)},
                  atom::erase_v)
      .then([](proxy_status&) {},
            // Not deleted: the copy is stale on its host, and its actor ends.
            [self, r](caf::error&) { self->send_exit(r, caf::exit_reason::user_shutdown); });
    st.handovers.erase(i);
  }
}

bool replacement_down(fleet_pointer self, const caf::actor_addr& who) {
  auto& st = self->state;
  for (auto i = st.handovers.begin(); i != st.handovers.end(); ++i)
    if (!i->second.original && i->second.replacement.address() == who) {
      log::warn(to_string(actor_kind::fleet),
                i->first + ": its replacement on " + i->second.to + " ended; tried again");
      self->send(st.health, atom::forget_v, key_of(i->first, i->second.to));
      st.handovers.erase(i);
      return true;
    }
  return false;
}

std::vector<host_drain> drain_rows(const fleet_state& st) {
  std::vector<host_drain> out;
  for (auto& [host, d] : st.host_drains) {
    auto row = d;
    row.members = 0;
    row.moving = 0;
    for (auto& [_, at] : st.groups.host_of())
      row.members += at == host ? 1 : 0;
    for (auto& [_, h] : st.handovers)
      row.moving += h.from == host && !h.original ? 1 : 0;
    out.push_back(std::move(row));
  }
  return out;
}

} // namespace egress
