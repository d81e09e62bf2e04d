#pragma once
// Test seams for the transport: a gate a blocked job can wait on, and a
// transport whose kill opens that gate. This models what the real SSH bridge
// does (its kill makes every blocked libvirt call on it return) on top of
// the in-process test driver, whose calls never block on their own.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>

#include "providers/transport.hpp"

namespace egress::test {

class gate {
public:
  void open() {
    {
      std::lock_guard<std::mutex> g{m_};
      open_ = true;
    }
    cv_.notify_all();
  }
  bool wait_for(std::chrono::milliseconds d) {
    std::unique_lock<std::mutex> g{m_};
    return cv_.wait_for(g, d, [this] { return open_; });
  }
  bool is_open() {
    std::lock_guard<std::mutex> g{m_};
    return open_;
  }

private:
  std::mutex m_;
  std::condition_variable cv_;
  bool open_ = false;
};

struct kill_probe {
  std::atomic<int> kills{0};
  gate killed;        // opened by the first kill: blocked jobs wait on this
  gate kill_started;  // opened when a kill begins
  // When set, kill() waits on it: a deliberately slow kill (test only; a real
  // kill never waits, invariant 1).
  std::shared_ptr<gate> hold_kill;
};

class test_transport final : public transport {
public:
  test_transport(std::string uri, std::shared_ptr<kill_probe> probe)
    : uri_(std::move(uri)), probe_(std::move(probe)) {}
  caf::error connect() override { return {}; }
  const std::string& uri() const noexcept override { return uri_; }
  void kill() noexcept override {
    ++probe_->kills;
    probe_->kill_started.open();
    if (probe_->hold_kill)
      probe_->hold_kill->wait_for(std::chrono::seconds(30));
    probe_->killed.open();
  }

private:
  std::string uri_;
  std::shared_ptr<kill_probe> probe_;
};

inline transport_factory test_transports(std::string uri,
                                         std::shared_ptr<kill_probe> probe) {
  return [uri, probe] { return std::make_shared<test_transport>(uri, probe); };
}

} // namespace egress::test
