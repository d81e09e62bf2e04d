#pragma once
// The host link's watch over its host's domains (docs/spec.md 27): libvirt's
// events, registered on every dial before the link is up, and a bulk read of
// every domain's state right after each dial and then at the safety-net
// interval. Events reach the watching proxies as domain_events, bulk reads as
// one domain_brief each; no proxy reads its domain on a timer once it runs.
// A bulk read lists the host's DHCP leases too (one call per network) for
// the proxies whose MACs it knows, every lease interval while one of them
// waits for an address (docs/spec.md 28). Who gets what is decided by the
// link's domain_watch (actors/parts/domain_watch.hpp); this is the actor's
// side: the calls, the timers and the messages.

#include "actors/host_link.hpp"
#include "providers/libvirt/watch.hpp"

namespace egress {

/// What the dial registers with libvirt: hands each event of generation
/// `gen` to the link as a message (it runs on libvirt's event-loop thread,
/// and holds only the link's address, so it never keeps the link alive).
lv::domain_sink event_sink(host_link_pointer self, uint64_t gen);

/// A proxy watches its domain.
void add_watcher(host_link_pointer self, std::string name, proxy_actor proxy);

/// A watching proxy names its domain's MACs and whether it waits for an
/// address; a first wait starts the lease timer.
void on_address_watch(host_link_pointer self, address_watch& w);

/// The lease timer's tick: a bulk read with the leases while any proxy
/// waits for an address, and the next tick.
void on_lease_tick(host_link_pointer self);

/// An event from the event loop: counted, and sent on to the domain's proxy
/// if it is of the current dial.
void forward_event(host_link_pointer self, domain_event& ev);

/// The link just came up: the resync (a bulk read) after the registration.
void on_link_up(host_link_pointer self);

/// The safety net's tick: a bulk read if the link is up, and the next tick.
void on_safety_net_tick(host_link_pointer self);

} // namespace egress
