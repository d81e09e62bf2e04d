#pragma once
// A deterministic actor-system fixture for Boost.Test.
//
// CAF's own test DSL (caf/test/dsl.hpp) crashes under Boost.Test: its macros
// reach for CAF's test runner, which does not exist here (docs/notes/caf-0.17.md#deterministic-tests-under-boost). This
// fixture drives scheduler::test_coordinator directly: scheduled actors run
// only when the test says so, on the test's thread, and request timeouts fire
// when the test advances the virtual clock. Detached actors (the engine's
// blocking calls) still run on their own threads, so run_until() polls.

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <thread>
#include <tuple>

#include <boost/test/results_collector.hpp>
#include <boost/test/unit_test.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scheduled_actor.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include "base/log.hpp"
#include "runtime/engine.hpp"

namespace egress::test {

struct det_fixture {
  static caf::actor_system_config& init(caf::actor_system_config& cfg) {
    cfg.set("scheduler.policy", caf::atom("testing"));
    cfg.set("logger.file-verbosity", caf::atom("quiet"));
    egress::configure(cfg);
    return cfg;
  }

  caf::actor_system_config cfg;
  caf::actor_system sys{init(cfg)};
  caf::scheduler::test_coordinator& sched
    = dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());

  det_fixture() { log::set_level(log::level::error); }
  ~det_fixture() {
    // A failed BOOST_REQUIRE skipped the test's own exit messages: its actors
    // live on, and the actor system's shutdown would wait for them for ever
    // (or, told not to, run their periodic timers for ever in virtual time).
    // The suite ends here, failed, instead of hanging until ctest's timeout.
    if (!current_test_passed()) {
      std::cout << "det_fixture: the test failed with its actors still running; "
                   "the rest of this suite is not run" << std::endl;
      std::cerr.flush();
      std::_Exit(1);
    }
    sched.run();
  }

  /// Runs scheduled actors until `pred()` holds or `max` real time passed.
  template <class Pred>
  bool run_until(Pred pred, std::chrono::milliseconds max = std::chrono::seconds(5)) {
    auto deadline = std::chrono::steady_clock::now() + max;
    for (;;) {
      sched.run();
      if (pred())
        return true;
      if (std::chrono::steady_clock::now() > deadline)
        return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  /// The state of a typed stateful actor. Only safe while the scheduler is
  /// idle, which in this fixture is whenever the test code runs.
  template <class State, class Handle>
  State& state_of(const Handle& h) {
    using pointer = typename Handle::template stateful_pointer<State>;
    auto ptr = dynamic_cast<pointer>(caf::actor_cast<caf::abstract_actor*>(h));
    BOOST_REQUIRE(ptr != nullptr);
    return ptr->state;
  }

  /// Expects that the next message of `to` comes from `from` and holds Ts,
  /// lets `to` process it, and returns the content.
  template <class... Ts, class From, class To>
  std::tuple<Ts...> expect_msg(const From& from, const To& to) {
    BOOST_REQUIRE(sched.prioritize(to));
    auto& job = sched.next_job<caf::scheduled_actor>();
    auto ptr = job.mailbox().peek();
    BOOST_REQUIRE(ptr != nullptr);
    BOOST_REQUIRE(ptr->sender == caf::actor_cast<caf::strong_actor_ptr>(from));
    BOOST_REQUIRE((ptr->content().template match_elements<Ts...>()));
    std::tuple<Ts...> result;
    fill(result, ptr->content(), std::index_sequence_for<Ts...>{});
    sched.run_once();
    return result;
  }

private:
  static bool current_test_passed() {
    using namespace boost::unit_test;
    return results_collector.results(framework::current_test_case().p_id).passed();
  }

  template <class Tup, size_t... Is>
  static void fill(Tup& t, const caf::type_erased_tuple& m, std::index_sequence<Is...>) {
    ((std::get<Is>(t) = m.get_as<std::tuple_element_t<Is, Tup>>(Is)), ...);
  }
};

} // namespace egress::test
