#pragma once
// What an owner's detached call actors are doing, for `caf-shell ls calls`
// and the metrics: each call's job, host and age; whether its owner gave up
// on it (abandoned) and whether its thread has ended since.
//
// The owner (a host link or an image) keeps the ledger in its state and
// monitors each call it spawns: the down message is the one reliable sign
// that the blocking function returned, because an abandoned call answers no
// one. A link's pooled workers outlive their calls: a call they answered is
// finished(), and only an abandoned one waits for the worker's down message. An abandoned call is the case an operator needs to see (a blocked
// libvirt call that the kill has not freed yet), so it stays listed until
// its thread ends and a while after that; a call that ended normally is
// dropped at once.

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <caf/actor_addr.hpp>
#include <caf/system_messages.hpp>

#include "actors/call.hpp"
#include "messages/types.hpp"

namespace egress {

class call_ledger {
public:
  using clock = std::chrono::steady_clock;

  struct record {
    uint64_t id = 0; // the call actor's id: unique in this actor system
    std::string host;
    std::string what;
    clock::time_point started{};
    std::string started_at; // RFC 3339, for people
    bool abandoned = false;
    std::string abandon_reason;
    clock::time_point abandoned_at{};
    bool ended = false;
    clock::time_point ended_at{};
  };

  /// How long an abandoned call stays listed after its thread ended.
  static constexpr auto keep_ended = std::chrono::seconds(60);
  /// At most this many ended records are kept (the newest).
  static constexpr size_t max_ended = 32;

  void set_owner(std::string owner) { owner_ = std::move(owner); }

  /// Spawns a tracked call for `self` (which must handle down messages by
  /// passing them to ended()).
  template <class Self>
  call_actor spawn(Self* self, const std::string& host, blocking_work work) {
    auto what = work.what;
    auto h = spawn_call(self->system(), host, std::move(work));
    self->monitor(h);
    started(h.address(), h.id(), host, std::move(what));
    return h;
  }

  void started(const caf::actor_addr& addr, uint64_t id, std::string host, std::string what);

  /// A pool worker answered its call (it stays alive for the next one): the
  /// call is no longer listed, unless it had been abandoned.
  void finished(const caf::actor_addr& addr);

  /// The owner stopped waiting for this call (budget, kill, death).
  void abandon(const caf::actor_addr& addr, const std::string& reason);

  /// Abandons every call still running (a link's death, an image's
  /// abandoned fill: its only call).
  void abandon_all(const std::string& reason);

  /// Handles the down message of a tracked call; false if it was not one.
  bool ended(const caf::down_msg& msg);

  size_t abandoned_running() const;

  /// One actor_row (kind "call") per listed call, ages as of now.
  std::vector<actor_row> rows() const;

private:
  static void mark_abandoned(record& r, const std::string& reason);
  void prune();

  std::string owner_;
  std::map<caf::actor_addr, record> calls_;
};

} // namespace egress
