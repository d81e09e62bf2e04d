// Who gets what from a host link's watch over its domains
// (actors/parts/domain_watch.hpp; docs/spec.md 27 and 28), with no actor
// system: the proxy handles are empty, the briefs are what is checked.
#define BOOST_TEST_MODULE domain_watch
#include <boost/test/unit_test.hpp>

#include <map>

#include "actors/parts/domain_watch.hpp"

using namespace egress;

namespace {

domain_brief running(std::string name) {
  domain_brief b;
  b.name = std::move(name);
  b.state = domain_state::running;
  return b;
}

std::map<std::string, domain_brief> by_name(std::vector<domain_watch::delivery> ds) {
  std::map<std::string, domain_brief> out;
  for (auto& [proxy, brief] : ds)
    out.emplace(brief.name, std::move(brief));
  return out;
}

address_watch said(std::string name, std::vector<std::string> macs, bool waiting) {
  return {std::move(name), std::move(macs), waiting};
}

} // namespace

BOOST_AUTO_TEST_CASE(spec_27_every_watcher_gets_a_brief_a_missing_domain_too_and_no_one_else) {
  domain_watch w;
  w.watch("p1", {});
  w.watch("p2", {});
  BOOST_REQUIRE(w.begin_read());
  domain_watch::reading read;
  read.taken = caf::timespan{1234};
  read.briefs = {running("p1"), running("stranger")};
  auto got = by_name(w.end_read(std::move(read)));
  BOOST_REQUIRE_EQUAL(got.size(), 2u);
  BOOST_CHECK(got["p1"].exists);
  BOOST_CHECK(!got["p2"].exists);
  BOOST_CHECK_EQUAL(got["p2"].taken.count(), 1234);
  BOOST_CHECK(got["p1"].leases == lease_view::not_read);
  BOOST_CHECK_EQUAL(w.bulk_reads(), 1u);
}

BOOST_AUTO_TEST_CASE(spec_27_one_bulk_read_at_a_time_and_one_more_if_asked_meanwhile) {
  domain_watch w;
  BOOST_CHECK(w.begin_read());
  BOOST_CHECK(!w.begin_read());
  BOOST_CHECK(!w.begin_read());
  w.end_read({});
  BOOST_CHECK(w.take_read_again());
  BOOST_CHECK(!w.take_read_again()); // once, however often it was asked
  BOOST_CHECK(w.begin_read());
  w.failed_read();
  BOOST_CHECK(w.begin_read()); // a failed read frees the slot
}

BOOST_AUTO_TEST_CASE(spec_28_leases_reach_the_proxies_whose_macs_are_known_ipv4_first) {
  domain_watch w;
  w.watch("p1", {});
  w.watch("p2", {});
  BOOST_CHECK(!w.with_leases()); // no MAC known: not asked
  auto a = said("p1", {"52:54:00:00:00:01"}, true);
  auto next = w.note(a);
  BOOST_CHECK(next.read_now);  // the first MACs on a host never read
  BOOST_CHECK(next.arm_lease); // it waits: the lease timer starts
  BOOST_CHECK(w.with_leases());
  BOOST_REQUIRE(w.begin_read());
  domain_watch::reading read;
  read.briefs = {running("p1"), running("p2")};
  read.leases = lease_view::read;
  read.lease_list = {{"52:54:00:00:00:01", "fd00::5"}, {"52:54:00:00:00:01", "10.0.0.5"},
                     {"52:54:00:00:00:09", "10.0.0.9"}};
  auto got = by_name(w.end_read(std::move(read)));
  BOOST_CHECK(got["p1"].leases == lease_view::read);
  BOOST_CHECK((got["p1"].addresses == std::vector<std::string>{"10.0.0.5", "fd00::5"}));
  BOOST_CHECK(got["p2"].leases == lease_view::not_read); // it said no MACs
  BOOST_CHECK(got["p2"].addresses.empty());
  BOOST_CHECK_EQUAL(w.lease_reads(), 1u);
  // Leases read once: new MACs of another proxy wait for the next read.
  auto b = said("p2", {"52:54:00:00:00:02"}, false);
  BOOST_CHECK(!w.note(b).read_now);
}

BOOST_AUTO_TEST_CASE(spec_28_a_host_without_lease_lists_is_not_asked_again_until_it_redials) {
  domain_watch w;
  w.watch("p1", {});
  auto a = said("p1", {"52:54:00:00:00:01"}, true);
  w.note(a);
  BOOST_REQUIRE(w.begin_read());
  domain_watch::reading read;
  read.briefs = {running("p1")};
  read.leases = lease_view::unsupported;
  auto got = by_name(w.end_read(std::move(read)));
  BOOST_CHECK(got["p1"].leases == lease_view::unsupported);
  BOOST_CHECK(!w.with_leases());
  BOOST_CHECK(!w.arm_lease()); // its proxies poll their own
  w.dialed();
  BOOST_CHECK(w.with_leases());
  BOOST_CHECK(w.leases() == lease_view::not_read);
}

BOOST_AUTO_TEST_CASE(spec_28_the_lease_timer_runs_while_a_proxy_waits_one_at_a_time) {
  domain_watch w;
  w.watch("p1", {});
  BOOST_CHECK(!w.arm_lease()); // no one waits
  auto waits = said("p1", {"52:54:00:00:00:01"}, true);
  w.note(waits);
  BOOST_CHECK(w.arm_lease());
  BOOST_CHECK(!w.arm_lease()); // armed already
  BOOST_CHECK(w.lease_fired()); // still waiting: read
  auto done = said("p1", {"52:54:00:00:00:01"}, false);
  w.note(done);
  BOOST_CHECK(!w.arm_lease());
  BOOST_CHECK(!w.lease_fired());
}

BOOST_AUTO_TEST_CASE(spec_27_events_of_an_older_or_dead_dial_are_dropped_but_counted) {
  domain_watch w;
  w.watch("p1", {});
  domain_event ev{"hv1", "p1", domain_change::stopped, 3};
  BOOST_CHECK(w.route(ev, 3, false));
  BOOST_CHECK(!w.route(ev, 4, false)); // of an older dial
  BOOST_CHECK(!w.route(ev, 3, true));  // the dial is dead
  ev.name = "unwatched";
  BOOST_CHECK(!w.route(ev, 3, false));
  BOOST_CHECK_EQUAL(w.events(), 4u);
  BOOST_CHECK(w.forget_if([](const proxy_actor&) { return true; }));
  BOOST_CHECK(w.empty());
}
