#pragma once
// How an image is split for an upload over several SSH sessions at once
// (docs/notes/transport.md#several-upload-streams): a plan of contiguous
// byte ranges, recorded in the image's partial mark so that the next fill
// after an interruption resumes each range where it got to (a range is
// written from its start, so its written prefix, up to the first hole of
// the sparse volume, is how far it got).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace egress::images {

struct byte_range {
  uint64_t begin = 0;
  uint64_t end = 0; // exclusive
  uint64_t length() const { return end - begin; }
  friend bool operator==(const byte_range&, const byte_range&) = default;
};

using range_plan = std::vector<byte_range>;

/// `total` bytes in at most `streams` ranges of at least `min_range` bytes,
/// each starting on a MiB boundary (the resume granularity): one range when
/// the image is smaller than two of them.
range_plan plan_ranges(uint64_t total, uint32_t streams, uint64_t min_range);

/// The line the partial mark carries: "ranges B0 B1 ... TOTAL\n".
std::string plan_line(const range_plan& plan);

/// The plan a partial mark records for an image of `total` bytes, if it
/// records one that covers exactly [0, total) in increasing ranges.
std::optional<range_plan> recorded_plan(const std::string& partial_mark, uint64_t total);

} // namespace egress::images
