#include "actors/host_link_watch.hpp"

#include "base/log.hpp"
#include "messages/error.hpp"

namespace egress {

namespace {

void arm_lease_timer(host_link_pointer self) {
  if (self->state.watch.arm_lease())
    self->delayed_send(self, self->state.opts.lease_interval, atom::lease_v);
}

// The job of one bulk read: every domain's state, and the host's leases when
// asked for. A failed lease list leaves the states standing; the leases are
// read again next time, and meanwhile the proxies read their own.
call_job bulk_read_job(const std::string& host, bool with_leases) {
  return {"bulk read", [with_leases, host](lv::connection& c) -> caf::expected<std::any> {
            domain_watch::reading read;
            read.taken = host_link_state::clock::now().time_since_epoch();
            auto briefs = lv::read_states(c);
            if (!briefs)
              return briefs.error();
            read.briefs = std::move(*briefs);
            for (auto& b : read.briefs)
              b.taken = read.taken;
            if (!with_leases)
              return std::any{std::move(read)};
            auto leases = lv::read_leases(c);
            if (leases) {
              read.leases = lease_view::read;
              read.lease_list = std::move(*leases);
            } else if (is(leases.error(), ec::unsupported)) {
              read.leases = lease_view::unsupported;
            } else {
              read.leases = lease_view::failed;
              log::warn(to_string(actor_kind::link), host + ": " + render(leases.error()));
            }
            return std::any{std::move(read)};
          }};
}

void start_bulk_read(host_link_pointer self);

// Every watching proxy gets its brief; the counts (bulk reads, leases) are
// status fields, pushed now.
void on_bulk_read(host_link_pointer self, call_result& r) {
  auto& st = self->state;
  auto read = std::move(*std::any_cast<domain_watch::reading>(&r.value));
  for (auto& [proxy, brief] : st.watch.end_read(std::move(read)))
    self->send(proxy, std::move(brief));
  arm_lease_timer(self);
  if (st.opts.sink)
    self->send(st.opts.sink, st.snapshot());
  if (st.watch.take_read_again())
    start_bulk_read(self);
}

void start_bulk_read(host_link_pointer self) {
  auto& st = self->state;
  if (st.state != link_state::up || !st.watch.begin_read())
    return;
  // Through the link's own queue, like any caller's job: under its limit and
  // its budget, on its pool.
  self->request(caf::actor_cast<host_link_actor>(self), caf::infinite, atom::call_v,
                bulk_read_job(st.opts.host, st.watch.with_leases()))
    .then([self](call_result& r) { on_bulk_read(self, r); },
          [self](caf::error& err) {
            self->state.watch.failed_read();
            log::warn(to_string(actor_kind::link), self->state.opts.host + ": bulk read failed: " + render(err));
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
  self->monitor(proxy);
  self->state.watch.watch(std::move(name), std::move(proxy));
  // Its first look at its domain is a bulk read begun after it subscribed
  // (docs/spec.md 27): one for every proxy that subscribes meanwhile. A link
  // not up yet does its resync once it is.
  start_bulk_read(self);
}

void on_address_watch(host_link_pointer self, address_watch& w) {
  auto next = self->state.watch.note(w);
  if (next.read_now)
    start_bulk_read(self);
  if (next.arm_lease)
    arm_lease_timer(self);
}

void on_lease_tick(host_link_pointer self) {
  if (!self->state.watch.lease_fired())
    return;
  start_bulk_read(self);
  arm_lease_timer(self);
}

void forward_event(host_link_pointer self, domain_event& ev) {
  auto& st = self->state;
  if (auto proxy = st.watch.route(ev, st.generation, st.state == link_state::dead))
    self->send(*proxy, std::move(ev));
}

void on_link_up(host_link_pointer self) {
  if (!self->state.watch.empty())
    start_bulk_read(self);
}

void on_safety_net_tick(host_link_pointer self) {
  auto& st = self->state;
  if (!st.watch.empty())
    start_bulk_read(self);
  self->delayed_send(self, st.opts.bulk_read_interval, atom::poll_v);
}

} // namespace egress
