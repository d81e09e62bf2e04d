#include "actors/host_link_watch.hpp"

#include <map>

#include "base/log.hpp"
#include "messages/error.hpp"

namespace egress {

namespace {

// A bulk read: when it started, what it found, and the host's leases if it
// read them (docs/spec.md 28).
struct bulk_reading {
  caf::timespan taken{0};
  std::vector<domain_brief> briefs;
  lease_view leases = lease_view::not_read;
  std::vector<lv::lease> lease_list;
};

bool any_macs(const host_link_state& st) {
  for (auto& [name, w] : st.watchers)
    if (!w.macs.empty())
      return true;
  return false;
}

bool any_waiting(const host_link_state& st) {
  for (auto& [name, w] : st.watchers)
    if (w.waiting)
      return true;
  return false;
}

// The addresses the leases give these MACs, IPv4 first (what a proxy is
// reached by when it has both).
std::vector<std::string> leased_to(const std::multimap<std::string, std::string>& by_mac,
                                   const std::vector<std::string>& macs) {
  std::vector<std::string> v4, v6;
  for (auto& mac : macs)
    for (auto [i, end] = by_mac.equal_range(mac); i != end; ++i)
      (i->second.find(':') == std::string::npos ? v4 : v6).push_back(i->second);
  v4.insert(v4.end(), v6.begin(), v6.end());
  return v4;
}

void arm_lease_timer(host_link_pointer self);

// Every watching proxy gets its domain's brief, a missing domain too: the
// proxy knows what it believes, the link does not. (A diff against the
// previous bulk read would miss a domain created after it and gone while the
// link was dead: absent both times.) With the leases read, each brief of a
// proxy whose MACs the link knows carries their addresses.
void on_bulk_read(host_link_pointer self, bulk_reading& read) {
  auto& st = self->state;
  ++st.bulk_reads;
  if (read.leases != lease_view::not_read)
    st.leases = read.leases;
  if (read.leases == lease_view::read)
    ++st.lease_reads;
  std::multimap<std::string, std::string> by_mac;
  for (auto& l : read.lease_list)
    by_mac.emplace(std::move(l.mac), std::move(l.address));
  std::map<std::string, domain_brief*> by_name;
  for (auto& b : read.briefs)
    by_name.emplace(b.name, &b);
  for (auto& [name, w] : st.watchers) {
    auto i = by_name.find(name);
    domain_brief brief;
    if (i != by_name.end()) {
      brief = std::move(*i->second);
    } else {
      brief.name = name;
      brief.exists = false;
      brief.taken = read.taken;
    }
    if (read.leases == lease_view::unsupported)
      brief.leases = lease_view::unsupported;
    else if (read.leases != lease_view::not_read && !w.macs.empty())
      brief.leases = read.leases;
    if (brief.leases == lease_view::read)
      brief.addresses = leased_to(by_mac, w.macs);
    self->send(w.proxy, std::move(brief));
  }
  arm_lease_timer(self);
}

void start_bulk_read(host_link_pointer self) {
  auto& st = self->state;
  if (st.state != link_state::up)
    return;
  if (st.bulk_reading) {
    // What it reads was decided when it started (a proxy's MACs may be
    // new since): one more after it.
    st.bulk_read_again = true;
    return;
  }
  st.bulk_reading = true;
  st.bulk_read_again = false;
  // The leases only when some proxy's MACs are known, and not again on a
  // host that said it cannot list them.
  bool with_leases = st.leases != lease_view::unsupported && any_macs(st);
  auto host = st.opts.host;
  call_job job{"bulk read", [with_leases, host](lv::connection& c) -> caf::expected<std::any> {
                 bulk_reading read;
                 read.taken = host_link_state::clock::now().time_since_epoch();
                 auto briefs = lv::read_states(c);
                 if (!briefs)
                   return briefs.error();
                 read.briefs = std::move(*briefs);
                 for (auto& b : read.briefs)
                   b.taken = read.taken;
                 if (with_leases) {
                   auto leases = lv::read_leases(c);
                   if (leases) {
                     read.leases = lease_view::read;
                     read.lease_list = std::move(*leases);
                   } else if (is(leases.error(), ec::unsupported)) {
                     read.leases = lease_view::unsupported;
                   } else {
                     // The states stand; the leases are read again next
                     // time, and meanwhile the proxies read their own.
                     read.leases = lease_view::failed;
                     log::warn("link", host + ": " + render(leases.error()));
                   }
                 }
                 return std::any{std::move(read)};
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
        if (self->state.bulk_read_again)
          start_bulk_read(self);
      },
      [self](caf::error& err) {
        self->state.bulk_reading = false;
        log::warn("link", self->state.opts.host + ": bulk read failed: " + render(err));
      });
}

// The lease timer runs while a proxy waits for an address, on a host that
// can list leases (elsewhere each proxy reads its own).
void arm_lease_timer(host_link_pointer self) {
  auto& st = self->state;
  if (st.lease_armed || st.leases == lease_view::unsupported || !any_waiting(st))
    return;
  st.lease_armed = true;
  self->delayed_send(self, st.opts.lease_interval, atom::lease_v);
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
  // A new proxy of that name (a reload replaced it) starts with nothing said.
  st.watchers[std::move(name)] = host_link_state::watcher{std::move(proxy), {}, false};
  // Its first look at its domain is a bulk read begun after it subscribed
  // (docs/spec.md 27): one for every proxy that subscribes meanwhile. A link
  // not up yet does its resync once it is.
  start_bulk_read(self);
}

void on_address_watch(host_link_pointer self, address_watch& w) {
  auto& st = self->state;
  auto i = st.watchers.find(w.name);
  if (i == st.watchers.end())
    return; // a proxy subscribes before it says anything else
  bool starts_waiting = w.waiting && !i->second.waiting;
  bool new_macs = !w.macs.empty() && i->second.macs.empty();
  i->second.macs = std::move(w.macs);
  i->second.waiting = w.waiting;
  // The first proxy with MACs on a host whose leases were never read: read
  // them now, so it learns at once whether it can rely on them.
  if (new_macs && st.leases == lease_view::not_read)
    start_bulk_read(self);
  if (starts_waiting)
    arm_lease_timer(self);
}

void on_lease_tick(host_link_pointer self) {
  auto& st = self->state;
  st.lease_armed = false;
  if (!any_waiting(st) || st.leases == lease_view::unsupported)
    return;
  start_bulk_read(self);
  arm_lease_timer(self);
}

void forward_event(host_link_pointer self, domain_event& ev) {
  auto& st = self->state;
  ++st.events;
  // An event of an older dial arrived late, or of a dial already dead: the
  // resync after the next dial reads the domain since.
  if (ev.generation != st.generation || st.state == link_state::dead)
    return;
  if (auto i = st.watchers.find(ev.name); i != st.watchers.end())
    self->send(i->second.proxy, std::move(ev));
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
  if (st.redial_armed || st.state != link_state::dead)
    return;
  st.redial_armed = true;
  auto wait = std::chrono::duration_cast<caf::timespan>(st.next_dial_at
                                                        - host_link_state::clock::now());
  self->delayed_send(self, std::max(wait, caf::timespan{0}), atom::link_v);
}

void on_redial_tick(host_link_pointer self) {
  auto& st = self->state;
  st.redial_armed = false;
  if (st.state != link_state::dead)
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
