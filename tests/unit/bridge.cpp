// The bridge's directory (providers/ssh/bridge.hpp): named after its
// process, and one left by a process that ended without its destructors
// (SIGKILL) is removed by the next bridge opened in the same place.
#define BOOST_TEST_MODULE bridge
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <string>

#include <sys/wait.h>
#include <unistd.h>

#include "messages/error.hpp"
#include "providers/ssh/bridge.hpp"
#include "providers/ssh/kill_switch.hpp"
#include "testbed/testbed.hpp"

using namespace egress;
using egress::ssh::bridge_socket;
using egress::ssh::kill_switch;
namespace fs = std::filesystem;

// Before, a killed caf-run (or a test process) left egress-bridge-XXXXXX
// with its socket in /tmp for good: nothing said whose it was.
BOOST_AUTO_TEST_CASE(a_dead_processs_bridge_directory_goes_with_the_next_bridge) {
  testbed::temp_dir base{"bridge-sweep"};
  pid_t child = ::fork();
  if (child == 0)
    ::_exit(0);
  BOOST_REQUIRE(child > 0);
  ::waitpid(child, nullptr, 0); // its PID names no process now
  auto stale = fs::path{base / ("egress-bridge-" + std::to_string(child) + "-k1lled")};
  fs::create_directory(stale);
  testbed::write_file((stale / "libvirt.sock").string(), "");
  // PID 1 runs: its directory stays, as does anything not named so.
  auto alive = fs::path{base / "egress-bridge-1-running"};
  auto other = fs::path{base / "egress-bridge-notapid"};
  fs::create_directory(alive);
  fs::create_directory(other);

  kill_switch ks;
  auto bridge = bridge_socket::open(base.path(), ks, ec::link_down);
  BOOST_REQUIRE_MESSAGE(bridge, (bridge ? "" : render(bridge.error())));
  BOOST_CHECK(!fs::exists(stale));
  BOOST_CHECK(fs::exists(alive));
  BOOST_CHECK(fs::exists(other));
  auto mine = "egress-bridge-" + std::to_string(::getpid()) + "-";
  BOOST_CHECK_MESSAGE(fs::path{(*bridge)->directory()}.filename().string().starts_with(mine),
                      (*bridge)->directory());
  auto dir = (*bridge)->directory();
  bridge->reset();
  BOOST_CHECK(!fs::exists(dir)); // its own goes with it, as before
}
