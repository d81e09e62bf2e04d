#pragma once
// The bed of the suites that probe proxies through a real host: a private
// libvirtd serving its test driver, a real sshd in a network namespace in
// front of it (the engine's SSH link), and in that namespace a real
// tinyproxy on each address libvirt reports for a proxy
// (testbed/vm_network.hpp), which the engine's probes reach through the
// host as they would reach VMs. Root only: without it the process exits 77
// (skipped). Free of Boost.Test: bench/gateway uses it too.

#include <string>
#include <vector>

#include "runtime/engine.hpp"
#include "testbed/ssh_host.hpp"
#include "testbed/test_config.hpp"
#include "testbed/testbed.hpp"
#include "testbed/vm_network.hpp"

namespace egress::test {

struct probe_bed {
  struct root_required {
    root_required() { testbed::require_root_or_skip(); }
  } root;
  testbed::libvirtd lv;
  testbed::netns net;
  testbed::sshd ssh{[this] {
    auto o = testbed::sshd_options::in(net);
    o.libvirt_socket_dir = lv.socket_dir();
    return o;
  }()};
  vm_network vms{net};

  probe_bed() {
    lv.start();
    ssh.start();
  }

  /// Proxies `names` on host hv1 through the SSH link; HTTP probes through
  /// the host to the namespace's page every 500 ms (rise 2, fall 2), a
  /// 200 ms poll interval.
  engine_config probed_config(std::string entry, const std::vector<std::string>& names) const {
    auto cfg = test_config(std::move(entry));
    cfg.poll_interval = std::chrono::milliseconds(200);
    cfg.hosts.push_back(ssh_host(ssh, lv));
    for (auto& n : names)
      cfg.proxies.push_back(test_proxy(n, "hv1"));
    cfg.probe.mode = "http";
    cfg.probe.target = vm_network::target();
    cfg.probe.interval = std::chrono::milliseconds(500);
    cfg.probe.timeout = std::chrono::milliseconds(400);
    cfg.probe.rise = 2;
    cfg.probe.fall = 2;
    return cfg;
  }

  /// Starts a tinyproxy at the address of every proxy the engine's status
  /// lists with one; false when the status could not be read.
  bool serve_all(engine& eng) {
    auto st = eng.status();
    if (!st)
      return false;
    for (auto& p : st->proxies)
      if (!p.address.empty())
        vms.start_proxy(p.address);
    return true;
  }
};

} // namespace egress::test
