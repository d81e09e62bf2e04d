#pragma once
// The proxy groups' side of the fleet, as a plain part: where each member
// runs, what each host's survey found there, which hosts are lost (down for
// longer than host-grace) and which of their members are placed again
// elsewhere, and which copies on a host are stale. It starts nothing, sends
// nothing and reads no clock; the fleet feeds it the config, link states,
// surveys and the rotation, and runs what it says (actors/fleet_groups.cpp).
// tests/unit/group_book.cpp.
//
// The rules, beyond placement's own (actors/parts/placement.hpp):
// - A member keeps the host it was given, or, after a start, the host whose
//   survey found it (the first of its group's hosts, in order, that has a
//   copy). A member no survey found is new.
// - New members are placed only once every host of the group has been
//   surveyed or is down: until then a copy may still turn up.
// - A host down for longer than host-grace is lost: its members are placed
//   on the group's other hosts, at most max-surge of a group at a time that
//   are not in the rotation yet. Nothing of a group is placed again, and no
//   new member placed, while more than half of its hosts are down: that is
//   what the engine sees when it is the one cut off, and moving every
//   member would make it worse.
// - A copy a survey found on a host, of a member that runs on another host
//   now, is stale: the fleet removes it (by its mark) while the host is up.

#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "actors/parts/placement.hpp"
#include "messages/config.hpp"

namespace egress {

/// What a host has that placement needs to know, read when its link comes up.
struct host_survey {
  /// Domains carrying this entry's mark, by name, and whether each runs.
  std::map<std::string, bool> marked;
  /// What libvirt reports free (virNodeGetFreeMemory); unknown when the
  /// driver cannot tell (the test driver).
  std::optional<uint64_t> free_memory_mib;
};

/// A member that does not run where it should, and why (status, ls).
struct waiting_member {
  std::string member;
  std::string reason;
};

class group_book {
public:
  using clock = std::chrono::steady_clock;

  /// The groups and hosts of a (new) config. Members of groups that are gone
  /// or past their count are forgotten; everything else is kept.
  void configure(const engine_config& cfg, clock::time_point now);

  /// A host's link changed state.
  void link_changed(const std::string& host, link_state state, clock::time_point now);

  void surveyed(const std::string& host, host_survey survey);

  /// Stale copies the fleet removed from `host`.
  void removed(const std::string& host, const std::vector<std::string>& names);

  /// A cordoned host gets no new member (drain-host); its members stay
  /// until each is handed over.
  void cordon(const std::string& host, bool on);

  bool cordoned(const std::string& host) const;

  /// Whether a group may place members on `host` (only those are surveyed:
  /// a fleet without groups makes no call it did not make before).
  bool listed(const std::string& host) const;

  /// Whether `host` has answered a survey since it was configured.
  bool surveyed(const std::string& host) const;

  /// Down longer than host-grace (or not a host of the config).
  bool is_lost(const std::string& host, clock::time_point now) const;

  /// Where `member` would go if it left its host now (a drain's
  /// replacement), or why nowhere; `in_flight` counts the replacements
  /// already under way on each host.
  std::pair<std::string, std::string>
  successor_host(const std::string& member,
                 const std::map<std::string, uint32_t>& in_flight) const;

  /// `member` runs on `host` now: its replacement took its name.
  void handed_over(const std::string& member, const std::string& host);

  /// Places what can be placed now; true when any member's host changed.
  /// `in_rotation` says whether a member is in the rotation (a member placed
  /// again counts against max-surge until it is).
  template <class InRotation>
  bool step(clock::time_point now, InRotation&& in_rotation) {
    for (auto i = replacing_.begin(); i != replacing_.end();)
      i = in_rotation(*i) ? replacing_.erase(i) : std::next(i);
    return place_now(now);
  }

  /// Whether step() may change something now (cheap; the fleet asks often).
  bool due(clock::time_point now) const;

  /// Placed members: member -> host.
  const std::map<std::string, std::string>& host_of() const {
    return host_of_;
  }

  /// Members not running where they should, with why.
  const std::vector<waiting_member>& waiting() const {
    return waiting_;
  }

  /// Copies to remove from each host that is up: members found there that
  /// run elsewhere now.
  std::map<std::string, std::vector<std::string>> stale() const;

  /// Whether every group on `host` has been placed, so that a collection
  /// may judge its marked domains (a member not placed yet is not garbage).
  bool settled(const std::string& host) const;

  /// Each group as status and metrics show it.
  std::vector<group_status> status() const;

  /// Members placed again off lost hosts, since the start.
  uint64_t replacements() const {
    return replacements_;
  }

  /// Whether `name` is a member of a configured group (count included).
  bool is_member(const std::string& name) const;

  /// The group a member belongs to (nullptr if none).
  const group_config* group_of(const std::string& member) const;

private:
  struct host_state {
    bool up = false;
    bool failed_once = false; // its link has been dead since it was configured
    clock::time_point since;  // of the last change of `up`
    bool loss_seen = false;   // step() has run since it became lost
    bool cordoned = false;
    std::optional<host_survey> survey;
  };

  bool place_now(clock::time_point now);
  bool lost(const host_state& h, clock::time_point now) const;
  uint32_t down_hosts(const group_config& g) const;
  std::string held(const group_config& g) const;
  bool ready(const group_config& g) const;
  void adopt_found(const group_config& g);
  std::vector<std::string> take_off_lost(const group_config& g, clock::time_point now);
  std::map<std::string, placement_host> room() const;

  std::vector<group_config> groups_;
  std::map<std::string, host_config> hosts_;
  std::map<std::string, uint32_t> hand_load_; // hand-declared proxies per host
  caf::timespan grace_{};
  std::map<std::string, host_state> state_;
  std::map<std::string, std::string> host_of_;
  std::set<std::string> replacing_;
  std::vector<waiting_member> waiting_;
  std::map<std::string, size_t> index_; // group name -> position in groups_
  uint64_t replacements_ = 0;
  bool dirty_ = true;
};

} // namespace egress
