#pragma once
// The fleet the soak declares (soak/run.cpp): P proxies round-robin over the
// bed's hosts, the one change a reload fault makes to it (soak/nemesis.cpp),
// and the engine config that declares it on the bed.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "messages/config.hpp"
#include "soak/bed.hpp"

namespace egress::soak {

/// The mark's entry of every domain the soak's engine makes: how the
/// nemesis and the checker tell our domains (and cached images) apart.
inline const std::string entry = "soak";

/// How the bed's proxies are declared: image-less 64 MiB records on the test
/// driver, the appliance (128 MiB, its kernel and initrd from the mirror,
/// clients from its VM network) on the VM bed. A spec change toggles the
/// memory between `memory_mib` and `memory_mib` + 16.
struct proxy_maker {
  std::function<proxy_spec(const std::string& name, const std::string& host)> make;
  uint32_t memory_mib = 64;
};

proxy_maker maker_for(const std::vector<std::unique_ptr<soak_host>>& hosts);

/// The proxy group the soak declares with --members: its members are
/// named g-<n> and may run on every host.
inline const std::string group = "g";

/// The declared fleet and its changes (the reload fault).
class declared_fleet {
public:
  declared_fleet(int proxies, const std::vector<std::string>& hosts, proxy_maker maker,
                 int members = 0);

  const std::vector<proxy_spec>& proxies() const { return proxies_; }

  /// The group's count (0: no group).
  int members() const { return members_; }

  /// The group as the config declares it (count 0 without one).
  group_config group_of(const std::vector<std::string>& hosts) const;

  /// The names of the proxies declared on `host`.
  std::set<std::string> on(const std::string& host) const;

  /// One of the proxies on `host`, drawn by `pick`; none if it has none.
  std::optional<std::string> pick_on(const std::string& host, uint64_t pick) const;

  /// One change from `pick`: remove a proxy, add one on `host`, or change
  /// one's memory (a spec change: the engine replaces its VM). Returns what
  /// it did and the proxy whose rotation the change excuses ("" for none).
  std::pair<std::string, std::string> change(uint64_t pick, const std::string& host);

private:
  proxy_spec& add(const std::string& host);

  proxy_maker maker_;
  std::vector<proxy_spec> proxies_;
  int next_ = 0;
  int members_ = 0;
};

/// The engine's config for `fleet` on the bed's `hosts`, gc on; with the VM
/// bed's `mirror` (null on the test driver) its images and HTTP probes;
/// with members, the group over every host, host-grace 8 s (a lose_host
/// holds 15 to 25 s), max-surge 2.
engine_config config_of(const declared_fleet& fleet,
                        const std::vector<std::unique_ptr<soak_host>>& hosts,
                        const soak_mirror* mirror);

} // namespace egress::soak
