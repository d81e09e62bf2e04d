#define BOOST_TEST_MODULE volumes
// Volume create / upload / delete against a real private libvirtd (qemu:///system
// driver, a dir pool), both directly on its unix socket and over the engine's
// own SSH link (real sshd, bridge, pump). What arrives is read back from the
// pool's target file on disk. The test driver has no virStorageVolUpload
// (docs/notes/transport.md#test-driver), so this needs the real daemon.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <any>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <openssl/evp.h>

#include <caf/scoped_actor.hpp>

#include "messages/error.hpp"
#include "providers/libvirt/connection.hpp"
#include "providers/libvirt/volumes.hpp"
#include "testbed/engine_fixture.hpp"
#include "testbed/test_data.hpp"
#include "testbed/ssh_host.hpp"
#include "testbed/testbed.hpp"

using namespace egress;
using test::pattern;
using test::resources;
using test::now_resources;
using test::operator<<;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
using test::eventually;
using test::link_of;
using test::status_of;

namespace {

constexpr uint64_t mib = uint64_t{1} << 20;
const std::string pool_name = "images";

double ms_since(clock_type::time_point t0, clock_type::time_point t1 = clock_type::now()) {
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

// ---- data -------------------------------------------------------------------

std::string sha256(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr);
  static const char hex[] = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < len; ++i) {
    out += hex[md[i] >> 4];
    out += hex[md[i] & 0xf];
  }
  return out;
}

// A source reading `data` in pieces of at most `piece` bytes; fails with
// `fail_with` once `fail_at` bytes were handed out (if set). `on_read` runs
// before every read with the bytes handed out so far.
struct memory_source {
  std::shared_ptr<const std::string> data;
  size_t piece = SIZE_MAX;
  uint64_t fail_at = UINT64_MAX;
  caf::error fail_with;
  std::function<void(uint64_t)> on_read;
  std::shared_ptr<std::atomic<int64_t>> failed_ns = std::make_shared<std::atomic<int64_t>>(0);
  std::shared_ptr<size_t> pos = std::make_shared<size_t>(0);

  caf::expected<size_t> operator()(char* buf, size_t cap) const {
    if (on_read)
      on_read(*pos);
    if (*pos >= fail_at) {
      failed_ns->store(clock_type::now().time_since_epoch().count());
      return fail_with;
    }
    auto n = std::min({cap, piece, data->size() - *pos});
    std::memcpy(buf, data->data() + *pos, n);
    *pos += n;
    return n;
  }
};

// The error a failing image source reports: a code upload_volume never
// makes itself, and a text of its own.
caf::error source_error() {
  return make_error(ec::access_denied, "image source: read /images/base.img at byte "
                                         + std::to_string(3 * mib)
                                         + ": permission denied");
}

// ---- the daemons and the two paths to them -------------------------------------

struct root_gate {
  root_gate() { testbed::require_root_or_skip(); }
};

struct daemons {
  testbed::libvirtd lv;
  testbed::sshd ssh;
  std::string pool_dir;

  static testbed::libvirtd_options lv_options() {
    testbed::libvirtd_options o;
    o.warm_qemu_caps = false; // storage needs no QEMU probe
    return o;
  }

  daemons() : lv(lv_options()) {
    lv.start();
    ssh.start();
    pool_dir = lv.define_dir_pool(pool_name);
  }

  std::string file_of(const std::string& volume) const { return pool_dir + "/" + volume; }

  host_config host() const {
    auto h = test::ssh_host(ssh, lv, "hv1", "qemu:///system");
    h.call_budget = 30s;
    return h;
  }
};

using job_fn = std::function<caf::error(lv::connection&)>;

// A way to run a blocking provider function against the daemon.
class path {
public:
  virtual ~path() = default;
  virtual const char* name() const = 0;
  /// Runs `fn` to completion and returns its error (or the path's own).
  virtual caf::error run(job_fn fn) = 0;
};

// libvirt's client on the daemon's unix socket, called on this thread.
class direct_path final : public path {
public:
  explicit direct_path(const daemons& d) {
    auto c = lv::connection::open(d.lv.uri(), lv::keepalive{1, 3});
    // Boost builds the message even when the check passes.
    BOOST_REQUIRE_MESSAGE(c, "open " << d.lv.uri() << ": " << (c ? "" : render(c.error())));
    conn_ = std::move(*c);
  }
  const char* name() const override { return "direct"; }
  caf::error run(job_fn fn) override { return fn(*conn_); }
  lv::connection& conn() { return *conn_; }

private:
  lv::connection_ptr conn_;
};

// A call_job through the engine's host link over SSH.
class link_path final : public path {
public:
  link_path(caf::actor_system& sys, const daemons& d) : sys_(sys) {
    auto cfg = test::test_config("ssh");
    cfg.hosts.push_back(d.host());
    auto eng = engine::start(sys, cfg);
    BOOST_REQUIRE_MESSAGE(eng, "engine start: " << (eng ? "" : render(eng.error())));
    eng_.emplace(std::move(*eng));
    caf::scoped_actor self{sys_};
    link_ = link_of(self, *eng_, "hv1");
    // A first dial that failed on a loaded machine is retried by a call.
    BOOST_REQUIRE(test::wait_up(self, link_));
  }
  ~link_path() override {
    if (eng_)
      if (auto err = eng_->stop())
        BOOST_ERROR("engine stop: " << render(err));
  }
  const char* name() const override { return "ssh link"; }

  caf::error run(job_fn fn) override {
    call_job job;
    job.what = "volume test";
    job.budget = 60s;
    job.fn = [fn = std::move(fn)](lv::connection& c) -> caf::expected<std::any> {
      if (auto err = fn(c))
        return err;
      return std::any{};
    };
    caf::error out;
    caf::scoped_actor self{sys_};
    self->request(link_, 90s, atom::call_v, std::move(job))
      .receive([](call_result&) {}, [&](caf::error& e) { out = std::move(e); });
    return out;
  }

  const host_link_actor& link() const { return link_; }

private:
  caf::actor_system& sys_;
  std::optional<engine> eng_;
  host_link_actor link_;
};

struct fixture : root_gate, test::engine_fixture {
  daemons d;

  std::unique_ptr<path> make(bool over_ssh) {
    if (over_ssh)
      return std::make_unique<link_path>(*sys, d);
    return std::make_unique<direct_path>(d);
  }

  caf::error create(path& p, const std::string& name, uint64_t capacity,
                    const std::string& format = "raw", const std::string& pool = pool_name) {
    return p.run([=](lv::connection& c) -> caf::error {
      auto v = lv::create_volume(c, pool, name, capacity, format);
      return v ? caf::error{} : v.error();
    });
  }

  caf::error remove(path& p, const std::string& name, const std::string& pool = pool_name) {
    return p.run([=](lv::connection& c) { return lv::delete_volume(c, pool, name); });
  }

  caf::error upload(path& p, const std::string& name, uint64_t offset, uint64_t length,
                    lv::upload_source src, size_t chunk, uint64_t* sent = nullptr,
                    const std::string& pool = pool_name) {
    auto n = std::make_shared<std::atomic<uint64_t>>(0);
    auto err = p.run([=](lv::connection& c) {
      return lv::upload_volume(c, pool, name, offset, length, src, chunk, n.get());
    });
    if (sent != nullptr)
      *sent = n->load();
    return err;
  }

  /// A second dir pool "tiny" on a 4 MiB tmpfs that exists only inside the
  /// daemon's own mount namespace (it goes away with the daemon): a write
  /// past 4 MiB fails with ENOSPC inside libvirtd, in the middle of a stream.
  void add_tiny_pool() {
    auto target = d.lv.dir() + "/pools/tiny";
    std::filesystem::create_directories(target);
    testbed::run_checked({"nsenter", "-t", std::to_string(d.lv.pid()), "-m", "mount", "-t",
                          "tmpfs", "-o", "size=4m,mode=0755", "egress-tiny-pool", target});
    d.lv.define_dir_pool("tiny");
  }
};

// ---- scenarios shared by both paths ---------------------------------------------

void round_trip(fixture& f, path& p, const std::string& vol) {
  BOOST_TEST_MESSAGE("-- round trip, " << p.name());
  auto data = std::make_shared<const std::string>(pattern(8 * mib, 42));
  BOOST_REQUIRE(!f.create(p, vol, 8 * mib));
  BOOST_CHECK(std::filesystem::exists(f.d.file_of(vol)));
  memory_source src;
  src.data = data;
  src.piece = 100'000; // odd pieces: upload_volume must still fill whole chunks
  uint64_t sent = 0;
  auto t0 = clock_type::now();
  auto err = f.upload(p, vol, 0, data->size(), src, lv::default_upload_chunk, &sent);
  BOOST_TEST_MESSAGE(p.name() << ": 8 MiB uploaded in " << ms_since(t0) << " ms");
  BOOST_REQUIRE_MESSAGE(!err, render(err));
  BOOST_CHECK_EQUAL(sent, data->size());
  auto disk = testbed::read_file(f.d.file_of(vol));
  BOOST_CHECK_EQUAL(disk.size(), data->size());
  BOOST_CHECK_EQUAL(sha256(disk), sha256(*data));
  BOOST_CHECK(disk == *data);
  BOOST_CHECK(!f.remove(p, vol));
  BOOST_CHECK(!std::filesystem::exists(f.d.file_of(vol)));
  BOOST_CHECK(!f.remove(p, vol)); // missing = success
}

// Uploads with a source that fails after 3 MiB; checks the error, the time
// to return, and that the thread and fd counts come back to where they were.
void source_failure(fixture& f, path& p, const std::string& vol) {
  BOOST_TEST_MESSAGE("-- source failure, " << p.name());
  auto data = std::make_shared<const std::string>(pattern(8 * mib, 7));
  BOOST_REQUIRE(!f.create(p, vol, 8 * mib));
  // Warm-up: one full upload, so that everything that is created once (the
  // call actor machinery, libvirt's per-connection state) exists already.
  {
    memory_source warm;
    warm.data = data;
    BOOST_REQUIRE(!f.upload(p, vol, 0, mib, warm, lv::default_upload_chunk));
  }
  std::this_thread::sleep_for(200ms);
  auto baseline = now_resources();
  memory_source src;
  src.data = data;
  src.fail_at = 3 * mib;
  src.fail_with = source_error();
  std::atomic<uint64_t> sent{0};
  std::atomic<int64_t> returned_ns{0};
  auto err = p.run([&](lv::connection& c) {
    auto e = lv::upload_volume(c, pool_name, vol, 0, data->size(), src,
                               lv::default_upload_chunk, &sent);
    returned_ns = clock_type::now().time_since_epoch().count();
    return e;
  });
  BOOST_REQUIRE(src.failed_ns->load() != 0);
  auto took = std::chrono::nanoseconds(returned_ns - src.failed_ns->load());
  auto took_ms = static_cast<double>(took.count()) / 1e6;
  BOOST_TEST_MESSAGE(p.name() << ": source failed -> upload returned in " << took_ms
                              << " ms; error: " << render(err));
  // Exactly the source's error: same code, same text.
  BOOST_CHECK(err == source_error());
  BOOST_CHECK_EQUAL(render(err), render(source_error()));
  BOOST_CHECK_EQUAL(sent.load(), 3 * mib);
  BOOST_CHECK(took < 2s); // one abort round trip
  // Nothing leaked: threads and fds come back to the baseline.
  resources after;
  bool settled = eventually(
    [&] {
      after = now_resources();
      return after == baseline;
    },
    3s);
  BOOST_TEST_MESSAGE(p.name() << ": before " << baseline << "; after " << after);
  BOOST_CHECK_MESSAGE(settled, p.name() << ": resources did not return to the baseline: "
                                        << baseline << " -> " << after);
  // The stream was aborted, not left open: the same connection (and the
  // same volume) takes a complete upload right away.
  memory_source again;
  again.data = data;
  auto err2 = f.upload(p, vol, 0, data->size(), again, lv::default_upload_chunk);
  BOOST_CHECK_MESSAGE(!err2, render(err2));
  BOOST_CHECK(testbed::read_file(f.d.file_of(vol)) == *data);
  BOOST_CHECK(!f.remove(p, vol));
}

// libvirt itself fails mid-stream: the daemon's write hits ENOSPC on the
// tiny pool. The upload returns libvirt's classified error, promptly, and
// leaks nothing.
void no_space(fixture& f, path& p, const std::string& vol) {
  BOOST_TEST_MESSAGE("-- no space left in the pool, " << p.name());
  auto data = std::make_shared<const std::string>(pattern(8 * mib, 11));
  BOOST_REQUIRE(!f.create(p, vol, 8 * mib, "raw", "tiny"));
  {
    memory_source warm;
    warm.data = data;
    auto err = f.upload(p, vol, 0, mib, warm, lv::default_upload_chunk, nullptr, "tiny");
    BOOST_REQUIRE_MESSAGE(!err, render(err));
  }
  std::this_thread::sleep_for(200ms);
  auto baseline = now_resources();
  memory_source src;
  src.data = data;
  uint64_t sent = 0;
  auto t0 = clock_type::now();
  auto err = f.upload(p, vol, 0, data->size(), src, lv::default_upload_chunk, &sent, "tiny");
  auto took = ms_since(t0);
  BOOST_TEST_MESSAGE(p.name() << ": returned after " << took << " ms, " << sent
                              << " bytes accepted: " << render(err));
  BOOST_CHECK(err);
  BOOST_CHECK(err != source_error());
  // It is libvirt's error, through lv::last_error with our context.
  BOOST_CHECK(detail(err).find("upload tiny/" + vol) != std::string::npos);
  BOOST_CHECK(detail(err).find("code=") != std::string::npos);
  BOOST_CHECK(kind_of(err) == error_kind::permanent || kind_of(err) == error_kind::transient);
  BOOST_CHECK(took < 10'000);
  resources after;
  bool settled = eventually(
    [&] {
      after = now_resources();
      return after == baseline;
    },
    3s);
  BOOST_TEST_MESSAGE(p.name() << ": before " << baseline << "; after " << after);
  BOOST_CHECK_MESSAGE(settled, p.name() << ": resources did not return to the baseline: "
                                        << baseline << " -> " << after);
  auto del = f.remove(p, vol, "tiny");
  BOOST_CHECK_MESSAGE(!del, render(del));
}

// The daemon dies under the upload (SIGKILL while the source holds at
// 2 MiB): a transient error, at once; then the daemon is restarted.
void daemon_crash(fixture& f, path& p, const std::string& vol) {
  BOOST_TEST_MESSAGE("-- libvirtd killed mid-upload, " << p.name());
  auto data = std::make_shared<const std::string>(pattern(8 * mib, 13));
  BOOST_REQUIRE(!f.create(p, vol, 8 * mib));
  auto reached = std::make_shared<std::atomic<bool>>(false);
  auto go = std::make_shared<std::atomic<bool>>(false);
  memory_source src;
  src.data = data;
  src.on_read = [reached, go](uint64_t pos) {
    if (pos != 2 * mib)
      return;
    *reached = true;
    while (!*go)
      std::this_thread::sleep_for(1ms);
  };
  uint64_t sent = 0;
  // The daemon is crashed and restarted from this thread (it dies with the
  // thread that spawned it), so the upload runs on another.
  auto fut = std::async(std::launch::async, [&] {
    return f.upload(p, vol, 0, data->size(), src, lv::default_upload_chunk, &sent);
  });
  bool at_2mib = eventually([&] { return reached->load(); }, 20s);
  f.d.lv.crash();
  auto crashed_at = clock_type::now();
  *go = true;
  BOOST_REQUIRE(at_2mib);
  bool returned = fut.wait_for(15s) == std::future_status::ready;
  auto took = ms_since(crashed_at);
  BOOST_CHECK_MESSAGE(returned, p.name() << ": upload still blocked 15 s after the crash");
  auto err = fut.get();
  BOOST_TEST_MESSAGE(p.name() << ": returned " << took << " ms after the crash, " << sent
                              << " bytes accepted: " << render(err));
  BOOST_CHECK(err);
  BOOST_CHECK(kind_of(err) == error_kind::transient);
  BOOST_CHECK(took < 5'000);
  // What went out after the crash depends on the buffers on the way (the
  // bridge, the SSH window); the failure may even wait for the finish.
  BOOST_CHECK(sent >= 2 * mib);
  f.d.lv.start();
  f.d.lv.virsh({"pool-start", pool_name}); // a defined pool is inactive after a restart
  if (auto* lp = dynamic_cast<link_path*>(&p)) {
    // The link died with the daemon's socket and redials on the next call.
    caf::scoped_actor self{*f.sys};
    BOOST_TEST_MESSAGE(p.name() << ": link " << to_string(status_of(self, lp->link()).state)
                                << " after the crash");
    caf::error last;
    BOOST_CHECK_MESSAGE(eventually([&] { return !(last = f.remove(p, vol)); }, 15s),
                        "no call succeeded over the redialled link: " << render(last));
  } else {
    // A direct connection has no redial: it is dead for good, a new one works.
    BOOST_CHECK(!static_cast<direct_path&>(p).conn().alive());
    direct_path after{f.d};
    BOOST_CHECK(!f.remove(after, vol));
  }
}

} // namespace

BOOST_FIXTURE_TEST_SUITE(volume_upload_suite, fixture)

BOOST_AUTO_TEST_CASE(upload_round_trip_direct) {
  auto p = make(false);
  round_trip(*this, *p, "rt-direct");
}

BOOST_AUTO_TEST_CASE(upload_round_trip_over_the_ssh_link) {
  auto p = make(true);
  round_trip(*this, *p, "rt-ssh");
}

BOOST_AUTO_TEST_CASE(spec_06_source_failure_aborts_stream_and_returns_source_error) {
  for (bool over_ssh : {false, true}) {
    auto p = make(over_ssh);
    source_failure(*this, *p, over_ssh ? "fail-ssh" : "fail-direct");
  }
}

BOOST_AUTO_TEST_CASE(libvirt_side_failure_is_classified_and_does_not_hang) {
  add_tiny_pool();
  for (bool over_ssh : {false, true}) {
    auto p = make(over_ssh);
    no_space(*this, *p, over_ssh ? "full-ssh" : "full-direct");
  }
  for (bool over_ssh : {false, true}) {
    auto p = make(over_ssh);
    daemon_crash(*this, *p, over_ssh ? "crash-ssh" : "crash-direct");
  }
}

// Found by the chaos soak (`build/soak --bed vms --hosts 2 --proxies 4
// --minutes 30 --seed 37 --engine caf-run`): its lose_image removed a cached
// image's file behind libvirt between the fill's look at the pool and its
// upload; libvirt's stream open failed with ENOENT (a system error), which
// was permanent and latched the image as failed for its 5-minute
// retry_max. The volume is gone, not broken: transient volume_gone.
BOOST_AUTO_TEST_CASE(spec_10_soak_seed_37_an_upload_into_a_file_deleted_behind_libvirt_is_transient) {
  for (bool over_ssh : {false, true}) {
    auto p = make(over_ssh);
    auto vol = std::string{over_ssh ? "gone-ssh" : "gone-direct"};
    auto data = std::make_shared<const std::string>(pattern(mib, 5));
    BOOST_REQUIRE(!create(*p, vol, mib));
    BOOST_REQUIRE(std::filesystem::remove(d.file_of(vol)));
    memory_source src;
    src.data = data;
    auto err = upload(*p, vol, 0, data->size(), src, lv::default_upload_chunk);
    BOOST_TEST_MESSAGE(p->name() << ": " << render(err));
    BOOST_CHECK(err == ec::volume_gone);
    BOOST_CHECK(kind_of(err) == error_kind::transient);
    BOOST_CHECK(!remove(*p, vol));
  }
}

BOOST_AUTO_TEST_CASE(what_libvirt_accepts_without_complaint) {
  // Neither of these fails an upload into a raw volume of a dir pool
  // (libvirt 9.0): recorded so that nobody relies on them as a failure.
  auto p = make(false);
  auto data = std::make_shared<const std::string>(pattern(8 * mib, 9));
  // More bytes than the capacity: the file simply grows.
  BOOST_REQUIRE(!create(*p, "small", 4 * mib));
  memory_source src;
  src.data = data;
  uint64_t sent = 0;
  auto err = upload(*p, "small", 0, 8 * mib, src, lv::default_upload_chunk, &sent);
  BOOST_TEST_MESSAGE("8 MiB into a 4 MiB volume: " << render(err) << ", file now "
                     << std::filesystem::file_size(d.file_of("small")) << " bytes");
  BOOST_CHECK(!err);
  BOOST_CHECK_EQUAL(sent, 8 * mib);
  BOOST_CHECK(!remove(*p, "small"));
  // The volume deleted through a second connection mid-upload: the daemon
  // keeps writing into the unlinked file and the upload succeeds.
  BOOST_REQUIRE(!create(*p, "victim", 8 * mib));
  direct_path other{d};
  memory_source src2;
  src2.data = data;
  caf::error del_err;
  src2.on_read = [&](uint64_t pos) {
    if (pos == 2 * mib)
      del_err = lv::delete_volume(other.conn(), pool_name, "victim");
  };
  err = upload(*p, "victim", 0, 8 * mib, src2, lv::default_upload_chunk, &sent);
  BOOST_TEST_MESSAGE("deleted mid-upload: delete " << render(del_err) << ", upload "
                     << render(err) << ", sent " << sent);
  BOOST_CHECK(!del_err);
  BOOST_CHECK(!std::filesystem::exists(d.file_of("victim")));
  BOOST_CHECK(!remove(*p, "victim"));
}

BOOST_AUTO_TEST_CASE(arguments_formats_offsets_and_short_sources) {
  auto dp = std::make_unique<direct_path>(d);
  auto& p = *dp;
  auto& c = dp->conn();
  // Names and arguments are refused before libvirt is asked.
  BOOST_CHECK(is(create(p, "Bad_Name", mib), ec::invalid_name));
  BOOST_CHECK(is(create(p, "x", mib, "raw", "../etc"), ec::invalid_name));
  BOOST_CHECK(is(create(p, "x", mib, "vmdk"), ec::invalid_argument));
  BOOST_CHECK(is(create(p, "x", 0), ec::invalid_argument));
  BOOST_CHECK(is(lv::delete_volume(c, pool_name, "a/b"), ec::invalid_name));
  BOOST_CHECK(!std::filesystem::exists(d.file_of("x")));
  // Missing things are not_found.
  auto missing_pool = create(p, "x", mib, "raw", "nopool");
  BOOST_TEST_MESSAGE("missing pool: " << render(missing_pool));
  BOOST_CHECK(is(missing_pool, ec::no_pool));
  BOOST_CHECK(kind_of(missing_pool) == error_kind::not_found);
  BOOST_CHECK(is(remove(p, "x", "nopool"), ec::no_pool));
  BOOST_CHECK(!remove(p, "never-created")); // missing volume = success
  auto data = std::make_shared<const std::string>(pattern(4 * mib, 3));
  memory_source src;
  src.data = data;
  BOOST_CHECK(is(upload(p, "never-created", 0, mib, src, lv::default_upload_chunk),
                 ec::no_volume));
  BOOST_CHECK(is(upload(p, "x", 0, mib, src, lv::default_upload_chunk, nullptr, "nopool"),
                 ec::no_pool));
  // An existing name: libvirt's error, classified.
  BOOST_REQUIRE(!create(p, "vol", 4 * mib));
  auto dup = create(p, "vol", 4 * mib);
  BOOST_TEST_MESSAGE("duplicate: " << render(dup));
  BOOST_CHECK(dup && kind_of(dup) == error_kind::permanent);
  // Chunk bounds, before any stream is opened.
  uint64_t sent = 1;
  BOOST_CHECK(is(upload(p, "vol", 0, mib, src, lv::min_upload_chunk - 1, &sent),
                 ec::invalid_argument));
  BOOST_CHECK_EQUAL(sent, 0u);
  BOOST_CHECK(is(upload(p, "vol", 0, mib, src, lv::max_upload_chunk + 1), ec::invalid_argument));
  BOOST_CHECK(is(lv::upload_volume(c, nullptr, 0, mib, src), ec::invalid_argument));
  BOOST_CHECK(is(upload(p, "vol", 0, mib, lv::upload_source{}, lv::default_upload_chunk),
                 ec::invalid_argument));
  // At an offset, in the smallest chunks, through the handle overload.
  {
    auto vol = lv::create_volume(c, pool_name, "offset", 4 * mib, "raw");
    BOOST_REQUIRE(vol);
    memory_source s;
    s.data = data;
    std::atomic<uint64_t> at_offset{0};
    auto err = lv::upload_volume(c, vol->get(), mib, mib, s, lv::min_upload_chunk, &at_offset);
    BOOST_CHECK_MESSAGE(!err, render(err));
    BOOST_CHECK_EQUAL(at_offset.load(), mib);
    auto disk = testbed::read_file(d.file_of("offset"));
    BOOST_REQUIRE_EQUAL(disk.size(), 4 * mib);
    BOOST_CHECK(disk.substr(0, mib) == std::string(mib, '\0'));
    BOOST_CHECK(disk.substr(mib, mib) == data->substr(0, mib));
    BOOST_CHECK(disk.substr(2 * mib) == std::string(2 * mib, '\0'));
    BOOST_CHECK(!remove(p, "offset"));
  }
  // Length 0: until the source ends (3 MiB here, in a 1 MiB chunk plan).
  {
    auto three = std::make_shared<const std::string>(data->substr(0, 3 * mib));
    memory_source s;
    s.data = three;
    auto err = upload(p, "vol", 0, 0, s, lv::default_upload_chunk, &sent);
    BOOST_CHECK_MESSAGE(!err, render(err));
    BOOST_CHECK_EQUAL(sent, 3 * mib);
    BOOST_CHECK(testbed::read_file(d.file_of("vol")).substr(0, 3 * mib) == *three);
  }
  // A source that ends early: aborted, invalid_argument, what was sent.
  {
    auto two = std::make_shared<const std::string>(data->substr(0, 2 * mib));
    memory_source s;
    s.data = two;
    auto err = upload(p, "vol", 0, 4 * mib, s, lv::default_upload_chunk, &sent);
    BOOST_TEST_MESSAGE("short source: " << render(err));
    BOOST_CHECK(is(err, ec::invalid_argument));
    BOOST_CHECK(detail(err).find("ended after 2097152 bytes of 4194304 bytes")
                != std::string::npos);
    BOOST_CHECK_EQUAL(sent, 2 * mib);
  }
  // A source that claims more than it was offered.
  {
    auto liar = [](char*, size_t cap) -> caf::expected<size_t> { return cap + 1; };
    auto err = upload(p, "vol", 0, mib, liar, lv::default_upload_chunk, &sent);
    BOOST_TEST_MESSAGE("lying source: " << render(err));
    BOOST_CHECK(is(err, ec::invalid_argument));
    BOOST_CHECK_EQUAL(sent, 0u);
  }
  // A source that fails with an empty error: still a failure.
  {
    auto mute = [](char*, size_t) -> caf::expected<size_t> { return caf::error{}; };
    auto err = upload(p, "vol", 0, mib, mute, lv::default_upload_chunk, &sent);
    BOOST_TEST_MESSAGE("mute source: " << render(err));
    BOOST_CHECK(is(err, ec::invalid_argument));
  }
  // qcow2 is created by libvirt (qemu-img): a qcow2 header on disk.
  BOOST_REQUIRE(!create(p, "q", 64 * mib, "qcow2"));
  BOOST_CHECK(testbed::read_file(d.file_of("q")).substr(0, 4) == "QFI\xfb");
  BOOST_CHECK(!remove(p, "q"));
  BOOST_CHECK(!remove(p, "vol"));
  // The connection is still fine after all of that.
  BOOST_CHECK(c.alive());
}

BOOST_AUTO_TEST_SUITE_END()
