#pragma once
// The fence between a node and a host it may no longer change
// (docs/architecture.md, "Node failover"): one per host, shared by the
// cluster actor (which opens it until a deadline after each confirmed
// keepalive and closes it when the host leaves the node) and the host's
// link, whose every call checks it on the worker's thread right before it
// runs. A check on the worker rather than in an actor matters after a
// SIGSTOP: when the process runs again, a worker may take its next call
// before the cluster actor's timer tells anyone the lease is stale, and the
// deadline, read from the clock, is already past.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace egress {

class host_fence {
public:
  using clock = std::chrono::steady_clock;

  /// Whether calls may run now.
  bool open(clock::time_point now = clock::now()) const {
    return now.time_since_epoch().count() < until_.load(std::memory_order_acquire);
  }

  /// Calls may run until `until` (a later extension moves it).
  void open_until(clock::time_point until) {
    until_.store(until.time_since_epoch().count(), std::memory_order_release);
  }

  void close() {
    until_.store(0, std::memory_order_release);
  }

  /// A call the fence refused (counted for metrics).
  void refused() {
    refusals_.fetch_add(1, std::memory_order_relaxed);
  }

  uint64_t refusals() const {
    return refusals_.load(std::memory_order_relaxed);
  }

private:
  std::atomic<int64_t> until_{0};
  std::atomic<uint64_t> refusals_{0};
};

using host_fence_ptr = std::shared_ptr<host_fence>;

/// Every host's fence, made on first use by either side.
class fence_board {
public:
  host_fence_ptr of(const std::string& host) {
    std::lock_guard<std::mutex> guard{mtx_};
    auto& f = fences_[host];
    if (!f)
      f = std::make_shared<host_fence>();
    return f;
  }

  uint64_t refusals() {
    std::lock_guard<std::mutex> guard{mtx_};
    uint64_t n = 0;
    for (auto& [_, f] : fences_)
      n += f->refusals();
    return n;
  }

private:
  std::mutex mtx_;
  std::map<std::string, host_fence_ptr> fences_;
};

using fence_board_ptr = std::shared_ptr<fence_board>;

} // namespace egress
