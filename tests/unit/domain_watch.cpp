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

namespace {

domain_brief with_uuid(domain_brief b, std::string uuid) {
  b.uuid = std::move(uuid);
  return b;
}

std::map<std::string, domain_brief> read_of(domain_watch& w, std::vector<domain_brief> briefs,
                                            lease_view leases = lease_view::not_read,
                                            std::vector<lv::lease> lease_list = {}) {
  BOOST_REQUIRE(w.begin_read());
  domain_watch::reading read;
  read.briefs = std::move(briefs);
  read.leases = leases;
  read.lease_list = std::move(lease_list);
  return by_name(w.end_read(std::move(read)));
}

} // namespace

BOOST_AUTO_TEST_CASE(spec_27_a_running_domain_is_told_again_only_with_news) {
  domain_watch w;
  w.watch("p1", {});
  w.watch("p2", {});
  w.watch("p3", {});
  auto first = std::vector<domain_brief>{with_uuid(running("p1"), "u1"),
                                         with_uuid(running("p2"), "u2")};
  BOOST_CHECK_EQUAL(read_of(w, first).size(), 3u); // p3 missing: told too
  // Nothing new: the missing one is told again, the running ones not.
  auto again = read_of(w, first);
  BOOST_CHECK_EQUAL(again.size(), 1u);
  BOOST_CHECK(again.count("p3") == 1 && !again["p3"].exists);
  BOOST_CHECK_EQUAL(w.briefs_unchanged(), 2u);
  // A state, a uuid: news.
  auto paused = running("p1");
  paused.state = domain_state::paused;
  auto changed = read_of(w, {with_uuid(paused, "u1"), with_uuid(running("p2"), "u9")});
  BOOST_CHECK_EQUAL(changed.size(), 3u);
  // Paused is not running: told every time.
  BOOST_CHECK_EQUAL(read_of(w, {with_uuid(paused, "u1"), with_uuid(running("p2"), "u9")}).size(),
                    2u);
  // A new dial tells everyone again; so does a proxy that replaced another.
  w.dialed();
  auto settled = std::vector<domain_brief>{with_uuid(running("p1"), "u1"),
                                           with_uuid(running("p2"), "u9")};
  BOOST_CHECK_EQUAL(read_of(w, settled).size(), 3u);
  BOOST_CHECK_EQUAL(read_of(w, settled).size(), 1u);
  w.watch("p2", {});
  auto replaced = read_of(w, settled);
  BOOST_CHECK_EQUAL(replaced.size(), 2u);
  BOOST_CHECK(replaced.count("p2") == 1);
}

BOOST_AUTO_TEST_CASE(spec_28_a_waiting_proxy_gets_every_brief_and_a_moved_lease_is_news) {
  domain_watch w;
  w.watch("p1", {});
  auto waits = said("p1", {"52:54:00:00:00:01"}, true);
  w.note(waits);
  std::vector<lv::lease> none;
  auto brief = std::vector<domain_brief>{with_uuid(running("p1"), "u1")};
  // Each read without an address counts for its IP grace: never left out.
  BOOST_CHECK_EQUAL(read_of(w, brief, lease_view::read, none).size(), 1u);
  BOOST_CHECK_EQUAL(read_of(w, brief, lease_view::read, none).size(), 1u);
  auto done = said("p1", {"52:54:00:00:00:01"}, false);
  w.note(done);
  std::vector<lv::lease> at5 = {{"52:54:00:00:00:01", "10.0.0.5"}};
  BOOST_CHECK_EQUAL(read_of(w, brief, lease_view::read, at5).size(), 1u);
  BOOST_CHECK(read_of(w, brief, lease_view::read, at5).empty());
  std::vector<lv::lease> at6 = {{"52:54:00:00:00:01", "10.0.0.6"}};
  auto moved = read_of(w, brief, lease_view::read, at6);
  BOOST_REQUIRE_EQUAL(moved.size(), 1u);
  BOOST_CHECK((moved["p1"].addresses == std::vector<std::string>{"10.0.0.6"}));
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
