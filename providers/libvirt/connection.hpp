#pragma once
// RAII wrappers for libvirt's handles. All of these calls block: they run only
// inside detached actors (actors/call), never on a scheduler thread.

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <caf/expected.hpp>

#include <libvirt/libvirt.h>

namespace egress::lv {

struct domain_deleter { void operator()(virDomainPtr p) const noexcept; };
struct pool_deleter { void operator()(virStoragePoolPtr p) const noexcept; };
struct volume_deleter { void operator()(virStorageVolPtr p) const noexcept; };
struct stream_deleter { void operator()(virStreamPtr p) const noexcept; };
struct network_deleter { void operator()(virNetworkPtr p) const noexcept; };

using domain_ptr = std::unique_ptr<virDomain, domain_deleter>;
using pool_ptr = std::unique_ptr<virStoragePool, pool_deleter>;
using volume_ptr = std::unique_ptr<virStorageVol, volume_deleter>;
using stream_ptr = std::unique_ptr<virStream, stream_deleter>;
using network_ptr = std::unique_ptr<virNetwork, network_deleter>;

/// A domain's UUID as text ("" if libvirt cannot say): the handle carries
/// it, so no round trip. A domain undefined and defined again gets a new one.
std::string uuid_of(virDomainPtr dom);

/// libvirt keepalive: a ping every `interval_s` seconds; the connection is
/// closed (and every blocked call on it released) after `count` missed
/// answers. interval_s = 0 disables it.
struct keepalive {
  int interval_s = 0;
  unsigned count = 3;
};

/// One open libvirt connection. Closed by the destructor (virConnectClose),
/// which may block briefly: the last owner is always a detached actor.
class connection {
public:
  /// Opens `uri` (virConnectOpen) and enables keepalive where the driver has
  /// it. Errors are classified (lv::last_error).
  static caf::expected<std::shared_ptr<connection>> open(const std::string& uri,
                                                         keepalive ka = {});

  ~connection();
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;

  virConnectPtr get() const noexcept { return conn_; }
  const std::string& uri() const noexcept { return uri_; }

  /// virConnectIsAlive: false once the transport is gone.
  bool alive() const noexcept;

  /// An event callback registered on this connection (providers/libvirt/
  /// watch): deregistered by the destructor, before the close. Each holds a
  /// reference on the connection, so without that the close would leave it
  /// open (measured on libvirt 9.0: virConnectClose returned 1, and the
  /// callback's free function never ran).
  void keep_event_callback(int id) { event_callbacks_.push_back(id); }

private:
  connection(virConnectPtr c, std::string uri) : conn_(c), uri_(std::move(uri)) {}
  virConnectPtr conn_;
  std::string uri_;
  std::vector<int> event_callbacks_;
};

using connection_ptr = std::shared_ptr<connection>;

/// A connection opened by its first user, on that user's thread: a host
/// link's connections after the first are opened by the first call that runs
/// on each (docs/architecture.md, "One call at a time on a connection"), so
/// a link that never runs calls at once never opens them. Thread-safe.
class lazy_connection {
public:
  lazy_connection(std::string uri, keepalive ka) : uri_(std::move(uri)), ka_(ka) {}
  /// One that is open already (the link's first, opened by its dial).
  explicit lazy_connection(connection_ptr opened) : conn_(std::move(opened)) {}

  lazy_connection(const lazy_connection&) = delete;
  lazy_connection& operator=(const lazy_connection&) = delete;

  /// The connection, opened now if it is not yet (blocks: only from a
  /// detached actor). A failed open is tried again by the next user.
  caf::expected<connection*> get();

private:
  std::mutex mtx_;
  std::string uri_;
  keepalive ka_;
  connection_ptr conn_;
};

/// This process's libvirt library ("9.0.0").
std::string library_version();

/// Whether two threads may be inside calls on one remote connection at
/// once. Not before libvirt 10.4.0 (CVE-2024-4418; Debian 12 ships 9.0):
/// a caller woken by another thread's call (or by the keepalive closing the
/// connection) left a GLib watch pointing into its own stack frame behind
/// in the connection's event loop, and the next caller's loop ran it after
/// that frame was gone. Found by the chaos soak as a SIGSEGV right after a
/// keepalive timeout with calls queued behind a start (docs/architecture.md,
/// "One call at a time on a connection").
bool concurrent_calls_safe();

} // namespace egress::lv
