#pragma once
// A libvirt connection of its own for one long transfer (an image upload),
// never the host's pooled link: a 20-minute upload must hold nothing that
// the host's proxies need, and its failure must not kill their connection.
//
// The transport is made by the caller, who keeps a copy: kill() on it (from
// any thread, lock-free) frees whatever the transfer is blocked in. The pump
// runs on a thread this object owns and joins, so nothing outlives it.

#include <memory>
#include <thread>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "providers/libvirt/connection.hpp"
#include "providers/transport.hpp"

namespace egress::images {

class dedicated_link {
public:
  /// Connects `t`, starts its pump (if it has one) and opens libvirt on it
  /// with keepalive `ka`. Blocks, bounded by the transport's timeouts and by
  /// t->kill(). On failure everything started is stopped again.
  static caf::expected<std::unique_ptr<dedicated_link>> open(transport_ptr t,
                                                             lv::keepalive ka);

  ~dedicated_link() { close(); }
  dedicated_link(const dedicated_link&) = delete;
  dedicated_link& operator=(const dedicated_link&) = delete;

  lv::connection& conn() { return *conn_; }

  /// Closes the connection for good, in the order that never waits on a dead
  /// peer: kill the transport (a blocked call returns, libvirtd sees the end
  /// of its client), release libvirt's connection, join the pump. After
  /// close() returns the daemon's side of this connection is gone or going,
  /// so a partial volume may be deleted (docs/spec.md 7). Idempotent.
  void close() noexcept;

private:
  dedicated_link(transport_ptr t) : t_(std::move(t)) {}
  transport_ptr t_;
  std::thread pump_;
  lv::connection_ptr conn_;
};

} // namespace egress::images
