#pragma once
// Which transport a host's link dials through, from its validated config.

#include "messages/config.hpp"
#include "providers/probe/probe.hpp"
#include "providers/transport.hpp"

namespace egress {

/// direct: libvirt opens the URI itself; ssh: the engine's SSH bridge;
/// local-socket: the engine's bridge in front of a local daemon socket.
transport_factory transport_for(const host_config& host);

/// The prober for a host's proxies: through the host's SSH server for an ssh
/// host (with the link's key, known_hosts and timeouts, on a session of its
/// own), otherwise a TCP connect from the engine.
probe::prober_ptr prober_for(const host_config& host);

} // namespace egress
