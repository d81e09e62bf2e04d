#pragma once
// An image's upload over several SSH sessions at once, one range of the
// volume each (docs/notes/transport.md#several-upload-streams): libssh2 1.10
// encrypts on the thread that writes, so one session moves at most what one
// core encrypts; libvirt accepts several virStorageVolUpload streams into
// one file-backed volume at disjoint offsets.
//
// The sha256 must cover the bytes that reach the volume, in order, while the
// ranges arrive out of order: each range's bytes go through a spool (an
// unnamed temp file: O_TMPFILE, gone with the process) on their way to the
// volume, and the caller's thread hashes the spool from byte 0 behind the
// ranges. So the digest is over exactly what was uploaded (and, on a resume,
// read back), never over a second read of the source.
//
// Each session takes the next range from a queue, so a host that refuses a
// second session (or stream) gets all ranges over the first, one after the
// other. A range that fails ends its session; the others finish theirs, and
// the fill fails transient: the next one reads each range's written prefix
// back (up to the first hole) and resumes every range where it got to, so
// only the cut range moves again.

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "providers/images/fill.hpp"
#include "providers/images/ranges.hpp"
#include "providers/libvirt/connection.hpp"
#include "providers/mirror/download.hpp"
#include "providers/transport.hpp"

namespace egress::images {

/// An unnamed file of the engine's temp dir ($TMPDIR, else /var/tmp) that
/// holds one image on its way to a host. Refused (nullopt) where it cannot
/// be made or the file system lacks the room: the fill then streams over
/// one session, as before.
class spool {
public:
  static caf::expected<spool> open(uint64_t size);
  spool(spool&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  spool& operator=(spool&&) = delete;
  ~spool();
  caf::error write(uint64_t offset, const char* data, size_t n) const;
  caf::error read(uint64_t offset, char* data, size_t n) const;

private:
  explicit spool(int fd) : fd_(fd) {}
  int fd_ = -1;
};

struct ranged_upload {
  std::string pool;
  std::string volume; // the data volume, already `total` bytes long
  uint64_t total = 0;
  range_plan plan;
  /// Read each range's written prefix back first and upload only the rest.
  bool resume = false;
  /// The source: its url, deadline, limits, CA and cancel flag (the offset
  /// is set per range; nothing is verified per range).
  mirror::fetch_options source;
  /// The transports of the sessions beside the caller's own (one each),
  /// made by the caller, who keeps copies to kill them.
  std::vector<transport_ptr> more_sessions;
  lv::keepalive keepalive;
  /// The image's first bytes (64 KiB, or all of a smaller image), as the
  /// volume will hold them, before any byte is uploaded: an error stops
  /// everything.
  std::function<caf::error(std::string_view head)> check_head;
  size_t head_length = 0;
};

struct ranged_outcome {
  std::string digest; // sha256 (hex) over the whole volume as written
  uint64_t held = 0;  // bytes found written and read back (not uploaded)
};

/// Uploads every range not yet written, over `first` and one session per
/// transport in more_sessions, through `spool`; returns the digest over the
/// whole image. Blocks until every session ended (their connections are
/// closed then), also on failure: the first error of a range, or of the
/// head check.
caf::expected<ranged_outcome> upload_ranges(lv::connection& first, const ranged_upload& job,
                                            const spool& through, fill_progress& progress);

} // namespace egress::images
