#pragma once
// Converting libvirt's thread-local error into an engine error.
//
// The error must be copied at once, right after the failing call:
// virConnectIsAlive() and most other calls reset the thread-local error, and a
// harness that looked it up one call too late reported "no error" for a
// killed connection (docs/notes/transport.md#after-a-kill).

#include <string>
#include <string_view>

#include <caf/error.hpp>

#include "messages/error.hpp"

namespace egress::lv {

/// Copies libvirt's last error (code, domain, message) for the calling thread
/// and classifies it. `what` names the operation, e.g. "hv1: define px-1".
caf::error last_error(std::string_view what);

/// Classifies a libvirt error:
/// - connection broken, RPC/remote failures and timeouts: transient
/// - no such domain / pool / volume / network: not_found
/// - invalid argument, XML errors, access denied, unsupported: permanent
/// - anything else: permanent (libvirt_permanent)
/// The context reads "<what>: <message> (code=<c> domain=<d>)".
caf::error classify(int code, int domain, std::string_view message,
                    std::string_view what);

} // namespace egress::lv
