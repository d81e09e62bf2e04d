// The gateway against real parts: a real HAProxy (Debian's 2.6, private
// config: the shipped dist/haproxy/egress-gateway.cfg with its socket and
// ports rewritten) in front of real tinyproxies. The bed is the health
// suite's: a private libvirtd serving its test driver, reached through the
// engine's SSH link to a real sshd in a network namespace, a tinyproxy per
// proxy on the address libvirt reports, inside that namespace, and there
// the page the exits fetch, which answers with the address a request came
// from. HAProxy runs in that namespace too (the VM network's side), its
// frontends on the namespace's veth address and its admin socket a file of
// this test.
#define BOOST_TEST_MODULE gateway
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <map>
#include <set>
#include <thread>

#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include "testbed/engine_fixture.hpp"
#include "testbed/haproxy.hpp"
#include "testbed/probe_bed.hpp"
#include "testbed/testbed.hpp"

using namespace egress;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

struct bed : test::engine_fixture, test::probe_bed {
  test::exit_target page{test::vm_network::web_addr, 8081, net.name()};
  test::haproxy gw{[this] {
    test::haproxy_options o;
    o.netns = net.name();
    o.address = net.peer_addr();
    return o;
  }()};

  bed() { gw.start(); }

  engine_config config(const std::vector<std::string>& names) {
    auto cfg = probed_config("gateway", names);
    cfg.gc = true;
    for (auto& p : cfg.proxies)
      if (p.name == "gp-3")
        p.tags = {"unit", "eu"};
    cfg.gateway.enabled = true;
    cfg.gateway.socket = gw.socket();
    cfg.gateway.backends = {{"egress", ""}, {"egress_by_client", ""}, {"egress_by_session", ""},
                            {"egress_eu", "eu"}};
    cfg.gateway.resync_interval = 1s;
    cfg.gateway.drain_grace = 10s;
    return cfg;
  }

  // Starts a tinyproxy at every running proxy's address.
  void serve_all(engine& eng) { BOOST_REQUIRE(probe_bed::serve_all(eng)); }

  std::string address_of(engine& eng, const std::string& name) {
    return find(*eng.status(), name)->address;
  }

  // A request through a frontend of the gateway: the exit's address, or ""
  // when it failed.
  std::string exit_of(int port, const std::string& session = {}, const std::string& path = "/") {
    auto [code, body] = test::get_through(gw.address(), port, page.url(path), session);
    if (code != 200 || !body.starts_with("exit "))
      return {};
    return body.substr(5, body.find('\n') - 5);
  }

  caf::expected<engine> start_serving(const std::vector<std::string>& names) {
    auto eng = engine::start(*sys, config(names));
    if (!eng)
      return eng;
    BOOST_REQUIRE(wait_status(*eng, [&](auto& st) { return all_running(st, names.size()); }, 30s));
    serve_all(*eng);
    BOOST_REQUIRE(wait_status(*eng, [&](auto& st) { return st.rotation.size() == names.size(); },
                              20s));
    return eng;
  }
};

auto ms(clock_type::duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

} // namespace

BOOST_FIXTURE_TEST_SUITE(gateway_suite, bed)

// docs/spec.md 29: a proxy that joins the rotation is ready in HAProxy
// within 200 ms of the join, one that leaves (drained by an operator, or its
// link killed) is out of it within 200 ms; requests through the gateway
// reach every proxy of the rotation and none that left.
BOOST_AUTO_TEST_CASE(spec_29_haproxy_follows_joins_and_leaves_within_200_ms) {
  test::server_watch watch{gw, "egress"};
  auto events = std::make_shared<test::rotation_log>();
  auto recorder = sys->spawn(test::rotation_recorder, events);
  auto eng = engine::start(*sys, config({"gp-1", "gp-2", "gp-3"}));
  test::stop_on_exit guard{eng};
  BOOST_REQUIRE(eng);
  eng->subscribe(recorder);
  BOOST_REQUIRE(wait_status(*eng, [](auto& st) { return all_running(st, 3); }, 30s));
  serve_all(*eng);
  BOOST_REQUIRE(wait_status(*eng, [](auto& st) { return st.rotation.size() == 3; }, 20s));
  // The fleet's status counts a proxy in the rotation as soon as it joins;
  // HAProxy follows a moment later, so each is waited for (the bound on that
  // moment is checked below, from the recorded times).
  BOOST_REQUIRE(test::eventually(
    [&] { return watch.serving("gp-1") && watch.serving("gp-2") && watch.serving("gp-3"); },
    2s));
  for (auto name : {"gp-1", "gp-2", "gp-3"}) {
    auto joined = events->when(name, true);
    auto ready = watch.serving(name);
    BOOST_REQUIRE_MESSAGE(joined && ready, name << (joined ? "" : " never joined")
                                                << (ready ? "" : " never ready in HAProxy"));
    BOOST_TEST_MESSAGE(name << " ready in HAProxy " << ms(*ready - *joined) << " ms after it joined");
    BOOST_CHECK_LT(*ready - *joined, 200ms);
  }
  std::set<std::string> exits;
  for (int i = 0; i < 12; ++i)
    exits.insert(exit_of(gw.ports().rotate));
  BOOST_CHECK_EQUAL(exits.size(), 3u);
  BOOST_CHECK(!exits.contains(""));
  // Only the "eu" proxy behind the tagged entry point.
  for (int i = 0; i < 4; ++i)
    BOOST_CHECK_EQUAL(exit_of(gw.ports().tagged), address_of(*eng, "gp-3"));

  caf::scoped_actor self{*sys};
  self->request(eng->fleet(), 5s, atom::drain_v, std::string{"gp-2"}, true)
    .receive([](proxy_health&) {}, [](caf::error& err) { BOOST_FAIL(render(err)); });
  BOOST_REQUIRE(test::eventually([&] { return watch.out("gp-2").has_value(); }, 2s));
  auto left = events->when("gp-2", false);
  BOOST_REQUIRE(left);
  BOOST_TEST_MESSAGE("gp-2 out of HAProxy " << ms(*watch.out("gp-2") - *left)
                                            << " ms after it left");
  BOOST_CHECK_LT(*watch.out("gp-2") - *left, 200ms);
  auto sick = address_of(*eng, "gp-2");
  for (int i = 0; i < 12; ++i) {
    auto exit = exit_of(gw.ports().rotate);
    BOOST_CHECK(!exit.empty());
    BOOST_CHECK_NE(exit, sick);
  }
  // A dead link takes every proxy of its host out at once, and HAProxy
  // follows.
  self->request(eng->fleet(), 5s, atom::kill_v, std::string{"hv1"})
    .receive([](link_status&) {}, [](caf::error& err) { BOOST_FAIL(render(err)); });
  BOOST_REQUIRE(test::eventually([&] { return watch.out("gp-1") && watch.out("gp-3"); }, 2s));
  for (auto name : {"gp-1", "gp-3"}) {
    auto gone = events->when(name, false);
    BOOST_REQUIRE(gone);
    BOOST_CHECK_LT(*watch.out(name) - *gone, 200ms);
  }
  BOOST_REQUIRE(!eng->stop());
  caf::anon_send_exit(recorder, caf::exit_reason::user_shutdown);
}

// docs/spec.md 31: an HAProxy that restarted has none of the engine's
// servers; the next sync adds them again, and requests go through. One that
// is stopped (SIGSTOP: its socket accepts and answers nothing) costs the
// fleet nothing: the rotation changes meanwhile, the gateway reports it
// unreachable, and after SIGCONT it follows again.
BOOST_AUTO_TEST_CASE(spec_31_a_restarted_or_stopped_haproxy_is_synced_again) {
  auto eng = start_serving({"gp-1", "gp-2", "gp-3"});
  test::stop_on_exit guard{eng};
  BOOST_REQUIRE(eng);
  BOOST_REQUIRE(test::eventually([&] { return gw.servers().size() == 3; }, 2s));
  gw.restart();
  BOOST_CHECK(gw.servers().empty());
  auto t0 = clock_type::now();
  BOOST_REQUIRE(test::eventually([&] { return gw.servers().size() == 3; }, 5s));
  BOOST_TEST_MESSAGE("re-synced " << ms(clock_type::now() - t0) << " ms after the restart");
  BOOST_CHECK(!exit_of(gw.ports().rotate).empty());
  // The gateway's report follows its commands by a moment.
  BOOST_CHECK(wait_status(*eng, [](auto& st) { return st.gateway.resyncs >= 1; }, 2s));

  gw.pause();
  caf::scoped_actor self{*sys};
  t0 = clock_type::now();
  self->request(eng->fleet(), 5s, atom::drain_v, std::string{"gp-1"}, true)
    .receive([](proxy_health&) {}, [](caf::error& err) { BOOST_FAIL(render(err)); });
  BOOST_CHECK(wait_status(*eng, [](auto& st) { return st.rotation.size() == 2; }, 1s));
  BOOST_CHECK_LT(clock_type::now() - t0, 500ms); // the fleet did not wait on HAProxy
  BOOST_REQUIRE(wait_status(*eng, [](auto& st) {
    return st.gateway.state == haproxy_state::unreachable;
  }, 5s));
  auto st = eng->status();
  BOOST_CHECK_GE(st->gateway.errors_timeout, 1u);
  BOOST_TEST_MESSAGE("while stopped: " << st->gateway.reason);
  t0 = clock_type::now();
  auto status_took = clock_type::now();
  BOOST_REQUIRE(eng->status(1s));
  BOOST_CHECK_LT(clock_type::now() - status_took, 200ms);
  gw.resume();
  BOOST_REQUIRE(wait_status(*eng, [](auto& st) {
    return st.gateway.state == haproxy_state::in_sync;
  }, 10s));
  BOOST_CHECK(test::eventually([&] { return gw.servers().size() == 2; }, 5s));
  BOOST_CHECK(!gw.servers().contains("gp-1"));
  BOOST_REQUIRE(!eng->stop());
}

// docs/spec.md 30: a proxy the engine is about to delete is drained in the
// gateway first. A reload removes gp-3 while a slow request runs through
// it: HAProxy takes no new connection for it at once, the request in flight
// completes, and only then is its domain deleted (before: deleted by the
// reload's collection at once, while HAProxy still sent it clients).
BOOST_AUTO_TEST_CASE(spec_30_a_removed_proxy_is_drained_before_its_vm_is_deleted) {
  auto eng = start_serving({"gp-1", "gp-2", "gp-3"});
  test::stop_on_exit guard{eng};
  BOOST_REQUIRE(eng);
  BOOST_REQUIRE(test::eventually([&] { return gw.servers("egress_eu").contains("gp-3"); }, 2s));
  auto gp3 = address_of(*eng, "gp-3");
  // The tagged entry point has gp-3 alone: the slow request goes through it.
  std::atomic<bool> done{false};
  std::pair<int, std::string> slow;
  clock_type::time_point slow_done;
  std::jthread client([&] {
    slow = test::get_through(gw.address(), gw.ports().tagged, page.url("/slow?ms=3000"), {}, 10s);
    slow_done = clock_type::now();
    done = true;
  });
  BOOST_REQUIRE_MESSAGE(
    test::eventually([&] { return gw.sessions("egress_eu", "gp-3") == 1; }, 2s),
    gw.command("show stat egress_eu 4 -1"));
  auto t_reload = clock_type::now();
  BOOST_REQUIRE(eng->reload(config({"gp-1", "gp-2"})));
  // No new connection for it from now on.
  BOOST_REQUIRE(test::eventually([&] {
    auto s = gw.servers("egress");
    return !s.contains("gp-3") || !s["gp-3"].ready();
  }, 1s));
  BOOST_CHECK_LT(clock_type::now() - t_reload, 300ms);
  for (int i = 0; i < 6; ++i)
    BOOST_CHECK_NE(exit_of(gw.ports().rotate), gp3);
  // Its domain is still there while the request runs.
  auto listed = [&] {
    return testbed::run({"virsh", "-c", lv.uri("test"), "list", "--all", "--name"}).output;
  };
  BOOST_REQUIRE(listed().find("gp-3") != std::string::npos);
  std::optional<clock_type::time_point> deleted;
  while (clock_type::now() - t_reload < 15s) {
    if (listed().find("gp-3") == std::string::npos) {
      deleted = clock_type::now();
      break;
    }
    std::this_thread::sleep_for(20ms);
  }
  client.join();
  BOOST_CHECK_EQUAL(slow.first, 200);
  BOOST_CHECK_EQUAL(slow.second, "exit " + gp3 + "\n");
  BOOST_REQUIRE_MESSAGE(deleted, "gp-3's domain was never deleted");
  BOOST_TEST_MESSAGE("request done " << ms(slow_done - t_reload) << " ms, domain deleted "
                                     << ms(*deleted - t_reload) << " ms after the reload");
  BOOST_CHECK(*deleted >= slow_done);
  BOOST_CHECK(!gw.servers("egress_eu").contains("gp-3"));
  BOOST_REQUIRE(!eng->stop());
}

// A named session keeps its exit while that exit stays in the rotation, and
// moves once, to another, when it leaves; sticky by client address too.
BOOST_AUTO_TEST_CASE(a_named_session_keeps_its_exit_and_moves_once) {
  auto eng = start_serving({"gp-1", "gp-2", "gp-3"});
  test::stop_on_exit guard{eng};
  BOOST_REQUIRE(eng);
  BOOST_REQUIRE(test::eventually([&] { return gw.servers("egress_by_session").size() == 3; }, 2s));
  auto first = exit_of(gw.ports().session, "session-a");
  BOOST_REQUIRE(!first.empty());
  for (int i = 0; i < 20; ++i)
    BOOST_CHECK_EQUAL(exit_of(gw.ports().session, "session-a"), first);
  std::set<std::string> sessions;
  for (int i = 0; i < 9; ++i)
    sessions.insert(exit_of(gw.ports().session, "s-" + std::to_string(i)));
  BOOST_CHECK_GE(sessions.size(), 2u); // sessions are spread
  auto by_client = exit_of(gw.ports().client);
  for (int i = 0; i < 10; ++i)
    BOOST_CHECK_EQUAL(exit_of(gw.ports().client), by_client);
  std::string owner;
  auto st = eng->status();
  BOOST_REQUIRE(st);
  for (auto& p : st->proxies)
    if (p.address == first)
      owner = p.name;
  caf::scoped_actor self{*sys};
  self->request(eng->fleet(), 5s, atom::drain_v, owner, true)
    .receive([](proxy_health&) {}, [](caf::error& err) { BOOST_FAIL(render(err)); });
  BOOST_REQUIRE(test::eventually([&] {
    auto s = gw.servers("egress_by_session");
    return !s.contains(owner) || !s[owner].ready();
  }, 1s));
  auto moved = exit_of(gw.ports().session, "session-a");
  BOOST_CHECK(!moved.empty());
  BOOST_CHECK_NE(moved, first);
  for (int i = 0; i < 20; ++i)
    BOOST_CHECK_EQUAL(exit_of(gw.ports().session, "session-a"), moved);
  BOOST_REQUIRE(!eng->stop());
}

BOOST_AUTO_TEST_SUITE_END()
