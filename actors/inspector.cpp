#include "actors/inspector.hpp"

#include <chrono>
#include <cstdio>
#include <memory>

#include "messages/error.hpp"

namespace egress {

namespace {

using clock_type = std::chrono::steady_clock;

/// The answers of one `ls`, filled as the probes return; delivered once the
/// last one is in (every probe answers or times out, so it always is).
struct pending_ls {
  caf::typed_response_promise<std::vector<actor_entry>> promise;
  std::vector<actor_entry> entries;
  size_t open = 0;

  void done() {
    if (--open == 0)
      promise.deliver(std::move(entries));
  }
};

std::string millis(clock_type::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f ms",
                std::chrono::duration<double, std::milli>(d).count());
  return buf;
}

} // namespace

inspector_actor::behavior_type make_inspector(inspector_pointer self, fleet_actor fleet,
                                              caf::timespan liveness_timeout) {
  self->state.fleet = std::move(fleet);
  self->state.liveness_timeout = liveness_timeout;
  return {
    [self](atom::ls, std::string kind) -> caf::result<std::vector<actor_entry>> {
      auto rp = self->make_response_promise<std::vector<actor_entry>>();
      // Well inside the shell's own 5 s: a slow fleet is reported as such.
      self->request(self->state.fleet, std::chrono::seconds(2), atom::ls_v)
        .then(
          [self, rp, kind](std::vector<directory_entry>& dir) mutable {
            auto ls = std::make_shared<pending_ls>();
            ls->promise = rp;
            for (auto& d : dir)
              if (kind.empty() || d.entry.kind == kind) {
                ls->entries.push_back(d.entry);
                ++ls->open;
              }
            if (ls->open == 0) {
              ls->promise.deliver(std::move(ls->entries));
              return;
            }
            size_t i = 0;
            auto timeout = self->state.liveness_timeout;
            for (auto& d : dir) {
              if (!kind.empty() && d.entry.kind != kind)
                continue;
              auto at = i++;
              auto t0 = clock_type::now();
              // The reply is built when the message is dequeued: an actor
              // blocked in a handler (or a detached one stuck in a call)
              // simply does not answer within the timeout.
              self->request(d.handle, timeout, caf::sys_atom_v, caf::get_atom_v, "info")
                .then(
                  [ls, at, t0](caf::ok_atom, std::string&, caf::strong_actor_ptr&,
                               std::string&) {
                    ls->entries[at].liveness = "ok " + millis(clock_type::now() - t0);
                    ls->done();
                  },
                  [ls, at, timeout](caf::error& err) {
                    ls->entries[at].liveness =
                      err == caf::sec::request_timeout
                        ? "no reply within "
                            + std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                               timeout).count())
                            + " ms"
                        : "ended (" + render(err) + ")";
                    ls->done();
                  });
            }
          },
          [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
      return rp;
    },
    [self](atom::status) -> caf::result<fleet_status> {
      return self->delegate(self->state.fleet, atom::status_v);
    },
    [self](atom::subscribe, engine_events_actor& watcher) {
      self->send(self->state.fleet, atom::subscribe_v, std::move(watcher));
    },
    [self](atom::drain, std::string proxy, bool drained) -> caf::result<proxy_health> {
      return self->delegate(self->state.fleet, atom::drain_v, std::move(proxy), drained);
    },
    [self](atom::run, std::string proxy) -> caf::result<proxy_status> {
      return self->delegate(self->state.fleet, atom::run_v, std::move(proxy));
    },
    [self](atom::kill, std::string host) -> caf::result<link_status> {
      return self->delegate(self->state.fleet, atom::kill_v, std::move(host));
    },
  };
}

} // namespace egress
