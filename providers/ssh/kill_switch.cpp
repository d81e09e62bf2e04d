#include "providers/ssh/kill_switch.hpp"

#include <sys/socket.h>

namespace egress::ssh {

kill_switch::kill_switch() noexcept {
  for (auto& lanes : fds_)
    for (auto& fd : lanes)
      fd.store(-1);
}

bool kill_switch::arm(slot s, int fd, size_t lane) noexcept {
  if (lane >= max_lanes)
    return false; // the caller never gets that far: lanes are capped at open
  fds_[s][lane].store(fd);
  return !fired_.load();
}

void kill_switch::fire() noexcept {
  fired_.store(true);
  for (auto& lanes : fds_)
    for (auto& slot : lanes) {
      auto fd = slot.load();
      if (fd >= 0)
        ::shutdown(fd, SHUT_RDWR);
    }
}

} // namespace egress::ssh
