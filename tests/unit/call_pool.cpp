// The host link's call pool (actors/parts/call_pool.hpp) with no actor
// system: integers for workers and promises, lazy connections that are never
// opened. What it promises the link (docs/spec.md 26): at most max_calls in
// flight, first come first served, a worker reused once it answered and
// never once forgotten, a connection per call where `connections` is
// max_calls and one shared where it is 1, and everything handed over at
// once when the link dies.
#define BOOST_TEST_MODULE call_pool
#include <boost/test/unit_test.hpp>

#include <random>
#include <set>
#include <string>

#include "actors/parts/call_pool.hpp"
#include "providers/libvirt/connection.hpp"

using namespace egress;

namespace {

using pool_type = basic_call_pool<int, std::string>;

call_job job_named(std::string what) {
  return {std::move(what), [](lv::connection&) -> caf::expected<std::any> { return std::any{}; }};
}

pool_type::connection_ptr unopened() {
  return std::make_shared<lv::lazy_connection>("test:///default", lv::keepalive{});
}

// Starts the next admitted call on a worker (`w`) and a connection the pool
// picks; returns its id.
std::optional<uint64_t> start_next(pool_type& pool, int w) {
  auto call = pool.admit();
  if (!call)
    return std::nullopt;
  auto conn = pool.take_connection(unopened);
  pool.start(call->id, std::move(call->rp), w, conn, call->job.create);
  return call->id;
}

call_job create_named(std::string what) {
  auto job = job_named(std::move(what));
  job.create = true;
  return job;
}

} // namespace

BOOST_AUTO_TEST_CASE(spec_26_the_pool_admits_at_most_max_calls_first_come_first_served) {
  pool_type pool{{3, 3, 0, 0}};
  for (int i = 0; i < 5; ++i)
    pool.enqueue(job_named("call " + std::to_string(i)), "caller " + std::to_string(i));
  std::vector<std::string> order;
  while (auto call = pool.admit()) {
    order.push_back(call->rp);
    pool.start(call->id, call->rp, static_cast<int>(call->id), pool.take_connection(unopened));
  }
  BOOST_CHECK_EQUAL(order.size(), 3u);
  BOOST_CHECK_EQUAL(order.front(), "caller 0");
  BOOST_CHECK_EQUAL(order.back(), "caller 2");
  BOOST_CHECK_EQUAL(pool.in_flight(), 3u);
  BOOST_CHECK_EQUAL(pool.queued(), 2u);
  auto done = pool.finish(1);
  BOOST_REQUIRE(done);
  BOOST_CHECK_EQUAL(done->rp, "caller 1");
  auto next = pool.admit();
  BOOST_REQUIRE(next);
  BOOST_CHECK_EQUAL(next->rp, "caller 3");
  BOOST_CHECK(!pool.finish(1)); // a call given up (or done) is not there twice
}

BOOST_AUTO_TEST_CASE(spec_26_calls_at_once_each_take_a_connection_of_their_own_up_to_the_limit) {
  pool_type pool{{3, 3, 0, 0}};
  pool.add_connection(unopened()); // the dial's
  for (int i = 0; i < 3; ++i)
    pool.enqueue(job_named("c"), "r");
  std::set<pool_type::connection_ptr> seen;
  for (int w = 0; w < 3; ++w) {
    auto call = pool.admit();
    auto conn = pool.take_connection(unopened);
    seen.insert(conn);
    pool.start(call->id, call->rp, w, conn);
  }
  BOOST_CHECK_EQUAL(seen.size(), 3u);
  BOOST_CHECK_EQUAL(pool.connections(), 3u);
  // One ends: the next call takes the connection it freed, no fourth.
  pool.finish(0);
  pool.enqueue(job_named("c"), "r");
  auto id = start_next(pool, 9);
  BOOST_REQUIRE(id);
  BOOST_CHECK_EQUAL(pool.connections(), 3u);
  BOOST_CHECK((pool.connection_load() == std::vector<uint32_t>{1, 1, 1}));
}

BOOST_AUTO_TEST_CASE(spec_26_calls_share_the_dials_connection_where_libvirt_allows_it) {
  pool_type pool{{4, 1, 0, 0}};
  auto dial = unopened();
  pool.add_connection(dial);
  for (int i = 0; i < 4; ++i) {
    pool.enqueue(job_named("c"), "r");
    auto call = pool.admit();
    auto conn = pool.take_connection([]() -> pool_type::connection_ptr {
      BOOST_FAIL("a second connection was opened");
      return nullptr;
    });
    BOOST_CHECK(conn == dial);
    pool.start(call->id, call->rp, i, conn);
  }
  BOOST_CHECK((pool.connection_load() == std::vector<uint32_t>{4}));
}

BOOST_AUTO_TEST_CASE(spec_26_a_worker_is_reused_once_it_answered_and_never_once_forgotten) {
  pool_type pool{{2, 2, 0, 0}};
  BOOST_CHECK(!pool.idle_worker()); // none yet: the link starts one
  pool.add_worker(7);
  pool.add_worker(8);
  pool.return_worker(7);
  pool.return_worker(8);
  // Worker 8's thread ended (its down message): it is not handed out again,
  // and a late answer of it does not bring it back.
  BOOST_CHECK(pool.forget_worker_if([](int w) { return w == 8; }));
  pool.return_worker(8);
  auto w = pool.idle_worker();
  BOOST_REQUIRE(w);
  BOOST_CHECK_EQUAL(*w, 7);
  BOOST_CHECK(!pool.idle_worker());
  BOOST_CHECK_EQUAL(pool.workers()->size(), 1u);
  BOOST_CHECK_EQUAL(pool.workers_started(), 2u);
  BOOST_CHECK(!pool.forget_worker_if([](int w) { return w == 99; }));
}

BOOST_AUTO_TEST_CASE(spec_26_workers_idle_a_whole_interval_quit_but_the_one_used_last) {
  pool_type pool{{5, 5, 0, 0}};
  for (int w : {1, 2, 3})
    pool.add_worker(w);
  for (int w : {1, 2, 3})
    pool.return_worker(w);
  // Idle since before no sweep: not yet a whole interval.
  BOOST_CHECK(pool.sweep_idle(1).empty());
  // Worker 3 takes a call and answers; 1 and 2 stayed idle the whole interval.
  auto busy = pool.idle_worker();
  BOOST_REQUIRE(busy);
  BOOST_CHECK_EQUAL(*busy, 3);
  pool.return_worker(3);
  auto gone = pool.sweep_idle(1);
  BOOST_CHECK((std::set<int>(gone.begin(), gone.end()) == std::set<int>{1, 2}));
  // They are not handed out again; 3 is, then nothing idle is left.
  auto w = pool.idle_worker();
  BOOST_REQUIRE(w);
  BOOST_CHECK_EQUAL(*w, 3);
  BOOST_CHECK(!pool.idle_worker());
  // A pool at rest keeps the one used last however many sweeps pass.
  pool.return_worker(3);
  for (int i = 0; i < 3; ++i)
    BOOST_CHECK(pool.sweep_idle(1).empty());
  BOOST_CHECK(pool.idle_worker());
  // Their down messages take them out of the pool.
  BOOST_CHECK(pool.forget_worker_if([](int x) { return x == 1 || x == 2; }));
  BOOST_CHECK_EQUAL(pool.workers()->size(), 1u);
}

BOOST_AUTO_TEST_CASE(spec_02_a_dead_link_hands_over_every_caller_worker_and_connection_at_once) {
  pool_type pool{{2, 2, 0, 0}};
  pool.add_connection(unopened());
  for (int i = 0; i < 5; ++i)
    pool.enqueue(job_named("c"), "caller " + std::to_string(i));
  start_next(pool, 1);
  start_next(pool, 2);
  auto held = pool.release_all();
  BOOST_CHECK_EQUAL(held.callers.size(), 5u);   // two running, three queued
  BOOST_CHECK((held.workers == std::vector<int>{1, 2})); // to be retired
  BOOST_CHECK_EQUAL(held.connections.size(), 2u);        // for the kill to close
  BOOST_CHECK_EQUAL(pool.in_flight(), 0u);
  BOOST_CHECK_EQUAL(pool.queued(), 0u);
  BOOST_CHECK_EQUAL(pool.connections(), 0u);
  BOOST_CHECK(!pool.finish(0)); // the answer of an abandoned call finds nothing
}

BOOST_AUTO_TEST_CASE(spec_26_the_abandoned_cap_is_twice_max_calls_unless_set) {
  pool_type twice{{5, 1, 0, 0}};
  BOOST_CHECK_EQUAL(twice.abandoned_cap(), 10u);
  BOOST_CHECK(!twice.over_abandoned_cap(9));
  BOOST_CHECK(twice.over_abandoned_cap(10));
  pool_type set{{5, 1, 3, 0}};
  BOOST_CHECK(set.over_abandoned_cap(3));
}

BOOST_AUTO_TEST_CASE(spec_36_creates_past_max_creates_wait_and_other_calls_pass_them) {
  pool_type pool{{5, 5, 0, 2}};
  for (int i = 0; i < 4; ++i)
    pool.enqueue(create_named("create px-" + std::to_string(i)), "create " + std::to_string(i));
  pool.enqueue(job_named("read px-0"), "read");
  std::vector<std::string> order;
  std::vector<uint64_t> ids;
  while (auto call = pool.admit()) {
    order.push_back(call->rp);
    ids.push_back(call->id);
    pool.start(call->id, call->rp, static_cast<int>(call->id), pool.take_connection(unopened),
               call->job.create);
  }
  // Two creates, then the read passes the two that wait.
  BOOST_CHECK((order == std::vector<std::string>{"create 0", "create 1", "read"}));
  BOOST_CHECK_EQUAL(pool.creates(), 2u);
  BOOST_CHECK_EQUAL(pool.queued(), 2u);
  BOOST_REQUIRE(pool.finish(ids[0]));
  auto next = pool.admit();
  BOOST_REQUIRE(next);
  BOOST_CHECK_EQUAL(next->rp, "create 2");
  // Without a limit of their own, creates take every slot.
  pool_type open{{5, 5, 0, 0}};
  for (int i = 0; i < 6; ++i)
    open.enqueue(create_named("create"), "c");
  int admitted = 0;
  while (auto call = open.admit()) {
    open.start(call->id, call->rp, admitted, open.take_connection(unopened), true);
    ++admitted;
  }
  BOOST_CHECK_EQUAL(admitted, 5);
}

// Seeded random interleavings of enqueue, admit and finish: never more than
// max_calls in flight nor max_creates creates, never more connections than
// the limit, and with a connection per call never two calls on one.
BOOST_AUTO_TEST_CASE(spec_26_random_interleavings_keep_the_limits) {
  for (unsigned seed = 1; seed <= 200; ++seed) {
    std::minstd_rand rng{seed};
    uint32_t max_calls = 1 + rng() % 6;
    uint32_t connections = (rng() % 2 == 0) ? 1 : max_calls;
    uint32_t max_creates = rng() % 3;
    pool_type pool{{max_calls, connections, 0, max_creates}};
    pool.add_connection(unopened());
    std::vector<uint64_t> running;
    size_t enqueued = 0, finished = 0;
    for (int step = 0; step < 300; ++step) {
      switch (rng() % 3) {
        case 0:
          pool.enqueue(rng() % 2 == 0 ? job_named("c") : create_named("v"), "r");
          ++enqueued;
          break;
        case 1:
          if (auto id = start_next(pool, static_cast<int>(step)))
            running.push_back(*id);
          break;
        default:
          if (!running.empty()) {
            auto i = rng() % running.size();
            BOOST_REQUIRE(pool.finish(running[i]));
            running.erase(running.begin() + static_cast<long>(i));
            ++finished;
          }
      }
      BOOST_REQUIRE_LE(pool.in_flight(), max_calls);
      if (max_creates > 0)
        BOOST_REQUIRE_LE(pool.creates(), max_creates);
      BOOST_REQUIRE_LE(pool.connections(), connections);
      BOOST_REQUIRE_EQUAL(pool.in_flight() + pool.queued() + finished, enqueued);
      if (connections == max_calls)
        for (auto load : pool.connection_load())
          BOOST_REQUIRE_LE(load, 1u);
    }
  }
}
