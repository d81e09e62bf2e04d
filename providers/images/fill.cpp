#include "providers/images/fill.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>

#include "messages/error.hpp"
#include "providers/images/dedicated_link.hpp"
#include "providers/images/image_header.hpp"
#include "providers/images/volume_names.hpp"
#include "providers/libvirt/volumes.hpp"
#include "providers/mirror/download.hpp"
#include "providers/mirror/sha256.hpp"

namespace egress::images {

namespace {

constexpr uint64_t mib = uint64_t{1} << 20;

// A resumed upload restarts at a MiB boundary below what the volume holds:
// the last block libvirtd wrote before the connection died may be partly
// written, and whatever the prefix holds is hashed again anyway.
constexpr uint64_t resume_granularity = mib;

caf::error with_context(const caf::error& err, const std::string& prefix) {
  if (!err || err.category() != caf::atom("egress"))
    return err;
  return make_error(static_cast<ec>(err.code()), prefix + ": " + detail(err));
}

caf::expected<std::string> read_small(lv::connection& c, const std::string& pool,
                                      const std::string& name, uint64_t length) {
  std::string out;
  if (length == 0 || length > 64 * 1024)
    return out; // not a marker of ours: the caller compares and rejects it
  auto err = lv::download_volume(c, pool, name, 0, length, [&](const char* p, size_t n) {
    out.append(p, n);
    return caf::error{};
  });
  if (err)
    return err;
  return out;
}

caf::error write_small(lv::connection& c, const std::string& pool, const std::string& name,
                       const std::string& content) {
  if (auto err = lv::delete_volume(c, pool, name))
    return err;
  auto vol = lv::create_volume(c, pool, name, content.size(), "raw");
  if (!vol)
    return vol.error();
  size_t pos = 0;
  return lv::upload_volume(c, vol->get(), 0, content.size(),
                           [&](char* buf, size_t cap) -> caf::expected<size_t> {
                             auto n = std::min(cap, content.size() - pos);
                             std::memcpy(buf, content.data() + pos, n);
                             pos += n;
                             return n;
                           });
}

// What the transfer knows after it started: enough to decide whether a
// failure leaves a resumable partial volume behind.
struct attempt {
  bool data_touched = false;
};

// The virtual size a marker vouches for, if `text` is exactly the marker
// fill writes for `img` at `length` bytes (for qcow2 the marker records the
// virtual size read from the verified header; for the others it is the
// length).
std::optional<uint64_t> vouched_virtual_size(const std::string& text,
                                             const image_source& img, uint64_t length) {
  uint64_t virtual_size = length;
  if (img.format == "qcow2") {
    static const std::string key = "\nvirtual-size ";
    auto at = text.find(key);
    if (at == std::string::npos)
      return std::nullopt;
    auto digits = text.c_str() + at + key.size();
    char* end = nullptr;
    errno = 0;
    virtual_size = std::strtoull(digits, &end, 10);
    if (errno != 0 || end == digits)
      return std::nullopt;
  }
  if (text != marker_text(img, length, virtual_size))
    return std::nullopt;
  return virtual_size;
}

static_assert(lv::default_upload_chunk >= header_window,
              "the first read must hold the whole header window");

// Reads from `dl` into `buf` (`cap` bytes) until it holds the header
// window or the source ended: the format check sees the same bytes
// whatever pieces the mirror delivers them in.
caf::expected<size_t> read_head(mirror::download& dl, char* buf, size_t cap) {
  size_t have = 0;
  while (have < header_window) {
    auto n = dl.read(buf + have, cap - have);
    if (!n)
      return n.error();
    if (*n == 0)
      break;
    have += *n;
  }
  return have;
}

caf::expected<fill_result> transfer(const fill_request& req, const volume_names& names,
                                    lv::connection& c, fill_progress& progress,
                                    attempt& at) {
  auto& img = req.image;
  auto& pool = req.pool;
  auto marker = lv::volume_info(c, pool, names.marker);
  if (!marker)
    return marker.error();
  auto data = lv::volume_info(c, pool, names.data);
  if (!data)
    return data.error();
  auto partial = lv::volume_info(c, pool, names.partial);
  if (!partial)
    return partial.error();

  // 1. Ready: the marker vouches for the data as it is. Lengths are the
  // volumes' byte lengths, never their capacities (volumes.hpp).
  if (*marker && *data && !*partial) {
    auto text = read_small(c, pool, names.marker, (*marker)->length);
    if (!text)
      return text.error();
    auto virtual_size = vouched_virtual_size(*text, img, (*data)->length);
    if (virtual_size && (img.size == 0 || img.size == (*data)->length)) {
      // A pool filled before the format check existed (or by an older
      // check) may hold an image the check refuses: it goes, marker first.
      std::string head;
      auto n = std::min<uint64_t>(header_window, (*data)->length);
      if (n > 0)
        if (auto err = lv::download_volume(c, pool, names.data, 0, n,
                                           [&](const char* p, size_t k) {
                                             head.append(p, k);
                                             return caf::error{};
                                           }))
          return err;
      if (auto checked = check_header(img.name, img.format, head, (*data)->length);
          !checked) {
        if (auto err = lv::delete_volume(c, pool, names.marker))
          return err;
        at.data_touched = true;
        return checked.error();
      }
      fill_result r;
      r.volume = names.data;
      r.path = (*data)->path;
      r.length = (*data)->length;
      r.virtual_size = *virtual_size;
      progress.total = r.length;
      progress.bytes = r.length;
      return r;
    }
  }

  // 2. Not ready. The marker goes first: from here on the data changes.
  if (*marker)
    if (auto err = lv::delete_volume(c, pool, names.marker))
      return err;
  at.data_touched = true;
  if (!*partial)
    if (auto err = write_small(c, pool, names.partial,
                               "partial; being written: " + marker_text(img, img.size, 0)))
      return err;

  // Resume where the volume got to, if it was being written before (the
  // partial mark is there) and holds anything. A sparse raw volume written
  // from byte 0 has its allocation up to where the daemon got.
  uint64_t offset = 0;
  if (*data && *partial && (*data)->length > 0
      && (img.size == 0 || (*data)->length == img.size)) {
    // Below the length: a ranged request must ask for at least one byte.
    auto held = std::min((*data)->allocation, (*data)->length - 1);
    offset = held / resume_granularity * resume_granularity;
  }
  std::optional<mirror::sha256> seed;
  std::optional<header_facts> header;
  if (offset > 0) {
    seed.emplace();
    std::string head;
    auto err = lv::download_volume(c, pool, names.data, 0, offset,
                                   [&](const char* p, size_t n) {
                                     seed->update(p, n);
                                     if (head.size() < header_window)
                                       head.append(p, std::min(n, header_window - head.size()));
                                     return caf::error{};
                                   });
    if (err) // an unreadable prefix: start over rather than trust it
      return with_context(err, "read back the first " + std::to_string(offset)
                                 + " bytes to resume");
    // The prefix is checked like fresh bytes: nothing more is written
    // behind a header that fails its format.
    auto checked = check_header(img.name, img.format, head, (*data)->length);
    if (!checked)
      return checked.error();
    header = *checked;
  }

  mirror::fetch_options fo;
  fo.url = img.url;
  fo.offset = offset;
  if (img.size > 0)
    fo.expected_length = img.size;
  fo.expected_sha256 = img.sha256;
  fo.deadline = req.download_deadline;
  fo.low_speed_limit = req.low_speed_limit;
  fo.low_speed_time = req.low_speed_time;
  fo.ca_file = req.ca_file;
  fo.cancel = progress.cancel;
  auto dl = mirror::download::open(fo, std::move(seed));
  if (!dl)
    return dl.error();

  // The first bytes tell the total when the config does not, and, from
  // byte 0, the format: checked before anything is written (a header that
  // names a file of the host must never reach the pool, where libvirt reads
  // it on every refresh).
  std::unique_ptr<char[]> first{new char[lv::default_upload_chunk]};
  auto n0 = read_head(**dl, first.get(), lv::default_upload_chunk);
  if (!n0)
    return n0.error();
  auto total = (*dl)->total().value_or(0);
  if (total == 0)
    return make_error(ec::invalid_argument,
                      "image " + img.name + ": " + mirror::redact_url(img.url)
                        + " declares no length; set the image's size in the config");
  if (img.size == 0 && img.max_size > 0 && total > img.max_size)
    return make_error(ec::length_mismatch,
                      "image " + img.name + ": " + mirror::redact_url(img.url) + " declares "
                        + std::to_string(total) + " bytes, more than its max-size ("
                        + std::to_string(img.max_size) + "); nothing was stored");
  if (offset >= total && *n0 > 0)
    return make_error(ec::length_mismatch, "image " + img.name + ": more than "
                                             + std::to_string(total) + " bytes");
  if (offset == 0) {
    auto checked = check_header(img.name, img.format,
                                std::string_view{first.get(), std::min(*n0, header_window)},
                                total);
    if (!checked)
      return checked.error();
    header = *checked;
  }
  if (!*data || (*data)->length != total) {
    // A fresh volume: the old one (another length) cannot be resumed.
    if (offset > 0)
      return make_error(ec::source_failed, "image " + img.name + ": the volume holds "
                                             + std::to_string((*data)->length)
                                             + " bytes, the source declares "
                                             + std::to_string(total));
    if (auto err = lv::delete_volume(c, pool, names.data))
      return err;
    auto vol = lv::create_volume(c, pool, names.data, total, "raw");
    if (!vol)
      return vol.error();
  }
  progress.total = total;
  progress.resumed_from = offset;
  progress.bytes = offset;
  progress.transferring = true;

  size_t first_pos = 0;
  size_t first_len = *n0;
  auto source = [&](char* buf, size_t cap) -> caf::expected<size_t> {
    if (first_pos < first_len) {
      auto n = std::min(cap, first_len - first_pos);
      std::memcpy(buf, first.get() + first_pos, n);
      first_pos += n;
      progress.bytes += n;
      progress.moved += n;
      return n;
    }
    auto n = (*dl)->read(buf, cap);
    if (n) {
      progress.bytes += *n;
      progress.moved += *n;
    }
    return n;
  };
  if (auto err = lv::upload_volume(c, pool, names.data, offset, total - offset, source))
    return err;
  progress.transferring = false;
  // upload_volume stops at the length: one more read lets the download check
  // that the source ends here and that the digest over everything matches.
  char probe[1];
  auto end = source(probe, sizeof probe);
  if (!end)
    return end.error();
  if (*end != 0)
    return make_error(ec::length_mismatch, "image " + img.name + ": "
                                             + mirror::redact_url(img.url)
                                             + " sends more than " + std::to_string(total)
                                             + " bytes");
  if ((*dl)->digest() != img.sha256)
    return make_error(ec::digest_mismatch, "image " + img.name + ": sha256 "
                                             + (*dl)->digest() + ", expected " + img.sha256);

  // The bytes were right; is the volume still there? libvirtd keeps writing
  // into a file deleted under the upload and reports success (recorded in
  // volume_upload.cpp), so a marker now would vouch for nothing.
  auto facts = lv::volume_info(c, pool, names.data);
  if (!facts)
    return facts.error();
  if (!*facts || (*facts)->length != total)
    return make_error(ec::source_failed,
                      "image " + img.name + ": the volume " + names.data
                        + (*facts ? " changed size" : " vanished")
                        + " during the upload; starting over");

  // 4. Verified: the marker, then the partial mark goes.
  if (auto err = write_small(c, pool, names.marker,
                             marker_text(img, total, header->virtual_size)))
    return err;
  if (auto err = lv::delete_volume(c, pool, names.partial))
    return err;
  fill_result r;
  r.volume = names.data;
  r.path = (*facts)->path;
  r.length = total;
  r.virtual_size = header->virtual_size;
  r.transferred = true;
  r.resumed_from = offset;
  return r;
}

} // namespace

std::string marker_text(const image_source& img, uint64_t length, uint64_t virtual_size) {
  auto text = "egress image marker 1\nimage " + img.name + "\nsha256 " + img.sha256
              + "\nlength " + std::to_string(length) + "\nformat " + img.format + "\n";
  // Only qcow2 has a virtual size of its own; the other formats' markers
  // stay as they were, so pools filled before it was recorded stay ready.
  if (img.format == "qcow2")
    text += "virtual-size " + std::to_string(virtual_size) + "\n";
  return text;
}

caf::expected<fill_result> fill(const fill_request& req, fill_progress& progress) {
  auto names = volume_names::of(req.entry, req.image.name, req.image.sha256);
  auto what = "image " + req.image.name + " in " + req.pool;
  attempt at;
  caf::error failure;
  {
    auto link = dedicated_link::open(req.transfer, req.keepalive);
    if (!link)
      return with_context(link.error(), what + ": open the upload connection");
    auto r = transfer(req, names, (*link)->conn(), progress, at);
    progress.transferring = false;
    if (r)
      return r;
    failure = std::move(r.error());
    // docs/spec.md 7: the upload connection is closed before anything is
    // deleted, so that no stream of it can still write into the volume.
    (*link)->close();
  }
  // A transient failure (the link died, the mirror stalled) keeps the data
  // and its partial mark: the next fill resumes at what the volume holds. A
  // digest or length mismatch after a resume may come from the prefix: it
  // is transient too, but the data goes (the next fill starts over).
  bool resumed = progress.resumed_from.load() > 0;
  bool bad_bytes = is(failure, ec::digest_mismatch) || is(failure, ec::length_mismatch);
  bool keep = kind_of(failure) == error_kind::transient;
  // A full disk: retried soon (transient), but the data goes now, giving
  // the space back to the host's other tenants (its VMs' disks among them)
  // rather than holding the last free bytes for a resume.
  if (is(failure, ec::storage_full)) {
    failure = make_error(ec::storage_full,
                         detail(failure) + " (the partial volume is deleted, giving the space back)");
    keep = false;
  }
  if (bad_bytes && resumed) {
    failure = make_error(ec::source_failed,
                         detail(failure) + " (after resuming at byte "
                           + std::to_string(progress.resumed_from.load())
                           + "; the volume is discarded and the next attempt starts over)");
    keep = false;
  }
  if (!at.data_touched || keep)
    return with_context(failure, what);
  auto cleanup = dedicated_link::open(req.cleanup, req.keepalive);
  std::string note;
  if (!cleanup) {
    note = " (the partial volume stays until the next attempt: "
           + render(cleanup.error()) + ")";
  } else {
    auto& c = (*cleanup)->conn();
    auto e1 = lv::delete_volume(c, req.pool, names.data);
    auto e2 = e1 ? e1 : lv::delete_volume(c, req.pool, names.partial);
    if (e2)
      note = " (the partial volume stays until the next attempt: " + render(e2) + ")";
  }
  if (!note.empty() && failure.category() == caf::atom("egress"))
    failure = make_error(static_cast<ec>(failure.code()), detail(failure) + note);
  return with_context(failure, what);
}

} // namespace egress::images
