#include "providers/images/stage.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <vector>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.hpp"
#include "messages/error.hpp"
#include "providers/images/volume_names.hpp"
#include "providers/mirror/download.hpp"
#include "providers/mirror/sha256.hpp"

namespace egress::images {

namespace fs = std::filesystem;

namespace {

constexpr const char* partial_suffix = ".partial";

// Closes a descriptor on every path out.
struct fd_guard {
  int fd = -1;
  ~fd_guard() {
    if (fd >= 0)
      ::close(fd);
  }
};

std::string errno_text() {
  return std::strerror(errno);
}

// A failed write: a full disk is the stage's to report as such (the image
// actor retries it soon, and the operator frees room), anything else is the
// directory's.
caf::error write_error(const std::string& what) {
  auto code = errno == ENOSPC || errno == EDQUOT    ? ec::storage_full
              : errno == EACCES || errno == EPERM   ? ec::access_denied
                                                     // a directory removed under it, an
                                                     // I/O error: worth another try
                                                     : ec::source_failed;
  return make_error(code, what + ": " + errno_text());
}

caf::error write_all(int fd, uint64_t at, const char* data, size_t n, const std::string& what) {
  while (n > 0) {
    auto w = ::pwrite(fd, data, n, static_cast<off_t>(at));
    if (w < 0 && errno == EINTR)
      continue;
    if (w == 0)
      errno = EIO;
    if (w <= 0)
      return write_error(what);
    data += w;
    n -= static_cast<size_t>(w);
    at += static_cast<uint64_t>(w);
  }
  return {};
}

// The digest of the first `length` bytes of `fd` (a partial copy to
// resume); nullopt if they cannot be read back.
std::optional<mirror::sha256> hash_prefix(int fd, uint64_t length,
                                          const std::atomic<bool>* cancel) {
  mirror::sha256 h;
  std::vector<char> buf(1 << 20);
  for (uint64_t at = 0; at < length;) {
    if (cancel && *cancel)
      return std::nullopt;
    auto want = static_cast<size_t>(std::min<uint64_t>(buf.size(), length - at));
    auto r = ::pread(fd, buf.data(), want, static_cast<off_t>(at));
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return std::nullopt;
    h.update(buf.data(), static_cast<size_t>(r));
    at += static_cast<uint64_t>(r);
  }
  return h;
}

bool bad_bytes(const caf::error& err) {
  return is(err, ec::digest_mismatch) || is(err, ec::length_mismatch);
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
  std::shared_ptr<const std::atomic<bool>> cancel = progress.cancel;
  auto& img = req.image;
  auto path = dir_ + "/" + stem;
  auto part = path + partial_suffix;
  auto what = "image " + img.name + ": the node's copy " + part;
  fd_guard f{::open(part.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0640)};
  if (f.fd < 0)
    return write_error(what);
  // Another engine of this entry on this machine, with the same stage
  // directory, may be fetching the same image: one writer per file, and
  // this fill tries again later (its image actor's backoff).
  if (::flock(f.fd, LOCK_EX | LOCK_NB) != 0)
    return make_error(ec::source_failed, what + ": "
                                           + (errno == EWOULDBLOCK ? "another process is writing it"
                                                                   : "cannot lock it: " + errno_text()));
  struct stat st{};
  if (::fstat(f.fd, &st) != 0)
    return write_error(what);
  auto limit = img.size > 0 ? img.size : img.max_size; // 0: no bound
  auto offset = static_cast<uint64_t>(st.st_size);
  std::optional<mirror::sha256> seed;
  if (offset > 0 && (limit == 0 || offset <= limit))
    seed = hash_prefix(f.fd, offset, cancel.get());
  if (cancel && *cancel)
    return make_error(ec::shutting_down, what + ": given up");
  if (offset > 0 && !seed) {
    if (::ftruncate(f.fd, 0) != 0)
      return write_error(what);
    offset = 0;
  }
  auto resumed_at = offset;
  s.bytes = offset;
  s.total = img.size;
  progress.bytes = offset;
  progress.total = img.size;
  ++fetches_;
  mirror::fetch_options fo;
  fo.url = img.url;
  fo.offset = offset;
  if (img.size > 0)
    fo.expected_length = img.size;
  fo.expected_sha256 = img.sha256;
  fo.deadline = req.download_deadline.count() > 0 ? req.download_deadline
                                                  : std::chrono::minutes(30);
  fo.low_speed_limit = req.low_speed_limit;
  fo.low_speed_time = req.low_speed_time;
  fo.ca_file = req.ca_file;
  fo.cancel = std::move(cancel);
  log::info("images", "image " + img.name + ": fetching the node's copy"
                        + (offset > 0 ? " from byte " + std::to_string(offset) : std::string{}));
  auto failed = [&](caf::error err) {
    // Bytes that failed the check go; a cut transfer stays to be resumed.
    // After a resume the fault may be the prefix's (an older object behind
    // the same URL) or the range's: the next attempt starts over, soon.
    if (resumed_at > 0 && (bad_bytes(err) || is(err, ec::source_rejected))) {
      ::unlink(part.c_str());
      err = make_error(ec::source_failed,
                       detail(err) + " (after resuming at byte " + std::to_string(resumed_at)
                         + "; the partial copy is discarded and the next attempt starts over)");
    } else if (bad_bytes(err)) {
      ::unlink(part.c_str());
    }
    return with_context(err, "image " + img.name + ": the node's copy");
  };
  auto d = mirror::download::open(fo, std::move(seed));
  if (!d)
    return failed(d.error());
  std::vector<char> buf(1 << 20);
  for (;;) {
    auto n = (*d)->read(buf.data(), buf.size());
    if (!n)
      return failed(n.error());
    if (*n == 0)
      break;
    // The stage's disk is bounded as a host's pool is: by a declared
    // length within the image's size or max-size, and never past it.
    auto total = (*d)->total();
    if (!total) {
      ::unlink(part.c_str());
      return with_context(make_error(ec::invalid_argument,
                                     mirror::redact_url(img.url)
                                       + " declares no length; set the image's size in the config"),
                          "image " + img.name + ": the node's copy");
    }
    if (limit > 0 && *total > limit)
      return failed(make_error(ec::length_mismatch,
                               mirror::redact_url(img.url) + " declares " + std::to_string(*total)
                                 + " bytes, more than the image's size or max-size ("
                                 + std::to_string(limit) + ")"));
    s.total = *total;
    progress.total = *total;
    if (offset + *n > *total)
      return failed(make_error(ec::length_mismatch, mirror::redact_url(img.url)
                                                      + " sends more than the "
                                                      + std::to_string(*total)
                                                      + " bytes it declares"));
    if (auto err = write_all(f.fd, offset, buf.data(), *n, what)) {
      if (is(err, ec::storage_full))
        ::unlink(part.c_str()); // the room goes back to whoever else needs it
      return with_context(err, "image " + img.name);
    }
    offset += *n;
    s.bytes = offset;
    progress.bytes = offset;
  }
  // Durable before it is named verified: a crash must not leave a short
  // file under the final name.
  if (::fsync(f.fd) != 0 || ::rename(part.c_str(), path.c_str()) != 0)
    return write_error(what);
  if (fd_guard d{::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)}; d.fd >= 0)
    ::fsync(d.fd);
  log::info("images", "image " + img.name + ": the node's copy is verified (" + std::to_string(offset)
                        + " bytes)");
  return path;
}

bool image_stage::discard_if_bad(const image_source& img) {
  auto path = dir_ + "/" + stem_of(img);
  std::lock_guard<std::mutex> lk{mtx_};
  fd_guard f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  struct stat st{};
  if (f.fd < 0 || ::fstat(f.fd, &st) != 0)
    return false;
  auto length = static_cast<uint64_t>(st.st_size);
  auto h = hash_prefix(f.fd, length, nullptr);
  if (h && (img.size == 0 || length == img.size) && h->hex() == img.sha256)
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
