#include "actors/inspector.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <unordered_map>

#include <caf/event_based_actor.hpp>

#include "actors/call.hpp"
#include "base/time_text.hpp"
#include "messages/error.hpp"

namespace egress {

namespace {

using clock_type = std::chrono::steady_clock;

/// One `ls`: the actors to probe (their rows and handles) and the owners
/// of detached calls to ask for their calls (links and images).
struct ls_job {
  caf::typed_response_promise<std::vector<actor_row>> promise;
  ls_query query;
  std::vector<actor_row> rows;
  std::vector<caf::actor> handles;
  std::vector<directory_row> owners;
};

std::string no_reply(caf::timespan timeout) {
  return "no reply within "
         + std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count())
         + " ms";
}

/// One `ls` fan-out, in an actor of its own that ends with it. Each probe is
/// CAF's sys/get/"info" sent as an ordinary message (the answer comes back as
/// one), all under one deadline. Why not a request per probe: each costs a
/// response handler in the sender (CAF 0.17 keeps them in a flat map: a
/// linear find and a vector erase per answer, quadratic in the fleet) and a
/// timeout set and cancelled through CAF's clock thread; that was two thirds
/// of a 10,000-proxy `ls` on 2 cores (bench/inspect). At the deadline the
/// unanswered ones are monitored, so one that has ended is told from one
/// that is wedged before the close below.
///
/// The reply is built when the message is dequeued: an actor blocked in a
/// handler (or a detached one stuck in a call) simply does not answer before
/// the deadline. A link or image asked for its calls that does not answer
/// is listed as one entry saying so.
caf::behavior run_ls(caf::event_based_actor* self, std::shared_ptr<ls_job> job,
                     caf::timespan timeout) {
  struct progress {
    // Into job->rows; one actor may answer for several rows (the fleet for
    // the group members it holds no actor for), one answer per row.
    std::unordered_multimap<caf::actor_id, size_t> probe_at;
    std::unordered_map<caf::actor_id, size_t> owner_at; // into job->owners
    std::vector<bool> owner_done;
    std::vector<actor_row> calls;
    clock_type::time_point sent = clock_type::now();
    size_t open = 0;
    bool closing = false;
  };
  auto pg = std::make_shared<progress>();
  pg->probe_at.reserve(job->handles.size());
  for (size_t i = 0; i < job->handles.size(); ++i) {
    pg->probe_at.emplace(job->handles[i].id(), i);
    self->send(job->handles[i], caf::sys_atom_v, caf::get_atom_v, std::string{"info"});
  }
  pg->owner_done.resize(job->owners.size(), false);
  for (size_t i = 0; i < job->owners.size(); ++i) {
    pg->owner_at.emplace(job->owners[i].calls.id(), i);
    self->send(job->owners[i].calls, atom::ls_v);
  }
  pg->open = job->handles.size() + job->owners.size();
  auto finish = [self, job, pg, timeout] {
    for (size_t i = 0; i < job->rows.size(); ++i)
      if (job->rows[i].liveness.empty())
        job->rows[i].liveness = no_reply(timeout);
    for (size_t i = 0; i < job->owners.size(); ++i)
      if (!pg->owner_done[i]) {
        actor_row e;
        e.kind = actor_kind::call;
        e.name = actor_name(job->owners[i].row.kind, job->owners[i].row.name);
        e.state = "unknown: its owner did not list them";
        e.liveness = no_reply(timeout);
        pg->calls.push_back(std::move(e));
      }
    for (auto& c : pg->calls) {
      if (!job->query.details)
        c.details.clear();
      job->rows.push_back(std::move(c));
    }
    if (!job->query.name.empty())
      std::erase_if(job->rows, [&](auto& e) { return e.name != job->query.name; });
    job->promise.deliver(std::move(job->rows));
    self->quit();
  };
  if (pg->open == 0) {
    finish();
    return {};
  }
  self->delayed_send(self, timeout, caf::timeout_atom_v);
  self->set_down_handler([job, pg](caf::down_msg& msg) {
    auto [from, to] = pg->probe_at.equal_range(msg.source.id());
    for (auto i = from; i != to; ++i)
      if (auto& e = job->rows[i->second]; e.liveness.empty())
        e.liveness = msg.reason ? "ended (" + render(msg.reason) + ")" : "ended";
  });
  return {
    [self, job, pg, finish](caf::ok_atom, std::string&, caf::strong_actor_ptr&, std::string&) {
      auto src = self->current_sender();
      if (pg->closing || !src)
        return;
      auto [from, to] = pg->probe_at.equal_range(src->id());
      auto i = std::find_if(from, to, [&](auto& x) { return job->rows[x.second].liveness.empty(); });
      if (i == to)
        return;
      job->rows[i->second].liveness = "ok " + elapsed_text(clock_type::now() - pg->sent);
      if (--pg->open == 0)
        finish();
    },
    [self, pg, finish](std::vector<actor_row>& calls) {
      auto src = self->current_sender();
      if (pg->closing || !src)
        return;
      auto i = pg->owner_at.find(src->id());
      if (i == pg->owner_at.end() || pg->owner_done[i->second])
        return;
      pg->owner_done[i->second] = true;
      for (auto& c : calls)
        pg->calls.push_back(std::move(c));
      if (--pg->open == 0)
        finish();
    },
    [self, job, pg](caf::timeout_atom) {
      pg->closing = true;
      for (size_t i = 0; i < job->rows.size(); ++i)
        if (job->rows[i].liveness.empty())
          self->monitor(job->handles[i]);
      // Down messages of ended actors arrive before this close.
      self->send(self, caf::close_atom_v);
    },
    [finish](caf::close_atom) { finish(); },
  };
}

} // namespace

inspector_actor::behavior_type
make_inspector(inspector_pointer self, fleet_actor fleet, caf::timespan liveness_timeout,
               config_source reread_config) {
  self->state.fleet = std::move(fleet);
  self->state.liveness_timeout = liveness_timeout;
  self->state.reread_config = std::move(reread_config);
  return {
    [self](atom::ls, ls_query& query) -> caf::result<std::vector<actor_row>> {
      // Empty: every kind; a word that names no kind lists nothing.
      auto only = actor_kind_from(query.kind);
      if (!query.kind.empty() && !only)
        return std::vector<actor_row>{};
      auto rp = self->make_response_promise<std::vector<actor_row>>();
      // Well inside the shell's own 5 s: a slow fleet is reported as such.
      self->request(self->state.fleet, std::chrono::seconds(2), atom::ls_v, query)
        .then(
          [self, rp, only, query](std::vector<directory_row>& dir) mutable {
            auto job = std::make_shared<ls_job>();
            job->promise = rp;
            job->query = std::move(query);
            job->rows.reserve(dir.size());
            job->handles.reserve(dir.size());
            for (auto& d : dir) {
              // The detached calls are their owners' to report.
              if ((!only || *only == actor_kind::call) && d.calls)
                job->owners.push_back(d);
              if (!only || d.row.kind == *only) {
                job->rows.push_back(std::move(d.row));
                job->handles.push_back(std::move(d.handle));
              }
            }
            self->spawn(run_ls, std::move(job), self->state.liveness_timeout);
          },
          [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
      return rp;
    },
    [self](atom::status) -> caf::result<fleet_status> {
      return self->delegate(self->state.fleet, atom::status_v);
    },
    [self](atom::subscribe, engine_events_actor& watcher) {
      // The fleet sends to its watchers itself: the node actor subscribes a
      // local relay, never a remote watcher.
      self->send(self->state.fleet, atom::subscribe_v, std::move(watcher));
    },
    [self](atom::drain, std::string proxy, bool drained) -> caf::result<proxy_health> {
      return self->delegate(self->state.fleet, atom::drain_v, std::move(proxy), drained);
    },
    [self](atom::cordon, std::string host, bool on) -> caf::result<host_drain> {
      return self->delegate(self->state.fleet, atom::cordon_v, std::move(host), on);
    },
    [self](atom::reconcile, std::string proxy) -> caf::result<proxy_status> {
      return self->delegate(self->state.fleet, atom::reconcile_v, std::move(proxy));
    },
    [self](atom::reload) -> caf::result<std::string> {
      auto& st = self->state;
      if (!st.reread_config)
        return make_error(ec::unsupported,
                          "reload: this engine was configured by the application that "
                          "embeds it; there is no file to re-read");
      auto rp = self->make_response_promise<std::string>();
      // Reading and parsing a file is blocking work: a detached call, never
      // a scheduler thread (invariant 4).
      auto h = spawn_call(self->system(), "inspector",
                          blocking_work{"re-read the configuration",
                                        [f = st.reread_config]() -> caf::expected<std::any> {
                                          auto c = f();
                                          if (!c)
                                            return std::move(c.error());
                                          return std::any{std::move(*c)};
                                        }});
      self->request(h, std::chrono::seconds(10), atom::run_v)
        .then(
          [self, rp](call_result& r) mutable {
            auto next = std::any_cast<engine_config>(std::move(r.value));
            self->request(self->state.fleet, std::chrono::seconds(10), atom::reload_v,
                          std::move(next))
              .then([rp](std::string& summary) mutable { rp.deliver(std::move(summary)); },
                    [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
          },
          [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
      return rp;
    },
    [self](atom::kill, std::string host) -> caf::result<link_status> {
      return self->delegate(self->state.fleet, atom::kill_v, std::move(host));
    },
  };
}

} // namespace egress
