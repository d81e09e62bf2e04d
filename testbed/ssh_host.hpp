#pragma once
// A host_config that reaches a test bed's libvirtd through its sshd with the
// engine's SSH transport: what the integration, fault and benchmark suites
// all start from before they change a budget or a liveness knob.

#include <chrono>
#include <string>

#include "messages/config.hpp"
#include "testbed/testbed.hpp"

namespace egress::test {

inline host_config ssh_host(const testbed::sshd& ssh, const testbed::libvirtd& lv,
                            std::string name = "hv1",
                            std::string uri = "test:///default") {
  // Header-only and free of Boost.Test: the benchmarks use it too.
  bool test_driver = uri.rfind("test:", 0) == 0;
  host_config h;
  h.name = std::move(name);
  h.uri = std::move(uri);
  h.domain_type = test_driver ? "test" : "qemu";
  if (test_driver)
    h.network = "default"; // the daemon's test driver has one; qemu has none here
  h.address_sources = {"lease"};
  h.call_budget = std::chrono::seconds(5);
  h.transport = "ssh";
  h.address = ssh.address();
  h.port = static_cast<uint32_t>(ssh.port());
  h.user = ssh.user();
  h.key_file = ssh.client_key();
  h.known_hosts = ssh.known_hosts();
  h.remote_socket = lv.socket_path();
  h.connect_timeout = std::chrono::seconds(5);
  return h;
}

/// A private libvirtd that serves its test driver (no QEMU probe) and a
/// private sshd in front of it: what suites that exercise the SSH path
/// without booting anything start from. Skips (exit 77) without root.
struct test_driver_daemons {
  testbed::libvirtd lv;
  testbed::sshd ssh;

  static testbed::libvirtd_options lv_options() {
    testbed::libvirtd_options o;
    o.warm_qemu_caps = false; // the test driver needs no QEMU probe
    return o;
  }

  test_driver_daemons() : lv(lv_options()) {
    testbed::require_root_or_skip();
    lv.start();
    ssh.start();
  }
};

} // namespace egress::test
