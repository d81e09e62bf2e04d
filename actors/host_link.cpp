#include "actors/host_link.hpp"

#include <algorithm>

#include "actors/call.hpp"
#include "actors/call_worker.hpp"
#include "actors/host_link_watch.hpp"
#include "base/log.hpp"
#include "base/time_text.hpp"
#include "messages/error.hpp"
#include "providers/libvirt/connection.hpp"

namespace egress {

namespace {

using clock = host_link_state::clock;

void publish(host_link_pointer self) {
  if (self->state.opts.sink)
    self->send(self->state.opts.sink, self->state.snapshot());
}

// The call counts change twice per call: one push per counts_delay carries
// every change since. A push per change made the sink (the fleet) and the
// health actor run twice per call, on the scheduler threads that also carry
// the calls (bench/converge's per-call overhead: docs/notes/
// fleet-supervision.md).
void publish_counts(host_link_pointer self) {
  auto& st = self->state;
  if (st.armed.counts || !st.opts.sink)
    return;
  st.armed.counts = true;
  self->delayed_send(self, st.opts.counts_delay, atom::counts_v);
}

// Errors that say the connection itself is gone, not just this call.
bool kills_link(const caf::error& err) {
  return err == ec::connection_broken || err == ec::libvirt_timeout
         || err == ec::ssh_failed;
}

// Drops a value holding libvirt handles off the scheduler thread: the last
// reference to a connection closes it, and virConnectClose may block.
void dispose(host_link_pointer self, std::any value) {
  if (!value.has_value())
    return;
  auto h = self->state.calls.spawn(self, self->state.opts.host,
                      blocking_work{"dispose", [v = std::move(value)]() mutable
                                    -> caf::expected<std::any> {
                                      v.reset();
                                      return std::any{};
                                    }});
  caf::anon_send(h, atom::run_v);
}

void start_dial(host_link_pointer self);
void pump(host_link_pointer self);

// Adds a cause that arrived after the death to the dead link's reason (once).
void note_cause(host_link_pointer self, const std::string& cause) {
  auto& st = self->state;
  if (st.state != link_state::dead || st.reason.find(cause) != std::string::npos)
    return;
  st.reason += "; " + cause;
  publish(self);
}

// The pool's next worker: an idle one, else a new one (the pool admits at
// most max_calls calls, so it never holds more busy or idle workers).
call_worker_actor take_worker(host_link_pointer self) {
  auto& st = self->state;
  if (auto idle = st.pool.idle_worker())
    return std::move(*idle);
  auto w = spawn_call_worker(self->system(), st.opts.host);
  self->monitor(w);
  st.pool.add_worker(w);
  return w;
}

// A worker whose call was abandoned is never used again: the exit waits in
// its mailbox behind the blocked call, and it quits once that returns. An
// idle one swept from the pool quits at once.
void retire_worker(host_link_pointer self, const call_worker_actor& w) {
  self->send_exit(w, caf::exit_reason::user_shutdown);
}

// Once a bulk-read interval, before the safety-net read: the workers idle
// since the last sweep quit, the one used last stays for that read.
void sweep_idle_workers(host_link_pointer self) {
  for (auto& w : self->state.pool.sweep_idle(1))
    retire_worker(self, w);
}

// A worker that answered takes the next call.
void return_worker(host_link_pointer self, const call_worker_actor& w) {
  self->state.calls.finished(w.address());
  self->state.pool.return_worker(w);
}

// The libvirt keepalive every connection of this link gets.
lv::keepalive keepalive_of(const host_link_options& o) {
  return {o.keepalive_interval_s, o.keepalive_count};
}

// A connection the next call opens itself, on its worker: this generation's
// transport, the link's keepalive.
std::shared_ptr<lv::lazy_connection> new_connection(const host_link_state& st) {
  return std::make_shared<lv::lazy_connection>(st.transport->uri(), keepalive_of(st.opts));
}

void on_call_answered(host_link_pointer self, uint64_t id, const call_worker_actor& worker,
                      call_result& r) {
  auto& st = self->state;
  auto call = st.pool.finish(id);
  if (!call)
    return; // abandoned: the link died while the call ran (worker retired)
  return_worker(self, worker);
  call->rp.deliver(std::move(r));
  st.backoff.served();
  pump(self);
}

// Invariant 3: past its budget the caller gets transient now, and the link
// dies, whose kill unblocks the call still running. The worker is abandoned
// with its call; the next call gets a new one.
void on_call_overrun(host_link_pointer self, call_pool::running& call, const std::string& what,
                     caf::timespan budget) {
  auto& st = self->state;
  auto over = "ran past its " + duration_text(budget) + " budget";
  st.pool.note_overrun();
  st.calls.abandon(call.worker.address(), over);
  retire_worker(self, call.worker);
  call.rp.deliver(make_error(ec::budget_exceeded, st.opts.host + ": " + what + " " + over));
  mark_dead(self, "budget overrun: " + what + " after " + duration_text(budget));
}

void on_call_failed(host_link_pointer self, uint64_t id, uint64_t gen, const std::string& what,
                    caf::timespan budget, const call_worker_actor& worker, caf::error& err) {
  auto& st = self->state;
  auto call = st.pool.finish(id);
  if (!call) {
    // Abandoned: the link died first, often from the same cause arriving by
    // another path (the pump saw libvirt close before this call reported
    // why). Keep the cause in the status.
    if (kills_link(err) && gen == st.generation)
      note_cause(self, render(err));
    return;
  }
  if (err == caf::sec::request_timeout) {
    on_call_overrun(self, *call, what, budget);
    return;
  }
  // The job's own error: the worker answered and is free again (unless it
  // is the worker that is gone).
  bool worker_gone = err == caf::sec::request_receiver_down;
  if (worker_gone)
    st.calls.finished(worker.address());
  else
    return_worker(self, worker);
  call->rp.deliver(err);
  if (kills_link(err) && gen == st.generation) {
    mark_dead(self, render(err));
    return;
  }
  if (!worker_gone)
    st.backoff.served();
  pump(self);
}

void run_call(host_link_pointer self, call_pool::waiting call) {
  auto& st = self->state;
  auto id = call.id;
  auto what = call.job.what;
  auto create = call.job.create;
  auto budget = call.job.budget.count() > 0 ? call.job.budget : st.opts.call_budget;
  auto worker = take_worker(self);
  auto conn = st.pool.take_connection([&] { return new_connection(st); });
  st.pool.start(id, std::move(call.rp), worker, conn, create);
  // The job runs with a connection of this generation; if the link dies,
  // the kill makes the job's blocked libvirt call (or its open) return.
  blocking_work work{what, [conn, fn = std::move(call.job.fn), fence = st.opts.fence,
                             host = st.opts.host, what]() -> caf::expected<std::any> {
                       if (fence && !fence->open()) {
                         fence->refused();
                         return make_error(ec::fenced, host + ": " + what + " refused: this "
                                           "node may not change the host now (its lease is not "
                                           "confirmed, or the host is not its own)");
                       }
                       auto c = conn->get();
                       if (!c)
                         return c.error();
                       return fn(**c);
                     }};
  st.calls.started(worker.address(), worker.id(), st.opts.host, what);
  auto gen = st.generation;
  self->request(worker, budget, atom::run_v, std::move(work))
    .then([self, id, worker](call_result& r) { on_call_answered(self, id, worker, r); },
          [self, id, gen, what, budget, worker](caf::error& err) {
            on_call_failed(self, id, gen, what, budget, worker, err);
          });
}

// Admits queued calls while the link is up and under its limit.
void pump(host_link_pointer self) {
  auto& st = self->state;
  while (st.state == link_state::up) {
    auto call = st.pool.admit();
    if (!call)
      break;
    run_call(self, std::move(*call));
  }
  publish_counts(self);
}

// Dial, phase 2: open libvirt's client through the (connected) transport.
void open_libvirt(host_link_pointer self, uint64_t gen) {
  auto& st = self->state;
  auto ka = keepalive_of(st.opts);
  // Events are registered before the link is up, and so before the resync
  // its coming up starts: a change in between is seen by one or the other
  // (docs/spec.md 27).
  blocking_work work{"open", [t = st.transport, ka, sink = event_sink(self, gen),
                              host = st.opts.host]() -> caf::expected<std::any> {
                       auto c = lv::connection::open(t->uri(), ka);
                       if (!c)
                         return c.error();
                       if (auto err = lv::watch_domains(**c, sink))
                         log::warn(to_string(actor_kind::link), host + ": no domain events, only the bulk reads: "
                                             + render(err));
                       return std::any{std::move(*c)};
                     }};
  auto h = st.calls.spawn(self, st.opts.host, std::move(work));
  self->request(h, st.opts.connect_timeout, atom::run_v)
    .then(
      [self, gen](call_result& r) {
        auto& st = self->state;
        if (gen != st.generation || st.state != link_state::dialing) {
          dispose(self, std::move(r.value));
          return;
        }
        st.pool.add_connection(std::make_shared<lv::lazy_connection>(
          std::any_cast<std::shared_ptr<lv::connection>>(r.value)));
        st.state = link_state::up;
        st.backoff.came_up();
        st.watch.dialed();
        log::info(to_string(actor_kind::link), st.opts.host + ": up (" + st.transport->uri() + ")");
        publish(self);
        pump(self);
        on_link_up(self);
      },
      [self, gen](caf::error& err) {
        auto& st = self->state;
        if (gen != st.generation || st.state != link_state::dialing)
          return;
        st.backoff.failed();
        if (err == caf::sec::request_timeout)
          mark_dead(self, "libvirt open timed out after "
                            + duration_text(st.opts.connect_timeout));
        else
          mark_dead(self, "libvirt open failed: " + render(err));
      });
}

// The transport's pump runs for the whole life of this generation on a
// detached thread; its end (EOF, watchdog, error, kill) is a death cause.
void start_transport_pump(host_link_pointer self, uint64_t gen) {
  auto& st = self->state;
  blocking_work work{"pump", [t = st.transport]() -> caf::expected<std::any> {
                       if (auto err = t->pump())
                         return err;
                       return std::any{};
                     }};
  auto h = st.calls.spawn(self, st.opts.host, std::move(work));
  // No timeout: the pump lives as long as the link. The call actor always
  // answers before it quits, so this request cannot be left dangling.
  auto on_end = [self, gen](std::string why) {
    auto& st = self->state;
    if (gen != st.generation)
      return;
    if (st.state != link_state::dead) {
      mark_dead(self, "transport ended: " + why);
      return;
    }
    // Already dead, often because the pump's end (a watchdog, say) reached
    // a blocked call as EOF before the pump's own report arrived here. The
    // news went out with the first reason; the status keeps the cause too,
    // unless the pump merely reports a consequence: the kill this death ran,
    // or libvirt closing its side (whose call reports the cause itself).
    if (why.ends_with(": killed") || why.ends_with(": local client EOF"))
      return;
    note_cause(self, "transport ended: " + why);
  };
  self->request(h, caf::infinite, atom::run_v)
    .then([on_end](call_result&) { on_end("pump returned"); },
          [on_end](caf::error& err) { on_end(render(err)); });
}

void start_dial(host_link_pointer self) {
  auto& st = self->state;
  st.state = link_state::dialing;
  st.reason.clear();
  ++st.generation;
  st.backoff.dialed();
  auto gen = st.generation;
  st.transport = st.opts.make_transport();
  // Phase 1: the path to the host (TCP, SSH, host key, channel, bridge).
  blocking_work work{"connect", [t = st.transport]() -> caf::expected<std::any> {
                       if (auto err = t->connect())
                         return err;
                       return std::any{};
                     }};
  auto h = st.calls.spawn(self, st.opts.host, std::move(work));
  publish(self);
  self->request(h, st.opts.connect_timeout, atom::run_v)
    .then(
      [self, gen](call_result&) {
        auto& st = self->state;
        if (gen != st.generation || st.state != link_state::dialing)
          return;
        if (st.transport->has_pump())
          start_transport_pump(self, gen);
        open_libvirt(self, gen);
      },
      [self, gen](caf::error& err) {
        auto& st = self->state;
        if (gen != st.generation || st.state != link_state::dialing)
          return;
        st.backoff.failed();
        if (err == caf::sec::request_timeout)
          mark_dead(self, "connect timed out after "
                            + duration_text(st.opts.connect_timeout));
        else
          mark_dead(self, "connect failed: " + render(err));
      });
}

// A dead link redials by itself after its backoff: settled proxies make no
// call that would redial it, and a host without proxies would show dead (and
// keep a collection owed there) until something called it.
void arm_redial(host_link_pointer self) {
  auto& st = self->state;
  if (st.armed.redial || st.state != link_state::dead)
    return;
  st.armed.redial = true;
  self->delayed_send(self, st.backoff.not_due_for(clock::now()), atom::link_v);
}

void on_redial_tick(host_link_pointer self) {
  auto& st = self->state;
  st.armed.redial = false;
  if (st.state != link_state::dead)
    return;
  if (st.backoff.not_due_for(clock::now()).count() > 0) {
    // A later death moved the backoff on while this timer ran.
    arm_redial(self);
    return;
  }
  if (redial_if_due(self)) {
    // Too many abandoned calls: look again after the longest backoff.
    st.armed.redial = true;
    self->delayed_send(self, st.backoff.longest(), atom::link_v);
  }
}

} // namespace

link_status host_link_state::snapshot() const {
  link_status s;
  s.host = opts.host;
  s.state = state;
  s.reason = reason;
  s.in_flight = pool.in_flight();
  s.queued = pool.queued();
  s.limit = opts.max_calls;
  s.connections = pool.connections();
  s.dials = backoff.dials();
  s.deaths = backoff.deaths();
  s.overruns = pool.overruns();
  s.abandoned_calls = static_cast<uint32_t>(calls.abandoned_running());
  s.events = watch.events();
  s.bulk_reads = watch.bulk_reads();
  s.lease_reads = watch.lease_reads();
  s.leases = watch.leases();
  return s;
}

void mark_dead(host_link_pointer self, std::string reason) {
  auto& st = self->state;
  if (st.state == link_state::dead)
    return; // exactly once per generation
  // An up link that dies before serving a call counts as a failed dial.
  st.backoff.died(clock::now(), st.state == link_state::up);
  st.state = link_state::dead;
  st.reason = reason;
  log::warn(to_string(actor_kind::link), st.opts.host + ": dead: " + reason);
  // 1. Tell everyone, 2. release every caller, 3. only then kill: a kill that
  // takes its time holds up neither the news nor the callers (docs/notes/failures.md#close-behind-a-stuck-write).
  for (auto& sub : st.subscribers)
    self->send(sub, link_down{st.opts.host, reason});
  auto failure = make_error(ec::link_down, st.opts.host + ": " + reason);
  auto held = st.pool.release_all();
  for (auto& rp : held.callers)
    rp.deliver(failure);
  for (auto& w : held.workers)
    retire_worker(self, w);
  // Everything this link still runs is abandoned now; the kill below is
  // what frees it, and the ledger shows whether it did.
  st.calls.abandon_all("link dead: " + reason);
  // The kill runs on its own thread so that this actor stays responsive (a
  // second mark-dead returns at once) even if a transport's kill were slow.
  // The connection is released after the kill, also off this thread.
  auto t = std::move(st.transport);
  auto c = std::move(held.connections);
  publish(self); // dead, with no connection left
  if (t || !c.empty()) {
    auto h = st.calls.spawn(self, st.opts.host,
                        blocking_work{"kill", [t, c]() mutable
                                      -> caf::expected<std::any> {
                                        if (t)
                                          t->kill();
                                        c.clear();
                                        t.reset();
                                        return std::any{};
                                      }});
    caf::anon_send(h, atom::run_v);
  }
  arm_redial(self);
}

std::optional<std::string> redial_if_due(host_link_pointer self) {
  auto& st = self->state;
  if (auto wait = st.backoff.not_due_for(clock::now()); wait.count() > 0)
    return "link is dead (" + st.reason + "); next dial in " + elapsed_text(wait);
  // Calls its kills did not free: a redial would give the next ones the same
  // fate, so the link stays dead until enough of them end.
  if (auto n = st.calls.abandoned_running(); st.pool.over_abandoned_cap(n))
    return "link is dead (" + st.reason + "); " + std::to_string(n)
           + " abandoned calls still running (cap " + std::to_string(st.pool.abandoned_cap())
           + "): no redial until they end";
  start_dial(self);
  return std::nullopt;
}

namespace {

// A caller's job: queued (a dead link redials first if it may), or refused
// with why the link will not dial yet.
caf::result<call_result> on_call(host_link_pointer self, call_job& job) {
  auto& st = self->state;
  auto rp = self->make_response_promise<call_result>();
  if (st.state == link_state::dead) {
    if (auto why = redial_if_due(self)) {
      rp.deliver(make_error(ec::link_down, st.opts.host + ": " + *why));
      return rp;
    }
  }
  st.pool.enqueue(std::move(job), rp);
  pump(self);
  return rp;
}

// A monitored actor ended: a call's thread (the ledger), a pool worker, a
// watching proxy or a subscriber.
void on_down(host_link_pointer self, const caf::down_msg& msg) {
  auto& st = self->state;
  auto is_it = [&](const auto& handle) { return handle.address() == msg.source; };
  st.pool.forget_worker_if(is_it);
  auto abandoned = st.calls.abandoned_running();
  if (st.calls.ended(msg)) {
    // Most calls end by answering: only an abandoned one changes the
    // status (its count), and a push per call would double the pushes.
    if (st.calls.abandoned_running() != abandoned)
      publish(self);
    return;
  }
  st.watch.forget_if(is_it);
  std::erase_if(st.subscribers, is_it);
}

} // namespace

host_link_actor::behavior_type make_host_link(host_link_pointer self,
                                              host_link_options opts) {
  auto& st = self->state;
  st.opts = std::move(opts);
  st.name = actor_name(actor_kind::link, st.opts.host);
  st.calls.set_owner(st.name);
  st.backoff = dial_backoff{st.opts.redial_min, st.opts.redial_max};
  st.pool = call_pool{
    {st.opts.max_calls, st.opts.connections, st.opts.abandoned_cap, st.opts.max_creates}};
  // Every worker of the pool quits with the link, however the link ends: an
  // idle worker left behind would hold the actor system's shutdown, which
  // waits for every detached thread.
  self->attach_functor([workers = st.pool.workers()] {
    for (auto& w : *workers)
      caf::anon_send_exit(w, caf::exit_reason::user_shutdown);
  });
  self->set_down_handler([self](const caf::down_msg& msg) { on_down(self, msg); });
  self->set_exit_handler([self](const caf::exit_msg& msg) {
    mark_dead(self, "shutdown (" + caf::to_string(msg.reason) + ")");
    self->quit(msg.reason);
  });
  start_dial(self);
  self->delayed_send(self, self->state.opts.bulk_read_interval, atom::poll_v);
  return {
    [self](atom::call, call_job& job) { return on_call(self, job); },
    [self](atom::status) { return self->state.snapshot(); },
    [self](atom::ls) { return self->state.calls.rows(); },
    [self](atom::subscribe, link_events_actor& sub) {
      self->monitor(sub);
      self->state.subscribers.push_back(std::move(sub));
    },
    [self](atom::kill, std::string& reason) {
      mark_dead(self, "killed: " + reason);
      return self->state.snapshot();
    },
    [self](atom::subscribe, std::string& name, proxy_actor& proxy) {
      add_watcher(self, std::move(name), std::move(proxy));
    },
    [self](address_watch& w) { on_address_watch(self, w); },
    [self](atom::lease) { on_lease_tick(self); },
    [self](domain_event& ev) {
      forward_event(self, ev);
      // Its count is a status field too (the fleet's events metric): no
      // call may follow for hours on a host at rest.
      publish_counts(self);
    },
    [self](atom::poll) {
      sweep_idle_workers(self);
      on_safety_net_tick(self);
    },
    [self](atom::link) { on_redial_tick(self); },
    [self](atom::counts) {
      self->state.armed.counts = false;
      publish(self);
    },
  };
}

} // namespace egress
