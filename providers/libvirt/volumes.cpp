#include "providers/libvirt/volumes.hpp"

#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>
#include <sstream>
#include <string_view>

#include <libvirt/virterror.h>
#include <pugixml.hpp>

#include "base/zeros.hpp"
#include "messages/error.hpp"
#include "messages/names.hpp"
#include "providers/libvirt/error.hpp"

namespace egress::lv {

namespace {

std::string size_text(uint64_t bytes) {
  return std::to_string(bytes) + " bytes";
}

// Every volume call refuses a bad pool or volume name before libvirt is asked.
caf::error check_names(const std::string& pool, const std::string& volume) {
  if (auto err = check_name("pool", pool))
    return err;
  return check_volume_name("volume", volume);
}

caf::expected<pool_ptr> lookup_pool(connection& c, const std::string& pool,
                                    const std::string& what) {
  pool_ptr p{virStoragePoolLookupByName(c.get(), pool.c_str())};
  if (!p)
    return last_error(what + ": pool " + pool);
  return p;
}

caf::expected<volume_ptr> lookup_volume(connection& c, const std::string& pool,
                                        const std::string& name, const std::string& what) {
  if (auto err = check_names(pool, name))
    return err;
  auto p = lookup_pool(c, pool, what);
  if (!p)
    return p.error();
  volume_ptr vol{virStorageVolLookupByName(p->get(), name.c_str())};
  if (!vol)
    return last_error(what);
  return vol;
}

std::string volume_xml(const std::string& name, uint64_t capacity,
                       const std::string& format) {
  pugi::xml_document doc;
  auto vol = doc.append_child("volume");
  vol.append_child("name").text() = name.c_str();
  auto cap = vol.append_child("capacity");
  cap.append_attribute("unit") = "bytes";
  cap.text() = static_cast<unsigned long long>(capacity);
  // Sparse: a dir pool would otherwise write (or fallocate) the whole
  // capacity before the upload overwrites it anyway. qcow2 allocates on
  // write by itself.
  if (format == "raw") {
    auto alloc = vol.append_child("allocation");
    alloc.append_attribute("unit") = "bytes";
    alloc.text() = 0;
  }
  vol.append_child("target").append_child("format").append_attribute("type")
    = format.c_str();
  std::ostringstream out;
  doc.save(out, "  ", pugi::format_default | pugi::format_no_declaration);
  return out.str();
}

// An active stream: aborted unless finished, whichever way the upload ends
// (also when the source throws). Declared after the stream_ptr that frees
// the handle, so the abort runs first.
class stream_guard {
public:
  explicit stream_guard(virStreamPtr st) noexcept : st_(st) {}
  ~stream_guard() { abort(); }
  stream_guard(const stream_guard&) = delete;
  stream_guard& operator=(const stream_guard&) = delete;

  /// virStreamAbort, once. Its own failure (the connection is already gone)
  /// must not replace the error the caller is about to return.
  void abort() noexcept {
    if (!st_)
      return;
    if (virStreamAbort(st_) < 0)
      virResetLastError();
    st_ = nullptr;
  }

  /// virStreamFinish succeeded (or failed): libvirt has closed its side, an
  /// abort afterwards would be a no-op.
  void closed() noexcept { st_ = nullptr; }

private:
  virStreamPtr st_;
};

// How a daemon that does not know VIR_STORAGE_VOL_UPLOAD_SPARSE_STREAM
// (libvirt before 3.4) refuses it: virCheckFlags' invalid argument, before
// the stream became active. By its code, not its text (the daemon's locale
// translates that). Whatever else this matches only costs a second try
// without holes, which is always right.
bool sparse_refused() {
  const virError* e = virGetLastError();
  return e != nullptr && (e->code == VIR_ERR_INVALID_ARG || e->code == VIR_ERR_NO_SUPPORT);
}

// One upload: packets of whole chunks from the source; with holes, a chunk
// that is all zeros is not sent but added to a hole, which goes (one
// message however long) before the next data and before the finish.
class uploader {
public:
  /// `sent` (may be null) is kept current while the upload runs: a caller
  /// that abandons a blocked upload reads how far it got.
  uploader(std::string what, uint64_t length, const upload_source& read, size_t chunk,
           std::atomic<uint64_t>* sent)
    : what_(std::move(what)), length_(length), read_(read), chunk_(chunk), sent_(sent) {
    if (sent_ != nullptr)
      *sent_ = 0;
  }

  /// With `zeros_from`, the volume reads as zeros from that many bytes
  /// past `offset` on: a packet of zeros that starts there or later joins
  /// a hole. Without it, every byte is sent.
  caf::error run(connection& c, virStorageVolPtr vol, uint64_t offset,
                 std::optional<uint64_t> zeros_from = std::nullopt) {
    if (auto err = check())
      return err;
    zeros_from_ = zeros_from;
    auto st = open(c, vol, offset);
    if (!st)
      return std::move(st.error());
    stream_guard guard{st->get()};
    if (auto err = pump(st->get())) {
      guard.abort();
      return err;
    }
    if (virStreamFinish(st->get()) < 0) {
      auto err = last_error(what_ + ": finish" + at());
      guard.abort(); // a no-op once finish closed it; harmless otherwise
      return err;
    }
    guard.closed();
    return {};
  }

  /// What the stream took so far (all of it once run returned success).
  upload_tally tally() const { return {done_, holes_sent_}; }

private:
  caf::error check() const {
    if (!read_)
      return make_error(ec::invalid_argument, what_ + ": no source given");
    if (chunk_ < min_upload_chunk || chunk_ > max_upload_chunk)
      return make_error(ec::invalid_argument,
                        what_ + ": chunk of " + size_text(chunk_) + " is outside ["
                          + size_text(min_upload_chunk) + ", "
                          + size_text(max_upload_chunk) + "]");
    return {};
  }

  // The stream, set up for holes if asked for and the daemon knows them.
  caf::expected<stream_ptr> open(connection& c, virStorageVolPtr vol, uint64_t offset) {
    stream_ptr st{virStreamNew(c.get(), 0)};
    if (!st)
      return last_error(what_ + ": new stream");
    unsigned flags = zeros_from_ ? VIR_STORAGE_VOL_UPLOAD_SPARSE_STREAM : 0;
    if (virStorageVolUpload(vol, st.get(), static_cast<unsigned long long>(offset),
                            static_cast<unsigned long long>(length_), flags)
        == 0)
      return st;
    if (!zeros_from_ || !sparse_refused())
      return last_error(what_); // the stream never became active: freeing is enough
    virResetLastError(); // an old daemon: the same bytes, zeros and all
    zeros_from_.reset();
    return open(c, vol, offset);
  }

  std::string at() const { return " after " + size_text(done_); }

  // Packets until the source ends or `length` is reached.
  caf::error pump(virStreamPtr st) {
    // Not zero-filled: only what the source wrote is ever sent.
    buf_.reset(new char[chunk_]);
    for (;;) {
      auto want = length_ == 0
                    ? chunk_
                    : static_cast<size_t>(std::min<uint64_t>(chunk_, length_ - done_ - hole_));
      if (want == 0)
        break;
      auto have = fill(want);
      if (!have)
        return std::move(have.error());
      if (*have > 0) {
        if (zeros_from_ && done_ + hole_ >= *zeros_from_ && all_zero(buf_.get(), *have))
          hole_ += *have;
        else if (auto err = send(st, *have))
          return err;
      }
      if (*have < want) { // the source ended
        if (auto err = send_hole(st))
          return err;
        if (length_ != 0 && done_ < length_)
          return make_error(ec::invalid_argument, what_ + ": the source ended after "
                                                    + size_text(done_) + " of "
                                                    + size_text(length_));
        return {};
      }
    }
    return send_hole(st);
  }

  // Fills a whole packet: libvirt's per-packet cost (a message, a wake-up
  // of the daemon's stream handler) is what small sends pay for. Fewer
  // than `want` bytes: the source has ended.
  caf::expected<size_t> fill(size_t want) {
    size_t have = 0;
    while (have < want) {
      auto n = read_(buf_.get() + have, want - have);
      if (!n) {
        if (!n.error()) // a failure without an error must not read as success
          return make_error(ec::invalid_argument,
                            what_ + ": the source failed without an error" + at());
        return std::move(n.error()); // the source's own error, unchanged
      }
      if (*n > want - have)
        return make_error(ec::invalid_argument,
                          what_ + ": the source returned " + size_text(*n)
                            + " for a buffer of " + size_text(want - have) + at());
      if (*n == 0)
        break;
      have += *n;
    }
    return have;
  }

  caf::error send(virStreamPtr st, size_t have) {
    if (auto err = send_hole(st))
      return err;
    for (size_t off = 0; off < have;) {
      auto n = virStreamSend(st, buf_.get() + off, have - off);
      if (n <= 0) // -2 (would block) cannot happen on a blocking stream
        return last_error(what_ + ": send" + at());
      off += static_cast<size_t>(n);
      count(static_cast<uint64_t>(n), false);
    }
    return {};
  }

  // The zeros gathered so far, as one hole: the daemon seeks past them (and
  // truncates the file there, see volumes.hpp).
  caf::error send_hole(virStreamPtr st) {
    if (hole_ == 0)
      return {};
    if (virStreamSendHole(st, static_cast<long long>(hole_), 0) < 0)
      return last_error(what_ + ": send a hole of " + size_text(hole_) + at());
    count(hole_, true);
    hole_ = 0;
    return {};
  }

  void count(uint64_t n, bool hole) {
    done_ += n;
    if (sent_ != nullptr)
      *sent_ = done_;
    if (hole)
      holes_sent_ += n;
  }

  std::string what_;
  uint64_t length_;
  const upload_source& read_;
  size_t chunk_;
  std::atomic<uint64_t>* sent_;
  std::unique_ptr<char[]> buf_;
  std::optional<uint64_t> zeros_from_; // from here on (past the offset) holes may go
  uint64_t done_ = 0;        // bytes the stream took, holes included
  uint64_t hole_ = 0;        // zeros read but not yet sent as a hole
  uint64_t holes_sent_ = 0;  // of done_, the bytes that went as holes
};

caf::error upload(connection& c, virStorageVolPtr vol, const std::string& what,
                  uint64_t offset, uint64_t length, const upload_source& read,
                  size_t chunk, std::atomic<uint64_t>* sent) {
  uploader up{what, length, read, chunk, sent};
  if (vol == nullptr)
    return make_error(ec::invalid_argument, what + ": no volume given");
  return up.run(c, vol, offset);
}

} // namespace

caf::expected<volume_ptr> create_volume(connection& c, const std::string& pool,
                                        const std::string& name, uint64_t capacity_bytes,
                                        const std::string& format) {
  if (auto err = check_names(pool, name))
    return err;
  auto what = "create volume " + pool + "/" + name;
  if (format != "raw" && format != "qcow2")
    return make_error(ec::invalid_argument,
                      what + ": format " + quote(format) + " is not raw or qcow2");
  if (capacity_bytes == 0)
    return make_error(ec::invalid_argument, what + ": capacity 0");
  auto p = lookup_pool(c, pool, what);
  if (!p)
    return p.error();
  auto xml = volume_xml(name, capacity_bytes, format);
  volume_ptr vol{virStorageVolCreateXML(p->get(), xml.c_str(), 0)};
  if (!vol)
    return last_error(what);
  return vol;
}

caf::error delete_volume(connection& c, const std::string& pool, const std::string& name) {
  if (auto err = check_names(pool, name))
    return err;
  auto what = "delete volume " + pool + "/" + name;
  auto p = lookup_pool(c, pool, what);
  if (!p)
    return p.error();
  volume_ptr vol{virStorageVolLookupByName(p->get(), name.c_str())};
  if (!vol) {
    auto err = last_error(what);
    return is(err, ec::no_volume) ? caf::error{} : err;
  }
  if (virStorageVolDelete(vol.get(), 0) < 0) {
    auto err = last_error(what);
    return is(err, ec::no_volume) ? caf::error{} : err; // deleted meanwhile
  }
  return {};
}

caf::expected<std::vector<std::string>> list_volumes(connection& c, const std::string& pool,
                                                     const std::string& prefix) {
  if (auto err = check_name("pool", pool))
    return err;
  auto what = "list volumes of " + pool;
  auto p = lookup_pool(c, pool, what);
  if (!p)
    return p.error();
  virStorageVolPtr* vols = nullptr;
  int n = virStoragePoolListAllVolumes(p->get(), &vols, 0);
  if (n < 0)
    return last_error(what);
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    volume_ptr v{vols[i]}; // takes the reference
    if (const char* name = virStorageVolGetName(v.get());
        name != nullptr && std::string_view{name}.starts_with(prefix))
      out.emplace_back(name);
  }
  free(vols);
  std::sort(out.begin(), out.end());
  return out;
}

caf::error upload_volume(connection& c, virStorageVolPtr vol, uint64_t offset,
                         uint64_t length, const upload_source& read, size_t chunk,
                         std::atomic<uint64_t>* sent) {
  const char* name = vol != nullptr ? virStorageVolGetName(vol) : nullptr;
  return upload(c, vol, std::string{"upload "} + (name != nullptr ? name : "volume"), offset,
                length, read, chunk, sent);
}

caf::error upload_volume(connection& c, const std::string& pool, const std::string& name,
                         uint64_t offset, uint64_t length, const upload_source& read,
                         size_t chunk, std::atomic<uint64_t>* sent) {
  if (sent != nullptr)
    *sent = 0;
  auto what = "upload " + pool + "/" + name;
  auto vol = lookup_volume(c, pool, name, what);
  if (!vol)
    return vol.error();
  return upload(c, vol->get(), what, offset, length, read, chunk, sent);
}

caf::error upload_volume_sparse(connection& c, const std::string& pool,
                                const std::string& name, uint64_t offset, uint64_t length,
                                uint64_t zeros_from, const upload_source& read,
                                upload_tally* tally) {
  if (tally != nullptr)
    *tally = {};
  auto what = "upload " + pool + "/" + name;
  auto vol = lookup_volume(c, pool, name, what);
  if (!vol)
    return vol.error();
  uploader up{what, length, read, default_upload_chunk, nullptr};
  auto err = up.run(c, vol->get(), offset, zeros_from > offset ? zeros_from - offset : 0);
  if (tally != nullptr)
    *tally = up.tally();
  return err;
}

caf::expected<std::optional<volume_facts>> volume_info(connection& c, const std::string& pool,
                                                       const std::string& name) {
  if (auto err = check_names(pool, name))
    return err;
  auto what = "volume info " + pool + "/" + name;
  auto p = lookup_pool(c, pool, what);
  if (!p)
    return p.error();
  // Best effort: a refresh lets the pool see files changed behind libvirt's
  // back, but libvirt refuses it while another job (qemu-img creating an
  // overlay for another proxy) runs on the pool: "pool has asynchronous jobs
  // running", an internal error that must not fail this read. The volume's
  // own allocation is refreshed by virStorageVolGetInfo anyway.
  if (virStoragePoolRefresh(p->get(), 0) < 0)
    virResetLastError();
  volume_ptr vol{virStorageVolLookupByName(p->get(), name.c_str())};
  if (!vol) {
    auto err = last_error(what);
    if (is(err, ec::no_volume))
      return std::optional<volume_facts>{};
    return err;
  }
  virStorageVolInfo info{};
  if (virStorageVolGetInfo(vol.get(), &info) < 0) {
    auto err = last_error(what);
    if (is(err, ec::no_volume))
      return std::optional<volume_facts>{};
    return err;
  }
  // The physical size comes in the allocation field of this call's answer.
  virStorageVolInfo physical{};
  if (virStorageVolGetInfoFlags(vol.get(), &physical, VIR_STORAGE_VOL_GET_PHYSICAL) < 0) {
    auto err = last_error(what + ": physical size");
    if (is(err, ec::no_volume))
      return std::optional<volume_facts>{};
    return err;
  }
  volume_facts out;
  out.length = physical.allocation;
  out.capacity = info.capacity;
  out.allocation = info.allocation;
  if (char* path = virStorageVolGetPath(vol.get())) {
    out.path = path;
    free(path);
  } else {
    return last_error(what + ": path");
  }
  return std::optional<volume_facts>{std::move(out)};
}

namespace {

// virStorageVolDownload of `length` bytes from `offset` into `sink`; with
// `stop_at_hole` a sparse download that ends at the first hole. Returns the
// bytes received.
caf::expected<uint64_t> receive(connection& c, const std::string& pool, const std::string& name,
                                uint64_t offset, uint64_t length, const download_sink& sink,
                                bool stop_at_hole, const std::string& what) {
  if (length == 0 || !sink)
    return make_error(ec::invalid_argument, what + ": no length or no sink given");
  auto vol = lookup_volume(c, pool, name, what);
  if (!vol)
    return vol.error();
  stream_ptr st{virStreamNew(c.get(), 0)};
  if (!st)
    return last_error(what + ": new stream");
  unsigned flags = stop_at_hole ? VIR_STORAGE_VOL_DOWNLOAD_SPARSE_STREAM : 0;
  if (virStorageVolDownload(vol->get(), st.get(), static_cast<unsigned long long>(offset),
                            static_cast<unsigned long long>(length), flags)
      < 0)
    return last_error(what);
  stream_guard guard{st.get()};
  std::unique_ptr<char[]> buf{new char[default_upload_chunk]};
  uint64_t done = 0;
  for (;;) {
    auto n = virStreamRecvFlags(st.get(), buf.get(), default_upload_chunk,
                                stop_at_hole ? VIR_STREAM_RECV_STOP_AT_HOLE : 0);
    if (n == -3) { // a hole: the written prefix ends here
      guard.abort();
      return done;
    }
    if (n < 0) {
      auto err = last_error(what + ": receive after " + size_text(done));
      guard.abort();
      return err;
    }
    if (n == 0)
      break;
    done += static_cast<uint64_t>(n);
    if (auto err = sink(buf.get(), static_cast<size_t>(n))) {
      guard.abort();
      return err;
    }
  }
  if (virStreamFinish(st.get()) < 0) {
    auto err = last_error(what + ": finish after " + size_text(done));
    guard.abort();
    return err;
  }
  guard.closed();
  return done;
}

} // namespace

caf::error download_volume(connection& c, const std::string& pool, const std::string& name,
                           uint64_t offset, uint64_t length, const download_sink& sink) {
  auto what = "download " + pool + "/" + name;
  auto done = receive(c, pool, name, offset, length, sink, false, what);
  if (!done)
    return done.error();
  if (*done != length)
    return make_error(ec::invalid_argument, what + ": got " + size_text(*done) + " of "
                                              + size_text(length));
  return {};
}

caf::expected<uint64_t> read_written_prefix(connection& c, const std::string& pool,
                                            const std::string& name, uint64_t offset,
                                            uint64_t length, const download_sink& sink) {
  return receive(c, pool, name, offset, length, sink, true,
                 "read back " + pool + "/" + name + " from " + std::to_string(offset));
}

caf::expected<volume_ptr> create_overlay(connection& c, const std::string& pool,
                                         const std::string& name, const std::string& backing,
                                         const std::string& backing_format,
                                         uint64_t capacity) {
  if (auto err = check_names(pool, name))
    return err;
  auto what = "create overlay " + pool + "/" + name;
  if (backing_format != "raw" && backing_format != "qcow2")
    return make_error(ec::invalid_argument, what + ": backing format "
                                              + quote(backing_format)
                                              + " is not raw or qcow2");
  if (backing.empty() || backing.front() != '/'
      || backing.find("/../") != std::string::npos)
    return make_error(ec::invalid_argument, what + ": backing " + quote(backing)
                                              + " is not an absolute path");
  if (capacity == 0)
    return make_error(ec::invalid_argument, what + ": capacity 0");
  volume_ptr base{virStorageVolLookupByPath(c.get(), backing.c_str())};
  if (!base)
    return last_error(what + ": backing " + backing);
  auto p = lookup_pool(c, pool, what);
  if (!p)
    return p.error();
  pugi::xml_document doc;
  auto vol = doc.append_child("volume");
  vol.append_child("name").text() = name.c_str();
  auto cap = vol.append_child("capacity");
  cap.append_attribute("unit") = "bytes";
  cap.text() = static_cast<unsigned long long>(capacity);
  vol.append_child("target").append_child("format").append_attribute("type") = "qcow2";
  auto bs = vol.append_child("backingStore");
  bs.append_child("path").text() = backing.c_str();
  bs.append_child("format").append_attribute("type") = backing_format.c_str();
  std::ostringstream xml;
  doc.save(xml, "  ", pugi::format_default | pugi::format_no_declaration);
  volume_ptr out{virStorageVolCreateXML(p->get(), xml.str().c_str(), 0)};
  if (!out)
    return last_error(what);
  return out;
}

} // namespace egress::lv
