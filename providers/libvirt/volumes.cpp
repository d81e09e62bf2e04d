#include "providers/libvirt/volumes.hpp"

#include <algorithm>
#include <memory>
#include <sstream>
#include <string_view>

#include <libvirt/virterror.h>
#include <pugixml.hpp>

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

caf::error upload(connection& c, virStorageVolPtr vol, const std::string& what,
                  uint64_t offset, uint64_t length, const upload_source& read,
                  size_t chunk, uint64_t* sent) {
  uint64_t done = 0;
  if (sent != nullptr)
    *sent = 0;
  if (vol == nullptr)
    return make_error(ec::invalid_argument, what + ": no volume given");
  if (!read)
    return make_error(ec::invalid_argument, what + ": no source given");
  if (chunk < min_upload_chunk || chunk > max_upload_chunk)
    return make_error(ec::invalid_argument,
                      what + ": chunk of " + size_text(chunk) + " is outside ["
                        + size_text(min_upload_chunk) + ", "
                        + size_text(max_upload_chunk) + "]");
  // Not zero-filled: only what the source wrote is ever sent.
  std::unique_ptr<char[]> buf{new char[chunk]};
  stream_ptr st{virStreamNew(c.get(), 0)};
  if (!st)
    return last_error(what + ": new stream");
  if (virStorageVolUpload(vol, st.get(), static_cast<unsigned long long>(offset),
                          static_cast<unsigned long long>(length), 0)
      < 0)
    return last_error(what); // the stream never became active: freeing is enough
  stream_guard guard{st.get()};
  auto at = [&] { return " after " + size_text(done); };
  for (;;) {
    auto want = length == 0 ? chunk
                            : static_cast<size_t>(std::min<uint64_t>(chunk, length - done));
    if (want == 0)
      break;
    // Fill a whole packet: libvirt's per-packet cost (a message, a wake-up
    // of the daemon's stream handler) is what small sends pay for.
    size_t have = 0;
    bool ended = false;
    while (have < want) {
      auto n = read(buf.get() + have, want - have);
      if (!n) {
        guard.abort();
        if (!n.error()) // a failure without an error must not read as success
          return make_error(ec::invalid_argument,
                            what + ": the source failed without an error" + at());
        return std::move(n.error()); // the source's own error, unchanged
      }
      if (*n > want - have) {
        guard.abort();
        return make_error(ec::invalid_argument,
                          what + ": the source returned " + size_text(*n)
                            + " for a buffer of " + size_text(want - have) + at());
      }
      if (*n == 0) {
        ended = true;
        break;
      }
      have += *n;
    }
    for (size_t off = 0; off < have;) {
      auto n = virStreamSend(st.get(), buf.get() + off, have - off);
      if (n <= 0) { // -2 (would block) cannot happen on a blocking stream
        auto err = last_error(what + ": send" + at());
        guard.abort();
        return err;
      }
      off += static_cast<size_t>(n);
      done += static_cast<uint64_t>(n);
      if (sent != nullptr)
        *sent = done;
    }
    if (ended) {
      if (length != 0 && done < length) {
        guard.abort();
        return make_error(ec::invalid_argument, what + ": the source ended after "
                                                  + size_text(done) + " of "
                                                  + size_text(length));
      }
      break;
    }
  }
  if (virStreamFinish(st.get()) < 0) {
    auto err = last_error(what + ": finish" + at());
    guard.abort(); // a no-op once finish closed it; harmless otherwise
    return err;
  }
  guard.closed();
  return {};
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
                         uint64_t* sent) {
  const char* name = vol != nullptr ? virStorageVolGetName(vol) : nullptr;
  return upload(c, vol, std::string{"upload "} + (name != nullptr ? name : "volume"),
                offset, length, read, chunk, sent);
}

caf::error upload_volume(connection& c, const std::string& pool, const std::string& name,
                         uint64_t offset, uint64_t length, const upload_source& read,
                         size_t chunk, uint64_t* sent) {
  if (sent != nullptr)
    *sent = 0;
  if (auto err = check_names(pool, name))
    return err;
  auto what = "upload " + pool + "/" + name;
  auto p = lookup_pool(c, pool, what);
  if (!p)
    return p.error();
  volume_ptr vol{virStorageVolLookupByName(p->get(), name.c_str())};
  if (!vol)
    return last_error(what);
  return upload(c, vol.get(), what, offset, length, read, chunk, sent);
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
  if (auto err = check_names(pool, name))
    return err;
  if (length == 0 || !sink)
    return make_error(ec::invalid_argument, what + ": no length or no sink given");
  auto p = lookup_pool(c, pool, what);
  if (!p)
    return p.error();
  volume_ptr vol{virStorageVolLookupByName(p->get(), name.c_str())};
  if (!vol)
    return last_error(what);
  stream_ptr st{virStreamNew(c.get(), 0)};
  if (!st)
    return last_error(what + ": new stream");
  unsigned flags = stop_at_hole ? VIR_STORAGE_VOL_DOWNLOAD_SPARSE_STREAM : 0;
  if (virStorageVolDownload(vol.get(), st.get(), static_cast<unsigned long long>(offset),
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
