#define BOOST_TEST_MODULE metrics_server
// The metrics endpoint's request reader (actors/metrics_server.hpp): what
// the bytes a client sent so far make of its request.
#include <boost/test/unit_test.hpp>

#include <string>

#include "actors/metrics_server.hpp"

using namespace egress;
using verdict = scrape_request::verdict;

BOOST_AUTO_TEST_CASE(a_request_ends_at_a_blank_line_of_either_kind) {
  auto r = parse_scrape_request("GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n");
  BOOST_CHECK(r.state == verdict::complete);
  BOOST_CHECK_EQUAL(r.method, "GET");
  BOOST_CHECK_EQUAL(r.path, "/metrics");
  BOOST_CHECK(parse_scrape_request("HEAD /metrics HTTP/1.0\n\n").state == verdict::complete);
  BOOST_CHECK(parse_scrape_request("GET /metrics HTTP/1.1\r\nHost: a\r\n").state
              == verdict::incomplete);
  BOOST_CHECK(parse_scrape_request("").state == verdict::incomplete);
}

BOOST_AUTO_TEST_CASE(spec_24_a_request_is_bounded_headers_included) {
  std::string big = "GET /metrics HTTP/1.1\r\nX: " + std::string(max_request_bytes, 'a');
  BOOST_CHECK(parse_scrape_request(big).state == verdict::too_large);
  BOOST_CHECK(parse_scrape_request(big + "\r\n\r\n").state == verdict::too_large);
  BOOST_CHECK(parse_scrape_request(std::string(max_request_bytes, '\n')).state
              == verdict::malformed); // a blank line first: no request line
}

BOOST_AUTO_TEST_CASE(malformed_request_lines_are_told_apart) {
  for (auto x : {"\n\n", "GET\n\n", "GET /metrics\r\n\r\n", " / HTTP/1.1\n\n",
                 "GET  HTTP/1.1\n\n"})
    BOOST_CHECK_MESSAGE(parse_scrape_request(x).state == verdict::malformed, x);
}
