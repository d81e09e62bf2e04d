#pragma once
// When a dead host link may dial again (docs/spec.md 18): exponential
// backoff from redial_min to redial_max with "equal jitter" (half fixed,
// half random), so that many links that died together do not redial in
// lockstep. A link that dies before it served a call counts as a failed
// dial, so one that dies on every resync backs off further each time
// instead of redialing at the shortest backoff forever; a call served
// starts the backoff over.
//
// A plain class (tests/unit/dial_backoff.cpp); the link
// (actors/host_link.cpp) tells it what happened and asks when.

#include <chrono>
#include <cstdint>
#include <random>

#include <caf/timespan.hpp>

namespace egress {

class dial_backoff {
public:
  using clock = std::chrono::steady_clock;

  // The link sets its bounds from its options when it starts; a default one
  // (an actor's state is default-constructed first) never waits.
  dial_backoff() = default;
  dial_backoff(caf::timespan min, caf::timespan max, unsigned seed = std::random_device{}())
    : min_(min), max_(max), rng_(seed) {}

  /// A dial started.
  void dialed() noexcept { ++dials_; }

  /// A dial failed (the path or libvirt's open).
  void failed() noexcept { ++failures_; }

  /// The link came up: nothing served yet on this dial.
  void came_up() noexcept { served_ = false; }

  /// The host answered a call (its job's own error counts: libvirt served it).
  void served() noexcept {
    served_ = true;
    failures_ = 0;
  }

  /// The link died at `now`; `was_up` says it had come up. Returns when the
  /// next dial is due.
  clock::time_point died(clock::time_point now, bool was_up) {
    if (was_up && !served_)
      ++failures_;
    ++deaths_;
    next_dial_at_ = now + wait();
    return next_dial_at_;
  }

  /// How long a dial is still not due at `now` (zero once it is).
  caf::timespan not_due_for(clock::time_point now) const {
    if (now >= next_dial_at_)
      return caf::timespan{0};
    return std::chrono::duration_cast<caf::timespan>(next_dial_at_ - now);
  }

  /// The next dial is due at once (tests, and an operator's redial).
  void due_now() noexcept { next_dial_at_ = {}; }

  uint32_t failures() const noexcept { return failures_; }
  uint64_t dials() const noexcept { return dials_; }
  uint64_t deaths() const noexcept { return deaths_; }
  caf::timespan longest() const noexcept { return max_; }

  /// The wait after the failures so far: the base doubles per failure from
  /// the second on, capped at max; half of it is random.
  caf::timespan wait() {
    auto base = min_;
    for (uint32_t i = 1; i < failures_ && base < max_; ++i)
      base *= 2;
    base = std::min(base, max_);
    std::uniform_int_distribution<int64_t> half(0, base.count() / 2);
    return caf::timespan{base.count() / 2 + half(rng_)};
  }

private:
  caf::timespan min_{0};
  caf::timespan max_{0};
  std::minstd_rand rng_{std::random_device{}()};
  uint32_t failures_ = 0; // consecutive failed dials
  bool served_ = false;   // a call answered since the link came up
  clock::time_point next_dial_at_{};
  uint64_t dials_ = 0;
  uint64_t deaths_ = 0;
};

} // namespace egress
