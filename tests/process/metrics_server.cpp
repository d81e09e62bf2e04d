// The Prometheus endpoint of caf-run (actors/metrics_server) in another
// process, over plain HTTP.
#define BOOST_TEST_MODULE metrics_server
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <map>

#include <caf/scoped_actor.hpp>

#include "support/caf_run_process.hpp"
#include "support/engine_fixture.hpp"
#include "support/testbed.hpp"

using namespace egress;
using namespace std::chrono_literals;
using test::daemon_run;
using test::http_get;
using test::parse_exposition;

// The Prometheus endpoint of a caf-run in another process: scraped over
// HTTP and parsed; the proxies, the rotation and the reconcile histogram
// show the running demo, and a kill-link shows up as a death by its cause.
BOOST_AUTO_TEST_CASE(metrics_endpoint_is_scraped_and_parsed) {
  daemon_run d;
  BOOST_REQUIRE_MESSAGE(d.wait_listening(), d.log());
  BOOST_REQUIRE(test::eventually([&] { return d.metrics_port() != 0; }, 10s));
  auto port = d.metrics_port();
  std::map<std::string, double> m;
  BOOST_REQUIRE(test::eventually([&] {
    auto [code, body] = http_get(port, "/metrics");
    if (code != 200)
      return false;
    m = parse_exposition(body);
    return m["egress_proxies{phase=\"running\"}"] == 3 && m["egress_rotation_size"] == 3
           && m["egress_reconcile_duration_seconds_count"] >= 3;
  }, 20s));
  BOOST_CHECK_EQUAL(m["egress_link_state{host=\"local\",state=\"up\"}"], 1);
  // Histogram buckets are cumulative and end at the count.
  BOOST_CHECK_EQUAL(m["egress_reconcile_duration_seconds_bucket{le=\"+Inf\"}"],
                    m["egress_reconcile_duration_seconds_count"]);
  BOOST_CHECK_LE(m["egress_reconcile_duration_seconds_bucket{le=\"0.001\"}"],
                 m["egress_reconcile_duration_seconds_bucket{le=\"10\"}"]);
  BOOST_REQUIRE(d.shell({"-c", "kill-link local"}).ok());
  BOOST_CHECK(test::eventually([&] {
    auto [code, body] = http_get(port, "/metrics");
    if (code != 200)
      return false;
    m = parse_exposition(body);
    return m["egress_link_deaths_total{host=\"local\",cause=\"killed\"}"] == 1;
  }, 10s));
  BOOST_CHECK_EQUAL(http_get(port, "/").first, 404);
}

BOOST_AUTO_TEST_CASE(spec_20_a_non_loopback_metrics_endpoint_is_refused) {
  daemon_run d{"metrics = { address = \"0.0.0.0\", port = 0 }"};
  BOOST_REQUIRE(test::eventually([&] { return !d.proc.alive(); }, 15s));
  auto status = d.proc.wait_status();
  BOOST_REQUIRE(status);
  BOOST_CHECK(WIFEXITED(*status) && WEXITSTATUS(*status) == 2);
  BOOST_CHECK_MESSAGE(d.log().find("engine.metrics.address") != std::string::npos, d.log());
}
