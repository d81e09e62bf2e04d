#include "actors/transport_choice.hpp"

#include <chrono>

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

} // namespace

transport_factory transport_for(const host_config& h) {
  if (h.transport == "ssh") {
    ssh_transport_options o;
    fill_session(o, h);
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
