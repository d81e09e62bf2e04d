#pragma once
// Where the members of proxy groups run: a pure function of the groups, the
// hosts (their room and state) and where members run now, with no actor in
// it (the first part of proxy groups; tests/unit/placement.cpp).
//
// The rules, in the order they decide:
// - A member is named <group>-<n>, n from 1 to the group's count; members
//   past the count are gone from the result.
// - A member keeps its host while that host is still one of its group's
//   (a cordoned or dead host too: moving a member is a drain's or a
//   re-placement's decision, never a side effect of another change). So a
//   change of a count by k adds or removes k members and moves nobody else.
// - A new member goes to a host of its group that is alive, not cordoned and
//   has room: fewer members of any group than its max-proxies, and the
//   member's memory within what the host can still give. Among those: the
//   fewest members of this group, then the fewest of this group in the
//   host's zone, then the fewest members in all, then the group's order.
//   Filling the least loaded first keeps a group's hosts within one member
//   of each other wherever room allows.
// - A member no host can take is listed unplaced with why, never dropped.

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace egress {

struct placement_group {
  std::string name;
  uint32_t count = 0;
  std::vector<std::string> hosts; // in the operator's order
  uint64_t memory_mib = 0;        // each member's
  /// Non-empty: no new member is placed now (those already placed keep
  /// their hosts); each one left out is listed unplaced with this reason.
  std::string frozen;
};

struct placement_host {
  uint32_t max_proxies = 0;     // 0: no limit of its own
  uint64_t free_memory_mib = 0; // what it can still give, reserve taken off
  bool alive = true;
  bool cordoned = false;
  std::string zone; // "": a zone of its own
};

struct unplaced_member {
  std::string member;
  std::string reason;
};

struct placement {
  std::map<std::string, std::string> host_of; // member -> host
  std::vector<unplaced_member> unplaced;
};

/// "<group>-<n>".
std::string member_name(const std::string& group, uint32_t n);

/// The placement of every group's members. `now` is where members run (the
/// previous placement, or what the hosts' marks say); `other_load` counts
/// proxies on each host that no group places (hand-declared ones), which
/// use room too. A host's `free_memory_mib` is what it can give to members
/// in all, those already running there included (the caller adds their
/// memory back to what libvirt reports free).
/// With `only`, members not in `now` are placed only if they are in it; the
/// others are left out of the result silently (a drain asks where one
/// member would go, around everyone already placed).
placement place(const std::vector<placement_group>& groups,
                const std::map<std::string, placement_host>& hosts,
                const std::map<std::string, std::string>& now,
                const std::map<std::string, uint32_t>& other_load = {},
                const std::set<std::string>* only = nullptr);

} // namespace egress
