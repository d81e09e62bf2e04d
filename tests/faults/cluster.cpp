// Node failover with real processes (docs/spec.md 37, 38, 41): a private
// etcd, three hosts (each a private libvirtd serving its test driver behind
// an sshd in a network namespace of its own) and three caf-run nodes that
// share them through leases. The test reads the truth from the outside:
// the owner keys from etcd, the marks from each libvirtd, the rotation from
// each node's GET /rotation, each node's phase from its metrics.
#define BOOST_TEST_MODULE cluster
#include <boost/test/unit_test.hpp>

#include <csignal>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "messages/error.hpp"
#include "providers/etcd/client.hpp"
#include "providers/libvirt/connection.hpp"
#include "providers/libvirt/domains.hpp"
#include "runtime/config_dump.hpp"
#include "testbed/engine_fixture.hpp"
#include "testbed/etcd.hpp"
#include "testbed/http_get.hpp"
#include "testbed/ssh_host.hpp"
#include "testbed/test_config.hpp"
#include "testbed/testbed.hpp"

using namespace egress;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

struct root_required {
  root_required() { testbed::require_root_or_skip(); }
};

constexpr auto ttl = 3s;
const std::string entry = "cluster";

struct host_bed {
  testbed::netns net;
  testbed::libvirtd lv{test::test_driver_daemons::lv_options()};
  testbed::sshd ssh{testbed::sshd_options::in(net)};
  lv::connection_ptr witness; // the test driver drops its domains with its last connection

  host_bed() {
    lv.start();
    ssh.start();
    witness = test::witness(lv.uri("test"));
  }
};

// One caf-run node: its config file, its metrics port, its log.
struct node_run {
  std::string name;
  testbed::temp_dir dir{"node"};
  int metrics_port = 0;
  testbed::process proc;

  std::string log() const { return testbed::read_file(dir.path() + "/caf-run.log"); }
};

// etcd listens on every loopback address, and node i reaches it at
// 127.0.0.<i+2>: a rule that drops one of those addresses cuts one node.
test::etcd_options etcd_everywhere() {
  test::etcd_options o;
  o.client_port = testbed::free_port("127.0.0.1");
  o.extra_args = {"--listen-client-urls=http://0.0.0.0:" + std::to_string(o.client_port)};
  return o;
}

struct bed {
  root_required root;
  test::etcd_server etcd{etcd_everywhere()};
  std::vector<std::unique_ptr<host_bed>> hosts;
  std::vector<std::unique_ptr<node_run>> nodes;
  std::vector<std::string> rules; // iptables rules to remove

  bed() {
    etcd.start();
    for (int i = 0; i < 3; ++i)
      hosts.push_back(std::make_unique<host_bed>());
    for (int i = 0; i < 3; ++i) {
      nodes.push_back(std::make_unique<node_run>());
      nodes.back()->name = "n" + std::to_string(i + 1);
    }
  }

  ~bed() {
    for (auto& r : rules)
      testbed::run({"/bin/sh", "-c", "iptables -w -D OUTPUT " + r});
    for (auto& n : nodes)
      n->proc.stop();
  }

  int etcd_port() const {
    return std::stoi(etcd.endpoint().substr(etcd.endpoint().rfind(':') + 1));
  }

  std::string endpoint_of(size_t i) const {
    return "http://127.0.0." + std::to_string(i + 2) + ":" + std::to_string(etcd_port());
  }

  engine_config config_of(size_t i) {
    auto cfg = test::test_config(entry);
    cfg.node = nodes[i]->name;
    cfg.redial_min = 100ms;
    cfg.redial_max = 400ms;
    cfg.cluster.enabled = true;
    cfg.cluster.etcd = {endpoint_of(i)};
    cfg.cluster.lease_ttl = ttl;
    cfg.cluster.request_timeout = 1s;
    cfg.cluster.unreachable_release = 0s;
    cfg.inspect.enabled = true;
    cfg.inspect.port = 0;
    cfg.inspect.identity_dir = nodes[i]->dir.path() + "/identity";
    cfg.metrics.enabled = true;
    cfg.metrics.port = static_cast<uint32_t>(nodes[i]->metrics_port);
    for (size_t h = 0; h < hosts.size(); ++h) {
      auto name = "hv" + std::to_string(h + 1);
      cfg.hosts.push_back(test::ssh_host(hosts[h]->ssh, hosts[h]->lv, name));
      for (auto p : {"a", "b"})
        cfg.proxies.push_back(test::test_proxy("px-" + std::to_string(h + 1) + p, name));
    }
    BOOST_REQUIRE_MESSAGE(!validate(cfg), render(validate(cfg)));
    return cfg;
  }

  void start_node(size_t i) {
    auto& n = *nodes[i];
    if (n.metrics_port == 0)
      n.metrics_port = testbed::free_port("127.0.0.1");
    auto ini = n.dir.path() + "/engine.ini";
    testbed::write_file(ini, dump_config(config_of(i)));
    n.proc = testbed::process({{EGRESS_CAF_RUN, "--config-file=" + ini}, {},
                               n.dir.path() + "/caf-run.log"});
  }

  void start_all() {
    for (size_t i = 0; i < nodes.size(); ++i)
      start_node(i);
  }

  // The owner keys as etcd holds them: host -> (node, token).
  std::map<std::string, std::pair<std::string, int64_t>> owners() {
    std::map<std::string, std::pair<std::string, int64_t>> out;
    auto c = etcd::client::make({.endpoints = {etcd.endpoint()}});
    if (!c)
      return out;
    auto r = (*c)->range("/egress-engine/" + entry + "/hosts/");
    if (!r)
      return out;
    for (auto& kv : r->kvs)
      out[kv.key.substr(kv.key.rfind('/') + 1)] = {kv.value, kv.create_revision};
    return out;
  }

  // The marks of host h's domains, read from its libvirtd.
  std::map<std::string, domain_mark> marks_on(size_t h) {
    std::map<std::string, domain_mark> out;
    auto marked = lv::list_marked(*hosts[h]->witness, entry);
    BOOST_REQUIRE_MESSAGE(marked, (marked ? std::string{} : render(marked.error())));
    for (auto& d : *marked)
      out[d.name] = d.mark;
    return out;
  }

  // GET /rotation of node i: the names it serves ("" on no answer).
  std::set<std::string> rotation_of(size_t i) {
    std::set<std::string> out;
    auto [code, body] = test::http_get(nodes[i]->metrics_port, "/rotation", 2s);
    if (code != 200)
      return out;
    auto j = nlohmann::json::parse(body, nullptr, false);
    if (j.is_discarded() || !j.contains("proxies"))
      return out;
    for (auto& p : j["proxies"])
      out.insert(p.value("name", ""));
    return out;
  }

  // Node i's phase, from its metrics ("" on no answer).
  std::string phase_of(size_t i) {
    auto [code, body] = test::http_get(nodes[i]->metrics_port, "/metrics", 2s);
    if (code != 200)
      return {};
    for (auto phase : {"joining", "member", "fenced", "stopping"})
      if (body.find(std::string{"egress_cluster_phase{phase=\""} + phase + "\"} 1") != std::string::npos)
        return phase;
    return {};
  }

  bool everything_served(const std::vector<size_t>& by) {
    for (auto i : by)
      if (rotation_of(i).size() != 6)
        return false;
    return owners().size() == 3;
  }

  void cut_from_etcd(size_t i) {
    auto rule = "-d 127.0.0." + std::to_string(i + 2) + " -p tcp --dport "
                + std::to_string(etcd_port()) + " -m comment --comment "
                + testbed::netns::rule_tag() + " -j DROP";
    testbed::run_checked({"/bin/sh", "-c", "iptables -w -I OUTPUT " + rule});
    rules.push_back(rule);
  }

  size_t index_of(const std::string& node) const {
    for (size_t i = 0; i < nodes.size(); ++i)
      if (nodes[i]->name == node)
        return i;
    return SIZE_MAX;
  }

  template <class Pred>
  static bool until(Pred pred, std::chrono::milliseconds max) {
    return test::eventually(pred, max);
  }
};

std::string ms_since(clock_type::time_point t) {
  return std::to_string(
           std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - t).count())
         + " ms";
}

} // namespace

BOOST_FIXTURE_TEST_SUITE(cluster_suite, bed)

BOOST_AUTO_TEST_CASE(spec_38_a_killed_node_s_hosts_are_owned_again_and_its_proxies_back) {
  start_all();
  BOOST_REQUIRE_MESSAGE(until([&] { return everything_served({0, 1, 2}); }, 60s),
                        nodes[0]->log());
  auto before = owners();
  // Every domain carries its host's owner and token.
  for (size_t h = 0; h < 3; ++h) {
    auto [owner, token] = before.at("hv" + std::to_string(h + 1));
    auto marks = marks_on(h);
    BOOST_CHECK_EQUAL(marks.size(), 2u);
    for (auto& [name, m] : marks) {
      BOOST_CHECK_EQUAL(m.owner, owner);
      BOOST_CHECK_EQUAL(m.token, token);
    }
  }
  auto victim = before.at("hv1").first;
  auto v = index_of(victim);
  std::vector<size_t> survivors;
  for (size_t i = 0; i < 3; ++i)
    if (i != v)
      survivors.push_back(i);
  auto uid_before = marks_on(0).at("px-1a").uid;
  nodes[v]->proc.signal(SIGKILL);
  auto killed = clock_type::now();
  BOOST_REQUIRE(until([&] {
    auto o = owners();
    for (auto& [h, x] : o)
      if (x.first == victim)
        return false;
    return o.size() == 3;
  }, 30s));
  BOOST_TEST_MESSAGE("every host of " << victim << " owned again " << ms_since(killed)
                                       << " after kill -9 (TTL " << ttl.count() << " s)");
  BOOST_REQUIRE(until([&] { return everything_served(survivors); }, 30s));
  auto back = clock_type::now() - killed;
  BOOST_TEST_MESSAGE("its proxies back in every survivor's rotation " << ms_since(killed)
                                                                         << " after the kill");
  // TTL + the guard (call budget 5 s + 1 s) + 2 s.
  BOOST_CHECK_LE(back, ttl + 6s + 2s + 4s);
  auto after = owners();
  auto [owner, token] = after.at("hv1");
  BOOST_CHECK_GT(token, before.at("hv1").second);
  for (auto& [name, m] : marks_on(0)) {
    BOOST_CHECK_EQUAL(m.owner, owner);
    BOOST_CHECK_EQUAL(m.token, token);
  }
  BOOST_CHECK_EQUAL(marks_on(0).at("px-1a").uid, uid_before); // adopted, not made again
  // Hosts whose owner did not change kept their token.
  for (auto& [h, x] : before)
    if (x.first != victim)
      BOOST_CHECK_EQUAL(after.at(h).second, x.second);
}

BOOST_AUTO_TEST_CASE(spec_37_a_stopped_node_changes_nothing_it_lost_and_rejoins) {
  start_all();
  BOOST_REQUIRE(until([&] { return everything_served({0, 1, 2}); }, 60s));
  auto before = owners();
  auto victim = before.at("hv2").first;
  auto v = index_of(victim);
  nodes[v]->proc.signal(SIGSTOP);
  BOOST_REQUIRE(until([&] {
    auto o = owners();
    return o.contains("hv2") && o.at("hv2").first != victim;
  }, 30s));
  std::this_thread::sleep_for(2 * ttl);
  auto taken = owners();
  std::map<size_t, std::map<std::string, domain_mark>> marks;
  for (size_t h = 0; h < 3; ++h)
    marks[h] = marks_on(h);
  nodes[v]->proc.signal(SIGCONT);
  // It finds its deadline past: fenced, then a new lease.
  BOOST_CHECK(until([&] { return nodes[v]->log().find("-> fenced") != std::string::npos
                                 || nodes[v]->log().find("-> joining") != std::string::npos; },
                    10s));
  BOOST_CHECK(until([&] { return phase_of(v) == "member"; }, 20s));
  std::this_thread::sleep_for(2s);
  // Nothing it lost was changed by it: every domain is the one the new
  // owner adopted, with the new owner's token (or a newer one).
  for (size_t h = 0; h < 3; ++h) {
    auto now = marks_on(h);
    BOOST_CHECK_EQUAL(now.size(), marks[h].size());
    for (auto& [name, m] : marks[h]) {
      BOOST_CHECK_EQUAL(now[name].uid, m.uid);
      BOOST_CHECK_GE(now[name].token, m.token);
    }
  }
  auto log = nodes[v]->log();
  BOOST_CHECK_MESSAGE(log.find("created uid=") == std::string::npos
                        || log.rfind("created uid=") < log.find("-> fenced"),
                      "the stopped node created a domain after it resumed");
  // It rejoins: the cluster serves everything again.
  BOOST_CHECK(until([&] { return everything_served({0, 1, 2}); }, 40s));
}

BOOST_AUTO_TEST_CASE(spec_37_a_node_cut_from_etcd_stops_before_its_lease_expires) {
  start_all();
  BOOST_REQUIRE(until([&] { return everything_served({0, 1, 2}); }, 60s));
  auto before = owners();
  auto victim = before.at("hv3").first;
  auto v = index_of(victim);
  cut_from_etcd(v);
  auto cut = clock_type::now();
  std::optional<clock_type::time_point> fenced, taken;
  BOOST_REQUIRE(until([&] {
    if (!fenced && phase_of(v) != "member")
      fenced = clock_type::now();
    if (auto o = owners(); !taken && o.contains("hv3") && o.at("hv3").first != victim)
      taken = clock_type::now();
    return fenced && taken;
  }, 30s));
  BOOST_TEST_MESSAGE("cut node stopped " << std::chrono::duration_cast<std::chrono::milliseconds>(
                                              *fenced - cut).count()
                                         << " ms after the cut; its host taken "
                                         << std::chrono::duration_cast<std::chrono::milliseconds>(
                                              *taken - cut).count()
                                         << " ms after");
  BOOST_CHECK(*fenced < *taken);
  BOOST_CHECK_LE(*fenced - cut, ttl);
}

BOOST_AUTO_TEST_CASE(spec_37_etcd_stopped_freezes_management_and_keeps_the_rotation) {
  start_all();
  BOOST_REQUIRE(until([&] { return everything_served({0, 1, 2}); }, 60s));
  etcd.pause();
  BOOST_REQUIRE(until([&] {
    for (size_t i = 0; i < 3; ++i)
      if (phase_of(i) != "fenced")
        return false;
    return true;
  }, 2 * ttl + 5s));
  // No node changes a host: a domain stopped behind the engine's back
  // stays stopped. The rotation is still served by every node.
  BOOST_REQUIRE(!lv::destroy_domain(*hosts[0]->witness, "px-1a"));
  std::this_thread::sleep_for(4s);
  auto r = lv::read_domain(*hosts[0]->witness, "px-1a", {});
  BOOST_REQUIRE(r && r->exists);
  BOOST_CHECK(r->state != domain_state::running);
  for (size_t i = 0; i < 3; ++i)
    BOOST_CHECK_EQUAL(rotation_of(i).size(), 6u);
  etcd.resume();
  // Management resumes: its owner starts it again.
  BOOST_CHECK(until([&] {
    auto x = lv::read_domain(*hosts[0]->witness, "px-1a", {});
    return x && x->state == domain_state::running;
  }, 30s));
  BOOST_CHECK(until([&] {
    for (size_t i = 0; i < 3; ++i)
      if (phase_of(i) != "member")
        return false;
    return true;
  }, 20s));
}

BOOST_AUTO_TEST_SUITE_END()
