#pragma once
// What kind of actor something is, in one word per kind, used everywhere a
// kind is named: the row `caf-shell ls` shows, the actor's own name
// ("link/hv1"), the fleet's key for when it spawned it, and the component
// of its log lines. One enum and one to_string, so that a link is never
// "host_link" in one place, "links" in another and "link" in a third.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace egress {

enum class actor_kind : uint8_t {
  fleet = 0,
  link = 1,     // one per host (actors/host_link)
  image = 2,    // one per image and host (actors/image)
  proxy = 3,    // one per declared proxy (actors/proxy)
  health = 4,   // the prober and the rotation (actors/health)
  gateway = 5,  // HAProxy's servers (actors/gateway)
  call = 6,     // a detached blocking call (actors/call)
  worker = 7,   // a host link's pooled call worker (actors/call_worker)
  node = 8,     // this engine's face to its peers and shells (actors/node)
  inspector = 9,
  metrics = 10, // the HTTP listener (actors/metrics_server)
  cluster = 11, // this node's lease and host claims in etcd (actors/cluster)
};

const char* to_string(actor_kind x);

/// The kind a word names: its to_string, or its plural ("links",
/// "proxies", and "proxys" as the shell's completion forms it), as an
/// operator types it. None for any other word.
std::optional<actor_kind> actor_kind_from(std::string_view word);

/// "<kind>/<name>": an actor's name, and the fleet's key for it.
std::string actor_name(actor_kind kind, std::string_view name);

} // namespace egress
