// The rotation as a benchmark follows it: an actor subscribed to the
// fleet's rotation events (engine::subscribe) keeps the rotation's size and
// when it last changed, and, only while asked to, each proxy's joins and
// leaves with their times. With the probes off (bench/scale's hosts) a
// proxy joins when it is running with an address, so "the rotation holds
// N" is "N proxies converged", told by one event per proxy instead of a
// status of the whole fleet polled (a copy of every proxy per poll, which
// at 100,000 proxies took the fleet ~0.25 s each time).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <caf/actor_system.hpp>

#include "messages/actors.hpp"
#include "runtime/engine.hpp"

namespace egress::test {

class rotation_log {
public:
  using clock = std::chrono::steady_clock;
  struct move {
    bool joined;
    clock::time_point at;
  };

  /// Each proxy's moves from now on (the earlier ones are dropped); off by
  /// default, so that converging keeps nothing per proxy in the bench.
  void record_moves(bool on) {
    std::lock_guard<std::mutex> guard{mtx_};
    by_name_ = on;
    moves_.clear();
  }

  /// Waits until `done` holds for the log (checked on every event, under
  /// the log's lock) or `deadline` passes; false on the deadline.
  bool wait_until(const std::function<bool(const rotation_log&)>& done,
                  clock::time_point deadline) {
    std::unique_lock<std::mutex> lock{mtx_};
    return moved_.wait_until(lock, deadline, [&] { return done(*this); });
  }

  /// Read under the lock: from a wait_until predicate, or after the
  /// events stopped.
  uint32_t size() const { return size_; }
  clock::time_point sized_at() const { return sized_at_; }
  const std::vector<move>* moves_of(const std::string& proxy) const {
    auto i = moves_.find(proxy);
    return i == moves_.end() ? nullptr : &i->second;
  }
  size_t proxies_moved() const { return moves_.size(); }

  /// Under the lock, for a reader outside wait_until.
  template <class F>
  auto read(F f) {
    std::lock_guard<std::mutex> guard{mtx_};
    return f(static_cast<const rotation_log&>(*this));
  }

  void take(const rotation_event& e) {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      auto now = clock::now();
      size_ = e.size;
      sized_at_ = now;
      if (by_name_)
        moves_[e.proxy].push_back({e.joined, now});
    }
    moved_.notify_all();
  }

private:
  mutable std::mutex mtx_;
  std::condition_variable moved_;
  uint32_t size_ = 0;
  clock::time_point sized_at_{};
  bool by_name_ = false;
  std::unordered_map<std::string, std::vector<move>> moves_;
};

inline egress::rotation_events_actor::behavior_type
follow_rotation(egress::rotation_events_actor::pointer, std::shared_ptr<rotation_log> log) {
  return {[log](egress::rotation_event& e) { log->take(e); }};
}

/// A log subscribed to `eng`'s rotation; the actor ends with the system or
/// when sent an exit.
inline std::pair<std::shared_ptr<rotation_log>, egress::rotation_events_actor>
follow(caf::actor_system& sys, const egress::engine& eng) {
  auto log = std::make_shared<rotation_log>();
  auto who = sys.spawn(follow_rotation, log);
  eng.subscribe(who);
  return {log, who};
}

} // namespace egress::test
