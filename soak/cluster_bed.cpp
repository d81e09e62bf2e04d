#include "soak/cluster_bed.hpp"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "messages/error.hpp"
#include "soak/fleet.hpp"
#include "testbed/http_get.hpp"
#include "testbed/testbed.hpp"

namespace egress::soak {

namespace {

using namespace std::chrono_literals;

// etcd on every address (node i reaches it at 127.0.0.<i+2>), its client
// port picked on 127.0.0.1, where the soak reads it.
test::etcd_options etcd_everywhere() {
  test::etcd_options o;
  o.client_port = testbed::free_port("127.0.0.1");
  o.extra_args = {"--listen-client-urls=http://0.0.0.0:" + std::to_string(o.client_port)};
  return o;
}

std::string hosts_prefix() {
  return cluster_config{}.prefix + "/" + entry + "/hosts/";
}

} // namespace

std::chrono::milliseconds guard_of(const host_config& h) {
  auto longest = h.transport == "ssh" ? std::max(h.call_budget, h.tcp_user_timeout)
                                      : h.call_budget;
  return std::chrono::duration_cast<std::chrono::milliseconds>(longest) + 1s;
}

soak_cluster::soak_cluster(int nodes, const std::string& out) : etcd_(etcd_everywhere()) {
  etcd_.start();
  etcd_up_ = true;
  auto reader = etcd::client::make({.endpoints = {etcd_.endpoint()}, .timeout = 1s});
  if (!reader)
    throw std::runtime_error("etcd client: " + render(reader.error()));
  reader_ = std::move(*reader);
  for (int i = 0; i < nodes; ++i) {
    node n;
    n.name = "n" + std::to_string(i + 1);
    n.dir = out + "/" + n.name;
    testbed::run_checked({"mkdir", "-p", n.dir});
    n.metrics_port = testbed::free_port("127.0.0.1");
    n.driver = make_process_driver(n.dir, n.metrics_port);
    nodes_.push_back(std::move(n));
  }
}

soak_cluster::~soak_cluster() {
  for (auto& n : nodes_) {
    if (!n.rule.empty())
      testbed::run({"/bin/sh", "-c", "iptables -w -D OUTPUT " + n.rule});
    if (n.fault == node_fault::stopped)
      n.driver->pause(false);
  }
  nodes_.clear(); // each driver stops its caf-run
}

bool soak_cluster::some_node_acts() const {
  for (auto& n : nodes_)
    if (n.fault == node_fault::none)
      return true;
  return false;
}

int soak_cluster::etcd_port() const {
  auto e = etcd_.endpoint();
  return std::stoi(e.substr(e.rfind(':') + 1));
}

engine_config soak_cluster::config_of(size_t i, const engine_config& fleet) const {
  auto cfg = fleet;
  cfg.node = nodes_[i].name;
  cfg.cluster.enabled = true;
  cfg.cluster.etcd = {"http://127.0.0." + std::to_string(i + 2) + ":"
                      + std::to_string(etcd_port())};
  cfg.cluster.lease_ttl = lease_ttl();
  cfg.cluster.request_timeout = 1s;
  for (auto& h : cfg.hosts) // a short guard: more take-overs in a soak's minutes
    h.tcp_user_timeout = std::min(h.tcp_user_timeout, h.call_budget);
  return cfg;
}

void soak_cluster::start(size_t i, const engine_config& fleet) {
  nodes_[i].driver->start(config_of(i, fleet));
  nodes_[i].fault = node_fault::none;
  nodes_[i].reload_pending = false;
}

caf::error soak_cluster::stop(size_t i) {
  return nodes_[i].driver->stop();
}

caf::expected<std::string> soak_cluster::reload(size_t i, const engine_config& fleet) {
  auto& n = nodes_[i];
  if (n.fault == node_fault::killed)
    return std::string{"pending: started with it"};
  if (n.fault == node_fault::stopped) {
    n.reload_pending = true;
    return std::string{"pending: reloaded when continued"};
  }
  return n.driver->reload(config_of(i, fleet));
}

caf::error soak_cluster::kill(size_t i) {
  nodes_[i].fault = node_fault::killed;
  return nodes_[i].driver->kill();
}

void soak_cluster::pause(size_t i) {
  nodes_[i].driver->pause(true);
  nodes_[i].fault = node_fault::stopped;
}

// Drops what node i sends to etcd's port at its own address: its requests
// time out, the others' pass.
std::string soak_cluster::rule_for(size_t i) const {
  return "-d 127.0.0." + std::to_string(i + 2) + " -p tcp --dport " + std::to_string(etcd_port())
         + " -m comment --comment " + testbed::netns::rule_tag() + " -j DROP";
}

void soak_cluster::cut(size_t i) {
  auto rule = rule_for(i);
  testbed::run_checked({"/bin/sh", "-c", "iptables -w -I OUTPUT " + rule});
  nodes_[i].rule = rule;
  nodes_[i].fault = node_fault::cut;
}

caf::error soak_cluster::heal(size_t i, const engine_config& fleet) {
  auto& n = nodes_[i];
  auto was = n.fault;
  n.fault = node_fault::none;
  switch (was) {
    case node_fault::none: return {};
    case node_fault::killed: start(i, fleet); return {};
    case node_fault::cut:
      testbed::run_checked({"/bin/sh", "-c", "iptables -w -D OUTPUT " + n.rule});
      n.rule.clear();
      return {};
    case node_fault::stopped: break;
  }
  n.driver->pause(false);
  if (!n.reload_pending)
    return {};
  n.reload_pending = false;
  auto r = n.driver->reload(config_of(i, fleet));
  return r ? caf::error{} : r.error();
}

void soak_cluster::stop_etcd() {
  etcd_up_ = false;
  etcd_.stop(); // SIGTERM by its PID (SIGKILL past 5 s)
}

void soak_cluster::start_etcd() {
  etcd_.start(); // the same data dir and ports, until it has a leader
  etcd_up_ = true;
}

caf::expected<owner_map> soak_cluster::owners() {
  auto r = reader_->range(hosts_prefix());
  if (!r)
    return std::move(r.error());
  owner_map out;
  for (auto& kv : r->kvs)
    out[kv.key.substr(kv.key.rfind('/') + 1)] = {kv.value, kv.create_revision};
  return out;
}

std::optional<std::set<std::string>> soak_cluster::rotation_of(size_t i) const {
  auto [code, body] = test::http_get(nodes_[i].metrics_port, "/rotation", 2s);
  if (code != 200)
    return std::nullopt;
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.contains("proxies"))
    return std::nullopt;
  std::set<std::string> out;
  for (auto& p : j["proxies"])
    out.insert(p.value("name", ""));
  return out;
}

std::optional<node_reading> soak_cluster::metrics_of(size_t i) const {
  auto [code, body] = test::http_get(nodes_[i].metrics_port, "/metrics", 2s);
  if (code != 200)
    return std::nullopt;
  node_reading r;
  for (auto phase : {"joining", "member", "fenced", "stopping"})
    if (body.find(std::string{"egress_cluster_phase{phase=\""} + phase + "\"} 1")
        != std::string::npos)
      r.phase = phase;
  const std::string owned = "\negress_cluster_hosts_owned ";
  if (auto at = body.find(owned); at != std::string::npos)
    r.hosts_owned = std::atoi(body.c_str() + at + owned.size());
  return r;
}

} // namespace egress::soak
