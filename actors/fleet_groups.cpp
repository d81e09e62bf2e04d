// The fleet's proxy groups: the config it runs (the declared one with each
// placed member as a proxy), the survey of a host whose link comes up, and
// the removal of stale copies. Where members go is the group book's
// decision (actors/parts/group_book.hpp); the fleet runs it like a reload
// (fleet.cpp, converge).

#include "actors/fleet.hpp"

#include "actors/parts/link_call.hpp"
#include "base/log.hpp"
#include "messages/error.hpp"
#include "providers/libvirt/domains.hpp"
#include "providers/provision/gc.hpp"

namespace egress {

proxy_spec member_spec(const group_config& g, const std::string& name, const host_config& h) {
  auto p = g.member;
  p.name = name;
  p.host = h.name;
  if (p.network.empty())
    p.network = h.network;
  return p;
}

namespace {

std::string listed(const std::vector<std::string>& xs) {
  std::string out;
  for (auto& x : xs)
    out += (out.empty() ? "" : ", ") + x;
  return out;
}

} // namespace

engine_config with_members(const engine_config& declared, const group_book& book) {
  auto out = declared;
  std::map<std::string, const host_config*> hosts;
  for (auto& h : declared.hosts)
    hosts[h.name] = &h;
  out.proxies.reserve(out.proxies.size() + book.host_of().size());
  for (auto& [name, host] : book.host_of())
    if (auto g = book.group_of(name); g && hosts.contains(host))
      out.proxies.push_back(member_spec(*g, name, *hosts.at(host)));
  return out;
}

void survey_host(fleet_pointer self, const std::string& host) {
  auto& st = self->state;
  auto link = st.links.find(host);
  auto h = std::find_if(st.cfg.hosts.begin(), st.cfg.hosts.end(),
                        [&](auto& x) { return x.name == host; });
  if (link == st.links.end() || h == st.cfg.hosts.end() || st.surveying.contains(host))
    return;
  st.survey_owed.erase(host);
  st.surveying.insert(host);
  // The test driver's memory figures are invented (a custom node cannot
  // tell, the default one says a few MiB): it limits nothing.
  bool memory = h->domain_type != "test";
  link_call<host_survey>(
    self, link->second, caller_timeout(*h), "survey",
    [entry = st.cfg.entry, host, memory](lv::connection& c) -> caf::expected<host_survey> {
      auto marked = lv::list_marked(c, entry);
      if (!marked)
        return marked.error();
      host_survey s;
      for (auto& d : *marked)
        // Made through another host entry that reaches the same daemon:
        // that host's copy, not this one's.
        if (d.mark.host.empty() || d.mark.host == host)
          s.marked[d.name] = d.state == domain_state::running;
      if (memory)
        if (auto free = lv::free_memory_mib(c))
          s.free_memory_mib = *free;
      return s;
    },
    // Placed at the next tick: a start surveys every host, and one
    // placement after the last costs less than one per survey.
    [self, host](host_survey& s) {
      self->state.surveying.erase(host);
      self->state.groups.surveyed(host, std::move(s));
    },
    [self, host](const caf::error& err) {
      self->state.surveying.erase(host);
      self->state.survey_owed.insert(host);
      log::warn(to_string(actor_kind::fleet), host + ": survey failed: " + render(err)
                            + " (read again at the next tick its link is up)");
    });
}

void survey_owed(fleet_pointer self) {
  auto& st = self->state;
  auto& links = st.view.links();
  // A host a reload just put in a group has not been surveyed yet.
  for (auto& [host, _] : links)
    if (st.groups.listed(host) && !st.groups.surveyed(host))
      st.survey_owed.insert(host);
  std::erase_if(st.survey_owed, [&](auto& h) { return !st.groups.listed(h); });
  auto owed = st.survey_owed; // survey_host changes it
  for (auto& host : owed)
    if (auto l = links.find(host); l != links.end() && l->second.state == link_state::up)
      survey_host(self, host);
}

void remove_stale(fleet_pointer self) {
  auto& st = self->state;
  for (auto& [host, all] : st.groups.stale()) {
    // A member being handed over is gone from there only when its
    // original has deleted its VM (fleet_drain.cpp).
    std::vector<std::string> names;
    for (auto& n : all)
      if (!st.handovers.contains(n))
        names.push_back(n);
    if (names.empty())
      continue;
    auto link = st.links.find(host);
    auto h = std::find_if(st.cfg.hosts.begin(), st.cfg.hosts.end(),
                          [&](auto& x) { return x.name == host; });
    if (link == st.links.end() || h == st.cfg.hosts.end() || st.removing.contains(host))
      continue;
    st.removing.insert(host);
    provision::gc_request req;
    req.entry = st.cfg.entry;
    req.host = host;
    req.pool = h->pool;
    req.only = {names.begin(), names.end()};
    // Placed back there meanwhile: not stale any more.
    for (auto& [member, at] : st.groups.host_of())
      if (at == host)
        req.declared.insert(member);
    link_call<gc_report>(
      self, link->second, caller_timeout(*h), "remove stale copies",
      [req](lv::connection& c) { return provision::collect(c, req); },
      [self, host, names](gc_report& r) {
        auto& st = self->state;
        st.removing.erase(host);
        // Gone, or never this entry's: not judged again either way.
        st.groups.removed(host, names);
        if (!r.domains.empty())
          log::info(to_string(actor_kind::fleet), host + ": removed the stale copies " + listed(r.domains)
                                + " (they run on other hosts now)");
      },
      [self, host](const caf::error& err) {
        self->state.removing.erase(host);
        log::warn(to_string(actor_kind::fleet), host + ": stale copies not removed: " + render(err)
                              + " (tried again at the next placement)");
      });
  }
}

} // namespace egress
