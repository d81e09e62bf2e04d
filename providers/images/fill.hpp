#pragma once
// Fills one cached image on one host: makes sure the pool holds the
// image's verified data volume, downloading and uploading it if it does not.
// Synchronous and blocking: runs in a detached actor under the image actor's
// transfer budget, over a dedicated connection (dedicated_link.hpp).
//
// The order of things is the whole point (docs/spec.md 7, 8 and 23):
//  1. data + marker matching the configured digest: ready, nothing moves.
//  2. otherwise the marker is deleted first (a marker always vouches for
//     the data as it is), the partial mark is written, and the data volume
//     is created or, after an interruption, resumed at the offset the
//     volume already holds (when the source honours ranges);
//  3. the first bytes (or the prefix read back) pass the format check
//     (image_header.hpp) before anything more is written; the bytes stream
//     mirror -> libvirt without touching local disk; the digest covers the
//     whole volume (a resumed prefix is read back);
//  4. verified: the marker is written, then the partial mark is deleted;
//  5. on failure: the dedicated connection is closed first, and only then
//     is the partial data deleted, over a fresh connection, unless the
//     failure was transient and the source can resume it.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <caf/expected.hpp>

#include "providers/libvirt/connection.hpp"
#include "providers/mirror/download.hpp"
#include "providers/transport.hpp"

namespace egress::images {

class image_stage; // stage.hpp

struct image_source {
  std::string name;      // the image's name in the config
  std::string url;       // http, https or file
  std::string sha256;    // lowercase hex, 64 digits
  uint64_t size = 0;     // bytes; 0 = as the server declares it
  std::string format;    // qcow2, raw, kernel, initrd: recorded in the marker
  /// With size 0: the most the server may declare (checked before a volume
  /// is made). 0: no bound (a caller that knows better, e.g. a benchmark).
  uint64_t max_size = 0;
};

struct fill_request {
  std::string entry;     // provider entry: part of every volume name
  std::string pool;      // the host's storage pool
  image_source image;
  std::chrono::milliseconds download_deadline{0};
  long low_speed_limit = 1024;
  std::chrono::seconds low_speed_time{30};
  std::string ca_file;
  lv::keepalive keepalive;
  /// The transports of the two dedicated connections a fill may open: one
  /// for the check and the transfer, one for the cleanup after a failure.
  /// Made by the caller, who keeps copies to kill them (lock-free, from any
  /// thread) when it abandons the fill.
  transport_ptr transfer;
  transport_ptr cleanup;
  /// One more upload session each (docs/notes/transport.md#several-upload-streams):
  /// with any, an image of at least two `min_range`s whose source honours
  /// ranges goes up in ranges at once, through a spool (ranged_upload.hpp).
  std::vector<transport_ptr> more_transfers;
  uint64_t min_range = uint64_t{64} << 20;
  /// The node's verified copies (engine.stage-dir; stage.hpp): a fill that
  /// must transfer uploads from the node's copy of the image, fetched once
  /// for every host, instead of downloading it itself. Null: from the
  /// image's url.
  std::shared_ptr<image_stage> stage;
};

/// Read by the image actor while the fill runs (any thread).
struct fill_progress {
  std::atomic<uint64_t> bytes{0};        // of the image, including a resumed prefix
  std::atomic<uint64_t> total{0};        // 0 until known
  std::atomic<uint64_t> resumed_from{0}; // offset the transfer resumed at
  std::atomic<bool> transferring{false};
  // Waiting for (or fetching) the node's copy (stage.hpp): the image
  // actor's transfer budget starts after it, so that every host's upload
  // gets the whole budget however long the one fetch took (it has its own
  // deadline).
  std::atomic<bool> staging{false};
  // Bytes this fill moved into the pool from its source, the mirror or the
  // node's copy (the fill streams, so each is read and uploaded once; a
  // resumed prefix is not). Zeros that went as holes count: the pool has
  // them too.
  std::atomic<uint64_t> moved{0};
  /// Set (any thread) to give the fill up: the download ends within about
  /// 100 ms even while the mirror is silent. Killing the transports frees
  /// what blocks in libvirt; this frees what blocks in libcurl.
  std::shared_ptr<std::atomic<bool>> cancel = std::make_shared<std::atomic<bool>>(false);
};

struct fill_result {
  std::string volume;     // the data volume's name
  std::string path;       // its path on the host
  uint64_t length = 0;        // bytes in the data volume
  uint64_t virtual_size = 0;  // the disk a guest sees: qcow2's from its header, else length
  bool transferred = false;   // false: found ready in the pool
  uint64_t resumed_from = 0;  // > 0: an interrupted upload was resumed
  uint64_t holes = 0;         // zeros of the image that went as holes, not as bytes
};

caf::expected<fill_result> fill(const fill_request& req, fill_progress& progress);

/// How the image of `req` is read from its source: its url, length and
/// digest to check, deadline, speed limits, CA and `cancel` (offset 0).
mirror::fetch_options source_options(const fill_request& req,
                                     std::shared_ptr<const std::atomic<bool>> cancel);

/// The marker volume's content for `img` (what fill writes and accepts):
/// format, byte length and, for qcow2, the virtual size.
std::string marker_text(const image_source& img, uint64_t length, uint64_t virtual_size);

} // namespace egress::images
