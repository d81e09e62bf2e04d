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

const char* to_string(domain_change x) {
  switch (x) {
    case domain_change::defined: return "defined";
    case domain_change::undefined: return "undefined";
    case domain_change::started: return "started";
    case domain_change::suspended: return "suspended";
    case domain_change::resumed: return "resumed";
    case domain_change::stopped: return "stopped";
    case domain_change::shutdown: return "shutdown";
    case domain_change::crashed: return "crashed";
    case domain_change::pmsuspended: return "pmsuspended";
    case domain_change::agent: return "agent";
    case domain_change::other: return "other";
    case domain_change::metadata: return "metadata";
  }
  return "unknown";
}

const char* to_string(lease_view x) {
  switch (x) {
    case lease_view::not_read: return "not_read";
    case lease_view::read: return "read";
    case lease_view::unsupported: return "unsupported";
    case lease_view::failed: return "failed";
  }
  return "unknown";
}

// Not undefined: a running domain that is undefined runs on, transient.
bool ends_running(domain_change x) {
  return x == domain_change::stopped || x == domain_change::crashed;
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

const char* to_string(haproxy_state x) {
  switch (x) {
    case haproxy_state::off: return "off";
    case haproxy_state::connecting: return "connecting";
    case haproxy_state::in_sync: return "in sync";
    case haproxy_state::out_of_sync: return "out of sync";
    case haproxy_state::unreachable: return "unreachable";
  }
  return "unknown";
}

std::string describe(const host_drain& x) {
  if (!x.cordoned)
    return "not cordoned";
  return "cordoned, draining: " + std::to_string(x.members) + " member(s) left, "
         + std::to_string(x.moving) + " moving, " + std::to_string(x.moved) + " moved"
         + (x.waiting.empty() ? "" : " (waiting: " + x.waiting + ")");
}

} // namespace egress
