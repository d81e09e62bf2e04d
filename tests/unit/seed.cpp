#define BOOST_TEST_MODULE seed
#include <boost/test/unit_test.hpp>

#include <dirent.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "messages/error.hpp"
#include "providers/cloudinit/seed.hpp"
#include "providers/mirror/sha256.hpp"

using namespace egress;
using namespace egress::cloudinit;

namespace {

// -- a minimal ISO 9660 reader ------------------------------------------------
// Just enough of ECMA-119, Rock Ridge (SUSP NM/PX entries) and Joliet to
// read a flat root directory back, so that the image is checked by what it
// contains and not by what libisofs says it wrote. No new dependency, no
// mount (the suite runs unprivileged).

constexpr size_t sector = 2048;

uint32_t le32(const std::string& s, size_t at) {
  BOOST_REQUIRE_LE(at + 4, s.size());
  auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(s[at + i])); };
  return b(0) | b(1) << 8 | b(2) << 16 | b(3) << 24;
}

struct entry {
  std::string name;       // ISO 9660 identifier, or Joliet's, decoded
  std::string rr_name;    // Rock Ridge NM ("" if none)
  std::optional<uint32_t> rr_mode, rr_uid, rr_gid;  // Rock Ridge PX
  uint32_t lba = 0;
  uint32_t size = 0;
  bool dir = false;
  std::string date;       // the 7-byte recording date, raw
};

// Decodes UCS-2BE (Joliet) as far as it is ASCII; others become '?'.
std::string from_ucs2(const std::string& raw) {
  std::string out;
  for (size_t i = 0; i + 1 < raw.size(); i += 2)
    out += raw[i] == 0 && static_cast<unsigned char>(raw[i + 1]) < 0x80 ? raw[i + 1] : '?';
  return out;
}

// The SUSP entries of one directory record's system use area.
void read_susp(const std::string& su, entry& e) {
  size_t i = 0;
  while (i + 4 <= su.size()) {
    auto len = static_cast<unsigned char>(su[i + 2]);
    if (len < 4 || i + len > su.size())
      break;
    auto sig = su.substr(i, 2);
    if (sig == "NM" && len >= 5)
      e.rr_name += su.substr(i + 5, len - 5);
    if (sig == "PX" && len >= 36) {
      e.rr_mode = le32(su, i + 4);
      e.rr_uid = le32(su, i + 20);
      e.rr_gid = le32(su, i + 28);
    }
    i += len;
  }
}

// The records of the directory at `lba`, `size` bytes, without "." and "..".
std::vector<entry> read_dir(const std::string& iso, uint32_t lba, uint32_t size, bool joliet) {
  std::vector<entry> out;
  size_t base = size_t{lba} * sector;
  BOOST_REQUIRE_LE(base + size, iso.size());
  size_t pos = 0;
  while (pos < size) {
    auto len = static_cast<unsigned char>(iso[base + pos]);
    if (len == 0) {  // the rest of this sector is padding
      pos = (pos / sector + 1) * sector;
      continue;
    }
    BOOST_REQUIRE_GE(len, 34);
    std::string rec = iso.substr(base + pos, len);
    auto len_fi = static_cast<unsigned char>(rec[32]);
    BOOST_REQUIRE_LE(33u + len_fi, rec.size());
    std::string id = rec.substr(33, len_fi);
    pos += len;
    if (len_fi == 1 && (id[0] == 0 || id[0] == 1))
      continue;  // "." and ".."
    entry e;
    e.name = joliet ? from_ucs2(id) : id;
    e.lba = le32(rec, 2);
    e.size = le32(rec, 10);
    e.dir = (rec[25] & 2) != 0;
    e.date = rec.substr(18, 7);
    size_t su = 33 + len_fi + (len_fi % 2 == 0 ? 1 : 0);
    if (!joliet && su < rec.size())
      read_susp(rec.substr(su), e);
    out.push_back(e);
  }
  return out;
}

std::string contents(const std::string& iso, const entry& e) {
  BOOST_REQUIRE_LE(size_t{e.lba} * sector + e.size, iso.size());
  return iso.substr(size_t{e.lba} * sector, e.size);
}

struct parsed_iso {
  std::string pvd;   // the primary volume descriptor, 2048 bytes
  std::string svd;   // the Joliet supplementary one ("" if none)
  std::vector<entry> root;         // the primary tree, Rock Ridge read too
  std::vector<entry> joliet_root;  // the Joliet tree
  std::string root_date;           // the PVD's root record's date
};

parsed_iso parse(const std::string& iso) {
  parsed_iso p;
  BOOST_REQUIRE_EQUAL(iso.size() % sector, 0u);
  BOOST_REQUIRE_GE(iso.size(), 18 * sector);
  for (size_t n = 16; (n + 1) * sector <= iso.size(); ++n) {
    std::string vd = iso.substr(n * sector, sector);
    BOOST_REQUIRE_EQUAL(vd.substr(1, 5), "CD001");
    auto type = static_cast<unsigned char>(vd[0]);
    if (type == 255)
      break;
    if (type == 1)
      p.pvd = vd;
    // A Joliet SVD: type 2 with escape sequence %/@, %/C or %/E (UCS-2 level).
    if (type == 2 && vd.substr(88, 2) == "%/")
      p.svd = vd;
  }
  BOOST_REQUIRE_EQUAL(p.pvd.size(), sector);
  // The root directory record sits at byte 156 of a volume descriptor.
  p.root = read_dir(iso, le32(p.pvd, 156 + 2), le32(p.pvd, 156 + 10), false);
  p.root_date = p.pvd.substr(156 + 18, 7);
  if (!p.svd.empty())
    p.joliet_root = read_dir(iso, le32(p.svd, 156 + 2), le32(p.svd, 156 + 10), true);
  return p;
}

// name -> content, by the Rock Ridge names (what Linux shows when mounted).
std::map<std::string, std::string> rr_files(const std::string& iso) {
  std::map<std::string, std::string> out;
  for (auto& e : parse(iso).root) {
    BOOST_TEST(!e.dir);
    out[e.rr_name] = contents(iso, e);
  }
  return out;
}

// name -> content, by the Joliet names without the ";1" version (and with
// any dot before it: "user-data.;1" would not be "user-data" to every reader).
std::map<std::string, std::string> joliet_files(const std::string& iso) {
  std::map<std::string, std::string> out;
  for (auto& e : parse(iso).joliet_root) {
    auto name = e.name;
    if (name.size() > 2 && name.compare(name.size() - 2, 2, ";1") == 0)
      name.resize(name.size() - 2);
    out[name] = contents(iso, e);
  }
  return out;
}

std::string build(const seed_files& f) {
  auto iso = build_seed_iso(f);
  BOOST_REQUIRE_MESSAGE(iso, "build_seed_iso failed: " << (iso ? "" : render(iso.error())));
  return std::move(*iso);
}

seed_files sample() {
  seed_files f;
  f.user_data = "#cloud-config\nwrite_files: []\n";
  f.meta_data = "instance-id: 'i-1'\nlocal-hostname: 'px-1'\n";
  f.network_config = "version: 2\n";
  return f;
}

std::string code_of(const caf::error& err) {
  return to_string(static_cast<ec>(err.code()));
}

size_t count_dir(const char* path) {
  size_t n = 0;
  DIR* d = opendir(path);
  BOOST_REQUIRE(d != nullptr);
  while (readdir(d) != nullptr)
    ++n;
  closedir(d);
  return n;
}

size_t count_lines(const char* path) {
  std::ifstream in{path};
  size_t n = 0;
  for (std::string line; std::getline(in, line);)
    ++n;
  return n;
}

} // namespace

// -- the image ------------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(iso_image)

BOOST_AUTO_TEST_CASE(volume_descriptor_says_cidata) {
  auto iso = build(sample());
  auto p = parse(iso);
  // Volume id: bytes 40..71, space padded; lowercase as given.
  BOOST_TEST(p.pvd.substr(40, 32) == "cidata" + std::string(26, ' '));
  // The volume space size (bytes 80..83) covers the whole image.
  BOOST_TEST(size_t{le32(p.pvd, 80)} * sector == iso.size());
  // Joliet's label is what blkid reports when Joliet is present: the same.
  BOOST_REQUIRE(!p.svd.empty());
  BOOST_TEST(from_ucs2(p.svd.substr(40, 32)) == "cidata" + std::string(10, ' '));
}

BOOST_AUTO_TEST_CASE(rock_ridge_and_joliet_hold_the_three_files) {
  auto f = sample();
  auto iso = build(f);
  std::map<std::string, std::string> want = {
    {"user-data", f.user_data}, {"meta-data", f.meta_data}, {"network-config", f.network_config}};
  BOOST_TEST((rr_files(iso) == want));
  BOOST_TEST((joliet_files(iso) == want));
  // The plain ISO 9660 names are the conformant mangled ones.
  std::vector<std::string> plain;
  for (auto& e : parse(iso).root)
    plain.push_back(e.name);
  std::vector<std::string> want_plain = {"META_DATA.;1", "NETWORK_CONFIG.;1", "USER_DATA.;1"};
  BOOST_TEST(plain == want_plain, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(any_bytes_and_sizes_round_trip) {
  seed_files f;
  for (int i = 0; i < 256; ++i)
    f.user_data += static_cast<char>(i);
  // Several sectors, and not a multiple of one.
  for (int i = 0; i < 5000; ++i)
    f.meta_data += static_cast<char>('a' + i % 26);
  f.network_config = std::string(sector, 'n');
  auto iso = build(f);
  auto files = rr_files(iso);
  BOOST_TEST(files["user-data"] == f.user_data);
  BOOST_TEST(files["meta-data"] == f.meta_data);
  BOOST_TEST(files["network-config"] == f.network_config);
}

BOOST_AUTO_TEST_CASE(empty_files_are_files) {
  seed_files f;  // all empty: user-data and meta-data exist, empty
  auto iso = build(f);
  auto files = rr_files(iso);
  BOOST_TEST(files.size() == 2u);
  BOOST_TEST(files.count("user-data") == 1u);
  BOOST_TEST(files.count("meta-data") == 1u);
  BOOST_TEST(files["user-data"].empty());
  BOOST_TEST(files["meta-data"].empty());
}

BOOST_AUTO_TEST_CASE(empty_network_config_omits_the_file) {
  auto f = sample();
  f.network_config.clear();
  auto iso = build(f);
  std::map<std::string, std::string> want = {{"user-data", f.user_data},
                                             {"meta-data", f.meta_data}};
  BOOST_TEST((rr_files(iso) == want));
  BOOST_TEST((joliet_files(iso) == want));
}

BOOST_AUTO_TEST_CASE(modes_owners_and_times_are_fixed) {
  auto iso = build(sample());
  auto p = parse(iso);
  // 2000-01-01 00:00:00, GMT offset 0: years since 1900, month, day, h, m, s, tz.
  const std::string date7{"\x64\x01\x01\x00\x00\x00\x00", 7};
  BOOST_TEST(p.root_date == date7);
  for (auto& e : p.root) {
    BOOST_TEST_CONTEXT(e.rr_name) {
      BOOST_REQUIRE(e.rr_mode.has_value());
      BOOST_TEST((*e.rr_mode & 07777) == 0444u);
      BOOST_TEST(*e.rr_uid == 0u);
      BOOST_TEST(*e.rr_gid == 0u);
      BOOST_TEST(e.date == date7);
    }
  }
  for (auto& e : p.joliet_root)
    BOOST_TEST(e.date == date7);
  // Volume creation and modification (bytes 813 and 830): 17 bytes each,
  // "YYYYMMDDhhmmsscc" and a GMT offset of 0.
  const std::string date17 = std::string{"2000010100000000"} + '\0';
  BOOST_TEST(p.pvd.substr(813, 17) == date17);
  BOOST_TEST(p.pvd.substr(830, 17) == date17);
  BOOST_TEST(p.svd.substr(813, 17) == date17);
  BOOST_TEST(p.svd.substr(830, 17) == date17);
}

BOOST_AUTO_TEST_CASE(same_files_same_bytes) {
  auto f = sample();
  auto first = build(f);
  // Past a second (directory records have 1 s resolution) and in another
  // time zone: nothing of the clock or the zone may reach the image.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  const char* old_tz = std::getenv("TZ");
  std::string saved = old_tz != nullptr ? old_tz : "";
  setenv("TZ", "XYZ+05:30", 1);
  tzset();
  auto second = build(f);
  if (old_tz != nullptr)
    setenv("TZ", saved.c_str(), 1);
  else
    unsetenv("TZ");
  tzset();
  BOOST_TEST((first == second));
  BOOST_TEST_MESSAGE("seed sha256 " << mirror::sha256_hex(first) << ", " << first.size()
                                    << " bytes");
  // And a different file gives a different image.
  f.user_data += "#\n";
  BOOST_TEST((build(f) != first));
}

BOOST_AUTO_TEST_CASE(concurrent_builds_agree) {
  auto f = sample();
  auto want = build(f);
  std::vector<std::string> got(4);
  std::vector<std::thread> threads;
  for (auto& g : got)
    threads.emplace_back([&f, &g] {
      for (int i = 0; i < 10; ++i) {
        auto iso = build_seed_iso(f);
        g = iso ? *iso : "failed: " + render(iso.error());
        if (!iso)
          return;
      }
    });
  for (auto& t : threads)
    t.join();
  for (auto& g : got)
    BOOST_TEST((g == want));
}

BOOST_AUTO_TEST_CASE(hundred_builds_leave_no_fd_thread_or_mapping) {
  auto f = sample();
  build(f);  // warm up: libisofs init, malloc arenas, the cached thread stack
  auto fds = count_dir("/proc/self/fd");
  auto tasks = count_dir("/proc/self/task");
  auto maps = count_lines("/proc/self/maps");
  for (int i = 0; i < 100; ++i)
    build(f);
  BOOST_TEST(count_dir("/proc/self/fd") == fds);
  BOOST_TEST(count_dir("/proc/self/task") == tasks);
  // A writer thread left unjoined keeps its stack mapped: 100 builds would
  // add 100 mappings. Allow a little slack for the allocator.
  auto maps_after = count_lines("/proc/self/maps");
  BOOST_TEST(maps_after <= maps + 4, "mappings " << maps << " -> " << maps_after);
}

BOOST_AUTO_TEST_SUITE_END()

// -- render_seed ------------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(render_seed_text)

proxy_seed valid_proxy() {
  proxy_seed p;
  p.instance_id = "0123456789abcdef0123456789abcdef";
  p.hostname = "px-1";
  p.port = 3128;
  p.allow_cidr = "10.20.0.0/16";
  return p;
}

BOOST_AUTO_TEST_CASE(exact_text) {
  auto files = render_seed(valid_proxy());
  BOOST_REQUIRE_MESSAGE(files, (files ? "" : render(files.error())));
  BOOST_TEST(files->meta_data
             == "instance-id: '0123456789abcdef0123456789abcdef'\n"
                "local-hostname: 'px-1'\n");
  BOOST_TEST(files->user_data
             == "#cloud-config\n"
                "write_files:\n"
                "  - path: /etc/egress/proxy.env\n"
                "    owner: root:root\n"
                "    permissions: '0644'\n"
                "    content: |\n"
                "      EGRESS_INSTANCE_ID=0123456789abcdef0123456789abcdef\n"
                "      EGRESS_PORT=3128\n"
                "      EGRESS_ALLOW_CIDR=10.20.0.0/16\n");
  BOOST_TEST(files->network_config
             == "version: 2\n"
                "ethernets:\n"
                "  nic0:\n"
                "    match:\n"
                "      name: 'e*'\n"
                "    dhcp4: true\n");
}

// The busybox reading the header promises: lines that are, after leading
// blanks, EGRESS_<KEY>=<value>, and nothing else that starts so.
BOOST_AUTO_TEST_CASE(settings_parse_as_key_value_lines) {
  auto p = valid_proxy();
  p.allow_cidr = "fd00:1::/64";
  p.port = 65535;
  auto files = render_seed(p);
  BOOST_REQUIRE(files);
  std::map<std::string, std::string> settings;
  size_t start = 0;
  const auto& u = files->user_data;
  while (start < u.size()) {
    auto end = u.find('\n', start);
    auto line = u.substr(start, end - start);
    start = end == std::string::npos ? u.size() : end + 1;
    line.erase(0, line.find_first_not_of(' '));
    if (line.rfind("EGRESS_", 0) != 0)
      continue;
    auto eq = line.find('=');
    BOOST_REQUIRE(eq != std::string::npos);
    settings[line.substr(0, eq)] = line.substr(eq + 1);
  }
  std::map<std::string, std::string> want = {{"EGRESS_INSTANCE_ID", p.instance_id},
                                             {"EGRESS_PORT", "65535"},
                                             {"EGRESS_ALLOW_CIDR", "fd00:1::/64"}};
  BOOST_TEST((settings == want));
}

BOOST_AUTO_TEST_CASE(valid_edge_values_pass) {
  auto p = valid_proxy();
  for (auto h : {std::string{"a"}, std::string{"PX-1.example.org"}, std::string(63, 'h'),
                 std::string(31, 'a') + "." + std::string(32, 'b')}) {
    p.hostname = h;
    BOOST_TEST(static_cast<bool>(render_seed(p)), h);
  }
  p = valid_proxy();
  for (auto id : {std::string{"i"}, std::string{"i-0.a_b"}, std::string(128, '7')}) {
    p.instance_id = id;
    BOOST_TEST(static_cast<bool>(render_seed(p)), id);
  }
  p = valid_proxy();
  for (auto c : {"0.0.0.0/0", "10.1.2.3/32", "::/0", "fd00::/128", "192.168.1.0/24"}) {
    p.allow_cidr = c;
    BOOST_TEST(static_cast<bool>(render_seed(p)), c);
  }
  p = valid_proxy();
  p.port = 1;
  BOOST_TEST(static_cast<bool>(render_seed(p)));
}

// Each invalid value: permanent invalid_argument naming the field.
void expect_invalid(const proxy_seed& p, const std::string& field, const std::string& why) {
  BOOST_TEST_CONTEXT(field << " (" << why << ")") {
    auto r = render_seed(p);
    BOOST_REQUIRE(!r);
    BOOST_TEST(code_of(r.error()) == "invalid_argument");
    BOOST_TEST(to_string(kind_of(r.error())) == std::string{"permanent"});
    auto text = detail(r.error());
    BOOST_TEST(text.rfind("proxy_seed." + field + ": ", 0) == 0u, text);
    // Control bytes are escaped, never printed raw.
    BOOST_TEST(text.find('\n') == std::string::npos, text);
  }
}

BOOST_AUTO_TEST_CASE(invalid_instance_id) {
  for (auto id : {std::string{}, std::string{"a b"}, std::string{"a\nb"}, std::string{"-x"},
                  std::string{".x"}, std::string{"x'y"}, std::string{"x\"y"},
                  std::string{"x:y"}, std::string{"x#y"}, std::string{"x$y"},
                  std::string(129, 'a'), std::string{"\xc3\xa9t\xc3\xa9"}}) {
    auto p = valid_proxy();
    p.instance_id = id;
    expect_invalid(p, "instance_id", id);
  }
}

BOOST_AUTO_TEST_CASE(invalid_hostname) {
  for (auto h : {std::string{}, std::string{"px_1"}, std::string{"-px"}, std::string{"px-"},
                 std::string{"a..b"}, std::string{"a."}, std::string{".a"},
                 std::string{"px 1"}, std::string{"px\n"}, std::string{"px:1"},
                 std::string(64, 'h'), std::string(40, 'a') + "." + std::string(24, 'b'),
                 std::string{"px'1"}}) {
    auto p = valid_proxy();
    p.hostname = h;
    expect_invalid(p, "hostname", h);
  }
}

BOOST_AUTO_TEST_CASE(invalid_port) {
  auto p = valid_proxy();
  p.port = 0;
  expect_invalid(p, "port", "0");
}

BOOST_AUTO_TEST_CASE(invalid_allow_cidr) {
  for (auto c : {"", "10.0.0.0", "10.0.0.0/", "/8", "10.0.0.0/33", "fd00::/129", "10.0.0/8",
                 "10.0.0.0/8 ", " 10.0.0.0/8", "10.0.0.0/+8", "10.0.0.0/-1", "10.0.0.0/8\n",
                 "10.0.0.0/1234", "host/8", "10.0.0.0/8/8", "10.0.0.0/8;reboot"}) {
    auto p = valid_proxy();
    p.allow_cidr = c;
    expect_invalid(p, "allow_cidr", c);
  }
}

BOOST_AUTO_TEST_CASE(rendered_seed_builds_and_reads_back) {
  auto files = render_seed(valid_proxy());
  BOOST_REQUIRE(files);
  auto iso = build(*files);
  std::map<std::string, std::string> want = {{"user-data", files->user_data},
                                             {"meta-data", files->meta_data},
                                             {"network-config", files->network_config}};
  BOOST_TEST((rr_files(iso) == want));
}

BOOST_AUTO_TEST_SUITE_END()
