// The node actor (actors/node) in this process: admission by token, not by
// sender (actors/parts/admission.hpp).
#define BOOST_TEST_MODULE node
#include <boost/test/unit_test.hpp>

#include <chrono>

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

// The node actor trusts no sender, only the token a hello gave out: BASP
// lets a connected party name any sender, this node's own actors included
// (a review forged one). Here the most trusted sender there is, an actor of
// the engine's own process, is refused without a token; with the proof of
// the secret it gets one, and a wrong proof or a replayed nonce gets none.
BOOST_FIXTURE_TEST_CASE(spec_20_the_node_answers_tokens_not_senders, test::engine_fixture) {
  auto cfg = test::test_config("tokens");
  cfg.hosts.push_back(test::test_host("hv1"));
  cfg.proxies.push_back(test::test_proxy("tk-1", "hv1"));
  cfg.inspect_secret = "correct horse battery staple";
  auto eng = engine::start(*sys, cfg);
  BOOST_REQUIRE(eng);
  test::stop_on_exit guard{eng};
  caf::scoped_actor self{*sys};
  auto node = eng->node();
  caf::error err;
  std::vector<actor_row> xs;
  auto ls = [&](const std::string& token) {
    err = caf::error{};
    xs.clear();
    self->request(node, 5s, atom::ls_v, token, ls_query{"proxy", "", true}, false)
      .receive([&](std::vector<actor_row>& r) { xs = std::move(r); },
               [&](caf::error& e) { err = std::move(e); });
  };
  ls("");
  BOOST_CHECK(err == ec::access_denied);
  ls("0123456789abcdef0123456789abcdef");
  BOOST_CHECK(err == ec::access_denied);
  // The hello, as a party that knows `secret`; `reuse` replays a node nonce.
  auto hello = [&](const std::string& secret, std::string reuse = {}) {
    auto mine = crypto::random_hex(16);
    std::string theirs, their_proof, token;
    self->request(node, 5s, atom::hello_v, mine)
      .receive(
        [&](std::string& n, std::string& p) {
          theirs = n;
          their_proof = p;
        },
        [&](caf::error& e) { BOOST_FAIL(render(e)); });
    // The node proves first, with the real secret.
    BOOST_CHECK(their_proof == admission::proof(cfg.inspect_secret, "node", mine, theirs));
    if (!reuse.empty())
      theirs = reuse;
    err = caf::error{};
    self->request(node, 5s, atom::hello_v, theirs, mine,
                  admission::proof(secret, "party", theirs, mine))
      .receive([&](std::string&, std::string& t) { token = t; },
               [&](caf::error& e) { err = std::move(e); });
    return std::pair{token, theirs};
  };
  auto [none, n1] = hello("correct horse battery stapler");
  BOOST_CHECK(none.empty() && err == ec::access_denied);
  auto [token, n2] = hello("correct horse battery staple");
  BOOST_REQUIRE_MESSAGE(!token.empty(), render(err));
  auto [replayed, n3] = hello("correct horse battery staple", n2);
  BOOST_CHECK(replayed.empty() && err == ec::access_denied);
  // A nonce this node never made (no valid MAC) is refused too.
  auto [forged, n4] = hello("correct horse battery staple", "00." + std::to_string(1) + ".00");
  BOOST_CHECK(forged.empty() && err == ec::access_denied);
  // Exit and error messages (which CAF handles before any token could be
  // looked at, and which any connected party can send) do not end it.
  caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
  caf::anon_send(caf::actor_cast<caf::actor>(node), make_error(ec::access_denied, "forged"));
  BOOST_REQUIRE(test::eventually([&] {
    ls(token);
    return !err && xs.size() == 1;
  }, 10s));
  BOOST_CHECK_EQUAL(xs[0].name, "tk-1");
  // Commands, status and reload take the same token.
  self->request(node, 5s, atom::kill_v, std::string{"bogus"}, std::string{"hv1"}, false)
    .receive([&](link_status&) { BOOST_FAIL("killed without a token"); },
             [&](caf::error& e) { BOOST_CHECK(e == ec::access_denied); });
  self->request(node, 5s, atom::status_v, std::string{})
    .receive([&](fleet_status&) { BOOST_FAIL("status without a token"); },
             [&](caf::error& e) { BOOST_CHECK(e == ec::access_denied); });
  self->request(node, 5s, atom::status_v, token)
    .receive([&](fleet_status& st) { BOOST_CHECK_EQUAL(st.entry, "tokens"); },
             [&](caf::error& e) { BOOST_FAIL(render(e)); });
}


// docs/spec.md 24: the hello bounds every field it reads (a 200 MB nonce
// cost 940 MB before anything was checked, and stayed as state).
BOOST_FIXTURE_TEST_CASE(spec_24_the_hello_bounds_every_field, test::engine_fixture) {
  auto cfg = test::test_config("bounds");
  cfg.hosts.push_back(test::test_host("hv1"));
  cfg.inspect_secret = "correct horse battery staple";
  auto eng = engine::start(*sys, cfg);
  BOOST_REQUIRE(eng);
  test::stop_on_exit guard{eng};
  caf::scoped_actor self{*sys};
  caf::error err;
  self->request(eng->node(), 5s, atom::hello_v, std::string(1 << 20, 'n'))
    .receive([](std::string&, std::string&) {}, [&](caf::error& e) { err = std::move(e); });
  BOOST_CHECK(is(err, ec::access_denied));
  BOOST_CHECK_MESSAGE(detail(err).find("at most 256") != std::string::npos, render(err));
  err = caf::error{};
  self->request(eng->node(), 5s, atom::hello_v, std::string(300, 'a'), std::string{"b"},
                std::string{"c"})
    .receive([](std::string&, std::string&) {}, [&](caf::error& e) { err = std::move(e); });
  BOOST_CHECK(is(err, ec::access_denied));
}
