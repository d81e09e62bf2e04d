// bench/groups: proxy groups against a lost host and a maintenance drain,
// on three private libvirtds (test driver) behind sshds in network
// namespaces of their own (root; exit 77 otherwise).
//
//   bench-groups [--members N] [--grace-s G]
//
// Prints:
//  - a host cut (every packet dropped) past host-grace: when its link was
//    declared dead, and when its members were back in the rotation on the
//    other hosts, against the bound the engine promises (the liveness bound,
//    about 4 s, plus host-grace);
//  - taking a host out for maintenance, side by side in one run: drain-host
//    (make-before-break) against what an operator does without it, a reload
//    that declares the host's proxies on the other hosts: the rotation's
//    smallest size over each (every join and leave recorded, so no dip is
//    missed between samples) and how long each took.
// No assertions: figures only.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include "base/log.hpp"
#include "messages/error.hpp"
#include "providers/libvirt/connection.hpp"
#include "runtime/engine.hpp"
#include "testbed/ssh_host.hpp"
#include "testbed/test_config.hpp"
#include "testbed/testbed.hpp"

#include "figures.hpp"

using namespace std::chrono;
using namespace egress;

namespace {

struct host_bed {
  testbed::netns net;
  testbed::libvirtd lv{test::test_driver_daemons::lv_options()};
  testbed::sshd ssh{testbed::sshd_options::in(net)};
  lv::connection_ptr held; // the test driver keeps its domains while one is open

  host_bed() {
    lv.start();
    ssh.start();
    if (auto c = lv::connection::open(lv.uri("test")))
      held = *c;
  }
};

// The rotation's sizes after every join and leave, as the engine announces
// them (testbed/engine_fixture.hpp has the suites' twin, with Boost.Test).
struct size_log {
  std::mutex mtx;
  std::vector<uint32_t> sizes;
};

rotation_events_actor::behavior_type record_sizes(rotation_events_actor::pointer,
                                                  std::shared_ptr<size_log> log) {
  return {[log](rotation_event& e) {
    std::lock_guard<std::mutex> guard{log->mtx};
    log->sizes.push_back(e.size);
  }};
}

// Stops the engine however the case returns.
struct stop_guard {
  caf::expected<engine>& eng;
  ~stop_guard() {
    if (eng)
      eng->stop(seconds(30));
  }
};

double ms_since(steady_clock::time_point t) {
  return duration<double, std::milli>(steady_clock::now() - t).count();
}

engine_config base(const std::string& entry, std::vector<std::unique_ptr<host_bed>>& hosts,
                   seconds grace) {
  auto cfg = test::test_config(entry);
  cfg.redial_min = milliseconds(100);
  cfg.redial_max = milliseconds(400);
  cfg.host_grace = grace;
  for (size_t i = 0; i < hosts.size(); ++i)
    cfg.hosts.push_back(
      test::ssh_host(hosts[i]->ssh, hosts[i]->lv, "hv" + std::to_string(i + 1)));
  return cfg;
}

template <class Pred>
bool wait_for(engine& eng, Pred pred, seconds max) {
  auto deadline = steady_clock::now() + max;
  while (steady_clock::now() < deadline) {
    if (auto st = eng.status(); st && pred(*st))
      return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return false;
}

size_t running_on(const fleet_status& st, const std::string& host) {
  return std::count_if(st.proxies.begin(), st.proxies.end(), [&](auto& p) {
    return p.host == host && p.phase == proxy_phase::running;
  });
}

// The smallest rotation size any join or leave left, since subscribing.
size_t smallest(const std::shared_ptr<size_log>& log, size_t start) {
  std::lock_guard<std::mutex> guard{log->mtx};
  size_t out = start;
  for (auto n : log->sizes)
    out = std::min<size_t>(out, n);
  return out;
}

struct loss_figures {
  double dead_ms = -1, back_ms = -1;
};

loss_figures host_loss(caf::actor_system& sys, std::vector<std::unique_ptr<host_bed>>& hosts,
                       uint32_t members, seconds grace) {
  auto cfg = base("loss", hosts, grace);
  group_config g;
  g.name = "lo";
  g.count = members;
  g.max_surge = members;
  for (auto& h : cfg.hosts)
    g.hosts.push_back(h.name);
  cfg.groups.push_back(g);
  auto eng = engine::start(sys, cfg);
  loss_figures out;
  if (!eng)
    return out;
  stop_guard guard{eng};
  if (!wait_for(*eng, [&](auto& st) { return st.rotation.size() == members; }, seconds(60)))
    return out;
  auto t0 = steady_clock::now();
  hosts[0]->net.partition();
  if (wait_for(*eng, [](auto& st) {
        return std::any_of(st.links.begin(), st.links.end(), [](auto& l) {
          return l.host == "hv1" && l.state == link_state::dead;
        });
      }, seconds(30)))
    out.dead_ms = ms_since(t0);
  if (wait_for(*eng, [&](auto& st) {
        return running_on(st, "hv1") == 0 && st.rotation.size() == members;
      }, seconds(120)))
    out.back_ms = ms_since(t0);
  hosts[0]->net.heal();
  return out;
}

struct maintenance_figures {
  size_t smallest = 0;
  double took_ms = -1;
};

// drain-host hv2 of a group of `members` on the three hosts.
// Starts `cfg`, waits until `members` are in the rotation, then records
// every join and leave while `act` takes hv2 out and until `done` holds.
maintenance_figures maintain(caf::actor_system& sys, const engine_config& cfg, uint32_t members,
                             const std::function<bool(engine&)>& act,
                             const std::function<bool(const fleet_status&)>& done) {
  maintenance_figures out;
  auto eng = engine::start(sys, cfg);
  if (!eng)
    return out;
  stop_guard guard{eng};
  if (!wait_for(*eng, [&](auto& st) { return st.rotation.size() == members; }, seconds(60)))
    return out;
  auto log = std::make_shared<size_log>();
  eng->subscribe(sys.spawn(record_sizes, log));
  auto t0 = steady_clock::now();
  if (!act(*eng))
    return out;
  if (wait_for(*eng, [&](auto& st) {
        return running_on(st, "hv2") == 0 && st.rotation.size() == members && done(st);
      }, seconds(120)))
    out.took_ms = ms_since(t0);
  out.smallest = smallest(log, members);
  return out;
}

// drain-host hv2 of a group of `members` on the three hosts.
maintenance_figures by_drain(caf::actor_system& sys,
                             std::vector<std::unique_ptr<host_bed>>& hosts, uint32_t members) {
  auto cfg = base("drain", hosts, minutes(5));
  group_config g;
  g.name = "dr";
  g.count = members;
  g.max_surge = members;
  for (auto& h : cfg.hosts)
    g.hosts.push_back(h.name);
  cfg.groups.push_back(g);
  return maintain(
    sys, cfg, members,
    [&](engine& eng) {
      caf::scoped_actor self{sys};
      bool ok = false;
      self->request(eng.fleet(), seconds(10), atom::cordon_v, std::string{"hv2"}, true)
        .receive([&](host_drain&) { ok = true; }, [](caf::error&) {});
      return ok;
    },
    [](const fleet_status& st) {
      return !st.drains.empty() && st.drains[0].members == 0 && st.drains[0].moving == 0;
    });
}

// What an operator does without drain-host: the same fleet declared by
// hand, and a reload that declares hv2's proxies on the other hosts.
maintenance_figures by_reload(caf::actor_system& sys,
                              std::vector<std::unique_ptr<host_bed>>& hosts,
                              uint32_t members) {
  auto cfg = base("byhand", hosts, minutes(5));
  for (uint32_t i = 0; i < members; ++i)
    cfg.proxies.push_back(test::test_proxy("bh-" + std::to_string(i + 1),
                                           "hv" + std::to_string(i % 3 + 1)));
  auto next = cfg;
  int k = 0;
  for (auto& p : next.proxies)
    if (p.host == "hv2")
      p.host = (k++ % 2 == 0) ? "hv1" : "hv3";
  return maintain(
    sys, cfg, members, [&](engine& eng) { return static_cast<bool>(eng.reload(next)); },
    [](const fleet_status&) { return true; });
}

} // namespace

int main(int argc, char** argv) {
  uint32_t members = 30;
  long grace_s = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--members")
      members = static_cast<uint32_t>(std::stoul(argv[i + 1]));
    else if (a == "--grace-s")
      grace_s = std::stol(argv[i + 1]);
  }
  testbed::require_root_or_skip();
  log::set_level(log::level::error);
  caf::actor_system_config cfg;
  cfg.set("logger.file-verbosity", caf::atom("quiet"));
  configure(cfg);
  caf::actor_system sys{cfg};
  std::vector<std::unique_ptr<host_bed>> hosts;
  for (int i = 0; i < 3; ++i)
    hosts.push_back(std::make_unique<host_bed>());
  auto loss = host_loss(sys, hosts, members, seconds(grace_s));
  auto drain = by_drain(sys, hosts, members);
  auto reload = by_reload(sys, hosts, members);
  double bound_ms = 4000.0 + 1000.0 * static_cast<double>(grace_s);
  std::printf("bench/groups: %u members on 3 test-driver hosts behind sshd, host-grace %ld s\n",
              members, grace_s);
  std::printf("  a host cut: link dead after %.0f ms; its members back in the rotation "
              "elsewhere after %.0f ms (bound: liveness ~4 s + host-grace = %.0f ms): %.2fx "
              "of the bound\n",
              loss.dead_ms, loss.back_ms, bound_ms, loss.back_ms > 0 ? loss.back_ms / bound_ms : 0);
  std::printf("  maintenance of one host, the rotation's smallest size (of %u): drain-host %zu"
              " (%.0f ms), a reload moving its proxies %zu (%.0f ms)\n",
              members, drain.smallest, drain.took_ms, reload.smallest, reload.took_ms);
  std::printf("  exits kept through maintenance: drain-host %.0f%%, reload %.0f%%\n",
              100.0 * static_cast<double>(drain.smallest) / members,
              100.0 * static_cast<double>(reload.smallest) / members);
  using test::figures;
  figures csv{"members", "grace_s", "dead_ms", "back_ms", "bound_ms", "drain_smallest",
              "drain_ms", "reload_smallest", "reload_ms"};
  csv.row({std::to_string(members), std::to_string(grace_s), figures::cell(loss.dead_ms),
           figures::cell(loss.back_ms), figures::cell(bound_ms),
           std::to_string(drain.smallest), figures::cell(drain.took_ms),
           std::to_string(reload.smallest), figures::cell(reload.took_ms)});
  return loss.back_ms > 0 && drain.took_ms > 0 && reload.took_ms > 0 ? 0 : 1;
}
