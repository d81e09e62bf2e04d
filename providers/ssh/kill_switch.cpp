#include "providers/ssh/kill_switch.hpp"

#include <sys/socket.h>

namespace egress::ssh {

kill_switch::kill_switch() noexcept {
  for (auto& fd : fds_)
    fd.store(-1);
}

bool kill_switch::arm(slot s, int fd) noexcept {
  fds_[s].store(fd);
  return !fired_.load();
}

void kill_switch::fire() noexcept {
  fired_.store(true);
  for (auto& slot : fds_) {
    auto fd = slot.load();
    if (fd >= 0)
      ::shutdown(fd, SHUT_RDWR);
  }
}

} // namespace egress::ssh
