#pragma once
// What an image's first bytes say, checked against the format it is declared
// with before the image cache uploads anything past them (docs/spec.md 23).
//
// An image comes from a mirror the engine does not control and ends up in a
// host's pool, where libvirt reads its header on every pool refresh and QEMU
// opens it as a backing file. A qcow2 header can name other files on the
// host (a backing file, an external data file); libvirt's pool refresh then
// opens them as root, and a base image that pulls in a file of the host's
// would leak it into every guest built on it. A raw image whose bytes start
// like one of those formats is the same attack by format confusion. So:
//
//   qcow2   the qcow2 magic, version 2 or 3, no backing file, no external
//           data file (feature bit or header extension), not encrypted, no
//           incompatible feature this check does not know, a sane cluster
//           size and a virtual size above zero;
//   raw     none of the formats whose header libvirt follows to other files
//           (qcow and qcow2, QED, VMDK, UML COW);
//   kernel  an ELF file or a bzImage ("HdrS" at 0x202), and no such header;
//   initrd  a cpio archive or a compressed stream (gzip, xz, zstd, bzip2,
//           lz4, lzma, lzo), and no such header.
//
// Pure and synchronous: no I/O, unit-tested on images made by qemu-img.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <caf/expected.hpp>

namespace egress::images {

/// How many of an image's first bytes the check needs (fewer for an image
/// that is shorter). Covers a qcow2 header with its extensions for any
/// cluster size qemu-img writes by default (64 KiB).
inline constexpr size_t header_window = size_t{64} << 10;

struct header_facts {
  /// The disk size a guest sees: a qcow2 header's virtual size; for every
  /// other format the image's length.
  uint64_t virtual_size = 0;
};

/// Checks the first bytes of image `name` (`first`: min(header_window,
/// length) bytes, `length`: the whole image's) against `format` (qcow2,
/// raw, kernel or initrd). A refusal is permanent ec::image_rejected naming
/// the image, the format and what was found.
caf::expected<header_facts> check_header(const std::string& name, const std::string& format,
                                         std::string_view first, uint64_t length);

} // namespace egress::images
