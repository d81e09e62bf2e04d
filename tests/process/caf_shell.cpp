// caf-shell against caf-run in another process (the embedded default,
// spawned by the test, its inspector on a free loopback port): ls, show,
// kill-link, watch, reconcile, drain, reload, with --json output parsed back.
#define BOOST_TEST_MODULE caf_shell
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <regex>
#include <thread>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include <caf/scoped_actor.hpp>

#include "testbed/caf_run_process.hpp"
#include "testbed/engine_fixture.hpp"
#include "testbed/testbed.hpp"

using namespace egress;
using namespace std::chrono_literals;
using json = nlohmann::json;
using test::daemon_run;

BOOST_AUTO_TEST_CASE(shell_lists_shows_and_kills_in_another_process_with_json) {
  daemon_run d;
  BOOST_REQUIRE_MESSAGE(d.wait_listening(), d.log());
  json proxies;
  BOOST_REQUIRE(test::eventually([&] {
    auto r = d.shell({"-c", "ls proxies", "--json"});
    if (!r.ok())
      return false;
    proxies = json::parse(r.output);
    if (proxies.size() != 3)
      return false;
    for (auto& p : proxies)
      if (p["state"] != "running")
        return false;
    return true;
  }, 20s));
  for (auto& p : proxies) {
    BOOST_CHECK_EQUAL(p["kind"], "proxy");
    BOOST_CHECK(p["liveness"].get<std::string>().rfind("ok ", 0) == 0);
    BOOST_CHECK(!p["started_at"].get<std::string>().empty());
  }
  auto show = d.shell({"-c", "show proxy egress-2", "--json"});
  BOOST_REQUIRE_MESSAGE(show.ok(), show.output);
  auto one = json::parse(show.output);
  BOOST_CHECK_EQUAL(one["name"], "egress-2");
  BOOST_CHECK_EQUAL(one["details"]["host"], "local");
  BOOST_CHECK(!one["details"]["uid"].get<std::string>().empty());

  // Errors name the object and the reason, and the exit code says so.
  auto missing = d.shell({"-c", "show proxy nope"});
  BOOST_CHECK_EQUAL(missing.exit_code, 1);
  BOOST_CHECK_MESSAGE(missing.output.find("no proxy named \"nope\"") != std::string::npos,
                      missing.output);
  auto bad = d.shell({"-c", "frobnicate"});
  BOOST_CHECK_EQUAL(bad.exit_code, 1);
  BOOST_CHECK(bad.output.find("unknown command \"frobnicate\"") != std::string::npos);

  // kill-link: the link is declared dead at once, and the status says why.
  auto kill = d.shell({"-c", "kill-link local", "--json"});
  BOOST_REQUIRE_MESSAGE(kill.ok(), kill.output);
  auto link = json::parse(kill.output);
  BOOST_CHECK_EQUAL(link["state"], "dead");
  BOOST_CHECK(link["reason"].get<std::string>().find("operator") != std::string::npos);

  auto status = d.shell({"-c", "status", "--json"});
  BOOST_REQUIRE_MESSAGE(status.ok(), status.output);
  auto st = json::parse(status.output);
  BOOST_CHECK_EQUAL(st["entry"], "local-demo");
  BOOST_CHECK_EQUAL(st["proxies"].size(), 3u);

  // The engine stops cleanly with shells having been attached.
  d.proc.signal(SIGINT);
  BOOST_CHECK(test::eventually([&] { return !d.proc.alive(); }, 15s));
  BOOST_CHECK_MESSAGE(d.log().find("stopped cleanly") != std::string::npos, d.log());
}

// watch shows what kill-link did: the link going down with its reason, as
// an event pushed through the middleman to the watching shell.
BOOST_AUTO_TEST_CASE(watch_sees_the_link_down_that_kill_link_caused) {
  daemon_run d;
  BOOST_REQUIRE_MESSAGE(d.wait_listening(), d.log());
  BOOST_REQUIRE(test::eventually([&] {
    auto r = d.shell({"-c", "ls links", "--json"});
    return r.ok() && json::parse(r.output).at(0)["state"] == "up";
  }, 20s));
  auto watch_log = d.dir / "watch.log";
  testbed::process watcher({{EGRESS_CAF_SHELL, d.address, "-c", "watch link", "--for=20"},
                            {},
                            watch_log});
  BOOST_REQUIRE(test::eventually([&] {
    return testbed::read_file(watch_log).find("watching link") != std::string::npos;
  }, 10s));
  std::this_thread::sleep_for(300ms); // the subscription travels to the fleet
  auto kill = d.shell({"-c", "kill-link local"});
  BOOST_REQUIRE_MESSAGE(kill.ok(), kill.output);
  BOOST_CHECK_MESSAGE(test::eventually([&] {
    return testbed::read_file(watch_log).find("link local dead: killed: by operator")
           != std::string::npos;
  }, 10s), testbed::read_file(watch_log));
  // Only links: the filter keeps proxy events out.
  BOOST_CHECK(testbed::read_file(watch_log).find(" proxy ") == std::string::npos);
  watcher.signal(SIGTERM);
  BOOST_CHECK(test::eventually([&] { return !watcher.alive(); }, 5s));
  BOOST_CHECK_EQUAL(WEXITSTATUS(watcher.wait_status().value_or(-1)), 0);
}

// reconcile: one read-back now, outside the (hour-long) poll schedule. The
// count shown moves only with a push: a read that changed nothing is not
// pushed unless an operator asked for it, so the shown count may lag the
// reads made, and the reconcile's read shows as a count above the last one
// shown (tests/unit/proxy_reconcile.cpp pins that it is exactly one read).
BOOST_AUTO_TEST_CASE(reconcile_reads_a_proxy_back_now) {
  daemon_run d;
  BOOST_REQUIRE_MESSAGE(d.wait_listening(), d.log());
  auto shown = [&] {
    auto r = d.shell({"-c", "show proxy egress-1", "--json"});
    return r.ok() ? json::parse(r.output) : json{};
  };
  auto polls = [&] {
    auto p = shown();
    return p.is_null() ? -1 : std::stoi(p["details"]["polls"].get<std::string>());
  };
  // Settled first: running, its create and its start's events read back.
  BOOST_REQUIRE(test::eventually([&] {
    auto p = shown();
    return !p.is_null() && p["state"] == "running";
  }, 20s));
  auto before = polls();
  auto r = d.shell({"-c", "reconcile egress-1", "--json"});
  BOOST_REQUIRE_MESSAGE(r.ok(), r.output);
  BOOST_CHECK_EQUAL(json::parse(r.output)["name"], "egress-1");
  BOOST_CHECK(test::eventually([&] { return polls() > before; }, 10s));
  auto missing = d.shell({"-c", "reconcile nope"});
  BOOST_CHECK_EQUAL(missing.exit_code, 1);
  BOOST_CHECK_MESSAGE(missing.output.find("no proxy named \"nope\"") != std::string::npos,
                      missing.output);
}

// drain keeps a healthy proxy out of the rotation; undrain lets it back.
BOOST_AUTO_TEST_CASE(drain_and_undrain_move_a_proxy_out_of_and_into_the_rotation) {
  daemon_run d;
  BOOST_REQUIRE_MESSAGE(d.wait_listening(), d.log());
  auto rotation = [&] {
    auto r = d.shell({"-c", "status", "--json"});
    return r.ok() ? json::parse(r.output)["rotation"].get<std::vector<std::string>>()
                  : std::vector<std::string>{};
  };
  BOOST_REQUIRE(test::eventually([&] { return rotation().size() == 3; }, 20s));
  auto r = d.shell({"-c", "drain egress-2", "--json"});
  BOOST_REQUIRE_MESSAGE(r.ok(), r.output);
  BOOST_CHECK_EQUAL(json::parse(r.output)["drained"], true);
  BOOST_CHECK(test::eventually([&] {
    return rotation() == std::vector<std::string>{"egress-1", "egress-3"};
  }, 10s));
  auto show = d.shell({"-c", "show proxy egress-2", "--json"});
  BOOST_CHECK_EQUAL(json::parse(show.output)["details"]["drained"], "yes");
  BOOST_REQUIRE(d.shell({"-c", "undrain egress-2"}).ok());
  BOOST_CHECK(test::eventually([&] { return rotation().size() == 3; }, 10s));
  auto missing = d.shell({"-c", "drain nope"});
  BOOST_CHECK_EQUAL(missing.exit_code, 1);
  BOOST_CHECK(missing.output.find("no proxy named \"nope\"") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(shell_reports_an_unreachable_engine) {
  // A port nobody listens on (the daemon's, after it stopped).
  daemon_run d;
  BOOST_REQUIRE_MESSAGE(d.wait_listening(), d.log());
  d.proc.stop();
  auto r = d.shell({"-c", "ls"});
  BOOST_CHECK_EQUAL(r.exit_code, 1);
  BOOST_CHECK_MESSAGE(r.output.find("cannot reach the engine at " + d.address)
                        != std::string::npos, r.output);
}

BOOST_AUTO_TEST_CASE(spec_20_a_non_loopback_inspector_is_refused_without_tls) {
  daemon_run d{"inspect = { address = \"0.0.0.0\", port = 0 }"};
  BOOST_REQUIRE(test::eventually([&] { return !d.proc.alive(); }, 15s));
  auto status = d.proc.wait_status();
  BOOST_REQUIRE(status);
  BOOST_CHECK(WIFEXITED(*status) && WEXITSTATUS(*status) == 2);
  auto log = d.log();
  BOOST_CHECK_MESSAGE(log.find("engine.inspect.address") != std::string::npos, log);
  BOOST_CHECK_MESSAGE(log.find("binding elsewhere requires tls = true") != std::string::npos, log);
}

// reload: the engine re-reads its own file (never a config sent by the
// shell). A file with a typo is refused with the key named and changes
// nothing; a valid change is applied, and only the change.
BOOST_AUTO_TEST_CASE(reload_from_the_shell_applies_the_file_or_refuses_it_whole) {
  daemon_run d;
  BOOST_REQUIRE_MESSAGE(d.wait_listening(), d.log());
  auto proxies = [&] {
    auto r = d.shell({"-c", "ls proxies", "--json"});
    return r.ok() ? json::parse(r.output).size() : size_t{0};
  };
  BOOST_REQUIRE(test::eventually([&] { return proxies() == 3; }, 20s));
  auto ini = d.dir / "engine.ini";
  auto good = testbed::read_file(ini);
  testbed::write_file(ini, std::regex_replace(good, std::regex("poll-interval = 1h"),
                                              "pol-interval = 1h"));
  auto bad = d.shell({"-c", "reload"});
  BOOST_CHECK_EQUAL(bad.exit_code, 1);
  BOOST_CHECK_MESSAGE(bad.output.find("pol-interval") != std::string::npos, bad.output);
  BOOST_CHECK_EQUAL(proxies(), 3u);
  testbed::write_file(ini, std::regex_replace(good, std::regex("tags = \\[\"demo\"\\] \\},\n  \\{ name = \"egress-2\""),
                                              "tags = [\"demo\"] },\n  { name = \"egress-4\", host = \"local\" },\n  { name = \"egress-2\""));
  auto r = d.shell({"-c", "reload", "--json"});
  BOOST_REQUIRE_MESSAGE(r.ok(), r.output + d.log());
  auto applied = json::parse(r.output)["applied"].get<std::string>();
  BOOST_CHECK_MESSAGE(applied.find("+1") != std::string::npos, applied);
  BOOST_CHECK(test::eventually([&] { return proxies() == 4; }, 10s));
}

// `names KIND` prints one name per line, for dist/bash-completion/caf-shell,
// which completes the names of the engine it finds on the command line.
BOOST_AUTO_TEST_CASE(bash_completion_offers_the_attached_engines_names) {
  daemon_run d;
  BOOST_REQUIRE_MESSAGE(d.wait_listening(), d.log());
  auto names = d.shell({"-c", "names proxies"});
  BOOST_REQUIRE_MESSAGE(names.ok(), names.output);
  BOOST_CHECK_EQUAL(names.output, "egress-1\negress-2\negress-3\n");
  auto bad = d.shell({"-c", "names widgets"});
  BOOST_CHECK_EQUAL(bad.exit_code, 1);

  std::string bin = EGRESS_CAF_SHELL;
  bin.erase(bin.rfind('/'));
  auto complete = [&](const std::string& words, int cword) {
    auto script = "PATH=" + bin + ":$PATH; source " + std::string{EGRESS_SOURCE_DIR}
                  + "/dist/bash-completion/caf-shell; COMP_WORDS=(" + words + "); COMP_CWORD="
                  + std::to_string(cword) + "; _caf_shell; printf '%s\\n' \"${COMPREPLY[@]}\"";
    auto r = testbed::run({"bash", "-c", script}, 20s);
    BOOST_REQUIRE_MESSAGE(r.ok(), r.output);
    return r.output;
  };
  auto a = d.address;
  BOOST_CHECK_EQUAL(complete("caf-shell " + a + " -c show proxy egress-", 5),
                    "egress-1\negress-2\negress-3\n");
  BOOST_CHECK_EQUAL(complete("caf-shell " + a + " -c kill-link ''", 4), "local\n");
  BOOST_CHECK_EQUAL(complete("caf-shell " + a + " -c rel", 3), "reload\n");
  BOOST_CHECK_EQUAL(complete("caf-shell " + a + " --js", 2), "--json\n");
}
