// Which node owns which host (actors/parts/ownership.hpp), played as whole
// clusters: a model of etcd (a claim is a create-if-absent transaction, a
// release a delete that compares the mod revision, a lease's expiry deletes
// its keys) and one book per node, every change delivered to every live
// node as the watch would. No actor system, no clock: time is a variable.
#define BOOST_TEST_MODULE ownership
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <random>

#include "actors/parts/host_fence.hpp"
#include "actors/parts/ownership.hpp"

using namespace egress;
using namespace std::chrono_literals;

namespace {

using clock_type = ownership::clock;
const auto t0 = clock_type::time_point{} + 1h;

struct node_model {
  ownership book;
  int64_t lease = 0;
  bool alive = true;
  bool deciding = true; // false: a wedged node that holds its lease and does nothing
};

// The store and its nodes. Changes reach every live node at once.
struct cluster_model {
  std::map<std::string, node_model> nodes;
  std::map<std::string, owner_key> keys; // host -> owner
  std::vector<std::string> hosts;
  int64_t revision = 100;
  int64_t leases = 0;
  int failing_releases = 0; // the store refuses this many release requests
  clock_type::time_point now = t0;

  explicit cluster_model(size_t n_hosts) {
    for (size_t i = 0; i < n_hosts; ++i)
      hosts.push_back("hv" + std::to_string(i + 1));
  }

  std::map<std::string, std::chrono::milliseconds> guards() const {
    std::map<std::string, std::chrono::milliseconds> out;
    for (auto& h : hosts)
      out[h] = 5s;
    return out;
  }

  void join(const std::string& name) {
    ownership::settings s{name, 10s, 60s, 600s};
    auto [i, _] = nodes.insert_or_assign(name, node_model{ownership{s}});
    auto& n = i->second;
    n.book.configure(guards());
    n.lease = ++leases;
    n.book.set_lease(n.lease);
    std::map<std::string, ownership::node_key> live;
    for (auto& [m, x] : nodes)
      if (x.alive)
        live[m] = {{}, x.lease};
    n.book.reset(keys, live, now);
    for (auto& [m, x] : nodes)
      if (x.alive && m != name)
        x.book.node_put(name, {}, n.lease, now);
  }

  // kill -9: the lease expires, its keys go with it.
  void expire(const std::string& name) {
    auto& n = nodes.at(name);
    n.alive = false;
    for (auto& [m, x] : nodes)
      if (x.alive)
        x.book.node_gone(name);
    std::vector<std::string> gone;
    for (auto& [h, k] : keys)
      if (k.lease == n.lease)
        gone.push_back(h);
    for (auto& h : gone)
      free_key(h);
  }

  void free_key(const std::string& h) {
    keys.erase(h);
    ++revision;
    for (auto& [_, x] : nodes)
      if (x.alive)
        x.book.host_freed(h, now);
  }

  void step() {
    for (auto& [name, n] : nodes) {
      if (!n.alive || !n.deciding)
        continue;
      auto s = n.book.decide(now);
      for (auto& r : s.releases) {
        if (failing_releases > 0) {
          --failing_releases; // the request failed: the book sends it again
          continue;
        }
        if (keys.contains(r.host) && keys[r.host].mod_revision == r.mod_revision)
          free_key(r.host);
      }
      for (auto& h : s.claim) {
        if (keys.contains(h))
          continue; // the transaction's compare fails
        owner_key k{name, n.lease, ++revision, revision};
        keys[h] = k;
        for (auto& [_, x] : nodes)
          if (x.alive)
            x.book.host_owned(h, k, now);
      }
    }
  }

  void run(std::chrono::milliseconds d) {
    for (auto end = now + d; now < end; now += 500ms)
      step();
  }

  std::map<std::string, int> owned_counts() const {
    std::map<std::string, int> out;
    for (auto& [h, k] : keys)
      ++out[k.node];
    return out;
  }

  // No two nodes may change one host at once.
  void check_usable_disjoint() const {
    std::map<std::string, std::string> by;
    for (auto& [name, n] : nodes) {
      if (!n.alive)
        continue;
      for (auto& [h, _] : n.book.usable(now)) {
        auto [at, fresh] = by.emplace(h, name);
        BOOST_REQUIRE_MESSAGE(fresh, h << " usable by " << at->second << " and " << name);
      }
    }
  }
};

} // namespace

BOOST_AUTO_TEST_CASE(spec_40_hosts_spread_over_the_nodes_and_a_death_moves_only_its_hosts) {
  cluster_model c{60};
  for (auto n : {"a", "b", "c"})
    c.join(n);
  c.run(30s);
  BOOST_REQUIRE_EQUAL(c.keys.size(), 60u);
  for (auto& [node, n] : c.owned_counts())
    BOOST_CHECK_MESSAGE(n >= 10 && n <= 30, node << " owns " << n << " of 60");
  for (auto& [h, k] : c.keys)
    BOOST_CHECK_EQUAL(k.node, c.nodes.at("a").book.wanted(h));
  auto before = c.keys;
  c.expire("b");
  c.run(30s);
  BOOST_REQUIRE_EQUAL(c.keys.size(), 60u);
  for (auto& [h, k] : before)
    if (k.node != "b") {
      BOOST_CHECK_EQUAL(c.keys.at(h).node, k.node);
      BOOST_CHECK_EQUAL(c.keys.at(h).token, k.token); // never released and claimed again
    } else {
      BOOST_CHECK_NE(c.keys.at(h).node, "b");
      BOOST_CHECK_GT(c.keys.at(h).token, k.token); // tokens only grow
    }
}

BOOST_AUTO_TEST_CASE(spec_40_a_joining_node_takes_its_share_by_release_then_claim) {
  cluster_model c{40};
  c.join("a");
  c.join("b");
  c.run(20s);
  BOOST_REQUIRE_EQUAL(c.owned_counts()["a"] + c.owned_counts()["b"], 40);
  c.join("c");
  // Within a TTL of its arrival nobody hands anything over: a node that
  // flaps does not pull hosts back and forth.
  c.run(5s);
  BOOST_CHECK_EQUAL(c.owned_counts()["c"], 0);
  for (int i = 0; i < 60; ++i) {
    c.run(500ms);
    c.check_usable_disjoint();
  }
  BOOST_CHECK_GT(c.owned_counts()["c"], 5);
  for (auto& [h, k] : c.keys)
    BOOST_CHECK_EQUAL(k.node, c.nodes.at("c").book.wanted(h));
}

// A node that returns while the interim owner of its host waits out its
// guard gets the host back only after the interim owner has had it for a
// TTL: never two guards back to back with nothing managed in between.
BOOST_AUTO_TEST_CASE(spec_40_a_host_is_handed_over_only_after_a_ttl_in_its_owner_s_hands) {
  cluster_model c{12};
  c.join("a");
  c.join("b");
  c.run(20s);
  auto a_hosts = c.owned_counts()["a"];
  BOOST_REQUIRE_GT(a_hosts, 0);
  c.expire("a");
  c.run(1s); // b claims a's hosts; its guard (5 s) runs
  c.join("a");
  std::map<std::string, clock_type::time_point> usable_since, given_back;
  for (int i = 0; i < 80; ++i) {
    c.run(500ms);
    auto usable = c.nodes.at("b").book.usable(c.now);
    for (auto& [h, _] : usable)
      usable_since.try_emplace(h, c.now);
    for (auto& [h, since] : usable_since)
      if (!usable.contains(h))
        given_back.try_emplace(h, c.now);
  }
  // Handed back, each only after b could change it for a TTL (10 s).
  BOOST_CHECK_EQUAL(c.owned_counts()["a"], a_hosts);
  BOOST_CHECK(!given_back.empty());
  for (auto& [h, at] : given_back)
    BOOST_CHECK_MESSAGE(at - usable_since.at(h) >= 10s, h);
}

BOOST_AUTO_TEST_CASE(spec_38_a_won_host_is_changed_only_a_guard_after_the_claim) {
  cluster_model c{4};
  c.join("a");
  c.step();
  BOOST_REQUIRE_EQUAL(c.owned_counts()["a"], 4);
  auto& a = c.nodes.at("a").book;
  BOOST_CHECK(a.usable(c.now).empty());
  BOOST_CHECK(a.mine("hv1"));
  c.now += 4900ms;
  BOOST_CHECK(a.usable(c.now).empty());
  c.now += 200ms;
  BOOST_CHECK_EQUAL(a.usable(c.now).size(), 4u);
  BOOST_CHECK_EQUAL(a.usable(c.now).at("hv1"), c.keys.at("hv1").token);
  auto rows = a.hosts(c.now);
  BOOST_CHECK_EQUAL(rows.front().state, "mine");
}

BOOST_AUTO_TEST_CASE(spec_38_a_free_host_is_claimed_by_the_next_rank_when_the_wanted_node_does_not) {
  cluster_model c{12};
  c.join("a");
  c.join("b");
  c.nodes.at("a").deciding = false; // holds its lease, claims nothing
  c.step();
  auto counts = c.owned_counts();
  BOOST_CHECK_EQUAL(counts["a"], 0);
  BOOST_CHECK_LT(counts["b"], 12); // only those b is wanted for
  c.run(11s);                      // a whole TTL later: rank 1 may claim
  BOOST_CHECK_EQUAL(c.owned_counts()["b"], 12);
  c.run(30s); // and keeps them: a was there before b took them
  BOOST_CHECK_EQUAL(c.owned_counts()["b"], 12);
  // a comes back under a new lease: it gets its share by a hand-over.
  c.expire("a");
  c.join("a");
  c.run(30s);
  BOOST_CHECK_GT(c.owned_counts()["a"], 0);
  for (auto& [h, k] : c.keys)
    BOOST_CHECK_EQUAL(k.node, c.nodes.at("b").book.wanted(h));
}

BOOST_AUTO_TEST_CASE(spec_40_a_host_whose_link_stays_down_is_given_up_and_avoided) {
  cluster_model c{8};
  c.join("a");
  c.join("b");
  c.run(20s);
  auto host = c.keys.begin()->first;
  auto owner = c.keys.begin()->second.node;
  auto other = owner == "a" ? "b" : "a";
  auto& book = c.nodes.at(owner).book;
  book.link_changed(host, false, c.now);
  c.run(59s);
  BOOST_CHECK_EQUAL(c.keys.at(host).node, owner);
  c.run(2s);
  // Given up; it avoids the host, says so in its node key, and the other
  // node takes it.
  auto avoid = book.avoiding(c.now);
  BOOST_REQUIRE_EQUAL(avoid.size(), 1u);
  c.nodes.at(other).book.node_put(owner, avoid, c.nodes.at(owner).lease, c.now);
  c.run(2s);
  BOOST_REQUIRE(c.keys.contains(host));
  BOOST_CHECK_EQUAL(c.keys.at(host).node, other);
  c.run(30s);
  BOOST_CHECK_EQUAL(c.keys.at(host).node, other); // not pulled back
}

// A release whose request failed would leave the key on the node's lease
// while its book calls the host free: nobody would claim it.
BOOST_AUTO_TEST_CASE(spec_40_a_release_that_fails_is_made_again) {
  cluster_model c{20};
  c.join("a");
  c.run(10s);
  c.join("b");
  c.failing_releases = 3;
  c.run(30s);
  BOOST_CHECK_EQUAL(c.failing_releases, 0);
  BOOST_CHECK_GT(c.owned_counts()["b"], 0);
  for (auto& [h, k] : c.keys)
    BOOST_CHECK_EQUAL(k.node, c.nodes.at("b").book.wanted(h));
  // Never usable while its release is due.
  c.check_usable_disjoint();
}

// A link that was down before the host was won, or before the node was
// fenced, is not held against the new claim.
BOOST_AUTO_TEST_CASE(spec_40_a_down_time_before_the_claim_does_not_give_the_host_up) {
  cluster_model c{2};
  c.join("a");
  auto& a = c.nodes.at("a").book;
  a.link_changed("hv1", false, c.now - 30s); // down before anything is claimed
  c.run(2s);
  BOOST_REQUIRE(a.mine("hv1"));
  a.link_changed("hv1", false, c.now + 1s);
  c.run(50s); // the guard (5 s) + 45 s down: under unreachable-release (60 s)
  BOOST_CHECK(a.mine("hv1"));
  BOOST_CHECK(a.avoiding(c.now).empty());
}

BOOST_AUTO_TEST_CASE(spec_37_a_node_without_a_lease_claims_nothing_and_changes_nothing) {
  cluster_model c{3};
  c.join("a");
  c.run(10s);
  auto& a = c.nodes.at("a").book;
  BOOST_REQUIRE_EQUAL(a.usable(c.now).size(), 3u);
  a.set_lease(0);
  BOOST_CHECK(a.usable(c.now).empty());
  BOOST_CHECK(a.decide(c.now).claim.empty());
  BOOST_CHECK(!a.mine("hv1"));
}

BOOST_AUTO_TEST_CASE(spec_37_a_fence_is_open_only_until_its_deadline) {
  host_fence f;
  auto now = host_fence::clock::now();
  BOOST_CHECK(!f.open(now));
  f.open_until(now + 2s);
  BOOST_CHECK(f.open(now));
  BOOST_CHECK(f.open(now + 1999ms));
  BOOST_CHECK(!f.open(now + 2s));
  f.close();
  BOOST_CHECK(!f.open(now));
  fence_board b;
  BOOST_CHECK_EQUAL(b.of("hv1"), b.of("hv1"));
  b.of("hv1")->refused();
  b.of("hv2")->refused();
  BOOST_CHECK_EQUAL(b.refusals(), 2u);
}

BOOST_AUTO_TEST_CASE(spec_40_random_lives_never_let_two_nodes_change_one_host) {
  for (unsigned seed = 1; seed <= 200; ++seed) {
    std::mt19937 rng{seed};
    cluster_model c{10};
    std::vector<std::string> names{"a", "b", "c", "d"};
    for (auto& n : names)
      c.join(n);
    for (int round = 0; round < 40; ++round) {
      auto who = names[rng() % names.size()];
      switch (rng() % 4) {
        case 0:
          if (c.nodes.at(who).alive)
            c.expire(who);
          else
            c.join(who);
          break;
        case 1:
          if (c.nodes.at(who).alive)
            c.nodes.at(who).book.link_changed(c.hosts[rng() % c.hosts.size()], rng() % 2, c.now);
          break;
        default:
          break;
      }
      for (int i = 0; i < 6; ++i) {
        c.run(500ms);
        c.check_usable_disjoint();
      }
      int64_t last = 0;
      for (auto& [_, k] : c.keys)
        last = std::max(last, k.token);
      BOOST_REQUIRE_LE(last, c.revision);
    }
  }
}

BOOST_AUTO_TEST_CASE(rendezvous_scores_are_stable_and_spread) {
  // Stable across builds: a changed hash would move every host of a fleet
  // at an upgrade.
  BOOST_CHECK_EQUAL(rendezvous_score("a", "hv1"), rendezvous_score("a", "hv1"));
  BOOST_CHECK_NE(rendezvous_score("a", "hv1"), rendezvous_score("b", "hv1"));
  std::map<std::string, int> wins;
  for (int i = 0; i < 3000; ++i) {
    auto host = "hv" + std::to_string(i);
    std::string best;
    uint64_t top = 0;
    for (auto n : {"node-a", "node-b", "node-c"})
      if (auto s = rendezvous_score(n, host); s >= top) {
        top = s;
        best = n;
      }
    ++wins[best];
  }
  for (auto& [n, w] : wins)
    BOOST_CHECK_MESSAGE(w > 850 && w < 1150, n << " wins " << w << " of 3000");
}
