#pragma once
// What watching a host's domains takes, instead of reading each domain on a
// timer: libvirt's lifecycle and agent events for every domain of a
// connection, and one bulk read of every domain's state. Both block (the
// registration is a round trip): they run on a link's call workers only.

#include <functional>
#include <string>
#include <vector>

#include <caf/expected.hpp>

#include "messages/types.hpp"
#include "providers/libvirt/connection.hpp"

namespace egress::lv {

/// Called on libvirt's event-loop thread (providers/libvirt/event_loop) for
/// each event: it must only hand the event on (a message), never block.
using domain_sink = std::function<void(const std::string& name, domain_change change)>;

/// Registers lifecycle events (and agent lifecycle events, where the driver
/// has them) of all domains of `c`, each handed to `sink`. A registration
/// lives as long as its connection (whose destructor deregisters it): a new
/// connection needs a new one. An error means no lifecycle events on this
/// connection.
caf::error watch_domains(connection& c, domain_sink sink);

/// Every domain of the host with its state, in one round trip
/// (virConnectGetAllDomainStats, state only, not waiting behind a domain's
/// running job).
caf::expected<std::vector<domain_brief>> read_states(connection& c);

/// One DHCP lease of one of the host's networks.
struct lease {
  std::string mac;     // lowercase, as libvirt writes it
  std::string address; // without the prefix length
};

/// Every lease of every active network of the host: one
/// virConnectListAllNetworks and one virNetworkGetDHCPLeases per network,
/// however many domains there are. A host whose driver cannot list leases
/// (no network driver: the test driver) is ec::unsupported; a network gone
/// between the list and its read is skipped.
caf::expected<std::vector<lease>> read_leases(connection& c);

} // namespace egress::lv
