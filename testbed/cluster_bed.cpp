#include "testbed/cluster_bed.hpp"

#include <algorithm>
#include <regex>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "messages/error.hpp"
#include "providers/etcd/client.hpp"
#include "providers/libvirt/domains.hpp"
#include "runtime/config_dump.hpp"
#include "testbed/http_get.hpp"
#include "testbed/ssh_host.hpp"
#include "testbed/test_config.hpp"

namespace egress::test {

using namespace std::chrono_literals;

namespace {

// etcd listens on every loopback address, and node i reaches it at
// 127.0.0.<i+2>: a rule that drops one of those addresses cuts one node.
etcd_options etcd_everywhere() {
  etcd_options o;
  o.client_port = testbed::free_port("127.0.0.1");
  o.extra_args = {"--listen-client-urls=http://0.0.0.0:" + std::to_string(o.client_port)};
  return o;
}

lv::connection_ptr open_witness(const std::string& uri) {
  auto c = lv::connection::open(uri);
  if (!c)
    throw std::runtime_error("cluster bed: " + render(c.error()));
  return *c;
}

} // namespace

cluster_host::cluster_host()
  : lv(test_driver_daemons::lv_options()), ssh(testbed::sshd_options::in(net)) {
  lv.start();
  ssh.start();
  witness = open_witness(lv.uri("test"));
}

std::string cluster_node::log() const {
  return testbed::read_file(dir.path() + "/caf-run.log");
}

cluster_bed::cluster_bed(cluster_bed_options o) : opts(std::move(o)), etcd(etcd_everywhere()) {
  etcd.start();
  for (size_t i = 0; i < opts.hosts; ++i)
    hosts.push_back(std::make_unique<cluster_host>());
  for (size_t i = 0; i < opts.nodes; ++i) {
    nodes.push_back(std::make_unique<cluster_node>());
    nodes.back()->name = "n" + std::to_string(i + 1);
  }
}

cluster_bed::~cluster_bed() {
  for (auto& [i, _] : std::map<size_t, std::string>{rules_})
    heal_from_etcd(i);
  for (auto& n : nodes)
    n->proc.stop();
}

int cluster_bed::etcd_port() const {
  auto e = etcd.endpoint();
  return std::stoi(e.substr(e.rfind(':') + 1));
}

std::string cluster_bed::endpoint_of(size_t i) const {
  return "http://127.0.0." + std::to_string(i + 2) + ":" + std::to_string(etcd_port());
}

engine_config cluster_bed::config_of(size_t i) const {
  auto cfg = test_config(opts.entry);
  cfg.node = nodes[i]->name;
  cfg.redial_min = 100ms;
  cfg.redial_max = 400ms;
  if (opts.cluster) {
    cfg.cluster.enabled = true;
    cfg.cluster.etcd = store.empty() ? std::vector<std::string>{endpoint_of(i)} : store;
    cfg.cluster.lease_ttl = opts.lease_ttl;
    cfg.cluster.request_timeout = 1s;
    cfg.cluster.unreachable_release = 0s;
  }
  cfg.inspect.enabled = true;
  cfg.inspect.port = 0;
  cfg.inspect.identity_dir = nodes[i]->dir.path() + "/identity";
  cfg.metrics.enabled = true;
  cfg.metrics.port = static_cast<uint32_t>(nodes[i]->metrics_port);
  for (size_t h = 0; h < hosts.size(); ++h) {
    auto name = "hv" + std::to_string(h + 1);
    cfg.hosts.push_back(ssh_host(hosts[h]->ssh, hosts[h]->lv, name));
    // The guard is the longer of the call budget (5 s) and this, + 1 s.
    cfg.hosts.back().tcp_user_timeout = std::chrono::seconds(5);
    for (auto p : {"a", "b"})
      cfg.proxies.push_back(test_proxy("px-" + std::to_string(h + 1) + p, name));
  }
  if (auto err = validate(cfg))
    throw std::runtime_error("cluster bed: " + render(err));
  return cfg;
}

void cluster_bed::start_node(size_t i) {
  auto& n = *nodes[i];
  if (n.metrics_port == 0)
    n.metrics_port = testbed::free_port("127.0.0.1");
  auto ini = n.dir.path() + "/engine.ini";
  testbed::write_file(ini, dump_config(config_of(i)));
  n.proc = testbed::process({{EGRESS_CAF_RUN, "--config-file=" + ini}, {},
                             n.dir.path() + "/caf-run.log"});
}

void cluster_bed::start_all() {
  for (size_t i = 0; i < nodes.size(); ++i)
    start_node(i);
}

std::map<std::string, std::pair<std::string, int64_t>> cluster_bed::owners() const {
  std::map<std::string, std::pair<std::string, int64_t>> out;
  auto c = etcd::client::make(
    {.endpoints = store.empty() ? std::vector<std::string>{etcd.endpoint()} : store});
  if (!c)
    return out;
  auto r = (*c)->range("/egress-engine/" + opts.entry + "/hosts/");
  if (!r)
    return out;
  for (auto& kv : r->kvs)
    out[kv.key.substr(kv.key.rfind('/') + 1)] = {kv.value, kv.create_revision};
  return out;
}

std::map<std::string, domain_mark> cluster_bed::marks_on(size_t h) const {
  auto marked = lv::list_marked(*hosts[h]->witness, opts.entry);
  if (!marked)
    throw std::runtime_error("cluster bed: " + render(marked.error()));
  std::map<std::string, domain_mark> out;
  for (auto& d : *marked)
    out[d.name] = d.mark;
  return out;
}

std::set<std::string> cluster_bed::rotation_of(size_t i) const {
  std::set<std::string> out;
  auto [code, body] = http_get(nodes[i]->metrics_port, "/rotation", 2s);
  if (code != 200)
    return out;
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.contains("proxies") || !j["proxies"].is_array())
    return out;
  for (auto& p : j["proxies"])
    if (p.is_object())
      out.insert(p.value("name", ""));
  return out;
}

std::string cluster_bed::phase_of(size_t i) const {
  auto [code, body] = http_get(nodes[i]->metrics_port, "/metrics", 2s);
  if (code != 200)
    return {};
  for (auto phase : {"joining", "member", "fenced", "stopping"})
    if (body.find(std::string{"egress_cluster_phase{phase=\""} + phase + "\"} 1")
        != std::string::npos)
      return phase;
  return {};
}

bool cluster_bed::everything_served(const std::vector<size_t>& by) const {
  for (auto i : by)
    if (rotation_of(i).size() != proxies())
      return false;
  return owners().size() == hosts.size();
}

bool cluster_bed::taken_from(const std::string& node) const {
  auto o = owners();
  if (o.size() != hosts.size())
    return false;
  return std::none_of(o.begin(), o.end(), [&](auto& x) { return x.second.first == node; });
}

std::string cluster_bed::rule_of(size_t i) const {
  return "-d 127.0.0." + std::to_string(i + 2) + " -p tcp --dport " + std::to_string(etcd_port())
         + " -m comment --comment " + testbed::netns::rule_tag() + " -j DROP";
}

void cluster_bed::cut_from_etcd(size_t i) {
  if (rules_.contains(i))
    return;
  testbed::run_checked({"/bin/sh", "-c", "iptables -w -I OUTPUT " + rule_of(i)});
  rules_[i] = rule_of(i);
}

void cluster_bed::heal_from_etcd(size_t i) {
  auto r = rules_.find(i);
  if (r == rules_.end())
    return;
  testbed::run({"/bin/sh", "-c", "iptables -w -D OUTPUT " + r->second});
  rules_.erase(r);
}

std::string cluster_bed::shell(size_t i, std::vector<std::string> args) const {
  static const std::regex listening("inspector listening: caf-shell ([0-9.]+:[0-9]+)");
  std::smatch m;
  auto text = nodes[i]->log();
  if (!std::regex_search(text, m, listening))
    return {};
  std::vector<std::string> argv{EGRESS_CAF_SHELL, m[1].str(),
                                "--identity=" + nodes[i]->dir.path() + "/identity"};
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = testbed::run(argv, std::chrono::seconds(20));
  return r.output;
}

std::vector<size_t> cluster_bed::all_but(size_t i) const {
  std::vector<size_t> out;
  for (size_t j = 0; j < nodes.size(); ++j)
    if (j != i)
      out.push_back(j);
  return out;
}

size_t cluster_bed::index_of(const std::string& node) const {
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i]->name == node)
      return i;
  return SIZE_MAX;
}

} // namespace egress::test
