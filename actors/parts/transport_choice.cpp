#include "actors/parts/transport_choice.hpp"

#include <algorithm>
#include <chrono>

#include "base/log.hpp"
#include "providers/libvirt/connection.hpp"
#include "providers/ssh/ssh_transport.hpp"

namespace egress {

namespace {

template <class Duration>
Duration as(caf::timespan d) {
  return std::chrono::duration_cast<Duration>(d);
}

// OpenSSH's default MaxSessions.
constexpr uint32_t max_exec_connections = 10;

} // namespace

call_plan plan_calls(const host_config& h) {
  if (h.transport == "direct" && h.uri.starts_with("test:///"))
    return {h.max_calls, 1};
  static const bool safe = [] {
    bool ok = lv::concurrent_calls_safe();
    if (!ok)
      log::warn(to_string(actor_kind::link), "libvirt " + lv::library_version()
                           + " (before 10.4.0, CVE-2024-4418): a libvirt connection per"
                             " call on each host link, never two calls on one");
    return ok;
  }();
  if (safe)
    return {h.max_calls, 1};
  // Each connection of an exec transport is a session channel, and sshd
  // allows MaxSessions of those per connection (10 by default): past it the
  // next connection's channel fails to open and, with it, the link.
  auto n = h.transport == "ssh" && !h.remote_command.empty()
             ? std::min(h.max_calls, max_exec_connections)
             : h.max_calls;
  return {n, n};
}

ssh::session_options session_of(const host_config& h) {
  ssh::session_options o;
  o.host = h.name;
  o.address = h.address;
  o.port = static_cast<uint16_t>(h.port);
  o.user = h.user;
  o.key_file = h.key_file;
  o.known_hosts = h.known_hosts;
  o.connect_timeout = as<std::chrono::milliseconds>(h.connect_timeout);
  o.tcp_user_timeout = as<std::chrono::milliseconds>(h.tcp_user_timeout);
  return o;
}

namespace {

// In a cluster (a host claimed under a token), a pump that stood still
// longer than this does not send what it held: the call was made under a
// lease that may have expired while the process was stopped. Outside a
// cluster nothing changes.
std::chrono::milliseconds stall_limit_of(const host_config& h) {
  return h.fencing_token > 0 ? std::chrono::milliseconds{2000} : std::chrono::milliseconds{0};
}

} // namespace

ssh_transport_options ssh_options_of(const host_config& h) {
  ssh_transport_options o;
  o.session = session_of(h);
  o.connections = plan_calls(h).connections;
  o.remote_socket = h.remote_socket;
  o.remote_command = h.remote_command;
  o.libvirt_uri = h.uri;
  o.bridge_dir = h.bridge_dir;
  o.ssh_keepalive_interval = as<std::chrono::seconds>(h.ssh_keepalive);
  o.ssh_watchdog = as<std::chrono::milliseconds>(h.ssh_watchdog);
  o.stall_limit = stall_limit_of(h);
  return o;
}

local_socket_options local_socket_options_of(const host_config& h) {
  local_socket_options o;
  o.host = h.name;
  o.socket_path = h.socket;
  o.libvirt_uri = h.uri;
  o.bridge_dir = h.bridge_dir;
  o.connections = plan_calls(h).connections;
  o.stall_limit = stall_limit_of(h);
  return o;
}

host_link_options link_options_of(const host_config& h, const engine_config& cfg) {
  host_link_options o;
  o.host = h.name;
  auto plan = plan_calls(h);
  o.max_calls = plan.calls;
  o.connections = plan.connections;
  o.max_creates = h.max_creates;
  o.call_budget = h.call_budget;
  o.connect_timeout = h.connect_timeout;
  o.redial_min = cfg.redial_min;
  o.redial_max = cfg.redial_max;
  o.bulk_read_interval = cfg.bulk_read_interval;
  o.lease_interval = cfg.poll_interval;
  o.keepalive_interval_s = static_cast<int>(as<std::chrono::seconds>(h.keepalive_interval).count());
  o.keepalive_count = h.keepalive_count;
  return o;
}

transport_factory transport_for(const host_config& h) {
  if (h.transport == "ssh")
    return over_ssh(ssh_options_of(h));
  if (h.transport == "local-socket")
    return over_local_socket(local_socket_options_of(h));
  return direct(h.uri);
}

probe::prober_ptr prober_for(const host_config& h) {
  if (h.transport != "ssh")
    return probe::direct_tcp();
  return probe::through_ssh(session_of(h));
}

} // namespace egress
