#pragma once
// The engine's error vocabulary. Every code belongs to exactly one kind:
// transient (retry later, the world may change), not_found (the object is
// not there), or permanent (retrying the same thing cannot help). Callers
// decide on the kind; the code says which specific thing went wrong, and the
// error's context carries the human-readable detail.

#include <cstdint>
#include <string>

#include <caf/error.hpp>
#include <caf/fwd.hpp>
#include <caf/sec.hpp>

namespace egress {

enum class error_kind : uint8_t { transient, not_found, permanent };

// Codes are grouped by kind so the kind is a function of the code alone:
//   1..63 transient, 64..127 not_found, 128..255 permanent.
enum class ec : uint8_t {
  none = 0,
  // -- transient --------------------------------------------------------------
  link_down = 1,          // the host link is dead (or was killed) under the call
  budget_exceeded = 2,    // the call ran past its budget; the link was killed
  connection_broken = 3,  // libvirt reported a broken or closed connection
  libvirt_timeout = 4,    // libvirt reported a timeout (keepalive, agent...)
  libvirt_transient = 5,  // any other libvirt failure wrapped as transient
  shutting_down = 6,      // the engine is stopping
  no_address_source = 7,  // every address source failed
  ssh_failed = 8,         // TCP/SSH transport failure (refused, reset, timeout, EOF)
  source_failed = 9,      // an image source failed: HTTP 5xx/408/429, refused, reset, cut short
  source_timeout = 10,    // an image source ran past its deadline or fell below its low-speed limit
  image_gone = 11,        // a cached image's data volume left the pool (deleted out of band):
                          // the create that found it missing waits for the image to be fetched again
  storage_full = 12,      // the host's storage is full (no space, over quota): freeing space
                          // is all a retry needs
  volume_gone = 13,       // a volume's file vanished under a stream (deleted out of band
                          // behind libvirt): the next attempt creates the volume again
  gateway_unreachable = 14, // HAProxy's runtime API is gone (no socket, refused, reset)
  gateway_garbage = 15,   // what came back is not an answer of HAProxy's runtime API (or
                          // is longer than any answer it gives)
  gateway_timeout = 16,   // HAProxy's runtime API took the connection but gave no whole
                          // answer before the deadline (a stopped or wedged HAProxy)
  store_unreachable = 17, // etcd did not answer (refused, reset, timeout, no quorum)
  store_garbage = 18,     // what etcd's JSON gateway sent is not an answer it gives
  fenced = 19,            // this node may not change this host now: its lease is not
                          // confirmed young enough, or the host is not its own
                          // (docs/architecture.md, "Node failover")
  // -- not found --------------------------------------------------------------
  no_domain = 64,
  no_pool = 65,
  no_volume = 66,
  no_network = 67,
  libvirt_not_found = 68,
  source_not_found = 69,  // an image source has no such object (HTTP 404/410, missing file)
  unknown_name = 70,      // no host or proxy of that name in this engine (an operator's
                          // command: another node may own it)
  // -- permanent --------------------------------------------------------------
  invalid_argument = 128,
  xml_error = 129,
  access_denied = 130,
  unsupported = 131,
  invalid_name = 132,
  config_invalid = 133,
  libvirt_permanent = 134,
  foreign_domain = 135,   // a domain with our name exists but carries no mark of ours
  host_key_rejected = 136, // host key unknown or mismatched in known_hosts
  auth_failed = 137,       // the server refused our user key
  source_rejected = 138,   // an image source answered what retrying cannot fix (4xx, TLS
                           // verification, redirect limit or protocol, bad range answer)
  length_mismatch = 139,   // an image's length differs from the configured or declared one
  digest_mismatch = 140,   // an image's sha256 differs from the configured one
  image_rejected = 141,    // an image's first bytes do not fit its declared format, or
                           // name another file of the host (providers/images/image_header.hpp)
  gateway_refused = 142,   // HAProxy refused a command (no such backend, a static
                           // load-balancing algorithm, a level below admin)
  superseded = 143,        // a domain's mark carries a newer owner's fencing token
  store_refused = 144,     // etcd refused a request (auth, a bad key, lease not found)
};

/// The taxonomy of an engine code.
error_kind kind_of(ec code);

/// The taxonomy of any error: engine codes by their kind; CAF's own
/// request_timeout counts as transient; everything else is permanent.
error_kind kind_of(const caf::error& err);

const char* to_string(ec code);
const char* to_string(error_kind kind);

/// Renders an error as "kind/code: context", e.g.
/// "transient/budget_exceeded: hv1: define_domain ran past its 30s budget".
std::string render(const caf::error& err);

/// Returns the context string of an engine error (empty for others).
std::string detail(const caf::error& err);

/// Creates an engine error with a human-readable context.
caf::error make_error(ec code, std::string context);

/// True if `err` is the engine error `code`. Safe on an empty error, whose
/// category() dereferences null in CAF 0.17.
bool is(const caf::error& err, ec code);

/// The same engine error with "<prefix>: " before its context (others as
/// they are): where it happened, added on the way up.
caf::error with_context(const caf::error& err, const std::string& prefix);

/// Wraps any error as transient, keeping its text. An explicit transient wrap
/// always wins over a classification derived from a libvirt code.
caf::error as_transient(const caf::error& err);

/// Registers the renderer with CAF so `to_string(error)` is readable too.
void add_error_renderer(caf::actor_system_config& cfg);

} // namespace egress

CAF_ERROR_CODE_ENUM(egress::ec, "egress")
