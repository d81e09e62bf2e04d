#include "actors/transport_choice.hpp"

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

// The SSH session settings the link and the prober share (both option types
// name them alike): one place maps them from the host's config.
template <class Options>
void fill_session(Options& o, const host_config& h) {
  o.host = h.name;
  o.address = h.address;
  o.port = static_cast<uint16_t>(h.port);
  o.user = h.user;
  o.key_file = h.key_file;
  o.known_hosts = h.known_hosts;
  o.connect_timeout = as<std::chrono::milliseconds>(h.connect_timeout);
  o.tcp_user_timeout = as<std::chrono::milliseconds>(h.tcp_user_timeout);
}

// OpenSSH's default MaxSessions.
constexpr uint32_t max_exec_lanes = 10;

} // namespace

call_plan plan_calls(const host_config& h) {
  if (h.transport == "direct" && h.uri.starts_with("test:///"))
    return {h.max_calls, 1};
  static const bool safe = [] {
    bool ok = lv::concurrent_calls_safe();
    if (!ok)
      log::warn("links", "libvirt " + lv::library_version()
                           + " (before 10.4.0, CVE-2024-4418): a libvirt connection per"
                             " call on each host link, never two calls on one");
    return ok;
  }();
  if (safe)
    return {h.max_calls, 1};
  // Each connection of an exec transport is a session channel, and sshd
  // allows MaxSessions of those per connection (10 by default): past it the
  // next lane's open fails and, with it, the link.
  auto n = h.transport == "ssh" && !h.remote_command.empty()
             ? std::min(h.max_calls, max_exec_lanes)
             : h.max_calls;
  return {n, n};
}

transport_factory transport_for(const host_config& h) {
  auto lanes = plan_calls(h).connections;
  if (h.transport == "ssh") {
    ssh_transport_options o;
    fill_session(o, h);
    o.lanes = lanes;
    o.remote_socket = h.remote_socket;
    o.remote_command = h.remote_command;
    o.libvirt_uri = h.uri;
    o.bridge_dir = h.bridge_dir;
    o.ssh_keepalive_interval = as<std::chrono::seconds>(h.ssh_keepalive);
    o.ssh_watchdog = as<std::chrono::milliseconds>(h.ssh_watchdog);
    return over_ssh(std::move(o));
  }
  if (h.transport == "local-socket") {
    local_socket_options o;
    o.host = h.name;
    o.socket_path = h.socket;
    o.libvirt_uri = h.uri;
    o.bridge_dir = h.bridge_dir;
    o.lanes = lanes;
    return over_local_socket(std::move(o));
  }
  return direct(h.uri);
}

probe::prober_ptr prober_for(const host_config& h) {
  if (h.transport != "ssh")
    return probe::direct_tcp();
  ssh::session_options o;
  fill_session(o, h);
  return probe::through_ssh(std::move(o));
}

} // namespace egress
