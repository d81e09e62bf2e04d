#include "providers/libvirt/event_loop.hpp"

#include <mutex>
#include <thread>

#include <libvirt/libvirt.h>

namespace egress::lv {

void ensure_event_loop() {
  static std::once_flag once;
  std::call_once(once, [] {
    virEventRegisterDefaultImpl();
    // Detached on purpose: the loop lives as long as the process. It only
    // waits in poll() between events and owns nothing that needs an orderly
    // teardown; libvirt offers no way to stop the default loop.
    std::thread([] {
      for (;;)
        virEventRunDefaultImpl();
    }).detach();
  });
}

} // namespace egress::lv
