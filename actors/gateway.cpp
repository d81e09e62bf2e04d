#include "actors/gateway.hpp"

#include <algorithm>
#include <random>

#include "actors/call_worker.hpp"
#include "base/log.hpp"
#include "base/time_text.hpp"
#include "messages/error.hpp"
#include "providers/haproxy/sync.hpp"

namespace egress {

const char* to_string(gateway_activity x) {
  switch (x) {
    case gateway_activity::idle: return "idle";
    case gateway_activity::syncing: return "syncing";
    case gateway_activity::waiting: return "waiting";
  }
  return "unknown";
}

namespace {

using clock = std::chrono::steady_clock;

void publish(gateway_pointer self) {
  if (self->state.opts.sink)
    self->send(self->state.opts.sink, self->state.status);
}

bool draining_anything(const gateway_state& st) {
  if (!st.drains.empty())
    return true;
  return std::any_of(st.draining.begin(), st.draining.end(),
                     [](auto& kv) { return !kv.second.empty(); });
}

// The next timer: the retry while waiting; while idle, the resync (sooner
// while a server drains: its removal waits for it).
void arm_timer(gateway_pointer self) {
  auto& st = self->state;
  auto delay = st.activity == gateway_activity::waiting ? st.backoff
               : draining_anything(st)
                 ? std::min(st.opts.drain_interval, st.opts.cfg.resync_interval)
                 : st.opts.cfg.resync_interval;
  self->delayed_send(self, delay, atom::poll_v, ++st.timer);
}

// The one place the activity changes. A sync in flight has no timer; every
// other activity has exactly one (an older one is stale by its number).
void transition(gateway_pointer self, gateway_activity next) {
  auto& st = self->state;
  st.activity = next;
  if (next == gateway_activity::syncing)
    ++st.timer; // whatever timer runs is stale now
  else
    arm_timer(self);
}

// Every proxy of the rotation a backend serves: all of them, or those with
// its tag; never one the fleet is about to delete.
std::vector<haproxy::wanted_server> wanted_in(const gateway_state& st, const gateway_backend& b) {
  std::vector<haproxy::wanted_server> out;
  if (!st.rotation)
    return out;
  for (auto& m : st.rotation->members) {
    if (st.retiring.contains(m.name))
      continue;
    if (!b.tag.empty() && std::find(m.tags.begin(), m.tags.end(), b.tag) == m.tags.end())
      continue;
    out.push_back({m.name, m.address, m.port});
  }
  return out;
}

haproxy::sync_request request_of(const gateway_state& st) {
  haproxy::sync_request req;
  req.deadline = clock::now() + st.opts.cfg.call_budget;
  req.grace = st.opts.cfg.drain_grace;
  for (auto& b : st.opts.cfg.backends) {
    haproxy::backend_request r;
    r.backend = b.name;
    r.wanted = wanted_in(st, b);
    if (auto i = st.draining.find(b.name); i != st.draining.end())
      r.draining_since = i->second;
    req.backends.push_back(std::move(r));
  }
  return req;
}

call_worker_actor take_worker(gateway_pointer self) {
  auto& st = self->state;
  if (!st.worker) {
    st.worker = spawn_call_worker(self->system(), "gateway");
    self->monitor(st.worker);
  }
  return st.worker;
}

// A drain is done once none of its servers is in a backend HAProxy listed.
bool drained(const gateway_state& st, const gateway_drain& d) {
  for (auto& [_, names] : st.present)
    for (auto& n : d.names)
      if (names.contains(n))
        return false;
  return true;
}

void answer_drains(gateway_pointer self, bool reached) {
  auto& st = self->state;
  std::erase_if(st.drains, [&](gateway_drain& d) {
    if (reached && !drained(st, d))
      return false;
    d.promise.deliver(reached);
    for (auto& n : d.names)
      st.retiring.erase(n);
    return true;
  });
}

void count_failure(gateway_status& s, const caf::error& err) {
  if (is(err, ec::gateway_garbage))
    ++s.errors_garbage;
  else if (is(err, ec::gateway_timeout) || err == caf::sec::request_timeout)
    ++s.errors_timeout;
  else
    ++s.errors_gone;
}

caf::timespan next_backoff(const gateway_state& st) {
  auto& o = st.opts;
  auto doubled = st.backoff.count() == 0 ? o.retry_min : st.backoff * 2;
  auto capped = std::min<caf::timespan>(doubled, o.retry_max);
  // Jitter: a fleet of engines in front of one HAProxy must not retry as one.
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_int_distribution<int64_t> jitter{0, capped.count() / 5};
  return capped + caf::timespan{jitter(rng)};
}

void on_failure(gateway_pointer self, const caf::error& err) {
  auto& st = self->state;
  auto& s = st.status;
  count_failure(s, err);
  auto reason = render(err);
  if (s.state != haproxy_state::unreachable)
    log::warn(to_string(actor_kind::gateway), "HAProxy unreachable: " + reason + " (retrying with backoff; the "
                                                           "rotation goes on without it)");
  s.state = haproxy_state::unreachable;
  s.reason = reason;
  st.backoff = next_backoff(st);
  s.retry_in_ms = std::chrono::duration_cast<std::chrono::milliseconds>(st.backoff).count();
  st.changed_meanwhile = false; // the retry takes the latest rotation anyway
  answer_drains(self, false);
  transition(self, gateway_activity::waiting);
  publish(self);
}

void start_sync(gateway_pointer self);

// What a sync found and did becomes the status; a server of ours that
// HAProxy no longer has (it restarted or reloaded) is added again by this
// very sync, and counted.
void on_report(gateway_pointer self, haproxy::sync_report& r, clock::duration took) {
  auto& st = self->state;
  auto& s = st.status;
  size_t missing = 0;
  for (auto& b : r.backends) {
    if (!b.reached)
      continue;
    missing += b.missing.size();
    st.present[b.backend] = b.present;
    st.draining[b.backend] = b.draining_since;
    s.drains += b.removed;
    for (auto& bs : s.backends)
      if (bs.name == b.backend) {
        bs.servers = b.serving;
        bs.draining = b.draining;
        bs.desired = b.wanted;
      }
  }
  auto& was_at = st.process;
  if (was_at.pid != 0
      && (r.process.pid != was_at.pid || r.process.uptime_s < was_at.uptime_s)) {
    ++s.resyncs;
    log::warn(to_string(actor_kind::gateway), "HAProxy restarted (pid " + std::to_string(was_at.pid) + ", now "
                           + std::to_string(r.process.pid) + "): " + std::to_string(missing)
                           + " server(s) of the rotation added again");
  }
  st.process = r.process;
  ++s.syncs;
  s.commands += r.commands;
  s.refused += r.refusals.size();
  s.generation = st.rotation ? st.rotation->generation : 0;
  s.last_sync_at = now_rfc3339();
  s.last_sync_ms = static_cast<uint32_t>(
    std::chrono::duration_cast<std::chrono::milliseconds>(took).count());
  s.retry_in_ms = 0;
  st.backoff = caf::timespan{0};
  auto was = s.state;
  if (r.refusals.empty()) {
    s.state = haproxy_state::in_sync;
    s.reason.clear();
    if (was != haproxy_state::in_sync)
      log::info(to_string(actor_kind::gateway), "HAProxy at " + s.socket + " in sync with the rotation (generation "
                             + std::to_string(s.generation) + ")");
  } else {
    s.state = haproxy_state::out_of_sync;
    s.reason = r.refusals.front()
               + (r.refusals.size() > 1
                    ? " (and " + std::to_string(r.refusals.size() - 1) + " more)"
                    : std::string{});
    if (was != haproxy_state::out_of_sync)
      log::warn(to_string(actor_kind::gateway), "HAProxy refused: " + s.reason);
  }
  answer_drains(self, true);
  publish(self);
  if (st.changed_meanwhile) {
    st.changed_meanwhile = false;
    start_sync(self);
    return;
  }
  transition(self, gateway_activity::idle);
}

void start_sync(gateway_pointer self) {
  auto& st = self->state;
  auto req = request_of(st);
  auto api = std::make_shared<haproxy::runtime_api>(haproxy::endpoint::parse(st.opts.cfg.socket));
  st.api = api;
  auto worker = take_worker(self);
  auto what = "sync " + std::to_string(req.backends.size()) + " backend(s) of HAProxy at "
              + st.opts.cfg.socket;
  blocking_work work{what, [api, req = std::move(req)]() -> caf::expected<std::any> {
                       auto r = haproxy::sync(*api, req);
                       if (!r)
                         return r.error();
                       return std::any{std::move(*r)};
                     }};
  st.calls.started(worker.address(), worker.id(), "gateway", what);
  transition(self, gateway_activity::syncing);
  auto started = clock::now();
  // The work's own deadline is the budget; the request's bound adds slack
  // so that HAProxy's own timeout error, which says where it stopped,
  // arrives first.
  auto bound = st.opts.cfg.call_budget + std::chrono::milliseconds(500);
  self->request(worker, bound, atom::run_v, std::move(work))
    .then(
      [self, worker, started](call_result& r) {
        auto& st = self->state;
        st.calls.finished(worker.address());
        st.api = nullptr;
        if (auto* report = std::any_cast<haproxy::sync_report>(&r.value))
          on_report(self, *report, clock::now() - started);
        else
          on_failure(self, make_error(ec::gateway_garbage, "a sync returned nothing"));
      },
      [self, worker](caf::error& err) {
        auto& st = self->state;
        if (err == caf::sec::request_timeout) {
          // Past the budget and its slack: the socket is shut down (the
          // blocked read returns) and this worker is not used again.
          if (st.api)
            st.api->kill();
          st.calls.abandon(worker.address(), "sync ran past its "
                                               + duration_text(st.opts.cfg.call_budget)
                                               + " budget");
          self->send_exit(worker, caf::exit_reason::user_shutdown);
          st.worker = nullptr;
        } else {
          st.calls.finished(worker.address());
        }
        st.api = nullptr;
        on_failure(self, err);
      });
}

// Something changed: sync now, or right after the sync in flight. While the
// retry timer runs, the retry takes the change.
void request_sync(gateway_pointer self) {
  auto& st = self->state;
  switch (st.activity) {
    case gateway_activity::idle:
      start_sync(self);
      return;
    case gateway_activity::syncing:
      st.changed_meanwhile = true;
      return;
    case gateway_activity::waiting:
      return;
  }
}

void on_drain(gateway_pointer self, std::vector<std::string>& names,
              caf::typed_response_promise<bool> rp) {
  auto& st = self->state;
  // HAProxy cannot be reached now: the fleet must not wait for it. The
  // next sync that reaches it removes the servers anyway (they are no
  // longer in the rotation).
  if (st.status.state == haproxy_state::unreachable) {
    rp.deliver(false);
    return;
  }
  for (auto& n : names)
    st.retiring.insert(n);
  st.drains.push_back({std::move(names), std::move(rp)});
  request_sync(self);
}

} // namespace

gateway_actor::behavior_type make_gateway(gateway_pointer self, gateway_options opts) {
  auto& st = self->state;
  st.opts = std::move(opts);
  st.status.socket = st.opts.cfg.socket;
  st.status.state = haproxy_state::connecting;
  for (auto& b : st.opts.cfg.backends)
    st.status.backends.push_back({b.name, b.tag, 0, 0, 0});
  st.name = actor_name(actor_kind::gateway, st.opts.cfg.socket);
  st.calls.set_owner(st.name);
  self->set_down_handler([self](const caf::down_msg& msg) {
    auto& st = self->state;
    st.calls.ended(msg);
    if (st.worker && st.worker.address() == msg.source)
      st.worker = nullptr;
  });
  // On exit a sync in flight is given up (its socket shut down), so its
  // thread ends and the actor system's shutdown does not wait on HAProxy.
  self->set_exit_handler([self](caf::exit_msg& msg) {
    auto& st = self->state;
    if (st.api)
      st.api->kill();
    if (st.worker)
      self->send_exit(st.worker, caf::exit_reason::user_shutdown);
    self->quit(msg.reason);
  });
  publish(self);
  start_sync(self);
  return {
    [self](atom::status) { return self->state.status; },
    [self](atom::ls) { return self->state.calls.rows(); },
    [self](rotation_snapshot& r) {
      auto& st = self->state;
      st.rotation = std::move(r);
      for (auto& bs : st.status.backends)
        for (auto& b : st.opts.cfg.backends)
          if (b.name == bs.name)
            bs.desired = static_cast<uint32_t>(wanted_in(st, b).size());
      request_sync(self);
    },
    [self](atom::drain, std::vector<std::string>& names) -> caf::result<bool> {
      auto rp = self->make_response_promise<bool>();
      on_drain(self, names, rp);
      return rp;
    },
    [self](atom::poll, uint64_t timer) {
      auto& st = self->state;
      if (timer != st.timer || st.activity == gateway_activity::syncing)
        return; // stale: a newer timer or a sync took its place
      start_sync(self);
    },
  };
}

} // namespace egress
