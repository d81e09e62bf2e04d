#define BOOST_TEST_MODULE fleet_view
// The fleet's view of its actors (actors/parts/fleet_view.hpp), without actors:
// what a sequence of pushes makes of the status, the watch events and the
// Prometheus text.
#include <boost/test/unit_test.hpp>

#include <string>
#include <vector>

#include "actors/parts/fleet_view.hpp"

using namespace egress;

namespace {

link_status link(const std::string& host, link_state state, uint64_t deaths = 0,
                 std::string reason = {}) {
  link_status s;
  s.host = host;
  s.state = state;
  s.deaths = deaths;
  s.reason = std::move(reason);
  return s;
}

proxy_status proxy(const std::string& name, proxy_phase phase, std::string address = {},
                   uint64_t polls = 0, uint32_t poll_ms = 0) {
  proxy_status s;
  s.name = name;
  s.host = "hv1";
  s.phase = phase;
  s.address = std::move(address);
  s.polls = polls;
  s.last_poll_ms = poll_ms;
  return s;
}

proxy_health health(const std::string& name, bool in, uint64_t ok, uint32_t ms = 0) {
  proxy_health h;
  h.name = name;
  h.host = "hv1";
  h.in_rotation = in;
  h.probes_ok = ok;
  h.probe_ms = ms;
  h.last_probe = "ok in " + std::to_string(ms) + " ms (HTTP 200)";
  return h;
}

proxy_spec spec(const std::string& name, std::vector<std::string> tags = {}) {
  proxy_spec p;
  p.name = name;
  p.host = "hv1";
  p.port = 3128;
  p.tags = std::move(tags);
  return p;
}

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos;
}

} // namespace

BOOST_AUTO_TEST_CASE(events_are_built_only_for_a_watcher_and_only_for_changes) {
  fleet_view v;
  BOOST_CHECK(v.record(link("hv1", link_state::up), false).empty());
  auto ev = v.record(link("hv1", link_state::dead, 1, "killed: by operator"), true);
  BOOST_REQUIRE_EQUAL(ev.size(), 1u);
  BOOST_CHECK_EQUAL(ev[0].kind, "link");
  BOOST_CHECK_EQUAL(ev[0].name, "hv1");
  BOOST_CHECK_EQUAL(ev[0].what, "dead: killed: by operator");
  BOOST_CHECK(v.record(link("hv1", link_state::dead, 1, "killed: by operator"), true).empty());
  auto p = v.record(proxy("px-1", proxy_phase::running, "10.0.0.5"), true);
  BOOST_REQUIRE_EQUAL(p.size(), 1u);
  BOOST_CHECK_EQUAL(p[0].what, "running at 10.0.0.5");
  auto moved = v.record(proxy("px-1", proxy_phase::provisioning), true);
  BOOST_REQUIRE_EQUAL(moved.size(), 1u);
  BOOST_CHECK_EQUAL(moved[0].what, "running -> provisioning");
  v.declare_proxy(spec("px-1"));
  auto joined = v.record(health("px-1", true, 2, 7), true);
  BOOST_REQUIRE_EQUAL(joined.size(), 1u);
  BOOST_CHECK_EQUAL(joined[0].kind, "rotation");
  BOOST_CHECK(joined[0].what.starts_with("joined"));
}

// The rotation its consumers see (GET /rotation, the gateway): a declared
// proxy its health put in, with its spec's port and tags; every join and
// leave is one generation; a retiring proxy is out whatever its probes say.
BOOST_AUTO_TEST_CASE(spec_29_the_rotation_has_a_generation_per_join_and_leave) {
  fleet_view v;
  v.record(health("px-1", true, 2, 7), false); // not declared: not in it
  BOOST_CHECK_EQUAL(v.rotation().size(), 0u);
  v.declare_proxy(spec("px-1", {"eu"}));
  v.declare_proxy(spec("px-2"));
  auto h1 = health("px-1", true, 2, 7);
  h1.address = "10.0.0.5:3128";
  auto ev = v.record(h1, true);
  BOOST_REQUIRE_EQUAL(ev.size(), 1u);
  BOOST_CHECK_MESSAGE(ev[0].what.starts_with("joined at 10.0.0.5:3128, tags eu, generation 1 (ok "),
                      ev[0].what);
  h1.probe_ms = 9; // a latency alone is no generation
  BOOST_CHECK(v.record(h1, true).empty());
  auto h2 = health("px-2", true, 2, 3);
  h2.address = "[fd00::6]:3128";
  v.record(h2, false);
  auto snap = v.rotation().snapshot("n");
  BOOST_CHECK_EQUAL(snap->generation, 2u);
  BOOST_REQUIRE_EQUAL(snap->members.size(), 2u);
  BOOST_CHECK_EQUAL(snap->members[0].address, "10.0.0.5");
  BOOST_CHECK_EQUAL(snap->members[0].port, 3128u);
  BOOST_CHECK_EQUAL(snap->members[0].probe_ms, 9u);
  BOOST_CHECK(snap->members[0].tags == std::vector<std::string>{"eu"});
  BOOST_CHECK_EQUAL(snap->members[1].address, "fd00::6");
  BOOST_CHECK_EQUAL(snap->members[0].joined_at.size(), 20u);
  auto left = v.set_retiring("px-1", true, true);
  BOOST_REQUIRE_EQUAL(left.size(), 1u);
  BOOST_CHECK(left[0].what.starts_with("left, generation 3 (retiring"));
  BOOST_CHECK(v.record(h1, true).empty()); // its probes pass: still out
  BOOST_CHECK(v.status("n", "e").rotation == std::vector<std::string>{"px-2"});
  BOOST_CHECK(has_line(v.metrics(), "egress_rotation_generation 3"));
  v.set_retiring("px-1", false);
  BOOST_CHECK_EQUAL(v.rotation().generation(), 4u);
  v.undeclare_proxy("px-2");
  BOOST_CHECK_EQUAL(v.rotation().generation(), 5u);
  BOOST_CHECK(v.clear_rotation(true).size() == 1u); // px-1 leaves
  BOOST_CHECK_EQUAL(v.rotation().size(), 0u);
}

BOOST_AUTO_TEST_CASE(status_joins_each_proxy_with_its_health_and_lists_the_rotation) {
  fleet_view v;
  v.declare_proxy(spec("px-1"));
  v.declare_proxy(spec("px-2"));
  v.record(proxy("px-1", proxy_phase::running, "10.0.0.5"), false);
  v.record(proxy("px-2", proxy_phase::running, "10.0.0.6"), false);
  v.record(health("px-1", true, 3, 9), false);
  v.record(health("px-2", false, 0), false);
  auto st = v.status("node-a", "lab");
  BOOST_CHECK_EQUAL(st.node, "node-a");
  BOOST_CHECK_EQUAL(st.entry, "lab");
  BOOST_REQUIRE_EQUAL(st.proxies.size(), 2u);
  BOOST_CHECK(st.proxies[0].in_rotation);
  BOOST_CHECK_EQUAL(st.proxies[0].probes_ok, 3u);
  BOOST_CHECK(!st.proxies[1].in_rotation);
  BOOST_CHECK(st.rotation == std::vector<std::string>{"px-1"});
  v.forget_proxy("px-1");
  BOOST_CHECK_EQUAL(v.status("node-a", "lab").proxies.size(), 1u);
  BOOST_CHECK(v.health().count("px-1") == 0);
}

BOOST_AUTO_TEST_CASE(reloads_are_counted_and_a_refusal_is_kept_as_the_last_word) {
  fleet_view v;
  v.reload_applied("proxies +1 -0 ~0");
  v.reload_rejected("permanent/config_invalid: x");
  auto st = v.status("n", "e");
  BOOST_CHECK_EQUAL(st.reloads, 1u);
  BOOST_CHECK_EQUAL(st.last_reload, "rejected: permanent/config_invalid: x");
  BOOST_CHECK(has_line(v.metrics(), "egress_reloads_total 1"));
}

BOOST_AUTO_TEST_CASE(metrics_count_deaths_by_cause_and_declared_proxies_only) {
  fleet_view v;
  v.record(link("hv1", link_state::up), false);
  v.record(link("hv1", link_state::dead, 1, "budget overrun: define ran past 30s"), false);
  v.record(link("hv1", link_state::dead, 3, "killed: by operator"), false);
  v.declare_proxy(spec("px-1"));
  v.record(proxy("px-1", proxy_phase::running, "10.0.0.5", 1, 20), false);
  v.record(proxy("px-1", proxy_phase::running, "10.0.0.5", 2, 40), false);
  v.record(proxy("gone", proxy_phase::deleted), false); // erased: not declared
  v.record(health("px-1", true, 1, 8), false);
  auto text = v.metrics();
  BOOST_TEST_MESSAGE(text);
  BOOST_CHECK(has_line(text, "egress_link_state{host=\"hv1\",state=\"dead\"} 1"));
  BOOST_CHECK(has_line(text, "egress_link_deaths_total{host=\"hv1\",cause=\"budget_overrun\"} 1"));
  BOOST_CHECK(has_line(text, "egress_link_deaths_total{host=\"hv1\",cause=\"killed\"} 2"));
  BOOST_CHECK(has_line(text, "egress_proxies{phase=\"running\"} 1"));
  BOOST_CHECK(has_line(text, "egress_proxies{phase=\"deleted\"} 0"));
  BOOST_CHECK(has_line(text, "egress_rotation_size 1"));
  BOOST_CHECK(has_line(text, "egress_reconcile_duration_seconds_count 2"));
  BOOST_CHECK(has_line(text, "egress_reconcile_duration_seconds_bucket{le=\"0.025\"} 1"));
  BOOST_CHECK(has_line(text, "egress_probe_duration_seconds_count 1"));
}

BOOST_AUTO_TEST_CASE(label_values_are_escaped) {
  fleet_view v;
  v.record(link("h\"v\\1", link_state::up), false);
  BOOST_CHECK(v.metrics().find("host=\"h\\\"v\\\\1\"") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(spawn_times_are_kept_for_the_directory) {
  fleet_view v;
  BOOST_CHECK(v.spawned_at("link/hv1").empty());
  v.spawned("link/hv1");
  BOOST_CHECK_EQUAL(v.spawned_at("link/hv1").size(), 20u); // 2026-12-03T14:12:42Z
}
