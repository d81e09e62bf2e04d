#pragma once
// The rotation as its consumers see it (GET /rotation, the gateway, caf-shell
// watch): which proxies are in it, with where to reach them, and a
// generation that grows by one with every join and every leave. A plain
// class the fleet's view owns (actors/parts/fleet_view.hpp), tested without
// actors (tests/unit/fleet_view.cpp, tests/unit/haproxy.cpp).
//
// The health actor decides who is healthy; the book adds what the consumers
// need and the health actor does not know (a proxy's tags and port, from its
// spec) and keeps out a proxy the fleet is about to delete or replace
// (retiring: drained in the gateway first).

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "messages/actors.hpp"

namespace egress {

class rotation_book {
public:
  /// What a change did, for watchers.
  struct change {
    rotation_member member;
    bool joined = false;
    uint64_t generation = 0;
  };

  /// `m` is in the rotation (m.joined_at is set here when it joins). A join,
  /// or a member whose address, port, host or tags changed, is a change; a
  /// new latency alone is not (it shows in the next snapshot).
  std::optional<change> put(rotation_member m);

  /// `name` is not in the rotation (a change if it was).
  std::optional<change> remove(const std::string& name);

  bool contains(const std::string& name) const { return members_.contains(name); }
  /// The members by name, without a snapshot's copy.
  const std::map<std::string, rotation_member>& members() const { return members_; }
  size_t size() const { return members_.size(); }
  uint64_t generation() const { return generation_; }

  /// The rotation now, shared and immutable; the same object until the next
  /// put or remove.
  rotation_snapshot snapshot(const std::string& node) const;

private:
  std::map<std::string, rotation_member> members_;
  uint64_t generation_ = 0;
  mutable rotation_snapshot cached_;
};

/// The rotation as GET /rotation serves it: {"node", "generation", "size",
/// "proxies": [{"name", "host", "address", "port", "endpoint", "tags",
/// "joined_at", "probe_ms"}]} (docs/architecture.md, "The rotation,
/// published").
std::string rotation_json(const rotation_view& view);

} // namespace egress
