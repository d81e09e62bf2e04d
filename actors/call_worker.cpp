#include "actors/call_worker.hpp"

#include <caf/actor_system.hpp>

#include "actors/call.hpp"

namespace egress {

call_worker_actor::behavior_type
make_call_worker(call_worker_actor::stateful_pointer<call_worker_state> self, std::string host) {
  self->state.name = actor_name(actor_kind::worker, host);
  return {
    [self](atom::run, blocking_work& work) -> caf::result<call_result> {
      ++self->state.jobs;
      auto out = run_blocking(work);
      // The work's captures (a connection's last reference among them) are
      // released here, on this thread, not on the link's.
      work.fn = nullptr;
      if (!out)
        return std::move(out.error());
      return call_result{std::move(*out)};
    },
  };
}

call_worker_actor spawn_call_worker(caf::actor_system& sys, std::string host) {
  return sys.spawn<caf::detached + caf::hidden>(make_call_worker, std::move(host));
}

} // namespace egress
