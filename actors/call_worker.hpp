#pragma once
// A worker of a host link's call pool: a detached actor that lives as long as
// its link wants it and runs the link's libvirt calls one after another, so a
// call costs two messages instead of a thread (docs/architecture.md, "The call
// pool"). Detached for the same reason as a call actor: the work blocks and
// no scheduler thread may (invariant 4).
//
// The link abandons a worker whose call ran past its budget or whose link
// died: it sends the worker an exit, which waits in the worker's mailbox
// until the blocked call returns (the link's kill is what makes it return);
// then the worker quits, and its down message tells the link's call ledger
// that the thread ended.

#include <cstdint>
#include <string>

#include <caf/typed_event_based_actor.hpp>

#include "messages/actors.hpp"

namespace egress {

struct call_worker_state {
  std::string name = to_string(actor_kind::worker);
  uint64_t jobs = 0; // calls run so far
};

call_worker_actor::behavior_type
make_call_worker(call_worker_actor::stateful_pointer<call_worker_state> self, std::string host);

/// Spawns a pool worker (detached, hidden from the registry count).
call_worker_actor spawn_call_worker(caf::actor_system& sys, std::string host);

} // namespace egress
