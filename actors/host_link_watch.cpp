#include "actors/host_link_watch.hpp"

#include "base/log.hpp"
#include "messages/error.hpp"

namespace egress {

namespace {

// Every watching proxy gets its domain's brief, a missing domain too: the
// proxy knows what it believes, the link does not. (A diff against the
// previous bulk read would miss a domain created after it and gone while the
// link was dead: absent both times.)
// A bulk read: when it started, and what it found.
using bulk_reading = std::pair<caf::timespan, std::vector<domain_brief>>;

void on_bulk_read(host_link_pointer self, bulk_reading& read) {
  auto& [taken, briefs] = read;
  auto& st = self->state;
  ++st.bulk_reads;
  std::map<std::string, domain_brief*> by_name;
  for (auto& b : briefs)
    by_name.emplace(b.name, &b);
  for (auto& [name, proxy] : st.watchers) {
    auto i = by_name.find(name);
    self->send(proxy, i != by_name.end()
                        ? std::move(*i->second)
                        : domain_brief{name, false, {}, domain_state::nostate, taken});
  }
}

void start_bulk_read(host_link_pointer self) {
  auto& st = self->state;
  if (st.bulk_reading || st.state != link_state::up)
    return;
  st.bulk_reading = true;
  call_job job{"bulk read", [](lv::connection& c) -> caf::expected<std::any> {
                 auto taken = host_link_state::clock::now().time_since_epoch();
                 auto briefs = lv::read_states(c);
                 if (!briefs)
                   return briefs.error();
                 for (auto& b : *briefs)
                   b.taken = taken;
                 return std::any{bulk_reading{taken, std::move(*briefs)}};
               }};
  // Through the link's own queue, like any caller's job: under its limit and
  // its budget, on its pool.
  self->request(caf::actor_cast<host_link_actor>(self), caf::infinite, atom::call_v, std::move(job))
    .then(
      [self](call_result& r) {
        self->state.bulk_reading = false;
        on_bulk_read(self, *std::any_cast<bulk_reading>(&r.value));
        if (self->state.opts.sink)
          self->send(self->state.opts.sink, self->state.snapshot());
      },
      [self](caf::error& err) {
        self->state.bulk_reading = false;
        log::warn("link", self->state.opts.host + ": bulk read failed: " + render(err));
      });
}

} // namespace

lv::domain_sink event_sink(host_link_pointer self, uint64_t gen) {
  auto link = self->address();
  auto host = self->state.opts.host;
  return [link, host, gen](const std::string& name, domain_change change) {
    if (auto h = caf::actor_cast<host_link_actor>(caf::actor_cast<caf::strong_actor_ptr>(link)))
      caf::anon_send(h, domain_event{host, name, change, gen});
  };
}

void add_watcher(host_link_pointer self, std::string name, proxy_actor proxy) {
  auto& st = self->state;
  self->monitor(proxy);
  st.watchers[std::move(name)] = std::move(proxy);
}

void forward_event(host_link_pointer self, domain_event& ev) {
  auto& st = self->state;
  ++st.events;
  // An event of an older dial arrived late, or of a dial already dead: the
  // resync after the next dial reads the domain since.
  if (ev.generation != st.generation || st.state == link_state::dead)
    return;
  if (auto i = st.watchers.find(ev.name); i != st.watchers.end())
    self->send(i->second, std::move(ev));
}

void on_link_up(host_link_pointer self) {
  if (!self->state.watchers.empty())
    start_bulk_read(self);
}

void on_safety_net_tick(host_link_pointer self) {
  auto& st = self->state;
  if (!st.watchers.empty())
    start_bulk_read(self);
  self->delayed_send(self, st.opts.bulk_read_interval, atom::poll_v);
}

void arm_redial(host_link_pointer self) {
  auto& st = self->state;
  if (st.redial_armed || st.watchers.empty() || st.state != link_state::dead)
    return;
  st.redial_armed = true;
  auto wait = std::chrono::duration_cast<caf::timespan>(st.next_dial_at
                                                        - host_link_state::clock::now());
  self->delayed_send(self, std::max(wait, caf::timespan{0}), atom::link_v);
}

void on_redial_tick(host_link_pointer self) {
  auto& st = self->state;
  st.redial_armed = false;
  if (st.state != link_state::dead || st.watchers.empty())
    return;
  auto now = host_link_state::clock::now();
  if (now < st.next_dial_at) {
    // A later death moved the backoff on while this timer ran.
    arm_redial(self);
    return;
  }
  if (redial_if_due(self)) {
    // Too many abandoned calls: look again after the longest backoff.
    st.redial_armed = true;
    self->delayed_send(self, st.opts.redial_max, atom::link_v);
  }
}

} // namespace egress
