#define BOOST_TEST_MODULE health
// The health actor's rise/fall/drain logic (actors/health.hpp) on the
// deterministic scheduler, against a prober whose verdicts the test sets.
// Each round advances the virtual clock by one tick; the probe batch runs
// in its detached call actor, as in the engine, and the round ends when it
// has answered. The real probes through a host's sshd are tested with real
// tinyproxies in tests/integration/health.cpp.
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <caf/event_based_actor.hpp>

#include "actors/health.hpp"
#include "testbed/det_fixture.hpp"

using namespace egress;
using namespace std::chrono_literals;

namespace {

// Passes or fails each endpoint ("ip:port") as the test says; counts its
// probes.
class scripted_prober final : public probe::prober {
public:
  void set(const std::string& address, bool ok) {
    std::lock_guard<std::mutex> guard{mtx_};
    ok_[address] = ok;
  }
  size_t probes(const std::string& address) {
    std::lock_guard<std::mutex> guard{mtx_};
    return count_[address];
  }
  caf::expected<probe::outcome> probe(const std::string& ip, uint16_t port,
                                      const probe::settings&) override {
    auto address = ip + ":" + std::to_string(port);
    std::lock_guard<std::mutex> guard{mtx_};
    ++count_[address];
    probe::outcome o;
    o.ok = ok_[address];
    o.stage = o.ok ? "ok" : "connect";
    o.detail = o.ok ? "" : "connection refused";
    o.latency = 2ms;
    return o;
  }
  void kill() noexcept override {}

private:
  std::mutex mtx_;
  std::map<std::string, bool> ok_;
  std::map<std::string, size_t> count_;
};

const std::string a = "10.0.0.1:3128";
const std::string b = "10.0.0.2:3128";

struct events {
  std::mutex mtx;
  std::vector<rotation_event> seen;
  size_t count(const std::string& proxy, bool joined) {
    std::lock_guard<std::mutex> guard{mtx};
    size_t n = 0;
    for (auto& e : seen)
      n += e.proxy == proxy && e.joined == joined ? 1 : 0;
    return n;
  }
};

struct fixture : test::det_fixture {
  std::shared_ptr<scripted_prober> prober = std::make_shared<scripted_prober>();
  std::shared_ptr<events> log = std::make_shared<events>();
  health_actor health;
  caf::actor recorder;

  fixture() {
    health_options o;
    o.probe.mode = "tcp";
    o.probe.rise = 2;
    o.probe.fall = 3;
    // Due again at once: the virtual clock's tick decides when probes run
    // (the actor keeps each proxy's next probe on the steady clock).
    o.probe.interval = caf::timespan{1};
    o.probe.timeout = 1s;
    o.join_interval = caf::timespan{1};
    o.tick = 250ms;
    o.prober_for = [p = prober](const std::string&) -> probe::prober_ptr { return p; };
    health = sys.spawn(make_health, std::move(o));
    recorder = sys.spawn([log = log](caf::event_based_actor*) -> caf::behavior {
      return {[log](rotation_event& e) {
        std::lock_guard<std::mutex> guard{log->mtx};
        log->seen.push_back(std::move(e));
      }};
    });
    caf::anon_send(health, atom::subscribe_v,
                   caf::actor_cast<rotation_events_actor>(recorder));
    sched.run();
  }

  ~fixture() {
    caf::anon_send_exit(health, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(recorder, caf::exit_reason::user_shutdown);
    sched.run();
  }

  health_state& st() { return state_of<health_state>(health); }

  void running(const std::string& proxy, const std::string& endpoint) {
    proxy_status s;
    s.name = proxy;
    s.host = "hv1";
    s.phase = proxy_phase::running;
    s.address = endpoint;
    caf::anon_send(health, std::move(s));
    sched.run();
  }

  void link(link_state state) {
    link_status s;
    s.host = "hv1";
    s.state = state;
    s.reason = state == link_state::dead ? "killed: by test" : "";
    caf::anon_send(health, std::move(s));
    sched.run();
  }

  /// One tick: every due proxy of the host is probed in one batch.
  void round() {
    sched.advance_time(250ms);
    BOOST_REQUIRE(run_until([&] { return !st().hosts["hv1"].in_flight; }));
  }

  bool in(const std::string& proxy) { return st().targets[proxy].view.in_rotation; }
};

} // namespace

BOOST_FIXTURE_TEST_SUITE(health_suite, fixture)

BOOST_AUTO_TEST_CASE(a_proxy_joins_after_rise_passes_and_leaves_after_fall_failures) {
  prober->set(a, true);
  running("px-1", a);
  round();
  BOOST_CHECK(!in("px-1")); // one pass of two
  round();
  BOOST_CHECK(in("px-1"));
  BOOST_CHECK_EQUAL(st().rotation_size, 1u);
  prober->set(a, false);
  round();
  round();
  BOOST_CHECK(in("px-1")); // two failures of three: no flap
  round();
  BOOST_CHECK(!in("px-1"));
  BOOST_CHECK_EQUAL(log->count("px-1", true), 1u);
  BOOST_CHECK_EQUAL(log->count("px-1", false), 1u);
  // One pass in between resets the failures: hysteresis both ways.
  prober->set(a, true);
  round();
  prober->set(a, false);
  round();
  prober->set(a, true);
  round();
  round();
  BOOST_CHECK(in("px-1"));
}

BOOST_AUTO_TEST_CASE(spec_12_one_proxys_failures_never_remove_another) {
  prober->set(a, true);
  prober->set(b, true);
  running("px-1", a);
  running("px-2", b);
  round();
  round();
  BOOST_REQUIRE(in("px-1") && in("px-2"));
  prober->set(b, false);
  for (int i = 0; i < 5; ++i)
    round();
  BOOST_CHECK(in("px-1"));
  BOOST_CHECK(!in("px-2"));
  BOOST_CHECK_EQUAL(log->count("px-1", false), 0u);
  BOOST_CHECK_GE(prober->probes(b), 7u); // still probed: it may come back
}

BOOST_AUTO_TEST_CASE(a_drained_proxy_stays_out_while_its_probes_go_on_and_undrain_rejoins) {
  prober->set(a, true);
  running("px-1", a);
  round();
  round();
  BOOST_REQUIRE(in("px-1"));
  auto drain = [&](bool drained) {
    caf::anon_send(health, atom::drain_v, std::string{"px-1"}, drained);
    sched.run();
  };
  drain(true);
  BOOST_CHECK(!in("px-1"));
  BOOST_CHECK(st().targets["px-1"].view.drained);
  auto before = prober->probes(a);
  round();
  round();
  BOOST_CHECK(!in("px-1"));
  BOOST_CHECK_EQUAL(prober->probes(a), before + 2);
  drain(false); // its probes still pass: back at once
  BOOST_CHECK(in("px-1"));
}

BOOST_AUTO_TEST_CASE(a_dead_link_takes_its_proxies_out_at_once_and_they_rise_again) {
  prober->set(a, true);
  running("px-1", a);
  round();
  round();
  BOOST_REQUIRE(in("px-1"));
  link(link_state::dead);
  BOOST_CHECK(!in("px-1"));
  auto before = prober->probes(a);
  round();
  BOOST_CHECK_EQUAL(prober->probes(a), before); // no effective host: not probed
  link(link_state::up);
  BOOST_CHECK(!in("px-1"));
  round();
  round();
  BOOST_CHECK(in("px-1"));
}

BOOST_AUTO_TEST_CASE(a_new_address_leaves_at_once_and_earns_its_place_again) {
  prober->set(a, true);
  prober->set(b, true);
  running("px-1", a);
  round();
  round();
  BOOST_REQUIRE(in("px-1"));
  running("px-1", b);
  BOOST_CHECK(!in("px-1"));
  round();
  round();
  BOOST_CHECK(in("px-1"));
  BOOST_CHECK_EQUAL(st().targets["px-1"].view.address, b);
}

BOOST_AUTO_TEST_SUITE_END()
