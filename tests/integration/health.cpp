// The probed rotation against real parts: a private libvirtd serving its
// test driver, reached through the engine's SSH link to a real sshd in a
// network namespace; one real tinyproxy per proxy on the address libvirt
// reports, inside that namespace, and a real page behind them. The health
// actor probes each proxy through the host's sshd (direct-tcpip) with an
// HTTP request through the proxy, as in production.
#define BOOST_TEST_MODULE health
#include <boost/test/unit_test.hpp>

#include <caf/send.hpp>

#include "testbed/engine_fixture.hpp"
#include "testbed/probe_bed.hpp"
#include "testbed/testbed.hpp"

using namespace egress;
using namespace std::chrono_literals;

namespace {

struct bed : test::engine_fixture, test::probe_bed {
  engine_config config(const std::vector<std::string>& names) {
    return probed_config("rotation", names);
  }

  // Starts a tinyproxy at every running proxy's address.
  void serve_all(engine& eng) { BOOST_REQUIRE(probe_bed::serve_all(eng)); }

  std::string address_of(engine& eng, const std::string& name) {
    return find(*eng.status(), name)->address;
  }
};

} // namespace

BOOST_FIXTURE_TEST_SUITE(rotation_suite, bed)

// Invariant 12: one proxy hangs (its tinyproxy stopped), fails its probes
// and leaves the rotation after `fall` failures; the other two never leave,
// and it joins again once it answers.
BOOST_AUTO_TEST_CASE(spec_12_a_failing_proxy_never_removes_a_healthy_one) {
  auto eng = engine::start(*sys, config({"rp-1", "rp-2", "rp-3"}));
  test::stop_on_exit guard{eng};
  BOOST_REQUIRE(eng);
  auto events = std::make_shared<test::rotation_log>();
  auto recorder = sys->spawn(test::rotation_recorder, events);
  eng->subscribe(recorder);
  BOOST_REQUIRE(wait_status(*eng, [](auto& st) { return all_running(st, 3); }, 30s));
  // Running with an address is not enough: nobody answers yet.
  std::this_thread::sleep_for(1500ms);
  BOOST_CHECK(eng->status()->rotation.empty());
  serve_all(*eng);
  BOOST_REQUIRE(wait_status(*eng, [](auto& st) { return st.rotation.size() == 3; }, 20s));
  auto st = *eng->status();
  for (auto& p : st.proxies) {
    BOOST_CHECK_GE(p.probes_ok, 2u);
    BOOST_CHECK_MESSAGE(p.last_probe.find("HTTP 200") != std::string::npos, p.last_probe);
  }
  auto sick = address_of(*eng, "rp-2");
  vms.freeze(sick);
  BOOST_REQUIRE(wait_status(*eng, [](auto& st) {
    return st.rotation == std::vector<std::string>{"rp-1", "rp-3"};
  }, 20s));
  auto left = *find(*eng->status(), "rp-2");
  BOOST_CHECK_LE(left.probe_streak, -2);
  BOOST_CHECK_MESSAGE(left.last_probe.find("reply") != std::string::npos, left.last_probe);
  // Healthy ones keep passing while it fails.
  auto ok_before = find(*eng->status(), "rp-1")->probes_ok;
  std::this_thread::sleep_for(1500ms);
  BOOST_CHECK_GT(find(*eng->status(), "rp-1")->probes_ok, ok_before);
  vms.thaw(sick);
  BOOST_REQUIRE(wait_status(*eng, [](auto& st) { return st.rotation.size() == 3; }, 20s));
  BOOST_CHECK_EQUAL(events->count("rp-1", false), 0u);
  BOOST_CHECK_EQUAL(events->count("rp-3", false), 0u);
  BOOST_CHECK_EQUAL(events->count("rp-2", false), 1u);
  BOOST_CHECK_EQUAL(events->count("rp-2", true), 2u);
  for (auto& e : events->snapshot())
    BOOST_TEST_MESSAGE((e.joined ? "joined " : "left ") << e.proxy << " (" << e.reason
                                                        << "), size " << e.size);
  BOOST_REQUIRE(!eng->stop());
  caf::anon_send_exit(recorder, caf::exit_reason::user_shutdown);
}

// A proxy with no effective host leaves at once: the link is killed, every
// proxy of that host leaves without waiting for failed probes; after the
// redial they are probed back in.
BOOST_AUTO_TEST_CASE(spec_12_a_dead_link_takes_its_proxies_out_at_once) {
  auto eng = engine::start(*sys, config({"rl-1", "rl-2"}));
  test::stop_on_exit guard{eng};
  BOOST_REQUIRE(eng);
  auto events = std::make_shared<test::rotation_log>();
  auto recorder = sys->spawn(test::rotation_recorder, events);
  eng->subscribe(recorder);
  BOOST_REQUIRE(wait_status(*eng, [](auto& st) { return all_running(st, 2); }, 30s));
  serve_all(*eng);
  BOOST_REQUIRE(wait_status(*eng, [](auto& st) { return st.rotation.size() == 2; }, 20s));
  caf::scoped_actor self{*sys};
  auto t0 = std::chrono::steady_clock::now();
  self->request(eng->fleet(), 5s, atom::kill_v, std::string{"hv1"})
    .receive([](link_status&) {}, [](caf::error& err) { BOOST_FAIL(render(err)); });
  BOOST_REQUIRE(test::eventually([&] {
    return events->count("rl-1", false) == 1 && events->count("rl-2", false) == 1;
  }, 5s));
  auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
    std::chrono::steady_clock::now() - t0);
  BOOST_TEST_MESSAGE("both left " << took.count() << " ms after the kill");
  BOOST_CHECK_LT(took.count(), 1000); // no probe had to fail first
  for (auto& e : events->snapshot())
    if (!e.joined)
      BOOST_CHECK_MESSAGE(e.reason.starts_with("link down"), e.reason);
  BOOST_CHECK(wait_status(*eng, [](auto& st) { return st.rotation.size() == 2; }, 20s));
  BOOST_REQUIRE(!eng->stop());
  caf::anon_send_exit(recorder, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_SUITE_END()
