#pragma once
// Real disk images for tests and benchmarks: every image a test declares as
// qcow2 is made here by qemu-img (qemu-utils), never written by hand, so it
// has the header, the metadata clusters and the length a real one has; a
// raw disk with a file system on it is made by mke2fs.
//
//   auto raw = test::pattern(12 * mib, 7) + std::string(4 * mib, '\0');
//   auto q = test::make_qcow2(raw);                    // virtual 16 MiB
//   q.bytes.size() != q.virtual_size;                  // clusters + metadata
//   auto c = test::make_qcow2(raw, {.compressed = true});
//   auto b = test::make_qcow2(raw, {.backing_file = "/etc/shadow"});
//   auto fs = test::make_ext4(32 * mib, {{"a", pattern(4 * mib, 1)}});

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace egress::test {

struct qcow2_options {
  /// qemu-img convert -c: compressed clusters (for data that compresses).
  bool compressed = false;
  /// compat=0.10: a version 2 header (no feature bits, no header length).
  bool version2 = false;
  /// A header that names this backing file (qemu-img create -b ... -u: the
  /// file need not exist). The image then holds no data of its own.
  std::string backing_file = {};
  /// A header with an external data file of this name (-o data_file=...).
  std::string data_file = {};
  /// Encrypted with LUKS under a throwaway secret (crypt method 2).
  bool encrypted = false;
};

struct qcow2_image {
  std::string bytes;         // the file qemu-img wrote
  uint64_t virtual_size = 0; // what qemu-img info says the guest sees
};

/// A qcow2 holding `raw` as its disk (virtual size: raw.size(), rounded up
/// to 512 bytes by qemu-img); with a backing or data file, or encrypted,
/// an image of that virtual size with those header fields. Throws
/// std::runtime_error with qemu-img's output on failure.
qcow2_image make_qcow2(const std::string& raw, const qcow2_options& opts = {});

/// A raw disk image of `size` bytes that holds a real ext4 file system
/// (mke2fs -d, e2fsprogs) with `files` (name, content) in its root: data
/// where the file system put it, zeros in its free blocks and most of its
/// inode table, as in a raw image a provider ships. Throws
/// std::runtime_error with mke2fs's output on failure.
std::string make_ext4(uint64_t size,
                      const std::vector<std::pair<std::string, std::string>>& files);

/// The same into the file `out` (sparse, as mke2fs leaves it), holding
/// `data_mib` MiB of pseudo-random files (16 MiB each): a provider's raw
/// image too large to hold in memory, for the benchmarks.
void make_ext4_file(const std::string& out, uint64_t size, uint64_t data_mib);

/// `qemu-img info -U --output=json`'s "virtual-size" of `path` (also while a
/// QEMU has it open).
uint64_t qcow2_virtual_size(const std::string& path);

} // namespace egress::test
