#include "actors/health.hpp"

#include <algorithm>
#include <utility>

#include "actors/call.hpp"
#include "base/log.hpp"
#include "messages/error.hpp"

namespace egress {

namespace {

using clock = std::chrono::steady_clock;

// One host's batch: every due proxy of that host, probed one after the other
// through the host's prober. Results travel back as this, inside std::any.
struct batch_item {
  std::string proxy;
  std::string address;
  caf::expected<probe::outcome> result{probe::outcome{}};
};
using batch = std::vector<batch_item>;

std::pair<std::string, uint16_t> split_endpoint(const std::string& ep) {
  auto colon = ep.rfind(':');
  auto host = ep.substr(0, colon);
  if (host.size() > 1 && host.front() == '[')
    host = host.substr(1, host.size() - 2);
  return {host, static_cast<uint16_t>(std::stoul(ep.substr(colon + 1)))};
}

void push(health_pointer self, const health_target& t) {
  if (self->state.opts.sink)
    self->send(self->state.opts.sink, t.view);
}

// A drain's replacement is probed under its key, member@host, which is no
// name: it is not in the rotation until it takes its member's name
// (rename_target), so its joins and leaves are nobody's news.
bool is_replacement(const health_target& t) {
  return t.view.name.find('@') != std::string::npos;
}

void announce(health_pointer self, const health_target& t, bool joined,
              std::string reason) {
  auto& st = self->state;
  if (is_replacement(t))
    return;
  if (joined)
    ++st.rotation_size;
  else
    --st.rotation_size;
  rotation_event ev{t.view.name, t.view.host, t.view.address, joined, reason,
                    st.rotation_size};
  log::info(to_string(actor_kind::health), t.view.name + (joined ? " joined" : " left") + " the rotation ("
                        + reason + "); rotation size " + std::to_string(st.rotation_size));
  for (auto& s : st.subscribers)
    self->send(s, ev);
}

void join(health_pointer self, health_target& t, std::string reason) {
  if (t.view.in_rotation || t.view.drained)
    return;
  t.view.in_rotation = true;
  announce(self, t, true, std::move(reason));
}

void leave(health_pointer self, health_target& t, std::string reason) {
  if (!t.view.in_rotation)
    return;
  t.view.in_rotation = false;
  announce(self, t, false, std::move(reason));
}

caf::timespan next_probe_in(const health_state& st, const health_target& t) {
  if (t.view.in_rotation)
    return st.opts.probe.interval;
  return std::min(st.opts.probe.interval, st.opts.join_interval);
}

std::string describe(const probe::outcome& o) {
  if (o.ok)
    return "ok in " + std::to_string(o.latency.count() / 1000) + " ms"
           + (o.http_status ? " (HTTP " + std::to_string(o.http_status) + ")" : "");
  return o.stage + ": " + o.detail;
}

// One proxy's verdict, from its own probe only (invariant 12): nothing here
// looks at another proxy.
void judge(health_pointer self, health_target& t, const caf::expected<probe::outcome>& r) {
  auto& st = self->state;
  auto& v = t.view;
  bool ok = r && r->ok;
  v.last_probe = r ? describe(*r) : "route: " + render(r.error());
  if (ok) {
    ++v.probes_ok;
    v.streak = std::max(v.streak, 0) + 1;
    v.probe_ms = static_cast<uint32_t>(r->latency.count() / 1000);
    if (t.eligible && static_cast<uint32_t>(v.streak) >= st.opts.probe.rise)
      join(self, t, std::to_string(v.streak) + " probe(s) passed, last " + v.last_probe);
  } else {
    ++v.probes_failed;
    v.streak = std::min(v.streak, 0) - 1;
    if (static_cast<uint32_t>(-v.streak) >= st.opts.probe.fall)
      leave(self, t, std::to_string(-v.streak) + " probe(s) failed, last " + v.last_probe);
  }
  t.next_due = clock::now() + next_probe_in(st, t);
  push(self, t);
}

void on_batch(health_pointer self, const std::string& host, batch& results) {
  auto& st = self->state;
  st.hosts[host].in_flight = false;
  for (auto& item : results) {
    auto i = st.targets.find(item.proxy);
    if (i == st.targets.end())
      continue;
    i->second.in_flight = false;
    // A result for an address the proxy no longer has says nothing about it.
    if (i->second.eligible && i->second.view.address == item.address)
      judge(self, i->second, item.result);
  }
}

// The host's entry, with its prober resolved on first use.
health_host& host_entry(health_pointer self, const std::string& host) {
  auto& st = self->state;
  auto& h = st.hosts[host];
  if (!h.resolved && st.opts.probe.mode != "off") {
    h.resolved = true;
    h.prober = st.opts.prober_for(host);
  }
  return h;
}

// Whether this host's proxies join on their phase alone.
bool unprobed(health_pointer self, const std::string& host) {
  return self->state.opts.probe.mode == "off" || !host_entry(self, host).prober;
}

void start_batch(health_pointer self, const std::string& host, health_host& h,
                 std::vector<health_target*>& due) {
  auto& st = self->state;
  auto items = std::make_shared<batch>();
  for (auto* t : due) {
    t->in_flight = true;
    items->push_back({t->view.name, t->view.address, probe::outcome{}});
  }
  h.in_flight = true;
  auto control = std::make_shared<batch_control>();
  control->prober = h.prober;
  std::erase_if(st.batches, [](const std::weak_ptr<batch_control>& b) { return b.expired(); });
  st.batches.push_back(control);
  auto settings = probe::settings{st.opts.probe.mode == "http" ? st.opts.probe.target
                                                               : std::string{},
                                  std::chrono::duration_cast<std::chrono::milliseconds>(
                                    st.opts.probe.timeout)};
  blocking_work work{"probe " + std::to_string(items->size()) + " proxy(ies)",
                     [control, items, settings]() -> caf::expected<std::any> {
                       for (auto& it : *items) {
                         if (control->called_off) {
                           it.result = make_error(ec::shutting_down, "probe called off");
                           continue;
                         }
                         auto [ip, port] = split_endpoint(it.address);
                         it.result = control->prober->probe(ip, port, settings);
                       }
                       return std::any{std::move(*items)};
                     }};
  // Each probe is bounded by its timeout; the batch by their sum and slack.
  // Past that the prober is killed (its socket shut down), which ends
  // whatever probe is blocked; the batch's proxies count one failure each.
  auto bound = (st.opts.probe.timeout + std::chrono::milliseconds(500))
                 * static_cast<int64_t>(items->size())
               + std::chrono::seconds(1);
  auto call = st.calls.spawn(self, host, std::move(work));
  auto names = *items;
  self->request(call, bound, atom::run_v)
    .then(
      [self, host](call_result& r) {
        auto* b = std::any_cast<batch>(&r.value);
        if (b)
          on_batch(self, host, *b);
      },
      [self, host, names, control, addr = call.address()](caf::error& err) {
        self->state.calls.abandon(addr, "probe batch past its bound: " + render(err));
        control->call_off();
        auto failed = names;
        for (auto& it : failed)
          it.result = make_error(ec::ssh_failed, "probe batch abandoned: " + render(err));
        on_batch(self, host, failed);
      });
}

void tick(health_pointer self) {
  auto& st = self->state;
  auto now = clock::now();
  std::map<std::string, std::vector<health_target*>> due;
  for (auto& [_, t] : st.targets)
    if (t.eligible && !t.in_flight && t.next_due <= now)
      due[t.view.host].push_back(&t);
  for (auto& [host, ts] : due) {
    auto& h = host_entry(self, host);
    if (h.in_flight || h.link_dead || !h.prober)
      continue;
    start_batch(self, host, h, ts);
  }
}

// `s.address` is the proxy's endpoint here (see endpoint_of in fleet.cpp).
void update_target(health_pointer self, const proxy_status& s) {
  auto& st = self->state;
  auto& t = st.targets[s.name];
  t.view.name = s.name;
  t.view.host = s.host;
  bool link_dead = st.hosts[s.host].link_dead;
  bool running = s.phase == proxy_phase::running && !s.address.empty();
  if (t.view.address != s.address) {
    leave(self, t, "its address changed from " + t.view.address + " to "
                     + (s.address.empty() ? std::string{"none"} : s.address));
    t.view.address = s.address;
    t.view.streak = 0;
    t.next_due = clock::now();
  }
  bool was = t.eligible;
  t.running = running;
  t.eligible = running && !link_dead;
  if (!t.eligible)
    leave(self, t, std::string{"phase "} + to_string(s.phase)
                     + (link_dead ? " on a dead link" : ""));
  if (t.eligible && unprobed(self, s.host))
    join(self, t, "running at " + s.address + " (not probed)");
  if (was != t.eligible)
    push(self, t);
}

// A drain's replacement takes its member's name (actors/fleet_drain.cpp):
// its verdict carries over, and the original's target goes without a leave
// when both are in the rotation (the member never left it).
void rename_target(health_pointer self, const std::string& from, const std::string& to) {
  auto& st = self->state;
  auto i = st.targets.find(from);
  if (i == st.targets.end())
    return;
  auto t = std::move(i->second);
  st.targets.erase(i);
  bool was_in = false;
  if (auto old = st.targets.find(to); old != st.targets.end()) {
    was_in = old->second.view.in_rotation;
    t.view.drained = old->second.view.drained; // an operator's drain stays
    st.targets.erase(old);
  }
  t.view.name = to;
  // A batch in flight answers for the old key, which is gone: the target
  // is due again rather than waiting for it forever.
  t.in_flight = false;
  bool in = t.view.in_rotation;
  t.view.in_rotation = was_in;
  auto& now = st.targets[to] = std::move(t);
  if (in)
    join(self, now, "replaced on " + now.view.host);
  else
    leave(self, now, "replaced on " + now.view.host + ", not passing yet");
  push(self, now);
}

// An operator's drain (out of the rotation until undrained) or undrain
// (back in on its probes' verdict, or at once where nothing probes).
caf::result<proxy_health> drain(health_pointer self, const std::string& name, bool drained) {
  auto& st = self->state;
  auto i = st.targets.find(name);
  if (i == st.targets.end())
    return make_error(ec::unknown_name, "no proxy named \"" + name + "\" is watched");
  auto& t = i->second;
  if (t.view.drained == drained)
    return t.view;
  t.view.drained = drained;
  if (drained) {
    leave(self, t, "drained by operator");
  } else if (t.eligible
             && (unprobed(self, t.view.host)
                 || static_cast<uint32_t>(std::max(t.view.streak, 0)) >= st.opts.probe.rise)) {
    join(self, t, "undrained by operator");
  }
  push(self, t);
  return t.view;
}

// A link that died takes every proxy of its host out (nobody can tell
// whether they still serve); one that came back makes them eligible again.
void take_link_status(health_pointer self, const link_status& s) {
  auto& st = self->state;
  auto& h = st.hosts[s.host];
  bool dead = s.state == link_state::dead;
  if (dead == h.link_dead)
    return;
  h.link_dead = dead;
  for (auto& [_, t] : st.targets) {
    if (t.view.host != s.host)
      continue;
    if (dead) {
      leave(self, t, "link down: " + s.reason);
      t.eligible = false;
      t.view.streak = 0;
    } else {
      t.eligible = t.running;
      t.next_due = clock::now();
      if (t.eligible && unprobed(self, s.host))
        join(self, t, "link up (not probed)");
    }
    push(self, t);
  }
}

} // namespace

health_actor::behavior_type make_health(health_pointer self, health_options opts) {
  self->state.opts = std::move(opts);
  if (self->state.opts.probe.mode != "off")
    self->send(self, atom::poll_v);
  self->state.calls.set_owner(actor_name(actor_kind::health, "health"));
  self->set_down_handler([self](const caf::down_msg& msg) {
    if (self->state.calls.ended(msg))
      return;
    auto& subs = self->state.subscribers;
    subs.erase(std::remove_if(subs.begin(), subs.end(),
                              [&](const rotation_events_actor& s) {
                                return s.address() == msg.source;
                              }),
               subs.end());
  });
  // On exit (engine shutdown) every batch in flight is called off: one on a
  // partitioned host waits out each probe's timeout in turn (a kill ends
  // only the probe it meets; the next connects anew), and its thread would
  // hold the actor system's shutdown that long (docs/spec.md 15).
  self->set_exit_handler([self](caf::exit_msg& msg) {
    for (auto& b : self->state.batches)
      if (auto control = b.lock())
        control->call_off();
    self->quit(msg.reason);
  });
  return {
    [self](proxy_status& s) { update_target(self, s); },
    [self](atom::ls) { return self->state.calls.rows(); },
    [self](atom::drain, std::string& name, bool drained) { return drain(self, name, drained); },
    [self](link_status& s) { take_link_status(self, s); },
    [self](atom::forget, const std::string& name) {
      auto& st = self->state;
      auto i = st.targets.find(name);
      if (i == st.targets.end())
        return;
      leave(self, i->second, "retired");
      st.targets.erase(i);
    },
    [self](atom::rename, const std::string& from, const std::string& to) {
      rename_target(self, from, to);
    },
    [self](atom::kill, const std::string& host) {
      auto i = self->state.hosts.find(host);
      if (i == self->state.hosts.end())
        return;
      if (i->second.prober)
        i->second.prober->kill();
      // A batch in flight keeps its own reference and ends on the kill.
      i->second.prober = nullptr;
      i->second.resolved = false;
    },
    [self](atom::subscribe, rotation_events_actor& s) {
      self->monitor(s);
      self->state.subscribers.push_back(std::move(s));
    },
    [self](atom::status) {
      std::vector<proxy_health> out;
      for (auto& [_, t] : self->state.targets)
        out.push_back(t.view);
      return out;
    },
    [self](atom::poll) {
      tick(self);
      self->delayed_send(self, self->state.opts.tick, atom::poll_v);
    },
  };
}

} // namespace egress
