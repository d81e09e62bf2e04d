#pragma once
// A stand-in for a host's VM network inside a test bed's namespace: real
// tinyproxy processes listening on the addresses libvirt reports for the
// proxies, and a python http.server as the page they fetch. sshd runs in
// the same namespace, so a probe through the host (direct-tcpip) reaches
// them exactly as it would reach VMs behind a hypervisor; this process has
// no route to them. Every process is stopped by PID, every address removed.

#include <map>
#include <string>
#include <vector>

#include <unistd.h>

#include "testbed/testbed.hpp"

namespace egress::test {

class vm_network {
public:
  static constexpr const char* web_addr = "10.77.0.1";
  static constexpr int web_port = 8080;

  explicit vm_network(const testbed::netns& net) : net_(net), dir_("vmnet") {
    for (auto tool : {"/usr/bin/tinyproxy", "/usr/bin/python3"})
      if (::access(tool, X_OK) != 0)
        testbed::skip(std::string(tool) + " is not installed (scripts/install-deps)");
    add_address(web_addr);
    testbed::write_file(dir_ / "index.html", "<html>egress target</html>\n");
    web_ = in_ns({"/usr/bin/python3", "-m", "http.server", "--bind", web_addr, "--directory",
                  dir_.path(), std::to_string(web_port)},
                 "web.log");
  }

  ~vm_network() {
    for (auto& [_, p] : proxies_)
      p.stop();
    web_.stop();
    for (auto& a : addresses_)
      net_.exec({"ip", "addr", "del", a + "/32", "dev", "lo"});
  }

  vm_network(const vm_network&) = delete;
  vm_network& operator=(const vm_network&) = delete;

  static std::string target() {
    return std::string{"http://"} + web_addr + ":" + std::to_string(web_port) + "/";
  }

  /// Starts a tinyproxy on address:port (the address is added to the
  /// namespace's loopback first).
  void start_proxy(const std::string& address, int port = 8888) {
    if (proxies_.contains(address))
      return;
    add_address(address);
    auto conf = dir_ / ("tinyproxy-" + address + ".conf");
    // Bind: its requests leave from its own address, so the page sees
    // which exit carried a request (testbed/haproxy.hpp's exit_target).
    testbed::write_file(conf, "Port " + std::to_string(port) + "\n"
                              "Listen " + address + "\n"
                              "Bind " + address + "\n"
                              "Timeout 10\n"
                              "MaxClients 8\n"
                              "LogLevel Info\n"
                              "LogFile \"" + (dir_ / ("tinyproxy-" + address + ".log")) + "\"\n"
                              "PidFile \"" + (dir_ / ("tinyproxy-" + address + ".pid")) + "\"\n");
    proxies_.emplace(address, in_ns({"/usr/bin/tinyproxy", "-d", "-c", conf},
                                    "tinyproxy-" + address + ".out"));
  }

  /// SIGSTOP / SIGCONT: a proxy that hangs (connects are still accepted by
  /// the kernel, nothing answers).
  void freeze(const std::string& address) { proxies_.at(address).signal(SIGSTOP); }
  void thaw(const std::string& address) { proxies_.at(address).signal(SIGCONT); }

private:
  void add_address(const std::string& a) {
    net_.exec({"ip", "addr", "add", a + "/32", "dev", "lo"});
    addresses_.push_back(a);
  }

  testbed::process in_ns(std::vector<std::string> argv, const std::string& log) {
    auto full = net_.exec_prefix();
    full.insert(full.end(), argv.begin(), argv.end());
    return testbed::process({full, {}, dir_ / log});
  }

  const testbed::netns& net_;
  testbed::temp_dir dir_;
  testbed::process web_;
  std::map<std::string, testbed::process> proxies_;
  std::vector<std::string> addresses_;
};

} // namespace egress::test
