// The soak's fault schedule (soak/schedule.hpp): a seed replays the
// same faults, and the schedule keeps the promises the checker relies on.
#define BOOST_TEST_MODULE soak_schedule
#include <boost/test/unit_test.hpp>

#include <map>

#include "soak/schedule.hpp"

using namespace egress::soak;

namespace {

schedule_options opts(uint64_t seed, int hosts = 3) {
  schedule_options o;
  o.seed = seed;
  o.hosts = hosts;
  o.seconds = 600;
  o.quiet_s = 60;
  return o;
}

} // namespace

BOOST_AUTO_TEST_CASE(one_seed_plays_one_schedule_and_another_seed_another) {
  auto a = make_schedule(opts(42)), b = make_schedule(opts(42)), c = make_schedule(opts(43));
  BOOST_REQUIRE(!a.empty());
  BOOST_REQUIRE_EQUAL(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    BOOST_TEST(describe(a[i]) == describe(b[i]));
  bool differs = a.size() != c.size();
  for (size_t i = 0; !differs && i < a.size(); ++i)
    differs = describe(a[i]) != describe(c[i]);
  BOOST_TEST(differs);
}

BOOST_AUTO_TEST_CASE(every_kind_is_drawn_and_every_heal_comes_before_the_quiet_end) {
  auto o = opts(7);
  std::map<fault_kind, int> kinds;
  for (auto& f : make_schedule(o)) {
    ++kinds[f.kind];
    BOOST_TEST(f.at_s + f.hold_s <= o.seconds - o.quiet_s + 1e-9);
    BOOST_TEST(f.host >= 0);
    BOOST_TEST(f.host < o.hosts);
  }
  BOOST_TEST(kinds.size() == 8u);
}

BOOST_AUTO_TEST_CASE(a_healthy_host_is_always_left_and_a_host_holds_one_fault_at_a_time) {
  const int hosts = 3;
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    auto s = make_schedule(opts(seed, hosts));
    for (auto& f : s) { // at every start: who is held
      if (!holds_host(f.kind))
        continue;
      std::map<int, int> held;
      for (auto& g : s)
        if (holds_host(g.kind) && g.at_s <= f.at_s && f.at_s < g.at_s + g.hold_s)
          ++held[g.host];
      BOOST_TEST(held.size() <= size_t{hosts - 1}, "seed " << seed << ": " << describe(f));
      for (auto& [host, n] : held)
        BOOST_TEST(n == 1, "seed " << seed << ": host " << host << " held twice");
    }
  }
}

BOOST_AUTO_TEST_CASE(one_host_gets_no_host_fault) {
  for (auto& f : make_schedule(opts(3, 1)))
    BOOST_TEST(!holds_host(f.kind));
}

BOOST_AUTO_TEST_CASE(the_vm_bed_draws_image_faults_and_breaks_the_mirror_and_a_pool_once_at_a_time) {
  auto o = opts(11);
  o.images = true;
  std::map<fault_kind, int> kinds;
  double mirror_free_at = 0;
  std::map<int, double> pool_free_at;
  for (auto& f : make_schedule(o)) {
    ++kinds[f.kind];
    if (f.kind != fault_kind::break_mirror && f.kind != fault_kind::fill_pool)
      continue;
    auto& free_at = f.kind == fault_kind::break_mirror ? mirror_free_at : pool_free_at[f.host];
    BOOST_TEST(held(f.kind));
    BOOST_TEST(!holds_host(f.kind));
    BOOST_TEST(f.at_s >= free_at, describe(f));
    BOOST_TEST(f.at_s + f.hold_s <= o.seconds - o.quiet_s + 1e-9);
    free_at = f.at_s + f.hold_s;
  }
  BOOST_TEST(kinds.size() == 11u);
  o.images = false;
  for (auto& f : make_schedule(o))
    BOOST_TEST((f.kind != fault_kind::lose_image && f.kind != fault_kind::break_mirror
                && f.kind != fault_kind::fill_pool));
}
