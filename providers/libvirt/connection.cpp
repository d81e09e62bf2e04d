#include "providers/libvirt/connection.hpp"

#include <mutex>

#include <libvirt/virterror.h>

#include "providers/libvirt/error.hpp"
#include "providers/libvirt/event_loop.hpp"

namespace egress::lv {

void domain_deleter::operator()(virDomainPtr p) const noexcept { virDomainFree(p); }

std::string uuid_of(virDomainPtr dom) {
  char buf[VIR_UUID_STRING_BUFLEN] = {};
  return virDomainGetUUIDString(dom, buf) == 0 ? std::string{buf} : std::string{};
}
void pool_deleter::operator()(virStoragePoolPtr p) const noexcept { virStoragePoolFree(p); }
void volume_deleter::operator()(virStorageVolPtr p) const noexcept { virStorageVolFree(p); }
void stream_deleter::operator()(virStreamPtr p) const noexcept { virStreamFree(p); }
void network_deleter::operator()(virNetworkPtr p) const noexcept { virNetworkFree(p); }

namespace {

void ignore_error(void*, virErrorPtr) {
  // Errors reach the engine through lv::last_error; libvirt's default
  // handler would also print every expected failure (a missing domain) to
  // stderr.
}

} // namespace

caf::expected<std::shared_ptr<connection>>
connection::open(const std::string& uri, lv::keepalive ka) {
  static std::once_flag quiet;
  std::call_once(quiet, [] { virSetErrorFunc(nullptr, ignore_error); });
  ensure_event_loop();
  auto c = virConnectOpen(uri.c_str());
  if (c == nullptr)
    return last_error("open " + uri);
  std::shared_ptr<connection> out{new connection(c, uri)};
  if (ka.interval_s > 0) {
    // The in-process test driver has no keepalive (it never blocks on I/O);
    // every remote URI does, and there it is what releases a caller whose
    // peer went silent.
    if (virConnectSetKeepAlive(c, ka.interval_s, ka.count) < 0) {
      auto err = last_error("keepalive on " + uri);
      if (err != ec::unsupported)
        return err;
    }
  }
  return out;
}

connection::~connection() {
  // Removed locally first, then (the last of its kind) told to the daemon:
  // on a killed transport that message fails at once, and the local part
  // still drops the callback's reference on the connection.
  for (auto id : event_callbacks_)
    if (virConnectDomainEventDeregisterAny(conn_, id) < 0)
      virResetLastError();
  virConnectClose(conn_);
}

namespace {

// libvirt's own version number (major * 1,000,000 + minor * 1,000 +
// release); 0 if it cannot say. Local: no connection, no round trip.
unsigned long library_number() {
  unsigned long v = 0;
  return virGetVersion(&v, nullptr, nullptr) == 0 ? v : 0;
}

} // namespace

std::string library_version() {
  auto v = library_number();
  if (v == 0)
    return "?";
  return std::to_string(v / 1000000) + "." + std::to_string(v / 1000 % 1000) + "."
         + std::to_string(v % 1000);
}

bool concurrent_calls_safe() {
  return library_number() >= 10004000;
}

caf::expected<connection*> lazy_connection::get() {
  std::lock_guard<std::mutex> guard{mtx_};
  if (!conn_) {
    auto c = connection::open(uri_, ka_);
    if (!c)
      return c.error();
    conn_ = std::move(*c);
  }
  return conn_.get();
}

bool connection::alive() const noexcept {
  return virConnectIsAlive(conn_) == 1;
}

} // namespace egress::lv
