#include "providers/images/ranged_upload.hpp"

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "base/fd.hpp"
#include "base/log.hpp"
#include "messages/error.hpp"
#include "providers/images/dedicated_link.hpp"
#include "providers/libvirt/volumes.hpp"
#include "providers/mirror/sha256.hpp"

namespace egress::images {

namespace {

constexpr uint64_t mib = uint64_t{1} << 20;
constexpr size_t hash_block = size_t{1} << 20;

// The setup of an upload stream marks the volume in use for a moment
// (libvirt's storageVolUpload), so a second stream set up at that moment is
// refused with "still in use": tried again, briefly, before the range
// counts as failed.
constexpr int in_use_attempts = 40;
constexpr auto in_use_pause = std::chrono::milliseconds(50);

bool volume_in_use(const caf::error& err) {
  return err && detail(err).find("in use") != std::string::npos;
}

std::string spool_dir() {
  auto* dir = std::getenv("TMPDIR");
  return dir && *dir == '/' ? dir : "/var/tmp";
}

enum class gate_state { closed, open, failed };

// What the sessions and the hasher share; every field under `m`.
struct shared {
  const ranged_upload& job;
  const spool& through;
  fill_progress& progress;
  std::mutex m;
  std::condition_variable changed;
  std::vector<uint64_t> fed;  // bytes of each range in the spool, from its start
  std::vector<bool> ended;    // its session is done with it (written or failed)
  size_t next = 0;            // the next range a session takes
  int sessions = 0;           // sessions still running
  gate_state gate = gate_state::closed;
  caf::error failure;         // the first one
  uint64_t held = 0;

  shared(const ranged_upload& j, const spool& s, fill_progress& p)
    : job(j), through(s), progress(p), fed(j.plan.size(), 0), ended(j.plan.size(), false) {}

  void publish(size_t k, uint64_t bytes) {
    std::lock_guard<std::mutex> g{m};
    fed[k] = bytes;
    changed.notify_all();
  }

  void fail(caf::error err) {
    std::lock_guard<std::mutex> g{m};
    if (!failure)
      failure = std::move(err);
    changed.notify_all();
  }

  bool stopped() {
    std::lock_guard<std::mutex> g{m};
    return gate == gate_state::failed;
  }
};

// One range over one session: its written prefix read back (on a resume),
// then the rest from the mirror through the spool into the volume.
class range_run {
public:
  range_run(shared& sh, lv::connection& c, size_t k)
    : sh_(sh), c_(c), k_(k), r_(sh.job.plan[k]) {}

  caf::error run() {
    if (sh_.job.resume)
      if (auto err = read_back())
        return err;
    if (fed_ == r_.length())
      return {};
    upload_from_ = fed_;
    if (auto err = open_source())
      return err;
    if (k_ == 0)
      if (auto err = feed_head())
        return err;
    if (auto err = await_gate())
      return err;
    return upload();
  }

private:
  caf::error read_back() {
    uint64_t got = 0;
    auto held = lv::read_written_prefix(
      c_, sh_.job.pool, sh_.job.volume, r_.begin, r_.length(),
      [&](const char* p, size_t n) -> caf::error {
        auto err = sh_.through.write(r_.begin + got, p, n);
        got += n;
        return err;
      });
    if (!held)
      return held.error();
    // A range is written from its start, but the block the writer was in
    // when it stopped may be partly written: whole MiBs below it count.
    fed_ = *held >= r_.length() ? r_.length() : *held / mib * mib;
    {
      std::lock_guard<std::mutex> g{sh_.m};
      sh_.held += fed_;
    }
    sh_.progress.bytes += fed_;
    sh_.publish(k_, fed_);
    return {};
  }

  caf::error open_source() {
    auto o = sh_.job.source;
    o.offset = r_.begin + fed_;
    o.expected_length = sh_.job.total;
    o.expected_sha256.reset(); // the hasher checks the whole image
    auto dl = mirror::download::open(o);
    if (!dl)
      return dl.error();
    source_ = std::move(*dl);
    return {};
  }

  // The mirror's next bytes of this range into `buf` and the spool.
  caf::expected<size_t> pull(char* buf, size_t cap) {
    auto want = static_cast<size_t>(std::min<uint64_t>(cap, r_.length() - fed_));
    if (want == 0)
      return size_t{0};
    auto n = source_->read(buf, want);
    if (!n)
      return n.error();
    if (*n == 0)
      return make_error(ec::length_mismatch, "the source ended at byte "
                                               + std::to_string(r_.begin + fed_)
                                               + ", inside the range ending at "
                                               + std::to_string(r_.end));
    if (auto err = sh_.through.write(r_.begin + fed_, buf, *n))
      return err;
    fed_ += *n;
    sh_.progress.moved += *n;
    sh_.publish(k_, fed_);
    return n;
  }

  // Range 0 brings the image's head into the spool before anything is
  // uploaded anywhere: the hasher checks it and opens the gate.
  caf::error feed_head() {
    std::unique_ptr<char[]> buf{new char[sh_.job.head_length]};
    while (fed_ < sh_.job.head_length) {
      auto n = pull(buf.get(), sh_.job.head_length - fed_);
      if (!n)
        return n.error();
    }
    return {};
  }

  caf::error await_gate() {
    std::unique_lock<std::mutex> g{sh_.m};
    sh_.changed.wait(g, [&] { return sh_.gate != gate_state::closed; });
    if (sh_.gate == gate_state::failed)
      return make_error(ec::shutting_down, "the upload stopped before range "
                                             + std::to_string(k_));
    return {};
  }

  caf::error upload() {
    uint64_t pos = upload_from_;
    auto from_spool_or_mirror = [&](char* buf, size_t cap) -> caf::expected<size_t> {
      caf::expected<size_t> n = size_t{0};
      if (pos < fed_) {
        n = static_cast<size_t>(std::min<uint64_t>(cap, fed_ - pos));
        if (auto err = sh_.through.read(r_.begin + pos, buf, *n))
          return err;
      } else {
        n = pull(buf, cap);
        if (!n)
          return n;
      }
      pos += *n;
      sh_.progress.bytes += *n;
      return n;
    };
    for (int attempt = 1;; ++attempt) {
      auto err = lv::upload_volume(c_, sh_.job.pool, sh_.job.volume, r_.begin + upload_from_,
                                   r_.length() - upload_from_, from_spool_or_mirror);
      if (!err)
        return {};
      if (pos != upload_from_ || attempt == in_use_attempts || !volume_in_use(err))
        return err;
      std::this_thread::sleep_for(in_use_pause);
    }
  }

  shared& sh_;
  lv::connection& c_;
  size_t k_;
  byte_range r_;
  uint64_t fed_ = 0;
  uint64_t upload_from_ = 0;
  std::unique_ptr<mirror::download> source_;
};

// The error of range k, naming the range.
caf::error in_range(const caf::error& err, size_t k, const range_plan& plan) {
  auto where = "range " + std::to_string(k + 1) + " of " + std::to_string(plan.size()) + " (bytes "
               + std::to_string(plan[k].begin) + "-" + std::to_string(plan[k].end) + "): ";
  if (err.category() != caf::atom("egress"))
    return make_error(ec::source_failed, where + render(err));
  return make_error(static_cast<ec>(err.code()), where + detail(err));
}

// A session: takes ranges from the queue until it is empty; a range that
// fails ends it (its connection may be what failed).
void run_session(shared& sh, lv::connection& c) {
  for (;;) {
    size_t k;
    {
      std::lock_guard<std::mutex> g{sh.m};
      if (sh.gate == gate_state::failed || sh.next >= sh.job.plan.size())
        break;
      k = sh.next++;
    }
    auto err = range_run{sh, c, k}.run();
    {
      std::lock_guard<std::mutex> g{sh.m};
      sh.ended[k] = true;
      if (err && !sh.failure)
        sh.failure = in_range(err, k, sh.job.plan);
      sh.changed.notify_all();
    }
    if (err)
      break;
  }
  std::lock_guard<std::mutex> g{sh.m};
  --sh.sessions;
  sh.changed.notify_all();
}

// A session beside the caller's: a dedicated connection of its own. One that
// cannot be opened (a host that allows one session) leaves its ranges to the
// others.
void run_more_session(shared& sh, transport_ptr t) {
  auto link = dedicated_link::open(std::move(t), sh.job.keepalive);
  if (!link) {
    log::info("images", sh.job.volume + ": one more upload session refused ("
                          + render(link.error()) + "); the others take its ranges");
    std::lock_guard<std::mutex> g{sh.m};
    --sh.sessions;
    sh.changed.notify_all();
    return;
  }
  run_session(sh, (*link)->conn());
  (*link)->close();
}

// The caller's thread: hashes the spool in order as the ranges fill it,
// checking the head (and opening the gate) once range 0 holds it.
class hasher_run {
public:
  explicit hasher_run(shared& sh) : sh_(sh) {}

  caf::expected<std::string> run() {
    std::unique_ptr<char[]> buf{new char[hash_block]};
    for (size_t k = 0; k < sh_.job.plan.size(); ++k) {
      auto r = sh_.job.plan[k];
      uint64_t hashed = 0;
      while (hashed < r.length()) {
        auto avail = wait_for(k, hashed);
        if (!avail)
          return avail.error();
        if (k == 0 && !head_checked_)
          if (auto err = check_head())
            return err;
        while (hashed < *avail) {
          auto n = static_cast<size_t>(std::min<uint64_t>(hash_block, *avail - hashed));
          if (auto err = sh_.through.read(r.begin + hashed, buf.get(), n))
            return err;
          digest_.update(buf.get(), n);
          hashed += n;
        }
      }
    }
    return digest_.hex();
  }

private:
  // Waits until range k holds more than `hashed` bytes (and, for range 0
  // before the check, the whole head); returns how many it holds.
  caf::expected<uint64_t> wait_for(size_t k, uint64_t hashed) {
    std::unique_lock<std::mutex> g{sh_.m};
    uint64_t need = hashed + 1;
    if (k == 0 && !head_checked_)
      need = std::max<uint64_t>(need, sh_.job.head_length);
    sh_.changed.wait(g, [&] {
      return sh_.fed[k] >= need || sh_.failure || sh_.ended[k] || sh_.sessions == 0;
    });
    if (sh_.fed[k] >= need)
      return sh_.fed[k];
    if (sh_.failure)
      return sh_.failure;
    return make_error(ec::source_failed, "range " + std::to_string(k + 1)
                                           + " ended short and no session is left for it");
  }

  caf::error check_head() {
    std::string head(sh_.job.head_length, '\0');
    auto err = sh_.through.read(0, head.data(), head.size());
    if (!err && sh_.job.check_head)
      err = sh_.job.check_head(head);
    head_checked_ = true;
    std::lock_guard<std::mutex> g{sh_.m};
    if (err && !sh_.failure) // reported rather than the sessions' "stopped"
      sh_.failure = err;
    sh_.gate = err ? gate_state::failed : gate_state::open;
    sh_.changed.notify_all();
    return err;
  }

  shared& sh_;
  mirror::sha256 digest_;
  bool head_checked_ = false;
};

} // namespace

caf::expected<spool> spool::open(uint64_t size) {
  auto dir = spool_dir();
  struct statvfs fs{};
  if (::statvfs(dir.c_str(), &fs) != 0)
    return make_error(ec::invalid_argument, "spool " + dir + ": " + std::strerror(errno));
  // Room for the image and a tenth of it to spare: the spool must not be
  // what fills the engine's disk.
  auto room = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  if (room < size + size / 10)
    return make_error(ec::storage_full, "spool " + dir + ": " + std::to_string(room >> 20)
                                          + " MiB free, the image needs "
                                          + std::to_string(size >> 20) + " MiB");
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0)
    return make_error(ec::invalid_argument, "spool " + dir + ": " + std::strerror(errno));
  return spool{fd};
}

spool::~spool() {
  if (fd_ >= 0)
    ::close(fd_);
}

caf::error spool::write(uint64_t offset, const char* data, size_t n) const {
  if (int err = pwrite_all(fd_, offset, data, n))
    return make_error(ec::storage_full, std::string{"spool write: "} + std::strerror(err));
  return {};
}

caf::error spool::read(uint64_t offset, char* data, size_t n) const {
  if (int err = pread_all(fd_, offset, data, n))
    return make_error(ec::source_failed, std::string{"spool read: "}
                                           + (err == ENODATA ? "short" : std::strerror(err)));
  return {};
}

caf::expected<ranged_outcome> upload_ranges(lv::connection& first, const ranged_upload& job,
                                            const spool& through, fill_progress& progress) {
  shared sh{job, through, progress};
  sh.sessions = 1 + static_cast<int>(job.more_sessions.size());
  std::vector<std::thread> sessions;
  sessions.emplace_back([&] { run_session(sh, first); });
  for (auto& t : job.more_sessions)
    sessions.emplace_back([&sh, t] { run_more_session(sh, t); });
  auto digest = hasher_run{sh}.run();
  if (!digest) {
    std::lock_guard<std::mutex> g{sh.m};
    if (sh.gate == gate_state::closed)
      sh.gate = gate_state::failed;
    sh.changed.notify_all();
  }
  for (auto& t : sessions)
    t.join();
  if (sh.failure)
    return sh.failure;
  if (!digest)
    return digest.error();
  return ranged_outcome{*digest, sh.held};
}

} // namespace egress::images
