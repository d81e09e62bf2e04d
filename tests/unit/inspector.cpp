// The inspector (actors/inspector) in this process: an actor that does not
// answer shows as "no reply" within the liveness timeout instead of holding
// up the listing, and ls calls gathers the owners' call ledgers.
#define BOOST_TEST_MODULE inspector
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <chrono>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <caf/blocking_actor.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/parts/admission.hpp"
#include "actors/health.hpp"
#include "actors/inspector.hpp"
#include "providers/crypto/secret.hpp"
#include "testbed/engine_fixture.hpp"

using namespace egress;
using namespace std::chrono_literals;

// a handler (a detached actor sleeping, as one blocked in a libvirt call
// would) and one that answers. The listing comes back within the liveness
// timeout plus slack, with the stuck one as "no reply". The timeout is a
// generous 1 s: under ASan on a busy 2-core CI machine the answering actor
// once missed a 300 ms one.
namespace {

caf::behavior stub_fleet(caf::event_based_actor*, std::vector<directory_row> dir) {
  return {[dir](atom::ls, const ls_query&) { return dir; }};
}

} // namespace

BOOST_FIXTURE_TEST_CASE(spec_19_a_wedged_actor_shows_as_no_reply_within_the_timeout,
                        test::engine_fixture) {
  auto wedged = sys->spawn<caf::detached>([](caf::blocking_actor* self) {
    self->receive([](int) {}); // the first message it gets: sleeps in the handler
    std::this_thread::sleep_for(5s);
  });
  caf::anon_send(wedged, 1);
  auto fine = sys->spawn([]() -> caf::behavior { return {[](int) {}}; });
  std::vector<directory_row> dir;
  dir.push_back({{actor_kind::proxy, "stuck", "running", "", "", {}, ""}, wedged, {}});
  dir.push_back({{actor_kind::proxy, "fine", "running", "", "", {}, ""}, fine, {}});
  auto fleet = caf::actor_cast<fleet_actor>(sys->spawn(stub_fleet, dir));
  auto insp = sys->spawn(make_inspector, fleet, caf::timespan{1s}, config_source{});
  caf::scoped_actor self{*sys};
  auto t0 = std::chrono::steady_clock::now();
  std::vector<actor_row> got;
  self->request(insp, 5s, atom::ls_v, ls_query{"proxy", "", true})
    .receive([&](std::vector<actor_row>& xs) { got = std::move(xs); },
             [&](caf::error& err) { BOOST_FAIL(render(err)); });
  auto took = std::chrono::steady_clock::now() - t0;
  BOOST_REQUIRE_EQUAL(got.size(), 2u);
  BOOST_CHECK_EQUAL(got[0].liveness, "no reply within 1000 ms");
  BOOST_CHECK(got[1].liveness.rfind("ok ", 0) == 0);
  BOOST_CHECK(took < 4s); // generous: the point is that it is not the 5 s sleep
  std::vector<caf::actor> all{caf::actor_cast<caf::actor>(insp),
                              caf::actor_cast<caf::actor>(fleet), fine};
  for (auto& a : all)
    caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  self->wait_for(wedged);
}

// ls calls: the inspector asks each link and image for its detached calls
// and lists them together; an owner that does not answer is one entry
// saying so, within the liveness timeout.
BOOST_FIXTURE_TEST_CASE(ls_calls_gathers_the_owners_calls_and_names_a_wedged_owner,
                        test::engine_fixture) {
  auto owner = sys->spawn([]() -> caf::behavior {
    return {[](atom::ls) {
      actor_row c{actor_kind::call, "hv1#42", "abandoned, thread still running", "", "busy (detached)",
                    {"call: define px-1", "host: hv1"}, ""};
      return std::vector<actor_row>{c};
    }};
  });
  auto wedged = sys->spawn<caf::detached>([](caf::blocking_actor* self) {
    self->receive([](int) {});
    std::this_thread::sleep_for(2s);
  });
  caf::anon_send(wedged, 1);
  std::vector<directory_row> dir;
  dir.push_back({{actor_kind::link, "hv1", "up", "", "", {}, ""}, owner,
                 caf::actor_cast<call_ledger_interface>(owner)});
  dir.push_back({{actor_kind::image, "base@hv2", "fetching", "", "", {}, ""}, wedged,
                 caf::actor_cast<call_ledger_interface>(wedged)});
  dir.push_back({{actor_kind::proxy, "px-1", "running", "", "", {}, ""}, owner, {}});
  auto fleet = caf::actor_cast<fleet_actor>(sys->spawn(stub_fleet, dir));
  auto insp = sys->spawn(make_inspector, fleet, caf::timespan{300ms}, config_source{});
  caf::scoped_actor self{*sys};
  std::vector<actor_row> got;
  self->request(insp, 5s, atom::ls_v, ls_query{"call", "", true})
    .receive([&](std::vector<actor_row>& xs) { got = std::move(xs); },
             [&](caf::error& err) { BOOST_FAIL(render(err)); });
  BOOST_REQUIRE_EQUAL(got.size(), 2u);
  std::sort(got.begin(), got.end(), [](auto& a, auto& b) { return a.name < b.name; });
  BOOST_CHECK_EQUAL(got[0].name, "hv1#42");
  BOOST_CHECK_EQUAL(got[0].state, "abandoned, thread still running");
  BOOST_CHECK_EQUAL(got[1].name, "image/base@hv2");
  BOOST_CHECK_EQUAL(got[1].state, "unknown: its owner did not list them");
  BOOST_CHECK_EQUAL(got[1].liveness, "no reply within 300 ms");
  // "ls" of everything includes the calls beside the actors.
  self->request(insp, 5s, atom::ls_v, ls_query{})
    .receive([&](std::vector<actor_row>& xs) { got = std::move(xs); },
             [&](caf::error& err) { BOOST_FAIL(render(err)); });
  BOOST_CHECK_EQUAL(got.size(), 5u);
  for (auto a : {caf::actor_cast<caf::actor>(insp), caf::actor_cast<caf::actor>(fleet), owner})
    caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  self->wait_for(wedged);
}

// ls calls lists the health actor's probe batches too: a "proxy" that
// accepts and never answers keeps its batch's detached call in flight for
// the probe timeout, and the health actor lists it with its job and host.
BOOST_FIXTURE_TEST_CASE(ls_calls_lists_the_health_actors_probe_batches, test::engine_fixture) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  BOOST_REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
  BOOST_REQUIRE(::listen(fd, 8) == 0); // accepts (the kernel does), never answers
  BOOST_REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0);
  health_options o;
  o.probe.mode = "http";
  o.probe.target = "http://egress.test/";
  o.probe.timeout = 3s;
  o.probe.interval = 5s;
  o.prober_for = [](const std::string&) { return probe::direct_tcp(); };
  auto health = sys->spawn(make_health, o);
  proxy_status px;
  px.name = "px-silent";
  px.host = "hv1";
  px.phase = proxy_phase::running;
  px.address = "127.0.0.1:" + std::to_string(ntohs(sa.sin_port));
  caf::anon_send(health, px);
  caf::scoped_actor self{*sys};
  std::vector<actor_row> calls;
  BOOST_CHECK(test::eventually([&] {
    self->request(health, 2s, atom::ls_v)
      .receive([&](std::vector<actor_row>& xs) { calls = std::move(xs); },
               [&](caf::error& err) { BOOST_FAIL(render(err)); });
    return calls.size() == 1;
  }, 5s));
  if (calls.size() == 1) {
    BOOST_CHECK(calls[0].kind == actor_kind::call);
    auto& d = calls[0].details;
    BOOST_CHECK(std::find(d.begin(), d.end(), "call: probe 1 proxy(ies)") != d.end());
    BOOST_CHECK(std::find(d.begin(), d.end(), "host: hv1") != d.end());
    BOOST_CHECK(std::find(d.begin(), d.end(), "owner: health/health") != d.end());
  }
  caf::anon_send_exit(health, caf::exit_reason::user_shutdown);
  self->wait_for(health);
  ::close(fd);
}
