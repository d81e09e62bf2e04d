#include "messages/types.hpp"

namespace egress {

const char* to_string(domain_state x) {
  switch (x) {
    case domain_state::nostate: return "nostate";
    case domain_state::running: return "running";
    case domain_state::blocked: return "blocked";
    case domain_state::paused: return "paused";
    case domain_state::shutdown: return "shutdown";
    case domain_state::shutoff: return "shutoff";
    case domain_state::crashed: return "crashed";
    case domain_state::pmsuspended: return "pmsuspended";
  }
  return "unknown";
}

const char* to_string(link_state x) {
  switch (x) {
    case link_state::dialing: return "dialing";
    case link_state::up: return "up";
    case link_state::dead: return "dead";
  }
  return "unknown";
}

const char* to_string(image_state x) {
  switch (x) {
    case image_state::absent: return "absent";
    case image_state::fetching: return "fetching";
    case image_state::ready: return "ready";
    case image_state::failed: return "failed";
  }
  return "unknown";
}

const char* to_string(proxy_phase x) {
  switch (x) {
    case proxy_phase::pending: return "pending";
    case proxy_phase::creating: return "creating";
    case proxy_phase::provisioning: return "provisioning";
    case proxy_phase::running: return "running";
    case proxy_phase::failed: return "failed";
    case proxy_phase::deleting: return "deleting";
    case proxy_phase::deleted: return "deleted";
  }
  return "unknown";
}

} // namespace egress
