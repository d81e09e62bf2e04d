#pragma once
// The byte path between libvirt's client library and one host.
//
// libvirt has no per-call cancel: the only way to abandon a blocked call is
// to kill its transport, and that kill must never wait on a lock or on I/O
// (docs/notes/failures.md#close-behind-a-stuck-write: a close queued behind a TCP write stuck for ~15 minutes). So the
// engine owns the transport, and kill() is only shutdown() calls on file
// descriptors it owns: lock-free, immediate, callable from any thread.
// Handles are freed by the owner (the last shared_ptr), never by kill().

#include <functional>
#include <memory>
#include <string>

#include <caf/expected.hpp>

namespace egress {

class transport {
public:
  virtual ~transport();

  /// Establishes the path (TCP connect, SSH handshake, local bridge). Blocks,
  /// bounded by its own timeouts and by kill(); runs in a detached actor.
  virtual caf::error connect() = 0;

  /// The URI libvirt's client opens to reach the host through this transport.
  virtual const std::string& uri() const noexcept = 0;

  /// True if bytes flow through a pump of ours (SSH, local-socket bridge):
  /// the link then runs pump() in a detached actor for the link's lifetime.
  virtual bool has_pump() const noexcept { return false; }

  /// Moves bytes between libvirt's client and the host until the path dies
  /// or kill() runs; returns why it ended (never an empty error once started
  /// unless killed). Blocks: runs in a detached actor of its own.
  virtual caf::error pump() { return {}; }

  /// Makes every blocked call on this transport return. Invariant 1: never
  /// blocks on a lock or on I/O; safe from any thread, any number of times.
  virtual void kill() noexcept = 0;
};

using transport_ptr = std::shared_ptr<transport>;

/// Builds the transport object for one dial. Must not block: the link calls it
/// on its own (scheduler) thread, so that it holds the transport, and with it
/// the kill, before connect() starts.
using transport_factory = std::function<transport_ptr()>;

/// A libvirt URI opened directly by the client library: the test driver, or a
/// local socket the client owns. There is no descriptor of ours to shut down,
/// so kill() only records that it ran; the test driver never blocks on I/O.
/// Remote hosts use the SSH bridge, which does own its descriptors.
class direct_transport final : public transport {
public:
  explicit direct_transport(std::string uri) : uri_(std::move(uri)) {}
  caf::error connect() override { return {}; }
  const std::string& uri() const noexcept override { return uri_; }
  void kill() noexcept override {}

private:
  std::string uri_;
};

/// The factory for direct transports.
transport_factory direct(std::string uri);

} // namespace egress
