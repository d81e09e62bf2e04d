// The local KVM-host stand-in (see local_host.hpp).

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <thread>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "testbed/local_host.hpp"
#include "testbed/ssh_host.hpp"

namespace egress::test {

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

/// Waits until something accepts on address:port, optionally inside a
/// network namespace (a python one-liner there; a plain connect here).
void wait_listening(const std::vector<std::string>& prefix, const std::string& address, int port,
                    testbed::process& server, const std::string& what) {
  std::vector<std::string> argv = prefix;
  argv.insert(argv.end(), {"/usr/bin/python3", "-c",
                           "import socket,sys; socket.create_connection(('" + address + "', "
                             + std::to_string(port) + "), 1)"});
  for (int i = 0; i < 100; ++i) {
    if (!server.alive())
      throw std::runtime_error("local_host: " + what + " exited during start");
    if (testbed::run(argv, 5s).ok())
      return;
    std::this_thread::sleep_for(100ms);
  }
  throw std::runtime_error("local_host: " + what + " does not listen on " + address + ":"
                           + std::to_string(port));
}

} // namespace

// -- appliance ------------------------------------------------------------------

std::string appliance::default_dir() {
  if (auto env = std::getenv("EGRESS_APPLIANCE_DIR"); env && *env)
    return env;
  std::error_code ec;
  auto self = fs::read_symlink("/proc/self/exe", ec);
  if (ec)
    return "build/appliance";
  // Test binaries and caf-run all sit directly in the build directory.
  return (self.parent_path() / "appliance").string();
}

appliance appliance::load(const std::string& dir, std::string* why) {
  std::ifstream in(dir + "/appliance.env");
  appliance a;
  if (!in) {
    if (why)
      *why = "no appliance in " + dir + " (scripts/appliance/build " + dir + ")";
    return a;
  }
  std::map<std::string, std::string> kv;
  for (std::string line; std::getline(in, line);)
    if (auto eq = line.find('='); eq != std::string::npos)
      kv[line.substr(0, eq)] = line.substr(eq + 1);
  for (auto f : {"vmlinux", "initrd.gz", "disk.qcow2"})
    if (!fs::exists(dir + "/" + f)) {
      if (why)
        *why = dir + "/" + f + " is missing (scripts/appliance/build " + dir + ")";
      return a;
    }
  a.kernel_sha256 = kv["VMLINUX_SHA256"];
  a.initrd_sha256 = kv["INITRD_SHA256"];
  a.kernel_size = std::strtoull(kv["VMLINUX_SIZE"].c_str(), nullptr, 10);
  a.initrd_size = std::strtoull(kv["INITRD_SIZE"].c_str(), nullptr, 10);
  a.disk_sha256 = kv["DISK_SHA256"];
  a.disk_size = std::strtoull(kv["DISK_SIZE"].c_str(), nullptr, 10);
  a.disk_virtual_size = std::strtoull(kv["DISK_VIRTUAL_SIZE"].c_str(), nullptr, 10);
  if (a.kernel_sha256.size() != 64 || a.initrd_sha256.size() != 64
      || a.disk_sha256.size() != 64) {
    if (why)
      *why = dir + "/appliance.env has no digests";
    return a;
  }
  a.dir = dir;
  return a;
}

appliance require_vms_or_skip() {
  auto give_up = [](const std::string& why) {
    if (auto req = std::getenv("EGRESS_E2E_REQUIRED"); req && std::string{req} == "1") {
      std::printf("FAILED: EGRESS_E2E_REQUIRED=1 but %s\n", why.c_str());
      std::fflush(stdout);
      std::_Exit(1);
    }
    testbed::skip(why);
  };
  if (auto why = local_host::cannot_run(); !why.empty())
    give_up(why);
  testbed::require_root_or_skip();
  std::string why;
  auto app = appliance::load(appliance::default_dir(), &why);
  if (!app.ok())
    give_up(why);
  return app;
}

// -- mirror -----------------------------------------------------------------------

file_mirror::file_mirror(std::string dir) : dir_(std::move(dir)) {
  port_ = testbed::free_port("127.0.0.1");
  server_ = testbed::process({{"/usr/bin/python3", "-m", "http.server", "--bind", "127.0.0.1",
                               "--directory", dir_, std::to_string(port_)},
                              {},
                              logs_ / "http.log"});
  wait_listening({}, "127.0.0.1", port_, server_, "the image mirror");
}

std::string file_mirror::url(const std::string& file) const {
  return "http://127.0.0.1:" + std::to_string(port_) + "/" + file;
}

// -- local host -----------------------------------------------------------------

std::string local_host::cannot_run() {
  if (::geteuid() != 0)
    return "not root: VMs need a private libvirtd, a bridge and tap devices";
  if (::access("/dev/net/tun", R_OK | W_OK) != 0)
    return "/dev/net/tun is missing: QEMU cannot attach a VM's NIC";
  for (auto tool : {"/usr/sbin/libvirtd", "/usr/bin/qemu-system-x86_64", "/usr/sbin/dnsmasq",
                    "/usr/sbin/sshd", "/usr/bin/python3"})
    if (::access(tool, X_OK) != 0)
      return std::string(tool) + " is missing (scripts/install-deps)";
  return {};
}

namespace {
testbed::libvirtd_options lv_options(const testbed::netns& net, int pools_mib) {
  testbed::libvirtd_options o;
  o.netns = net.name();
  o.pools_mib = pools_mib;
  return o;
}
} // namespace

local_host::local_host(local_host_options opts)
  : opts_(std::move(opts)),
    lv_(lv_options(net_, opts_.pools_mib)),
    ssh_([this] {
      auto o = testbed::sshd_options::in(net_);
      o.libvirt_socket_dir = lv_.socket_dir();
      return o;
    }()) {
  lv_.start();
  ssh_.start();
  try {
    start_network();
  } catch (...) {
    // The destructor does not run for a throwing constructor: libvirt
    // leaves a network's dnsmasq running when it stops, so destroy it here.
    web_.stop();
    lv_.virsh({"net-destroy", "egress-net"});
    throw;
  }
}

void local_host::start_network() {
  pool_ = lv_.define_dir_pool("egress");
  // Isolated (no <forward>): VMs reach the bridge and nothing else.
  auto net_xml = web_dir_ / "net.xml";
  std::string s = std::to_string(opts_.subnet);
  testbed::write_file(
    net_xml,
    "<network xmlns:dnsmasq='http://libvirt.org/schemas/network/dnsmasq/1.0'>\n"
    "  <name>egress-net</name>\n"
    "  <bridge name='" + bridge_name() + "' stp='off' delay='0'/>\n"
    "  <ip address='" + bridge_addr() + "' netmask='255.255.255.0'>\n"
    "    <dhcp><range start='10.213." + s + ".100' end='10.213." + s + ".200'/></dhcp>\n"
    "  </ip>\n"
    // dnsmasq pings an address before offering it: ~3 s per lease under
    // TCG (docs/notes/real-vms.md#dhcp-and-no-ping). The bridge is ours alone, so the check buys nothing.
    "  <dnsmasq:options><dnsmasq:option value='no-ping'/></dnsmasq:options>\n"
    "</network>\n");
  for (auto args : std::vector<std::vector<std::string>>{
         {"net-define", net_xml}, {"net-start", "egress-net"}}) {
    auto r = lv_.virsh(args);
    if (!r.ok())
      throw std::runtime_error("local_host: virsh " + args[0] + ": " + r.output + "\n"
                               + testbed::detail::tail(lv_.log_text(), 20));
  }
  testbed::write_file(web_dir_ / "index.html", "<html>egress target " + opts_.name + "</html>\n");
  auto argv = net_.exec_prefix();
  auto prefix = argv;
  argv.insert(argv.end(), {"/usr/bin/python3", "-m", "http.server", "--bind", bridge_addr(),
                           "--directory", web_dir_.path(), std::to_string(web_port)});
  web_ = testbed::process({argv, {}, web_dir_ / "web.log"});
  wait_listening(prefix, bridge_addr(), web_port, web_, "the target page");
}

local_host::~local_host() {
  web_.stop();
  // libvirtd's destructor destroys the domains; the network's bridge and
  // dnsmasq go with the daemon and the namespace.
  lv_.virsh({"net-destroy", "egress-net"});
}

std::string local_host::bridge_addr() const {
  return "10.213." + std::to_string(opts_.subnet) + ".1";
}

std::string local_host::bridge_name() const {
  return "egbr" + std::to_string(opts_.subnet);
}

std::string local_host::vm_cidr() const {
  return "10.213." + std::to_string(opts_.subnet) + ".0/24";
}

std::string local_host::target() const {
  return "http://" + bridge_addr() + ":" + std::to_string(web_port) + "/";
}

std::string local_host::console_log(const std::string& proxy) const {
  return consoles_ / (proxy + ".console.log");
}

std::string local_host::fetch_through(const std::string& address,
                                      std::chrono::seconds timeout) const {
  auto argv = net_.exec_prefix();
  argv.insert(argv.end(),
              {"/usr/bin/python3", "-c",
               "import sys, urllib.request as u\n"
               "o = u.build_opener(u.ProxyHandler({'http': 'http://" + address + ":"
                 + std::to_string(proxy_port) + "'}))\n"
               "sys.stdout.write(o.open('" + target() + "', timeout="
                 + std::to_string(timeout.count()) + ").read().decode())\n"});
  auto r = testbed::run(argv, timeout + 10s);
  return r.ok() ? r.output : "";
}

vm_network_route::vm_network_route(local_host& host) : host_(host) {
  auto& net = host_.netns();
  try {
    auto sysctl = net.exec_prefix();
    sysctl.insert(sysctl.end(), {"sysctl", "-q", "-w", "net.ipv4.ip_forward=1"});
    testbed::run_checked(sysctl);
    for (auto& r : rules("-I"))
      testbed::run_checked(r);
    testbed::run_checked({"ip", "route", "replace", host_.vm_cidr(), "via", net.peer_addr(),
                          "dev", net.host_if()});
    route_ = host_.vm_cidr();
  } catch (...) {
    for (auto& r : rules("-D"))
      testbed::run(r);
    throw;
  }
}

vm_network_route::~vm_network_route() {
  if (!route_.empty())
    testbed::run({"ip", "route", "del", route_, "dev", host_.netns().host_if()});
  for (auto& r : rules("-D"))
    testbed::run(r);
}

// The namespace's FORWARD chain holds libvirt's rules for the isolated
// network (everything to and from the bridge rejected): these go first.
std::vector<std::vector<std::string>> vm_network_route::rules(const char* op) const {
  auto& net = host_.netns();
  auto bridge = host_.bridge_name();
  auto in_ns = [&](std::vector<std::string> args) {
    auto argv = net.exec_prefix();
    argv.insert(argv.end(), {"iptables", "-w"});
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(), {"-m", "comment", "--comment", testbed::netns::rule_tag()});
    return argv;
  };
  // An insert goes first in its chain; a delete names the rule by its spec.
  std::vector<std::string> forward{op, "FORWARD"}, nat{"-t", "nat", op, "POSTROUTING"};
  if (std::string{op} == "-I") {
    forward.push_back("1");
    nat.push_back("1");
  }
  auto with = [](std::vector<std::string> head, std::vector<std::string> spec) {
    head.insert(head.end(), spec.begin(), spec.end());
    return head;
  };
  return {
    in_ns(with(forward, {"-i", net.peer_if(), "-o", bridge, "-s", net.host_addr(), "-j",
                         "ACCEPT"})),
    in_ns(with(forward, {"-i", bridge, "-o", net.peer_if(), "-m", "conntrack", "--ctstate",
                         "ESTABLISHED,RELATED", "-j", "ACCEPT"})),
    in_ns(with(nat, {"-s", net.host_addr(), "-o", bridge, "-j", "MASQUERADE"})),
  };
}

host_config local_host::host() const {
  auto h = ssh_host(ssh_, lv_, opts_.name, "qemu:///system");
  h.domain_type = "qemu";
  h.pool = "egress";
  h.network = "egress-net";
  h.console_log_dir = consoles_.path();
  h.address_sources = {"lease"};
  // A QEMU start under TCG with others booting takes seconds (docs/notes/real-vms.md#concurrent-boots:
  // 7-18 s for 8 at once): the budget is for a host that stopped answering.
  h.call_budget = 60s;
  return h;
}

// -- configs ------------------------------------------------------------------------

std::vector<image_config> appliance_images(const appliance& a, const file_mirror& mirror) {
  return appliance_images(a, [&](const std::string& file) { return mirror.url(file); });
}

std::vector<image_config>
appliance_images(const appliance& a, const std::function<std::string(const std::string&)>& url_of) {
  image_config k;
  k.name = "appliance-kernel";
  k.url = url_of("vmlinux");
  k.sha256 = a.kernel_sha256;
  k.size = a.kernel_size;
  k.format = "kernel";
  k.transfer_budget = std::chrono::minutes(5);
  image_config i = k;
  i.name = "appliance-initrd";
  i.url = url_of("initrd.gz");
  i.sha256 = a.initrd_sha256;
  i.size = a.initrd_size;
  i.format = "initrd";
  image_config d = k;
  d.name = "appliance-disk";
  d.url = url_of("disk.qcow2");
  d.sha256 = a.disk_sha256;
  d.size = a.disk_size;
  d.format = "qcow2";
  return {k, i, d};
}

proxy_spec appliance_proxy(const std::string& name, const local_host& host,
                           appliance_boot boot) {
  proxy_spec p;
  p.name = name;
  p.host = host.name();
  p.vcpus = 1;
  p.memory_mib = 128;
  p.network = "egress-net";
  p.tags = {"e2e"};
  p.kernel = "appliance-kernel";
  p.initrd = "appliance-initrd";
  p.cmdline = "console=ttyS0 loglevel=4 panic=-1";
  if (boot == appliance_boot::disk) {
    p.image = "appliance-disk";
    p.cmdline += " root=/dev/vda";
  }
  p.port = local_host::proxy_port;
  p.allow_from = host.vm_cidr();
  return p;
}

engine_config appliance_config(const std::string& entry, const appliance& a,
                               const file_mirror& mirror,
                               const std::vector<const local_host*>& hosts,
                               const std::vector<std::pair<std::string, std::string>>& proxies,
                               appliance_boot boot) {
  engine_config c;
  c.entry = entry;
  c.poll_interval = 500ms;
  c.shutdown_timeout = 10s;
  c.gc = true;
  for (auto h : hosts)
    c.hosts.push_back(h->host());
  c.images = appliance_images(a, mirror);
  for (auto& [name, host] : proxies)
    for (auto h : hosts)
      if (h->name() == host)
        c.proxies.push_back(appliance_proxy(name, *h, boot));
  c.probe.mode = "http";
  // One target for all proxies: the page is fetched by each proxy from
  // inside its own host's VM network, so every host must use the same
  // subnet (each is in a namespace of its own, so they never collide).
  for (auto h : hosts)
    if (h->target() != hosts.front()->target())
      throw std::runtime_error("appliance_config: hosts " + h->name() + " and "
                               + hosts.front()->name() + " have different VM subnets");
  c.probe.target = hosts.front()->target();
  c.inspect.port = 0; // any free port: several engines may run at once
  c.metrics.port = 0;
  c.probe.interval = 2s;
  c.probe.timeout = 2s;
  c.probe.rise = 2;
  c.probe.fall = 3;
  return c;
}

} // namespace egress::test
