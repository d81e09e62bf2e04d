#pragma once
// libvirt's event loop, run on a thread of its own.
//
// libvirt's keepalive (virConnectSetKeepAlive) only works while an event loop
// is registered and running: it is what sends the pings and notices the
// missing answers, even while another thread is blocked inside a call on the
// same connection (docs/notes/transport.md#liveness-without-a-kill: a blocked upload on a blackholed
// link was released by keepalive (1,3) after 3-4 s, and never without it).

namespace egress::lv {

/// Registers the default event implementation and starts its thread, once
/// per process. Must run before the first connection is opened; it is
/// called by connection::open. Later calls return at once.
void ensure_event_loop();

} // namespace egress::lv
