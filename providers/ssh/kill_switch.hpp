#pragma once
// The one thing a kill does: shutdown(SHUT_RDWR) on every descriptor the
// transport owns. No lock, no close(), no other I/O (invariant 1).
//
// Why shutdown and not close: close() from another thread races with the
// thread blocked in poll()/recv() on the same fd (the number can be reused
// by an unrelated open before the blocked call notices), and libssh2 would
// then talk to a stranger. shutdown() keeps the fd valid and makes every
// blocked call on it return at once (poll wakes with POLLHUP, recv gives 0,
// send gives EPIPE). The owner closes the fds later, in its destructor.

#include <array>
#include <atomic>
#include <cstddef>

namespace egress::ssh {

class kill_switch {
public:
  /// The descriptors a transport owns. `far` is the TCP socket to sshd (or,
  /// for a local transport, a socket to the local daemon), `client` a
  /// connection of libvirt's client on the bridge; both come once per lane
  /// (bridge.hpp), the listener once.
  enum slot { far = 0, listener = 1, client = 2 };

  /// Lanes a transport may have: the most calls a host's config allows at
  /// once (max-calls, messages/config_check.hpp), one connection each.
  static constexpr size_t max_lanes = 64;

  kill_switch() noexcept;

  kill_switch(const kill_switch&) = delete;
  kill_switch& operator=(const kill_switch&) = delete;

  /// Publishes `fd` so that a kill reaches it. Returns false if the switch
  /// has already fired: the caller must then stop (and report "killed").
  /// Call it right after the fd exists and before any blocking use of it.
  bool arm(slot s, int fd, size_t lane = 0) noexcept;

  /// Marks the transport killed and shuts down every published fd. Safe from
  /// any thread, any number of times; never blocks.
  void fire() noexcept;

  /// True once fire() ran.
  bool fired() const noexcept { return fired_.load(); }

private:
  // Both sides use sequentially consistent atomics (store then load, in
  // opposite orders): either arm() sees the flag, or fire() sees the fd.
  // There is no window in which an fd is published but never shut down.
  std::atomic<bool> fired_{false};
  std::array<std::array<std::atomic<int>, max_lanes>, 3> fds_;
};

} // namespace egress::ssh
