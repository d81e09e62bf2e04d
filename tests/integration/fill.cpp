#define BOOST_TEST_MODULE fill
// The image cache's fill procedure (providers/images/fill.hpp) against a real
// private libvirtd (qemu driver, a dir pool) and a real HTTP server the test
// makes misbehave. What lands in the pool is read back from the pool's
// directory on disk; the volumes that exist are listed by libvirt itself.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <sys/stat.h>

#include "messages/error.hpp"
#include "providers/images/fill.hpp"
#include "providers/images/stage.hpp"
#include "providers/images/volume_names.hpp"
#include "providers/libvirt/volumes.hpp"
#include "providers/mirror/sha256.hpp"
#include "providers/ssh/ssh_transport.hpp"
#include "providers/transport.hpp"
#include "testbed/disk_images.hpp"
#include "testbed/http_server.hpp"
#include "testbed/test_data.hpp"
#include "testbed/testbed.hpp"

using namespace egress;
using test::pattern;
using test::now_ns;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr uint64_t mib = uint64_t{1} << 20;
const std::string pool_name = "images";

// A transport that records when it was connected and killed: the order of
// the transfer connection's close and the cleanup connection's open is what
// docs/spec.md 7 is about.
class recording_transport final : public transport {
public:
  explicit recording_transport(std::string uri) : inner_(std::move(uri)) {}
  caf::error connect() override {
    connected_at = now_ns();
    return inner_.connect();
  }
  const std::string& uri() const noexcept override { return inner_.uri(); }
  void kill() noexcept override {
    int64_t zero = 0;
    killed_at.compare_exchange_strong(zero, now_ns());
    inner_.kill();
  }
  std::atomic<int64_t> connected_at{0};
  std::atomic<int64_t> killed_at{0};

private:
  direct_transport inner_;
};

testbed::libvirtd_options storage_only(int pools_mib) {
  testbed::libvirtd_options o;
  o.warm_qemu_caps = false; // storage needs no QEMU probe
  o.pools_mib = pools_mib;
  return o;
}

struct fixture {
  testbed::libvirtd lv;
  std::string pool_dir;
  std::string image;
  std::string format;
  std::string digest;
  test::http_server http;

  /// Raw by default: plain bytes, not a multiple of a MiB.
  /// `pools_mib` > 0: the pool on a tmpfs that small (libvirtd_options).
  explicit fixture(std::string body = pattern(12 * mib + 12345, 7), std::string fmt = "raw",
                   int pools_mib = 0)
    : lv(storage_only(pools_mib)), image(std::move(body)), format(std::move(fmt)), digest(mirror::sha256_hex(image)),
      http(image) {
    testbed::require_root_or_skip();
    lv.start();
    pool_dir = lv.define_dir_pool(pool_name);
    http.start();
  }
  ~fixture() { http.stop(); }

  images::fill_request request(const std::string& entry = "alpha") {
    images::fill_request r;
    r.entry = entry;
    r.pool = pool_name;
    r.image.name = "base";
    r.image.url = http.url();
    r.image.sha256 = digest;
    r.image.size = image.size();
    r.image.format = format;
    r.download_deadline = 60s;
    r.low_speed_time = 2s;
    r.keepalive = lv::keepalive{1, 3};
    r.transfer = std::make_shared<recording_transport>(lv.uri());
    r.cleanup = std::make_shared<recording_transport>(lv.uri());
    return r;
  }

  static recording_transport& rec(const transport_ptr& t) {
    return static_cast<recording_transport&>(*t);
  }

  images::volume_names names(const std::string& entry = "alpha") const {
    return images::volume_names::of(entry, "base", digest);
  }

  bool exists(const std::string& volume) const {
    return std::filesystem::exists(pool_dir + "/" + volume);
  }

  std::vector<std::string> volumes() const {
    std::vector<std::string> out;
    for (auto& e : std::filesystem::directory_iterator(pool_dir))
      out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

  /// request() through the node's copy in `dir` (engine.stage-dir).
  images::fill_request staged_request(const testbed::temp_dir& dir) {
    auto stage = images::image_stage::open(dir.path(), "alpha");
    BOOST_REQUIRE_MESSAGE(stage, (stage ? std::string{} : render(stage.error())));
    auto r = request();
    r.stage = *stage;
    return r;
  }

  caf::expected<images::fill_result> fill(const images::fill_request& r,
                                          images::fill_progress* p = nullptr) {
    images::fill_progress local;
    return images::fill(r, p != nullptr ? *p : local);
  }
};

std::string show(const caf::expected<images::fill_result>& r) {
  return r ? "ok " + r->volume : render(r.error());
}

} // namespace

BOOST_FIXTURE_TEST_SUITE(image_fill_suite, fixture)

// A fresh fill downloads, uploads, verifies and marks; the next one finds the
// image ready by its marker and moves nothing.
BOOST_AUTO_TEST_CASE(spec_08_fill_verifies_then_marks_and_a_marked_image_is_ready) {
  auto r = fill(request());
  BOOST_REQUIRE_MESSAGE(r, show(r));
  auto n = names();
  BOOST_CHECK_EQUAL(r->volume, n.data);
  BOOST_CHECK(r->transferred);
  BOOST_CHECK_EQUAL(r->length, image.size());
  BOOST_CHECK_EQUAL(r->path, pool_dir + "/" + n.data);
  BOOST_CHECK(testbed::read_file(pool_dir + "/" + n.data) == image);
  BOOST_CHECK(exists(n.marker));
  BOOST_CHECK(!exists(n.partial));
  auto marker = testbed::read_file(pool_dir + "/" + n.marker);
  BOOST_CHECK(marker.find("sha256 " + digest) != std::string::npos);
  BOOST_CHECK(marker.find("length " + std::to_string(image.size())) != std::string::npos);

  auto requests = http.requests();
  auto again = fill(request());
  BOOST_REQUIRE_MESSAGE(again, show(again));
  BOOST_CHECK(!again->transferred);
  BOOST_CHECK_EQUAL(again->volume, n.data);
  BOOST_CHECK_EQUAL(http.requests(), requests); // nothing downloaded
}

// A corrupt byte: digest mismatch, permanent; no marker was ever written and
// nothing of the attempt is left in the pool.
BOOST_AUTO_TEST_CASE(spec_08_a_corrupt_image_is_never_marked_and_leaves_nothing) {
  http.set({.corrupt_at = 5 * mib});
  auto r = fill(request());
  BOOST_REQUIRE(!r);
  BOOST_TEST_MESSAGE("corrupt: " << render(r.error()));
  BOOST_CHECK(is(r.error(), ec::digest_mismatch));
  BOOST_CHECK(kind_of(r.error()) == error_kind::permanent);
  BOOST_CHECK(detail(r.error()).find(digest) != std::string::npos);
  BOOST_CHECK(volumes().empty());
}

// A wrong length declared by the server: permanent, nothing left.
BOOST_AUTO_TEST_CASE(spec_08_a_wrong_length_is_never_marked) {
  http.set({.length_delta = 100});
  auto r = fill(request());
  BOOST_REQUIRE(!r);
  BOOST_TEST_MESSAGE("wrong length: " << render(r.error()));
  BOOST_CHECK(is(r.error(), ec::length_mismatch));
  BOOST_CHECK(volumes().empty());
}

// docs/spec.md 7: after a permanent failure the transfer connection is closed
// (its transport killed, its pump joined) before the cleanup connection opens
// and deletes the partial volume.
BOOST_AUTO_TEST_CASE(spec_07_partial_volume_is_deleted_only_after_the_upload_connection_closed) {
  http.set({.corrupt_at = 3 * mib});
  auto req = request();
  auto r = fill(req);
  BOOST_REQUIRE(!r);
  auto killed = rec(req.transfer).killed_at.load();
  auto cleanup_opened = rec(req.cleanup).connected_at.load();
  BOOST_CHECK(killed != 0);
  BOOST_CHECK(cleanup_opened != 0);
  BOOST_CHECK_MESSAGE(killed < cleanup_opened,
                      "the cleanup connection opened before the upload connection closed");
  BOOST_CHECK(volumes().empty());
}

// The source is cut mid-stream: transient; the data and its partial mark stay
// (no marker); the next fill resumes with a Range at what the volume holds,
// reads the prefix back for the digest, and ends verified.
BOOST_AUTO_TEST_CASE(spec_08_an_interrupted_fill_is_never_taken_for_complete_and_resumes) {
  http.set({.truncate_after = 7 * mib + 100});
  auto r = fill(request());
  BOOST_REQUIRE(!r);
  BOOST_TEST_MESSAGE("truncated: " << render(r.error()));
  BOOST_CHECK(kind_of(r.error()) == error_kind::transient);
  auto n = names();
  BOOST_CHECK(exists(n.data));
  BOOST_CHECK(exists(n.partial));
  BOOST_CHECK(!exists(n.marker));

  http.set({});
  http.clear_log();
  images::fill_progress progress;
  auto again = fill(request(), &progress);
  BOOST_REQUIRE_MESSAGE(again, show(again));
  BOOST_TEST_MESSAGE("resumed at " << again->resumed_from << " bytes");
  BOOST_CHECK(again->transferred);
  BOOST_CHECK(again->resumed_from > 0);
  BOOST_CHECK(again->resumed_from % mib == 0);
  BOOST_CHECK(again->resumed_from <= 7 * mib);
  auto log = http.log();
  BOOST_REQUIRE(!log.empty());
  BOOST_CHECK_EQUAL(log.back().range, "bytes=" + std::to_string(again->resumed_from) + "-");
  BOOST_CHECK(testbed::read_file(pool_dir + "/" + n.data) == image);
  BOOST_CHECK(exists(n.marker));
  BOOST_CHECK(!exists(n.partial));
  BOOST_CHECK_EQUAL(progress.bytes.load(), image.size());
}

// The same with a server that ignores Range: the download skips the prefix
// itself, the digest still covers the whole volume.
BOOST_AUTO_TEST_CASE(resume_against_a_server_without_ranges_still_verifies) {
  http.set({.truncate_after = 6 * mib});
  BOOST_REQUIRE(!fill(request()));
  http.set({.ranges = false});
  auto again = fill(request());
  BOOST_REQUIRE_MESSAGE(again, show(again));
  BOOST_CHECK(again->resumed_from > 0);
  BOOST_CHECK(testbed::read_file(pool_dir + "/" + names().data) == image);
}

// A prefix that went bad while the volume sat partial: the digest over the
// whole volume catches it; the volume is discarded (transient: the next
// attempt starts over) and the attempt after that succeeds from byte 0.
BOOST_AUTO_TEST_CASE(spec_08_a_resumed_image_with_a_bad_prefix_is_discarded) {
  http.set({.truncate_after = 6 * mib});
  BOOST_REQUIRE(!fill(request()));
  auto n = names();
  {
    // Scribble over the volume's first bytes, as a broken disk would.
    auto f = std::fopen((pool_dir + "/" + n.data).c_str(), "r+b");
    BOOST_REQUIRE(f != nullptr);
    std::fputs("garbage", f);
    std::fclose(f);
  }
  http.set({});
  auto r = fill(request());
  BOOST_REQUIRE(!r);
  BOOST_TEST_MESSAGE("bad prefix: " << render(r.error()));
  BOOST_CHECK(kind_of(r.error()) == error_kind::transient);
  BOOST_CHECK(volumes().empty());
  auto again = fill(request());
  BOOST_REQUIRE_MESSAGE(again, show(again));
  BOOST_CHECK_EQUAL(again->resumed_from, 0u);
  BOOST_CHECK(testbed::read_file(pool_dir + "/" + n.data) == image);
}

// The data volume is deleted under the upload (another tool, an operator):
// libvirtd keeps writing into the unlinked file and the upload succeeds, so
// the fill must look before it marks. Transient, no marker; the next fill
// starts over and ends verified.
BOOST_AUTO_TEST_CASE(spec_08_a_volume_deleted_under_the_upload_is_never_marked) {
  http.set({.drip_bytes = 1 * mib, .drip_interval = 100ms});
  auto n = names();
  std::atomic<bool> deleted{false};
  std::thread deleter{[&] {
    auto path = pool_dir + "/" + n.data;
    auto deadline = clock_type::now() + 20s;
    while (clock_type::now() < deadline) {
      std::error_code ec;
      if (std::filesystem::file_size(path, ec) >= 3 * mib && !ec) {
        deleted = lv.virsh({"vol-delete", "--pool", pool_name, n.data}).ok();
        return;
      }
      std::this_thread::sleep_for(20ms);
    }
  }};
  auto r = fill(request());
  deleter.join();
  BOOST_REQUIRE(deleted.load());
  BOOST_REQUIRE(!r);
  BOOST_TEST_MESSAGE("deleted under the upload: " << render(r.error()));
  BOOST_CHECK(kind_of(r.error()) == error_kind::transient);
  BOOST_CHECK(detail(r.error()).find("vanished") != std::string::npos);
  BOOST_CHECK(!exists(n.marker));
  http.set({});
  auto again = fill(request());
  BOOST_REQUIRE_MESSAGE(again, show(again));
  BOOST_CHECK(testbed::read_file(pool_dir + "/" + n.data) == image);
  BOOST_CHECK(exists(n.marker));
}

// docs/spec.md 24: an image without a declared size takes its length from
// the server, so a hostile mirror could fill a host's pool before the
// digest could tell it is wrong. Past max-size it is refused, from the
// server's declared length, before a volume is made.
BOOST_AUTO_TEST_CASE(spec_24_an_unsized_image_past_its_max_size_is_refused_before_a_volume) {
  auto req = request();
  req.image.size = 0;
  req.image.max_size = 4 * mib;
  auto r = fill(req);
  BOOST_REQUIRE(!r);
  BOOST_TEST_MESSAGE("unsized: " << render(r.error()));
  BOOST_CHECK(is(r.error(), ec::length_mismatch));
  BOOST_CHECK(detail(r.error()).find("more than its max-size (4194304)") != std::string::npos);
  BOOST_CHECK(volumes().empty());
  req.image.max_size = image.size();
  auto ok = fill(req); // at the bound: fine
  BOOST_REQUIRE_MESSAGE(ok, show(ok));
}

// A 404 is not_found, and leaves nothing.
BOOST_AUTO_TEST_CASE(missing_image_is_not_found_and_leaves_nothing) {
  http.set({.error_status = 404});
  auto r = fill(request());
  BOOST_REQUIRE(!r);
  BOOST_TEST_MESSAGE("404: " << render(r.error()));
  BOOST_CHECK(kind_of(r.error()) == error_kind::not_found);
  BOOST_CHECK(volumes().empty());
}

// A pool whose filesystem another tenant filled (a file not ours takes all
// but 4 MiB of a 32 MiB tmpfs): the 12 MiB upload fails transient, naming
// the full disk, nothing is marked, the partial data is deleted (the space
// given back), and the fill completes, verified, once the space is back.
// Permanent would latch the image as failed until its retry_max although
// freeing the disk is all it takes.
struct small_pool_fixture : fixture {
  small_pool_fixture() : fixture(pattern(12 * mib + 12345, 7), "raw", 32) {}

  std::string filler() const { return pool_dir + "/not-ours"; }

  void crowd(uint64_t leave) {
    auto space = std::filesystem::space(pool_dir);
    testbed::write_file(filler(), std::string(space.available - leave, 'x'));
  }
};

BOOST_FIXTURE_TEST_CASE(spec_08_a_full_pool_fails_the_fill_transient_and_it_completes_once_freed,
                        small_pool_fixture) {
  crowd(4 * mib);
  auto r = fill(request());
  BOOST_REQUIRE(!r);
  BOOST_TEST_MESSAGE("full pool: " << render(r.error()));
  BOOST_CHECK(kind_of(r.error()) == error_kind::transient);
  BOOST_CHECK_MESSAGE(render(r.error()).find("No space left on device") != std::string::npos,
                      render(r.error()));
  auto n = names();
  BOOST_CHECK(!exists(n.marker));
  BOOST_CHECK(!exists(n.data));
  BOOST_CHECK(exists("not-ours"));
  std::filesystem::remove(filler());
  auto again = fill(request());
  BOOST_REQUIRE_MESSAGE(again, show(again));
  BOOST_CHECK(testbed::read_file(pool_dir + "/" + n.data) == image);
  BOOST_CHECK(exists(n.marker));
}

// docs/notes/failures.md#two-entries-share-volumes: two provider entries on one host and pool never share, overwrite or
// delete each other's volumes, even when one of them fails.
BOOST_AUTO_TEST_CASE(spec_09_two_entries_on_one_pool_share_nothing) {
  auto a = fill(request("alpha"));
  BOOST_REQUIRE_MESSAGE(a, show(a));
  auto b = fill(request("beta"));
  BOOST_REQUIRE_MESSAGE(b, show(b));
  BOOST_CHECK_NE(a->volume, b->volume);
  BOOST_CHECK(b->transferred); // beta did not take alpha's volume
  // beta fails (a corrupt image under the same digest): alpha is untouched.
  auto na = names("alpha");
  auto before = testbed::read_file(pool_dir + "/" + na.marker);
  std::filesystem::remove(pool_dir + "/" + names("beta").marker); // beta must refetch
  http.set({.corrupt_at = 1});
  auto b2 = fill(request("beta"));
  BOOST_REQUIRE(!b2);
  BOOST_CHECK(exists(na.data));
  BOOST_CHECK(exists(na.marker));
  BOOST_CHECK(testbed::read_file(pool_dir + "/" + na.data) == image);
  BOOST_CHECK_EQUAL(testbed::read_file(pool_dir + "/" + na.marker), before);
  BOOST_CHECK(!exists(names("beta").data));
  auto a2 = fill(request("alpha"));
  BOOST_REQUIRE_MESSAGE(a2, show(a2));
  BOOST_CHECK(!a2->transferred);
}


// -- ranges over several sessions (docs/spec.md 42) --------------------------

namespace {

// A session through the engine's bridge in front of the daemon's socket: a
// transport whose kill() cuts the connection as an SSH session's would.
transport_ptr bridged(const fixture& f, const testbed::temp_dir& dir,
                      const std::string& socket = "") {
  local_socket_options o;
  o.host = "local";
  o.socket_path = socket.empty() ? f.lv.socket_path() : socket;
  o.libvirt_uri = "qemu:///system";
  o.bridge_dir = dir.path();
  o.connections = 1;
  return std::make_shared<local_socket_transport>(o);
}

// Two ranges (7 MiB and the rest) over two bridged sessions.
images::fill_request in_ranges(fixture& f, const testbed::temp_dir& dir) {
  auto r = f.request();
  r.transfer = bridged(f, dir);
  r.cleanup = bridged(f, dir);
  r.more_transfers = {bridged(f, dir)};
  r.min_range = 4 * mib;
  return r;
}

} // namespace

BOOST_AUTO_TEST_CASE(spec_42_an_image_goes_up_in_ranges_over_two_sessions_and_is_verified) {
  testbed::temp_dir dir{"ranges"};
  http.clear_log();
  auto r = fill(in_ranges(*this, dir));
  BOOST_REQUIRE_MESSAGE(r, show(r));
  BOOST_CHECK(r->transferred);
  auto log = http.log();
  BOOST_REQUIRE_EQUAL(log.size(), 2u);
  std::vector<std::string> asked{log[0].range, log[1].range};
  std::sort(asked.begin(), asked.end());
  BOOST_CHECK_EQUAL(asked[0], "");                                 // range 1 from byte 0
  BOOST_CHECK_EQUAL(asked[1], "bytes=" + std::to_string(7 * mib) + "-"); // range 2
  auto n = names();
  BOOST_CHECK(testbed::read_file(pool_dir + "/" + n.data) == image);
  BOOST_CHECK(exists(n.marker));
  BOOST_CHECK(!exists(n.partial));
}

// A byte flipped in the second range: each range alone looks fine; only the
// sha256 over the whole file sees it. Nothing is marked and nothing stays.
BOOST_AUTO_TEST_CASE(spec_42_the_digest_is_checked_over_the_whole_file) {
  testbed::temp_dir dir{"ranges"};
  http.set({.corrupt_at = 10 * mib + 7});
  auto r = fill(in_ranges(*this, dir));
  BOOST_REQUIRE(!r);
  BOOST_TEST_MESSAGE("corrupt: " << render(r.error()));
  BOOST_CHECK(is(r.error(), ec::digest_mismatch));
  BOOST_CHECK(volumes().empty());
}

// One session's connection is cut in the middle of its range: the other
// range completes, the fill fails transient and keeps what was written; the
// next fill reads each range's written prefix back and asks the mirror for
// the rest of the cut range only.
BOOST_AUTO_TEST_CASE(spec_42_a_range_cut_in_the_middle_resumes_that_range_only) {
  testbed::temp_dir dir{"ranges"};
  http.set({.drip_bytes = 128 * 1024, .drip_interval = 20ms});
  auto req = in_ranges(*this, dir);
  images::fill_progress progress;
  std::atomic<bool> done{false};
  // The first session takes range 1 at once; the second (whose transport
  // is cut) opens its connection first and so takes range 2. Cut once both
  // ranges are asked for and 2 MiB more arrived: range 2 is then inside.
  std::thread cutter{[&] {
    while (!done && http.log().size() < 2)
      std::this_thread::sleep_for(5ms);
    auto both = progress.bytes.load();
    while (!done && progress.bytes.load() < both + 2 * mib)
      std::this_thread::sleep_for(5ms);
    req.more_transfers[0]->kill();
  }};
  auto r = fill(req, &progress);
  done = true;
  cutter.join();
  BOOST_REQUIRE(!r);
  BOOST_TEST_MESSAGE("cut: " << render(r.error()));
  BOOST_CHECK(kind_of(r.error()) == error_kind::transient);
  auto n = names();
  BOOST_CHECK(exists(n.data));
  BOOST_CHECK(exists(n.partial));
  BOOST_CHECK(!exists(n.marker));

  http.set({});
  http.clear_log();
  images::fill_progress again_progress;
  auto again = fill(in_ranges(*this, dir), &again_progress);
  BOOST_REQUIRE_MESSAGE(again, show(again));
  auto log = http.log();
  BOOST_REQUIRE_EQUAL(log.size(), 1u); // the cut range alone
  const std::vector<uint64_t> begins{0, 7 * mib};
  const std::vector<uint64_t> ends{7 * mib, image.size()};
  auto from = log[0].range.empty() ? uint64_t{0}
                                   : std::stoull(log[0].range.substr(std::string{"bytes="}.size()));
  BOOST_TEST_MESSAGE("resumed with " << (log[0].range.empty() ? "no Range" : log[0].range)
                                     << ", " << again->resumed_from << " bytes read back");
  BOOST_CHECK(from % mib == 0);
  BOOST_CHECK_GT(from, begins[from >= 7 * mib ? 1 : 0]); // in the middle of its range
  // The other range was read back whole: at least its length is held.
  auto k = from >= 7 * mib ? 1 : 0;
  BOOST_CHECK_GE(again->resumed_from, ends[1 - k] - begins[1 - k]);
  BOOST_CHECK_LT(from, ends[k]);
  BOOST_CHECK(testbed::read_file(pool_dir + "/" + n.data) == image);
  BOOST_CHECK(exists(n.marker));
  BOOST_CHECK(!exists(n.partial));
  BOOST_CHECK_EQUAL(again_progress.bytes.load(), image.size());
}

// A host that takes one session and refuses the next (its connect fails):
// the first session takes every range, one after the other.
BOOST_AUTO_TEST_CASE(spec_42_a_host_that_refuses_a_second_session_gets_one) {
  testbed::temp_dir dir{"ranges"};
  auto req = in_ranges(*this, dir);
  req.more_transfers = {bridged(*this, dir, dir / "nobody-listens")};
  http.clear_log();
  auto r = fill(req);
  BOOST_REQUIRE_MESSAGE(r, show(r));
  BOOST_CHECK_EQUAL(http.log().size(), 2u); // both ranges, over the one session
  BOOST_CHECK(testbed::read_file(pool_dir + "/" + names().data) == image);
  BOOST_CHECK(exists(names().marker));
}

// -- the node's copy (engine.stage-dir) ---------------------------------------------

// Invariant 44: two pools (two hosts' worth) that both lack the image, filled
// at once through one stage: the mirror is read once, each pool gets the
// verified image and its marker from the node's copy, and a pool filled
// again later moves nothing.
BOOST_AUTO_TEST_CASE(spec_44_the_node_copy_is_fetched_once_for_every_pool) {
  testbed::temp_dir dir{"stage"};
  lv.define_dir_pool("images2");
  auto stage = images::image_stage::open(dir.path() + "/images", "alpha");
  BOOST_REQUIRE_MESSAGE(stage.engaged(), (stage ? std::string{} : render(stage.error())));
  http.set({.drip_bytes = mib, .drip_interval = 100ms}); // both fills wait on one fetch
  auto first = request();
  first.stage = *stage;
  auto second = request();
  second.pool = "images2";
  second.stage = *stage;
  images::fill_progress p1, p2;
  caf::expected<images::fill_result> r1 = make_error(ec::invalid_argument, "not run");
  auto r2 = r1;
  std::atomic<int> running{2};
  std::thread one{[&] { r1 = fill(first, &p1), --running; }};
  std::thread two{[&] { r2 = fill(second, &p2), --running; }};
  // Both show the copy's progress while it comes in: the one that fetches
  // and the one that waits.
  bool seen1 = false, seen2 = false;
  auto shows_copy = [&](images::fill_progress& p) {
    return p.staging && p.bytes > 0 && p.total == image.size();
  };
  while (running > 0) {
    seen1 = seen1 || shows_copy(p1);
    seen2 = seen2 || shows_copy(p2);
    std::this_thread::sleep_for(5ms);
  }
  one.join();
  two.join();
  BOOST_CHECK(seen1 && seen2);
  BOOST_REQUIRE_MESSAGE(r1, show(r1));
  BOOST_REQUIRE_MESSAGE(r2, show(r2));
  BOOST_CHECK(r1->transferred && r2->transferred);
  BOOST_CHECK_EQUAL(http.requests(), 1u);
  BOOST_CHECK_EQUAL((*stage)->fetches(), 1u);
  BOOST_CHECK(testbed::read_file(r1->path) == image);
  BOOST_CHECK(testbed::read_file(r2->path) == image);
  auto copy = dir.path() + "/images/" + names().data;
  BOOST_CHECK(testbed::read_file(copy) == image);
  BOOST_CHECK(!std::filesystem::exists(copy + ".partial"));
  auto again = fill(first);
  BOOST_REQUIRE_MESSAGE(again, show(again));
  BOOST_CHECK(!again->transferred);
  BOOST_CHECK_EQUAL(http.requests(), 1u);
  // A copy no longer declared goes; one still declared stays.
  (*stage)->keep_only({names().data});
  BOOST_CHECK(std::filesystem::exists(copy));
  (*stage)->keep_only({});
  BOOST_CHECK(!std::filesystem::exists(copy));
}

// Invariant 44: a pool that already holds the verified image asks for no copy
// (a warm restart fetches nothing).
BOOST_AUTO_TEST_CASE(spec_44_a_pool_that_holds_the_image_asks_for_no_copy) {
  testbed::temp_dir dir{"stage"};
  BOOST_REQUIRE(fill(request()));
  auto before = http.requests();
  auto r = fill(staged_request(dir));
  BOOST_REQUIRE_MESSAGE(r, show(r));
  BOOST_CHECK(!r->transferred);
  BOOST_CHECK_EQUAL(http.requests(), before);
  BOOST_CHECK(std::filesystem::is_empty(dir.path()));
}

// Invariant 44: a copy cut in the middle stays as <stem>.partial, nothing
// reaches the pool, and the next fill resumes it with a range; a corrupt
// byte leaves neither the copy nor anything in the pool.
BOOST_AUTO_TEST_CASE(spec_44_a_cut_copy_resumes_and_a_corrupt_one_is_not_kept) {
  testbed::temp_dir dir{"stage"};
  auto req = staged_request(dir);
  auto copy = dir.path() + "/" + names().data;
  http.set({.truncate_after = 5 * mib});
  auto cut = fill(req);
  BOOST_REQUIRE(!cut);
  BOOST_TEST_MESSAGE("cut: " << render(cut.error()));
  BOOST_CHECK(kind_of(cut.error()) == error_kind::transient);
  BOOST_CHECK(volumes().empty());
  BOOST_CHECK_EQUAL(std::filesystem::file_size(copy + ".partial"), 5 * mib);
  http.set({});
  http.clear_log();
  auto resumed = fill(req);
  BOOST_REQUIRE_MESSAGE(resumed, show(resumed));
  auto log = http.log();
  BOOST_REQUIRE_EQUAL(log.size(), 1u);
  BOOST_CHECK_EQUAL(log[0].range, "bytes=" + std::to_string(5 * mib) + "-");
  BOOST_CHECK(testbed::read_file(resumed->path) == image);

  auto other = request();
  other.image.name = "other";
  other.stage = req.stage;
  http.set({.corrupt_at = 3 * mib});
  auto bad = fill(other);
  BOOST_REQUIRE(!bad);
  BOOST_CHECK(is(bad.error(), ec::digest_mismatch));
  auto stem = images::volume_names::of("alpha", "other", digest).data;
  BOOST_CHECK(!std::filesystem::exists(dir.path() + "/" + stem));
  BOOST_CHECK(!std::filesystem::exists(dir.path() + "/" + stem + ".partial"));
  BOOST_CHECK_EQUAL(volumes().size(), 2u); // base's data and marker only
}

BOOST_AUTO_TEST_SUITE_END()

namespace {

// 12 MiB of random data and 4 MiB of zeros as a real qcow2 (qemu-img
// convert): data clusters, metadata, and a virtual size (16 MiB) that is not
// its length (~12 MiB). libvirt reports that virtual size as the capacity of
// any volume holding it.
const test::qcow2_image& real_qcow2() {
  static const auto q = test::make_qcow2(pattern(12 * mib, 11) + std::string(4 * mib, '\0'));
  return q;
}

struct qcow2_fixture : fixture {
  qcow2_fixture() : fixture(real_qcow2().bytes, "qcow2") {}

  uint64_t capacity_libvirt_reports(const std::string& volume) {
    auto out = lv.virsh({"vol-info", "--bytes", "--pool", pool_name, volume}).output;
    auto at = out.find("Capacity:");
    return at == std::string::npos ? 0 : std::stoull(out.substr(at + 9));
  }
};

} // namespace

BOOST_FIXTURE_TEST_SUITE(image_fill_qcow2_suite, qcow2_fixture)

// The fill compares byte lengths, never capacities: a real qcow2 fills,
// verifies and marks (with its virtual size), and is ready again from its
// marker with nothing downloaded.
BOOST_AUTO_TEST_CASE(spec_08_23_a_real_qcow2_fills_verifies_and_is_ready_without_a_download) {
  auto& q = real_qcow2();
  BOOST_REQUIRE_NE(q.bytes.size(), q.virtual_size);
  auto r = fill(request());
  BOOST_REQUIRE_MESSAGE(r, show(r));
  auto n = names();
  BOOST_CHECK(r->transferred);
  BOOST_CHECK_EQUAL(r->length, q.bytes.size());
  BOOST_CHECK_EQUAL(r->virtual_size, q.virtual_size);
  BOOST_CHECK(testbed::read_file(pool_dir + "/" + n.data) == q.bytes);
  // What fooled the fill before: libvirt's capacity of the data volume.
  BOOST_CHECK_EQUAL(capacity_libvirt_reports(n.data), q.virtual_size);
  auto marker = testbed::read_file(pool_dir + "/" + n.marker);
  BOOST_CHECK(marker.find("length " + std::to_string(q.bytes.size())) != std::string::npos);
  BOOST_CHECK(marker.find("format qcow2") != std::string::npos);
  BOOST_CHECK(marker.find("virtual-size " + std::to_string(q.virtual_size)) != std::string::npos);
  BOOST_CHECK(!exists(n.partial));

  auto requests = http.requests();
  auto again = fill(request());
  BOOST_REQUIRE_MESSAGE(again, show(again));
  BOOST_CHECK(!again->transferred);
  BOOST_CHECK_EQUAL(again->length, q.bytes.size());
  BOOST_CHECK_EQUAL(again->virtual_size, q.virtual_size);
  BOOST_CHECK_EQUAL(http.requests(), requests);
}

BOOST_AUTO_TEST_CASE(spec_08_23_a_qcow2_with_compressed_clusters_fills) {
  std::string text;
  while (text.size() < 8 * mib)
    text += "compressible line " + std::to_string(text.size()) + "\n";
  text.resize(8 * mib);
  auto c = test::make_qcow2(text, {.compressed = true});
  image = c.bytes;
  digest = mirror::sha256_hex(image);
  http.set_body(image);
  auto r = fill(request());
  BOOST_REQUIRE_MESSAGE(r, show(r));
  BOOST_CHECK_EQUAL(r->length, c.bytes.size());
  BOOST_CHECK_EQUAL(r->virtual_size, 8 * mib);
  BOOST_CHECK(testbed::read_file(pool_dir + "/" + names().data) == c.bytes);
}

// Cut at 7 MiB: the volume holds less than the image, the next fill resumes
// at the MiB below what it holds (never at a capacity), reads the prefix
// back through the format check and the digest, and ends verified.
BOOST_AUTO_TEST_CASE(spec_08_23_an_interrupted_qcow2_fill_resumes_below_what_the_volume_holds) {
  http.set({.truncate_after = 7 * mib + 100});
  auto r = fill(request());
  BOOST_REQUIRE(!r);
  BOOST_CHECK(kind_of(r.error()) == error_kind::transient);
  auto n = names();
  BOOST_CHECK(exists(n.data) && exists(n.partial) && !exists(n.marker));
  http.set({});
  http.clear_log();
  auto again = fill(request());
  BOOST_REQUIRE_MESSAGE(again, show(again));
  BOOST_TEST_MESSAGE("resumed at " << again->resumed_from << " bytes");
  BOOST_CHECK(again->resumed_from > 0);
  BOOST_CHECK(again->resumed_from <= 7 * mib);
  BOOST_CHECK_EQUAL(again->resumed_from % mib, 0u);
  auto log = http.log();
  BOOST_REQUIRE(!log.empty());
  BOOST_CHECK_EQUAL(log.back().range, "bytes=" + std::to_string(again->resumed_from) + "-");
  BOOST_CHECK_EQUAL(again->virtual_size, real_qcow2().virtual_size);
  BOOST_CHECK(testbed::read_file(pool_dir + "/" + n.data) == image);
  BOOST_CHECK(exists(n.marker) && !exists(n.partial));
}

BOOST_AUTO_TEST_CASE(spec_08_a_corrupt_qcow2_is_never_marked_and_leaves_nothing) {
  http.set({.corrupt_at = 5 * mib});
  auto r = fill(request());
  BOOST_REQUIRE(!r);
  BOOST_CHECK(is(r.error(), ec::digest_mismatch));
  BOOST_CHECK(volumes().empty());
}

BOOST_AUTO_TEST_CASE(spec_08_a_qcow2_of_the_wrong_length_is_never_marked) {
  http.set({.length_delta = 100});
  auto r = fill(request());
  BOOST_REQUIRE(!r);
  BOOST_CHECK(is(r.error(), ec::length_mismatch));
  BOOST_CHECK(volumes().empty());
}

// A qcow2 that names a backing file never reaches the pool: refused before
// a byte is uploaded (libvirt would read the header on the next refresh and
// open the file it names), permanent, nothing left.
BOOST_AUTO_TEST_CASE(spec_23_a_qcow2_naming_a_backing_file_never_reaches_the_pool) {
  auto b = test::make_qcow2(pattern(4 * mib, 2), {.backing_file = "/etc/shadow"});
  image = b.bytes;
  digest = mirror::sha256_hex(image);
  http.set_body(image);
  auto r = fill(request());
  BOOST_REQUIRE(!r);
  BOOST_TEST_MESSAGE("backing file: " << render(r.error()));
  BOOST_CHECK(is(r.error(), ec::image_rejected));
  BOOST_CHECK(kind_of(r.error()) == error_kind::permanent);
  BOOST_CHECK(detail(r.error()).find("/etc/shadow") != std::string::npos);
  BOOST_CHECK(volumes().empty());
}

// Format confusion: the same qcow2 declared raw is refused the same way.
BOOST_AUTO_TEST_CASE(spec_23_a_raw_image_with_a_qcow2_header_never_reaches_the_pool) {
  format = "raw";
  auto r = fill(request());
  BOOST_REQUIRE(!r);
  BOOST_TEST_MESSAGE("raw with a qcow2 header: " << render(r.error()));
  BOOST_CHECK(is(r.error(), ec::image_rejected));
  BOOST_CHECK(detail(r.error()).find("qcow2 header") != std::string::npos);
  BOOST_CHECK(volumes().empty());
}

// A pool marked before the format check existed: the data (a qcow2 that
// was declared raw) and its marker are in place. The ready check reads the
// header again, refuses it, and deletes marker and data.
BOOST_AUTO_TEST_CASE(spec_23_an_image_marked_ready_before_the_check_is_checked_again) {
  format = "raw";
  auto n = names();
  auto req = request();
  testbed::write_file(pool_dir + "/" + n.data, image, 0600);
  testbed::write_file(pool_dir + "/" + n.marker,
                      images::marker_text(req.image, image.size(), image.size()), 0600);
  auto r = fill(req);
  BOOST_REQUIRE(!r);
  BOOST_TEST_MESSAGE("marked before the check: " << render(r.error()));
  BOOST_CHECK(is(r.error(), ec::image_rejected));
  BOOST_CHECK_EQUAL(http.requests(), 0u); // decided from the pool alone
  BOOST_CHECK(volumes().empty());
}

// docs/notes/failures.md#two-entries-share-volumes with real qcow2 images: two entries on one pool share nothing.
BOOST_AUTO_TEST_CASE(spec_09_two_entries_fill_one_qcow2_on_one_pool_and_share_nothing) {
  auto a = fill(request("alpha"));
  BOOST_REQUIRE_MESSAGE(a, show(a));
  auto b = fill(request("beta"));
  BOOST_REQUIRE_MESSAGE(b, show(b));
  BOOST_CHECK_NE(a->volume, b->volume);
  BOOST_CHECK(b->transferred);
  std::filesystem::remove(pool_dir + "/" + names("beta").marker);
  http.set({.corrupt_at = 1});
  BOOST_REQUIRE(!fill(request("beta")));
  BOOST_CHECK(testbed::read_file(pool_dir + "/" + names("alpha").data) == image);
  BOOST_CHECK(!exists(names("beta").data));
  auto a2 = fill(request("alpha"));
  BOOST_REQUIRE_MESSAGE(a2, show(a2));
  BOOST_CHECK(!a2->transferred);
  BOOST_CHECK_EQUAL(a2->virtual_size, real_qcow2().virtual_size);
}

BOOST_AUTO_TEST_SUITE_END()

namespace {

constexpr uint64_t packet = lv::default_upload_chunk;

// A 32 MiB raw disk with a real ext4 file system holding 6 MiB of files
// (mke2fs -d): its inode table and free blocks are zeros, about three
// quarters of the image in runs of many packets, the first one before the
// files' data.
const std::string& real_ext4() {
  static const auto d = test::make_ext4(32 * mib, {{"a", pattern(3 * mib, 21)},
                                                   {"b", pattern(2 * mib, 22)},
                                                   {"c", pattern(1 * mib, 23)}});
  return d;
}

bool zero_packet(const std::string& s, uint64_t at) {
  auto n = std::min<uint64_t>(packet, s.size() - at);
  return s.find_first_not_of('\0', at) >= at + n;
}

// The bytes an upload of `s` sends as holes into a volume that reads as
// zeros from `from` on: its packets there that are all zeros.
uint64_t zeros_in_packets(const std::string& s, uint64_t from = 0) {
  uint64_t out = 0;
  for (uint64_t at = 0; at < s.size(); at += packet)
    if (at >= from && zero_packet(s, at))
      out += std::min<uint64_t>(packet, s.size() - at);
  return out;
}

// Where the first run of zero packets ends (the next data packet), 0 if
// there is none.
uint64_t end_of_first_hole(const std::string& s) {
  uint64_t at = 0;
  while (at < s.size() && !zero_packet(s, at))
    at += packet;
  while (at < s.size() && zero_packet(s, at))
    at += packet;
  return at < s.size() ? at : 0;
}

uint64_t allocated_bytes(const std::string& path) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0)
    return 0;
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

struct ext4_fixture : fixture {
  ext4_fixture() : fixture(real_ext4(), "raw") {}
  std::string data_path() const { return pool_dir + "/" + names().data; }

  struct resumed {
    uint64_t cut_length = 0; // the data volume's length after the cut
    images::fill_result result;
  };

  // A fill of `r` whose mirror cuts its answer after `cut` bytes (past the
  // first hole: the volume is left short), then one that completes: it
  // resumes, not from byte 0 and not past the cut, and ends with the image
  // and its virtual size.
  resumed cut_then_resume(const images::fill_request& r, uint64_t cut) {
    http.set({.truncate_after = cut});
    auto first = fill(r);
    BOOST_REQUIRE(!first);
    BOOST_CHECK(kind_of(first.error()) == error_kind::transient);
    resumed out;
    out.cut_length = std::filesystem::file_size(data_path());
    BOOST_CHECK_LT(out.cut_length, image.size());
    BOOST_CHECK(exists(names().partial));
    http.set({});
    http.clear_log();
    auto again = fill(r);
    BOOST_REQUIRE_MESSAGE(again, show(again));
    BOOST_TEST_MESSAGE("cut at " << cut << ", resumed at " << again->resumed_from);
    BOOST_CHECK_GT(again->resumed_from, 0u);
    BOOST_CHECK_LE(again->resumed_from, cut);
    BOOST_CHECK_EQUAL(again->virtual_size, image.size());
    BOOST_CHECK(testbed::read_file(data_path()) == image);
    out.result = *again;
    return out;
  }
};

} // namespace

BOOST_FIXTURE_TEST_SUITE(image_fill_sparse_suite, ext4_fixture)

// A fresh upload sends the zero packets of a raw disk as holes: the volume
// reads back byte for byte the image, and the host stores only its data.
BOOST_AUTO_TEST_CASE(spec_45_a_raw_disk_moves_only_its_data_and_stays_sparse) {
  auto zeros = zeros_in_packets(image);
  BOOST_REQUIRE_GT(zeros, image.size() / 2);
  auto r = fill(request());
  BOOST_REQUIRE_MESSAGE(r, show(r));
  BOOST_CHECK(r->transferred);
  BOOST_CHECK_EQUAL(r->holes, zeros);
  BOOST_CHECK(testbed::read_file(data_path()) == image);
  BOOST_TEST_MESSAGE("allocated " << allocated_bytes(data_path()) << " of " << image.size());
  BOOST_CHECK_LE(allocated_bytes(data_path()), image.size() - zeros + mib);
  BOOST_CHECK(exists(names().marker) && !exists(names().partial));
}

// Cut after the first hole, the file is as long as the daemon got
// (providers/libvirt/volumes.hpp): the next fill resumes there with a
// Range, not from byte 0, checks the prefix against the image's length
// (not the short file's: the virtual size a raw image reports), sends
// every byte up to the file's end and the zeros past it as holes.
BOOST_AUTO_TEST_CASE(spec_45_a_sparse_upload_cut_after_a_hole_resumes_where_it_got) {
  auto data_after_hole = end_of_first_hole(image);
  BOOST_REQUIRE(data_after_hole > 0);
  auto cut = data_after_hole + 3 * mib + 100;
  BOOST_REQUIRE_LT(cut, image.size() - 4 * mib);
  auto [cut_length, again] = cut_then_resume(request(), cut);
  BOOST_CHECK_EQUAL(again.holes, zeros_in_packets(image, cut_length));
  BOOST_CHECK_GT(again.holes, 0u);
  auto log = http.log();
  BOOST_REQUIRE(!log.empty());
  BOOST_CHECK_EQUAL(log.back().range, "bytes=" + std::to_string(again.resumed_from) + "-");
  BOOST_CHECK(exists(names().marker) && !exists(names().partial));
}

// The same with no size in the config: the fill does not know the image's
// length before the source answers, so it resumes lower, at what the short
// volume holds allocated, and still ends verified with the image's size.
BOOST_AUTO_TEST_CASE(spec_45_an_unsized_image_cut_after_a_hole_resumes_lower_and_verifies) {
  auto unsized = request();
  unsized.image.size = 0;
  unsized.image.max_size = 64 * mib;
  auto [cut_length, again] = cut_then_resume(unsized, end_of_first_hole(image) + 3 * mib + 100);
  // Resumed at the allocation, below the file's length.
  BOOST_CHECK_LT(again.resumed_from, cut_length);
}

// A hole skips bytes without writing them: a data volume of the image's
// length that holds other bytes (nobody's partial upload; a stopped proxy's
// overlay may name it) is written over in place, every byte, so none of
// the old ones stays.
BOOST_AUTO_TEST_CASE(spec_45_an_upload_from_byte_0_never_leaves_old_bytes_under_a_hole) {
  testbed::write_file(data_path(), std::string(image.size(), '\xff'));
  lv.virsh({"pool-refresh", pool_name});
  auto r = fill(request());
  BOOST_REQUIRE_MESSAGE(r, show(r));
  BOOST_CHECK_EQUAL(r->holes, 0u);
  BOOST_CHECK(testbed::read_file(data_path()) == image);
}

// The node's copy (engine.stage-dir) of a raw disk leaves its zeros
// unwritten too: it reads back as the image and takes about its data on
// the node's disk.
BOOST_AUTO_TEST_CASE(spec_45_the_node_copy_of_a_raw_disk_is_sparse) {
  testbed::temp_dir dir{"stage"};
  auto r = fill(staged_request(dir));
  BOOST_REQUIRE_MESSAGE(r, show(r));
  auto zeros = zeros_in_packets(image);
  BOOST_CHECK_EQUAL(r->holes, zeros);
  auto copy = dir / names().data;
  BOOST_CHECK(testbed::read_file(copy) == image);
  BOOST_TEST_MESSAGE("the node's copy: allocated " << allocated_bytes(copy) << " of "
                                                   << image.size());
  BOOST_CHECK_LE(allocated_bytes(copy), image.size() - zeros + mib);
  BOOST_CHECK(testbed::read_file(data_path()) == image);
}

BOOST_AUTO_TEST_SUITE_END()
