#pragma once
// The one place where a host's validated config becomes the options of its
// link, its transport and its prober: the options have no defaults of their
// own, so a default lives in the config alone (messages/config.hpp).

#include <cstdint>

#include "actors/host_link.hpp"
#include "messages/config.hpp"
#include "providers/probe/probe.hpp"
#include "providers/ssh/ssh_transport.hpp"
#include "providers/transport.hpp"

namespace egress {

/// How a host's link runs its calls: at most `calls` at once, on
/// `connections` libvirt connections.
struct call_plan {
  uint32_t calls = 1;
  uint32_t connections = 1;
};

/// max-calls calls on one shared connection where libvirt's client may run
/// calls from several threads at once (libvirt >= 10.4.0, or the test driver
/// opened in this process, which has no client); otherwise a connection for
/// each (libvirt before 10.4.0, CVE-2024-4418: docs/architecture.md, "One
/// call at a time on a connection"), at most 10 through an exec transport
/// (sshd's MaxSessions). Logs the second case once.
call_plan plan_calls(const host_config& host);

/// The SSH session to the host (the link's transport and the prober share it).
ssh::session_options session_of(const host_config& host);

/// The SSH transport's options: the session, the far end, the bridge's
/// plan_calls(host).connections connections, the keepalive and watchdog.
ssh_transport_options ssh_options_of(const host_config& host);

/// The bridge in front of a local daemon's socket.
local_socket_options local_socket_options_of(const host_config& host);

/// The host link's options but its transport and sink (the fleet's): its
/// call plan, budgets, backoff, bulk-read and lease intervals, keepalive.
host_link_options link_options_of(const host_config& host, const engine_config& cfg);

/// direct: libvirt opens the URI itself; ssh: the engine's SSH bridge;
/// local-socket: the engine's bridge in front of a local daemon socket. The
/// bridge takes plan_calls(host).connections libvirt connections.
transport_factory transport_for(const host_config& host);

/// The prober for a host's proxies: through the host's SSH server for an ssh
/// host (with the link's key, known_hosts and timeouts, on a session of its
/// own), otherwise a TCP connect from the engine.
probe::prober_ptr prober_for(const host_config& host);

} // namespace egress
