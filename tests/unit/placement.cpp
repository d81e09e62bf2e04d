// Placement of proxy groups (actors/parts/placement.hpp), a pure function:
// fixed cases for each rule, then seeded random shapes (thousands of cases)
// checked for the properties the rules promise.
#define BOOST_TEST_MODULE placement
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <random>
#include <set>

#include "actors/parts/placement.hpp"

using namespace egress;

namespace {

placement_host roomy(std::string zone = {}) {
  placement_host h;
  h.max_proxies = 0;
  h.free_memory_mib = uint64_t{1} << 40;
  h.zone = std::move(zone);
  return h;
}

std::map<std::string, uint32_t> per_host(const placement& p, const std::string& group) {
  std::map<std::string, uint32_t> out;
  for (auto& [m, h] : p.host_of)
    if (m.rfind(group + "-", 0) == 0)
      ++out[h];
  return out;
}

uint32_t spread(const std::map<std::string, uint32_t>& counts,
                const std::vector<std::string>& hosts) {
  uint32_t lo = UINT32_MAX, hi = 0;
  for (auto& h : hosts) {
    auto i = counts.find(h);
    auto n = i == counts.end() ? 0u : i->second;
    lo = std::min(lo, n);
    hi = std::max(hi, n);
  }
  return hi - lo;
}

} // namespace

BOOST_AUTO_TEST_CASE(members_are_named_from_one_and_spread_evenly) {
  std::vector<placement_group> gs{{"eu", 7, {"hv1", "hv2", "hv3"}, 512, {}}};
  std::map<std::string, placement_host> hs{{"hv1", roomy()}, {"hv2", roomy()}, {"hv3", roomy()}};
  auto p = place(gs, hs, {});
  BOOST_CHECK_EQUAL(p.host_of.size(), 7u);
  BOOST_CHECK(p.unplaced.empty());
  BOOST_CHECK(p.host_of.count("eu-1") == 1 && p.host_of.count("eu-7") == 1);
  BOOST_CHECK_LE(spread(per_host(p, "eu"), gs[0].hosts), 1u);
}

BOOST_AUTO_TEST_CASE(spec_32_a_change_of_count_moves_nobody_else) {
  std::vector<placement_group> gs{{"eu", 5, {"hv1", "hv2", "hv3"}, 512, {}}};
  std::map<std::string, placement_host> hs{{"hv1", roomy()}, {"hv2", roomy()}, {"hv3", roomy()}};
  auto before = place(gs, hs, {});
  gs[0].count = 8;
  auto more = place(gs, hs, before.host_of);
  for (auto& [m, h] : before.host_of)
    BOOST_CHECK_EQUAL(more.host_of.at(m), h);
  BOOST_CHECK_EQUAL(more.host_of.size(), 8u);
  gs[0].count = 2;
  auto fewer = place(gs, hs, more.host_of);
  BOOST_CHECK_EQUAL(fewer.host_of.size(), 2u);
  BOOST_CHECK_EQUAL(fewer.host_of.at("eu-1"), before.host_of.at("eu-1"));
  BOOST_CHECK_EQUAL(fewer.host_of.at("eu-2"), before.host_of.at("eu-2"));
}

BOOST_AUTO_TEST_CASE(a_full_cordoned_or_dead_host_gets_nobody_new_and_the_rest_say_why) {
  std::vector<placement_group> gs{{"eu", 4, {"hv1", "hv2", "hv3"}, 1024, {}}};
  std::map<std::string, placement_host> hs{{"hv1", roomy()}, {"hv2", roomy()}, {"hv3", roomy()}};
  hs["hv1"].max_proxies = 1;
  hs["hv2"].cordoned = true;
  hs["hv3"].free_memory_mib = 2048;
  auto p = place(gs, hs, {});
  BOOST_CHECK_EQUAL(p.host_of.size(), 3u); // hv1 one, hv3 two
  BOOST_CHECK_EQUAL(per_host(p, "eu")["hv1"], 1u);
  BOOST_CHECK_EQUAL(per_host(p, "eu")["hv3"], 2u);
  BOOST_REQUIRE_EQUAL(p.unplaced.size(), 1u);
  auto& why = p.unplaced[0].reason;
  BOOST_CHECK_MESSAGE(why.find("hv1: full (max-proxies 1)") != std::string::npos, why);
  BOOST_CHECK_MESSAGE(why.find("hv2: cordoned") != std::string::npos, why);
  BOOST_CHECK_MESSAGE(why.find("hv3: no memory for 1024 MiB (0 MiB left)") != std::string::npos,
                      why);
  // A member on a cordoned or dead host stays there (moving it is a drain's
  // or a re-placement's decision).
  hs["hv1"].alive = false;
  auto again = place(gs, hs, {{"eu-1", "hv1"}, {"eu-2", "hv2"}});
  BOOST_CHECK_EQUAL(again.host_of.at("eu-1"), "hv1");
  BOOST_CHECK_EQUAL(again.host_of.at("eu-2"), "hv2");
}

BOOST_AUTO_TEST_CASE(members_spread_across_zones_before_hosts_of_one_zone) {
  std::vector<placement_group> gs{{"eu", 2, {"a1", "a2", "b1"}, 1, {}}};
  std::map<std::string, placement_host> hs{
    {"a1", roomy("zone-a")}, {"a2", roomy("zone-a")}, {"b1", roomy("zone-b")}};
  auto p = place(gs, hs, {});
  std::set<std::string> zones;
  for (auto& [m, h] : p.host_of)
    zones.insert(hs[h].zone);
  BOOST_CHECK_EQUAL(zones.size(), 2u);
}

// Seeded random shapes: several groups over overlapping hosts of random
// room; placed fresh, then every count changed and placed again.
BOOST_AUTO_TEST_CASE(spec_32_random_shapes_keep_every_promise) {
  for (unsigned seed = 1; seed <= 3000; ++seed) {
    std::minstd_rand rng{seed};
    auto pick = [&](uint32_t n) { return static_cast<uint32_t>(rng() % n); };
    uint32_t nhosts = 1 + pick(8);
    std::map<std::string, placement_host> hs;
    std::vector<std::string> names;
    for (uint32_t i = 0; i < nhosts; ++i) {
      placement_host h;
      h.max_proxies = pick(3) == 0 ? 0 : 1 + pick(10);
      h.free_memory_mib = 512 * (1 + pick(20));
      h.cordoned = pick(6) == 0;
      h.alive = pick(8) != 0;
      h.zone = "z" + std::to_string(pick(3));
      names.push_back("hv" + std::to_string(i));
      hs[names.back()] = h;
    }
    std::vector<placement_group> gs;
    for (uint32_t g = 0, ng = 1 + pick(3); g < ng; ++g) {
      placement_group grp{"g" + std::to_string(g), pick(20), {}, 256 * (1 + pick(4)), {}};
      for (auto& n : names)
        if (pick(3) != 0)
          grp.hosts.push_back(n);
      gs.push_back(grp);
    }
    auto check = [&](const placement& p, const std::map<std::string, std::string>& before) {
      std::map<std::string, uint32_t> members;
      std::map<std::string, uint64_t> memory;
      for (auto& g : gs) {
        uint32_t placed = 0;
        for (uint32_t n = 1; n <= g.count; ++n) {
          auto m = member_name(g.name, n);
          auto at = p.host_of.find(m);
          bool listed = std::any_of(p.unplaced.begin(), p.unplaced.end(),
                                    [&](auto& u) { return u.member == m; });
          BOOST_REQUIRE_MESSAGE((at != p.host_of.end()) != listed, "seed " << seed << " " << m);
          if (at == p.host_of.end())
            continue;
          ++placed;
          ++members[at->second];
          memory[at->second] += g.memory_mib;
          auto was = before.find(m);
          if (was != before.end()
              && std::find(g.hosts.begin(), g.hosts.end(), was->second) != g.hosts.end())
            BOOST_REQUIRE_MESSAGE(at->second == was->second, "seed " << seed << " moved " << m);
          else if (was == before.end() || at->second != was->second)
            BOOST_REQUIRE_MESSAGE(hs[at->second].alive && !hs[at->second].cordoned,
                                  "seed " << seed << " new member on a host that may take none");
        }
        BOOST_REQUIRE_EQUAL(placed + std::count_if(p.unplaced.begin(), p.unplaced.end(),
                                                   [&](auto& u) {
                                                     return u.member.rfind(g.name + "-", 0) == 0;
                                                   }),
                            g.count);
      }
      if (before.empty())
        for (auto& [h, n] : members) {
          BOOST_REQUIRE_MESSAGE(hs[h].max_proxies == 0 || n <= hs[h].max_proxies,
                                "seed " << seed << " " << h << " over max-proxies");
          BOOST_REQUIRE_MESSAGE(memory[h] <= hs[h].free_memory_mib,
                                "seed " << seed << " " << h << " over memory");
        }
    };
    auto first = place(gs, hs, {});
    check(first, {});
    // With no limit and every host open, a lone group spreads within one.
    if (gs.size() == 1) {
      std::map<std::string, placement_host> open;
      for (auto& n : names)
        open[n] = roomy();
      auto even = place(gs, open, {});
      BOOST_REQUIRE_LE(spread(per_host(even, gs[0].name), gs[0].hosts), 1u);
    }
    for (auto& g : gs)
      g.count = pick(20);
    check(place(gs, hs, first.host_of), first.host_of);
  }
}
