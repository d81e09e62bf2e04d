#include "providers/images/stage.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <vector>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fd.hpp"
#include "base/log.hpp"
#include "base/zeros.hpp"
#include "messages/error.hpp"
#include "providers/images/volume_names.hpp"
#include "providers/mirror/download.hpp"
#include "providers/mirror/sha256.hpp"

namespace egress::images {

namespace fs = std::filesystem;

namespace {

constexpr const char* partial_suffix = ".partial";

std::string errno_text(int err = errno) {
  return std::strerror(err);
}

// A failed write: a full disk is the stage's to report as such (the image
// actor retries it soon, and the operator frees room), anything else is the
// directory's.
caf::error write_error(const std::string& what, int err = errno) {
  auto code = err == ENOSPC || err == EDQUOT    ? ec::storage_full
              : err == EACCES || err == EPERM   ? ec::access_denied
                                                 // a directory removed under it, an
                                                 // I/O error: worth another try
                                                 : ec::source_failed;
  return make_error(code, what + ": " + errno_text(err));
}

// The digest of the first `length` bytes of `fd` (a partial copy to
// resume, or a copy to check); nullopt if they cannot be read back.
std::optional<mirror::sha256> hash_prefix(int fd, uint64_t length,
                                          const std::atomic<bool>* cancel) {
  mirror::sha256 h;
  std::vector<char> buf(1 << 20);
  for (uint64_t at = 0; at < length;) {
    if (cancel && *cancel)
      return std::nullopt;
    auto want = static_cast<size_t>(std::min<uint64_t>(buf.size(), length - at));
    if (pread_all(fd, at, buf.data(), want) != 0)
      return std::nullopt;
    h.update(buf.data(), want);
    at += want;
  }
  return h;
}

// A partial copy opened to be written: locked, and what it holds already
// hashed (the resume's seed), or emptied when that cannot be used.
struct partial_copy {
  unique_fd fd;
  uint64_t offset = 0;
  std::optional<mirror::sha256> seed;
};

caf::expected<partial_copy> open_partial(const std::string& part, uint64_t limit,
                                         const std::atomic<bool>* cancel,
                                         const std::string& what) {
  partial_copy p{unique_fd{::open(part.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0640)}, 0, {}};
  if (!p.fd)
    return write_error(what);
  // Another engine of this entry on this machine, with the same stage
  // directory, may be fetching the same image: one writer per file, and
  // this fill tries again later (its image actor's backoff).
  if (::flock(p.fd.get(), LOCK_EX | LOCK_NB) != 0)
    return make_error(ec::source_failed, what + ": "
                                           + (errno == EWOULDBLOCK ? "another process is writing it"
                                                                   : "cannot lock it: " + errno_text()));
  struct stat st{};
  if (::fstat(p.fd.get(), &st) != 0)
    return write_error(what);
  p.offset = static_cast<uint64_t>(st.st_size);
  if (p.offset > 0 && (limit == 0 || p.offset <= limit))
    p.seed = hash_prefix(p.fd.get(), p.offset, cancel);
  if (cancel && *cancel)
    return make_error(ec::shutting_down, what + ": given up");
  if (p.offset > 0 && !p.seed) {
    if (::ftruncate(p.fd.get(), 0) != 0)
      return write_error(what);
    p.offset = 0;
  }
  return p;
}

// Durable before it is named verified: a crash must not leave a short file
// under the final name.
caf::error publish(const partial_copy& p, const std::string& part, const std::string& path,
                   const std::string& dir, const std::string& what) {
  if (::fsync(p.fd.get()) != 0 || ::rename(part.c_str(), path.c_str()) != 0)
    return write_error(what);
  if (unique_fd d{::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)})
    ::fsync(d.get());
  return {};
}

bool bad_bytes(const caf::error& err) {
  return is(err, ec::digest_mismatch) || is(err, ec::length_mismatch);
}

// Writes `n` fetched bytes at the copy's end, leaving each 64 KiB block of
// zeros unwritten: the file is made longer past them instead (it is as
// long as what was fetched, see open_partial), so a raw disk image's free
// space takes no room on the node's disk. 0, or the errno of the failure.
int store(partial_copy& p, const char* data, size_t n) {
  constexpr size_t block = size_t{64} << 10;
  for (size_t at = 0; at < n; at += block) {
    auto k = std::min(block, n - at);
    if (!all_zero(data + at, k))
      if (int err = pwrite_all(p.fd.get(), p.offset + at, data + at, k))
        return err;
  }
  return set_length(p.fd.get(), p.offset + n);
}

// The download into the partial copy, from its offset to the end, with the
// length checks that bound the stage's disk as a host's pool is bounded: a
// declared length within the image's size or max-size, and never past it.
// `report(bytes, total)` after each MiB.
caf::error copy_stream(mirror::download& d, partial_copy& p, uint64_t limit,
                       const image_source& img,
                       const std::function<void(uint64_t, uint64_t)>& report) {
  std::vector<char> buf(1 << 20);
  for (;;) {
    auto n = d.read_full(buf.data(), buf.size()); // whole blocks for store()
    if (!n)
      return n.error();
    if (*n == 0)
      return {};
    auto total = d.total();
    if (!total)
      return make_error(ec::invalid_argument, mirror::redact_url(img.url)
                                                + " declares no length; set the image's size"
                                                  " in the config");
    if (limit > 0 && *total > limit)
      return make_error(ec::length_mismatch,
                        mirror::redact_url(img.url) + " declares " + std::to_string(*total)
                          + " bytes, more than the image's size or max-size ("
                          + std::to_string(limit) + ")");
    if (p.offset + *n > *total)
      return make_error(ec::length_mismatch, mirror::redact_url(img.url) + " sends more than the "
                                               + std::to_string(*total) + " bytes it declares");
    if (int err = store(p, buf.data(), *n))
      return write_error("write", err);
    p.offset += *n;
    report(p.offset, *total);
  }
}

// What a failed fetch leaves: a cut transfer stays to be resumed; bytes that
// failed the check, a refused source and a full disk (its room goes back to
// whoever else needs it) go. After a resume the fault may be the prefix's
// (an older object behind the same URL) or the range's: the partial copy
// goes, and the next attempt starts over, soon (transient).
caf::error settle_failure(caf::error err, uint64_t resumed_at, const std::string& part,
                          const std::string& image) {
  bool refused = is(err, ec::source_rejected) || is(err, ec::invalid_argument);
  if (resumed_at > 0 && (bad_bytes(err) || refused)) {
    ::unlink(part.c_str());
    err = make_error(ec::source_failed,
                     detail(err) + " (after resuming at byte " + std::to_string(resumed_at)
                       + "; the partial copy is discarded and the next attempt starts over)");
  } else if (bad_bytes(err) || refused || is(err, ec::storage_full)) {
    ::unlink(part.c_str());
  }
  return with_context(err, "image " + image + ": the node's copy");
}

} // namespace

caf::expected<std::shared_ptr<image_stage>> image_stage::open(const std::string& dir,
                                                              const std::string& entry) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    return make_error(ec::access_denied, "engine.stage-dir " + dir + ": " + ec.message());
  if (!fs::is_directory(dir, ec))
    return make_error(ec::access_denied, "engine.stage-dir " + dir + ": not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    return make_error(ec::access_denied, "engine.stage-dir " + dir + ": " + errno_text());
  return std::shared_ptr<image_stage>{new image_stage{dir, entry}};
}

std::string image_stage::stem_of(const image_source& img) const {
  return volume_names::of(entry_, img.name, img.sha256).data;
}

caf::expected<std::string> image_stage::copy_of(const fill_request& req,
                                                fill_progress& progress) {
  std::shared_ptr<const std::atomic<bool>> cancel = progress.cancel;
  auto stem = stem_of(req.image);
  auto path = dir_ + "/" + stem;
  std::unique_lock<std::mutex> lk{mtx_};
  auto& s = slots_[stem];
  auto seen = s.attempts;
  for (;;) {
    if (cancel && *cancel)
      return make_error(ec::shutting_down,
                        "image " + req.image.name + ": given up while the node's copy was fetched");
    if (!s.fetching) {
      // The fetch this fill waited for failed: its error, for this fill's
      // image actor to retry as its own. One that was given up (its fill
      // abandoned) is resumed by this fill instead.
      if (s.attempts != seen && s.last && !is(s.last, ec::shutting_down))
        return s.last;
      std::error_code ec;
      auto size = fs::file_size(path, ec);
      if (!ec && (req.image.size == 0 || size == req.image.size))
        return path;
      s.fetching = true;
      lk.unlock();
      // Whatever way the fetch ends (an exception too), the slot is free
      // again and the waiters are woken: a slot left "fetching" would make
      // every later fill of the image wait for ever.
      caf::expected<std::string> r = make_error(ec::source_failed, "image " + req.image.name
                                                                      + ": the fetch ended early");
      struct release {
        image_stage& stage;
        std::unique_lock<std::mutex>& lk;
        slot& s;
        caf::expected<std::string>& r;
        ~release() {
          lk.lock();
          s.fetching = false;
          ++s.attempts;
          s.last = r ? caf::error{} : r.error();
          stage.changed_.notify_all();
        }
      } done{*this, lk, s, r};
      r = fetch(req, stem, s, progress);
      return r;
    }
    changed_.wait_for(lk, std::chrono::milliseconds(100));
    progress.total = s.total.load();
    progress.bytes = s.bytes.load();
  }
}

caf::expected<std::string> image_stage::fetch(const fill_request& req, const std::string& stem,
                                              slot& s, fill_progress& progress) {
  auto& img = req.image;
  auto path = dir_ + "/" + stem;
  auto part = path + partial_suffix;
  auto what = "image " + img.name + ": the node's copy " + part;
  auto limit = img.size > 0 ? img.size : img.max_size; // 0: no bound
  auto p = open_partial(part, limit, progress.cancel.get(), what);
  if (!p)
    return p.error();
  auto report = [&](uint64_t bytes, uint64_t total) {
    s.bytes = progress.bytes = bytes;
    s.total = progress.total = total;
  };
  report(p->offset, img.size);
  ++fetches_;
  log::info("images", "image " + img.name + ": fetching the node's copy"
                        + (p->offset > 0 ? " from byte " + std::to_string(p->offset)
                                         : std::string{}));
  auto resumed_at = p->offset;
  auto fo = source_options(req, progress.cancel);
  fo.offset = p->offset;
  auto d = mirror::download::open(fo, std::move(p->seed));
  auto err = d ? copy_stream(**d, *p, limit, img, report) : d.error();
  if (!err)
    err = publish(*p, part, path, dir_, what);
  if (err)
    return settle_failure(std::move(err), resumed_at, part, img.name);
  log::info("images", "image " + img.name + ": the node's copy is verified ("
                        + std::to_string(p->offset) + " bytes)");
  return path;
}

bool image_stage::discard_if_bad(const image_source& img) {
  auto path = dir_ + "/" + stem_of(img);
  // Hashed without the lock (seconds for a large image, while other fills
  // and the fleet's cleanup take it); deleted under it only if the name
  // still holds the file that was hashed, not a copy fetched since.
  unique_fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  struct stat st{};
  if (!f || ::fstat(f.get(), &st) != 0)
    return false;
  auto length = static_cast<uint64_t>(st.st_size);
  auto h = hash_prefix(f.get(), length, nullptr);
  if (h && (img.size == 0 || length == img.size) && h->hex() == img.sha256)
    return false;
  std::lock_guard<std::mutex> lk{mtx_};
  struct stat now{};
  if (::stat(path.c_str(), &now) != 0 || now.st_ino != st.st_ino || now.st_dev != st.st_dev)
    return false;
  ::unlink(path.c_str());
  log::warn("images", "image " + img.name + ": the node's copy " + path
                        + " no longer matches its digest: deleted, fetched again next");
  return true;
}

void image_stage::keep_only(const std::set<std::string>& kept_stems) {
  auto prefix = volume_names::entry_prefix(entry_);
  std::lock_guard<std::mutex> lk{mtx_};
  std::error_code ec;
  // Never throws: an unreadable directory deletes nothing.
  for (fs::directory_iterator i{dir_, ec}, end; !ec && i != end; i.increment(ec)) {
    auto& e = *i;
    auto name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0)
      continue; // another entry's, or not the engine's
    auto stem = name;
    if (stem.size() > std::strlen(partial_suffix)
        && stem.ends_with(partial_suffix))
      stem.resize(stem.size() - std::strlen(partial_suffix));
    if (kept_stems.contains(stem))
      continue;
    if (auto s = slots_.find(stem); s != slots_.end() && s->second.fetching)
      continue;
    std::error_code gone;
    fs::remove(e.path(), gone);
    log::info("images", "the node's copy " + name + " is no longer declared: deleted");
  }
}

} // namespace egress::images
