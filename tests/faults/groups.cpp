// Proxy groups over real partitions: three hosts, each a private libvirtd
// (test driver) behind an sshd inside a network namespace of its own;
// partition() drops every packet of one host's namespace. A host cut past
// host-grace has its members made on the others and in the rotation; when
// it heals, the copies it kept are removed; with two of three cut at once
// nothing moves (docs/spec.md 33, 34).
#define BOOST_TEST_MODULE groups
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <caf/scoped_actor.hpp>

#include "messages/error.hpp"
#include "providers/libvirt/connection.hpp"
#include "providers/libvirt/domains.hpp"
#include "testbed/engine_fixture.hpp"
#include "testbed/ssh_host.hpp"
#include "testbed/test_config.hpp"
#include "testbed/test_data.hpp"
#include "testbed/testbed.hpp"

using namespace egress;
using test::stop_on_exit;
using namespace std::chrono_literals;

namespace {

struct root_required {
  root_required() { testbed::require_root_or_skip(); }
};

// One host: its namespace, its daemon and the sshd in front of it.
struct host_bed {
  testbed::netns net;
  testbed::libvirtd lv{test::test_driver_daemons::lv_options()};
  testbed::sshd ssh{testbed::sshd_options::in(net)};

  host_bed() {
    lv.start();
    ssh.start();
  }
};

constexpr auto grace = 3s;

struct bed : test::engine_fixture {
  root_required root;
  std::vector<std::unique_ptr<host_bed>> hosts;

  bed() {
    for (int i = 0; i < 3; ++i)
      hosts.push_back(std::make_unique<host_bed>());
  }

  static std::string name_of(size_t i) {
    return "hv" + std::to_string(i + 1);
  }

  engine_config config(uint32_t count, uint32_t surge) {
    auto cfg = test::test_config("groups");
    cfg.redial_min = 100ms;
    cfg.redial_max = 400ms;
    cfg.host_grace = grace;
    group_config g;
    g.name = "eu";
    g.count = count;
    g.max_surge = surge;
    g.member.tags = {"eu"};
    for (size_t i = 0; i < hosts.size(); ++i) {
      cfg.hosts.push_back(test::ssh_host(hosts[i]->ssh, hosts[i]->lv, name_of(i)));
      g.hosts.push_back(name_of(i));
    }
    cfg.groups.push_back(g);
    BOOST_REQUIRE_MESSAGE(!validate(cfg), render(validate(cfg)));
    return cfg;
  }

  // The members' domains on host i, read from its daemon directly.
  std::set<std::string> domains_on(size_t i) {
    std::set<std::string> out;
    auto c = lv::connection::open(hosts[i]->lv.uri("test"));
    BOOST_REQUIRE_MESSAGE(c, (c ? std::string{} : render(c.error())));
    auto marked = lv::list_marked(**c, "groups");
    BOOST_REQUIRE_MESSAGE(marked, (marked ? std::string{} : render(marked.error())));
    for (auto& d : *marked)
      out.insert(d.name);
    return out;
  }

  static std::map<std::string, std::string> running_where(const fleet_status& st) {
    std::map<std::string, std::string> out;
    for (auto& p : st.proxies)
      if (p.phase == proxy_phase::running)
        out[p.name] = p.host;
    return out;
  }

  static bool all_in_rotation(const fleet_status& st, size_t n) {
    return st.rotation.size() == n && running_where(st).size() == n;
  }
};

// Samples the rotation every 100 ms until stopped: each name at most once
// in every sample, and the fewest members seen.
struct rotation_sampler {
  engine& eng;
  std::atomic<bool> stop{false};
  std::atomic<size_t> fewest{SIZE_MAX};
  std::atomic<size_t> twice{0};
  std::thread worker;

  explicit rotation_sampler(engine& e) : eng(e) {
    worker = std::thread{[this] {
      while (!stop) {
        if (auto st = eng.status()) {
          std::set<std::string> names;
          for (auto& m : st->rotation)
            if (!names.insert(m).second)
              ++twice;
          fewest = std::min<size_t>(fewest, names.size());
        }
        std::this_thread::sleep_for(100ms);
      }
    }};
  }
  ~rotation_sampler() {
    stop = true;
    worker.join();
  }
};

} // namespace

BOOST_FIXTURE_TEST_SUITE(groups_suite, bed)

BOOST_AUTO_TEST_CASE(spec_33_a_host_cut_past_host_grace_has_its_members_made_elsewhere) {
  auto eng = engine::start(*sys, config(6, 2));
  BOOST_REQUIRE(eng);
  stop_on_exit guard{eng};
  BOOST_REQUIRE(wait_status(*eng, [](auto& st) { return all_in_rotation(st, 6); }, 60s));
  auto before = running_where(*eng->status());
  std::vector<std::string> on_hv1;
  for (auto& [m, h] : before)
    if (h == "hv1")
      on_hv1.push_back(m);
  BOOST_REQUIRE_EQUAL(on_hv1.size(), 2u); // spread: two on each host
  BOOST_REQUIRE_EQUAL(domains_on(0).size(), 2u);
  {
    rotation_sampler sampler{*eng};
    hosts[0]->net.partition();
    auto cut = std::chrono::steady_clock::now();
    // Not before host-grace: the link dies within the liveness bound (~4 s),
    // and then the grace runs.
    std::this_thread::sleep_for(grace);
    BOOST_CHECK_EQUAL(eng->status()->replacements, 0u);
    bool back = wait_status(*eng, [&](auto& st) {
      auto now = running_where(st);
      for (auto& m : on_hv1)
        if (!now.contains(m) || now[m] == "hv1")
          return false;
      return st.rotation.size() == 6;
    }, 60s);
    auto st = eng->status();
    for (auto& g : st->groups)
      for (auto& w : g.waiting)
        BOOST_TEST_MESSAGE("waiting " << w);
    BOOST_REQUIRE(back);
    BOOST_TEST_MESSAGE("members back in the rotation elsewhere "
                       << test::ms_of(std::chrono::steady_clock::now() - cut)
                       << " ms after the cut");
    BOOST_CHECK_EQUAL(st->replacements, 2u);
    // The others never moved.
    for (auto& [m, h] : before)
      if (h != "hv1")
        BOOST_CHECK_EQUAL(running_where(*st)[m], h);
    hosts[0]->net.heal();
    // Back: the copies it kept are stale and go.
    bool cleaned = false;
    for (int i = 0; i < 300 && !cleaned; ++i) {
      cleaned = domains_on(0).empty();
      std::this_thread::sleep_for(100ms);
    }
    BOOST_CHECK_MESSAGE(cleaned, "stale copies left on hv1");
    BOOST_CHECK_EQUAL(sampler.twice.load(), 0u);
  }
  // The members stay where they went.
  auto st = eng->status();
  for (auto& m : on_hv1)
    BOOST_CHECK(running_where(*st)[m] != "hv1");
  BOOST_CHECK_EQUAL(st->rotation.size(), 6u);
}

BOOST_AUTO_TEST_CASE(spec_33_with_two_of_three_hosts_cut_nothing_moves) {
  auto eng = engine::start(*sys, config(6, 6));
  BOOST_REQUIRE(eng);
  stop_on_exit guard{eng};
  BOOST_REQUIRE(wait_status(*eng, [](auto& st) { return all_in_rotation(st, 6); }, 60s));
  auto before = running_where(*eng->status());
  hosts[0]->net.partition();
  hosts[1]->net.partition();
  // The liveness bound, host-grace and more.
  std::this_thread::sleep_for(grace + 10s);
  auto st = eng->status();
  BOOST_REQUIRE(st);
  BOOST_CHECK_EQUAL(st->replacements, 0u);
  BOOST_REQUIRE_EQUAL(st->groups.size(), 1u);
  BOOST_CHECK_MESSAGE(st->groups[0].held.find("2 of 3 hosts") != std::string::npos,
                      st->groups[0].held);
  for (auto& p : st->proxies)
    BOOST_CHECK_EQUAL(p.host, before[p.name]);
  BOOST_CHECK_EQUAL(domains_on(2).size(), 2u); // hv3 got nobody new
  hosts[0]->net.heal();
  hosts[1]->net.heal();
  BOOST_CHECK(wait_status(*eng, [](auto& st) { return all_in_rotation(st, 6); }, 60s));
  BOOST_CHECK_EQUAL(eng->status()->replacements, 0u);
}

BOOST_AUTO_TEST_CASE(spec_32_a_restarted_engine_adopts_its_members_where_they_run) {
  // The test driver drops its domains when its last connection closes: one
  // held open per daemon keeps them across the engine's restart, as a real
  // host keeps its VMs.
  std::vector<lv::connection_ptr> held;
  for (auto& h : hosts) {
    auto c = lv::connection::open(h->lv.uri("test"));
    BOOST_REQUIRE(c);
    held.push_back(std::move(*c));
  }
  std::map<std::string, std::string> first;
  {
    auto eng = engine::start(*sys, config(5, 1));
    BOOST_REQUIRE(eng);
    stop_on_exit guard{eng};
    BOOST_REQUIRE(wait_status(*eng, [](auto& st) { return all_in_rotation(st, 5); }, 60s));
    first = running_where(*eng->status());
  }
  // The same count: every member is found where it ran, and adopted there
  // (this once started none of them: adoption alone did not count as a
  // change).
  auto eng = engine::start(*sys, config(5, 1));
  BOOST_REQUIRE(eng);
  stop_on_exit guard{eng};
  BOOST_REQUIRE(wait_status(*eng, [](auto& st) { return all_in_rotation(st, 5); }, 60s));
  auto now = running_where(*eng->status());
  for (auto& [m, h] : first)
    BOOST_CHECK_EQUAL(now[m], h);
  auto st = eng->status();
  BOOST_REQUIRE(st);
  for (auto& p : st->proxies)
    BOOST_CHECK_MESSAGE(p.adopted, p.name << " was not adopted");
  // The count grows by one: the five keep their hosts, one is new.
  BOOST_REQUIRE(eng->reload(config(6, 1)));
  BOOST_REQUIRE(wait_status(*eng, [](auto& st) { return all_in_rotation(st, 6); }, 60s));
  now = running_where(*eng->status());
  for (auto& [m, h] : first)
    BOOST_CHECK_EQUAL(now[m], h);
  size_t total = 0;
  for (size_t i = 0; i < hosts.size(); ++i)
    total += domains_on(i).size();
  BOOST_CHECK_EQUAL(total, 6u);
}

BOOST_AUTO_TEST_CASE(spec_35_drain_host_keeps_the_group_in_the_rotation_at_its_count) {
  auto eng = engine::start(*sys, config(6, 2));
  BOOST_REQUIRE(eng);
  stop_on_exit guard{eng};
  BOOST_REQUIRE(wait_status(*eng, [](auto& st) { return all_in_rotation(st, 6); }, 60s));
  auto before = running_where(*eng->status());
  caf::scoped_actor self{*sys};
  auto cordon = [&](const std::string& host, bool on) {
    host_drain out;
    self->request(eng->fleet(), 5s, atom::cordon_v, host, on)
      .receive([&](host_drain& d) { out = d; },
               [&](caf::error& err) { BOOST_FAIL(render(err)); });
    return out;
  };
  // Every join and leave from now on, with the rotation's size after it:
  // the exact trace beside the 100 ms samples.
  auto events = std::make_shared<test::rotation_log>();
  eng->subscribe(sys->spawn(test::rotation_recorder, events));
  auto start = std::chrono::steady_clock::now();
  {
    rotation_sampler sampler{*eng};
    auto d = cordon("hv1", true);
    BOOST_CHECK(d.cordoned && d.draining);
    BOOST_CHECK_EQUAL(d.members + d.moved, 2u);
    bool drained = wait_status(*eng, [](auto& st) {
      if (st.drains.size() != 1 || st.drains[0].members != 0 || st.drains[0].moving != 0)
        return false;
      for (auto& [m, h] : running_where(st))
        if (h == "hv1")
          return false;
      return all_in_rotation(st, 6);
    }, 60s);
    auto st = eng->status();
    for (auto& x : st->drains)
      BOOST_TEST_MESSAGE("drain " << x.host << ": " << x.members << " left, " << x.moving
                                  << " moving, " << x.moved << " moved " << x.waiting);
    BOOST_REQUIRE(drained);
    BOOST_TEST_MESSAGE("hv1 drained in "
                       << test::ms_of(std::chrono::steady_clock::now() - start) << " ms");
    BOOST_CHECK_EQUAL(st->drains[0].moved, 2u);
    // The originals are gone from hv1, and nobody else moved.
    bool gone = false;
    for (int i = 0; i < 100 && !gone; ++i) {
      gone = domains_on(0).empty();
      std::this_thread::sleep_for(100ms);
    }
    BOOST_CHECK(gone);
    for (auto& [m, h] : before)
      if (h != "hv1")
        BOOST_CHECK_EQUAL(running_where(*st)[m], h);
    // Sampled every 100 ms from before the cordon: never below the count.
    BOOST_CHECK_EQUAL(sampler.fewest.load(), 6u);
    BOOST_CHECK_EQUAL(sampler.twice.load(), 0u);
    for (auto& e : events->snapshot())
      BOOST_CHECK_MESSAGE(e.joined, e.proxy << " left the rotation: " << e.reason);
    BOOST_CHECK_EQUAL(st->replacements, 0u); // a drain is no loss
  }
  // Cordoned: a new member goes elsewhere.
  auto cfg = config(7, 2);
  BOOST_REQUIRE(eng->reload(cfg));
  BOOST_REQUIRE(wait_status(*eng, [](auto& st) { return all_in_rotation(st, 7); }, 60s));
  BOOST_CHECK(running_where(*eng->status())["eu-7"] != "hv1");
  // Lifted: the next new member goes to the emptiest host, hv1.
  BOOST_CHECK(!cordon("hv1", false).cordoned);
  BOOST_REQUIRE(eng->reload(config(8, 2)));
  BOOST_REQUIRE(wait_status(*eng, [](auto& st) { return all_in_rotation(st, 8); }, 60s));
  BOOST_CHECK_EQUAL(running_where(*eng->status())["eu-8"], "hv1");
  BOOST_CHECK(eng->status()->drains.empty());
}

BOOST_AUTO_TEST_SUITE_END()
