#define BOOST_TEST_MODULE proxy_reconcile
// An operator's reconcile (caf-shell's `reconcile`) on the deterministic
// scheduler, against a link the test answers by hand: the read it asks for
// is the one that begins after it, and that read's result reaches status
// even when nothing in it changed (actors/proxy.cpp, poll).
#include <boost/test/unit_test.hpp>

#include <string>
#include <utility>
#include <vector>

#include <caf/event_based_actor.hpp>
#include <caf/stateful_actor.hpp>

#include "actors/proxy.hpp"
#include "messages/error.hpp"
#include "testbed/det_fixture.hpp"

using namespace egress;
using namespace std::chrono_literals;

namespace {

using fail_atom = caf::atom_constant<caf::atom("fail")>;
using answer_atom = caf::atom_constant<caf::atom("answer")>;

// Holds every call it gets until the test answers it: (fail, error) fails
// the oldest (a promise is delivered from inside its actor only; an error
// alone would be taken for the actor's own error message).
struct held_link_state {
  std::vector<std::pair<std::string, caf::response_promise>> calls;
};

caf::behavior held_link(caf::stateful_actor<held_link_state>* self) {
  return {
    [self](atom::call, call_job& job) {
      self->state.calls.emplace_back(job.what, self->make_response_promise());
      return self->state.calls.back().second;
    },
    [self](fail_atom, caf::error& err) {
      auto& calls = self->state.calls;
      if (calls.empty())
        return;
      calls.front().second.deliver(std::move(err));
      calls.erase(calls.begin());
    },
    [self](answer_atom, domain_reading& r) {
      auto& calls = self->state.calls;
      if (calls.empty())
        return;
      calls.front().second.deliver(call_result{std::any{std::move(r)}});
      calls.erase(calls.begin());
    },
    [](atom::subscribe, const std::string&, const proxy_actor&) {},
    [](const address_watch&) {},
  };
}

// Keeps every status a proxy pushes.
struct status_log_state {
  std::vector<proxy_status> pushed;
};

caf::behavior status_log(caf::stateful_actor<status_log_state>* self) {
  return {
    [self](proxy_status& s) { self->state.pushed.push_back(std::move(s)); },
  };
}

struct fixture : test::det_fixture {
  caf::actor link = sys.spawn(held_link);
  caf::actor sink = sys.spawn(status_log);
  proxy_actor proxy;

  fixture() {
    proxy_options opts;
    opts.spec.name = "px";
    opts.spec.host = "hv1";
    opts.entry = "unit";
    opts.domain_type = "test";
    opts.poll_interval = 1h; // reads only when asked or told
    opts.link = caf::actor_cast<host_link_actor>(link);
    opts.sink = caf::actor_cast<status_sink_actor>(sink);
    proxy = sys.spawn(make_proxy, opts);
    sched.run();
  }
  ~fixture() {
    caf::anon_send_exit(proxy, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(link, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(sink, caf::exit_reason::user_shutdown);
  }

  std::vector<std::pair<std::string, caf::response_promise>>& calls() {
    return dynamic_cast<caf::stateful_actor<held_link_state>&>(
             *caf::actor_cast<caf::abstract_actor*>(link))
      .state.calls;
  }
  const std::vector<proxy_status>& pushed() {
    return dynamic_cast<caf::stateful_actor<status_log_state>&>(
             *caf::actor_cast<caf::abstract_actor*>(sink))
      .state.pushed;
  }
  // The link's first bulk read finds no domain: the proxy asks to create it.
  void begin_create() {
    domain_brief missing;
    missing.name = "px";
    missing.exists = false;
    missing.taken = std::chrono::steady_clock::now().time_since_epoch();
    caf::anon_send(proxy, missing);
    sched.run();
  }
  // Fails the call the link holds (there must be exactly one), as a host
  // whose libvirt keeps failing the same way would.
  void fail_held_call(const std::string& what) {
    BOOST_REQUIRE_EQUAL(calls().size(), 1u);
    BOOST_REQUIRE_EQUAL(calls().front().first, what);
    auto busy = make_error(ec::libvirt_transient, "hv1: the host is busy");
    caf::anon_send(link, fail_atom::value, std::move(busy));
    sched.run();
  }
};

} // namespace

BOOST_FIXTURE_TEST_SUITE(proxy_reconcile_suite, fixture)

// A reconcile that arrives while a create is in flight: the create's end
// must not use up the push, or the read after it (which changes nothing
// worth a push here: the same error again) never shows in status.
BOOST_AUTO_TEST_CASE(a_reconcile_during_a_step_shows_the_read_after_it) {
  begin_create();
  BOOST_REQUIRE_EQUAL(calls().size(), 1u);
  BOOST_REQUIRE_EQUAL(calls().front().first, "create px");

  caf::anon_send(proxy, atom::reconcile_v);
  sched.run();
  BOOST_CHECK_EQUAL(calls().size(), 1u); // it waits for the create

  fail_held_call("create px");
  BOOST_REQUIRE(!pushed().empty());
  BOOST_CHECK_EQUAL(pushed().back().polls, 0u); // the create's end, pushed
  auto pushes = pushed().size();

  fail_held_call("read px");
  BOOST_REQUIRE_EQUAL(pushed().size(), pushes + 1);
  BOOST_CHECK_EQUAL(pushed().back().polls, 1u);
  BOOST_CHECK(calls().empty()); // one read, no more
}

// Asked while idle: the read begins at once and its result is pushed; a
// later read nobody asked for that changes nothing is not.
BOOST_AUTO_TEST_CASE(a_reconcile_while_idle_pushes_its_read_and_only_it) {
  begin_create();
  fail_held_call("create px");
  auto pushes = pushed().size();

  caf::anon_send(proxy, atom::reconcile_v);
  sched.run();
  fail_held_call("read px");
  BOOST_REQUIRE_EQUAL(pushed().size(), pushes + 1);
  BOOST_CHECK_EQUAL(pushed().back().polls, 1u);

  caf::anon_send(proxy, atom::poll_v);
  sched.run();
  fail_held_call("read px");
  BOOST_CHECK_EQUAL(pushed().size(), pushes + 1);
}

// A reconcile's read that finds the domain gone goes straight on to create
// it: the sink gets one status for it (the create begun), not that one
// twice (the read's answer pushed again after the create's begin had).
BOOST_AUTO_TEST_CASE(a_reconcile_read_that_leads_to_a_create_pushes_once) {
  begin_create();
  fail_held_call("create px");
  auto pushes = pushed().size();

  caf::anon_send(proxy, atom::reconcile_v);
  sched.run();
  BOOST_REQUIRE_EQUAL(calls().size(), 1u);
  BOOST_REQUIRE_EQUAL(calls().front().first, "read px");
  domain_reading gone;
  gone.name = "px";
  gone.exists = false;
  caf::anon_send(link, answer_atom::value, std::move(gone));
  sched.run();
  BOOST_REQUIRE_EQUAL(calls().size(), 1u);
  BOOST_CHECK_EQUAL(calls().front().first, "create px");
  BOOST_CHECK_EQUAL(pushed().size(), pushes + 1);
  BOOST_CHECK_EQUAL(pushed().back().polls, 1u);
}

BOOST_AUTO_TEST_SUITE_END()
