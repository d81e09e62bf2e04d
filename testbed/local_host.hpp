#pragma once
// A whole KVM-host stand-in on this machine, for the e2e suite and for
// `make run`: a private libvirtd (QEMU driver, TCG) and a private sshd in
// front of it, both inside a network namespace the object creates; an
// isolated libvirt network with dnsmasq (`no-ping`: the first DHCP offer is
// immediate) whose bridge lives in that namespace; a dir pool; a page the
// probes fetch through the proxies (python http.server on the bridge
// address); and a console-log directory. The image mirror (the appliance
// artifacts over HTTP on 127.0.0.1) is a separate object: two hosts share
// one.
//
// Nothing here is a network target outside the namespace or loopback: the
// VM network has no forward mode, so VMs reach only the bridge. Everything
// is stopped by PID and removed by the destructors (the bridge and
// dnsmasq's rules go with the namespace).

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "messages/config.hpp"
#include "testbed/testbed.hpp"

namespace egress::test {

/// The appliance built by scripts/appliance/build (OUT/appliance.env).
struct appliance {
  std::string dir;
  std::string kernel_sha256, initrd_sha256, disk_sha256;
  uint64_t kernel_size = 0, initrd_size = 0, disk_size = 0;
  uint64_t disk_virtual_size = 0; // disk.qcow2's: the ext4 filesystem's size

  /// Reads <dir>/appliance.env; an empty optional-like result (dir empty)
  /// when it is not built. `why` says what is missing.
  static appliance load(const std::string& dir, std::string* why = nullptr);
  bool ok() const { return !dir.empty(); }
  /// Where tests and `make run` look: $EGRESS_APPLIANCE_DIR, else
  /// <build>/appliance next to the running binary.
  static std::string default_dir();
};

/// For suites that boot VMs: root and the test bed's tools
/// (testbed::require_root_or_skip), what local_host::cannot_run() checks,
/// and a built appliance. Skips (exit 77) naming what is missing, or, with
/// EGRESS_E2E_REQUIRED=1 in the environment (CI), fails (exit 1): there a
/// missing VM stack is a broken machine, not a reason to pass.
appliance require_vms_or_skip();

/// A fixture's first member in the suites that boot VMs: the appliance,
/// once require_vms_or_skip() found everything they need.
struct vms_required {
  appliance app = require_vms_or_skip();
};

/// python3 -m http.server on 127.0.0.1 (a free port), serving a directory.
class file_mirror {
public:
  explicit file_mirror(std::string dir);
  ~file_mirror() { server_.stop(); }
  std::string url(const std::string& file) const;
  int port() const { return port_; }

private:
  testbed::temp_dir logs_{"mirror"};
  std::string dir_;
  int port_ = 0;
  testbed::process server_;
};

struct local_host_options {
  std::string name = "local";
  int subnet = 7;  // the VM network is 10.213.<subnet>.0/24
  int pools_mib = 0; // > 0: the pool is on a tmpfs of this size (libvirtd_options)
};

class local_host {
public:
  static constexpr int web_port = 8080;
  static constexpr int proxy_port = 3128;

  /// Starts everything (~5 s the first time: QEMU capabilities). Throws
  /// std::runtime_error with the daemon's log tail on failure. Call
  /// testbed::require_root_or_skip() (or local_host::can_run) first.
  explicit local_host(local_host_options opts = {});
  ~local_host();
  local_host(const local_host&) = delete;
  local_host& operator=(const local_host&) = delete;

  /// "" when this machine can boot VMs here; else why not (no root, no
  /// /dev/net/tun, a missing tool).
  static std::string cannot_run();

  const std::string& name() const { return opts_.name; }
  std::string bridge_addr() const;          // 10.213.<subnet>.1
  std::string vm_cidr() const;              // 10.213.<subnet>.0/24
  std::string bridge_name() const;          // egbr<subnet>, inside netns()
  std::string target() const;               // the page the probes fetch
  const std::string& console_dir() const { return consoles_.path(); }
  std::string console_log(const std::string& proxy) const;
  const std::string& pool_dir() const { return pool_; } // the "egress" pool's directory

  /// The engine's view of this host: SSH to the namespace's sshd, libvirt
  /// on the private socket, QEMU (TCG), the pool and network made here.
  host_config host() const;

  testbed::libvirtd& libvirtd() { return lv_; }
  testbed::sshd& sshd() { return ssh_; }
  testbed::netns& netns() { return net_; }
  /// An HTTP GET of target() through the proxy at address:proxy_port, sent
  /// from inside the namespace (as a client on the VM network would): the
  /// body, or "" when it failed.
  std::string fetch_through(const std::string& address,
                            std::chrono::seconds timeout = std::chrono::seconds(5)) const;

  /// virsh against the private daemon (not through the engine).
  testbed::run_result virsh(const std::vector<std::string>& args) const {
    return lv_.virsh(args);
  }

private:
  void start_network(); // pool, network, page: the constructor's fallible part
  local_host_options opts_;
  testbed::netns net_;
  testbed::libvirtd lv_;
  testbed::sshd ssh_;
  testbed::temp_dir consoles_{"consoles"};
  testbed::temp_dir web_dir_{"web"};
  testbed::process web_;
  std::string pool_;
};

/// Makes a local_host's VM network reachable from the root namespace, for a
/// gateway (HAProxy on 127.0.0.1) in front of its proxies: a route to the VM
/// network through the namespace's veth, forwarding in the namespace from
/// the veth to the bridge (and back for the connections it made), and the
/// connections' source rewritten to the bridge's address, so the proxies,
/// which allow clients of their own network only, take them. The namespace
/// keeps its isolation otherwise: the VMs still reach nothing beyond the
/// bridge. Every rule is tagged (netns::rule_tag) and removed by the
/// destructor; the route goes with it.
class vm_network_route {
public:
  explicit vm_network_route(local_host& host);
  ~vm_network_route();
  vm_network_route(const vm_network_route&) = delete;
  vm_network_route& operator=(const vm_network_route&) = delete;

private:
  std::vector<std::vector<std::string>> rules(const char* op) const;
  local_host& host_;
  std::string route_;
};

/// Image entries for the appliance served by `mirror`: "appliance-kernel"
/// (format kernel), "appliance-initrd" (format initrd) and "appliance-disk"
/// (format qcow2: the proxy's root filesystem).
std::vector<image_config> appliance_images(const appliance& a, const file_mirror& mirror);
/// The same entries with each file's URL from `url_of` ("vmlinux",
/// "initrd.gz", "disk.qcow2"): for a mirror of another kind.
std::vector<image_config>
appliance_images(const appliance& a, const std::function<std::string(const std::string&)>& url_of);

/// How an appliance proxy boots: from the initramfs alone (no disk), or
/// with `root=/dev/vda` on a qcow2 overlay of the cached appliance disk.
enum class appliance_boot { initramfs, disk };

/// A proxy booting the appliance on `host`, allowing clients from its VM
/// network (the probes arrive from the bridge), 128 MiB.
proxy_spec appliance_proxy(const std::string& name, const local_host& host,
                           appliance_boot boot = appliance_boot::initramfs);

/// An engine config for proxies on these hosts: SSH links, HTTP probes
/// through the host to local_host::target(), GC on.
engine_config appliance_config(const std::string& entry, const appliance& a,
                               const file_mirror& mirror,
                               const std::vector<const local_host*>& hosts,
                               const std::vector<std::pair<std::string, std::string>>& proxies,
                               appliance_boot boot = appliance_boot::initramfs);

} // namespace egress::test
