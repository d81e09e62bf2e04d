
#include <algorithm>
#include <filesystem>
#include <stdexcept>

#include "testbed/disk_images.hpp"
#include "testbed/test_data.hpp"
#include "testbed/testbed.hpp"

namespace egress::test {

namespace {

const std::string qemu_img = "/usr/bin/qemu-img";

// qemu-img times a PBKDF2 run by the thread's CPU clock before it writes a
// LUKS header; on a paravirtualized guest that clock can read no time at
// all, and qemu-img then exits 1 with "Unable to get accurate CPU usage"
// (about 1 run in 20 on the CI machine kind). It is qemu's benchmark that
// failed, not the image, so a few tries make the test data deterministic.
void run_luks_create(const std::vector<std::string>& argv) {
  const int tries = 8;
  for (int i = 1;; ++i) {
    try {
      testbed::run_checked(argv, std::chrono::seconds(120));
      return;
    } catch (const std::runtime_error& e) {
      bool benchmark_failed =
        std::string{e.what()}.find("Unable to get accurate CPU usage") != std::string::npos;
      if (!benchmark_failed || i == tries)
        throw;
    }
  }
}

} // namespace

uint64_t qcow2_virtual_size(const std::string& path) {
  auto out = testbed::run_checked({qemu_img, "info", "-U", "--output=json", path});
  static const std::string key = "\"virtual-size\": ";
  auto at = out.find(key);
  if (at == std::string::npos)
    throw std::runtime_error("qemu-img info " + path + ": no virtual-size in " + out);
  return std::stoull(out.substr(at + key.size()));
}

qcow2_image make_qcow2(const std::string& raw, const qcow2_options& opts) {
  testbed::temp_dir dir{"qcow2"};
  auto in = dir / "disk.raw";
  auto out = dir / "disk.qcow2";
  auto size = std::to_string(raw.size());
  std::vector<std::string> o;
  if (opts.version2)
    o.push_back("compat=0.10");
  if (!opts.data_file.empty())
    o.push_back("data_file=" + (dir / opts.data_file));
  if (opts.encrypted)
    o.push_back("encrypt.format=luks,encrypt.key-secret=sec0,encrypt.iter-time=10");
  std::string joined;
  for (auto& x : o)
    joined += (joined.empty() ? "" : ",") + x;
  std::vector<std::string> argv;
  if (!opts.backing_file.empty() || !opts.data_file.empty() || opts.encrypted) {
    // Header fields qemu-img only writes at creation: an image without
    // data of its own is enough for what the tests check.
    argv = {qemu_img, "create", "-q", "-f", "qcow2"};
    if (opts.encrypted)
      argv.insert(argv.end(), {"--object", "secret,id=sec0,data=throwaway"});
    if (!opts.backing_file.empty())
      argv.insert(argv.end(), {"-u", "-b", opts.backing_file, "-F", "raw"});
    if (!joined.empty())
      argv.insert(argv.end(), {"-o", joined});
    argv.insert(argv.end(), {out, size});
  } else {
    testbed::write_file(in, raw);
    argv = {qemu_img, "convert", "-q", "-f", "raw", "-O", "qcow2"};
    if (opts.compressed)
      argv.push_back("-c");
    if (!joined.empty())
      argv.insert(argv.end(), {"-o", joined});
    argv.insert(argv.end(), {in, out});
  }
  if (opts.encrypted)
    run_luks_create(argv);
  else
    testbed::run_checked(argv, std::chrono::seconds(120));
  return {testbed::read_file(out), qcow2_virtual_size(out)};
}

namespace {

// mke2fs -d: `out` (made `size` bytes long) becomes an ext4 file system
// holding the directory `root`.
void mke2fs_from(const std::string& out, uint64_t size, const std::string& root) {
  testbed::run_checked({"truncate", "-s", std::to_string(size), out});
  testbed::run_checked({"/usr/sbin/mke2fs", "-q", "-F", "-t", "ext4", "-d", root, out},
                       std::chrono::seconds(600));
}

} // namespace

std::string make_ext4(uint64_t size, const std::vector<std::pair<std::string, std::string>>& files) {
  testbed::temp_dir dir{"ext4"};
  auto root = dir / "root";
  std::filesystem::create_directory(root);
  for (auto& [name, content] : files)
    testbed::write_file(root + "/" + name, content);
  mke2fs_from(dir / "disk.raw", size, root);
  return testbed::read_file(dir / "disk.raw");
}

void make_ext4_file(const std::string& out, uint64_t size, uint64_t data_mib) {
  testbed::temp_dir root{"ext4-root"};
  const uint64_t file_mib = 16;
  for (uint64_t done = 0, k = 0; done < data_mib; done += file_mib, ++k)
    testbed::write_file(root / ("f" + std::to_string(k)),
                        pattern(std::min(file_mib, data_mib - done) << 20, k + 1));
  mke2fs_from(out, size, root.path());
}

} // namespace egress::test
