#pragma once
// What the bytes a metrics client sent make of its request: the one part of
// the metrics endpoint that reads what an unauthenticated party sends, kept
// apart so that the unit tests and the fuzz target (tests/fuzz) feed it
// anything.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace egress {

/// A scrape request is a few hundred bytes; anything larger is not one.
inline constexpr size_t max_request_bytes = 8192;

/// What the bytes a client sent so far make of its request.
struct scrape_request {
  enum class verdict { incomplete, too_large, malformed, complete };
  verdict state = verdict::incomplete;
  std::string method; // complete only
  std::string path;   // without a query
  std::string query;  // after the '?', "" without one
};

/// Reads `buf` (everything the client sent): complete once a blank line
/// ends the headers ("\r\n\r\n" or a bare "\n\n"), too large past
/// max_request_bytes without one. Pure: tests/unit/metrics_server.cpp and
/// the fuzz target feed it anything.
scrape_request parse_scrape_request(std::string_view buf);

/// What `?after=G` of GET /rotation asks: the generation to wait past.
struct after_query {
  bool valid = true;  // false: `after` is there but not a decimal number below 2^64
  bool given = false; // `after` is there
  uint64_t generation = 0;
};

/// Reads `after` from a query ("after=12", "x=1&after=12"); other keys are
/// ignored. Pure, like parse_scrape_request.
after_query parse_after(std::string_view query);

} // namespace egress
