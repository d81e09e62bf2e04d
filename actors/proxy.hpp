#pragma once
// One actor per declared proxy: reconciles one VM on one host.
//
// State is read back, not remembered (invariant 16): every read-back reads
// the domain from libvirt; a domain carrying our mark is adopted, one without
// it is never touched. A transient error is recorded but never latches the
// proxy as failed (invariant 10); only a permanent error does.
//
// It reads its domain back when it acts, when its link tells it the domain
// changed (a libvirt event or the link's bulk read, docs/spec.md 27), and
// on its poll timer only while it is not settled (not yet running with an
// address, or inside its IP grace): a fleet at rest does not poll. Where
// its first address source is the lease and its host lists leases, even
// that wait is the link's: one lease list per network for every proxy of
// the host, pushed in its briefs (docs/spec.md 28).

#include <map>
#include <string>
#include <vector>

#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>

#include "messages/actors.hpp"

namespace egress {

struct proxy_options {
  proxy_spec spec;
  std::string entry;
  std::string domain_type;
  std::vector<std::string> address_sources;
  caf::timespan poll_interval = std::chrono::seconds(2);
  uint32_t address_grace = 3; // polls (docs/spec.md 11)
  caf::timespan call_timeout = std::chrono::seconds(61); // wait for the link
  host_link_actor link;
  image_actor image;      // its base image's actor (null: no image)
  std::string pool;       // the host's pool: overlay and seed volumes
  std::string console_log_dir; // on the host; "" = no serial console log
  std::string image_format = "qcow2"; // the base image's format (qcow2 or raw)
  std::string image_sha256;           // its digest: part of the spec hash
  // Kernel boot: the kernel's and the initrd's image actors (null: none),
  // and their digests (part of the spec hash).
  image_actor kernel;
  image_actor initrd;
  std::string kernel_sha256;
  std::string initrd_sha256;
  caf::timespan image_timeout = std::chrono::minutes(31); // how long it waits
  // In a cluster: this node and the fencing token of its claim on the host,
  // written into every mark it makes or reads (an older one is rewritten);
  // a domain whose mark carries a newer token is refused. 0: no cluster.
  std::string owner;
  int64_t token = 0;
  status_sink_actor sink; // receives proxy_status on every change (optional)
};

/// What a proxy is doing: one step at a time, each one request to its link
/// (or its image actors). `status.phase` is what it shows; this is what it
/// has in flight.
enum class proxy_activity : uint8_t {
  idle,
  // Just spawned: waits for its link's first bulk read begun after it
  // subscribed, which says whether its domain exists (docs/spec.md 27); its
  // poll timer reads the domain itself if that read is late.
  first_look,
  reading,         // a read-back of its domain
  awaiting_images, // ensures of its images are outstanding
  creating,        // overlay, seed, define, start
  starting,        // start of its stopped domain
  replacing,       // deleting a VM made from an older spec, before a create
  erasing,         // deleting it for good: outranks everything else
};

/// The proxy's machine in one place: from each activity, the activities a
/// transition may lead to. A step begins between steps (idle, first_look)
/// and its answer ends it (back to idle); an erase may begin while images
/// are awaited, and a failed one goes back to what the proxy did.
/// transition() in actors/proxy.cpp takes no other move.
///
///   idle             -> idle, first_look (at spawn), reading, creating,
///                       starting, awaiting_images, replacing, erasing
///   first_look       -> idle (the link's first bulk read), reading, erasing
///   reading, creating, starting, replacing -> idle
///   awaiting_images  -> idle, erasing
///   erasing          -> erasing (deleted), idle or awaiting_images (failed)
bool proxy_may_move(proxy_activity from, proxy_activity to);

/// What waits for the step in flight to answer, weakest first: a read-back
/// (a change was reported meanwhile), a read-back an operator asked for
/// (`reconcile`: its result is pushed even if nothing changed), an erase
/// (deleting alongside a create could leave a VM no proxy owns). A stronger
/// one takes the place of a weaker one: an erase makes a read pointless.
enum class proxy_pending : uint8_t { none, read, reconcile, erase };

struct proxy_state {
  std::string name = to_string(actor_kind::proxy);
  proxy_options opts;
  proxy_status status;
  proxy_status pushed; // what the sink last received
  uint64_t pushes = 0;  // how many statuses the sink received
  std::string spec_hash;
  proxy_activity activity = proxy_activity::idle; // changed by transition() only
  proxy_pending pending = proxy_pending::none;
  bool poll_armed = false;    // one poll timer at a time
  bool created_by_us = false;
  bool create_failed = false; // permanent create error: do not retry blindly
  std::string domain_uuid;    // of the domain its last read-back found (ours, marked)
  bool domain_runs = false;   // as its last read-back, event or brief says
  // Its domain's MACs (from its spec at create, or read once): the link
  // finds its leases by them (docs/spec.md 28).
  std::vector<std::string> macs;
  // What the link's briefs say of the host's leases: `read` means the link
  // brings this proxy its leased address, and the proxy does not poll for it.
  lease_view link_leases = lease_view::not_read;
  bool macs_told = false;    // the link has its current MACs
  bool waiting_told = false; // what the link was last told of its wait
  // When its last read-back (or create, or start) began: older briefs are
  // stale (steady clock, as domain_brief::taken).
  caf::timespan last_read_at{0};
  uint32_t ensures_left = 0;
  // The images it needs, verified in the pool, by role: disk, kernel, initrd.
  std::map<std::string, image_ready> ready;
  std::vector<caf::typed_response_promise<proxy_status>> erase_waiters;
};

using proxy_pointer = proxy_actor::stateful_pointer<proxy_state>;

proxy_actor::behavior_type make_proxy(proxy_pointer self, proxy_options opts);

/// sha256 (hex) over everything in the spec that shapes the VM, and the
/// digests of the images it boots from. A change means the VM is replaced.
std::string spec_hash(const proxy_spec& spec, const std::string& domain_type,
                      const std::string& image_sha256 = {},
                      const std::string& kernel_sha256 = {},
                      const std::string& initrd_sha256 = {});

} // namespace egress
