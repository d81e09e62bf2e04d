// Several nodes (actors/node): two caf-run processes inspected from one
// shell, and the inspector off loopback behind TLS and the shared secret.
#define BOOST_TEST_MODULE node
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <caf/io/middleman.hpp>
#include <caf/openssl/manager.hpp>
#include <caf/openssl/remote_actor.hpp>
#include <caf/scoped_actor.hpp>

#include "providers/crypto/identity.hpp"
#include "runtime/engine.hpp"
#include "testbed/caf_run_process.hpp"
#include "testbed/engine_fixture.hpp"
#include "testbed/testbed.hpp"

using namespace egress;
using namespace std::chrono_literals;
using json = nlohmann::json;
using test::config_with;
using test::daemon_run;
using test::free_ports;
using test::node_ini;
using test::rss_kib;
using test::tcp_connect;

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
  // The link's own line (actors/host_link.cpp, mark_dead), not caf-run's
  // status table: the table is sampled every 500 ms and a killed link that
  // redials at once may be up again before the next sample.
  BOOST_CHECK_MESSAGE(test::eventually(
    [&] { return b.log().find("hv-b: dead: killed: by operator") != std::string::npos; }, 5s),
    b.log());
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


namespace {

uint16_t port_of(const std::string& address) {
  return static_cast<uint16_t>(std::stoul(address.substr(address.rfind(':') + 1)));
}

} // namespace

// docs/spec.md 24: before, any local user could send the inspector a BASP
// header declaring a 4 GiB payload, and CAF 0.17 allocated and zeroed it
// (four connections: +2.1 GB in 3 s, the inspector silent for ~20 s). Now
// the inspector speaks TLS with certificates checked on both sides, and
// those 32 bytes are a failed handshake: nothing is allocated for them.
BOOST_AUTO_TEST_CASE(spec_24_a_declared_4_gib_payload_allocates_nothing) {
  daemon_run d;
  BOOST_REQUIRE_MESSAGE(d.wait_listening(), d.log());
  auto before = rss_kib(d.proc.pid());
  // CAF 0.17's BASP header, big-endian: operation, two padding bytes,
  // flags, payload length, operation data, source and destination actor.
  std::vector<int> fds;
  for (unsigned char op : {0, 1, 0, 1}) { // server and client handshakes
    unsigned char header[32] = {};
    header[0] = op;
    for (int i = 4; i < 8; ++i)
      header[i] = 0xff; // payload_len: 4 GiB - 1
    header[15] = 1;     // operation data (the BASP version): not zero
    int fd = tcp_connect(port_of(d.address));
    BOOST_REQUIRE(fd >= 0);
    BOOST_REQUIRE(::write(fd, header, sizeof header) == sizeof header);
    fds.push_back(fd);
  }
  std::this_thread::sleep_for(3s);
  auto after = rss_kib(d.proc.pid());
  BOOST_TEST_MESSAGE("RSS " << before << " KiB -> " << after << " KiB");
  BOOST_CHECK_LT(after, before + 16 * 1024);
  auto t0 = std::chrono::steady_clock::now();
  auto ls = d.shell({"-c", "ls links"});
  BOOST_CHECK_MESSAGE(ls.ok(), ls.output);
  BOOST_CHECK_LT(std::chrono::steady_clock::now() - t0, 2s);
  for (int fd : fds)
    ::close(fd);
}

// A party holding a certificate can still send the node actor an exit
// `kill`, which no actor can refuse: caf-run logs it and publishes a new
// node actor on the same port (before, the inspector was gone for good,
// silently). A message no handler takes is one log line, never printed to
// the status table's stream.
BOOST_AUTO_TEST_CASE(spec_24_a_killed_node_actor_is_published_again_and_stray_messages_are_logged) {
  daemon_run d;
  BOOST_REQUIRE_MESSAGE(d.wait_listening(), d.log());
  auto id = crypto::load_identity(crypto::default_identity_dir());
  BOOST_REQUIRE_MESSAGE(id, (id ? std::string{} : render(id.error())));
  caf::actor_system_config cfg;
  configure(cfg);
  cfg.load<caf::io::middleman>();
  cfg.load<caf::openssl::manager>();
  cfg.openssl_certificate = id->certificate;
  cfg.openssl_key = id->key;
  cfg.openssl_cafile = id->ca;
  caf::actor_system sys{cfg};
  auto node = caf::openssl::remote_actor<node_actor>(sys, "127.0.0.1", port_of(d.address));
  BOOST_REQUIRE_MESSAGE(node, (node ? std::string{} : sys.render(node.error())));
  caf::anon_send(caf::actor_cast<caf::actor>(*node), std::string{"\x1b[2Jstray"});
  BOOST_CHECK(test::eventually([&] {
    return d.log().find("dropped 1 unexpected message(s)") != std::string::npos;
  }, 10s));
  BOOST_CHECK_MESSAGE(d.log().find("stray") == std::string::npos, d.log());
  caf::anon_send_exit(*node, caf::exit_reason::kill);
  BOOST_REQUIRE_MESSAGE(test::eventually([&] {
    return d.log().find("publishing a new one on port") != std::string::npos;
  }, 10s), d.log());
  BOOST_CHECK(test::eventually([&] { return d.shell({"-c", "ls links"}).ok(); }, 10s));
  BOOST_CHECK(d.proc.alive());
}
