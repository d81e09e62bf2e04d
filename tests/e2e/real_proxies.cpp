// End to end with real VMs: the appliance (scripts/appliance/build: a Debian
// kernel and a busybox + tinyproxy initramfs) booted under QEMU/TCG by a
// private libvirtd that the engine reaches through its SSH link, on an
// isolated libvirt network in a namespace (testbed/local_host.hpp). The
// engine downloads the appliance from a local HTTP mirror, verifies it,
// uploads it, creates the VMs, finds their leases and probes each proxy by
// sending an HTTP request through it; the suite then sends its own request
// through every proxy, from the host's side, and reads each VM's console.
#define BOOST_TEST_MODULE real_proxies
#include <boost/test/unit_test.hpp>

#include <cstdio>
#include <filesystem>

#include "providers/images/volume_names.hpp"
#include "providers/mirror/sha256.hpp"
#include "providers/provision/proxy_vm.hpp"
#include "testbed/engine_fixture.hpp"
#include "testbed/local_host.hpp"
#include "testbed/testbed.hpp"

using namespace egress;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

struct bed : test::engine_fixture {
  test::vms_required check;
  test::file_mirror mirror{check.app.dir};
  test::local_host host;

  engine_config config(const std::vector<std::string>& names,
                       test::appliance_boot boot = test::appliance_boot::initramfs) {
    std::vector<std::pair<std::string, std::string>> proxies;
    for (auto& n : names)
      proxies.emplace_back(n, host.name());
    auto cfg = test::appliance_config("e2e", check.app, mirror, {&host}, proxies, boot);
    BOOST_REQUIRE_MESSAGE(!validate(cfg), render(validate(cfg)));
    return cfg;
  }

  std::string fetch_through(const std::string& address) { return host.fetch_through(address); }

  /// The guest's own readiness line on its serial console ("" until then).
  std::string ready_line(const std::string& proxy) {
    auto text = testbed::read_file(host.console_log(proxy));
    auto at = text.find("EGRESS READY");
    if (at == std::string::npos)
      return "";
    return text.substr(at, text.find('\n', at) - at);
  }

  /// The guest's uptime when it printed READY: its own boot time.
  double guest_boot_seconds(const std::string& proxy) {
    auto line = ready_line(proxy);
    auto at = line.find("uptime=");
    return at == std::string::npos ? 0 : std::atof(line.c_str() + at + 7);
  }

  /// What a failed wait saw: each proxy, each image, the consoles.
  void dump(engine& eng) {
    auto st = eng.status();
    if (!st)
      return;
    for (auto& p : st->proxies)
      BOOST_TEST_MESSAGE(p.name << " " << to_string(p.phase) << " " << p.address
                                << " rotation=" << p.in_rotation << " last_probe="
                                << p.last_probe << " error=" << p.last_error << "\n  console: "
                                << testbed::detail::tail(
                                     testbed::read_file(host.console_log(p.name)), 5));
    for (auto& i : st->images)
      BOOST_TEST_MESSAGE("image " << i.image << " " << i.host << " " << to_string(i.state) << " " << i.bytes
                                  << " " << i.last_error);
  }

  std::map<std::string, std::string> uids(engine& eng) {
    std::map<std::string, std::string> out;
    if (auto st = eng.status())
      for (auto& p : st->proxies)
        out[p.name] = p.uid;
    return out;
  }
};

const std::vector<std::string> three{"e2e-1", "e2e-2", "e2e-3"};

} // namespace

BOOST_FIXTURE_TEST_SUITE(real_proxies_suite, bed)

// Scenarios 1 and 2 of the e2e suite: from nothing (no image on the host,
// no VM) to three proxies that forward HTTP, then one VM destroyed behind
// the engine's back: noticed, started again, back in the rotation, while
// the other two never leave it.
BOOST_AUTO_TEST_CASE(e2e_three_proxies_from_nothing_then_one_destroyed_out_of_band) {
  auto t0 = clock_type::now();
  auto eng = engine::start(*sys, config(three));
  test::stop_on_exit guard{eng};
  BOOST_REQUIRE(eng);
  auto events = std::make_shared<test::rotation_log>();
  eng->subscribe(sys->spawn(test::rotation_recorder, events));
  bool any = wait_status(*eng, [](auto& st) { return !st.rotation.empty(); }, 90s);
  if (!any)
    dump(*eng);
  BOOST_REQUIRE(any);
  double first = seconds_since(t0);
  bool all = wait_status(*eng, [](auto& st) { return st.rotation.size() == 3; }, 180s);
  double all_in = seconds_since(t0);
  if (!all)
    dump(*eng);
  BOOST_REQUIRE(all);
  auto st = *eng->status();
  double boot = 0;
  for (auto& p : st.proxies) {
    BOOST_CHECK_MESSAGE(p.last_probe.find("HTTP 200") != std::string::npos, p.last_probe);
    auto body = fetch_through(p.address);
    BOOST_CHECK_MESSAGE(body.find("egress target") != std::string::npos,
                        p.name << " via " << p.address << ": [" << body << "]");
    auto line = ready_line(p.name);
    BOOST_CHECK_MESSAGE(line.find("instance=" + p.uid) != std::string::npos, line);
    boot = std::max(boot, guest_boot_seconds(p.name));
  }
  std::printf("e2e: first proxy in rotation %.1f s, all three %.1f s after engine start; "
              "slowest guest boot to READY %.1f s (its own uptime)\n",
              first, all_in, boot);

  // Scenario 2: destroyed out of band.
  auto before = uids(*eng);
  auto r = host.virsh({"destroy", "e2e-2"});
  BOOST_REQUIRE_MESSAGE(r.ok(), r.output);
  auto t1 = clock_type::now();
  BOOST_REQUIRE(wait_status(*eng, [](auto& st) {
    return st.rotation == std::vector<std::string>{"e2e-1", "e2e-3"};
  }, 60s));
  BOOST_REQUIRE(wait_status(*eng, [](auto& st) { return st.rotation.size() == 3; }, 120s));
  std::printf("e2e: destroyed e2e-2 back in rotation after %.1f s\n", seconds_since(t1));
  BOOST_CHECK(uids(*eng) == before); // started again: the same VM, not a new one
  BOOST_CHECK_EQUAL(events->count("e2e-1", false), 0u);
  BOOST_CHECK_EQUAL(events->count("e2e-3", false), 0u);
  BOOST_CHECK_GE(events->count("e2e-2", false), 1u);
  auto back = *find(*eng->status(), "e2e-2");
  BOOST_CHECK(fetch_through(back.address).find("egress target") != std::string::npos);
  BOOST_REQUIRE(!eng->stop());
}

// Invariant 28 with real VMs: while they boot, the proxies wait for their
// addresses without reading their domains on a timer: the link lists the
// network's leases (dnsmasq's, through libvirt) every poll interval and each
// proxy's brief brings its address. A 200 ms poll interval would be dozens
// of reads per proxy over a boot if each still polled.
BOOST_AUTO_TEST_CASE(spec_28_e2e_waiting_proxies_get_their_leases_from_the_link) {
  const std::vector<std::string> two{"e2e-lease-1", "e2e-lease-2"};
  auto cfg = config(two);
  cfg.poll_interval = std::chrono::milliseconds(200);
  auto t0 = clock_type::now();
  auto eng = engine::start(*sys, cfg);
  test::stop_on_exit guard{eng};
  BOOST_REQUIRE(eng);
  bool all = wait_status(*eng, [](auto& st) { return st.rotation.size() == 2; }, 180s);
  if (!all)
    dump(*eng);
  BOOST_REQUIRE(all);
  double took = seconds_since(t0);
  caf::scoped_actor self{*sys};
  auto link = test::status_of(self, test::link_of(self, *eng, host.name()));
  auto leases = host.virsh({"net-dhcp-leases", "egress-net"});
  BOOST_REQUIRE_MESSAGE(leases.ok(), leases.output);
  auto st = *eng->status();
  uint64_t polls = 0;
  for (auto& p : st.proxies) {
    polls += p.polls;
    BOOST_CHECK_MESSAGE(leases.output.find(p.address + "/") != std::string::npos,
                        p.name << " at " << p.address << " is not in\n" << leases.output);
    // Its first read, and at most one per lifecycle event of its create.
    BOOST_CHECK_MESSAGE(p.polls <= 5, p.name << " read its domain " << p.polls << " times");
  }
  BOOST_CHECK_GE(link.lease_reads, 1u);
  std::printf("e2e: two proxies in rotation %.1f s after start, poll interval 200 ms: "
              "%llu read(s) of their own, %llu lease list(s) by the link\n",
              took, static_cast<unsigned long long>(polls),
              static_cast<unsigned long long>(link.lease_reads));
  BOOST_REQUIRE(!eng->stop());
}

// Scenario 5 (invariant 16 with real VMs): an engine restart while the VMs
// run. The new engine finds all three by their marks and adopts them:
// nothing is created or restarted (same uid, same QEMU process: the domain
// id only changes when a domain starts), and the rotation is back after
// `rise` probes.
BOOST_AUTO_TEST_CASE(spec_16_e2e_restart_adopts_running_vms_by_their_marks) {
  std::map<std::string, std::string> first, ids;
  auto domid = [&](const std::string& name) {
    auto r = host.virsh({"domid", name});
    return r.ok() ? r.output : "none";
  };
  {
    auto eng = engine::start(*sys, config(three));
    test::stop_on_exit guard{eng};
    BOOST_REQUIRE(eng);
    bool all = wait_status(*eng, [](auto& st) { return st.rotation.size() == 3; }, 180s);
    if (!all)
      dump(*eng);
    BOOST_REQUIRE(all);
    first = uids(*eng);
    for (auto& n : three)
      ids[n] = domid(n);
    BOOST_REQUIRE(!eng->stop());
  }
  auto t0 = clock_type::now();
  auto eng = engine::start(*sys, config(three));
  test::stop_on_exit guard{eng};
  BOOST_REQUIRE(eng);
  bool back = wait_status(*eng, [](auto& st) { return st.rotation.size() == 3; }, 60s);
  if (!back)
    dump(*eng);
  BOOST_REQUIRE(back);
  std::printf("e2e: after an engine restart, all three adopted and in rotation in %.1f s\n",
              seconds_since(t0));
  BOOST_CHECK(uids(*eng) == first);
  auto st = *eng->status(); // a copy: ranging over the temporary would dangle
  for (auto& p : st.proxies) {
    BOOST_CHECK_MESSAGE(p.adopted, p.name << " was not adopted");
    BOOST_CHECK_EQUAL(p.replaced, 0u);
    BOOST_CHECK_EQUAL(domid(p.name), ids[p.name]);
    BOOST_CHECK(fetch_through(p.address).find("egress target") != std::string::npos);
  }
  BOOST_REQUIRE(!eng->stop());
}

// Invariant 8 when the pool loses an image behind the engine's back (an
// operator's cleanup, a host's disk replaced): the cached kernel's file is
// removed from the pool directory while the proxy runs, then its VM is
// destroyed (the engine starts the defined domain again), and the second
// time destroyed and undefined (the engine creates it). Both steps fail on
// the missing kernel; the engine finds the volume gone (transient/
// image_gone), forgets the image as ready, fetches and verifies it again and
// boots the proxy from it, with no restart. Before, the image stayed
// "ready" in the engine and every attempt failed on the missing file for as
// long as it ran.
BOOST_AUTO_TEST_CASE(spec_08_e2e_a_cached_kernel_removed_from_the_pool_is_fetched_again) {
  auto eng = engine::start(*sys, config({"e2e-gone"}));
  test::stop_on_exit guard{eng};
  BOOST_REQUIRE(eng);
  bool in = wait_status(*eng, [](auto& st) { return st.rotation.size() == 1; }, 180s);
  if (!in)
    dump(*eng);
  BOOST_REQUIRE(in);
  auto kernel = images::volume_names::of("e2e", "appliance-kernel", check.app.kernel_sha256);
  auto transfers = [&] {
    uint64_t n = 0;
    if (auto st = eng->status())
      for (auto& i : st->images)
        if (i.image == "appliance-kernel")
          n = i.transfers;
    return n;
  };
  BOOST_REQUIRE_EQUAL(transfers(), uint64_t{1});
  const std::vector<std::vector<std::string>> losses{{"destroy"}, {"destroy", "undefine"}};
  for (auto& verbs : losses) {
    BOOST_TEST_MESSAGE("kernel removed, then virsh " << verbs.back());
    BOOST_REQUIRE(std::filesystem::remove(host.pool_dir() + "/" + kernel.data));
    for (auto& verb : verbs) {
      auto r = host.virsh({verb, "e2e-gone"});
      BOOST_REQUIRE_MESSAGE(r.ok(), r.output);
    }
    auto t0 = clock_type::now();
    BOOST_REQUIRE(wait_status(*eng, [](auto& st) { return st.rotation.empty(); }, 60s));
    bool back = wait_status(*eng, [](auto& st) { return st.rotation.size() == 1; }, 180s);
    if (!back)
      dump(*eng);
    BOOST_REQUIRE(back);
    std::printf("e2e: kernel removed from the pool, VM %s: back in rotation after %.1f s\n",
                verbs.back() == "destroy" ? "destroyed" : "undefined", seconds_since(t0));
    auto p = *find(*eng->status(), "e2e-gone");
    BOOST_CHECK(fetch_through(p.address).find("egress target") != std::string::npos);
  }
  BOOST_CHECK_EQUAL(transfers(), uint64_t{3});
  testbed::temp_dir out{"kernel-check"};
  auto r = host.virsh({"vol-download", "--pool", "egress", kernel.data, out / "vmlinux"});
  BOOST_REQUIRE_MESSAGE(r.ok(), r.output);
  BOOST_CHECK_EQUAL(mirror::sha256_hex(testbed::read_file(out / "vmlinux")),
                    check.app.kernel_sha256);
  BOOST_REQUIRE(!eng->stop());
}

// The disk appliance (docs/spec.md 23): two proxies boot with root= on
// their qcow2 overlays of one cached, compressed qcow2 base and forward HTTP
// through the rotation. Then, with the VMs stopped: the base read back from
// the pool still has the configured digest (nothing wrote into it), and the
// file each guest wrote on its root filesystem is in its own overlay only.
BOOST_AUTO_TEST_CASE(spec_23_e2e_two_proxies_boot_from_qcow2_overlays_on_one_cached_base) {
  const std::vector<std::string> two{"e2e-disk-1", "e2e-disk-2"};
  auto t0 = clock_type::now();
  auto eng = engine::start(*sys, config(two, test::appliance_boot::disk));
  test::stop_on_exit guard{eng};
  BOOST_REQUIRE(eng);
  bool all = wait_status(*eng, [](auto& st) { return st.rotation.size() == 2; }, 240s);
  if (!all)
    dump(*eng);
  BOOST_REQUIRE(all);
  std::printf("e2e: two proxies on qcow2 overlays in rotation %.1f s after engine start\n",
              seconds_since(t0));
  auto st = *eng->status();
  std::map<std::string, std::string> uid;
  for (auto& p : st.proxies) {
    uid[p.name] = p.uid;
    BOOST_CHECK(fetch_through(p.address).find("egress target") != std::string::npos);
    auto line = ready_line(p.name);
    BOOST_CHECK_MESSAGE(line.find("root=disk") != std::string::npos, line);
    BOOST_CHECK_MESSAGE(line.find("instance=" + p.uid) != std::string::npos, line);
  }
  BOOST_REQUIRE(!eng->stop());
  for (auto& n : two)
    BOOST_CHECK(host.virsh({"destroy", n}).ok());

  auto base = images::volume_names::of("e2e", "appliance-disk", check.app.disk_sha256).data;
  testbed::temp_dir out{"disk-check"};
  auto r = host.virsh({"vol-download", "--pool", "egress", base, out / "base.qcow2"});
  BOOST_REQUIRE_MESSAGE(r.ok(), r.output);
  BOOST_CHECK_EQUAL(mirror::sha256_hex(testbed::read_file(out / "base.qcow2")),
                    check.app.disk_sha256);
  // What a guest sees of a disk, as a raw filesystem; debugfs reads a file.
  auto written = [&](const std::string& image) {
    auto raw = out / "fs.raw";
    testbed::run_checked({"/usr/bin/qemu-img", "convert", "-U", "-O", "raw", image, raw}, 120s);
    // debugfs's banner and errors come with the file: the caller looks for
    // a uid, or for the lookup's failure.
    auto cat = testbed::run({"/usr/sbin/debugfs", "-R", "cat /var/lib/egress/instance", raw});
    std::filesystem::remove(raw);
    return cat.output;
  };
  auto in_base = written(out / "base.qcow2");
  BOOST_CHECK_MESSAGE(in_base.find("File not found") != std::string::npos, in_base);
  for (auto& n : two) {
    auto disk = host.pool_dir() + "/" + provision::proxy_volumes::of("e2e", n).disk;
    auto text = written(disk);
    BOOST_CHECK_MESSAGE(text.find(uid[n]) != std::string::npos, n << " wrote [" << text << "]");
    for (auto& other : two)
      if (other != n)
        BOOST_CHECK(text.find(uid[other]) == std::string::npos);
  }
}

BOOST_AUTO_TEST_SUITE_END()
