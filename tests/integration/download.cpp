#define BOOST_TEST_MODULE download
// Image downloads (providers/mirror) against a real HTTP/1.1 server on
// 127.0.0.1 that misbehaves on request (testbed/http_server), and
// against files. Every download is read to its end as lv::upload_volume
// would, then destroyed; after each one the process's threads and fds are
// back at their baseline. Needs no root and no daemon.
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "messages/error.hpp"
#include "providers/libvirt/volumes.hpp"
#include "providers/mirror/download.hpp"
#include "providers/mirror/sha256.hpp"
#include "testbed/http_server.hpp"
#include "testbed/test_data.hpp"
#include "testbed/testbed.hpp"

using namespace egress;
using test::pattern;
using test::resources;
using test::now_resources;
using test::operator<<;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
using mirror::download;
using mirror::fetch_options;
using mirror::sha256;
using test::http_behaviour;

// Boost prints what it compares; it finds these by ADL.
namespace egress {
std::ostream& operator<<(std::ostream& os, ec c) {
  return os << to_string(c);
}
std::ostream& operator<<(std::ostream& os, error_kind k) {
  return os << to_string(k);
}
} // namespace egress

namespace {

constexpr size_t kib = 1024;
constexpr size_t mib = 1024 * kib;

sha256 seeded_with(const std::string& prefix) {
  sha256 h;
  h.update(prefix);
  return h;
}

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// ---- one download, read to its end ---------------------------------------------

struct outcome {
  caf::error open_error;  // open() refused
  caf::error err;         // read() failed
  std::string data;       // what read() delivered
  uint64_t received = 0;
  std::optional<uint64_t> total;
  bool resumed = false;
  std::string digest;
  double seconds = 0;

  bool ok() const { return !open_error && !err; }
  caf::error error() const { return open_error ? open_error : err; }
  std::string text() const { return render(error()); }
  error_kind kind() const { return kind_of(error()); }
  ec code() const { return static_cast<ec>(error().code()); }
};

struct fixture {
  std::string image = pattern(3 * mib + 12345, 42);
  test::http_server srv{image};
  resources base;

  fixture() {
    // The server must be reached directly, whatever the environment says.
    for (auto var : {"http_proxy", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"})
      ::unsetenv(var);
    srv.start();
    // libcurl's and OpenSSL's one-time initialisation is not a leak: let a
    // first download do it before the baseline is taken.
    static bool warmed = false;
    if (!warmed) {
      warmed = true;
      auto d = download::open(opts(srv.url()));
      BOOST_REQUIRE(d);
      std::string buf(256 * kib, '\0');
      while (true) {
        auto n = (*d)->read(buf.data(), buf.size());
        BOOST_REQUIRE(n);
        if (*n == 0)
          break;
      }
      d->reset();
      srv.wait_idle();
      srv.clear_log();
    }
    base = now_resources();
  }

  static fetch_options opts(std::string url) {
    fetch_options o;
    o.url = std::move(url);
    o.deadline = 30s;
    o.connect_timeout = 5s;
    return o;
  }

  fetch_options checked(std::string url) const {
    auto o = opts(std::move(url));
    o.expected_length = image.size();
    o.expected_sha256 = mirror::sha256_hex(image);
    return o;
  }

  // Reads the whole download in `cap`-sized reads, destroys it, and checks
  // the process is back at its baseline.
  outcome fetch(fetch_options o, std::optional<sha256> seed = std::nullopt,
                size_t cap = lv::default_upload_chunk) {
    outcome out;
    auto t0 = clock_type::now();
    {
      auto d = download::open(std::move(o), std::move(seed));
      if (!d) {
        out.open_error = d.error();
      } else {
        std::vector<char> buf(cap);
        for (;;) {
          auto n = (*d)->read(buf.data(), buf.size());
          if (!n) {
            out.err = n.error();
            // Errors are sticky.
            auto again = (*d)->read(buf.data(), buf.size());
            BOOST_CHECK(!again && again.error() == out.err);
            break;
          }
          if (*n > cap)
            BOOST_FAIL("read() returned " << *n << " bytes for a buffer of " << cap);
          if (*n == 0) {
            auto again = (*d)->read(buf.data(), buf.size());
            BOOST_CHECK(again && *again == 0);
            break;
          }
          out.data.append(buf.data(), *n);
        }
        out.received = (*d)->received();
        out.total = (*d)->total();
        out.resumed = (*d)->resumed();
        out.digest = (*d)->digest();
      }
    }
    out.seconds = seconds_since(t0);
    BOOST_CHECK_EQUAL(out.received, out.data.size());
    BOOST_CHECK_MESSAGE(srv.wait_idle(), "the server still holds a connection");
    BOOST_CHECK_EQUAL(now_resources(), base);
    return out;
  }
};

void check_error(const outcome& o, ec code, const std::vector<std::string>& words) {
  BOOST_REQUIRE_MESSAGE(!o.ok(), "expected " << to_string(code) << ", got success");
  BOOST_TEST_MESSAGE("  -> " << o.text());
  BOOST_CHECK_EQUAL(o.code(), code);
  BOOST_CHECK_EQUAL(o.kind(), kind_of(code));
  for (auto& w : words)
    BOOST_CHECK_MESSAGE(o.text().find(w) != std::string::npos,
                        "\"" << w << "\" not in: " << o.text());
}

void check_ok(const outcome& o, const std::string& want) {
  BOOST_REQUIRE_MESSAGE(o.ok(), o.text());
  BOOST_CHECK_EQUAL(o.data.size(), want.size());
  BOOST_CHECK(o.data == want);
}

} // namespace

BOOST_FIXTURE_TEST_SUITE(mirror_download_suite, fixture)

// ---- success paths -------------------------------------------------------------

BOOST_AUTO_TEST_CASE(whole_image_verified_while_streaming) {
  auto o = fetch(checked(srv.url()));
  check_ok(o, image);
  BOOST_CHECK_EQUAL(o.digest, mirror::sha256_hex(image));
  BOOST_CHECK_EQUAL(o.total.value_or(0), image.size());
  BOOST_CHECK(!o.resumed);
  auto log = srv.log();
  BOOST_REQUIRE_EQUAL(log.size(), 1u);
  BOOST_CHECK_EQUAL(log[0].range, "");
}

BOOST_AUTO_TEST_CASE(nothing_configured_still_reports_length_and_digest) {
  auto o = fetch(opts(srv.url()));
  check_ok(o, image);
  BOOST_CHECK_EQUAL(o.total.value_or(0), image.size());  // from Content-Length
  BOOST_CHECK_EQUAL(o.digest, mirror::sha256_hex(image));
}

BOOST_AUTO_TEST_CASE(small_and_odd_reads_deliver_the_same_bytes) {
  // The write callback hands over more than a small read takes: the rest
  // waits in the spill buffer for the next read.
  check_ok(fetch(checked(srv.url()), std::nullopt, 1000), image);
  check_ok(fetch(checked(srv.url()), std::nullopt, 7), image);
  check_ok(fetch(checked(srv.url()), std::nullopt, 8 * mib), image);
}

BOOST_AUTO_TEST_CASE(slow_drip_completes) {
  std::string small = pattern(40 * kib, 7);
  srv.set_body(small);
  srv.set({.drip_bytes = 4 * kib, .drip_interval = 50ms});
  auto o = opts(srv.url());
  o.expected_length = small.size();
  o.expected_sha256 = mirror::sha256_hex(small);
  auto r = fetch(o);
  check_ok(r, small);
  BOOST_CHECK_GE(r.seconds, 0.3);  // it really dripped (9 pauses of 50 ms)
}

BOOST_AUTO_TEST_CASE(empty_image) {
  srv.set_body("");
  auto o = opts(srv.url());
  o.expected_length = 0;
  o.expected_sha256 = mirror::sha256_hex("");
  auto r = fetch(o);
  check_ok(r, "");
  BOOST_CHECK_EQUAL(r.digest, mirror::sha256_hex(""));
}

// ---- redirects -----------------------------------------------------------------

BOOST_AUTO_TEST_CASE(redirects_are_followed_up_to_five) {
  srv.set({.redirects = {{"/a", "/b"}, {"/b", srv.url()}}});
  auto o = fetch(checked(srv.url("/a")));
  check_ok(o, image);
  auto log = srv.log();
  BOOST_REQUIRE_EQUAL(log.size(), 3u);
  BOOST_CHECK_EQUAL(log[0].path, "/a");
  BOOST_CHECK_EQUAL(log[1].path, "/b");
  BOOST_CHECK_EQUAL(log[2].path, "/image.img");
}

BOOST_AUTO_TEST_CASE(a_host_name_is_resolved_and_its_resolver_thread_ends) {
  // libcurl resolves names on a thread of its own; it must be gone by the
  // time the download is (fetch() checks the thread count).
  check_ok(fetch(checked("http://localhost:" + std::to_string(srv.port()) + "/image.img")), image);
}

BOOST_AUTO_TEST_CASE(a_redirect_loop_is_permanent) {
  srv.set({.redirects = {{"/a", "/b"}, {"/b", "/a"}}});
  auto o = fetch(checked(srv.url("/a")));
  check_error(o, ec::source_rejected, {srv.url("/a"), "redirect"});
  BOOST_CHECK_EQUAL(srv.requests(), 6u);  // the first + 5 redirects followed
}

BOOST_AUTO_TEST_CASE(a_redirect_to_a_file_url_is_refused) {
  testbed::temp_dir dir("mirror");
  std::string secret = dir / "secret";
  testbed::write_file(secret, "local secret\n");
  srv.set({.redirects = {{"/a", "file://" + secret}}});
  auto o = fetch(opts(srv.url("/a")));
  check_error(o, ec::source_rejected, {srv.url("/a")});
  BOOST_CHECK(o.data.empty());
}

BOOST_AUTO_TEST_CASE(an_error_after_a_redirect_names_both_urls) {
  srv.set({.redirects = {{"/a", "/gone"}}});
  auto o = fetch(checked(srv.url("/a")));
  check_error(o, ec::source_not_found, {srv.url("/a"), srv.url("/gone"), "404"});
}

// ---- HTTP statuses -------------------------------------------------------------

BOOST_AUTO_TEST_CASE(not_found_is_not_found) {
  srv.set({.error_status = 404});
  check_error(fetch(checked(srv.url())), ec::source_not_found, {srv.url(), "HTTP 404"});
  srv.set({.error_status = 410});
  check_error(fetch(checked(srv.url())), ec::source_not_found, {"HTTP 410"});
  srv.set({});
  check_error(fetch(checked(srv.url("/other.img"))), ec::source_not_found,
              {srv.url("/other.img"), "HTTP 404"});
}

BOOST_AUTO_TEST_CASE(other_client_errors_are_permanent) {
  srv.set({.error_status = 403});
  auto o = fetch(checked(srv.url()));
  check_error(o, ec::access_denied, {srv.url(), "HTTP 403"});
  BOOST_CHECK_EQUAL(o.kind(), error_kind::permanent);
  srv.set({.error_status = 400});
  o = fetch(checked(srv.url()));
  check_error(o, ec::source_rejected, {"HTTP 400"});
  BOOST_CHECK_EQUAL(o.kind(), error_kind::permanent);
}

BOOST_AUTO_TEST_CASE(server_errors_are_transient_and_a_retry_succeeds) {
  srv.set({.error_status = 500, .error_count = 2});
  for (int i = 0; i < 2; ++i) {
    auto o = fetch(checked(srv.url()));
    check_error(o, ec::source_failed, {srv.url(), "HTTP 500"});
    BOOST_CHECK_EQUAL(o.kind(), error_kind::transient);
    BOOST_CHECK(o.data.empty());  // the error page is never delivered as image
  }
  check_ok(fetch(checked(srv.url())), image);
  BOOST_CHECK_EQUAL(srv.requests(), 3u);
  srv.set({.error_status = 503});
  check_error(fetch(checked(srv.url())), ec::source_failed, {"HTTP 503"});
}

// ---- content and length --------------------------------------------------------

BOOST_AUTO_TEST_CASE(a_corrupt_byte_is_a_digest_mismatch) {
  srv.set({.corrupt_at = 2 * mib + 17});
  auto o = fetch(checked(srv.url()));
  std::string bad = image;
  bad[2 * mib + 17] = static_cast<char>(~bad[2 * mib + 17]);
  check_error(o, ec::digest_mismatch,
              {srv.url(), "expected " + mirror::sha256_hex(image), "got " + mirror::sha256_hex(bad)});
  BOOST_CHECK_EQUAL(o.kind(), error_kind::permanent);
  BOOST_CHECK_EQUAL(o.data.size(), image.size());  // delivered, but never "complete"
  BOOST_CHECK_EQUAL(o.digest, "");
}

BOOST_AUTO_TEST_CASE(a_declared_length_other_than_the_expected_fails_before_the_body) {
  srv.set({.length_delta = -100});
  auto o = fetch(checked(srv.url()));
  check_error(o, ec::length_mismatch,
              {srv.url(), "Content-Length declares " + std::to_string(image.size() - 100),
               "expected " + std::to_string(image.size())});
  BOOST_CHECK(o.data.empty());
}

BOOST_AUTO_TEST_CASE(a_short_content_length_without_expected_length_is_caught_by_the_digest) {
  srv.set({.length_delta = -100});
  auto o = opts(srv.url());
  o.expected_sha256 = mirror::sha256_hex(image);
  auto r = fetch(o);
  check_error(r, ec::digest_mismatch, {srv.url(), "sha256 mismatch"});
  BOOST_CHECK_EQUAL(r.data.size(), image.size() - 100);
}

BOOST_AUTO_TEST_CASE(a_long_content_length_is_a_cut_transfer) {
  // The server declares 100 bytes more than it sends, then closes: libcurl's
  // CURLE_PARTIAL_FILE. Never a success with a short body.
  srv.set({.length_delta = 100});
  auto o = opts(srv.url());
  auto r = fetch(o);
  check_error(r, ec::source_failed, {srv.url(), "curl 18"});
  BOOST_CHECK_EQUAL(r.kind(), error_kind::transient);
}

BOOST_AUTO_TEST_CASE(truncation_is_transient_and_resumes_where_it_stopped) {
  srv.set({.truncate_after = 1 * mib + 5});
  auto first = fetch(checked(srv.url()));
  check_error(first, ec::source_failed, {srv.url(), "curl 18"});
  BOOST_CHECK_EQUAL(first.kind(), error_kind::transient);
  BOOST_CHECK_EQUAL(first.data, image.substr(0, first.data.size()));
  BOOST_CHECK_LE(first.data.size(), 1 * mib + 5);

  // What arrived is what "the volume holds": resume after it.
  srv.set({});
  srv.clear_log();
  auto o = checked(srv.url());
  o.offset = first.data.size();
  auto second = fetch(o, seeded_with(first.data));
  check_ok(second, image.substr(first.data.size()));
  BOOST_CHECK(second.resumed);
  BOOST_CHECK_EQUAL(second.digest, mirror::sha256_hex(image));
  BOOST_REQUIRE_EQUAL(srv.requests(), 1u);
  BOOST_CHECK_EQUAL(srv.log()[0].range, "bytes=" + std::to_string(first.data.size()) + "-");
}

BOOST_AUTO_TEST_CASE(a_body_without_length_longer_than_expected_fails_at_the_first_extra_byte) {
  srv.set({.no_length = true});
  auto o = checked(srv.url());
  o.expected_length = image.size() - 10;
  o.expected_sha256.reset();
  auto r = fetch(o);
  check_error(r, ec::length_mismatch, {srv.url(), "more than the expected"});
  BOOST_CHECK_LE(r.data.size(), image.size() - 10);
}

BOOST_AUTO_TEST_CASE(a_body_without_length_shorter_than_expected_is_a_length_mismatch) {
  srv.set({.truncate_after = 1000, .no_length = true});
  auto r = fetch(checked(srv.url()));
  check_error(r, ec::length_mismatch, {srv.url(), "got 1000 bytes, expected "});
}

// ---- ranges --------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(resume_with_range_support_gets_206) {
  const size_t offset = 1 * mib + 3;
  auto o = checked(srv.url());
  o.offset = offset;
  auto r = fetch(o, seeded_with(image.substr(0, offset)));
  check_ok(r, image.substr(offset));
  BOOST_CHECK(r.resumed);
  BOOST_CHECK_EQUAL(r.total.value_or(0), image.size());
  BOOST_CHECK_EQUAL(r.received, image.size() - offset);
  BOOST_CHECK_EQUAL(r.digest, mirror::sha256_hex(image));
  BOOST_REQUIRE_EQUAL(srv.requests(), 1u);
  BOOST_CHECK_EQUAL(srv.log()[0].range, "bytes=1048579-");
}

BOOST_AUTO_TEST_CASE(resume_when_the_server_ignores_range_drops_the_stored_prefix) {
  srv.set({.ranges = false});
  const size_t offset = 1 * mib + 3;
  auto o = checked(srv.url());
  o.offset = offset;
  auto r = fetch(o, seeded_with(image.substr(0, offset)));
  check_ok(r, image.substr(offset));  // the same bytes as with a 206
  BOOST_CHECK(!r.resumed);
  BOOST_CHECK_EQUAL(r.digest, mirror::sha256_hex(image));
  BOOST_CHECK_EQUAL(srv.log().at(0).range, "bytes=1048579-");
  // Without a configured length the server's Content-Length is the total.
  o.expected_length.reset();
  r = fetch(o, seeded_with(image.substr(0, offset)));
  check_ok(r, image.substr(offset));
  BOOST_CHECK_EQUAL(r.total.value_or(0), image.size());
}

BOOST_AUTO_TEST_CASE(a_seed_that_differs_from_the_server_prefix_fails_the_digest) {
  const size_t offset = 4096;
  std::string stored = image.substr(0, offset);
  stored[10] ^= 1;
  auto o = checked(srv.url());
  o.offset = offset;
  check_error(fetch(o, seeded_with(stored)), ec::digest_mismatch, {"sha256 mismatch"});
}

BOOST_AUTO_TEST_CASE(resume_without_digest_needs_no_seed) {
  auto o = opts(srv.url());
  o.offset = 2 * mib;
  o.expected_length = image.size();
  auto r = fetch(o);
  check_ok(r, image.substr(2 * mib));
  BOOST_CHECK(r.resumed);
  BOOST_CHECK_EQUAL(r.digest, "");  // covers only a suffix: not offered
}

BOOST_AUTO_TEST_CASE(everything_already_stored) {
  // Configured length: no request at all.
  auto o = checked(srv.url());
  o.offset = image.size();
  auto r = fetch(o, seeded_with(image));
  check_ok(r, "");
  BOOST_CHECK_EQUAL(r.digest, mirror::sha256_hex(image));
  BOOST_CHECK_EQUAL(srv.requests(), 0u);
  // Unknown length: the server's 416 "bytes */size" says the same.
  auto u = opts(srv.url());
  u.offset = image.size();
  r = fetch(u);
  check_ok(r, "");
  BOOST_CHECK_EQUAL(r.total.value_or(0), image.size());
  BOOST_CHECK_EQUAL(srv.requests(), 1u);
  // Beyond the server's end: the image is shorter than what is stored.
  u.offset = image.size() + 1;
  check_error(fetch(u), ec::source_rejected, {"HTTP 416"});
}

BOOST_AUTO_TEST_CASE(a_206_for_another_range_is_rejected) {
  srv.set({.range_shift = -10});
  auto o = checked(srv.url());
  o.offset = 100 * kib;
  auto r = fetch(o, seeded_with(image.substr(0, 100 * kib)));
  check_error(r, ec::source_rejected,
              {srv.url(), "asked for bytes from 102400", "bytes 102390-"});
  BOOST_CHECK(r.data.empty());
}

BOOST_AUTO_TEST_CASE(a_seed_of_the_wrong_size_is_refused) {
  auto o = checked(srv.url());
  o.offset = 100;
  auto r = fetch(o, seeded_with(image.substr(0, 99)));
  check_error(r, ec::invalid_argument, {"seeded hasher holds 99 bytes", "100"});
  BOOST_CHECK_EQUAL(srv.requests(), 0u);
}

// ---- stalls and deadlines ------------------------------------------------------

BOOST_AUTO_TEST_CASE(a_stalled_mirror_ends_through_the_low_speed_limit) {
  srv.set({.stall_after = 300 * kib});
  auto o = checked(srv.url());
  o.low_speed_limit = 1024;
  o.low_speed_time = 2s;
  auto r = fetch(o);
  check_error(r, ec::source_timeout, {srv.url(), "too slow"});
  BOOST_CHECK_EQUAL(r.kind(), error_kind::transient);
  BOOST_CHECK_EQUAL(r.data, image.substr(0, 300 * kib));
  BOOST_CHECK_GE(r.seconds, 1.5);
  BOOST_CHECK_LE(r.seconds, 15.0);
}

BOOST_AUTO_TEST_CASE(the_deadline_ends_a_slow_but_steady_transfer) {
  // 2 KiB every 100 ms is above the low-speed limit: only the deadline ends it.
  srv.set({.drip_bytes = 2 * kib, .drip_interval = 100ms});
  auto o = checked(srv.url());
  o.deadline = 1500ms;
  o.low_speed_time = 2s;
  auto r = fetch(o);
  check_error(r, ec::source_timeout, {srv.url(), "timed out"});
  BOOST_CHECK_EQUAL(r.kind(), error_kind::transient);
  BOOST_CHECK_GE(r.seconds, 1.2);
  BOOST_CHECK_LE(r.seconds, 15.0);
  BOOST_CHECK_GT(r.data.size(), 0u);
}

// The image cache gives a fill up (budget, shutdown) while libcurl waits on
// a silent mirror: the cancel flag ends read() within about 100 ms.
BOOST_AUTO_TEST_CASE(a_cancel_flag_ends_a_stalled_download_at_once) {
  srv.set({.stall_after = 64 * kib});
  auto o = checked(srv.url());
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  o.cancel = cancel;
  caf::error err;
  std::atomic<int64_t> cancelled_ns{0};
  int64_t returned_ns = 0;
  {
    auto d = download::open(std::move(o));
    BOOST_REQUIRE(d);
    std::thread canceller{[&] {
      std::this_thread::sleep_for(500ms); // well into the stall
      cancelled_ns = clock_type::now().time_since_epoch().count();
      *cancel = true;
    }};
    std::vector<char> buf(lv::default_upload_chunk);
    for (;;) {
      auto n = (*d)->read(buf.data(), buf.size());
      if (!n) {
        err = n.error();
        break;
      }
      BOOST_REQUIRE(*n > 0);
    }
    returned_ns = clock_type::now().time_since_epoch().count();
    canceller.join();
  }
  auto latency_ms = static_cast<double>(returned_ns - cancelled_ns.load()) / 1e6;
  BOOST_TEST_MESSAGE("  -> " << render(err) << " (" << latency_ms << " ms after the flag)");
  BOOST_CHECK(err == ec::shutting_down);
  BOOST_CHECK(kind_of(err) == error_kind::transient);
  BOOST_CHECK(detail(err).find(srv.url()) != std::string::npos);
  BOOST_CHECK_LT(latency_ms, 1000.0); // ~100 ms by design; slack for a loaded machine
  BOOST_CHECK(srv.wait_idle());
  BOOST_CHECK_EQUAL(now_resources(), base);
}

BOOST_AUTO_TEST_CASE(the_server_stops_cleanly_under_a_stalled_download) {
  srv.set({.stall_after = 64 * kib});
  auto o = checked(srv.url());
  o.low_speed_time = 60s;  // nothing but the server's end may end it
  {
    auto d = download::open(o);
    BOOST_REQUIRE(d);
    std::vector<char> buf(lv::default_upload_chunk);
    size_t got = 0;
    while (got < 64 * kib) {
      auto n = (*d)->read(buf.data(), buf.size());
      BOOST_REQUIRE_MESSAGE(n && *n > 0, (n ? "end" : render(n.error())));
      got += *n;
    }
    auto t0 = clock_type::now();
    srv.stop();
    BOOST_CHECK_LE(seconds_since(t0), 2.0);
    auto n = (*d)->read(buf.data(), buf.size());
    BOOST_REQUIRE(!n);
    BOOST_TEST_MESSAGE("  -> " << render(n.error()));
    BOOST_CHECK_EQUAL(kind_of(n.error()), error_kind::transient);
    BOOST_CHECK_LE(seconds_since(t0), 5.0);
  }
  // The server's listener and eventfd are gone with it.
  BOOST_CHECK_EQUAL(now_resources().threads, base.threads - 1);
  BOOST_CHECK_EQUAL(now_resources().fds, base.fds - 2);
  srv.start();  // for the fixture's own checks
  base = now_resources();
}

BOOST_AUTO_TEST_CASE(a_refused_connection_is_transient) {
  auto url = srv.url();
  srv.stop();
  base = now_resources();
  auto r = fetch(checked(url));
  check_error(r, ec::source_failed, {url, "curl 7"});
  BOOST_CHECK_EQUAL(r.kind(), error_kind::transient);
  srv.start();
  base = now_resources();
}

// ---- file:// -------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(file_urls) {
  testbed::temp_dir dir("mirror");
  std::string path = dir / "image with space.img";
  testbed::write_file(path, image);
  std::string url = "file://" + path.substr(0, path.rfind('/')) + "/image%20with%20space.img";

  auto r = fetch(checked(url));
  check_ok(r, image);
  BOOST_CHECK_EQUAL(r.digest, mirror::sha256_hex(image));
  BOOST_CHECK_EQUAL(r.total.value_or(0), image.size());

  auto o = checked("file://localhost" + path.substr(0, path.rfind('/'))
                   + "/image%20with%20space.img");
  o.offset = 5000;
  r = fetch(o, seeded_with(image.substr(0, 5000)));
  check_ok(r, image.substr(5000));
  BOOST_CHECK(r.resumed);
  BOOST_CHECK_EQUAL(r.digest, mirror::sha256_hex(image));

  check_error(fetch(checked("file://" + dir / "missing.img")), ec::source_not_found,
              {"missing.img", "No such file"});
  auto wrong = checked(url);
  wrong.expected_length = image.size() + 1;
  check_error(fetch(wrong), ec::length_mismatch,
              {"declares " + std::to_string(image.size()), std::to_string(image.size() + 1)});
  check_error(fetch(checked("file://" + dir.path())), ec::source_rejected,
              {"not a regular file"});
}

// ---- arguments -----------------------------------------------------------------

BOOST_AUTO_TEST_CASE(bad_arguments_are_refused_before_any_io) {
  auto expect_invalid = [&](fetch_options o, const std::string& word,
                            std::optional<sha256> seed = std::nullopt) {
    auto r = fetch(std::move(o), std::move(seed));
    check_error(r, ec::invalid_argument, {word});
    BOOST_CHECK(r.open_error);
  };
  expect_invalid(opts("not a url"), "not a valid URL");
  expect_invalid(opts("ftp://127.0.0.1/x.img"), "unsupported scheme \"ftp\"");
  expect_invalid(opts("gopher://127.0.0.1/x.img"), "unsupported scheme");
  expect_invalid(opts("file://otherhost/x.img"), "x.img");
  auto o = checked(srv.url());
  o.deadline = 0ms;
  expect_invalid(o, "deadline");
  o = checked(srv.url());
  o.expected_sha256 = "abc";
  expect_invalid(o, "not 64 hex digits");
  o = checked(srv.url());
  o.offset = image.size() + 1;
  expect_invalid(o, "beyond the expected length");
  o = checked(srv.url());
  o.offset = 10;
  expect_invalid(o, "cannot verify sha256");
  BOOST_CHECK_EQUAL(srv.requests(), 0u);

  // Upper-case digests are accepted.
  o = checked(srv.url());
  for (auto& c : *o.expected_sha256)
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  check_ok(fetch(o), image);
}

BOOST_AUTO_TEST_CASE(messages_never_show_credentials_or_queries) {
  srv.set({.error_status = 404});
  auto url = "http://alice:hunter2@127.0.0.1:" + std::to_string(srv.port())
             + "/image.img?token=s3cr3t#frag";
  auto r = fetch(checked(url));
  check_error(r, ec::source_not_found, {"http://127.0.0.1:" + std::to_string(srv.port()) + "/image.img"});
  for (auto secret : {"alice", "hunter2", "s3cr3t", "frag"})
    BOOST_CHECK_MESSAGE(r.text().find(secret) == std::string::npos, r.text());
  BOOST_CHECK_EQUAL(mirror::redact_url("ht!tp://bob:pw@host/x?k=v"), "ht!tp://host/x");
}

// ---- the pull source plugs into lv::upload_volume ------------------------------

BOOST_AUTO_TEST_CASE(read_has_the_upload_source_signature) {
  auto d = download::open(checked(srv.url()));
  BOOST_REQUIRE(d);
  lv::upload_source src = [&](char* buf, size_t cap) { return (*d)->read(buf, cap); };
  std::string got;
  std::vector<char> buf(lv::min_upload_chunk);
  for (;;) {
    auto n = src(buf.data(), buf.size());
    // Boost builds the message even when the check passes.
    BOOST_REQUIRE_MESSAGE(n, (n ? "" : render(n.error())));
    if (*n == 0)
      break;
    got.append(buf.data(), *n);
  }
  BOOST_CHECK(got == image);
}

BOOST_AUTO_TEST_SUITE_END()
