#pragma once
// The detached call actor: runs one blocking function (a libvirt call, a dial,
// closing a connection) on its own thread, answers once and quits.
//
// It is detached because the call blocks; no scheduler thread may (invariant
// 4). Its requester gives it a budget and simply stops waiting when the
// budget ends: CAF cannot abandon a blocked thread, so what ends the call is
// the host link's kill of its transport (invariant 3), and the actor system's
// shutdown joins this thread only after that kill (invariant 15).

#include <chrono>
#include <string>

#include <caf/typed_event_based_actor.hpp>

#include "messages/actors.hpp"

namespace egress {

/// Runs `work` on the calling thread: its result, or an error naming the
/// work when it threw.
caf::expected<std::any> run_blocking(const blocking_work& work);

struct call_state {
  std::string name = to_string(actor_kind::call);
  std::string what;
  std::chrono::steady_clock::time_point started_at;
};

call_actor::behavior_type make_call(call_actor::stateful_pointer<call_state> self,
                                    std::string host, blocking_work work);

/// Spawns a call actor (detached, hidden from the registry count).
call_actor spawn_call(caf::actor_system& sys, std::string host,
                      blocking_work work);

} // namespace egress
