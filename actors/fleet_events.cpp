// What caf-shell's watch shows, derived from the status pushes the fleet
// keeps anyway: each function compares a view's previous entry with the new
// one and names the change for a person. Nothing here is sent unless a
// watcher is attached.
#include <cstdio>

#include "actors/parts/fleet_view.hpp"
#include "base/time_text.hpp"

namespace egress {

namespace {

engine_event event(std::string kind, std::string name, std::string what) {
  // The node is the fleet's to add (note_change).
  return {now_rfc3339(), std::move(kind), std::move(name), std::move(what), {}};
}

std::string mib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

} // namespace

std::vector<engine_event> events_between(const link_status* before, const link_status& now) {
  if (before && before->state == now.state && before->reason == now.reason)
    return {};
  std::string what = to_string(now.state);
  if (!now.reason.empty())
    what += ": " + now.reason;
  return {event(to_string(actor_kind::link), now.host, what)};
}

std::vector<engine_event> events_between(const image_status* before, const image_status& now) {
  auto name = now.image + "@" + now.host;
  if (now.state == image_state::fetching && now.bytes > 0) {
    // A progress line per push (about one a second while it moves).
    if (before && before->state == now.state && before->bytes == now.bytes)
      return {};
    std::string what = "fetching " + mib(now.bytes);
    if (now.total > 0)
      what += " of " + mib(now.total) + " ("
              + std::to_string(now.bytes * 100 / now.total) + "%)";
    if (now.rate_bps > 0)
      what += ", " + mib(now.rate_bps) + "/s";
    if (now.eta_s > 0)
      what += ", ETA " + std::to_string(now.eta_s) + " s";
    return {event(to_string(actor_kind::image), name, what)};
  }
  if (before && before->state == now.state && before->last_error == now.last_error)
    return {};
  std::string what = to_string(now.state);
  if (now.state == image_state::ready && !now.volume.empty())
    what += " as " + now.volume;
  if (now.state == image_state::failed && !now.last_error.empty())
    what += ": " + now.last_error;
  return {event(to_string(actor_kind::image), name, what)};
}

std::vector<engine_event> events_between(const proxy_status* before, const proxy_status& now) {
  if (before && before->phase == now.phase && before->address == now.address)
    return {};
  std::string what = before && before->phase != now.phase
                       ? std::string{to_string(before->phase)} + " -> " + to_string(now.phase)
                       : std::string{to_string(now.phase)};
  if (!now.address.empty())
    what += " at " + now.address;
  if (!now.last_error.empty())
    what += " (" + now.last_error + ")";
  return {event(to_string(actor_kind::proxy), now.name, what)};
}

engine_event rotation_event_of(const rotation_book::change& c, const std::string& why) {
  auto& m = c.member;
  std::string what = c.joined ? "joined" : "left";
  if (c.joined) {
    what += " at " + (m.address.find(':') != std::string::npos ? "[" + m.address + "]"
                                                                : m.address)
            + ":" + std::to_string(m.port);
    if (!m.tags.empty()) {
      what += ", tags";
      for (auto& t : m.tags)
        what += " " + t;
    }
  }
  what += ", generation " + std::to_string(c.generation);
  if (!why.empty())
    what += " (" + why + ")";
  return event("rotation", m.name, what);
}

std::vector<engine_event> events_between(const gateway_status* before, const gateway_status& now) {
  if (before && before->state == now.state && before->reason == now.reason)
    return {};
  std::string what = to_string(now.state);
  if (now.state == haproxy_state::in_sync) {
    uint32_t servers = 0;
    for (auto& b : now.backends)
      servers += b.servers;
    what += ": " + std::to_string(servers) + " server(s) in " + std::to_string(now.backends.size())
            + " backend(s), generation " + std::to_string(now.generation);
  }
  if (!now.reason.empty())
    what += ": " + now.reason;
  return {event(to_string(actor_kind::gateway), now.socket, what)};
}

} // namespace egress
