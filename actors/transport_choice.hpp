#pragma once
// Which transport a host's link dials through, from its validated config.

#include "providers/transport.hpp"
#include "runtime/config.hpp"

namespace egress {

/// direct: libvirt opens the URI itself; ssh: the engine's SSH bridge;
/// local-socket: the engine's bridge in front of a local daemon socket.
transport_factory transport_for(const host_config& host);

} // namespace egress
