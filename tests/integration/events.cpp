// Event-driven supervision through the engine's SSH link to a real libvirtd
// (its test driver): libvirt's lifecycle events reach the proxies, a change
// made while the link was dead is caught by the bulk read after the redial,
// 200 domains at once lose no event and get no second create, and a fleet at
// rest neither polls per proxy nor creates threads (docs/spec.md 27); a host
// that cannot list leases leaves its proxies to read their own (28).
#define BOOST_TEST_MODULE events
#include <boost/test/unit_test.hpp>

#include <dlfcn.h>
#include <pthread.h>

#include <atomic>

#include "providers/libvirt/connection.hpp"
#include "providers/libvirt/domains.hpp"
#include "testbed/engine_fixture.hpp"
#include "testbed/ssh_host.hpp"
#include "testbed/testbed.hpp"

using namespace egress;
using namespace std::chrono_literals;

// Every thread this process creates is counted (libpthread's own
// pthread_create does the work): the at-rest test compares two counts.
namespace {
std::atomic<uint64_t> threads_created{0};
}

extern "C" int pthread_create(pthread_t* t, const pthread_attr_t* attr, void* (*fn)(void*),
                              void* arg) {
  using real_fn = int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
  static auto real = reinterpret_cast<real_fn>(dlsym(RTLD_NEXT, "pthread_create"));
  ++threads_created;
  return real(t, attr, fn, arg);
}

namespace {

struct fixture : test::engine_fixture {
  test::test_driver_daemons d;
  // Out of band: a connection of its own to the daemon, as an operator's
  // virsh would be. It also keeps the test driver's state.
  lv::connection_ptr witness = test::witness(d.lv.uri("test"));

  // No proxy polls once it runs: a minute between polls and between bulk
  // reads, so only an event (or the resync after a dial) can be what a
  // test sees acting.
  engine_config config(size_t n, const std::string& prefix) {
    auto cfg = test::test_config("events");
    cfg.poll_interval = 200ms;
    cfg.bulk_read_interval = 60s;
    cfg.redial_min = 1s;
    cfg.redial_max = 2s;
    cfg.hosts.push_back(test::ssh_host(d.ssh, d.lv));
    for (size_t i = 0; i < n; ++i)
      cfg.proxies.push_back(test::test_proxy(prefix + std::to_string(i), "hv1"));
    return cfg;
  }

  void destroy(const std::string& name) {
    auto err = lv::destroy_domain(*witness, name);
    BOOST_REQUIRE_MESSAGE(!err, render(err));
  }

  std::string state_of(const std::string& name) {
    auto r = lv::read_domain(*witness, name, {});
    if (!r)
      return render(r.error());
    return r->exists ? to_string(r->state) : "missing";
  }

  static const proxy_status* find(const fleet_status& st, const std::string& name) {
    for (auto& p : st.proxies)
      if (p.name == name)
        return &p;
    return nullptr;
  }

  static uint64_t polls(const fleet_status& st) {
    uint64_t n = 0;
    for (auto& p : st.proxies)
      n += p.polls;
    return n;
  }
};

} // namespace

BOOST_FIXTURE_TEST_SUITE(events_suite, fixture)

// A domain destroyed behind the engine's back leaves running (and so the
// rotation) as soon as its event arrives, not a poll later, and is started
// again: the same VM (uid), nothing created twice.
BOOST_AUTO_TEST_CASE(spec_27_an_out_of_band_destroy_leaves_running_at_once_and_is_repaired) {
  auto eng = engine::start(*sys, config(3, "ev-"));
  test::stop_on_exit guard{eng};
  BOOST_REQUIRE(eng);
  BOOST_REQUIRE(wait_status(*eng, [](auto& st) { return all_running(st, 3); }, 30s));
  auto uid = find(*eng->status(), "ev-1")->uid;
  auto t0 = std::chrono::steady_clock::now();
  destroy("ev-1");
  BOOST_REQUIRE(test::eventually(
    [&] { return find(*eng->status(), "ev-1")->phase != proxy_phase::running; }, 10s));
  auto left = std::chrono::steady_clock::now() - t0;
  BOOST_TEST_MESSAGE("left running after "
                     << std::chrono::duration_cast<std::chrono::microseconds>(left).count()
                     << " us");
  BOOST_CHECK(left < 200ms);
  BOOST_REQUIRE(wait_status(*eng, [](auto& st) { return all_running(st, 3); }, 10s));
  BOOST_CHECK_EQUAL(state_of("ev-1"), "running");
  auto after = *find(*eng->status(), "ev-1");
  BOOST_CHECK_EQUAL(after.uid, uid);
  BOOST_CHECK_EQUAL(after.replaced, 0u);
  caf::scoped_actor self{*sys};
  BOOST_CHECK_GE(test::status_of(self, test::link_of(self, *eng, "hv1")).events, 1u);
}

// Events die with their connection: what changes while the link is dead is
// seen by the bulk read right after the redial (the resync), with no poll
// and no event to tell of it.
BOOST_AUTO_TEST_CASE(spec_27_a_change_while_the_link_is_dead_is_caught_by_the_resync) {
  auto eng = engine::start(*sys, config(2, "rs-"));
  test::stop_on_exit guard{eng};
  BOOST_REQUIRE(eng);
  BOOST_REQUIRE(wait_status(*eng, [](auto& st) { return all_running(st, 2); }, 30s));
  caf::scoped_actor self{*sys};
  auto link = test::link_of(self, *eng, "hv1");
  auto before = test::status_of(self, link);
  self->request(link, 5s, atom::kill_v, std::string{"test"})
    .receive([](link_status&) {}, [](caf::error& err) { BOOST_FAIL(render(err)); });
  destroy("rs-0");
  BOOST_CHECK(find(*eng->status(), "rs-0")->phase == proxy_phase::running);
  // The link redials by itself (nobody calls it: every proxy is settled).
  BOOST_REQUIRE(test::eventually(
    [&] { return test::status_of(self, link).dials > before.dials; }, 10s));
  BOOST_REQUIRE(test::eventually([&] { return state_of("rs-0") == "running"; }, 10s));
  BOOST_REQUIRE(wait_status(*eng, [](auto& st) { return all_running(st, 2); }, 10s));
  BOOST_CHECK_GT(test::status_of(self, link).bulk_reads, before.bulk_reads);
}

// 200 domains created at once, then all destroyed at once: every event is
// delivered and acted on once. Each is started again (same uid), none is
// created a second time, and no proxy polled its way to it.
BOOST_AUTO_TEST_CASE(spec_27_two_hundred_domains_at_once_lose_no_event) {
  constexpr size_t n = 200;
  auto eng = engine::start(*sys, config(n, "many-"));
  test::stop_on_exit guard{eng};
  BOOST_REQUIRE(eng);
  BOOST_REQUIRE(wait_status(*eng, [](auto& st) { return all_running(st, n); }, 120s));
  std::map<std::string, std::string> uids;
  auto converged = *eng->status();
  for (auto& p : converged.proxies)
    uids[p.name] = p.uid;
  auto marked = lv::list_marked(*witness, "events");
  BOOST_REQUIRE(marked);
  BOOST_CHECK_EQUAL(marked->size(), n);
  for (auto& r : *marked)
    BOOST_CHECK_EQUAL(uids[r.name], r.mark.uid);
  for (auto& [name, uid] : uids)
    destroy(name);
  BOOST_REQUIRE(wait_status(*eng, [](auto& st) { return all_running(st, n); }, 120s));
  auto repaired = *eng->status();
  for (auto& p : repaired.proxies) {
    BOOST_CHECK_EQUAL(p.uid, uids[p.name]);
    BOOST_CHECK_EQUAL(p.replaced, 0u);
  }
  size_t running = 0;
  auto after = lv::list_marked(*witness, "events");
  BOOST_REQUIRE(after);
  for (auto& r : *after)
    running += r.state == domain_state::running;
  BOOST_CHECK_EQUAL(running, n);
}

// A new proxy's first look at its domain is its link's bulk read after it
// subscribed, one for all the proxies that start together: a missing domain
// is created without a read of its own (the create reads its address: the
// test driver makes a lease up at once); one that exists is read once, for
// its mark, and adopted.
BOOST_AUTO_TEST_CASE(spec_27_new_proxies_take_their_first_look_from_the_links_bulk_read) {
  constexpr size_t n = 20;
  auto cfg = config(n, "first-");
  cfg.poll_interval = 10s; // the first look's fallback: never due here
  for (int round = 0; round < 2; ++round) {
    std::string what = round == 0 ? "fresh host" : "restart: the domains exist";
    BOOST_TEST_CONTEXT(what) {
      auto eng = engine::start(*sys, cfg);
      test::stop_on_exit guard{eng};
      BOOST_REQUIRE(eng);
      BOOST_REQUIRE(wait_status(*eng, [](auto& st) { return all_running(st, n); }, 30s));
      caf::scoped_actor self{*sys};
      auto link = test::status_of(self, test::link_of(self, *eng, "hv1"));
      auto st = *eng->status();
      BOOST_TEST_MESSAGE("reads of their own: " << polls(st) << "; link bulk reads: "
                                                << link.bulk_reads);
      for (auto& p : st.proxies) {
        BOOST_CHECK_EQUAL(p.polls, round == 0 ? 0u : 1u);
        BOOST_CHECK_EQUAL(p.adopted, round == 1);
      }
      BOOST_CHECK_LE(link.bulk_reads, 4u);
      BOOST_REQUIRE(!eng->stop());
    }
  }
}

// At rest, a settled fleet does nothing per proxy: over 10 s no proxy reads
// its domain (with a 200 ms poll interval), the link does its bulk reads,
// and no thread is created (the reads run on the link's pool).
BOOST_AUTO_TEST_CASE(spec_27_a_fleet_at_rest_neither_polls_nor_creates_threads) {
  auto cfg = config(50, "rest-");
  cfg.bulk_read_interval = 1s;
  auto eng = engine::start(*sys, cfg);
  test::stop_on_exit guard{eng};
  BOOST_REQUIRE(eng);
  BOOST_REQUIRE(wait_status(*eng, [](auto& st) { return all_running(st, 50); }, 60s));
  std::this_thread::sleep_for(1s); // the last creates' echoes
  caf::scoped_actor self{*sys};
  auto link = test::link_of(self, *eng, "hv1");
  auto polls0 = polls(*eng->status());
  auto reads0 = test::status_of(self, link).bulk_reads;
  auto threads0 = threads_created.load();
  std::this_thread::sleep_for(10s);
  auto threads = threads_created.load() - threads0;
  auto reads = test::status_of(self, link).bulk_reads - reads0;
  BOOST_TEST_MESSAGE("at rest for 10 s: " << threads << " thread(s) created, " << reads
                                          << " bulk read(s), "
                                          << polls(*eng->status()) - polls0 << " poll(s)");
  BOOST_CHECK_EQUAL(polls(*eng->status()), polls0);
  BOOST_CHECK_GE(reads, 8u);
  BOOST_CHECK_LE(threads, reads);
}

// Invariant 28's fallback: the test driver has networks but cannot list
// their leases. The link learns that from its first lease list and
// stops asking; the proxies find their addresses by their own reads (here
// the create's: the test driver makes a lease up at once).
BOOST_AUTO_TEST_CASE(spec_28_a_host_without_lease_lists_leaves_proxies_to_poll) {
  auto eng = engine::start(*sys, config(3, "nl-"));
  test::stop_on_exit guard{eng};
  BOOST_REQUIRE(eng);
  BOOST_REQUIRE(wait_status(*eng, [](auto& st) { return all_running(st, 3); }, 30s));
  auto st = *eng->status();
  for (auto& p : st.proxies) {
    BOOST_CHECK_MESSAGE(!p.address.empty(), p.name << " has no address");
  }
  caf::scoped_actor self{*sys};
  auto handle = test::link_of(self, *eng, "hv1");
  link_status link;
  // The proxies' MACs reach the link as they settle; its lease list follows.
  BOOST_CHECK(test::eventually([&] {
    link = test::status_of(self, handle);
    return link.leases != lease_view::not_read;
  }, 10s));
  BOOST_CHECK_EQUAL(to_string(link.leases), std::string{"unsupported"});
  BOOST_CHECK_EQUAL(link.lease_reads, 0u);
  BOOST_CHECK_GE(link.bulk_reads, 2u);
}

BOOST_AUTO_TEST_SUITE_END()
