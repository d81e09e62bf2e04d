// A private OpenSSH sshd with its own keys and known_hosts files.
//
// It runs in a private mount namespace with overlays on /run and /var:
// privilege separation needs /run/sshd, and sessions may write wtmp/lastlog,
// and neither should appear on the host. See below for /etc/shadow.
#include "testbed/testbed.hpp"

#include <stdexcept>
#include <thread>

#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

namespace egress::testbed {

namespace {

using clock = std::chrono::steady_clock;

void keygen(const std::string& type, const std::string& path) {
  std::vector<std::string> argv{"ssh-keygen", "-q", "-t", type, "-N", "", "-C", "testbed-" + type,
                                "-f", path};
  if (type == "rsa")
    argv.insert(argv.end(), {"-b", "2048"});
  run_checked(argv);
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' '))
    s.pop_back();
  return s;
}

} // namespace

sshd_options sshd_options::in(const testbed::netns& ns) {
  sshd_options o;
  o.address = ns.peer_addr();
  o.netns = ns.name();
  return o;
}

sshd::sshd(sshd_options opts) : opts_(std::move(opts)), dir_("sshd") {
  if (opts_.port == 0)
    opts_.port = opts_.netns.empty() ? free_port(opts_.address) : 2222;  // a fresh namespace
  keygen("ed25519", host_key());
  keygen("ed25519", client_key());
  keygen("rsa", rsa_key());
  keygen("ed25519", unauthorized_key());
  write_file(authorized_keys(),
             read_file(client_key() + ".pub") + read_file(rsa_key() + ".pub"), 0600);
  // Port 22 would be written without brackets; we never use 22.
  auto host = "[" + opts_.address + "]:" + std::to_string(opts_.port) + " ";
  write_file(known_hosts(), host + trim(read_file(host_key() + ".pub")) + "\n");
  write_file(wrong_known_hosts(), host + trim(read_file(unauthorized_key() + ".pub")) + "\n");
  write_file(empty_known_hosts(), "");
  write_file(config_path(),
             "ListenAddress " + opts_.address + "\n"
             "Port " + std::to_string(opts_.port) + "\n"
             "HostKey " + host_key() + "\n"
             "AuthorizedKeysFile " + authorized_keys() + "\n"
             "PidFile " + (dir_ / "sshd.pid") + "\n"
             "PasswordAuthentication no\n"
             "KbdInteractiveAuthentication no\n"
             "PubkeyAuthentication yes\n"
             "UsePAM no\n"
             "StrictModes no\n"
             "PermitRootLogin prohibit-password\n"
             "AllowStreamLocalForwarding yes\n"
             // A session whose client vanished (a partition, a namespace
             // torn down) ends by itself within seconds instead of
             // outliving the test.
             "ClientAliveInterval 2\n"
             "ClientAliveCountMax 2\n"
             "AllowTcpForwarding yes\n"
             "PrintMotd no\n"
             "PrintLastLog no\n"
             "MaxStartups 100\n"  // tests open many sessions at once
             "LogLevel VERBOSE\n");
  // With UsePAM no, sshd refuses accounts whose shadow password starts with
  // "!" (root on many installs), even for key logins. sshd only looks up
  // root, so it gets a shadow with root unlocked and no password: no real
  // hash is read or copied.
  write_file(dir_ / "shadow", "root:*:19000:0:99999:7:::\n", 0600);
  std::string script = "#!/bin/sh\n# Runs inside unshare -m: these mounts are private.\nset -e\n";
  script += "mount --bind " + detail::shell_quote(dir_ / "shadow") + " /etc/shadow\n";
  script += detail::private_run_var(dir());
  script += "mkdir -p /run/sshd\n";  // privilege separation chroot
  if (!opts_.libvirt_socket_dir.empty())
    script += "mkdir -p /run/libvirt\nmount --bind "
              + detail::shell_quote(opts_.libvirt_socket_dir) + " /run/libvirt\n";
  // -D: no fork, so our PID is the listener; -e: log to stderr (our log).
  script += "exec /usr/sbin/sshd -D -e -f " + detail::shell_quote(config_path()) + "\n";
  write_file(dir_ / "start.sh", script, 0755);
}

sshd::~sshd() {
  daemon_.stop();
}

std::string sshd::log_text() const {
  return read_file(dir_ / "sshd.log");
}

void sshd::crash() {
  daemon_.signal(SIGKILL);
  daemon_.stop();
}

void sshd::start() {
  if (daemon_.alive())
    throw std::runtime_error("testbed: sshd already running");
  auto log = dir_ / "sshd.log";
  auto before = read_file(log).size();  // a restart appends to the same log
  daemon_ = process({detail::in_namespaces(opts_.netns, {"/bin/sh", dir_ / "start.sh"}), {}, log});
  // sshd logs this right after listen(): from then on connect() succeeds,
  // also when the address is only reachable inside the namespace.
  auto deadline = clock::now() + std::chrono::seconds(10);
  while (read_file(log).find("Server listening on", before) == std::string::npos) {
    if (!daemon_.alive() || clock::now() > deadline)
      throw std::runtime_error("testbed: sshd did not start:\n" + detail::tail(log_text(), 20));
    std::this_thread::sleep_for(ms(10));
  }
}

std::vector<std::string> sshd::ssh_argv(const std::string& command, std::string key,
                                        std::string known_hosts_file,
                                        int connect_timeout_s) const {
  return {"ssh", "-F", "/dev/null",
          "-o", "BatchMode=yes",
          "-o", "IdentitiesOnly=yes",
          "-o", "IdentityAgent=none",
          "-o", "StrictHostKeyChecking=yes",
          "-o", "GlobalKnownHostsFile=/dev/null",
          "-o", "UserKnownHostsFile=" + (known_hosts_file.empty() ? known_hosts() : known_hosts_file),
          "-o", "ConnectTimeout=" + std::to_string(connect_timeout_s),
          "-o", "LogLevel=ERROR",
          "-i", key.empty() ? client_key() : key,
          "-p", std::to_string(opts_.port),
          user() + "@" + opts_.address,
          command};
}

} // namespace egress::testbed
