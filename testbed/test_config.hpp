#pragma once
// The configs the suites start from: a host on libvirt's test driver, a
// proxy on it, an engine config with fast timers. Free of Boost.Test, so
// the benchmarks use them too (testbed/probe_bed.hpp).

#include <chrono>
#include <string>

#include "messages/config.hpp"

namespace egress::test {

inline host_config test_host(std::string name, std::string uri = "test:///default") {
  host_config h;
  h.name = std::move(name);
  h.uri = std::move(uri);
  h.domain_type = "test";
  h.network = "default";
  h.call_budget = std::chrono::seconds(5);
  h.connect_timeout = std::chrono::seconds(5);
  h.address_sources = {"lease"};
  return h;
}

inline proxy_spec test_proxy(std::string name, std::string host) {
  proxy_spec p;
  p.name = std::move(name);
  p.host = std::move(host);
  p.network = "default";
  p.tags = {"unit"};
  return p;
}

inline engine_config test_config(std::string entry = "unit") {
  engine_config c;
  c.entry = std::move(entry);
  c.poll_interval = std::chrono::milliseconds(50);
  c.shutdown_timeout = std::chrono::seconds(5);
  c.redial_min = std::chrono::milliseconds(50);
  c.redial_max = std::chrono::milliseconds(200);
  // Test-driver addresses are made up: behind an sshd on this machine's
  // loopback a probe would go to whatever really has them. Suites that
  // probe turn it on inside a namespace (testbed/probe_bed.hpp).
  c.probe.mode = "off";
  // Off unless a suite tests it: several hosts of one suite often
  // share one test-driver state, and a pass at start adds a call that
  // timing-sensitive suites (a daemon paused under a call) do not expect.
  c.gc = false;
  return c;
}

} // namespace egress::test
