// The soak's checker (soak/checker.hpp) on made-up observations: it
// must see each broken promise, and only those a fault does not excuse (a
// checker that never fires would make every soak pass).
#define BOOST_TEST_MODULE soak_checker
#include <boost/test/unit_test.hpp>

#include "soak/checker.hpp"

using namespace egress;
using namespace egress::soak;
using namespace std::chrono_literals;

namespace {

proxy_status proxy(const std::string& name, const std::string& host, bool in_rotation) {
  proxy_status p;
  p.name = name;
  p.host = host;
  p.phase = proxy_phase::running;
  p.address = "10.0.0.1";
  p.in_rotation = in_rotation;
  return p;
}

fleet_status fleet(std::initializer_list<proxy_status> ps) {
  fleet_status st;
  st.proxies = ps;
  return st;
}

domain_reading domain(const std::string& name) {
  domain_reading d;
  d.name = name;
  d.exists = true;
  return d;
}

const auto t0 = clock_type::now();

} // namespace

BOOST_AUTO_TEST_CASE(a_proxy_leaving_the_rotation_unexcused_is_a_violation) {
  checker c{6, 90};
  c.on_status(fleet({proxy("a", "hv0", true), proxy("b", "hv1", true)}), 0.01, t0, 1);
  c.on_status(fleet({proxy("a", "hv0", false), proxy("b", "hv1", true)}), 0.01, t0 + 1s, 2);
  BOOST_REQUIRE_EQUAL(c.violations().size(), 1u);
  BOOST_TEST(c.violations()[0].what.find("a on hv0 left the rotation") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_held_host_its_proxy_or_a_restart_excuses_the_leave_until_the_grace_ends) {
  checker c{6, 90};
  auto in = fleet({proxy("a", "hv0", true), proxy("b", "hv1", true), proxy("d", "hv2", true)});
  auto out = fleet({proxy("a", "hv0", false), proxy("b", "hv1", false), proxy("d", "hv2", true)});
  c.excuse_host("hv0", t0 + 10s);
  c.excuse_proxy("b", t0 + 10s);
  c.on_status(in, 0.01, t0, 1);
  c.on_status(out, 0.01, t0 + 5s, 2); // both excused
  BOOST_TEST(c.violations().empty());
  c.on_status(in, 0.01, t0 + 6s, 3);
  c.on_status(out, 0.01, t0 + 11s, 4); // both excuses over
  BOOST_TEST(c.violations().size() == 2u);
  c.restart(t0 + 30s);
  c.on_status(in, 0.01, t0 + 12s, 5);
  c.on_status(out, 0.01, t0 + 13s, 6);
  BOOST_TEST(c.violations().size() == 2u);
}

BOOST_AUTO_TEST_CASE(a_status_held_past_the_bound_is_a_violation) {
  checker c{6, 90};
  c.on_status(fleet({}), 5.9, t0, 1);
  BOOST_TEST(c.violations().empty());
  c.on_status(fleet({}), 6.5, t0, 2);
  c.on_status_failed("request_timeout", 10, 3);
  BOOST_TEST(c.violations().size() == 2u);
}

BOOST_AUTO_TEST_CASE(an_undeclared_domain_of_ours_is_a_violation_once_past_the_bound) {
  checker c{6, 90};
  c.on_host("hv0", {domain("a"), domain("x")}, {"a"}, t0, 1);
  c.on_host("hv0", {domain("a"), domain("x")}, {"a"}, t0 + 89s, 90);
  BOOST_TEST(c.violations().empty());
  c.on_host("hv0", {domain("a"), domain("x")}, {"a"}, t0 + 91s, 92);
  c.on_host("hv0", {domain("a"), domain("x")}, {"a"}, t0 + 95s, 96);
  BOOST_REQUIRE_EQUAL(c.violations().size(), 1u); // reported once
  BOOST_TEST(c.violations()[0].what.find("domain x on hv0") != std::string::npos);
  // Gone and back: its clock starts again.
  c.on_host("hv1", {domain("y")}, {}, t0, 1);
  c.on_host("hv1", {}, {}, t0 + 50s, 51);
  c.on_host("hv1", {domain("y")}, {}, t0 + 100s, 101);
  BOOST_TEST(c.violations().size() == 1u);
}

BOOST_AUTO_TEST_CASE(the_foreign_domain_touched_is_a_violation) {
  checker c{6, 90};
  c.on_foreign("hv0", true, 1);
  BOOST_TEST(c.violations().empty());
  c.on_foreign("hv0", false, 2);
  c.on_foreign("hv0", false, 3);
  BOOST_TEST(c.violations().size() == 1u);
}

BOOST_AUTO_TEST_CASE(a_proxy_out_of_the_rotation_unexcused_past_the_bound_is_stuck) {
  checker c{6, 90, 60};
  auto out = fleet({proxy("a", "hv0", false)});
  c.excuse_host("hv0", t0 + 30s);
  c.on_status(out, 0.01, t0, 1);        // excused: its clock does not run
  c.on_status(out, 0.01, t0 + 31s, 32); // from here it does
  c.on_status(out, 0.01, t0 + 90s, 91);
  BOOST_TEST(c.violations().empty());
  c.on_status(out, 0.01, t0 + 92s, 93);
  c.on_status(out, 0.01, t0 + 99s, 100);
  BOOST_REQUIRE_EQUAL(c.violations().size(), 1u); // once
  BOOST_TEST(c.violations()[0].what.find("a on hv0 has been out of the rotation") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_broken_mirror_makes_the_stuck_bound_patient_but_not_the_leave) {
  checker c{6, 90, 60};
  c.on_status(fleet({proxy("a", "hv0", true)}), 0.01, t0, 1);
  c.be_patient(t0 + 100s);
  auto out = fleet({proxy("a", "hv0", false)});
  c.on_status(out, 0.01, t0 + 1s, 2); // leaving is never excused by the mirror
  BOOST_REQUIRE_EQUAL(c.violations().size(), 1u);
  c.on_status(out, 0.01, t0 + 99s, 100); // out for 98 s, but patiently
  BOOST_TEST(c.violations().size() == 1u);
  c.on_status(out, 0.01, t0 + 101s, 102); // the stuck clock starts here
  c.on_status(out, 0.01, t0 + 150s, 151);
  BOOST_TEST(c.violations().size() == 1u);
  c.on_status(out, 0.01, t0 + 162s, 163);
  BOOST_TEST(c.violations().size() == 2u);
}

BOOST_AUTO_TEST_CASE(a_proxy_kept_in_the_rotation_while_requests_through_it_fail_is_a_violation) {
  checker c{6, 90, 60};
  c.on_probe("a", true, false, t0, 1);
  c.on_probe("a", true, false, t0 + 15s, 16);
  c.on_probe("a", false, false, t0 + 16s, 17); // left the rotation: the clock ends
  c.on_probe("a", true, false, t0 + 30s, 31);
  c.on_probe("a", true, true, t0 + 45s, 46);   // passed: the clock ends
  c.on_probe("a", true, false, t0 + 50s, 51);
  BOOST_TEST(c.violations().empty());
  c.on_probe("a", true, false, t0 + 71s, 72);
  c.on_probe("a", true, false, t0 + 80s, 81);
  BOOST_REQUIRE_EQUAL(c.violations().size(), 1u); // once
  BOOST_TEST(c.violations()[0].what.find("a stayed in the rotation") != std::string::npos);
}
