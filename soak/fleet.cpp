#include "soak/fleet.hpp"

#include <chrono>
#include <cstdio>
#include <iterator>
#include <map>

namespace egress::soak {

using namespace std::chrono_literals;

proxy_maker maker_for(const std::vector<std::unique_ptr<soak_host>>& hosts) {
  if (hosts.front()->vm_host() == nullptr)
    return {[](const std::string& name, const std::string& host) {
              proxy_spec p;
              p.name = name;
              p.host = host;
              p.vcpus = 1;
              p.memory_mib = 64;
              p.network = "default";
              return p;
            },
            64};
  std::map<std::string, const test::local_host*> by_name;
  for (auto& h : hosts)
    by_name[h->name()] = h->vm_host();
  return {[by_name](const std::string& name, const std::string& host) {
            return test::appliance_proxy(name, *by_name.at(host));
          },
          128};
}

declared_fleet::declared_fleet(int proxies, const std::vector<std::string>& hosts,
                               proxy_maker maker, int members)
  : maker_(std::move(maker)), members_(members) {
  for (int i = 0; i < proxies; ++i)
    add(hosts[static_cast<size_t>(i) % hosts.size()]);
}

std::set<std::string> declared_fleet::on(const std::string& host) const {
  std::set<std::string> out;
  for (auto& p : proxies_)
    if (p.host == host)
      out.insert(p.name);
  return out;
}

std::optional<std::string> declared_fleet::pick_on(const std::string& host, uint64_t pick) const {
  auto names = on(host);
  if (names.empty())
    return std::nullopt;
  return *std::next(names.begin(), static_cast<long>(pick % names.size()));
}

std::pair<std::string, std::string> declared_fleet::change(uint64_t pick,
                                                           const std::string& host) {
  auto what = pick % 3;
  if (what == 0 && proxies_.size() > 1) {
    auto i = (pick / 3) % proxies_.size();
    auto name = proxies_[i].name;
    proxies_.erase(proxies_.begin() + static_cast<long>(i));
    return {"removed " + name, ""};
  }
  if (what == 1 || proxies_.empty()) {
    auto& p = add(host);
    return {"added " + p.name + " on " + host, ""};
  }
  auto& p = proxies_[(pick / 3) % proxies_.size()];
  p.memory_mib = p.memory_mib == maker_.memory_mib ? maker_.memory_mib + 16 : maker_.memory_mib;
  return {"changed " + p.name + " to " + std::to_string(p.memory_mib) + " MiB", p.name};
}

proxy_spec& declared_fleet::add(const std::string& host) {
  char name[16];
  std::snprintf(name, sizeof name, "s%04d", next_++);
  proxies_.push_back(maker_.make(name, host));
  return proxies_.back();
}

group_config declared_fleet::group_of(const std::vector<std::string>& hosts) const {
  group_config g;
  g.name = group;
  g.count = static_cast<uint32_t>(members_);
  g.hosts = hosts;
  g.member = maker_.make(group, hosts.front());
  g.member.name.clear();
  g.member.host.clear();
  g.max_surge = 2;
  return g;
}

engine_config config_of(const declared_fleet& fleet,
                        const std::vector<std::unique_ptr<soak_host>>& hosts,
                        const soak_mirror* mirror) {
  engine_config cfg;
  cfg.entry = entry;
  cfg.shutdown_timeout = 10s;
  cfg.probe.mode = "off";
  cfg.gc = true;
  for (auto& h : hosts)
    cfg.hosts.push_back(h->config());
  cfg.proxies = fleet.proxies();
  if (fleet.members() > 0) {
    std::vector<std::string> names;
    for (auto& h : hosts)
      names.push_back(h->name());
    cfg.groups.push_back(fleet.group_of(names));
    cfg.host_grace = 8s;
  }
  if (mirror) {
    // As the e2e suite probes (testbed/local_host.cpp): every host's
    // VM network has the same subnet, each in its own namespace.
    cfg.images = mirror->images();
    cfg.poll_interval = 500ms;
    cfg.probe.mode = "http";
    cfg.probe.target = hosts.front()->vm_host()->target();
    cfg.probe.interval = 2s;
    cfg.probe.timeout = 2s;
    cfg.probe.rise = 2;
    cfg.probe.fall = 3;
  }
  return cfg;
}

} // namespace egress::soak
