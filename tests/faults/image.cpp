// Faults while the image cache fills a pool (providers/images/fill.hpp and
// the image actor, actors/image.hpp): the host vanishes mid-upload, the pool's
// filesystem fills up, the engine dies mid-upload, and fills that fail (a
// stalled mirror, a stalled host, a cut transfer, a corrupt byte) leave no
// thread and no fd behind.
// Real parts only: a private libvirtd (qemu driver, dir pools), an sshd inside
// a network namespace reached over veth with the engine's own SSH transport
// (partition() drops every packet there, so the TCP connection stays open and
// silent), and the misbehaving HTTP server (testbed/http_server.hpp).
//
// What every case checks besides its outcome and error kind: no partial volume
// is ever taken as ready (a fill after the fault transfers, it never reports
// the data as found), no `.verified` marker exists for an image that was not
// verified, and, where stated, the process's threads and fds
// (/proc/self/task, /proc/self/fd) come back to their baseline.
//
// The engine restart (spec_08_an_engine_killed_mid_upload_...) runs its fill
// in a child process: this binary re-executed with EGRESS_IMAGE_FAULTS_CHILD
// set, which main() below sees before Boost.Test starts (see child_fill()).
#define BOOST_TEST_MODULE image
#define BOOST_TEST_NO_MAIN
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <any>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/image.hpp"
#include "actors/parts/transport_choice.hpp"
#include "messages/error.hpp"
#include "providers/images/fill.hpp"
#include "providers/images/volume_names.hpp"
#include "providers/mirror/sha256.hpp"
#include "providers/transport.hpp"
#include "testbed/engine_fixture.hpp"
#include "testbed/http_server.hpp"
#include "testbed/ssh_host.hpp"
#include "testbed/test_data.hpp"
#include "testbed/testbed.hpp"

using namespace egress;
using test::pattern;
using test::ms_of;
using test::now_ns;
using test::resources;
using test::now_resources;
using test::operator<<;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
using test::eventually;

namespace {

constexpr uint64_t mib = uint64_t{1} << 20;
const std::string pool_name = "images";
const std::string tiny_pool = "tiny";

// "Release callers of a silent peer within about 4 s" (docs/spec.md 17); a
// loaded 2-core machine gets 3 s of slack.
constexpr auto liveness_bound = 7s;

std::string show(const caf::expected<images::fill_result>& r) {
  return r ? "ok " + r->volume : render(r.error());
}

// ---- transports ------------------------------------------------------------------

// Wraps the engine's transport for a host and records when it was connected
// and first killed: "the upload connection is closed" is its kill (the
// dedicated link kills, releases libvirt, joins the pump), and a cleanup
// connection that never connected deleted nothing.
class recording_transport final : public transport {
public:
  explicit recording_transport(transport_ptr inner) : inner_(std::move(inner)) {}
  caf::error connect() override {
    connected_at = now_ns();
    return inner_->connect();
  }
  const std::string& uri() const noexcept override { return inner_->uri(); }
  bool has_pump() const noexcept override { return inner_->has_pump(); }
  caf::error pump() override { return inner_->pump(); }
  void kill() noexcept override {
    int64_t zero = 0;
    killed_at.compare_exchange_strong(zero, now_ns());
    inner_->kill();
  }
  std::atomic<int64_t> connected_at{0};
  std::atomic<int64_t> killed_at{0};

private:
  transport_ptr inner_;
};

recording_transport& rec(const transport_ptr& t) {
  return static_cast<recording_transport&>(*t);
}

// These tests drive images::fill and the image actor without engine::start,
// which is where the engine sets SIGPIPE to ignored: closing a dedicated link
// kills its SSH transport and then releases libvirt's connection, whose
// close RPC may be written into the shut-down bridge (libvirt's client
// writes without MSG_NOSIGNAL), which would end the process. Do what
// engine::start does (the child process too: it stands for an engine).
void ignore_sigpipe_as_the_engine_does() {
  struct sigaction old {};
  if (sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL)
    std::signal(SIGPIPE, SIG_IGN);
}

// ---- the engine killed mid-upload: a child process ----------------------------
//
// Why a re-executed binary and not fork(): by the time a test case runs, the
// fixture has started threads (CAF's scheduler, the HTTP server, libvirt's
// event loop), and a fork()ed child of a threaded process may only call
// async-signal-safe functions; libvirt, libcurl and libssh2 are not. A fresh
// exec of this binary has none of that: main() sees the variable before
// Boost.Test or anything else starts, runs exactly one fill with handles of
// its own (its own SSH connection, libvirt connection and curl transfer, as a
// freshly started engine would) and exits. The parent SIGKILLs it mid-upload:
// no destructor, no close, no cleanup runs, as in a real crash. The child is a
// testbed::process: its own process group, PR_SET_PDEATHSIG, stopped by PID.

const char* const child_var = "EGRESS_IMAGE_FAULTS_CHILD";

std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : "";
}

int child_fill() {
  ignore_sigpipe_as_the_engine_does();
  host_config h;
  h.name = "hv1";
  h.uri = "qemu:///system";
  h.transport = "ssh";
  h.address = env_or_empty("EGT_ADDRESS");
  h.port = static_cast<uint32_t>(std::stoul(env_or_empty("EGT_PORT")));
  h.user = env_or_empty("EGT_USER");
  h.key_file = env_or_empty("EGT_KEY");
  h.known_hosts = env_or_empty("EGT_KNOWN_HOSTS");
  h.remote_socket = env_or_empty("EGT_SOCKET");
  h.connect_timeout = 5s;
  auto make = transport_for(h);
  images::fill_request r;
  r.entry = env_or_empty("EGT_ENTRY");
  r.pool = env_or_empty("EGT_POOL");
  r.image.name = "base";
  r.image.url = env_or_empty("EGT_URL");
  r.image.sha256 = env_or_empty("EGT_SHA256");
  r.image.size = std::stoull(env_or_empty("EGT_SIZE"));
  r.image.format = "raw";
  r.download_deadline = 60s;
  r.low_speed_time = 30s;
  r.keepalive = lv::keepalive{1, 3};
  r.transfer = make();
  r.cleanup = make();
  images::fill_progress progress;
  std::cout << "child " << ::getpid() << ": fill " << r.entry << " starts" << std::endl;
  auto res = images::fill(r, progress);
  std::cout << "child: fill ended: " << show(res) << std::endl;
  return res ? 0 : 1;
}

// ---- the image actor ------------------------------------------------------------

// One waiter's ensure, issued by an actor of its own.
struct waiter {
  std::atomic<bool> done{false};
  std::atomic<int64_t> done_ns{0};
  std::mutex mtx;
  bool ok = false;
  image_ready ready;
  caf::error err;

  caf::error error() {
    std::lock_guard<std::mutex> g{mtx};
    return err;
  }
  bool succeeded() {
    std::lock_guard<std::mutex> g{mtx};
    return ok;
  }
};

std::shared_ptr<waiter> ensure_async(caf::actor_system& sys, const image_actor& img,
                                     caf::timespan timeout = 60s) {
  auto w = std::make_shared<waiter>();
  sys.spawn([img, timeout, w](caf::event_based_actor* a) {
    a->request(img, timeout, atom::ensure_v)
      .then(
        [w](image_ready& r) {
          std::lock_guard<std::mutex> g{w->mtx};
          w->ok = true;
          w->ready = r;
          w->done_ns = now_ns();
          w->done = true;
        },
        [w](caf::error& e) {
          std::lock_guard<std::mutex> g{w->mtx};
          w->err = e;
          w->done_ns = now_ns();
          w->done = true;
        });
  });
  return w;
}

// ---- the test bed ---------------------------------------------------------------

// Must run before the test bed creates anything: skip() runs no destructors.
struct root_required {
  root_required() {
    testbed::require_root_or_skip();
    ignore_sigpipe_as_the_engine_does();
  }
};

testbed::libvirtd_options lv_options() {
  testbed::libvirtd_options o;
  o.warm_qemu_caps = false; // storage needs no QEMU probe
  return o;
}

// A fill on a thread of its own, so that the test's thread can make the
// fault. Whatever ends the test, the destructor frees and joins the fill
// (cancel + kill: the same lock-free gestures the image actor uses).
struct fill_thread {
  images::fill_request req;
  std::shared_ptr<images::fill_progress> progress = std::make_shared<images::fill_progress>();
  std::atomic<int64_t> returned_ns{0};
  std::optional<caf::expected<images::fill_result>> result;
  std::thread thread;

  explicit fill_thread(images::fill_request r) : req(std::move(r)) {
    thread = std::thread{[this] {
      auto res = images::fill(req, *progress);
      result.emplace(std::move(res));
      returned_ns = now_ns();
    }};
  }
  ~fill_thread() {
    if (thread.joinable()) {
      *progress->cancel = true;
      req.transfer->kill();
      req.cleanup->kill();
      thread.join();
    }
  }
  bool returned() const { return returned_ns.load() != 0; }
  void join() {
    if (thread.joinable())
      thread.join();
  }
};

struct bed : test::engine_fixture {
  root_required root;
  testbed::netns net;
  testbed::libvirtd lv{lv_options()};
  testbed::sshd ssh{testbed::sshd_options::in(net)};
  std::string pool_dir;
  // Not a multiple of a MiB, so the last (partial) MiB is covered too.
  std::string image = pattern(24 * mib + 12345, 21);
  std::string digest = mirror::sha256_hex(image);
  test::http_server http{image};

  bed() {
    lv.start();
    ssh.start();
    pool_dir = lv.define_dir_pool(pool_name);
    http.start();
  }
  ~bed() {
    sys.reset(); // image actors and their fills end before the daemons do
    http.stop();
  }

  // The host behind the namespace, reached with the engine's SSH transport.
  host_config host() const {
    auto h = test::ssh_host(ssh, lv, "hv1", "qemu:///system");
    h.pool = pool_name;
    h.call_budget = 60s;
    return h;
  }

  images::image_source source() const {
    images::image_source s;
    s.name = "base";
    s.url = http.url();
    s.sha256 = digest;
    s.size = image.size();
    s.format = "raw";
    return s;
  }

  // A fill request over two fresh SSH transports made the way the image actor
  // makes them (transport_for(host)).
  images::fill_request request(const std::string& entry, const host_config& h) const {
    images::fill_request r;
    r.entry = entry;
    r.pool = h.pool;
    r.image = source();
    r.download_deadline = 60s;
    r.low_speed_time = 30s; // only the fault under test may end a transfer
    r.keepalive = lv::keepalive{1, 3};
    auto make = transport_for(h);
    r.transfer = std::make_shared<recording_transport>(make());
    r.cleanup = std::make_shared<recording_transport>(make());
    return r;
  }

  image_options options(const std::string& entry, const host_config& h) const {
    image_options o;
    o.entry = entry;
    o.host = h;
    o.image = source();
    o.transfer_budget = 60s;
    o.retry_min = 200ms;
    o.retry_max = 400ms;
    o.tick = 100ms;
    o.low_speed_time = 30s;
    return o;
  }

  images::volume_names names(const std::string& entry) const {
    return images::volume_names::of(entry, "base", digest);
  }

  bool exists(const std::string& volume) const {
    return std::filesystem::exists(pool_dir + "/" + volume);
  }

  // Bytes the pool's file holds on disk (a sparse raw volume is allocated as
  // far as the daemon wrote it).
  uint64_t allocated(const std::string& volume) const {
    struct stat st {};
    if (::stat((pool_dir + "/" + volume).c_str(), &st) != 0)
      return 0;
    return static_cast<uint64_t>(st.st_blocks) * 512;
  }

  image_status status_of(const image_actor& img) {
    caf::scoped_actor self{*sys};
    image_status out;
    self->request(img, 5s, atom::status_v)
      .receive([&](image_status& s) { out = s; },
               [&](caf::error& e) { BOOST_FAIL(render(e)); });
    return out;
  }

  /// A second dir pool on a 4 MiB tmpfs that exists only inside the daemon's
  /// own mount namespace (it goes away with the daemon): the daemon's write
  /// past 4 MiB fails with ENOSPC in the middle of the stream. Its files are
  /// invisible from here; libvirt lists them.
  void add_tiny_pool() {
    auto target = lv.dir() + "/pools/" + tiny_pool;
    std::filesystem::create_directories(target);
    testbed::run_checked({"nsenter", "-t", std::to_string(lv.pid()), "-m", "mount", "-t",
                          "tmpfs", "-o", "size=4m,mode=0755", "egress-tiny-pool", target});
    lv.define_dir_pool(tiny_pool);
  }

  std::vector<std::string> tiny_volumes() {
    lv.virsh({"pool-refresh", tiny_pool});
    auto r = lv.virsh({"vol-list", tiny_pool});
    BOOST_REQUIRE_MESSAGE(r.ok(), r.output);
    // " Name   Path" / "-----" / " <name>   <path>" lines.
    std::vector<std::string> out;
    std::istringstream lines{r.output};
    std::string line;
    while (std::getline(lines, line)) {
      std::istringstream words{line};
      std::string first;
      if (!(words >> first) || first == "Name" || first.front() == '-')
        continue;
      out.push_back(first);
    }
    return out;
  }

  /// One whole fill of entry "warm" through the same host, so that whatever
  /// is created once (libvirt's event loop, libcurl's and libssh2's global
  /// state, the call actor machinery) exists before the baseline is taken.
  void warm_up_with_a_fill(const host_config& h) {
    auto r = images::fill(request("warm", h), *std::make_shared<images::fill_progress>());
    BOOST_REQUIRE_MESSAGE(r, "warm-up fill: " << show(r));
  }
  void warm_up_with_an_ensure(const host_config& h) {
    auto img = spawn_image(*sys, options("warm", h));
    auto w = ensure_async(*sys, img);
    BOOST_REQUIRE(eventually([&] { return w->done.load(); }, 30s));
    BOOST_REQUIRE_MESSAGE(w->succeeded(), "warm-up ensure: " << render(w->error()));
  }

  resources baseline() {
    BOOST_REQUIRE(http.wait_idle());
    std::this_thread::sleep_for(200ms);
    auto b = now_resources();
    BOOST_TEST_MESSAGE("baseline: " << b);
    return b;
  }

  /// Threads and fds back to `base` within `max` (and the HTTP server holds
  /// no connection: its fd is ours too).
  void check_settles(const resources& base, const std::string& what,
                     std::chrono::milliseconds max = 10s) {
    resources after;
    auto t0 = clock_type::now();
    bool settled = eventually([&] {
      after = now_resources();
      return after == base;
    }, max);
    BOOST_TEST_MESSAGE(what << ": baseline " << base << "; after " << after << " (settled in "
                            << ms_of(clock_type::now() - t0) << " ms)");
    BOOST_CHECK_MESSAGE(settled, what << ": threads/fds did not return to the baseline: "
                                      << base << " -> " << after);
  }
};

} // namespace

BOOST_FIXTURE_TEST_SUITE(image_faults_suite, bed)

// The host vanishes in the middle of an image upload over the engine's SSH
// transport (docs/spec.md 8 and 17). The fill is released within the
// liveness bound with a transient error; its upload connection was closed
// (transport killed, pump joined: threads and fds back to the baseline while
// the partition still holds); the data stays as a partial volume with its
// partial mark and no marker, and no cleanup connection was opened. After the
// heal the next fill transfers again (the partial data is never taken for
// ready), resumes with a Range at what the volume held, and ends verified.
BOOST_AUTO_TEST_CASE(spec_08_partition_mid_upload_is_never_taken_for_complete_and_resumes_after_heal) {
  auto h = host();
  warm_up_with_a_fill(h);
  auto base = baseline();
  http.set({.drip_bytes = 256 * 1024, .drip_interval = 50ms}); // ~5 MiB/s: ~5 s for 24 MiB
  auto n = names("alpha");
  clock_type::time_point t_part;
  uint64_t at_partition = 0;
  {
    fill_thread f{request("alpha", h)};
    BOOST_REQUIRE_MESSAGE(eventually([&] {
      return f.progress->transferring.load() && f.progress->bytes.load() >= 4 * mib;
    }, 20s), "the upload never reached 4 MiB");
    BOOST_REQUIRE(!f.returned());
    t_part = clock_type::now();
    net.partition();
    at_partition = f.progress->bytes.load();
    BOOST_REQUIRE_MESSAGE(eventually([&] { return f.returned(); }, 20s),
                          "the fill was not released 20 s after the partition");
    f.join();
    auto released = std::chrono::nanoseconds(f.returned_ns.load()
                                             - t_part.time_since_epoch().count());
    auto& r = *f.result;
    BOOST_TEST_MESSAGE("partition at " << at_partition << " bytes of " << image.size()
                       << "; fill released " << ms_of(released) << " ms later (checked < "
                       << ms_of(liveness_bound) << " ms): " << show(r));
    BOOST_REQUIRE(!r);
    BOOST_CHECK(kind_of(r.error()) == error_kind::transient);
    BOOST_CHECK(released < liveness_bound);
    BOOST_CHECK(at_partition < image.size());
    // The upload connection was closed, and by the fill itself, before it
    // returned; the partial data is kept, so no cleanup connection opened.
    auto killed = rec(f.req.transfer).killed_at.load();
    BOOST_CHECK(killed != 0);
    BOOST_CHECK(killed <= f.returned_ns.load());
    BOOST_CHECK_EQUAL(rec(f.req.cleanup).connected_at.load(), 0);
  }
  BOOST_CHECK(exists(n.data));
  BOOST_CHECK(exists(n.partial));
  BOOST_CHECK(!exists(n.marker));
  auto held = allocated(n.data);
  BOOST_TEST_MESSAGE("the partial volume holds " << held << " bytes");
  BOOST_CHECK(held < image.size());
  // Nothing of the dead connection is left in this process, although the
  // peer is still silent (the partition holds).
  check_settles(base, "partitioned fill", 8s);
  BOOST_CHECK(net.partitioned());

  net.heal();
  http.set({});
  http.clear_log();
  auto t_heal = clock_type::now();
  std::optional<caf::expected<images::fill_result>> again;
  uint64_t resumed_from = 0;
  int attempts = 0;
  // A fill right after the heal may still meet the old connection's end on
  // its way out; transient failures are retried, as the image actor would.
  bool ok = eventually([&] {
    ++attempts;
    images::fill_progress p;
    again.emplace(images::fill(request("alpha", h), p));
    if (!*again) {
      BOOST_TEST_MESSAGE("fill after the heal: " << render(again->error()));
      if (kind_of(again->error()) != error_kind::transient)
        return true; // no point in retrying; checked below
      std::this_thread::sleep_for(200ms);
      return false;
    }
    resumed_from = (*again)->resumed_from;
    return true;
  }, 30s);
  BOOST_REQUIRE(ok);
  BOOST_REQUIRE_MESSAGE(*again, show(*again));
  BOOST_TEST_MESSAGE("after the heal: verified in " << ms_of(clock_type::now() - t_heal)
                     << " ms, " << attempts << " attempt(s), resumed at " << resumed_from
                     << " bytes (the volume held " << held << ")");
  BOOST_CHECK((*again)->transferred); // the partial data was not taken for ready
  BOOST_CHECK(resumed_from > 0);
  BOOST_CHECK(resumed_from % mib == 0);
  BOOST_CHECK(resumed_from <= held);
  auto log = http.log();
  BOOST_REQUIRE(!log.empty());
  BOOST_CHECK_EQUAL(log.back().range, "bytes=" + std::to_string(resumed_from) + "-");
  BOOST_CHECK(testbed::read_file(pool_dir + "/" + n.data) == image);
  BOOST_CHECK(exists(n.marker));
  BOOST_CHECK(!exists(n.partial));
}

// The pool's filesystem fills up in the middle of the upload (a 4 MiB tmpfs
// pool, a 24 MiB image): the waiter gets libvirt's error, classified
// (mostly transient storage_full, "No space left on device", whose partial
// data is deleted to give the space back; see below); no marker is ever
// written, and data is never left without its partial mark; the next ensure
// does not report ready either; and threads and fds come back to the
// baseline.
BOOST_AUTO_TEST_CASE(spec_08_a_full_pool_fails_clearly_and_leaves_nothing_half_used) {
  add_tiny_pool();
  auto h = host();
  warm_up_with_an_ensure(h);
  auto base = baseline();
  auto ht = h;
  ht.pool = tiny_pool;
  auto n = names("full");
  auto opts = options("full", ht);
  auto img = spawn_image(*sys, opts);
  auto t0 = clock_type::now();
  auto w = ensure_async(*sys, img);
  BOOST_REQUIRE(eventually([&] { return w->done.load(); }, 30s));
  auto err = w->error();
  BOOST_TEST_MESSAGE("full pool: waiter answered after " << ms_of(clock_type::now() - t0)
                     << " ms, kind " << to_string(kind_of(err)) << ": " << render(err));
  BOOST_REQUIRE(!w->succeeded());
  // libvirt's error (lv::last_error: its text and "code="), with the fill's
  // context. Which one depends on timing, as in tests/integration/volumes.cpp's
  // no_space: mostly the daemon's ENOSPC (VIR_ERR_SYSTEM_ERROR, "No space
  // left on device": storage_full, transient since freeing space is all a
  // retry needs); sometimes the daemon stops reading the client's socket
  // once its write side failed, and libvirt's keepalive closes the
  // connection first (libvirt_timeout). Transient either way.
  BOOST_CHECK(detail(err).find("code=") != std::string::npos);
  BOOST_CHECK(detail(err).find("image base in " + tiny_pool) != std::string::npos);
  BOOST_CHECK(kind_of(err) == error_kind::transient);
  bool full = is(err, ec::storage_full);
  BOOST_CHECK(full || is(err, ec::libvirt_timeout));
  BOOST_CHECK(!full || detail(err).find("No space left on device") != std::string::npos);
  // Nothing half-used: no marker, ever. After storage_full the cleanup
  // connection deleted the data and its partial mark (the space given
  // back); after a keepalive timeout the data stays for a resume, but only
  // under its mark.
  auto list = [&](const char* when) {
    auto vols = tiny_volumes();
    std::string listed;
    for (auto& v : vols)
      listed += " " + v;
    BOOST_TEST_MESSAGE(when << ": the tiny pool holds:" << (listed.empty() ? " nothing" : listed));
    for (auto& v : vols)
      BOOST_CHECK_MESSAGE(v != n.marker, "a marker was written for an image that never fit");
    auto has = [&](const std::string& v) {
      return std::find(vols.begin(), vols.end(), v) != vols.end();
    };
    if (has(n.data))
      BOOST_CHECK_MESSAGE(has(n.partial), "data without its partial mark");
    return vols;
  };
  auto vols = list("after the first fill");
  if (full)
    BOOST_CHECK(vols.empty());
  auto s = status_of(img);
  BOOST_CHECK(s.state == image_state::failed);
  BOOST_CHECK_EQUAL(s.last_error_kind, to_string(kind_of(err)));

  // The next ensure is not ready either: past the retry delay a new fill
  // meets the full pool again.
  std::this_thread::sleep_for(500ms);
  auto w2 = ensure_async(*sys, img);
  BOOST_REQUIRE(eventually([&] { return w2->done.load(); }, 30s));
  BOOST_TEST_MESSAGE("next ensure: " << (w2->succeeded() ? "ready" : render(w2->error())));
  BOOST_CHECK(!w2->succeeded());
  auto s2 = status_of(img);
  BOOST_CHECK(s2.state == image_state::failed);
  list("after the next ensure");
  check_settles(base, "full pool");
}

// The engine dies (SIGKILL) in the middle of an upload: a child process runs
// one fill over its own SSH connection and is killed while it writes. The
// partial mark and the data it wrote are left, with no marker. A new fill
// (this process, as the restarted engine) never takes that data for ready:
// it transfers, resuming at what the volume held, ends verified, and the
// partial mark is gone.
BOOST_AUTO_TEST_CASE(spec_08_an_engine_killed_mid_upload_leaves_a_partial_that_is_never_taken_for_ready) {
  auto h = host();
  auto n = names("restart");
  http.set({.drip_bytes = 256 * 1024, .drip_interval = 50ms}); // ~5 MiB/s
  testbed::temp_dir tmp{"image-child"};
  auto self_exe = std::filesystem::read_symlink("/proc/self/exe").string();
  testbed::spawn_options so;
  so.argv = {self_exe};
  so.env = {std::string{child_var} + "=1",
            "EGT_ADDRESS=" + h.address,
            "EGT_PORT=" + std::to_string(h.port),
            "EGT_USER=" + h.user,
            "EGT_KEY=" + h.key_file,
            "EGT_KNOWN_HOSTS=" + h.known_hosts,
            "EGT_SOCKET=" + h.remote_socket,
            "EGT_ENTRY=restart",
            "EGT_POOL=" + pool_name,
            "EGT_URL=" + http.url(),
            "EGT_SHA256=" + digest,
            "EGT_SIZE=" + std::to_string(image.size())};
  so.log_path = tmp / "child.log";
  uint64_t held_at_kill = 0;
  {
    testbed::process child{so};
    bool writing = eventually([&] {
      return exists(n.partial) && allocated(n.data) >= 3 * mib;
    }, 20s);
    BOOST_REQUIRE_MESSAGE(writing, "the child never wrote 3 MiB: "
                                     << testbed::read_file(tmp / "child.log"));
    BOOST_REQUIRE_MESSAGE(child.alive(), "the child ended before the kill: "
                                           << testbed::read_file(tmp / "child.log"));
    child.signal(SIGKILL);
    held_at_kill = allocated(n.data);
    auto status = child.stop();
    BOOST_CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  }
  BOOST_TEST_MESSAGE("child killed mid-upload with " << held_at_kill << " of " << image.size()
                     << " bytes written; its log:\n" << testbed::read_file(tmp / "child.log"));
  BOOST_CHECK(held_at_kill < image.size());
  BOOST_CHECK(exists(n.data));
  BOOST_CHECK(exists(n.partial));
  BOOST_CHECK(!exists(n.marker));
  // The daemon may still write what it had received when the child died.
  std::this_thread::sleep_for(300ms);
  auto held = allocated(n.data);

  http.set({});
  http.clear_log();
  images::fill_progress p;
  auto t0 = clock_type::now();
  auto r = images::fill(request("restart", h), p);
  BOOST_REQUIRE_MESSAGE(r, "fill after the restart: " << show(r));
  BOOST_TEST_MESSAGE("fill after the restart: verified in " << ms_of(clock_type::now() - t0)
                     << " ms, resumed at " << r->resumed_from << " bytes (the volume held "
                     << held << ")");
  BOOST_CHECK(r->transferred); // never taken for ready
  BOOST_CHECK(r->resumed_from > 0);
  BOOST_CHECK(r->resumed_from <= held);
  BOOST_CHECK_EQUAL(p.bytes.load(), image.size());
  BOOST_CHECK(testbed::read_file(pool_dir + "/" + n.data) == image);
  BOOST_CHECK(exists(n.marker));
  BOOST_CHECK(!exists(n.partial));
}

// Fills that fail in each way, one after the other through the image actor
// over SSH, each starting from a baseline taken after one whole warm-up
// ensure: threads and fds come back to it after every one.
//  (a) the mirror stalls: the download's deadline, set inside the transfer
//      budget, ends the fill (transient); partial kept, no marker;
//  (b) the host stalls (libvirtd SIGSTOPped, liveness off, so only the
//      budget can end it): the actor abandons the fill at the budget
//      (budget_exceeded), kills its transports, and the fill ends while the
//      daemon is still stopped;
//  (c) the mirror cuts the transfer: transient source_failed, partial kept;
//  (d) a corrupt byte: permanent digest_mismatch, nothing left.
BOOST_AUTO_TEST_CASE(spec_06_failed_fills_leave_no_thread_and_no_fd_behind) {
  auto h = host();
  warm_up_with_an_ensure(h);
  auto base = baseline();

  auto run = [&](const std::string& entry, image_options o, auto during) {
    auto img = spawn_image(*sys, std::move(o));
    auto t0 = clock_type::now();
    auto w = ensure_async(*sys, img);
    during(img, *w);
    BOOST_REQUIRE_MESSAGE(eventually([&] { return w->done.load(); }, 30s),
                          entry << ": the waiter was not answered");
    BOOST_REQUIRE(!w->succeeded());
    auto err = w->error();
    BOOST_TEST_MESSAGE(entry << ": waiter answered after " << ms_of(clock_type::now() - t0)
                             << " ms: " << render(err));
    auto nm = names(entry);
    BOOST_CHECK_MESSAGE(!exists(nm.marker), entry << ": a marker for an unverified image");
    return err;
  };
  auto nothing = [](const image_actor&, waiter&) {};

  // (a) The mirror stalls after 3 MiB.
  {
    http.set({.stall_after = 3 * mib});
    auto o = options("stall", h);
    o.transfer_budget = 2s; // the download's deadline: 1.5 s
    auto err = run("stall", o, nothing);
    BOOST_CHECK(kind_of(err) == error_kind::transient);
    BOOST_CHECK(is(err, ec::source_timeout) || is(err, ec::budget_exceeded));
    BOOST_CHECK(exists(names("stall").partial));
    http.set({});
    check_settles(base, "(a) mirror stall");
  }
  // (b) The host stalls mid-upload.
  {
    http.set({.drip_bytes = 512 * 1024, .drip_interval = 20ms}); // ~25 MiB/s
    auto hs = h;
    hs.keepalive_interval = 0s; // nothing but the budget may end the stall
    hs.ssh_keepalive = 0s;
    hs.ssh_watchdog = 0s;
    auto o = options("hang", hs);
    o.transfer_budget = 3s;
    bool paused = false;
    auto err = run("hang", o, [&](const image_actor& img, waiter& w) {
      paused = eventually([&] {
        if (w.done)
          return false;
        auto s = status_of(img);
        return s.bytes >= 2 * mib;
      }, 10s);
      if (paused)
        lv.pause();
    });
    BOOST_REQUIRE_MESSAGE(paused, "(b) the upload never reached 2 MiB");
    BOOST_CHECK(is(err, ec::budget_exceeded));
    BOOST_CHECK(kind_of(err) == error_kind::transient);
    // The abandoned fill ends without the daemon's help.
    check_settles(base, "(b) host stall, daemon still stopped");
    lv.resume();
    http.set({});
  }
  // (c) The mirror cuts the transfer after 5 MiB.
  {
    http.set({.truncate_after = 5 * mib});
    auto err = run("cut", options("cut", h), nothing);
    BOOST_CHECK(is(err, ec::source_failed));
    BOOST_CHECK(kind_of(err) == error_kind::transient);
    BOOST_CHECK(exists(names("cut").data));
    BOOST_CHECK(exists(names("cut").partial));
    http.set({});
    check_settles(base, "(c) truncated source");
  }
  // (d) A corrupt byte at 5 MiB.
  {
    http.set({.corrupt_at = 5 * mib});
    auto err = run("bad", options("bad", h), nothing);
    BOOST_CHECK(is(err, ec::digest_mismatch));
    BOOST_CHECK(kind_of(err) == error_kind::permanent);
    BOOST_CHECK(!exists(names("bad").data));
    BOOST_CHECK(!exists(names("bad").partial));
    http.set({});
    check_settles(base, "(d) corrupt byte");
  }
}

BOOST_AUTO_TEST_SUITE_END()

int main(int argc, char* argv[]) {
  if (std::getenv(child_var) != nullptr)
    return child_fill();
  return boost::unit_test::unit_test_main(&init_unit_test, argc, argv);
}
