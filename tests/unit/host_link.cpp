// host_link on the deterministic scheduler: budgets fired by the virtual
// clock, dead-before-kill ordering, admission limit, no blocking on a
// scheduler thread.
#define BOOST_TEST_MODULE host_link
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include <dlfcn.h>
#include <pthread.h>

#include <caf/event_based_actor.hpp>

#include "actors/host_link.hpp"
#include "actors/parts/transport_choice.hpp"
#include "messages/error.hpp"
#include "providers/libvirt/connection.hpp"
#include "testbed/det_fixture.hpp"
#include "testbed/test_transport.hpp"

using namespace egress;
using namespace std::chrono_literals;

// Every thread this test binary starts (a link's workers and dials, CAF's
// own), counted by interposing pthread_create: the executable's definition
// comes before libc's for every caller in the process.
std::atomic<int> threads_created{0};

extern "C" int pthread_create(pthread_t* thread, const pthread_attr_t* attr,
                              void* (*start)(void*), void* arg) {
  using real_fn = int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
  static auto real = reinterpret_cast<real_fn>(::dlsym(RTLD_NEXT, "pthread_create"));
  threads_created.fetch_add(1);
  return real(thread, attr, start, arg);
}

namespace {

struct fixture : test::det_fixture {
  std::shared_ptr<test::kill_probe> probe = std::make_shared<test::kill_probe>();

  host_link_actor spawn_link(caf::timespan budget = 1s, uint32_t limit = 5,
                             uint32_t connections = 1, status_sink_actor sink = {},
                             host_fence_ptr fence = nullptr) {
    // The engine's defaults, as a config without these keys gives them.
    host_config h;
    h.name = "hv1";
    h.uri = "test:///default";
    h.max_calls = limit;
    h.call_budget = budget;
    h.connect_timeout = 5s;
    auto o = link_options_of(h, engine_config{});
    o.connections = connections;
    o.sink = std::move(sink);
    o.fence = std::move(fence);
    o.make_transport = test::test_transports("test:///default", probe);
    auto link = sys.spawn(make_host_link, std::move(o));
    BOOST_REQUIRE(run_until([&] { return link_of(link).state == link_state::up; }));
    return link;
  }

  // A link (30 s budget, 3 calls) whose sink keeps every link_status it
  // pushes, once its push of "up" has arrived.
  struct logged_link {
    std::shared_ptr<std::vector<link_status>> pushes;
    status_sink_actor sink;
    host_link_actor link;
  };
  logged_link spawn_logged_link() {
    auto pushes = std::make_shared<std::vector<link_status>>();
    auto sink = sys.spawn([pushes]() -> status_sink_actor::behavior_type {
      return {
        [pushes](link_status& s) { pushes->push_back(std::move(s)); },
        [](proxy_status&) {},
        [](image_status&) {},
        [](proxy_health&) {},
        [](gateway_status&) {},
        [](atom::superseded, const std::string&, int64_t) {},
      };
    });
    auto link = spawn_link(30s, 3, 1, sink);
    BOOST_REQUIRE(run_until([&] {
      return !pushes->empty() && pushes->back().state == link_state::up;
    }));
    return {pushes, sink, link};
  }

  host_link_state& link_of(const host_link_actor& h) {
    return state_of<host_link_state>(h);
  }

  // A job that blocks until the transport is killed, as a libvirt call on a
  // dead host blocks until the bridge's kill.
  call_job blocked_job(std::shared_ptr<std::atomic<bool>> finished) {
    call_job job;
    job.what = "stuck-call";
    job.fn = [probe = probe, finished](lv::connection&) -> caf::expected<std::any> {
      probe->killed.wait_for(30s);
      *finished = true;
      return std::any{};
    };
    return job;
  }

  // A job wedged in something the link's kill cannot free, until released.
  static call_job wedged_job(std::shared_ptr<std::atomic<bool>> release) {
    call_job job;
    job.what = "wedged-call";
    job.fn = [release](lv::connection&) -> caf::expected<std::any> {
      for (int i = 0; i < 3000 && !release->load(); ++i)
        std::this_thread::sleep_for(10ms);
      return std::any{};
    };
    return job;
  }

  struct outcome {
    bool done = false;
    caf::error err;
  };

  // Spawns a requester that sends `job` to `link` and records the outcome.
  std::shared_ptr<outcome> request_call(const host_link_actor& link, call_job job,
                                        caf::timespan timeout = 10s) {
    auto out = std::make_shared<outcome>();
    sys.spawn([=](caf::event_based_actor* self) {
      self->request(link, timeout, atom::call_v, job)
        .then([=](call_result&) { out->done = true; },
              [=](caf::error& err) {
                out->done = true;
                out->err = err;
              });
    });
    return out;
  }

  // Redials the dead link at once (its backoff skipped) and runs a wedged
  // call past its 1 s budget: the link dies again, one more abandoned call.
  // `abandoned` wedged calls run from before; the death before may still be
  // cleaning up (its kill, a connection's close: abandoned too, and counted
  // against the redial cap until they end by themselves): it waits for that.
  void overrun_once(const host_link_actor& link, std::shared_ptr<std::atomic<bool>> release,
                    size_t abandoned) {
    BOOST_REQUIRE(
      run_until([&] { return link_of(link).calls.abandoned_running() == abandoned; }));
    link_of(link).backoff.due_now();
    auto wedged = request_call(link, wedged_job(std::move(release)));
    BOOST_REQUIRE(run_until([&] { return link_of(link).pool.in_flight() == 1; }));
    sched.advance_time(1s);
    BOOST_REQUIRE(run_until([&] { return wedged->done; }));
    BOOST_CHECK(wedged->err == ec::budget_exceeded);
  }
};

} // namespace

BOOST_FIXTURE_TEST_SUITE(host_link_suite, fixture)

BOOST_AUTO_TEST_CASE(spec_03_budget_overrun_fails_caller_transient_and_kills_link) {
  auto link = spawn_link(1s);
  auto finished = std::make_shared<std::atomic<bool>>(false);
  auto out = request_call(link, blocked_job(finished));
  BOOST_REQUIRE(run_until([&] { return link_of(link).pool.in_flight() == 1; }));
  // The call is stuck in its detached actor. Advance the virtual clock past
  // the budget: the link's request times out.
  sched.advance_time(1s);
  BOOST_REQUIRE(run_until([&] { return out->done; }));
  BOOST_CHECK(out->err == ec::budget_exceeded);
  BOOST_CHECK(kind_of(out->err) == error_kind::transient);
  BOOST_CHECK_MESSAGE(render(out->err).find("stuck-call ran past its 1s budget") != std::string::npos,
                      render(out->err));
  BOOST_CHECK(link_of(link).state == link_state::dead);
  BOOST_CHECK(link_of(link).reason.find("budget overrun") != std::string::npos);
  // The kill is what unblocks the abandoned call: its thread ends.
  BOOST_CHECK(probe->killed.wait_for(5s));
  BOOST_CHECK(run_until([&] { return finished->load(); }));
  BOOST_CHECK_EQUAL(probe->kills.load(), 1);
  // The link stays responsive: a status request is answered at once, and a
  // call during the redial backoff fails fast instead of hanging.
  auto later = request_call(link, call_job{"next", [](lv::connection&) -> caf::expected<std::any> {
                                             return std::any{};
                                           }});
  BOOST_REQUIRE(run_until([&] { return later->done; }));
  BOOST_CHECK(later->err == ec::link_down || !later->err);
  anon_send_exit(link, caf::exit_reason::user_shutdown);
}

// `caf-shell ls calls`: a call the kill cannot free (a job blocked in
// something other than the transport) stays listed as abandoned with its
// thread still running, and the status counts it, until the thread ends.
BOOST_AUTO_TEST_CASE(spec_21_an_abandoned_call_stays_listed_until_its_thread_ends) {
  auto link = spawn_link(1s);
  auto release = std::make_shared<std::atomic<bool>>(false);
  auto out = request_call(link, wedged_job(release));
  BOOST_REQUIRE(run_until([&] { return link_of(link).pool.in_flight() == 1; }));
  auto calls = [&] { return link_of(link).calls.rows(); };
  auto find = [&](const std::vector<actor_row>& xs, const std::string& what) {
    for (auto& e : xs)
      for (auto& d : e.details)
        if (d == "call: " + what)
          return std::optional<actor_row>{e};
    return std::optional<actor_row>{};
  };
  auto running = find(calls(), "wedged-call");
  BOOST_REQUIRE(running);
  BOOST_CHECK(running->kind == actor_kind::call);
  BOOST_CHECK_EQUAL(running->state, "running");
  BOOST_CHECK(running->name.rfind("hv1#", 0) == 0);
  sched.advance_time(1s);
  BOOST_REQUIRE(run_until([&] { return out->done; }));
  BOOST_CHECK(out->err == ec::budget_exceeded);
  auto abandoned = find(calls(), "wedged-call");
  BOOST_REQUIRE(abandoned);
  BOOST_CHECK_EQUAL(abandoned->state, "abandoned, thread still running");
  BOOST_CHECK(std::any_of(abandoned->details.begin(), abandoned->details.end(), [](auto& d) {
    return d.find("ran past its 1s budget") != std::string::npos;
  }));
  auto st = link_of(link).snapshot();
  BOOST_CHECK_EQUAL(st.overruns, 1u);
  BOOST_CHECK_GE(st.abandoned_calls, 1u);
  release->store(true);
  BOOST_REQUIRE(run_until([&] {
    auto e = find(calls(), "wedged-call");
    return e && e->state == "abandoned, thread ended";
  }));
  BOOST_CHECK(run_until([&] { return link_of(link).snapshot().abandoned_calls == 0; }));
  anon_send_exit(link, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_CASE(spec_04_libvirt_calls_never_run_on_a_scheduler_thread) {
  // In this fixture every scheduled actor runs on the test's own thread, so a
  // job that ran there would have run on the scheduler.
  auto link = spawn_link();
  auto job_thread = std::make_shared<std::thread::id>();
  auto out = request_call(link, call_job{"whoami", [job_thread](lv::connection& c) -> caf::expected<std::any> {
                                           *job_thread = std::this_thread::get_id();
                                           (void) c;
                                           return std::any{};
                                         }});
  BOOST_REQUIRE(run_until([&] { return out->done; }));
  BOOST_CHECK(!out->err);
  BOOST_CHECK(*job_thread != std::thread::id{});
  BOOST_CHECK(*job_thread != std::this_thread::get_id());
  anon_send_exit(link, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_CASE(admission_limit_queues_calls_beyond_max_calls) {
  auto link = spawn_link(30s, 2);
  auto finished = std::make_shared<std::atomic<bool>>(false);
  std::vector<std::shared_ptr<outcome>> outs;
  for (int i = 0; i < 4; ++i)
    outs.push_back(request_call(link, blocked_job(finished), 60s));
  BOOST_REQUIRE(run_until([&] {
    return link_of(link).pool.in_flight() == 2 && link_of(link).pool.queued() == 2;
  }));
  // A kill fails the two running and the two queued callers alike.
  auto killer = sys.spawn([=](caf::event_based_actor* self) {
    self->request(link, 5s, atom::kill_v, std::string{"test"})
      .then([](link_status&) {}, [](caf::error&) {});
  });
  BOOST_REQUIRE(run_until([&] {
    return std::all_of(outs.begin(), outs.end(), [](auto& o) { return o->done; });
  }));
  for (auto& o : outs) {
    BOOST_CHECK(o->err == ec::link_down);
    BOOST_CHECK(render(o->err).find("killed: test") != std::string::npos);
  }
  anon_send_exit(link, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_CASE(dead_link_redials_on_next_call_after_backoff) {
  auto link = spawn_link();
  auto killer = sys.spawn([=](caf::event_based_actor* self) {
    self->request(link, 5s, atom::kill_v, std::string{"test"})
      .then([](link_status&) {}, [](caf::error&) {});
  });
  BOOST_REQUIRE(run_until([&] { return link_of(link).state == link_state::dead; }));
  // Pretend the backoff has passed: the next call dials again and succeeds.
  link_of(link).backoff.due_now();
  auto out = request_call(link, call_job{"after", [](lv::connection& c) -> caf::expected<std::any> {
                                           return std::any{c.alive()};
                                         }});
  BOOST_REQUIRE(run_until([&] { return out->done; }));
  BOOST_CHECK_MESSAGE(!out->err, render(out->err));
  BOOST_CHECK(link_of(link).state == link_state::up);
  BOOST_CHECK_EQUAL(link_of(link).backoff.dials(), 2u);
  anon_send_exit(link, caf::exit_reason::user_shutdown);
}

// In a cluster the fence is checked on the worker right before each call
// runs (actors/parts/host_fence.hpp): a node whose lease is not confirmed
// young enough, or that lost the host, sends libvirt nothing. Without the
// check in actors/host_link.cpp the call after the deadline runs.
BOOST_AUTO_TEST_CASE(spec_37_a_call_past_its_fence_s_deadline_is_refused) {
  auto fence = std::make_shared<host_fence>();
  fence->open_until(host_fence::clock::now() + 1h);
  auto link = spawn_link(1s, 5, 1, {}, fence);
  auto ran = std::make_shared<std::atomic<int>>(0);
  auto job = [ran] {
    return call_job{"mutate", [ran](lv::connection&) -> caf::expected<std::any> {
                      ++*ran;
                      return std::any{true};
                    }};
  };
  auto open = request_call(link, job());
  BOOST_REQUIRE(run_until([&] { return open->done; }));
  BOOST_CHECK_MESSAGE(!open->err, render(open->err));
  BOOST_CHECK_EQUAL(ran->load(), 1);
  // The deadline passed (a keepalive not confirmed, a SIGSTOP): nothing runs.
  fence->open_until(host_fence::clock::now() - 1ms);
  auto late = request_call(link, job());
  BOOST_REQUIRE(run_until([&] { return late->done; }));
  BOOST_CHECK(is(late->err, ec::fenced));
  BOOST_CHECK(kind_of(late->err) == error_kind::transient);
  BOOST_CHECK_EQUAL(ran->load(), 1);
  BOOST_CHECK_EQUAL(fence->refusals(), 1u);
  // Open again (the lease confirmed): calls run.
  fence->open_until(host_fence::clock::now() + 1h);
  auto again = request_call(link, job());
  BOOST_REQUIRE(run_until([&] { return again->done; }));
  BOOST_CHECK_EQUAL(ran->load(), 2);
  anon_send_exit(link, caf::exit_reason::user_shutdown);
}

// Found by the soak (`build/soak --bed vms --hosts 2 --proxies 4 --minutes 30
// --seed 33`): reloads had left no proxy on hv1 when its link died, and the
// link stayed dead to the end, a healthy host shown dead, since only a call
// or a watched domain redialed it. No call and no watcher here.
BOOST_AUTO_TEST_CASE(spec_18_soak_seed_33_a_dead_link_without_proxies_redials_by_itself) {
  auto link = spawn_link();
  auto killer = sys.spawn([=](caf::event_based_actor* self) {
    self->request(link, 5s, atom::kill_v, std::string{"test"})
      .then([](link_status&) {}, [](caf::error&) {});
  });
  BOOST_REQUIRE(run_until([&] { return link_of(link).state == link_state::dead; }));
  BOOST_REQUIRE(link_of(link).watch.empty());
  // The backoff (real time) is over; its timer (virtual time) fires.
  link_of(link).backoff.due_now();
  sched.advance_time(link_of(link).opts.redial_max);
  BOOST_CHECK(run_until([&] { return link_of(link).state == link_state::up; }));
  BOOST_CHECK_EQUAL(link_of(link).backoff.dials(), 2u);
  anon_send_exit(link, caf::exit_reason::user_shutdown);
}

// 100 calls, 5 at a time, on a link with a limit of 3: they run on at most
// 3 threads, made once, not one thread per call.
BOOST_AUTO_TEST_CASE(spec_26_calls_run_on_a_pool_of_workers_not_a_thread_each) {
  auto link = spawn_link(30s, 3);
  auto mutex = std::make_shared<std::mutex>();
  auto ids = std::make_shared<std::set<std::thread::id>>();
  auto before = threads_created.load();
  for (int round = 0; round < 20; ++round) {
    std::vector<std::shared_ptr<outcome>> outs;
    for (int i = 0; i < 5; ++i)
      outs.push_back(request_call(link, call_job{"whoami", [=](lv::connection&) -> caf::expected<std::any> {
                                                   std::lock_guard<std::mutex> guard{*mutex};
                                                   ids->insert(std::this_thread::get_id());
                                                   return std::any{};
                                                 }}));
    BOOST_REQUIRE(run_until([&] {
      return std::all_of(outs.begin(), outs.end(), [](auto& o) { return o->done; });
    }));
    for (auto& o : outs)
      BOOST_CHECK_MESSAGE(!o->err, render(o->err));
  }
  BOOST_CHECK_LE(threads_created.load() - before, 3);
  BOOST_CHECK_LE(ids->size(), 3u);
  BOOST_CHECK_LE(link_of(link).pool.workers_started(), 3u);
  BOOST_CHECK(link_of(link).calls.rows().empty()); // answered calls are not listed
  anon_send_exit(link, caf::exit_reason::user_shutdown);
}

namespace {

// Records the connection each call ran on; each call waits (up to 5 s) until
// `together` calls are inside their jobs at once.
struct connection_log {
  std::mutex mtx;
  std::set<const lv::connection*> seen;
  std::atomic<int> inside{0};

  call_job job(int together) {
    return call_job{"which-connection", [this, together](lv::connection& c)
                                          -> caf::expected<std::any> {
                      {
                        std::lock_guard<std::mutex> guard{mtx};
                        seen.insert(&c);
                      }
                      inside.fetch_add(1);
                      for (int i = 0; i < 500 && inside.load() < together; ++i)
                        std::this_thread::sleep_for(10ms);
                      return std::any{};
                    }};
  }
};

// Runs `rounds` rounds of `together` calls at once on `link`.
void run_rounds(fixture& f, const host_link_actor& link, connection_log& log, int rounds,
                int together) {
  for (int round = 0; round < rounds; ++round) {
    log.inside = 0;
    std::vector<std::shared_ptr<fixture::outcome>> outs;
    for (int i = 0; i < together; ++i)
      outs.push_back(f.request_call(link, log.job(together)));
    BOOST_REQUIRE(f.run_until([&] {
      return std::all_of(outs.begin(), outs.end(), [](auto& o) { return o->done; });
    }));
    for (auto& o : outs)
      BOOST_CHECK_MESSAGE(!o->err, render(o->err));
  }
}

} // namespace

// Where libvirt's client must not carry two calls at once (before 10.4.0,
// CVE-2024-4418), the link has a connection per call it runs at once: three
// calls inside their jobs together are on three connections, opened once
// and kept (ten more rounds open none); the dial's is one of them.
BOOST_AUTO_TEST_CASE(spec_26_calls_at_once_each_have_a_connection_of_their_own) {
  auto link = spawn_link(30s, 3, 3);
  BOOST_CHECK_EQUAL(link_of(link).pool.connections(), 1u); // the dial's
  connection_log log;
  run_rounds(*this, link, log, 1, 3);
  BOOST_CHECK_EQUAL(log.seen.size(), 3u);
  run_rounds(*this, link, log, 10, 3);
  BOOST_CHECK_EQUAL(log.seen.size(), 3u);
  BOOST_CHECK_EQUAL(link_of(link).pool.connections(), 3u);
  BOOST_CHECK_EQUAL(link_of(link).snapshot().connections, 3u);
  anon_send_exit(link, caf::exit_reason::user_shutdown);
}

// Where it may, the calls share the dial's one connection; and a link that
// runs one call at a time never opens a second.
BOOST_AUTO_TEST_CASE(spec_26_calls_share_one_connection_where_libvirt_allows_it) {
  auto shared = spawn_link(30s, 3, 1);
  connection_log log;
  run_rounds(*this, shared, log, 3, 3);
  BOOST_CHECK_EQUAL(log.seen.size(), 1u);
  anon_send_exit(shared, caf::exit_reason::user_shutdown);
  auto serial = spawn_link(30s, 3, 3);
  connection_log one;
  run_rounds(*this, serial, one, 5, 1);
  BOOST_CHECK_EQUAL(one.seen.size(), 1u);
  BOOST_CHECK_EQUAL(link_of(serial).pool.connections(), 1u);
  anon_send_exit(serial, caf::exit_reason::user_shutdown);
}

namespace {

call_job thread_id_job(std::shared_ptr<std::thread::id> out) {
  return call_job{"whoami", [out](lv::connection&) -> caf::expected<std::any> {
                    *out = std::this_thread::get_id();
                    return std::any{};
                  }};
}

} // namespace

// A worker stuck past its budget is abandoned (listed, still running) and
// replaced: after the redial the next call runs on another worker.
BOOST_AUTO_TEST_CASE(spec_26_a_worker_past_its_budget_is_replaced) {
  auto link = spawn_link(1s, 1);
  auto first = std::make_shared<std::thread::id>();
  auto out = request_call(link, thread_id_job(first));
  BOOST_REQUIRE(run_until([&] { return out->done; }));
  auto release = std::make_shared<std::atomic<bool>>(false);
  auto wedged = request_call(link, wedged_job(release));
  BOOST_REQUIRE(run_until([&] { return link_of(link).pool.in_flight() == 1; }));
  sched.advance_time(1s);
  BOOST_REQUIRE(run_until([&] { return wedged->done; }));
  BOOST_CHECK(wedged->err == ec::budget_exceeded);
  BOOST_CHECK(run_until([&] { return link_of(link).calls.abandoned_running() == 1; }));
  link_of(link).backoff.due_now();
  auto second = std::make_shared<std::thread::id>();
  auto next = request_call(link, thread_id_job(second));
  BOOST_REQUIRE(run_until([&] { return next->done; }));
  BOOST_CHECK_MESSAGE(!next->err, render(next->err));
  BOOST_CHECK(*second != *first); // the first worker is still stuck
  BOOST_CHECK_EQUAL(link_of(link).pool.workers_started(), 2u); // the stuck one was replaced
  BOOST_CHECK_EQUAL(link_of(link).calls.abandoned_running(), 1u);
  release->store(true);
  BOOST_CHECK(run_until([&] { return link_of(link).calls.abandoned_running() == 0; }));
  anon_send_exit(link, caf::exit_reason::user_shutdown);
}

// Past twice its limit of abandoned calls still running, the link stays dead
// rather than redial and abandon more; once they end, it serves again.
BOOST_AUTO_TEST_CASE(spec_26_too_many_abandoned_calls_keep_the_link_dead) {
  auto link = spawn_link(1s, 1); // cap 2
  auto release = std::make_shared<std::atomic<bool>>(false);
  for (size_t i = 0; i < 2; ++i)
    overrun_once(link, release, i);
  // The death abandons whatever of the link still runs: besides the wedged
  // call, a cleanup of the death before (its kill, a connection's close) may
  // not have ended yet. It ends by itself; the wedged calls stay.
  BOOST_REQUIRE(run_until([&] { return link_of(link).calls.abandoned_running() == 2; }));
  auto dials = link_of(link).backoff.dials();
  link_of(link).backoff.due_now();
  auto refused = request_call(link, thread_id_job(std::make_shared<std::thread::id>()));
  BOOST_REQUIRE(run_until([&] { return refused->done; }));
  BOOST_CHECK(refused->err == ec::link_down);
  BOOST_CHECK_MESSAGE(render(refused->err).find("2 abandoned calls still running (cap 2)")
                        != std::string::npos,
                      render(refused->err));
  BOOST_CHECK_EQUAL(link_of(link).backoff.dials(), dials); // no redial
  release->store(true);
  BOOST_REQUIRE(run_until([&] { return link_of(link).calls.abandoned_running() == 0; }));
  auto served = request_call(link, thread_id_job(std::make_shared<std::thread::id>()));
  BOOST_REQUIRE(run_until([&] { return served->done; }));
  BOOST_CHECK_MESSAGE(!served->err, render(served->err));
  anon_send_exit(link, caf::exit_reason::user_shutdown);
}

// A link that comes up and dies before it serves a call (a resync past its
// budget on a host too loaded to answer it) backs off further each time;
// before, coming up reset the backoff and such a host was redialed at the
// shortest backoff forever. A call served resets it.
BOOST_AUTO_TEST_CASE(spec_18_a_link_dying_before_it_serves_backs_off_further_each_time) {
  auto link = spawn_link(1s, 5);
  auto release = std::make_shared<std::atomic<bool>>(false);
  for (uint32_t i = 1; i <= 3; ++i) {
    overrun_once(link, release, i - 1);
    BOOST_CHECK_EQUAL(link_of(link).backoff.failures(), i);
  }
  // Three in a row: 4 times the shortest backoff (500 ms), half of it jitter.
  auto wait = link_of(link).backoff.not_due_for(host_link_state::clock::now());
  BOOST_CHECK_MESSAGE(wait > 900ms, std::chrono::duration<double>(wait).count() << " s");
  release->store(true);
  BOOST_REQUIRE(run_until([&] { return link_of(link).calls.abandoned_running() == 0; }));
  link_of(link).backoff.due_now();
  auto served = request_call(link, thread_id_job(std::make_shared<std::thread::id>()));
  BOOST_REQUIRE(run_until([&] { return served->done; }));
  BOOST_CHECK_MESSAGE(!served->err, render(served->err));
  BOOST_CHECK_EQUAL(link_of(link).backoff.failures(), 0u);
  anon_send_exit(link, caf::exit_reason::user_shutdown);
}

// The link's call counts change twice per call; its sink (the fleet, which
// hands each push on to the health actor) hears of them once per
// counts_delay, not per call, while a change of state is pushed at once.
// Before: 40 calls made over 80 pushes.
BOOST_AUTO_TEST_CASE(spec_26_call_counts_are_pushed_once_per_delay_not_per_call) {
  auto [pushes, sink, link] = spawn_logged_link();
  auto at_up = pushes->size();
  for (int round = 0; round < 20; ++round) {
    std::vector<std::shared_ptr<outcome>> outs;
    for (int i = 0; i < 2; ++i)
      outs.push_back(request_call(link, call_job{"count-me", [](lv::connection&) {
                                                   return caf::expected<std::any>{std::any{}};
                                                 }}));
    BOOST_REQUIRE(run_until([&] {
      return std::all_of(outs.begin(), outs.end(), [](auto& o) { return o->done; });
    }));
  }
  // The virtual clock stood still: the counts' push is still due.
  BOOST_CHECK_EQUAL(pushes->size(), at_up);
  sched.advance_time(link_of(link).opts.counts_delay);
  BOOST_REQUIRE(run_until([&] { return pushes->size() > at_up; }));
  BOOST_CHECK_EQUAL(pushes->size(), at_up + 1);
  BOOST_CHECK_EQUAL(pushes->back().in_flight, 0u); // what holds now, not a stale count
  BOOST_CHECK_EQUAL(pushes->back().queued, 0u);
  // A death is pushed at once, however recent the last push.
  auto killer = sys.spawn([=](caf::event_based_actor* self) {
    self->request(link, 5s, atom::kill_v, std::string{"test"})
      .then([](link_status&) {}, [](caf::error&) {});
  });
  BOOST_CHECK(run_until([&] { return pushes->back().state == link_state::dead; }));
  anon_send_exit(link, caf::exit_reason::user_shutdown);
  anon_send_exit(sink, caf::exit_reason::user_shutdown);
}

// A domain event is counted in the link's status, and the count reaches the
// sink within the counts' delay though no call follows it (a host at rest).
// Before: it waited for the link's next push of another kind.
BOOST_AUTO_TEST_CASE(spec_26_a_domain_events_count_is_pushed_without_a_call) {
  auto [pushes, sink, link] = spawn_logged_link();
  // Whatever push the dial left due goes first: the link is at rest then.
  sched.advance_time(link_of(link).opts.counts_delay);
  sched.run();
  auto events = pushes->back().events;
  auto at_up = pushes->size();
  caf::anon_send(link, domain_event{"hv1", "nobody-watches", domain_change::started, 0});
  sched.run();
  BOOST_CHECK_EQUAL(pushes->size(), at_up); // not at once: with the counts
  sched.advance_time(link_of(link).opts.counts_delay);
  BOOST_REQUIRE(run_until([&] { return pushes->size() > at_up; }));
  BOOST_CHECK_EQUAL(pushes->back().events, events + 1);
  anon_send_exit(link, caf::exit_reason::user_shutdown);
  anon_send_exit(sink, caf::exit_reason::user_shutdown);
}

BOOST_AUTO_TEST_SUITE_END()
