#include "providers/images/fill.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>

#include "messages/error.hpp"
#include "providers/images/dedicated_link.hpp"
#include "base/log.hpp"
#include "providers/images/image_header.hpp"
#include "providers/images/ranged_upload.hpp"
#include "providers/images/ranges.hpp"
#include "providers/images/stage.hpp"
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
  uint64_t holes = 0; // zeros the upload sent as holes
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

// One transfer's context: what it fills, through which connection, and
// where it reports. The steps below are its parts, in order.
struct transfer_job {
  const fill_request& req;
  const volume_names& names;
  lv::connection& c;
  fill_progress& progress;
  attempt& at;

  const image_source& img() const { return req.image; }
  const std::string& pool() const { return req.pool; }
};

using volume = std::optional<lv::volume_facts>;

// The three volumes of an image as the pool holds them now.
struct pool_view {
  volume marker, data, partial;
};

caf::expected<pool_view> look(transfer_job& job) {
  pool_view v;
  for (auto [name, slot] : {std::pair{&job.names.marker, &v.marker},
                            std::pair{&job.names.data, &v.data},
                            std::pair{&job.names.partial, &v.partial}}) {
    auto facts = lv::volume_info(job.c, job.pool(), *name);
    if (!facts)
      return facts.error();
    *slot = std::move(*facts);
  }
  return v;
}

// 1. Ready: the marker vouches for the data as it is (lengths are the
// volumes' byte lengths, never their capacities: volumes.hpp). The result
// when it does; nullopt when the image must be written.
std::optional<caf::expected<fill_result>> ready_as_is(transfer_job& job, const pool_view& v) {
  if (!v.marker || !v.data || v.partial)
    return std::nullopt;
  auto& img = job.img();
  auto text = read_small(job.c, job.pool(), job.names.marker, v.marker->length);
  if (!text)
    return text.error();
  auto virtual_size = vouched_virtual_size(*text, img, v.data->length);
  if (!virtual_size || (img.size != 0 && img.size != v.data->length))
    return std::nullopt;
  // A pool filled before the format check existed (or by an older check)
  // may hold an image the check refuses: it goes, marker first.
  std::string head;
  auto n = std::min<uint64_t>(header_window, v.data->length);
  if (n > 0)
    if (auto err = lv::download_volume(job.c, job.pool(), job.names.data, 0, n,
                                       [&](const char* p, size_t k) {
                                         head.append(p, k);
                                         return caf::error{};
                                       }))
      return err;
  if (auto checked = check_header(img.name, img.format, head, v.data->length); !checked) {
    if (auto err = lv::delete_volume(job.c, job.pool(), job.names.marker))
      return err;
    job.at.data_touched = true;
    return checked.error();
  }
  fill_result r;
  r.volume = job.names.data;
  r.path = v.data->path;
  r.length = v.data->length;
  r.virtual_size = *virtual_size;
  job.progress.total = r.length;
  job.progress.bytes = r.length;
  return r;
}

// Where the upload resumes, with the digest and the header of the prefix
// the volume already holds (offset 0: nothing to resume).
struct resume_point {
  uint64_t offset = 0;
  std::optional<mirror::sha256> seed;
  std::string head; // the prefix's first header_window bytes, checked in check_source
  std::optional<header_facts> header;
  // From this byte on the data volume reads as zeros, so the upload may
  // send the image's zeros as holes (volumes.hpp); none at or past the
  // image's end.
  uint64_t zeros_from = std::numeric_limits<uint64_t>::max();
};

// How far the daemon got writing a data volume from byte 0. A fresh upload
// sends its zeros as holes, and once it sent one the file is as long as
// the daemon got (volumes.hpp): shorter than the image, it is its length.
// Otherwise the file has the image's length, and a sparse raw volume's
// allocation is about where the daemon got (less by the zeros before it
// that went as holes; the MiB below and the digest cover the file
// system's own blocks). An image whose size the config does not give:
// its allocation, which may be far below (the rest is sent again).
uint64_t reached(const lv::volume_facts& data, uint64_t image_size) {
  if (image_size != 0 && data.length < image_size)
    return data.length;
  return data.allocation;
}

// 2. Not ready. The marker goes first: from here on the data changes. The
// upload resumes where the volume got to, if it was being written before
// (the partial mark is there) and holds anything.
caf::expected<resume_point> begin_writing(transfer_job& job, const pool_view& v) {
  auto& img = job.img();
  if (v.marker)
    if (auto err = lv::delete_volume(job.c, job.pool(), job.names.marker))
      return err;
  job.at.data_touched = true;
  if (!v.partial)
    if (auto err = write_small(job.c, job.pool(), job.names.partial,
                               "partial; being written: " + marker_text(img, img.size, 0)))
      return err;
  resume_point at;
  if (!v.data || !v.partial || v.data->length == 0
      || (img.size != 0 && v.data->length > img.size))
    return at;
  // Below the length: a ranged request must ask for at least one byte.
  auto held = std::min(reached(v.data.value(), img.size), v.data->length - 1);
  at.offset = held / resume_granularity * resume_granularity;
  if (at.offset == 0)
    return at;
  at.seed.emplace();
  auto err = lv::download_volume(job.c, job.pool(), job.names.data, 0, at.offset,
                                 [&](const char* p, size_t n) {
                                   at.seed->update(p, n);
                                   if (at.head.size() < header_window)
                                     at.head.append(
                                       p, std::min(n, header_window - at.head.size()));
                                   return caf::error{};
                                 });
  if (err) // an unreadable prefix: start over rather than trust it
    return with_context(err, "read back the first " + std::to_string(at.offset)
                               + " bytes to resume");
  return at;
}

// The source as the fill reads it, from byte 0.
caf::expected<std::unique_ptr<mirror::download>> open_source(transfer_job& job,
                                                             resume_point& at) {
  auto fo = source_options(job.req, job.progress.cancel);
  fo.offset = at.offset;
  return mirror::download::open(fo, std::move(at.seed));
}

// The source's first bytes, read before anything is written.
struct first_bytes {
  std::unique_ptr<char[]> buf{new char[lv::default_upload_chunk]};
  size_t length = 0;
  uint64_t total = 0; // what the source declares
};

// A data volume of `total` bytes for an upload from byte 0: one of that
// length is kept and written over in place (a stopped proxy's overlay may
// still name the file), any other is made anew. True if made anew: it
// reads as zeros.
caf::expected<bool> whole_data_volume(transfer_job& job, const pool_view& v, uint64_t total) {
  if (v.data && v.data->length == total)
    return false;
  if (v.data)
    if (auto err = lv::delete_volume(job.c, job.pool(), job.names.data))
      return err;
  auto vol = lv::create_volume(job.c, job.pool(), job.names.data, total, "raw");
  if (!vol)
    return vol.error();
  return true;
}

// The data volume the upload goes into, and from where it reads as zeros.
// Resumed: the volume is the image's length, or shorter where a sparse
// upload was cut (begin_writing), and past its end it reads as zeros. From
// byte 0: whole_data_volume; under a hole the old bytes of a volume kept
// would stay, so only a new one takes holes.
caf::error data_volume(transfer_job& job, const pool_view& v, uint64_t total,
                       resume_point& at) {
  auto& img = job.img();
  if (at.offset > 0) {
    if (v.data->length > total || at.offset > v.data->length)
      return make_error(ec::source_failed, "image " + img.name + ": the volume holds "
                                             + std::to_string(v.data->length)
                                             + " bytes, the source declares "
                                             + std::to_string(total));
    at.zeros_from = v.data->length;
    return {};
  }
  auto made = whole_data_volume(job, v, total);
  if (!made)
    return made.error();
  if (*made)
    at.zeros_from = 0;
  return {};
}

// The first bytes tell the total when the config does not, and, from byte
// 0, the format; a resumed upload's prefix is checked the same way, against
// the image's length (not the volume's, which a cut sparse upload leaves
// short). Both before anything is written: a header that names a file of
// the host must never reach the pool, where libvirt reads it on every
// refresh. Then the data volume (data_volume).
caf::expected<first_bytes> check_source(transfer_job& job, mirror::download& dl,
                                        const pool_view& v, resume_point& at) {
  auto& img = job.img();
  first_bytes first;
  // A whole packet (at least the header window, unless the image is
  // smaller): the format check sees the same bytes whatever pieces the
  // mirror delivers them in.
  auto n0 = dl.read_full(first.buf.get(), lv::default_upload_chunk);
  if (!n0)
    return n0.error();
  first.length = *n0;
  first.total = dl.total().value_or(0);
  auto total = first.total;
  if (total == 0)
    return make_error(ec::invalid_argument,
                      "image " + img.name + ": " + mirror::redact_url(img.url)
                        + " declares no length; set the image's size in the config");
  if (img.size == 0 && img.max_size > 0 && total > img.max_size)
    return make_error(ec::length_mismatch,
                      "image " + img.name + ": " + mirror::redact_url(img.url) + " declares "
                        + std::to_string(total) + " bytes, more than its max-size ("
                        + std::to_string(img.max_size) + "); nothing was stored");
  if (at.offset >= total && first.length > 0)
    return make_error(ec::length_mismatch, "image " + img.name + ": more than "
                                             + std::to_string(total) + " bytes");
  auto head = at.offset == 0
                ? std::string_view{first.buf.get(), std::min(first.length, header_window)}
                : std::string_view{at.head};
  auto checked = check_header(img.name, img.format, head, total);
  if (!checked)
    return checked.error();
  at.header = *checked;
  if (auto err = data_volume(job, v, total, at))
    return err;
  return first;
}

// Where the volume reads as zeros (data_volume), the image's zeros go as
// holes; before that, every byte.
caf::error upload(transfer_job& job, const resume_point& at, uint64_t total,
                  const lv::upload_source& source) {
  auto length = total - at.offset;
  if (at.zeros_from >= total)
    return lv::upload_volume(job.c, job.pool(), job.names.data, at.offset, length, source);
  lv::upload_tally tally;
  auto err = lv::upload_volume_sparse(job.c, job.pool(), job.names.data, at.offset, length,
                                      at.zeros_from, source, &tally);
  job.at.holes = tally.holes;
  return err;
}

// 3. The stream: the first bytes, then the rest of the source, into the
// volume from the resume offset; then one more read, which lets the
// download check that the source ends here and that the digest over
// everything matches (upload_volume stops at the length).
caf::error stream(transfer_job& job, mirror::download& dl, first_bytes& first,
                  const resume_point& at) {
  auto& img = job.img();
  auto& progress = job.progress;
  auto total = first.total;
  progress.total = total;
  progress.resumed_from = at.offset;
  progress.bytes = at.offset;
  progress.transferring = true;
  size_t first_pos = 0;
  auto source = [&](char* buf, size_t cap) -> caf::expected<size_t> {
    if (first_pos < first.length) {
      auto n = std::min(cap, first.length - first_pos);
      std::memcpy(buf, first.buf.get() + first_pos, n);
      first_pos += n;
      progress.bytes += n;
      progress.moved += n;
      return n;
    }
    auto n = dl.read(buf, cap);
    if (n) {
      progress.bytes += *n;
      progress.moved += *n;
    }
    return n;
  };
  if (auto err = upload(job, at, total, source))
    return err;
  progress.transferring = false;
  char probe[1];
  auto end = source(probe, sizeof probe);
  if (!end)
    return end.error();
  if (*end != 0)
    return make_error(ec::length_mismatch, "image " + img.name + ": "
                                             + mirror::redact_url(img.url)
                                             + " sends more than " + std::to_string(total)
                                             + " bytes");
  if (dl.digest() != img.sha256)
    return make_error(ec::digest_mismatch, "image " + img.name + ": sha256 " + dl.digest()
                                             + ", expected " + img.sha256);
  return {};
}

// 4. Verified: the bytes were right; is the volume still there? libvirtd
// keeps writing into a file deleted under the upload and reports success
// (recorded in volume_upload.cpp), so a marker now would vouch for nothing.
// Then the marker, then the partial mark goes.
caf::expected<fill_result> mark_verified(transfer_job& job, uint64_t total,
                                         const resume_point& at) {
  auto& img = job.img();
  auto facts = lv::volume_info(job.c, job.pool(), job.names.data);
  if (!facts)
    return facts.error();
  if (!*facts || (*facts)->length != total)
    return make_error(ec::source_failed,
                      "image " + img.name + ": the volume " + job.names.data
                        + (*facts ? " changed size" : " vanished")
                        + " during the upload; starting over");
  if (auto err = write_small(job.c, job.pool(), job.names.marker,
                             marker_text(img, total, at.header->virtual_size)))
    return err;
  if (auto err = lv::delete_volume(job.c, job.pool(), job.names.partial))
    return err;
  fill_result r;
  r.volume = job.names.data;
  r.path = (*facts)->path;
  r.length = total;
  r.virtual_size = at.header->virtual_size;
  r.transferred = true;
  r.resumed_from = at.offset;
  r.holes = job.at.holes;
  return r;
}

// The image's length before anything is written: configured, or as the
// source declares it (a look at its first bytes, checked as check_source
// does).
caf::expected<uint64_t> declared_total(transfer_job& job) {
  auto& img = job.img();
  if (img.size > 0)
    return img.size;
  resume_point none;
  auto dl = open_source(job, none);
  if (!dl)
    return dl.error();
  char head[4096];
  if (auto n = (*dl)->read(head, sizeof head); !n)
    return n.error();
  auto total = (*dl)->total().value_or(0);
  if (total == 0)
    return make_error(ec::invalid_argument,
                      "image " + img.name + ": " + mirror::redact_url(img.url)
                        + " declares no length; set the image's size in the config");
  if (img.max_size > 0 && total > img.max_size)
    return make_error(ec::length_mismatch,
                      "image " + img.name + ": " + mirror::redact_url(img.url) + " declares "
                        + std::to_string(total) + " bytes, more than its max-size ("
                        + std::to_string(img.max_size) + "); nothing was stored");
  return total;
}

// The plan a partial mark records, if the data volume is the one it was
// written for: then each range resumes where it got to.
caf::expected<std::optional<range_plan>> resumable_plan(transfer_job& job, const pool_view& v,
                                                        uint64_t total) {
  if (!v.partial || !v.data || v.data->length != total)
    return std::optional<range_plan>{};
  auto text = read_small(job.c, job.pool(), job.names.partial, v.partial->length);
  if (!text)
    return text.error();
  return recorded_plan(*text, total);
}

// The data volume made ready for a fresh plan: the partial mark records
// the plan before any byte of it is written; a volume of another length
// is made anew.
caf::error prepare_fresh(transfer_job& job, const pool_view& v, uint64_t total,
                         const range_plan& plan) {
  auto& img = job.img();
  if (auto err = write_small(job.c, job.pool(), job.names.partial,
                             "partial; being written: " + marker_text(img, total, 0)
                               + plan_line(plan)))
    return err;
  auto made = whole_data_volume(job, v, total);
  return made ? caf::error{} : made.error();
}

// 2-4 in ranges over several sessions at once (ranged_upload.hpp): nullopt
// when the image goes over one stream instead (one session, a small image,
// no room for the spool), before anything was changed.
std::optional<caf::expected<fill_result>> transfer_in_ranges(transfer_job& job,
                                                             const pool_view& v) {
  auto& req = job.req;
  auto& img = job.img();
  auto sessions = static_cast<uint32_t>(1 + req.more_transfers.size());
  if (sessions < 2 || (img.size > 0 && img.size < 2 * req.min_range))
    return std::nullopt;
  auto total = declared_total(job);
  if (!total)
    return total.error();
  auto plan = plan_ranges(*total, sessions, req.min_range);
  if (plan.size() < 2)
    return std::nullopt;
  auto through = spool::open(*total);
  if (!through) {
    log::info("images", "image " + img.name + ": one upload stream (" + render(through.error())
                          + ")");
    return std::nullopt;
  }
  auto recorded = resumable_plan(job, v, *total);
  if (!recorded)
    return recorded.error();
  if (v.marker)
    if (auto err = lv::delete_volume(job.c, job.pool(), job.names.marker))
      return err;
  job.at.data_touched = true;
  if (*recorded)
    plan = **recorded;
  else if (auto err = prepare_fresh(job, v, *total, plan))
    return err;
  ranged_upload up;
  up.pool = job.pool();
  up.volume = job.names.data;
  up.total = *total;
  up.plan = plan;
  up.resume = recorded->has_value();
  up.source = source_options(job.req, job.progress.cancel);
  up.more_sessions = req.more_transfers;
  up.keepalive = req.keepalive;
  up.head_length = static_cast<size_t>(std::min<uint64_t>(header_window, *total));
  resume_point at;
  up.check_head = [&](std::string_view head) -> caf::error {
    auto checked = check_header(img.name, img.format, head, *total);
    if (!checked)
      return checked.error();
    at.header = *checked;
    return {};
  };
  job.progress.total = *total;
  job.progress.bytes = 0;
  job.progress.transferring = true;
  auto out = upload_ranges(job.c, up, *through, job.progress);
  job.progress.transferring = false;
  if (!out)
    return out.error();
  at.offset = out->held;
  job.progress.resumed_from = out->held;
  if (out->digest != img.sha256)
    return make_error(ec::digest_mismatch, "image " + img.name + ": sha256 " + out->digest
                                             + ", expected " + img.sha256);
  return mark_verified(job, *total, at);
}

caf::expected<fill_result> transfer_from_source(transfer_job& job, const pool_view& v);

// 2-4 from the node's verified copy (stage.hpp) as a file:// source: asked
// for only now that the pool lacks the image. Bytes that do not match after
// all (the copy changed on the node's disk) discard the copy.
caf::expected<fill_result> transfer_from_stage(transfer_job& job, const pool_view& v) {
  auto& req = job.req;
  job.progress.staging = true;
  auto copy = req.stage->copy_of(req, job.progress);
  job.progress.staging = false;
  if (!copy)
    return copy.error();
  fill_request local = req;
  local.image.url = "file://" + *copy;
  local.stage = nullptr;
  transfer_job staged{local, job.names, job.c, job.progress, job.at};
  auto r = transfer_from_source(staged, v);
  if (!r && (is(r.error(), ec::digest_mismatch) || is(r.error(), ec::length_mismatch)))
    req.stage->discard_if_bad(req.image);
  // The copy removed under this fill (an operator, a reload, another fill
  // that found it bad): fetched again on the next attempt, soon.
  if (!r && is(r.error(), ec::source_not_found))
    return make_error(ec::source_failed, detail(r.error()) + " (the node's copy went away)");
  return r;
}

caf::expected<fill_result> transfer(const fill_request& req, const volume_names& names,
                                    lv::connection& c, fill_progress& progress,
                                    attempt& attempted) {
  transfer_job job{req, names, c, progress, attempted};
  auto v = look(job);
  if (!v)
    return v.error();
  if (auto ready = ready_as_is(job, *v))
    return std::move(*ready);
  if (req.stage)
    return transfer_from_stage(job, *v);
  return transfer_from_source(job, *v);
}

// 2-4 from the image's source: in ranges over several sessions, or one
// stream.
caf::expected<fill_result> transfer_from_source(transfer_job& job, const pool_view& v) {
  if (auto ranged = transfer_in_ranges(job, v))
    return std::move(*ranged);
  auto at = begin_writing(job, v);
  if (!at)
    return at.error();
  auto dl = open_source(job, *at);
  if (!dl)
    return dl.error();
  auto first = check_source(job, **dl, v, *at);
  if (!first)
    return first.error();
  if (auto err = stream(job, **dl, *first, *at))
    return err;
  return mark_verified(job, first->total, *at);
}

} // namespace

mirror::fetch_options source_options(const fill_request& req,
                                     std::shared_ptr<const std::atomic<bool>> cancel) {
  mirror::fetch_options fo;
  fo.url = req.image.url;
  if (req.image.size > 0)
    fo.expected_length = req.image.size;
  fo.expected_sha256 = req.image.sha256;
  fo.deadline = req.download_deadline;
  fo.low_speed_limit = req.low_speed_limit;
  fo.low_speed_time = req.low_speed_time;
  fo.ca_file = req.ca_file;
  fo.cancel = std::move(cancel);
  return fo;
}

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
