#pragma once
// Readiness and health probes of a proxy VM, through the host.
//
// A lease can outlive the VM's proxy (a restart, a crashed daemon), so a
// proxy counts as ready only when its port answers. The engine never needs a
// route into the VM network: for a host reached over SSH the probe opens a
// direct-tcpip channel on a session of its own to VM-IP:port (the host's
// sshd does the TCP connect), then, when a target is configured, sends one
// HTTP request through the proxy (`GET http://target/ HTTP/1.1`) and reads
// the status line. Hosts reached otherwise are probed by a TCP connect from
// the engine itself.
//
// The probe session is not the link's: libvirt traffic and probes never wait
// for each other, and killing one leaves the other alone.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include <caf/expected.hpp>

#include "providers/ssh/session.hpp"

namespace egress::probe {

/// What a probe checks beyond the TCP connect.
struct settings {
  /// "" = a TCP connect to the proxy's port is the whole probe. Otherwise an
  /// absolute http:// URL that the proxy must fetch: the probe passes when
  /// the status is 2xx or 3xx.
  std::string target;
  /// Bounds the whole probe (channel open or connect, request, status line).
  std::chrono::milliseconds timeout{3000};
};

/// The proxy's answer. A failing proxy is an outcome with ok == false, not an
/// error: errors are reserved for the route (see prober::probe).
struct outcome {
  bool ok = false;
  /// Where it stopped: "connect", "send", "reply", "status"; "ok" on success.
  std::string stage;
  /// For people: "connection refused", "HTTP 502", "no reply within 3000 ms".
  std::string detail;
  int http_status = 0; // 0 without a target or without a status line
  std::chrono::microseconds latency{0}; // from the connect to the status line
};

class prober {
public:
  virtual ~prober() = default;

  /// Probes the proxy at address:port. Blocks, bounded by `s.timeout` and by
  /// kill() (through SSH, opening the session is bounded separately by the
  /// options' connect_timeout). An error means the route to the host failed
  /// (its SSH session could not be opened, or broke, or the host acknowledged
  /// nothing until the deadline) or the probe was killed: transient
  /// ssh_failed, and the proxy is not judged. The next probe after an error
  /// reconnects. A target that is not a plain http:// URL, or (direct) an
  /// address that is not numeric, is invalid_argument.
  /// A deadline that passes while the host is there is the proxy's fault: an
  /// outcome, stage "connect" or "reply".
  /// Thread-safe: probes through one prober run one at a time.
  virtual caf::expected<outcome> probe(const std::string& address, uint16_t port,
                                       const settings& s) = 0;

  /// Ends a blocked probe within milliseconds (shutdown() of its socket);
  /// safe from any thread, any number of times. The next probe reconnects.
  virtual void kill() noexcept = 0;
};

using prober_ptr = std::shared_ptr<prober>;

/// Probes through a session of its own to the host's sshd, opened on the
/// first probe and kept; host key checked as for the link (invariant 13).
/// A kept session that fails at once (it may have died while idle) is
/// replaced within the same probe, once, before the route counts as broken.
prober_ptr through_ssh(ssh::session_options opts);

/// Probes with a TCP connect from the engine's own network stack.
prober_ptr direct_tcp();

} // namespace egress::probe
