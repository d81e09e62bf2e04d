// caf-shell against engines: one in another process (caf-run on the
// embedded default, spawned by the test, its inspector on a free loopback
// port), with --json output parsed back; and one in this process, where an
// actor that does not answer must show as "no reply" within the liveness
// timeout instead of holding up the listing.
#define BOOST_TEST_MODULE caf_shell
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <regex>
#include <sstream>
#include <set>
#include <map>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <caf/blocking_actor.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/admission.hpp"
#include "actors/health.hpp"
#include "actors/inspector.hpp"
#include "providers/crypto/secret.hpp"
#include "support/engine_fixture.hpp"
#include "support/testbed.hpp"

using namespace egress;
using namespace std::chrono_literals;
using json = nlohmann::json;

namespace {

const std::string default_ini = std::string{EGRESS_SOURCE_DIR} + "/config/default.ini";

/// default.ini with extra [engine] lines (its relative paths resolve
/// against its own directory, so the copy goes next to it... no: into a
/// temp dir, with test-node made absolute).
std::string config_with(testbed::temp_dir& dir, const std::string& extra) {
  auto text = testbed::read_file(default_ini);
  text = std::regex_replace(text, std::regex("test-node = \"testnode.xml\""),
                            "test-node = \"" + std::string{EGRESS_SOURCE_DIR}
                              + "/config/testnode.xml\"");
  text = std::regex_replace(text, std::regex("\\[engine\\]\n"), "[engine]\n" + extra + "\n");
  // Polls only on request: a test can tell a reconcile from the schedule.
  text = std::regex_replace(text, std::regex("poll-interval = 1s"), "poll-interval = 1h");
  auto path = dir / "engine.ini";
  testbed::write_file(path, text);
  return path;
}

/// caf-run as a child; its log shows the inspector's port.
struct daemon_run {
  testbed::temp_dir dir{"shell"};
  testbed::process proc;
  std::string address;

  explicit daemon_run(const std::string& extra = "inspect = { port = 0 }") {
    start(config_with(dir, extra));
  }
  /// caf-run on a whole configuration text (its paths absolute).
  struct text {
    std::string ini;
  };
  /// `prefix` runs it elsewhere (ip netns exec NAME).
  explicit daemon_run(const text& t, std::vector<std::string> prefix = {}) {
    auto ini = dir / "engine.ini";
    testbed::write_file(ini, t.ini);
    start(ini, std::move(prefix));
  }
  void start(const std::string& ini, std::vector<std::string> argv = {}) {
    argv.insert(argv.end(), {EGRESS_CAF_RUN, "--config-file=" + ini});
    proc = testbed::process({argv, {}, dir / "caf-run.log"});
  }
  ~daemon_run() { proc.stop(); }

  std::string log() const { return testbed::read_file(dir / "caf-run.log"); }

  /// The metrics endpoint's port, from the log (0 until it listens).
  int metrics_port() const {
    static const std::regex re("metrics listening: http://127.0.0.1:([0-9]+)/metrics");
    std::smatch m;
    auto text = log();
    return std::regex_search(text, m, re) ? std::stoi(m[1]) : 0;
  }

  bool wait_listening() {
    static const std::regex re("inspector listening: caf-shell ([0-9.]+:[0-9]+)");
    return test::eventually([&] {
      std::smatch m;
      auto text = log();
      if (!std::regex_search(text, m, re))
        return false;
      address = m[1];
      return true;
    }, 20s);
  }

  testbed::run_result shell(std::vector<std::string> args) {
    std::vector<std::string> argv{EGRESS_CAF_SHELL, address};
    argv.insert(argv.end(), args.begin(), args.end());
    return testbed::run(argv, 20s);
  }
};

/// Two distinct loopback ports that were free a moment ago (the kernel's
/// picks for port 0, both held until both are picked).
std::pair<int, int> free_ports() {
  int fds[2];
  int ports[2];
  for (int i = 0; i < 2; ++i) {
    fds[i] = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    BOOST_REQUIRE(::bind(fds[i], reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
    BOOST_REQUIRE(::getsockname(fds[i], reinterpret_cast<sockaddr*>(&sa), &len) == 0);
    ports[i] = ntohs(sa.sin_port);
  }
  for (int fd : fds)
    ::close(fd);
  return {ports[0], ports[1]};
}

/// One node of several: its own host (on the test driver) and two proxies,
/// its inspector on `port`, the other node's at `peer`.
daemon_run::text node_ini(const std::string& node, int port, int peer, const std::string& host) {
  auto n = std::string{"px-"} + node.back();
  return {"[engine]\nentry = \"multi\"\nnode = \"" + node + "\"\npeers = [\"127.0.0.1:"
          + std::to_string(peer) + "\"]\npoll-interval = 1h\nprobe = { mode = \"off\" }\n"
          + "inspect = { port = " + std::to_string(port) + " }\nmetrics = { enabled = false }\n"
          + "hosts = [ { name = \"" + host + "\", test-node = \"" + EGRESS_SOURCE_DIR
          + "/config/testnode.xml\", pool = \"default\", network = \"default\" } ]\n"
          + "proxies = [ { name = \"" + n + "-1\", host = \"" + host + "\" }, { name = \"" + n
          + "-2\", host = \"" + host + "\" } ]\n"};
}

/// A plain HTTP/1.1 request to 127.0.0.1:port: (status code, body).
std::pair<int, std::string> http_get(int port, const std::string& path) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    ::close(fd);
    return {0, ""};
  }
  auto req = "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  if (::write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    ::close(fd);
    return {0, ""};
  }
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;)
    out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  auto sp = out.find(' ');
  auto body = out.find("\r\n\r\n");
  if (sp == std::string::npos || body == std::string::npos)
    return {0, out};
  return {std::stoi(out.substr(sp + 1, 3)), out.substr(body + 4)};
}

/// Prometheus text format 0.0.4, parsed strictly enough to catch a broken
/// exposition: every sample's family has HELP and TYPE first, names and
/// labels are well formed, values are numbers. Returns "name{labels}" ->
/// value.
std::map<std::string, double> parse_exposition(const std::string& text) {
  static const std::regex sample_re(
    R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="(\\.|[^"\\])*"(,[a-zA-Z_][a-zA-Z0-9_]*="(\\.|[^"\\])*")*)?\})? ([-+0-9.eEInfa]+)$)");
  std::map<std::string, double> out;
  std::set<std::string> helped, typed;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# HELP ", 0) == 0) {
      helped.insert(line.substr(7, line.find(' ', 7) - 7));
      continue;
    }
    if (line.rfind("# TYPE ", 0) == 0) {
      typed.insert(line.substr(7, line.find(' ', 7) - 7));
      continue;
    }
    std::smatch m;
    BOOST_REQUIRE_MESSAGE(std::regex_match(line, m, sample_re), "not a sample: " + line);
    auto name = m[1].str();
    auto family = std::regex_replace(name, std::regex("_(bucket|sum|count)$"), "");
    BOOST_CHECK_MESSAGE(helped.contains(name) || helped.contains(family), "no HELP: " + line);
    BOOST_CHECK_MESSAGE(typed.contains(name) || typed.contains(family), "no TYPE: " + line);
    out[name + m[2].str()] = std::stod(m[7].str());
  }
  return out;
}

} // namespace

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

// reconcile: one read-back now, outside the (hour-long) poll schedule.
BOOST_AUTO_TEST_CASE(reconcile_reads_a_proxy_back_now) {
  daemon_run d;
  BOOST_REQUIRE_MESSAGE(d.wait_listening(), d.log());
  auto polls = [&] {
    auto r = d.shell({"-c", "show proxy egress-1", "--json"});
    return r.ok() ? std::stoi(json::parse(r.output)["details"]["polls"].get<std::string>()) : -1;
  };
  BOOST_REQUIRE(test::eventually([&] { return polls() >= 1; }, 20s));
  auto before = polls();
  auto r = d.shell({"-c", "reconcile egress-1", "--json"});
  BOOST_REQUIRE_MESSAGE(r.ok(), r.output);
  BOOST_CHECK_EQUAL(json::parse(r.output)["name"], "egress-1");
  BOOST_CHECK(test::eventually([&] { return polls() == before + 1; }, 10s));
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

// In process: the inspector over a directory with one actor that is stuck in
// a handler (a detached actor sleeping, as one blocked in a libvirt call
// would) and one that answers. The listing comes back within the liveness
// timeout plus slack, with the stuck one as "no reply".
namespace {

caf::behavior stub_fleet(caf::event_based_actor*, std::vector<directory_entry> dir) {
  return {[dir](atom::ls) { return dir; }};
}

} // namespace

BOOST_FIXTURE_TEST_CASE(spec_19_a_wedged_actor_shows_as_no_reply_within_the_timeout,
                        test::engine_fixture) {
  auto wedged = sys->spawn<caf::detached>([](caf::blocking_actor* self) {
    self->receive([](int) {}); // the first message it gets: sleeps in the handler
    std::this_thread::sleep_for(3s);
  });
  caf::anon_send(wedged, 1);
  auto fine = sys->spawn([]() -> caf::behavior { return {[](int) {}}; });
  std::vector<directory_entry> dir;
  dir.push_back({{"proxy", "stuck", "running", "", "", {}, ""}, wedged});
  dir.push_back({{"proxy", "fine", "running", "", "", {}, ""}, fine});
  auto fleet = caf::actor_cast<fleet_actor>(sys->spawn(stub_fleet, dir));
  auto insp = sys->spawn(make_inspector, fleet, caf::timespan{300ms}, config_source{});
  caf::scoped_actor self{*sys};
  auto t0 = std::chrono::steady_clock::now();
  std::vector<actor_entry> got;
  self->request(insp, 5s, atom::ls_v, std::string{"proxy"})
    .receive([&](std::vector<actor_entry>& xs) { got = std::move(xs); },
             [&](caf::error& err) { BOOST_FAIL(render(err)); });
  auto took = std::chrono::steady_clock::now() - t0;
  BOOST_REQUIRE_EQUAL(got.size(), 2u);
  BOOST_CHECK_EQUAL(got[0].liveness, "no reply within 300 ms");
  BOOST_CHECK(got[1].liveness.rfind("ok ", 0) == 0);
  BOOST_CHECK(took < 2s); // generous: the point is that it is not the 3 s sleep
  std::vector<caf::actor> all{caf::actor_cast<caf::actor>(insp),
                              caf::actor_cast<caf::actor>(fleet), fine};
  for (auto& a : all)
    caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  self->wait_for(wedged);
}

// ls calls: the inspector asks each link and image for its detached calls
// and lists them together; an owner that does not answer is one entry
// saying so, within the liveness timeout.
BOOST_FIXTURE_TEST_CASE(ls_calls_gathers_the_owners_calls_and_names_a_wedged_owner,
                        test::engine_fixture) {
  auto owner = sys->spawn([]() -> caf::behavior {
    return {[](atom::ls) {
      actor_entry c{"call", "hv1#42", "abandoned, thread still running", "", "busy (detached)",
                    {"call: define px-1", "host: hv1"}, ""};
      return std::vector<actor_entry>{c};
    }};
  });
  auto wedged = sys->spawn<caf::detached>([](caf::blocking_actor* self) {
    self->receive([](int) {});
    std::this_thread::sleep_for(2s);
  });
  caf::anon_send(wedged, 1);
  std::vector<directory_entry> dir;
  dir.push_back({{"link", "hv1", "up", "", "", {}, ""}, owner});
  dir.push_back({{"image", "base@hv2", "fetching", "", "", {}, ""}, wedged});
  dir.push_back({{"proxy", "px-1", "running", "", "", {}, ""}, owner});
  auto fleet = caf::actor_cast<fleet_actor>(sys->spawn(stub_fleet, dir));
  auto insp = sys->spawn(make_inspector, fleet, caf::timespan{300ms}, config_source{});
  caf::scoped_actor self{*sys};
  std::vector<actor_entry> got;
  self->request(insp, 5s, atom::ls_v, std::string{"call"})
    .receive([&](std::vector<actor_entry>& xs) { got = std::move(xs); },
             [&](caf::error& err) { BOOST_FAIL(render(err)); });
  BOOST_REQUIRE_EQUAL(got.size(), 2u);
  std::sort(got.begin(), got.end(), [](auto& a, auto& b) { return a.name < b.name; });
  BOOST_CHECK_EQUAL(got[0].name, "hv1#42");
  BOOST_CHECK_EQUAL(got[0].state, "abandoned, thread still running");
  BOOST_CHECK_EQUAL(got[1].name, "image base@hv2");
  BOOST_CHECK_EQUAL(got[1].state, "unknown: its owner did not list them");
  BOOST_CHECK_EQUAL(got[1].liveness, "no reply within 300 ms");
  // "ls" of everything includes the calls beside the actors.
  self->request(insp, 5s, atom::ls_v, std::string{})
    .receive([&](std::vector<actor_entry>& xs) { got = std::move(xs); },
             [&](caf::error& err) { BOOST_FAIL(render(err)); });
  BOOST_CHECK_EQUAL(got.size(), 5u);
  for (auto a : {caf::actor_cast<caf::actor>(insp), caf::actor_cast<caf::actor>(fleet), owner})
    caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  self->wait_for(wedged);
}

// ls calls lists the health actor's probe batches too: a "proxy" that
// accepts and never answers keeps its batch's detached call in flight for
// the probe timeout, and the health actor lists it with its job and host.
BOOST_FIXTURE_TEST_CASE(ls_calls_lists_the_health_actors_probe_batches, test::engine_fixture) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  BOOST_REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
  BOOST_REQUIRE(::listen(fd, 8) == 0); // accepts (the kernel does), never answers
  BOOST_REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) == 0);
  health_options o;
  o.probe.mode = "http";
  o.probe.target = "http://egress.test/";
  o.probe.timeout = 3s;
  o.probe.interval = 5s;
  o.prober_for = [](const std::string&) { return probe::direct_tcp(); };
  auto health = sys->spawn(make_health, o);
  proxy_status px;
  px.name = "px-silent";
  px.host = "hv1";
  px.phase = proxy_phase::running;
  px.address = "127.0.0.1:" + std::to_string(ntohs(sa.sin_port));
  caf::anon_send(health, px);
  caf::scoped_actor self{*sys};
  std::vector<actor_entry> calls;
  BOOST_CHECK(test::eventually([&] {
    self->request(health, 2s, atom::ls_v)
      .receive([&](std::vector<actor_entry>& xs) { calls = std::move(xs); },
               [&](caf::error& err) { BOOST_FAIL(render(err)); });
    return calls.size() == 1;
  }, 5s));
  if (calls.size() == 1) {
    BOOST_CHECK_EQUAL(calls[0].kind, "call");
    auto& d = calls[0].details;
    BOOST_CHECK(std::find(d.begin(), d.end(), "call: probe 1 proxy(ies)") != d.end());
    BOOST_CHECK(std::find(d.begin(), d.end(), "host: hv1") != d.end());
    BOOST_CHECK(std::find(d.begin(), d.end(), "owner: health") != d.end());
  }
  caf::anon_send_exit(health, caf::exit_reason::user_shutdown);
  self->wait_for(health);
  ::close(fd);
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

// The Prometheus endpoint of a caf-run in another process: scraped over
// HTTP and parsed; the proxies, the rotation and the reconcile histogram
// show the running demo, and a kill-link shows up as a death by its cause.
BOOST_AUTO_TEST_CASE(metrics_endpoint_is_scraped_and_parsed) {
  daemon_run d;
  BOOST_REQUIRE_MESSAGE(d.wait_listening(), d.log());
  BOOST_REQUIRE(test::eventually([&] { return d.metrics_port() != 0; }, 10s));
  auto port = d.metrics_port();
  std::map<std::string, double> m;
  BOOST_REQUIRE(test::eventually([&] {
    auto [code, body] = http_get(port, "/metrics");
    if (code != 200)
      return false;
    m = parse_exposition(body);
    return m["egress_proxies{phase=\"running\"}"] == 3 && m["egress_rotation_size"] == 3
           && m["egress_reconcile_duration_seconds_count"] >= 3;
  }, 20s));
  BOOST_CHECK_EQUAL(m["egress_link_state{host=\"local\",state=\"up\"}"], 1);
  // Histogram buckets are cumulative and end at the count.
  BOOST_CHECK_EQUAL(m["egress_reconcile_duration_seconds_bucket{le=\"+Inf\"}"],
                    m["egress_reconcile_duration_seconds_count"]);
  BOOST_CHECK_LE(m["egress_reconcile_duration_seconds_bucket{le=\"0.001\"}"],
                 m["egress_reconcile_duration_seconds_bucket{le=\"10\"}"]);
  BOOST_REQUIRE(d.shell({"-c", "kill-link local"}).ok());
  BOOST_CHECK(test::eventually([&] {
    auto [code, body] = http_get(port, "/metrics");
    if (code != 200)
      return false;
    m = parse_exposition(body);
    return m["egress_link_deaths_total{host=\"local\",cause=\"killed\"}"] == 1;
  }, 10s));
  BOOST_CHECK_EQUAL(http_get(port, "/").first, 404);
}

BOOST_AUTO_TEST_CASE(spec_20_a_non_loopback_metrics_endpoint_is_refused) {
  daemon_run d{"metrics = { address = \"0.0.0.0\", port = 0 }"};
  BOOST_REQUIRE(test::eventually([&] { return !d.proc.alive(); }, 15s));
  auto status = d.proc.wait_status();
  BOOST_REQUIRE(status);
  BOOST_CHECK(WIFEXITED(*status) && WEXITSTATUS(*status) == 2);
  BOOST_CHECK_MESSAGE(d.log().find("engine.metrics.address") != std::string::npos, d.log());
}

// Several nodes: two caf-run processes, each owning its own host, peers of
// each other through the middleman. A shell attached to either one lists
// both nodes' actors; a command goes to the node that owns the name; a node
// killed with SIGKILL is reported down (to a watch, and by ls nodes) while
// the other keeps running and answering for itself within the node timeout.
BOOST_AUTO_TEST_CASE(spec_22_two_nodes_inspected_from_one_shell_and_one_killed) {
  auto [pa, pb] = free_ports();
  daemon_run a{node_ini("node-a", pa, pb, "hv-a")};
  daemon_run b{node_ini("node-b", pb, pa, "hv-b")};
  BOOST_REQUIRE_MESSAGE(a.wait_listening(), a.log());
  BOOST_REQUIRE_MESSAGE(b.wait_listening(), b.log());
  auto nodes_of = [](daemon_run& d) {
    std::map<std::string, json> out;
    auto r = d.shell({"-c", "ls nodes", "--json"});
    if (r.ok())
      for (auto& e : json::parse(r.output))
        out[e["name"].get<std::string>()] = e;
    return out;
  };
  // Each dials the other (the later one finds the earlier at once, the
  // earlier redials with backoff).
  BOOST_REQUIRE_MESSAGE(test::eventually([&] {
    auto na = nodes_of(a), nb = nodes_of(b);
    return na.contains("node-b") && na["node-b"]["state"] == "up" && nb.contains("node-a")
           && nb["node-a"]["state"] == "up";
  }, 30s), a.log() + b.log());

  for (auto* d : {&a, &b}) {
    std::map<std::string, std::set<std::string>> seen; // node -> "kind name"
    BOOST_REQUIRE(test::eventually([&] {
      auto r = d->shell({"-c", "ls", "--json"});
      if (!r.ok())
        return false;
      seen.clear();
      for (auto& e : json::parse(r.output))
        if (e["kind"] != "proxy" || e["state"] == "running")
          seen[e["node"].get<std::string>()].insert(e["kind"].get<std::string>() + " "
                                                    + e["name"].get<std::string>());
      return seen["node-a"].size() == 5 && seen["node-b"].size() == 5;
    }, 20s));
    for (auto x : {"link hv-a", "proxy px-a-1", "proxy px-a-2", "health health", "node node-a"})
      BOOST_CHECK_MESSAGE(seen["node-a"].contains(x), x);
    for (auto x : {"link hv-b", "proxy px-b-1", "proxy px-b-2", "health health", "node node-b"})
      BOOST_CHECK_MESSAGE(seen["node-b"].contains(x), x);
  }
  auto show = a.shell({"-c", "show proxy px-b-2", "--json"});
  BOOST_REQUIRE_MESSAGE(show.ok(), show.output);
  BOOST_CHECK_EQUAL(json::parse(show.output)["node"], "node-b");

  // Commands go to the node that owns the name; a name no node owns says
  // which nodes were asked.
  auto kill = a.shell({"-c", "kill-link hv-b", "--json"});
  BOOST_REQUIRE_MESSAGE(kill.ok(), kill.output);
  BOOST_CHECK_EQUAL(json::parse(kill.output)["state"], "dead");
  BOOST_CHECK(test::eventually(
    [&] { return b.log().find("hv-b: dead (killed: by operator)") != std::string::npos; }, 5s));
  auto drain = b.shell({"-c", "drain px-a-1", "--json"});
  BOOST_REQUIRE_MESSAGE(drain.ok(), drain.output);
  BOOST_CHECK_EQUAL(json::parse(drain.output)["drained"], true);
  auto nowhere = a.shell({"-c", "reconcile px-nowhere"});
  BOOST_CHECK_EQUAL(nowhere.exit_code, 1);
  BOOST_CHECK_MESSAGE(nowhere.output.find("no proxy named \"px-nowhere\" on any node (asked "
                                          "node-a, node-b)")
                        != std::string::npos,
                      nowhere.output);

  // A watch on node-a, live before the kill: it shows node-b's events too.
  auto watch_out = a.dir / "watch.out";
  testbed::process watch(
    {{EGRESS_CAF_SHELL, a.address, "-c", "watch", "--for=90", "--json"}, {}, watch_out});
  BOOST_REQUIRE(test::eventually([&] {
    // The reconcile redials the dead link (an event), the kill ends it again.
    a.shell({"-c", "reconcile px-b-1", "-c", "kill-link hv-b"});
    return testbed::read_file(watch_out).find("\"node\":\"node-b\"") != std::string::npos;
  }, 15s));
  auto watch_line = [&](const std::string& a_, const std::string& b_) {
    std::istringstream in(testbed::read_file(watch_out));
    for (std::string line; std::getline(in, line);)
      if (line.find(a_) != std::string::npos && line.find(b_) != std::string::npos)
        return true;
    return false;
  };
  auto ms = [](auto d) {
    return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  };

  // node-b stopped (SIGSTOP): connected but silent. node-a answers for
  // itself at once, lists node-b as not answering within the node timeout,
  // and reports it down once the connection has been silent for 5 s.
  b.proc.signal(SIGSTOP);
  auto t_stop = std::chrono::steady_clock::now();
  auto own = a.shell({"-c", "kill-link hv-a", "--json"});
  auto own_took = std::chrono::steady_clock::now() - t_stop;
  BOOST_REQUIRE_MESSAGE(own.ok(), own.output);
  BOOST_CHECK_EQUAL(json::parse(own.output)["host"], "hv-a");
  BOOST_CHECK_MESSAGE(own_took < 2s, ms(own_took)); // generous: not node-b's 3 s
  auto t_ls = std::chrono::steady_clock::now();
  auto silent = nodes_of(a);
  auto ls_took = std::chrono::steady_clock::now() - t_ls;
  BOOST_REQUIRE(silent.contains("node-b"));
  if (silent["node-b"]["state"] == "up") // not yet closed for silence
    BOOST_CHECK_EQUAL(silent["node-b"]["liveness"], "no reply within 3000 ms");
  BOOST_CHECK_MESSAGE(ls_took < 4500ms, ms(ls_took)); // the 3 s bound, plus slack
  BOOST_CHECK_MESSAGE(test::eventually([&] {
    return nodes_of(a)["node-b"].value("state", "").rfind("down: ", 0) == 0;
  }, 15s), a.log());
  auto silent_down = std::chrono::steady_clock::now() - t_stop;
  b.proc.signal(SIGCONT);
  BOOST_REQUIRE_MESSAGE(test::eventually([&] {
    return nodes_of(a)["node-b"].value("state", "") == "up";
  }, 30s), a.log());

  // node-b killed (SIGKILL): reported down to the watch, listed as down.
  b.proc.signal(SIGKILL);
  auto t_kill = std::chrono::steady_clock::now();
  BOOST_CHECK_MESSAGE(test::eventually([&] {
    return watch_line("\"kind\":\"node\",\"name\":\"node-b\"", "down: connection lost");
  }, 10s), testbed::read_file(watch_out));
  auto killed_down = std::chrono::steady_clock::now() - t_kill;
  auto na = nodes_of(a);
  BOOST_REQUIRE(na.contains("node-b"));
  auto down = na["node-b"];
  BOOST_CHECK_MESSAGE(down.value("state", "").rfind("down: connection lost", 0) == 0, down.dump());
  BOOST_CHECK_EQUAL(down.value("liveness", ""), "unreachable");

  // node-a keeps running and answering for itself, without waiting.
  auto t1 = std::chrono::steady_clock::now();
  auto ls = a.shell({"-c", "ls", "--json"});
  auto took = std::chrono::steady_clock::now() - t1;
  BOOST_REQUIRE_MESSAGE(ls.ok(), ls.output);
  std::set<std::string> left;
  for (auto& e : json::parse(ls.output))
    left.insert(e["node"].get<std::string>() + " " + e["kind"].get<std::string>() + " "
                + e["name"].get<std::string>());
  BOOST_CHECK(left.contains("node-a link hv-a"));
  BOOST_CHECK(left.contains("node-b node node-b"));
  BOOST_CHECK(!left.contains("node-b link hv-b"));
  BOOST_CHECK_MESSAGE(took < 2500ms, ms(took)); // generous (a whole shell): not the 3 s
  BOOST_CHECK(a.proc.alive());
  BOOST_TEST_MESSAGE("stopped node-b: own kill-link " << ms(own_took) << " ms, ls nodes "
                     << ms(ls_took) << " ms, reported down after " << ms(silent_down)
                     << " ms; killed node-b reported down after " << ms(killed_down)
                     << " ms; ls without it " << ms(took) << " ms");
  watch.stop();
  a.proc.signal(SIGINT);
  BOOST_CHECK(test::eventually([&] { return !a.proc.alive(); }, 15s));
  BOOST_CHECK_MESSAGE(a.log().find("stopped cleanly") != std::string::npos, a.log());
}

// Invariant 20, the other half: off loopback, the inspector listens only
// with TLS (certificates of one CA checked on both sides) and the shared
// secret. caf-run runs in a network namespace and binds the namespace's own
// address; the shell reaches it over the veth pair from outside.
namespace {

// A network namespace needs root; the certificates need the openssl tool
// (scripts/install-deps installs it; CI runs as root). Skipped, and said so,
// elsewhere, without skipping the rest of this suite.
boost::test_tools::assertion_result may_use_netns_and_openssl(boost::unit_test::test_unit_id) {
  boost::test_tools::assertion_result r{::geteuid() == 0 && ::access("/usr/bin/openssl", X_OK) == 0};
  if (!r)
    r.message() << "needs root (a network namespace) and /usr/bin/openssl";
  return r;
}

} // namespace

BOOST_AUTO_TEST_CASE(spec_20_off_loopback_the_inspector_needs_tls_and_the_secret,
                     *boost::unit_test::precondition(may_use_netns_and_openssl)) {
  testbed::temp_dir dir{"tls"};
  auto ssl = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "openssl");
    auto r = testbed::run(args, 30s);
    BOOST_REQUIRE_MESSAGE(r.ok(), r.output);
  };
  auto ec_key = std::vector<std::string>{"-newkey", "ec", "-pkeyopt",
                                         "ec_paramgen_curve:prime256v1", "-nodes"};
  auto make_ca = [&](const std::string& n) {
    std::vector<std::string> a{"req", "-x509"};
    a.insert(a.end(), ec_key.begin(), ec_key.end());
    a.insert(a.end(), {"-keyout", dir / (n + ".key"), "-out", dir / (n + ".pem"), "-days", "2",
                       "-subj", "/CN=" + n});
    ssl(a);
  };
  auto make_cert = [&](const std::string& n, const std::string& ca) {
    std::vector<std::string> a{"req"};
    a.insert(a.end(), ec_key.begin(), ec_key.end());
    a.insert(a.end(), {"-keyout", dir / (n + ".key"), "-out", dir / (n + ".csr"), "-subj",
                       "/CN=" + n});
    ssl(a);
    ssl({"x509", "-req", "-in", dir / (n + ".csr"), "-CA", dir / (ca + ".pem"), "-CAkey",
         dir / (ca + ".key"), "-CAcreateserial", "-out", dir / (n + ".pem"), "-days", "2"});
  };
  make_ca("ca");
  make_ca("other-ca");
  make_cert("node", "ca");
  make_cert("shell", "ca");
  make_cert("stranger", "other-ca");
  auto secret = [&](const std::string& name, const std::string& text, int mode) {
    testbed::write_file(dir / name, text);
    ::chmod((dir / name).c_str(), static_cast<mode_t>(mode));
    return dir / name;
  };
  auto good = secret("secret", "correct horse battery staple\n", 0600);
  auto wrong = secret("wrong", "correct horse battery stapler\n", 0600);
  auto loose = secret("loose", "correct horse battery staple\n", 0644);
  testbed::netns ns;
  auto openssl_section = "\n[openssl]\ncertificate = \"" + dir / "node.pem" + "\"\nkey = \""
                         + dir / "node.key" + "\"\ncafile = \"" + dir / "ca.pem" + "\"\n";
  auto node_config = [&](const std::string& inspect, bool with_openssl) {
    testbed::temp_dir scratch{"tls-ini"};
    auto text = testbed::read_file(config_with(scratch, inspect + "\nmetrics = { enabled = false }"));
    return daemon_run::text{text + (with_openssl ? openssl_section : "")};
  };
  auto refused = [&](const daemon_run::text& t, const std::string& expect) {
    auto ini = dir / "refused.ini";
    testbed::write_file(ini, t.ini);
    auto r = testbed::run({EGRESS_CAF_RUN, "--config-file=" + ini, "--dump-config"}, 20s);
    BOOST_CHECK_EQUAL(r.exit_code, 2);
    BOOST_CHECK_MESSAGE(r.output.find(expect) != std::string::npos, r.output);
  };
  auto at = "address = \"" + ns.peer_addr() + "\", port = 0";
  refused(node_config("inspect = { " + at + ", tls = true }", true),
          "binding elsewhere requires tls = true");
  refused(node_config("inspect = { " + at + ", secret-file = \"" + good + "\" }", true),
          "binding elsewhere requires tls = true");
  refused(node_config("inspect = { " + at + ", tls = true, secret-file = \"" + good + "\" }",
                      false),
          "engine.inspect.tls: needs CAF's [openssl] section");
  refused(node_config("inspect = { " + at + ", tls = true, secret-file = \"" + loose + "\" }",
                      true),
          "may be read by others than its owner: chmod 600 it");

  daemon_run d{node_config("inspect = { " + at + ", tls = true, secret-file = \"" + good + "\" }",
                           true),
               ns.exec_prefix()};
  BOOST_REQUIRE_MESSAGE(d.wait_listening(), d.log());
  BOOST_CHECK_EQUAL(d.address.substr(0, d.address.rfind(':')), ns.peer_addr());
  auto tls_as = [&](const std::string& who) {
    return std::vector<std::string>{"--tls-cert=" + dir / (who + ".pem"),
                                    "--tls-key=" + dir / (who + ".key"),
                                    "--tls-ca=" + dir / "ca.pem", "--timeout=3000"};
  };
  auto with = [](std::vector<std::string> a, std::vector<std::string> b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  // The shell with a certificate of the CA and the secret: everything works.
  BOOST_CHECK(test::eventually([&] {
    auto r = d.shell(with(tls_as("shell"),
                          {"--secret-file=" + good, "-c", "ls proxies", "--json"}));
    return r.ok() && json::parse(r.output).size() == 3;
  }, 20s));
  // The wrong secret, or none: the node does not prove the shell's secret,
  // so the shell proves nothing and gets nothing.
  for (auto& s : {std::string{"--secret-file="} + wrong, std::string{"--json"}}) {
    auto r = d.shell(with(tls_as("shell"), {s, "-c", "ls proxies"}));
    BOOST_CHECK_EQUAL(r.exit_code, 1);
    BOOST_CHECK_MESSAGE(r.output.find("refused this shell") != std::string::npos
                          && r.output.find("secret") != std::string::npos
                          && r.output.find("px-") == std::string::npos,
                        r.output);
  }
  // A certificate of another CA, or no TLS at all: no connection (refused
  // in the TLS handshake, or no BASP answer at all).
  for (auto& args : {with(tls_as("stranger"), {"--secret-file=" + good, "-c", "status"}),
                     std::vector<std::string>{"--secret-file=" + good, "--timeout=3000", "-c",
                                              "status"}}) {
    auto r = d.shell(args);
    BOOST_CHECK_EQUAL(r.exit_code, 1);
    BOOST_CHECK_MESSAGE(r.output.find("cannot reach the engine") != std::string::npos
                          || r.output.find("no answer from") != std::string::npos,
                        r.output);
  }
  d.proc.signal(SIGINT);
  BOOST_CHECK(test::eventually([&] { return !d.proc.alive(); }, 15s));
  BOOST_CHECK_MESSAGE(d.log().find("stopped cleanly") != std::string::npos, d.log());
}

// The node actor trusts no sender, only the token a hello gave out: BASP
// lets a connected party name any sender, this node's own actors included
// (a review forged one). Here the most trusted sender there is, an actor of
// the engine's own process, is refused without a token; with the proof of
// the secret it gets one, and a wrong proof or a replayed nonce gets none.
BOOST_FIXTURE_TEST_CASE(spec_20_the_node_answers_tokens_not_senders, test::engine_fixture) {
  auto cfg = test::test_config("tokens");
  cfg.hosts.push_back(test::test_host("hv1"));
  cfg.proxies.push_back(test::test_proxy("tk-1", "hv1"));
  cfg.inspect_secret = "correct horse battery staple";
  auto eng = engine::start(*sys, cfg);
  BOOST_REQUIRE(eng);
  test::stop_on_exit guard{eng};
  caf::scoped_actor self{*sys};
  auto node = eng->node();
  caf::error err;
  std::vector<actor_entry> xs;
  auto ls = [&](const std::string& token) {
    err = caf::error{};
    xs.clear();
    self->request(node, 5s, atom::ls_v, token, std::string{"proxy"}, false)
      .receive([&](std::vector<actor_entry>& r) { xs = std::move(r); },
               [&](caf::error& e) { err = std::move(e); });
  };
  ls("");
  BOOST_CHECK(err == ec::access_denied);
  ls("0123456789abcdef0123456789abcdef");
  BOOST_CHECK(err == ec::access_denied);
  // The hello, as a party that knows `secret`; `reuse` replays a node nonce.
  auto hello = [&](const std::string& secret, std::string reuse = {}) {
    auto mine = crypto::random_hex(16);
    std::string theirs, their_proof, token;
    self->request(node, 5s, atom::hello_v, mine)
      .receive(
        [&](std::string& n, std::string& p) {
          theirs = n;
          their_proof = p;
        },
        [&](caf::error& e) { BOOST_FAIL(render(e)); });
    // The node proves first, with the real secret.
    BOOST_CHECK(their_proof == admission::proof(cfg.inspect_secret, "node", mine, theirs));
    if (!reuse.empty())
      theirs = reuse;
    err = caf::error{};
    self->request(node, 5s, atom::hello_v, theirs, mine,
                  admission::proof(secret, "party", theirs, mine))
      .receive([&](std::string&, std::string& t) { token = t; },
               [&](caf::error& e) { err = std::move(e); });
    return std::pair{token, theirs};
  };
  auto [none, n1] = hello("correct horse battery stapler");
  BOOST_CHECK(none.empty() && err == ec::access_denied);
  auto [token, n2] = hello("correct horse battery staple");
  BOOST_REQUIRE_MESSAGE(!token.empty(), render(err));
  auto [replayed, n3] = hello("correct horse battery staple", n2);
  BOOST_CHECK(replayed.empty() && err == ec::access_denied);
  // A nonce this node never made (no valid MAC) is refused too.
  auto [forged, n4] = hello("correct horse battery staple", "00." + std::to_string(1) + ".00");
  BOOST_CHECK(forged.empty() && err == ec::access_denied);
  // Exit and error messages (which CAF handles before any token could be
  // looked at, and which any connected party can send) do not end it.
  caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
  caf::anon_send(caf::actor_cast<caf::actor>(node), make_error(ec::access_denied, "forged"));
  BOOST_REQUIRE(test::eventually([&] {
    ls(token);
    return !err && xs.size() == 1;
  }, 10s));
  BOOST_CHECK_EQUAL(xs[0].name, "tk-1");
  // Commands, status and reload take the same token.
  self->request(node, 5s, atom::kill_v, std::string{"bogus"}, std::string{"hv1"}, false)
    .receive([&](link_status&) { BOOST_FAIL("killed without a token"); },
             [&](caf::error& e) { BOOST_CHECK(e == ec::access_denied); });
  self->request(node, 5s, atom::status_v, std::string{})
    .receive([&](fleet_status&) { BOOST_FAIL("status without a token"); },
             [&](caf::error& e) { BOOST_CHECK(e == ec::access_denied); });
  self->request(node, 5s, atom::status_v, token)
    .receive([&](fleet_status& st) { BOOST_CHECK_EQUAL(st.entry, "tokens"); },
             [&](caf::error& e) { BOOST_FAIL(render(e)); });
}
