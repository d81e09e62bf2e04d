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

namespace {

schedule_options cluster_opts(uint64_t seed, int nodes) {
  auto o = opts(seed);
  o.nodes = nodes;
  return o;
}

bool is_cluster_fault(fault_kind k) {
  return holds_node(k) || k == fault_kind::restart_etcd;
}

} // namespace

BOOST_AUTO_TEST_CASE(a_cluster_draws_the_node_faults_and_one_engine_none) {
  std::map<fault_kind, int> kinds;
  for (auto& f : make_schedule(cluster_opts(5, 3))) {
    ++kinds[f.kind];
    BOOST_TEST(held(f.kind) == (holds_host(f.kind) || is_cluster_fault(f.kind)));
    if (holds_node(f.kind) || f.kind == fault_kind::restart_engine)
      BOOST_TEST((f.node >= 0 && f.node < 3), describe(f));
    else
      BOOST_TEST(f.node == -1, describe(f));
  }
  BOOST_TEST(kinds.size() == 12u);
  for (auto k : {fault_kind::kill_node, fault_kind::stop_node, fault_kind::restart_etcd,
                 fault_kind::cut_node_from_etcd})
    BOOST_TEST(kinds[k] > 0, to_string(k));
  for (auto& f : make_schedule(opts(5))) {
    BOOST_TEST(!is_cluster_fault(f.kind), describe(f));
    BOOST_TEST(f.node == -1);
  }
}

BOOST_AUTO_TEST_CASE(a_node_holds_one_fault_at_a_time_and_one_node_always_runs) {
  for (int nodes = 2; nodes <= 5; ++nodes)
    for (uint64_t seed = 1; seed <= 50; ++seed) {
      auto s = make_schedule(cluster_opts(seed, nodes));
      for (auto& f : s) { // at every start: which nodes are held, and etcd
        std::map<int, int> held_nodes;
        int etcd = 0;
        for (auto& g : s) {
          if (g.at_s > f.at_s || f.at_s >= g.at_s + g.hold_s)
            continue;
          if (holds_node(g.kind))
            ++held_nodes[g.node];
          etcd += g.kind == fault_kind::restart_etcd;
        }
        BOOST_TEST(held_nodes.size() <= size_t(nodes - 1), "seed " << seed << ": " << describe(f));
        for (auto& [node, n] : held_nodes)
          BOOST_TEST(n == 1, "seed " << seed << ": node " << node << " held twice");
        BOOST_TEST(etcd <= 1, "seed " << seed << ": etcd restarted twice at once");
        if (f.kind == fault_kind::restart_engine) // never a node that is held
          BOOST_TEST(held_nodes.count(f.node) == 0, "seed " << seed << ": " << describe(f));
      }
    }
}

BOOST_AUTO_TEST_CASE(a_stop_holds_two_to_three_ttls_and_a_cut_five_to_ten_seconds) {
  auto o = cluster_opts(9, 4);
  o.lease_ttl_s = 3;
  const double last_heal = o.seconds - o.quiet_s;
  int stops = 0, cuts = 0;
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    o.seed = seed;
    for (auto& f : make_schedule(o)) {
      if (f.at_s + f.hold_s >= last_heal - 1e-9)
        continue; // cut short by the quiet end
      if (f.kind == fault_kind::stop_node) {
        ++stops;
        BOOST_TEST((f.hold_s >= 6 && f.hold_s < 9), describe(f));
      }
      if (f.kind == fault_kind::cut_node_from_etcd) {
        ++cuts;
        BOOST_TEST((f.hold_s >= 5 && f.hold_s < 10), describe(f));
      }
      BOOST_TEST(f.at_s + f.hold_s <= last_heal + 1e-9);
    }
  }
  BOOST_TEST(stops > 0);
  BOOST_TEST(cuts > 0);
}

BOOST_AUTO_TEST_CASE(a_node_fault_says_its_node) {
  fault f;
  f.at_s = 12.5;
  f.hold_s = 4;
  f.kind = fault_kind::kill_node;
  f.node = 2;
  BOOST_TEST(describe(f) == "   12.5s kill_node       node 2 for 4.0s");
  f.kind = fault_kind::restart_etcd;
  f.node = -1;
  BOOST_TEST(describe(f) == "   12.5s restart_etcd    for 4.0s");
}
