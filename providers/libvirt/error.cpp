#include "providers/libvirt/error.hpp"

#include <array>

#include <libvirt/virterror.h>

namespace egress::lv {

namespace {

constexpr int any = -1;

// One classification rule. The first rule that matches wins, so specific
// rules (a message, a code) come before broad ones (a whole error domain).
struct rule {
  int code;               // virErrorNumber, or `any`
  int domain;             // virErrorDomain, or `any`
  std::string_view needle; // substring of the message, or empty for any
  ec result;
};

// clang-format off
constexpr auto rules = std::to_array<rule>({
  // A failing call that left no error behind tells us nothing; retrying is the
  // safe reading (latching a proxy as failed on "no error" would be worse).
  {VIR_ERR_OK,                   any,             "", ec::libvirt_transient},

  // -- messages that reveal a dead connection whatever their domain ----------
  {VIR_ERR_INTERNAL_ERROR,       any,             "client socket is closed", ec::connection_broken},
  {VIR_ERR_INTERNAL_ERROR,       any,             "keepalive",               ec::libvirt_timeout},
  // A host key problem must never be retried (invariant 13), even though it
  // comes from a transport domain that is otherwise transient.
  {any,                          VIR_FROM_SSH,    "host key",                ec::access_denied},
  {any,                          VIR_FROM_LIBSSH, "host key",                ec::access_denied},
  // A full disk under a pool (ENOSPC, EDQUOT: system errors, code 38, from
  // the stream or the storage driver that wrote) frees up: permanent would
  // latch an image as failed until its retry_max, a proxy until a reload.
  // Only there: ENOSPC from a cgroup (an empty cpuset) or inotify is a
  // configuration fault and stays permanent.
  {VIR_ERR_SYSTEM_ERROR, VIR_FROM_STREAMS, "No space left on device", ec::storage_full},
  {VIR_ERR_SYSTEM_ERROR, VIR_FROM_STORAGE, "No space left on device", ec::storage_full},
  {VIR_ERR_SYSTEM_ERROR, VIR_FROM_STREAMS, "Disk quota exceeded",     ec::storage_full},
  {VIR_ERR_SYSTEM_ERROR, VIR_FROM_STORAGE, "Disk quota exceeded",     ec::storage_full},
  // A volume's file deleted behind libvirt (out of band, between the pool's
  // refresh and the stream's open): "Unable to open stream for '<path>': No
  // such file or directory". The volume is gone, not broken; the next fill
  // or create makes it again. Permanent latched an image as failed until
  // its retry_max (found by the chaos soak, seed 37).
  {VIR_ERR_SYSTEM_ERROR, VIR_FROM_STREAMS, "No such file or directory", ec::volume_gone},
  // QEMU killed while it started ("qemu unexpectedly closed the monitor:
  // ... terminating on signal 15 from pid N"): someone destroyed the domain
  // under its start, and starting it again works. Without this rule it was
  // an internal error, permanent, and latched the proxy as failed.
  {any,                          VIR_FROM_QEMU,   "terminating on signal",   ec::libvirt_transient},

  // -- no such object -----------------------------------------------------------
  {VIR_ERR_NO_DOMAIN,            any, "", ec::no_domain},
  {VIR_ERR_NO_STORAGE_POOL,      any, "", ec::no_pool},
  {VIR_ERR_NO_STORAGE_VOL,       any, "", ec::no_volume},
  {VIR_ERR_NO_NETWORK,           any, "", ec::no_network},
  {VIR_ERR_NO_DOMAIN_METADATA,   any, "", ec::libvirt_not_found},
  {VIR_ERR_NO_NODE_DEVICE,       any, "", ec::libvirt_not_found},
  {VIR_ERR_NO_INTERFACE,         any, "", ec::libvirt_not_found},
  {VIR_ERR_NO_NWFILTER,          any, "", ec::libvirt_not_found},
  {VIR_ERR_NO_SECRET,            any, "", ec::libvirt_not_found},
  {VIR_ERR_NO_DOMAIN_SNAPSHOT,   any, "", ec::libvirt_not_found},
  {VIR_ERR_NO_SERVER,            any, "", ec::libvirt_not_found},
  {VIR_ERR_NO_CLIENT,            any, "", ec::libvirt_not_found},
  {VIR_ERR_NO_NWFILTER_BINDING,  any, "", ec::libvirt_not_found},
  {VIR_ERR_NO_DOMAIN_CHECKPOINT, any, "", ec::libvirt_not_found},
  {VIR_ERR_NO_DOMAIN_BACKUP,     any, "", ec::libvirt_not_found},
  {VIR_ERR_NO_NETWORK_PORT,      any, "", ec::libvirt_not_found},
  {VIR_ERR_NO_HOSTNAME,          any, "", ec::libvirt_not_found},

  // -- transient by code --------------------------------------------------------
  {VIR_ERR_NO_CONNECT,           any, "", ec::connection_broken},
  {VIR_ERR_RPC,                  any, "", ec::connection_broken},
  {VIR_ERR_SSH,                  any, "", ec::connection_broken},
  {VIR_ERR_LIBSSH,               any, "", ec::connection_broken},
  {VIR_ERR_OPERATION_TIMEOUT,    any, "", ec::libvirt_timeout},
  {VIR_ERR_AGENT_UNRESPONSIVE,   any, "", ec::libvirt_timeout},
  {VIR_ERR_AGENT_UNSYNCED,       any, "", ec::libvirt_timeout},
  // Busy resources free up; latching a proxy as failed would need an operator.
  {VIR_ERR_RESOURCE_BUSY,        any, "", ec::libvirt_transient},

  // -- permanent by code --------------------------------------------------------
  {VIR_ERR_INVALID_ARG,               any, "", ec::invalid_argument},
  {VIR_ERR_INVALID_CONN,              any, "", ec::invalid_argument},
  {VIR_ERR_INVALID_DOMAIN,            any, "", ec::invalid_argument},
  {VIR_ERR_INVALID_MAC,               any, "", ec::invalid_argument},
  {VIR_ERR_INVALID_NETWORK,           any, "", ec::invalid_argument},
  {VIR_ERR_INVALID_STORAGE_POOL,      any, "", ec::invalid_argument},
  {VIR_ERR_INVALID_STORAGE_VOL,       any, "", ec::invalid_argument},
  {VIR_ERR_INVALID_NODE_DEVICE,       any, "", ec::invalid_argument},
  {VIR_ERR_INVALID_INTERFACE,         any, "", ec::invalid_argument},
  {VIR_ERR_INVALID_NWFILTER,          any, "", ec::invalid_argument},
  {VIR_ERR_INVALID_SECRET,            any, "", ec::invalid_argument},
  {VIR_ERR_INVALID_DOMAIN_SNAPSHOT,   any, "", ec::invalid_argument},
  {VIR_ERR_INVALID_STREAM,            any, "", ec::invalid_argument},
  {VIR_ERR_INVALID_NWFILTER_BINDING,  any, "", ec::invalid_argument},
  {VIR_ERR_INVALID_DOMAIN_CHECKPOINT, any, "", ec::invalid_argument},
  {VIR_ERR_INVALID_NETWORK_PORT,      any, "", ec::invalid_argument},
  {VIR_ERR_XML_ERROR,                 any, "", ec::xml_error},
  {VIR_ERR_XML_DETAIL,                any, "", ec::xml_error},
  {VIR_ERR_XML_INVALID_SCHEMA,        any, "", ec::xml_error},
  {VIR_ERR_ACCESS_DENIED,             any, "", ec::access_denied},
  {VIR_ERR_AUTH_FAILED,               any, "", ec::access_denied},
  {VIR_ERR_AUTH_CANCELLED,            any, "", ec::access_denied},
  // "authentication unavailable" means no usable auth method is configured
  // (e.g. no polkit agent): it needs a config change, not a retry.
  {VIR_ERR_AUTH_UNAVAILABLE,          any, "", ec::access_denied},
  {VIR_ERR_OPERATION_DENIED,          any, "", ec::access_denied},
  {VIR_ERR_NO_SUPPORT,                any, "", ec::unsupported},
  {VIR_ERR_ARGUMENT_UNSUPPORTED,      any, "", ec::unsupported},
  {VIR_ERR_OPERATION_UNSUPPORTED,     any, "", ec::unsupported},
  {VIR_ERR_CONFIG_UNSUPPORTED,        any, "", ec::unsupported},

  // -- transport domains: whatever is left is the wire failing ---------------
  // (after the code rules, so a bad URI argument stays permanent)
  {any, VIR_FROM_RPC,    "", ec::connection_broken},
  {any, VIR_FROM_REMOTE, "", ec::connection_broken},
  {any, VIR_FROM_SSH,    "", ec::connection_broken},
  {any, VIR_FROM_LIBSSH, "", ec::connection_broken},
});
// clang-format on

bool matches(const rule& r, int code, int domain, std::string_view message) {
  return (r.code == any || r.code == code) && (r.domain == any || r.domain == domain)
         && (r.needle.empty() || message.find(r.needle) != std::string_view::npos);
}

} // namespace

caf::error classify(int code, int domain, std::string_view message,
                    std::string_view what) {
  auto result = ec::libvirt_permanent;
  for (auto& r : rules) {
    if (matches(r, code, domain, message)) {
      result = r.result;
      break;
    }
  }
  std::string ctx{what};
  ctx += ": ";
  ctx += message.empty() ? std::string_view{"no libvirt error recorded"} : message;
  ctx += " (code=" + std::to_string(code) + " domain=" + std::to_string(domain) + ")";
  return make_error(result, std::move(ctx));
}

caf::error last_error(std::string_view what) {
  // Copy before anything else touches the thread-local slot.
  virError copy{};
  virCopyLastError(&copy);
  int code = copy.code;
  int domain = copy.domain;
  std::string message = copy.message != nullptr ? copy.message : "";
  virResetError(&copy);
  virResetLastError();
  return classify(code, domain, message, what);
}

} // namespace egress::lv
