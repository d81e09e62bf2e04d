#define BOOST_TEST_MODULE image_header
// The format check of the image cache (providers/images/image_header.hpp) on
// images made by qemu-img and on the appliance's own kernel and initrd:
// what a pool may receive, and what it must never see (docs/spec.md 23).
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <string>

#include "messages/error.hpp"
#include "providers/images/image_header.hpp"
#include "testbed/disk_images.hpp"
#include "testbed/local_host.hpp"
#include "testbed/test_data.hpp"
#include "testbed/testbed.hpp"

using namespace egress;
using images::check_header;
using images::header_window;

namespace {

constexpr uint64_t mib = uint64_t{1} << 20;

// The window fill passes: the first bytes of the image.
caf::expected<images::header_facts> check(const std::string& format, const std::string& bytes) {
  return check_header("base", format, std::string_view{bytes}.substr(0, header_window),
                      bytes.size());
}

std::string refusal(const caf::expected<images::header_facts>& r) {
  return r ? std::string{"accepted"} : render(r.error());
}

void require_refused(const caf::expected<images::header_facts>& r, const std::string& why) {
  BOOST_TEST_MESSAGE(refusal(r));
  BOOST_REQUIRE(!r);
  BOOST_CHECK(is(r.error(), ec::image_rejected));
  BOOST_CHECK(kind_of(r.error()) == error_kind::permanent);
  BOOST_CHECK_MESSAGE(detail(r.error()).find("image base") != std::string::npos,
                      detail(r.error()));
  BOOST_CHECK_MESSAGE(detail(r.error()).find(why) != std::string::npos, detail(r.error()));
}

// 12 MiB of random data and 4 MiB of zeros: qemu-img allocates no cluster
// for the zeros, so the qcow2's length is well below its virtual size.
std::string disk() {
  return test::pattern(12 * mib, 7) + std::string(4 * mib, '\0');
}

// Text compresses: qemu-img convert -c writes compressed clusters.
std::string compressible_disk() {
  std::string out;
  while (out.size() < 8 * mib)
    out += "egress proxy appliance line " + std::to_string(out.size()) + "\n";
  out.resize(8 * mib);
  return out;
}

test::appliance built_appliance() {
  std::string why;
  auto a = test::appliance::load(test::appliance::default_dir(), &why);
  if (!a.ok())
    BOOST_TEST_MESSAGE("appliance not built (" << why << "): its checks are skipped");
  return a;
}

} // namespace

BOOST_AUTO_TEST_CASE(spec_23_a_real_qcow2_passes_with_its_virtual_size) {
  auto q = test::make_qcow2(disk());
  BOOST_TEST_MESSAGE("qcow2: " << q.bytes.size() << " bytes, virtual " << q.virtual_size);
  BOOST_REQUIRE_NE(q.bytes.size(), q.virtual_size);
  auto r = check("qcow2", q.bytes);
  BOOST_REQUIRE_MESSAGE(r, refusal(r));
  BOOST_CHECK_EQUAL(r->virtual_size, q.virtual_size);
  BOOST_CHECK_EQUAL(r->virtual_size, 16 * mib);
}

BOOST_AUTO_TEST_CASE(spec_23_compressed_and_version_2_qcow2_pass) {
  auto c = test::make_qcow2(compressible_disk(), {.compressed = true});
  BOOST_TEST_MESSAGE("compressed: " << c.bytes.size() << " bytes, virtual " << c.virtual_size);
  BOOST_CHECK_LT(c.bytes.size(), 2 * mib); // the clusters really are compressed
  auto r = check("qcow2", c.bytes);
  BOOST_REQUIRE_MESSAGE(r, refusal(r));
  BOOST_CHECK_EQUAL(r->virtual_size, 8 * mib);
  auto v2 = test::make_qcow2(disk(), {.version2 = true});
  auto r2 = check("qcow2", v2.bytes);
  BOOST_REQUIRE_MESSAGE(r2, refusal(r2));
  BOOST_CHECK_EQUAL(r2->virtual_size, v2.virtual_size);
}

// An untrusted image must never make the host open another file.
BOOST_AUTO_TEST_CASE(spec_23_a_qcow2_naming_a_backing_file_is_refused) {
  for (bool v2 : {false, true}) {
    auto b = test::make_qcow2(disk(), {.version2 = v2, .backing_file = "/etc/shadow"});
    auto r = check("qcow2", b.bytes);
    require_refused(r, "names a backing file");
    BOOST_CHECK(detail(r.error()).find("\"/etc/shadow\"") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(spec_23_a_qcow2_with_an_external_data_file_is_refused) {
  auto d = test::make_qcow2(disk(), {.data_file = "data.raw"});
  require_refused(check("qcow2", d.bytes), "external data file");
  // The name alone, in a header extension, with the feature bit cleared: a
  // header edited by hand is refused too.
  auto edited = d.bytes;
  edited[79] = static_cast<char>(edited[79] & ~0x04);
  require_refused(check("qcow2", edited), "names an external data file");
}

BOOST_AUTO_TEST_CASE(spec_23_an_encrypted_qcow2_is_refused) {
  auto e = test::make_qcow2(std::string(4 * mib, '\0'), {.encrypted = true});
  require_refused(check("qcow2", e.bytes), "encrypted");
}

BOOST_AUTO_TEST_CASE(spec_23_a_qcow2_declared_that_is_not_one_is_refused) {
  require_refused(check("qcow2", test::pattern(4 * mib, 3)), "qcow2 magic");
  auto q = test::make_qcow2(disk());
  // Cut inside its header, and inside its first cluster.
  require_refused(check("qcow2", q.bytes.substr(0, 50)), "shorter than a qcow2 header");
  auto short_one = q.bytes.substr(0, 4096);
  require_refused(check_header("base", "qcow2", short_one, short_one.size()), "shorter");
  // Marked corrupt, or a virtual size no disk has.
  auto corrupt = q.bytes;
  corrupt[79] = static_cast<char>(corrupt[79] | 0x02);
  require_refused(check("qcow2", corrupt), "marked corrupt");
  auto huge = q.bytes;
  huge[24] = static_cast<char>(0x7f);
  require_refused(check("qcow2", huge), "virtual size");
  // An unknown incompatible feature: QEMU would refuse to open it.
  auto future = q.bytes;
  future[72] = static_cast<char>(0x80);
  require_refused(check("qcow2", future), "incompatible features");
}

// Format confusion: a raw image (or a kernel, an initrd) whose bytes start
// like a format libvirt follows to other files.
BOOST_AUTO_TEST_CASE(spec_23_a_raw_image_with_a_qcow2_header_is_refused) {
  auto q = test::make_qcow2(disk());
  for (auto format : {"raw", "kernel", "initrd"})
    require_refused(check(format, q.bytes), "qcow2 header");
  require_refused(check("raw", std::string{"QED\0", 4} + test::pattern(mib, 1)), "QED");
  // libvirt's probe matches the first three bytes only: so does the check.
  auto qfi = q.bytes;
  qfi[3] = '\0';
  for (auto format : {"raw", "kernel"})
    require_refused(check(format, qfi), "qcow2 header");
  auto qfi_v1 = qfi;
  qfi_v1[7] = 1;
  require_refused(check("raw", qfi_v1), "a qcow header");
  require_refused(check("raw", "QEDX" + test::pattern(mib, 1)), "QED");
  // A kernel's own magic further in does not make the start harmless.
  auto kernel_like = qfi;
  kernel_like.replace(0x202, 4, "HdrS");
  require_refused(check("kernel", kernel_like), "qcow2 header");
  require_refused(check("raw", "KDMV" + test::pattern(mib, 1)), "VMDK");
  require_refused(check("raw", "# Disk DescriptorFile\nRW 8 FLAT \"/etc/shadow\" 0\n"),
                  "VMDK");
  auto plain = disk();
  auto r = check("raw", plain);
  BOOST_REQUIRE_MESSAGE(r, refusal(r));
  BOOST_CHECK_EQUAL(r->virtual_size, plain.size());
}

BOOST_AUTO_TEST_CASE(spec_23_kernels_and_initrds_are_what_they_say) {
  require_refused(check("kernel", test::pattern(mib, 5)), "neither an ELF executable nor a bzImage");
  // An ELF that is a program, not a kernel.
  require_refused(check("kernel", testbed::read_file("/bin/ls")), "neither an ELF executable");
  require_refused(check("initrd", test::pattern(mib, 5)), "neither a cpio archive");
  auto a = built_appliance();
  if (!a.ok())
    return;
  auto kernel = testbed::read_file(a.dir + "/vmlinux");
  auto initrd = testbed::read_file(a.dir + "/initrd.gz");
  auto k = check("kernel", kernel);
  BOOST_CHECK_MESSAGE(k, refusal(k));
  auto i = check("initrd", initrd);
  BOOST_CHECK_MESSAGE(i, refusal(i));
  require_refused(check("initrd", kernel), "neither a cpio archive");
  require_refused(check("kernel", initrd), "neither an ELF executable nor a bzImage");
}

// The message shows a hostile name's bytes escaped and cut short.
BOOST_AUTO_TEST_CASE(a_hostile_backing_name_is_shown_escaped_and_short) {
  auto b = test::make_qcow2(disk(), {.backing_file = "/x/\x1b[31m" + std::string(200, 'a')});
  auto r = check("qcow2", b.bytes);
  require_refused(r, "names a backing file");
  auto text = detail(r.error());
  BOOST_CHECK(text.find('\x1b') == std::string::npos);
  BOOST_CHECK(text.find("\\x1b") != std::string::npos);
  BOOST_CHECK(text.find(std::string(100, 'a')) == std::string::npos);
}
