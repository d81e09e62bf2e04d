#include "providers/images/image_header.hpp"

#include <array>
#include <cstdio>
#include <optional>

#include "messages/error.hpp"
#include "messages/names.hpp"

namespace egress::images {

namespace {

// The qcow2 header (QEMU's format specification, interop/qcow2.txt in its
// documentation), big-endian fields.
constexpr uint32_t qcow_magic = 0x514649fb; // "QFI\xfb": qcow (v1) and qcow2
constexpr size_t v2_header_length = 72;
constexpr size_t v3_header_length = 104;
constexpr uint64_t incompat_corrupt = uint64_t{1} << 1;
constexpr uint64_t incompat_data_file = uint64_t{1} << 2;
constexpr uint64_t incompat_known = (uint64_t{1} << 5) - 1; // dirty .. extended L2
constexpr uint32_t ext_end = 0;
constexpr uint32_t ext_data_file = 0x44415441; // "DATA": external data file name
// Far beyond any proxy's disk; a larger header is hostile or broken, and its
// virtual size becomes the capacity of every overlay made on it.
constexpr uint64_t max_virtual_size = uint64_t{1} << 50; // 1 PiB

uint64_t be(std::string_view b, size_t at, size_t width) {
  uint64_t v = 0;
  for (size_t i = 0; i < width; ++i)
    v = (v << 8) | static_cast<unsigned char>(b[at + i]);
  return v;
}

bool starts_with_at(std::string_view b, size_t at, std::string_view magic) {
  return b.size() >= at + magic.size() && b.substr(at, magic.size()) == magic;
}

// The formats whose header libvirt's pool refresh follows to other files
// (it parses a backing store for each): an image of any other declared
// format must not look like one of them. libvirt's probe matches qcow,
// qcow2 and QED by their first three bytes ("QFI", "QED") whatever follows,
// so the check does too.
std::optional<std::string> foreign_header(std::string_view b) {
  if (starts_with_at(b, 0, "QFI"))
    return b.size() >= 8 ? "a qcow" + std::string{be(b, 4, 4) >= 2 ? "2" : ""}
                             + " header (version " + std::to_string(be(b, 4, 4)) + ")"
                         : std::string{"a qcow header"};
  if (starts_with_at(b, 0, "QED"))
    return std::string{"a QED header"};
  if (starts_with_at(b, 0, "KDMV") || starts_with_at(b, 0, "# Disk DescriptorFile"))
    return std::string{"a VMDK header"};
  if (starts_with_at(b, 0, "OOOM"))
    return std::string{"a UML COW header"};
  return std::nullopt;
}

// An ELF executable (e_type ET_EXEC: what vmlinux is; a program or a
// library is ET_DYN), or a bzImage.
bool is_kernel(std::string_view b) {
  if (starts_with_at(b, 0, "\x7f" "ELF") && b.size() >= 18) {
    bool little = b[5] == 1;
    auto lo = static_cast<unsigned char>(b[little ? 16 : 17]);
    auto hi = static_cast<unsigned char>(b[little ? 17 : 16]);
    return (hi << 8 | lo) == 2;
  }
  return starts_with_at(b, 0x202, "HdrS");
}

bool is_initrd(std::string_view b) {
  constexpr std::array<std::string_view, 10> magics{
    "070701", "070702", "070707",                  // cpio (newc, crc, odc)
    "\x1f\x8b",                                    // gzip
    std::string_view{"\xfd" "7zXZ\0", 6},          // xz
    "\x28\xb5\x2f\xfd",                            // zstd
    "BZh",                                         // bzip2
    "\x02\x21\x4c\x18",                            // lz4 (legacy, the kernel's)
    std::string_view{"\x5d\0\0", 3},               // lzma
    "\x89LZO",                                     // lzo
  };
  for (auto m : magics)
    if (starts_with_at(b, 0, m))
      return true;
  return false;
}

std::string hex_of(uint64_t v) {
  char buf[19];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

class refusal {
public:
  refusal(const std::string& name, const std::string& format)
    : prefix_("image " + name + " (declared " + format + "): ") {}
  caf::error operator()(const std::string& why) const {
    return make_error(ec::image_rejected, prefix_ + why);
  }

private:
  std::string prefix_;
};

caf::expected<header_facts> check_qcow2(std::string_view b, uint64_t length,
                                        const refusal& refuse) {
  if (b.size() < 4 || be(b, 0, 4) != qcow_magic)
    return refuse("does not start with the qcow2 magic \"QFI\\xfb\"");
  if (b.size() < v2_header_length)
    return refuse("shorter than a qcow2 header");
  auto version = be(b, 4, 4);
  if (version != 2 && version != 3)
    return refuse("qcow2 version " + std::to_string(version) + " (2 or 3 expected)");
  auto backing_offset = be(b, 8, 8);
  auto backing_size = be(b, 16, 4);
  if (backing_offset != 0 || backing_size != 0) {
    // Appended, not " " + quote(...): GCC 12 at -O3 warns falsely
    // (-Wrestrict) on that concatenation.
    std::string why = "its qcow2 header names a backing file";
    if (backing_offset < b.size() && backing_size > 0)
      why.append(" ").append(quote(b.substr(backing_offset, backing_size)));
    return refuse(why + ": a cached image must stand alone");
  }
  auto cluster_bits = be(b, 20, 4);
  if (cluster_bits < 9 || cluster_bits > 21)
    return refuse("qcow2 cluster bits " + std::to_string(cluster_bits)
                  + " (9 to 21 expected)");
  auto virtual_size = be(b, 24, 8);
  if (virtual_size == 0 || virtual_size > max_virtual_size)
    return refuse("its qcow2 header declares a virtual size of " + std::to_string(virtual_size)
                  + " bytes (1 to " + std::to_string(max_virtual_size) + " expected)");
  if (auto crypt = be(b, 32, 4); crypt != 0)
    return refuse("it is encrypted (qcow2 crypt method " + std::to_string(crypt)
                  + "): the engine has no key to give QEMU");
  size_t header_length = v2_header_length;
  if (version == 3) {
    if (b.size() < v3_header_length)
      return refuse("shorter than a qcow2 version 3 header");
    auto incompat = be(b, 72, 8);
    if (incompat & incompat_corrupt)
      return refuse("its qcow2 header is marked corrupt");
    if (incompat & incompat_data_file)
      return refuse("its qcow2 header uses an external data file: a cached image must "
                    "stand alone");
    if (incompat & ~incompat_known)
      return refuse("its qcow2 header has incompatible features this engine does not "
                    "know (bits " + hex_of(incompat & ~incompat_known) + ")");
    header_length = be(b, 100, 4);
    if (header_length < v3_header_length || header_length % 8 != 0)
      return refuse("qcow2 header length " + std::to_string(header_length));
  }
  // Header extensions follow the header, each (type, length, data padded to
  // 8 bytes), up to an end mark, all inside the first cluster. QEMU pads;
  // libvirt steps over the data unpadded: both walks must find no data file.
  uint64_t cluster = uint64_t{1} << cluster_bits;
  for (uint64_t pad : {uint64_t{8}, uint64_t{1}}) {
    uint64_t at = header_length;
    for (;;) {
      if (at + 8 > cluster)
        return refuse("its qcow2 header extensions run past the first cluster");
      if (at + 8 > b.size())
        return refuse("its qcow2 header extensions run past the first "
                      + std::to_string(b.size()) + " bytes");
      auto type = static_cast<uint32_t>(be(b, at, 4));
      auto len = be(b, at + 4, 4);
      if (type == ext_end)
        break;
      if (type == ext_data_file)
        return refuse("its qcow2 header names an external data file: a cached image must "
                      "stand alone");
      at += 8 + (len + pad - 1) / pad * pad;
    }
  }
  if (length < cluster)
    return refuse("shorter (" + std::to_string(length) + " bytes) than one of its "
                  "qcow2 clusters");
  return header_facts{virtual_size};
}

} // namespace

caf::expected<header_facts> check_header(const std::string& name, const std::string& format,
                                         std::string_view first, uint64_t length) {
  refusal refuse{name, format};
  if (format == "qcow2")
    return check_qcow2(first, length, refuse);
  if (format != "raw" && format != "kernel" && format != "initrd")
    return refuse("unknown format");
  if (auto foreign = foreign_header(first))
    return refuse("it starts with " + *foreign
                  + (format == "raw" ? ": declare its real format, or convert it to raw"
                                     : ", not as a " + format + " does"));
  if (format == "kernel" && !is_kernel(first))
    return refuse("neither an ELF executable nor a bzImage (no \"HdrS\" at byte 0x202)");
  if (format == "initrd" && !is_initrd(first))
    return refuse("neither a cpio archive nor a compressed stream (gzip, xz, zstd, "
                  "bzip2, lz4, lzma, lzo)");
  return header_facts{length};
}

} // namespace egress::images
