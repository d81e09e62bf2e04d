// How a host link dies, on a real (threaded) actor system: the news and the
// callers' release come before the kill (2), one stuck host never holds up
// another (5), and shutdown is bounded while calls are blocked (15).
#define BOOST_TEST_MODULE host_link_death
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <mutex>

#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/host_link.hpp"
#include "messages/error.hpp"
#include "providers/libvirt/connection.hpp"
#include "providers/libvirt/domains.hpp"
#include "testbed/engine_fixture.hpp"
#include "testbed/test_transport.hpp"

using namespace egress;
using namespace std::chrono_literals;
using test::eventually;
using test::link_of;
using test::status_of;

namespace {

struct recorder {
  std::mutex mtx;
  std::vector<link_down> events;
  std::atomic<bool> kill_was_running{false};
};

link_events_actor::behavior_type
make_listener(link_events_actor::pointer self, std::shared_ptr<recorder> rec,
              std::shared_ptr<test::kill_probe> probe) {
  (void) self;
  return {
    [rec, probe](link_down& ev) {
      // Was the kill already under way but not finished when the news came?
      rec->kill_was_running = !probe->killed.is_open();
      std::lock_guard<std::mutex> g{rec->mtx};
      rec->events.push_back(ev);
    },
  };
}

call_job wait_for_kill(std::shared_ptr<test::kill_probe> probe) {
  call_job job;
  job.what = "blocked";
  job.fn = [probe](lv::connection&) -> caf::expected<std::any> {
    probe->killed.wait_for(30s);
    return std::any{};
  };
  return job;
}

// Sends `job` from a fresh actor; the outcome lands in `err`/`done`.
struct pending_call {
  std::atomic<bool> done{false};
  std::mutex mtx;
  caf::error err;
};

std::shared_ptr<pending_call> send_call(caf::actor_system& sys, host_link_actor link,
                                        call_job job) {
  auto out = std::make_shared<pending_call>();
  sys.spawn([=](caf::event_based_actor* self) {
    self->request(link, 60s, atom::call_v, job)
      .then([=](call_result&) { out->done = true; },
            [=](caf::error& err) {
              std::lock_guard<std::mutex> g{out->mtx};
              out->err = err;
              out->done = true;
            });
  });
  return out;
}

} // namespace

BOOST_FIXTURE_TEST_SUITE(link_death_suite, test::engine_fixture)

BOOST_AUTO_TEST_CASE(spec_02_dead_is_signalled_before_a_slow_kill_and_only_once) {
  auto probe = std::make_shared<test::kill_probe>();
  auto hold = std::make_shared<test::gate>();
  probe->hold_kill = hold; // the kill starts, then blocks until released
  auto cfg = test::test_config("dead");
  cfg.hosts.push_back(test::test_host("hv1"));
  fleet_hooks hooks;
  hooks.make_transport = [probe](const host_config& h) {
    return test::test_transports(h.uri, probe);
  };
  auto eng = engine::start(*sys, cfg, hooks);
  BOOST_REQUIRE(eng);
  caf::scoped_actor self{*sys};
  auto link = link_of(self, *eng, "hv1");
  BOOST_REQUIRE(test::wait_up(self, link));
  auto rec = std::make_shared<recorder>();
  auto listener = sys->spawn(make_listener, rec, probe);
  self->send(link, atom::subscribe_v, listener);
  auto call = send_call(*sys, link, wait_for_kill(probe));
  BOOST_REQUIRE(eventually([&] { return status_of(self, link).in_flight == 1; }));

  // First mark-dead: answered while the kill is still running.
  link_status first;
  self->request(link, 1s, atom::kill_v, std::string{"first"})
    .receive([&](link_status& s) { first = s; },
             [&](caf::error& err) { BOOST_FAIL(render(err)); });
  BOOST_CHECK(first.state == link_state::dead);
  BOOST_REQUIRE(probe->kill_started.wait_for(5s));
  BOOST_CHECK(!probe->killed.is_open()); // the kill is held
  // The subscriber has the news and the caller has its transient error,
  // both while the kill is still blocked.
  BOOST_REQUIRE(eventually([&] { return call->done.load(); }));
  {
    std::lock_guard<std::mutex> g{call->mtx};
    BOOST_CHECK(call->err == ec::link_down);
    BOOST_CHECK(kind_of(call->err) == error_kind::transient);
  }
  BOOST_REQUIRE(eventually([&] {
    std::lock_guard<std::mutex> g{rec->mtx};
    return rec->events.size() == 1;
  }));
  {
    std::lock_guard<std::mutex> g{rec->mtx};
    BOOST_CHECK_EQUAL(rec->events[0].host, "hv1");
    BOOST_CHECK_EQUAL(rec->events[0].reason, "killed: first");
  }
  BOOST_CHECK(!probe->killed.is_open());
  // A second mark-dead returns at once and changes nothing.
  auto t0 = std::chrono::steady_clock::now();
  link_status second;
  self->request(link, 1s, atom::kill_v, std::string{"second"})
    .receive([&](link_status& s) { second = s; },
             [&](caf::error& err) { BOOST_FAIL(render(err)); });
  BOOST_CHECK(std::chrono::steady_clock::now() - t0 < 500ms);
  BOOST_CHECK_EQUAL(second.reason, "killed: first");
  BOOST_CHECK_EQUAL(second.deaths, 1u);
  hold->open();
  BOOST_CHECK(probe->killed.wait_for(5s));
  BOOST_CHECK_EQUAL(probe->kills.load(), 1);
  {
    std::lock_guard<std::mutex> g{rec->mtx};
    BOOST_CHECK_EQUAL(rec->events.size(), 1u);
  }
  self->send_exit(listener, caf::exit_reason::user_shutdown);
  BOOST_REQUIRE(!eng->stop());
}

BOOST_AUTO_TEST_CASE(spec_05_a_stuck_host_does_not_delay_another_host) {
  auto probe = std::make_shared<test::kill_probe>();
  auto cfg = test::test_config("bulk");
  cfg.hosts.push_back(test::test_host("stuck"));
  cfg.hosts.push_back(test::test_host("fine"));
  cfg.hosts[0].call_budget = 30s; // the stuck calls must stay stuck
  for (auto n : {"fine-1", "fine-2", "fine-3"})
    cfg.proxies.push_back(test::test_proxy(n, "fine"));
  fleet_hooks hooks;
  hooks.make_transport = [probe](const host_config& h) -> transport_factory {
    if (h.name == "stuck")
      return test::test_transports(h.uri, probe);
    return direct(h.uri);
  };
  auto eng = engine::start(*sys, cfg, hooks);
  BOOST_REQUIRE(eng);
  caf::scoped_actor self{*sys};
  auto stuck = link_of(self, *eng, "stuck");
  BOOST_REQUIRE(test::wait_up(self, stuck));
  // Fill every slot of the stuck host and queue more behind them.
  std::vector<std::shared_ptr<pending_call>> calls;
  for (int i = 0; i < 8; ++i)
    calls.push_back(send_call(*sys, stuck, wait_for_kill(probe)));
  BOOST_REQUIRE(eventually([&] {
    auto s = status_of(self, stuck);
    return s.in_flight == 5 && s.queued == 3;
  }));
  // The other host's proxies converge regardless (generous bound).
  auto t0 = std::chrono::steady_clock::now();
  BOOST_CHECK(wait_status(*eng, [](auto& st) { return all_running(st, 3); }, 10s));
  BOOST_TEST_MESSAGE("converged beside a stuck host in "
                     << std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now() - t0).count() << " ms");
  BOOST_CHECK_EQUAL(status_of(self, stuck).in_flight, 5u);
  BOOST_REQUIRE(!eng->stop());
  auto w = lv::connection::open("test:///default");
  for (auto n : {"fine-1", "fine-2", "fine-3"})
    BOOST_CHECK(!lv::delete_domain(**w, n));
}

BOOST_AUTO_TEST_CASE(spec_15_shutdown_is_bounded_while_calls_are_blocked) {
  auto probe = std::make_shared<test::kill_probe>();
  auto cfg = test::test_config("stop");
  cfg.hosts.push_back(test::test_host("hv1"));
  cfg.hosts[0].call_budget = 60s;
  fleet_hooks hooks;
  hooks.make_transport = [probe](const host_config& h) {
    return test::test_transports(h.uri, probe);
  };
  auto eng = engine::start(*sys, cfg, hooks);
  BOOST_REQUIRE(eng);
  {
    caf::scoped_actor self{*sys};
    auto link = link_of(self, *eng, "hv1");
    BOOST_REQUIRE(test::wait_up(self, link));
    for (int i = 0; i < 3; ++i)
      send_call(*sys, link, wait_for_kill(probe));
    BOOST_REQUIRE(eventually([&] { return status_of(self, link).in_flight == 3; }));
  }
  // Stop the engine and destroy the actor system (which joins every detached
  // thread): bounded, because the links are killed first.
  auto t0 = std::chrono::steady_clock::now();
  BOOST_CHECK(!eng->stop());
  sys.reset();
  auto took = std::chrono::steady_clock::now() - t0;
  BOOST_TEST_MESSAGE("shutdown with 3 blocked calls took "
                     << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                     << " ms");
  BOOST_CHECK(took < 5s);
  BOOST_CHECK_EQUAL(probe->kills.load(), 1);
}

BOOST_AUTO_TEST_SUITE_END()
