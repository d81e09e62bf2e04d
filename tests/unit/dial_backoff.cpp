// When a dead link may dial again (actors/parts/dial_backoff.hpp,
// docs/spec.md 18): exponential from the shortest wait, half of it random,
// capped; a link that dies before serving counts as a failed dial; a call
// served starts it over.
#define BOOST_TEST_MODULE dial_backoff
#include <boost/test/unit_test.hpp>

#include "actors/parts/dial_backoff.hpp"

using namespace egress;
using namespace std::chrono_literals;

namespace {

// The wait lies in [base / 2, base].
void check_within(dial_backoff& b, caf::timespan base) {
  for (int i = 0; i < 50; ++i) {
    auto w = b.wait();
    BOOST_REQUIRE_GE(w.count(), base.count() / 2);
    BOOST_REQUIRE_LE(w.count(), base.count());
  }
}

} // namespace

BOOST_AUTO_TEST_CASE(spec_18_the_wait_doubles_per_failure_half_of_it_jitter_up_to_the_cap) {
  dial_backoff b{500ms, 4s, 42};
  check_within(b, 500ms); // no failure yet
  b.failed();
  check_within(b, 500ms); // the first failure waits the shortest
  b.failed();
  check_within(b, 1s);
  b.failed();
  check_within(b, 2s);
  for (int i = 0; i < 10; ++i)
    b.failed();
  check_within(b, 4s);
}

BOOST_AUTO_TEST_CASE(spec_18_a_link_dying_before_it_serves_counts_as_a_failed_dial) {
  dial_backoff b{500ms, 30s, 1};
  auto now = dial_backoff::clock::now();
  for (uint32_t i = 1; i <= 3; ++i) {
    b.dialed();
    b.came_up();
    b.died(now, true);
    BOOST_CHECK_EQUAL(b.failures(), i);
  }
  BOOST_CHECK_EQUAL(b.dials(), 3u);
  BOOST_CHECK_EQUAL(b.deaths(), 3u);
  b.came_up();
  b.served();
  BOOST_CHECK_EQUAL(b.failures(), 0u);
  b.died(now, true); // it had served: not a failed dial
  BOOST_CHECK_EQUAL(b.failures(), 0u);
  b.died(now, false); // died dialing: the dial's own failure counted it
  BOOST_CHECK_EQUAL(b.failures(), 0u);
}

BOOST_AUTO_TEST_CASE(spec_18_a_dial_is_not_due_until_the_backoff_ends) {
  dial_backoff b{1s, 30s, 7};
  auto now = dial_backoff::clock::now();
  BOOST_CHECK_EQUAL(b.not_due_for(now).count(), 0); // never died: due
  auto at = b.died(now, false);
  BOOST_CHECK_GE(b.not_due_for(now).count(), caf::timespan{500ms}.count());
  BOOST_CHECK_EQUAL(b.not_due_for(at).count(), 0);
  b.due_now();
  BOOST_CHECK_EQUAL(b.not_due_for(now).count(), 0);
}
