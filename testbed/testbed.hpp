#pragma once
// Test bed: real daemons for integration tests, started and stopped by the
// test itself.
//
//   testbed::require_root_or_skip();         // exit 77 unless we may do this
//   testbed::netns net;                       // namespace + veth, 10.250.x.y/30
//   testbed::sshd ssh(testbed::sshd_options::in(net));
//   ssh.start();
//   testbed::libvirtd lv;
//   lv.start();                               // ~4-5 s (QEMU probe); restart ~0.4 s
//   ... lv.uri(), ssh.client_key(), net.partition() ...
//
// Rules it keeps (the project's test standards): every process it starts is stopped by PID
// (and dies with the test: PR_SET_PDEATHSIG); the daemons see private copies
// of /etc/libvirt, /run and /var (mount namespace + overlays), so the
// machine's own /etc, /run and /var are untouched; the only network targets
// are loopback and the veth peer inside a namespace the test created;
// firewall rules are tagged "egress-test-<pid>" and removed; every
// destructor removes what its constructor made. Leftovers of a test that was
// SIGKILLed are reaped by sweep_stale() (called by require_root_or_skip())
// or build/testbed-sweep (testbed/sweep_stale.cpp).

#include <chrono>
#include <csignal>
#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

namespace egress::testbed {

using ms = std::chrono::milliseconds;

// ---- skip rule --------------------------------------------------------------

/// Prints "SKIPPED: <reason>" and exits with 77 (ctest: skipped). Call it
/// before starting anything: it does not run destructors.
[[noreturn]] void skip(const std::string& reason);

/// Skips unless we are root, may create mount and network namespaces, and
/// the daemons and tools the test bed drives are installed. Then reaps what
/// killed earlier runs left behind (sweep_stale).
void require_root_or_skip();

/// Removes namespaces, veths, tagged iptables rules, temp dirs and their
/// qemu processes that belong to test processes which no longer exist.
void sweep_stale();

// ---- small helpers ----------------------------------------------------------

std::string read_file(const std::string& path);  // "" when unreadable
void write_file(const std::string& path, const std::string& text, mode_t mode = 0644);

/// A fresh directory /tmp/egress-testbed-<pid>-<tag>-XXXXXX (mode 0700),
/// removed with everything in it by the destructor. The pid in the name lets
/// sweep_stale() find directories of dead test processes.
class temp_dir {
public:
  explicit temp_dir(const std::string& tag);
  ~temp_dir();
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

private:
  std::string path_;
};

// ---- processes --------------------------------------------------------------

struct run_result {
  int exit_code = -1;     // -1: killed by a signal (or by the timeout)
  bool timed_out = false;
  std::string output;     // stdout and stderr, interleaved
  bool ok() const { return exit_code == 0 && !timed_out; }
};

/// Runs a command (no shell) to completion; SIGKILLs it at the timeout.
run_result run(const std::vector<std::string>& argv, ms timeout = std::chrono::seconds(30));

/// Like run(), but throws std::runtime_error (command + output) unless ok().
std::string run_checked(const std::vector<std::string>& argv,
                        ms timeout = std::chrono::seconds(30));

struct spawn_options {
  std::vector<std::string> argv;  // argv[0] is looked up in PATH
  std::vector<std::string> env;   // "NAME=value", added to our environment
  std::string log_path;           // stdout+stderr appended here; "" = /dev/null
};

/// A child process we own. The child runs in its own process group, with
/// default signal dispositions, no inherited fds beyond 0-2, and
/// PR_SET_PDEATHSIG=SIGKILL (it dies when the spawning *thread* exits, so
/// spawn from the test's thread). The destructor stops it.
class process {
public:
  process() = default;
  explicit process(const spawn_options& opts);
  ~process();
  process(process&& other) noexcept;
  process& operator=(process&& other) noexcept;
  process(const process&) = delete;
  process& operator=(const process&) = delete;

  pid_t pid() const { return pid_; }       // 0 when never started
  bool alive();                            // reaps it if it has exited
  void signal(int sig);                    // no-op once reaped (the PID may be reused)
  /// SIGTERM (+SIGCONT, in case it is stopped), SIGKILL after `grace`, then
  /// waitpid. Returns the wait status; idempotent.
  int stop(ms grace = std::chrono::seconds(5));
  std::optional<int> wait_status() const { return status_; }

private:
  bool reap(bool block);
  pid_t pid_ = 0;
  std::optional<int> status_;
};

// ---- network namespace ------------------------------------------------------

/// A network namespace "egt-<pid>-<n>" joined to the root namespace by a veth
/// pair with a /30 from 10.250.0.0/16 that no address or route on this
/// machine overlaps (so parallel tests don't collide). Traffic to peer_addr()
/// can only go to the veth peer.
class netns {
public:
  netns();
  ~netns();
  netns(const netns&) = delete;
  netns& operator=(const netns&) = delete;

  const std::string& name() const { return name_; }
  const std::string& host_if() const { return host_if_; }  // root-namespace end
  const std::string& peer_if() const { return peer_if_; }  // inside the namespace
  const std::string& host_addr() const { return host_addr_; }
  const std::string& peer_addr() const { return peer_addr_; }
  /// Prefix that runs a command inside the namespace: {"ip","netns","exec",name}.
  std::vector<std::string> exec_prefix() const;
  /// Runs a command inside the namespace (run() semantics).
  run_result exec(const std::vector<std::string>& argv,
                  ms timeout = std::chrono::seconds(30)) const;

  /// Silently drops every packet on the peer's veth, both directions
  /// (iptables DROP inside the namespace, tagged "egress-test-<pid>"):
  /// connections hang, new ones time out. heal() removes the rules.
  void partition();
  void heal();
  bool partitioned() const { return partitioned_; }

  /// Takes the *peer* end down/up: no carrier, packets are lost. (Downing the
  /// host end would delete the /30 route and send the traffic to the default
  /// gateway; link_down() checks that the route still points at the veth.)
  void link_down();
  void link_up();

  /// Comment tag on every rule this process adds: "egress-test-<pid>".
  static std::string rule_tag();

private:
  std::vector<std::string> rule(const char* op, const char* chain) const;
  std::string name_, host_if_, peer_if_, host_addr_, peer_addr_;
  bool partitioned_ = false;
};

/// A TCP port nobody listens on at `address` a moment ago (the kernel picks
/// it), inside network namespace `netns` if given. Throws when none.
int free_port(const std::string& address, const std::string& netns = {});

// ---- libvirtd ---------------------------------------------------------------

struct libvirtd_options {
  std::string netns;                         // run inside this network namespace
  ms ready_timeout = std::chrono::seconds(60);
  int log_level = 3;                         // libvirt log_outputs: 1 debug .. 4 error
  bool warm_qemu_caps = true;                // start() waits for the QEMU probe too
  /// > 0: dir()/pools is a tmpfs of this many MiB, mounted before the first
  /// start (so the daemon's namespace holds it too) and unmounted by stop(),
  /// a filesystem a test can fill; 0: the pools are on the machine's disk.
  int pools_mib = 0;
};

/// A private root libvirtd (qemu:///system driver) in its own mount
/// namespace: private /etc/libvirt, overlays on /run and /var, a passwd with
/// "libvirt-qemu" (libvirt resolves it before reading qemu.conf), socket in
/// dir()/sock. qemu.conf: user/group root, security_driver none,
/// stdio_handler file, dynamic_ownership 0. The constructor only writes the
/// files.
class libvirtd {
public:
  explicit libvirtd(libvirtd_options opts = {});
  ~libvirtd();  // stop(), then removes the directory
  libvirtd(const libvirtd&) = delete;
  libvirtd& operator=(const libvirtd&) = delete;

  /// Spawns the daemon (pid() is libvirtd's own) and waits until a
  /// virConnectOpen on the socket succeeds and (warm_qemu_caps) the QEMU
  /// capabilities are probed: ~0.5 s + ~4 s the first time, ~0.4 s on
  /// restart (cached in dir()). Throws with the log tail.
  void start();
  void wait_ready(ms timeout);
  void pause() { daemon_.signal(SIGSTOP); }   // SIGSTOP: calls hang
  void resume() { daemon_.signal(SIGCONT); }  // SIGCONT
  void crash();    // SIGKILL + reap; domains (qemu) keep running, as in real life
  void restart();  // stop the process (if alive) + start(): same dirs and socket
  /// Destroys running domains, SIGTERMs the daemon, then kills qemu
  /// processes it left (pid files in its private /run) and their cgroups.
  void stop();
  bool alive() { return daemon_.alive(); }
  pid_t pid() const { return daemon_.pid(); }

  const std::string& dir() const { return dir_.path(); }
  std::string socket_dir() const { return dir_ / "sock"; }
  std::string socket_path() const;
  /// "qemu+unix:///system?socket=…"; "test" gives "test+unix:///default?socket=…".
  std::string uri(const std::string& driver = "qemu") const;
  std::string log_text() const;  // libvirtd.log + the daemon's stderr

  /// virsh -c uri() <args>.
  run_result virsh(const std::vector<std::string>& args,
                   ms timeout = std::chrono::seconds(30)) const;
  /// Defines, builds and starts a dir pool under dir()/pools/<name>;
  /// returns its target path.
  std::string define_dir_pool(const std::string& name);

  /// Kills the qemu processes whose pid files are in <dir>/run-upper and
  /// removes their (empty) cgroups. Used by stop() and sweep_stale().
  static void kill_leftover_domains(const std::string& dir);

private:
  void destroy_domains();
  void hold_namespace(); // the mount namespace every start enters (testbed_libvirtd.cpp)
  libvirtd_options opts_;
  temp_dir dir_;
  void mount_pools();   // opts_.pools_mib: the tmpfs under dir()/pools
  void unmount_pools();
  process holder_;
  process daemon_;
  bool pools_mounted_ = false;
};

// ---- sshd -------------------------------------------------------------------

struct sshd_options {
  std::string address = "127.0.0.1";
  int port = 0;        // 0: a free port on address (2222 inside a namespace)
  std::string netns;   // run inside this network namespace
  /// If set (libvirtd::socket_dir()), bind-mounted over /run/libvirt for
  /// sshd and its sessions: the default qemu:///system socket there is the
  /// private libvirtd's, as on a real hypervisor host, so virt-ssh-helper
  /// (qemu+ssh / qemu+libssh2 URIs without socket=) and direct-streamlocal
  /// to /run/libvirt/libvirt-sock reach it.
  std::string libvirt_socket_dir;
  /// Listen on the namespace's peer address, inside it.
  static sshd_options in(const testbed::netns& ns);
};

/// A private OpenSSH sshd (sshd -D -e, so pid() is the listener) with its own
/// keys, config and known_hosts files, in a private mount namespace (overlay
/// /run for the privilege-separation dir /run/sshd, overlay /var for wtmp, a
/// shadow file in which root is not locked), so nothing on the host is
/// created. The constructor writes the keys and files (~0.2-0.5 s, RSA
/// keygen); start() launches and waits for "Server listening" (~0.1 s).
class sshd {
public:
  explicit sshd(sshd_options opts = {});
  ~sshd();
  sshd(const sshd&) = delete;
  sshd& operator=(const sshd&) = delete;

  void start();
  void stop() { daemon_.stop(); }
  void pause() { daemon_.signal(SIGSTOP); }
  void resume() { daemon_.signal(SIGCONT); }
  void crash();
  bool alive() { return daemon_.alive(); }
  pid_t pid() const { return daemon_.pid(); }

  const std::string& address() const { return opts_.address; }
  int port() const { return opts_.port; }
  std::string user() const { return "root"; }
  const std::string& dir() const { return dir_.path(); }
  std::string config_path() const { return dir_ / "sshd_config"; }
  std::string host_key() const { return dir_ / "host_ed25519"; }       // + ".pub"
  std::string client_key() const { return dir_ / "client_ed25519"; }   // authorized
  std::string rsa_key() const { return dir_ / "client_rsa"; }          // authorized; libssh2 1.10 can't use it
  std::string unauthorized_key() const { return dir_ / "other_ed25519"; }
  std::string authorized_keys() const { return dir_ / "authorized_keys"; }
  std::string known_hosts() const { return dir_ / "known_hosts"; }     // right host key
  std::string wrong_known_hosts() const { return dir_ / "known_hosts_wrong"; }
  std::string empty_known_hosts() const { return dir_ / "known_hosts_empty"; }
  std::string log_text() const;

  /// OpenSSH client argv that reads nothing from ~/.ssh, /etc/ssh or an
  /// agent: ssh -F /dev/null -o BatchMode=yes … -p port root@address command.
  std::vector<std::string> ssh_argv(const std::string& command, std::string key = "",
                                    std::string known_hosts_file = "",
                                    int connect_timeout_s = 5) const;

private:
  sshd_options opts_;
  temp_dir dir_;
  process daemon_;
};

namespace detail {
/// sh lines that overlay /run and /var with upper dirs under `dir`, so a
/// daemon's writes there stay private. Run inside `unshare -m`.
std::string private_run_var(const std::string& dir);
/// `argv` prefixed so it runs in `ns` (if any) and a private mount namespace.
std::vector<std::string> in_namespaces(const std::string& ns, std::vector<std::string> argv);
std::string shell_quote(const std::string& s);
std::string tail(const std::string& text, size_t lines);
} // namespace detail

} // namespace egress::testbed
