#define BOOST_TEST_MODULE fleet
// Images through the whole engine: proxies that name an image wait for it,
// the fleet runs one image actor per (image, host), and the status shows it.
// Real private libvirtd (qemu driver: the pool takes the upload, the domains
// start a real QEMU without a disk) and the real test HTTP server.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <tuple>

#include <caf/scoped_actor.hpp>

#include "messages/error.hpp"
#include "providers/images/volume_names.hpp"
#include "providers/libvirt/connection.hpp"
#include "providers/libvirt/domains.hpp"
#include "providers/mirror/sha256.hpp"
#include "providers/provision/proxy_vm.hpp"
#include "testbed/disk_images.hpp"
#include "testbed/engine_fixture.hpp"
#include "testbed/http_server.hpp"
#include "testbed/test_data.hpp"
#include "testbed/testbed.hpp"

using namespace egress;
using test::stop_on_exit;
using namespace std::chrono_literals;

namespace {

constexpr uint64_t mib = uint64_t{1} << 20;

struct root_required {
  root_required() { testbed::require_root_or_skip(); }
};

struct fixture : test::engine_fixture {
  root_required root;
  testbed::libvirtd lv; // warm QEMU capabilities: the domains really start
  std::string pool_dir;
  std::string image = std::string(4 * mib, 'i');
  test::http_server http{image};

  fixture() {
    lv.start();
    pool_dir = lv.define_dir_pool("images");
    http.start();
  }
  ~fixture() {
    sys.reset();
    // The domains QEMU runs outlive the engine: destroy them.
    if (auto c = lv::connection::open(lv.uri()))
      for (auto n : {"px-1", "px-2"})
        lv::delete_domain(**c, n);
    http.stop();
  }

  engine_config config() {
    auto cfg = test::test_config("imgeng");
    auto h = test::test_host("hv1", lv.uri());
    h.domain_type = "qemu";
    h.pool = "images";
    h.network.clear(); // no NIC: these domains never get an address
    cfg.hosts.push_back(h);
    image_config img;
    img.name = "base";
    img.url = http.url();
    img.sha256 = mirror::sha256_hex(image);
    img.size = image.size();
    img.format = "raw";
    img.transfer_budget = 60s;
    cfg.images.push_back(img);
    for (auto n : {"px-1", "px-2"}) {
      auto p = test::test_proxy(n, "hv1");
      p.network.clear();
      p.image = "base";
      cfg.proxies.push_back(p);
    }
    BOOST_REQUIRE_MESSAGE(!validate(cfg), render(validate(cfg)));
    return cfg;
  }
};

// Just enough of a bzImage for QEMU's Linux loader to take it (the "HdrS"
// magic, a boot protocol that allows an initrd, four setup sectors): the
// domain starts, and what it runs is beside the point here.
std::string fake_bzimage() {
  std::string k(256 * 1024, '\0');
  k[0x1f1] = 4;                             // setup_sects
  k.replace(0x202, 4, "HdrS");              // header magic
  k[0x206] = 0x0c;                          // boot protocol 2.12
  k[0x207] = 0x02;
  k.replace(0x22c, 4, std::string{"\xff\xff\xff\x7f", 4}); // initrd_addr_max
  return k;
}

const image_status* image_in(const fleet_status& st) {
  return st.images.empty() ? nullptr : &st.images.front();
}

} // namespace

BOOST_FIXTURE_TEST_SUITE(image_engine_suite, fixture)

BOOST_AUTO_TEST_CASE(proxies_wait_for_their_image_then_create_their_domains) {
  http.set({.drip_bytes = 512 * 1024, .drip_interval = 100ms}); // ~0.8 s
  auto eng = engine::start(*sys, config());
  BOOST_REQUIRE(eng);
  stop_on_exit guard{eng};
  // While the image moves, no domain exists yet.
  bool fetching = wait_status(*eng, [](const fleet_status& st) {
    auto i = image_in(st);
    return i && i->state == image_state::fetching;
  }, 10s);
  BOOST_CHECK(fetching);
  if (auto st = eng->status())
    for (auto& p : st->proxies)
      BOOST_CHECK(p.phase == proxy_phase::pending);
  bool created = wait_status(*eng, [](const fleet_status& st) {
    auto i = image_in(st);
    if (!i || i->state != image_state::ready)
      return false;
    for (auto& p : st.proxies)
      if (p.phase != proxy_phase::provisioning && p.phase != proxy_phase::running)
        return false;
    return true;
  }, 60s);
  auto st = eng->status();
  BOOST_REQUIRE(st);
  for (auto& p : st->proxies)
    BOOST_TEST_MESSAGE("proxy " << p.name << ": " << to_string(p.phase) << " "
                                << p.last_error);
  BOOST_CHECK(created);
  BOOST_REQUIRE_EQUAL(st->images.size(), 1u); // one actor for both proxies
  auto& i = st->images.front();
  BOOST_CHECK_EQUAL(i.image, "base");
  BOOST_CHECK_EQUAL(i.host, "hv1");
  BOOST_CHECK_EQUAL(i.volume,
                    images::volume_names::of("imgeng", "base", mirror::sha256_hex(image)).data);
  BOOST_CHECK_EQUAL(i.transfers, 1u);
  BOOST_CHECK_EQUAL(http.requests(), 1u); // one download for two proxies
  BOOST_CHECK(testbed::read_file(pool_dir + "/" + i.volume) == image);

  // Each proxy: a qcow2 overlay on the cached image and a cidata seed, both
  // attached to its domain; the base image itself is never written.
  for (auto name : {"px-1", "px-2"}) {
    auto vols = provision::proxy_volumes::of("imgeng", name);
    auto info = testbed::run({"qemu-img", "info", "--output=json", "-U",
                              pool_dir + "/" + vols.disk});
    BOOST_TEST_MESSAGE(name << " overlay: " << info.output);
    BOOST_CHECK(info.ok());
    BOOST_CHECK(info.output.find("\"format\": \"qcow2\"") != std::string::npos);
    BOOST_CHECK(info.output.find(pool_dir + "/" + i.volume) != std::string::npos);
    auto seed = testbed::read_file(pool_dir + "/" + vols.seed);
    BOOST_REQUIRE(seed.size() > 32768 + 48);
    BOOST_CHECK_EQUAL(seed.substr(32768 + 40, 6), "cidata"); // the PVD's volume id
    BOOST_CHECK(seed.find("EGRESS_PORT=8888") != std::string::npos);
    auto xml = lv.virsh({"dumpxml", name});
    BOOST_CHECK(xml.output.find(pool_dir + "/" + vols.disk) != std::string::npos);
    BOOST_CHECK(xml.output.find(pool_dir + "/" + vols.seed) != std::string::npos);
    BOOST_CHECK(xml.output.find("device='cdrom'") != std::string::npos);
  }
  BOOST_CHECK(testbed::read_file(pool_dir + "/" + i.volume) == image);

  // Erasing a proxy removes its domain and both of its volumes, and nothing
  // of the other proxy or of the cache.
  {
    caf::scoped_actor self{*sys};
    self->request(eng->fleet(), 30s, atom::erase_v, std::string{"px-1"})
      .receive([](proxy_status&) {}, [](caf::error& e) { BOOST_ERROR(render(e)); });
  }
  auto v1 = provision::proxy_volumes::of("imgeng", "px-1");
  auto v2 = provision::proxy_volumes::of("imgeng", "px-2");
  BOOST_CHECK(!std::filesystem::exists(pool_dir + "/" + v1.disk));
  BOOST_CHECK(!std::filesystem::exists(pool_dir + "/" + v1.seed));
  BOOST_CHECK(std::filesystem::exists(pool_dir + "/" + v2.disk));
  BOOST_CHECK(std::filesystem::exists(pool_dir + "/" + i.volume));
  BOOST_CHECK(!eng->stop());
}

// A real qcow2 base (qemu-img convert; its virtual size is four times its
// length): it fills (libvirt reports its virtual size as the volume's
// capacity, which the fill must not take for a length), each proxy's overlay
// is as large as the base's virtual size, and the base is never written.
BOOST_AUTO_TEST_CASE(spec_23_proxies_on_a_real_qcow2_base_get_overlays_of_its_virtual_size) {
  auto q = test::make_qcow2(test::pattern(4 * mib, 9) + std::string(12 * mib, '\0'));
  BOOST_TEST_MESSAGE("base: " << q.bytes.size() << " bytes, virtual " << q.virtual_size);
  http.set_body(q.bytes);
  auto cfg = config();
  auto& img = cfg.images.front();
  img.format = "qcow2";
  img.sha256 = mirror::sha256_hex(q.bytes);
  img.size = q.bytes.size();
  auto eng = engine::start(*sys, cfg);
  BOOST_REQUIRE(eng);
  stop_on_exit guard{eng};
  bool created = wait_status(*eng, [](const fleet_status& st) {
    if (st.proxies.empty())
      return false;
    for (auto& p : st.proxies)
      if (p.phase != proxy_phase::provisioning && p.phase != proxy_phase::running)
        return false;
    return true;
  }, 60s);
  auto st = eng->status();
  BOOST_REQUIRE(st);
  for (auto& p : st->proxies)
    BOOST_TEST_MESSAGE("proxy " << p.name << ": " << to_string(p.phase) << " " << p.last_error);
  BOOST_REQUIRE(created);
  auto base = pool_dir + "/" + st->images.front().volume;
  for (auto name : {"px-1", "px-2"}) {
    auto disk = pool_dir + "/" + provision::proxy_volumes::of("imgeng", name).disk;
    BOOST_CHECK_EQUAL(test::qcow2_virtual_size(disk), q.virtual_size);
    auto info = testbed::run({"qemu-img", "info", "--output=json", "-U", disk}).output;
    BOOST_CHECK(info.find("\"backing-filename-format\": \"qcow2\"") != std::string::npos);
  }
  BOOST_CHECK(testbed::read_file(base) == q.bytes);
  BOOST_CHECK(!eng->stop());
}

// Kernel boot: the kernel and the initrd are cached images like any other
// (verified, one per host) and reach the domain by path, with the command
// line; the proxy needs no disk, only its seed.
BOOST_AUTO_TEST_CASE(a_kernel_boot_proxy_gets_its_kernel_initrd_and_cmdline_by_path) {
  testbed::temp_dir files{"kernel"};
  auto kernel = fake_bzimage();
  // A real initramfs: a gzipped newc cpio archive holding one init script.
  testbed::write_file(files / "init", "#!/bin/sh\nexec sh\n", 0755);
  testbed::run_checked({"/bin/sh", "-c", "cd " + files.path() + " && echo init | "
                        "/bin/busybox cpio -o -H newc 2>/dev/null | gzip -n > initrd.img"});
  auto initrd = testbed::read_file(files / "initrd.img");
  testbed::write_file(files / "vmlinuz", kernel);
  testbed::write_file(files / "initrd.img", initrd);
  auto cfg = config();
  cfg.proxies.resize(1);
  auto& p = cfg.proxies.front();
  p.image.clear();
  p.kernel = "vmlinuz";
  p.initrd = "initrd";
  p.cmdline = "console=ttyS0 panic=-1 egress=<&>";
  for (auto [name, file, format, body] :
       {std::tuple{"vmlinuz", "vmlinuz", "kernel", &kernel},
        std::tuple{"initrd", "initrd.img", "initrd", &initrd}}) {
    image_config img;
    img.name = name;
    img.url = "file://" + (files / file);
    img.sha256 = mirror::sha256_hex(*body);
    img.size = body->size();
    img.format = format;
    img.transfer_budget = 60s;
    cfg.images.push_back(img);
  }
  cfg.hosts.front().console_log_dir = files.path(); // the serial console goes here
  BOOST_REQUIRE_MESSAGE(!validate(cfg), render(validate(cfg)));
  auto eng = engine::start(*sys, cfg);
  BOOST_REQUIRE(eng);
  stop_on_exit guard{eng};
  bool created = wait_status(*eng, [](const fleet_status& st) {
    if (st.proxies.empty())
      return false;
    auto& p = st.proxies.front();
    return p.phase == proxy_phase::provisioning || p.phase == proxy_phase::running;
  }, 60s);
  auto st = eng->status();
  BOOST_REQUIRE(st);
  BOOST_TEST_MESSAGE("proxy: " << to_string(st->proxies.front().phase) << " "
                               << st->proxies.front().last_error);
  BOOST_REQUIRE(created);
  BOOST_CHECK_EQUAL(st->images.size(), 2u); // "base" is declared but nobody needs it
  auto xml = lv.virsh({"dumpxml", "px-1"}).output;
  auto kvol = images::volume_names::of("imgeng", "vmlinuz", mirror::sha256_hex(kernel)).data;
  auto ivol = images::volume_names::of("imgeng", "initrd", mirror::sha256_hex(initrd)).data;
  BOOST_CHECK_MESSAGE(xml.find("<kernel>" + pool_dir + "/" + kvol + "</kernel>")
                        != std::string::npos, xml);
  BOOST_CHECK(xml.find("<initrd>" + pool_dir + "/" + ivol + "</initrd>") != std::string::npos);
  BOOST_CHECK(xml.find("<cmdline>console=ttyS0 panic=-1 egress=&lt;&amp;&gt;</cmdline>")
              != std::string::npos);
  auto vols = provision::proxy_volumes::of("imgeng", "px-1");
  BOOST_CHECK(xml.find(pool_dir + "/" + vols.seed) != std::string::npos);
  BOOST_CHECK(!std::filesystem::exists(pool_dir + "/" + vols.disk)); // no disk at all
  BOOST_CHECK(testbed::read_file(pool_dir + "/" + kvol) == kernel);
  // The serial console is logged on the host, where the domain runs.
  auto console = files / "px-1.console.log";
  BOOST_CHECK_MESSAGE(xml.find("<serial type='file'>") != std::string::npos, xml);
  BOOST_CHECK(xml.find("<source path='" + console + "'/>") != std::string::npos);
  BOOST_CHECK(std::filesystem::exists(console));
  BOOST_CHECK(!eng->stop());
}

BOOST_AUTO_TEST_CASE(a_missing_image_keeps_proxies_pending_with_the_reason) {
  http.set({.error_status = 404});
  auto eng = engine::start(*sys, config());
  BOOST_REQUIRE(eng);
  stop_on_exit guard{eng};
  bool reported = wait_status(*eng, [](const fleet_status& st) {
    for (auto& p : st.proxies)
      if (p.last_error.find("404") == std::string::npos)
        return false;
    return !st.proxies.empty();
  }, 20s);
  auto st = eng->status();
  BOOST_REQUIRE(st);
  for (auto& p : st->proxies) {
    BOOST_TEST_MESSAGE("proxy " << p.name << ": " << to_string(p.phase) << " ("
                                << p.last_error_kind << ") " << p.last_error);
    BOOST_CHECK(p.phase == proxy_phase::pending);
    BOOST_CHECK_EQUAL(p.last_error_kind, "not_found");
  }
  BOOST_CHECK(reported);
  BOOST_REQUIRE_EQUAL(st->images.size(), 1u);
  BOOST_CHECK(st->images.front().state == image_state::failed);
  // Nothing was created on the host: no domain, no volume.
  auto c = lv::connection::open(lv.uri());
  BOOST_REQUIRE(c);
  auto marked = lv::list_marked(**c, "imgeng");
  BOOST_REQUIRE(marked);
  BOOST_CHECK(marked->empty());
  BOOST_CHECK(testbed::run({"ls", "-A", pool_dir}).output.empty());
  BOOST_CHECK(!eng->stop());
}

// Invariant 44: with engine.stage-dir, proxies on two hosts that both lack
// their image get it from the node's one verified copy: the mirror is read
// once, and the copy is in the stage directory under the data volume's name.
// (Two hosts on one libvirtd, each with its own pool; collection off: it is
// beside the point here.)
BOOST_AUTO_TEST_CASE(spec_44_two_hosts_get_their_image_from_one_node_copy) {
  lv.define_dir_pool("images2");
  testbed::temp_dir dir{"stage"};
  auto cfg = config();
  cfg.gc = false;
  auto second = cfg.hosts[0];
  second.name = "hv2";
  second.pool = "images2";
  cfg.hosts.push_back(second);
  cfg.proxies[1].host = "hv2";
  cfg.stage_dir = dir.path() + "/copies";
  BOOST_REQUIRE_MESSAGE(!validate(cfg), render(validate(cfg)));
  http.set({.drip_bytes = 512 * 1024, .drip_interval = 50ms}); // both hosts wait on it
  auto eng = engine::start(*sys, cfg);
  BOOST_REQUIRE(eng);
  stop_on_exit guard{eng};
  bool ready = wait_status(*eng, [](const fleet_status& st) {
    return st.images.size() == 2
           && std::all_of(st.images.begin(), st.images.end(),
                          [](auto& i) { return i.state == image_state::ready; });
  }, 60s);
  auto st = eng->status();
  BOOST_REQUIRE(st);
  for (auto& i : st->images)
    BOOST_TEST_MESSAGE("image " << i.image << "@" << i.host << ": " << to_string(i.state) << " "
                                << i.last_error);
  BOOST_CHECK(ready);
  BOOST_CHECK_EQUAL(http.requests(), 1u);
  auto stem = images::volume_names::of("imgeng", "base", mirror::sha256_hex(image)).data;
  BOOST_CHECK(testbed::read_file(dir.path() + "/copies/" + stem) == image);
  BOOST_CHECK(!eng->stop());
}

BOOST_AUTO_TEST_SUITE_END()
