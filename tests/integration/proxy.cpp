// The proxy lifecycle through the engine's SSH link to a real libvirtd (its
// test driver: domains "run" without booting, and the daemon, not this
// process, holds their state): adoption after an engine restart, repair of
// an out-of-band destroy, a reload that adds, changes and removes proxies
// with the removed one collected by mark, and the unmarked domain the
// driver ships never touched.
#define BOOST_TEST_MODULE proxy
#include <boost/test/unit_test.hpp>

#include "providers/libvirt/connection.hpp"
#include "providers/libvirt/domains.hpp"
#include "testbed/engine_fixture.hpp"
#include "testbed/ssh_host.hpp"
#include "testbed/testbed.hpp"

using namespace egress;
using namespace std::chrono_literals;

namespace {

struct fixture : test::engine_fixture {
  test::test_driver_daemons d;
  // The daemon's test driver keeps its state while a connection is open:
  // this one holds it across engine restarts, as a real host's disks would.
  lv::connection_ptr witness = test::witness(d.lv.uri("test"));

  engine_config config(const std::vector<std::string>& names) {
    auto cfg = test::test_config("life-ssh");
    cfg.poll_interval = 200ms;
    cfg.gc = true;
    cfg.hosts.push_back(test::ssh_host(d.ssh, d.lv));
    for (auto& n : names)
      cfg.proxies.push_back(test::test_proxy(n, "hv1"));
    return cfg;
  }

  // What the daemon says, asked with virsh (not through the engine).
  std::string state_of(const std::string& name) {
    auto r = lv::read_domain(*witness, name, {});
    if (!r)
      return render(r.error());
    return r->exists ? to_string(r->state) : "missing";
  }
};

std::map<std::string, std::string> uids(const fleet_status& st) {
  std::map<std::string, std::string> out;
  for (auto& p : st.proxies)
    out[p.name] = p.uid;
  return out;
}

} // namespace

BOOST_FIXTURE_TEST_SUITE(lifecycle_ssh_suite, fixture)

BOOST_AUTO_TEST_CASE(spec_16_adopt_repair_reload_and_collect_over_the_ssh_link) {
  std::map<std::string, std::string> first;
  {
    auto eng = engine::start(*sys, config({"ls-1", "ls-2", "ls-3"}));
    test::stop_on_exit guard{eng};
    BOOST_REQUIRE(eng);
    BOOST_REQUIRE(wait_status(*eng, [](auto& st) { return all_running(st, 3); }, 30s));
    first = uids(*eng->status());
    BOOST_REQUIRE(!eng->stop());
  }
  // A new engine adopts all three by their marks, creating nothing.
  auto eng = engine::start(*sys, config({"ls-1", "ls-2", "ls-3"}));
  test::stop_on_exit guard{eng};
  BOOST_REQUIRE(eng);
  BOOST_REQUIRE(wait_status(*eng, [](auto& st) { return all_running(st, 3); }, 30s));
  auto st = *eng->status();
  BOOST_CHECK(uids(st) == first);
  for (auto& p : st.proxies)
    BOOST_CHECK_MESSAGE(p.adopted, p.name);
  // Destroyed behind the engine's back: started again, same VM (same uid).
  BOOST_REQUIRE(!lv::destroy_domain(*witness, "ls-2"));
  BOOST_CHECK(test::eventually([&] { return state_of("ls-2") == "running"; }, 10s));
  BOOST_CHECK(wait_status(*eng, [&](auto& st) {
    return all_running(st, 3) && uids(st) == first;
  }, 10s));
  // Reload: ls-3 removed (collected by mark), ls-2 changed (replaced),
  // ls-4 added; ls-1 untouched.
  auto next = config({"ls-1", "ls-2", "ls-4"});
  next.proxies[1].vcpus = 2;
  auto r = eng->reload(next);
  if (!r)
    BOOST_FAIL(render(r.error()));
  BOOST_CHECK_EQUAL(*r, "proxies +1 -1 ~1");
  BOOST_CHECK(test::eventually([&] { return state_of("ls-3") == "missing"; }, 10s));
  BOOST_REQUIRE(wait_status(*eng, [&](auto& st) {
    auto u = uids(st);
    return all_running(st, 3) && u.count("ls-4") && u["ls-2"] != first["ls-2"]
           && !u["ls-2"].empty();
  }, 10s));
  BOOST_CHECK_EQUAL(uids(*eng->status())["ls-1"], first["ls-1"]);
  BOOST_CHECK_EQUAL(find(*eng->status(), "ls-2")->replaced, 1u);
  // The driver's own domain has no mark: never touched by any of this.
  BOOST_CHECK_EQUAL(state_of("test"), "running");
  BOOST_REQUIRE(!eng->stop());
}

BOOST_AUTO_TEST_SUITE_END()
