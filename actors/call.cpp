#include "actors/call.hpp"

#include <caf/actor_system.hpp>
#include <caf/response_promise.hpp>

#include "messages/error.hpp"

namespace egress {

caf::expected<std::any> run_blocking(const blocking_work& work) {
  try {
    return work.fn();
  } catch (const std::exception& e) {
    return make_error(ec::libvirt_permanent, work.what + ": " + e.what());
  }
}

call_actor::behavior_type make_call(call_actor::stateful_pointer<call_state> self,
                                    std::string host, blocking_work work) {
  self->state.name = actor_name(actor_kind::call, host + "/" + work.what);
  self->state.what = work.what;
  self->state.started_at = std::chrono::steady_clock::now();
  return {
    [self, work = std::move(work)](atom::run) -> caf::result<call_result> {
      // One job, one answer: the actor quits after it, so a caller that gave
      // up never leaves a worker behind beyond the blocking call itself.
      auto rp = self->make_response_promise<call_result>();
      auto out = run_blocking(work);
      if (out)
        rp.deliver(call_result{std::move(*out)});
      else
        rp.deliver(std::move(out.error()));
      self->quit();
      return rp;
    },
  };
}

call_actor spawn_call(caf::actor_system& sys, std::string host,
                      blocking_work work) {
  return sys.spawn<caf::detached + caf::hidden>(make_call, std::move(host),
                                                std::move(work));
}

} // namespace egress
