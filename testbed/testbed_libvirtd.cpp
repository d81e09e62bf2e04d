// A private root libvirtd in its own mount namespace.
//
// Layout of dir():
//   etc/            bind-mounted over /etc/libvirt (libvirtd.conf, qemu.conf,
//                   and what libvirt writes there: pool and domain XML)
//   passwd, group   bind-mounted over /etc/passwd and /etc/group, only when
//                   the host lacks "libvirt-qemu" (libvirt looks it up before
//                   it reads qemu.conf and exits if it is missing)
//   run-upper/      overlay upper of /run  (/run/libvirt: sockets, pid files,
//   var-upper/      overlay upper of /var   domain status; caches, images)
//   sock/           unix_sock_dir: libvirt-sock, libvirt-sock-ro, admin
//   pools/          the dir pools; a tmpfs when libvirtd_options::pools_mib
//   mounts.sh       mounts all that in a new mount namespace, then sleeps:
//                   the holder of that namespace for every start of libvirtd
//   start.sh        run inside it: binds passwd and group if needed, then
//                   `exec libvirtd`
// Everything survives a crash or restart, so restart() finds the same
// state, the same socket and the cached QEMU capabilities.
//
// Why a holder: a restarted libvirtd that mounted its own overlays again
// would share the upper directories with the first start's mounts, which
// its dnsmasq and QEMU processes still hold. Overlayfs does not support two
// mounts writing one upper directory: the new daemon read a stale copy of
// the leases file that the running dnsmasq kept writing through the old
// mount, and proxies booted after a libvirtd restart never got addresses.
// On a real host a restarted libvirtd sees the same /run and /var as its
// dnsmasq; entering the holder's namespace gives the test bed that too.
#include "testbed/testbed.hpp"

#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

namespace egress::testbed {

namespace {

using clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

bool has_entry(const std::string& db, const std::string& name) {
  std::stringstream lines(db);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind(name + ":", 0) == 0)
      return true;
  return false;
}

/// A plain connect() on the unix socket: cheap, and libvirt is only asked
/// (and prints its errors) once something listens.
bool socket_accepts(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  path.copy(sa.sun_path, sizeof sa.sun_path - 1);
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
  ::close(fd);
  return ok;
}

void write_config(const std::string& dir, const libvirtd_options& opts) {
  fs::create_directories(dir + "/etc");
  fs::create_directories(dir + "/sock");
  write_file(dir + "/etc/libvirtd.conf",
             "unix_sock_dir = \"" + dir + "/sock\"\n"
             "unix_sock_rw_perms = \"0700\"\n"
             "auth_unix_rw = \"none\"\n"
             "log_outputs = \"" + std::to_string(opts.log_level) + ":file:" + dir
               + "/libvirtd.log\"\n");
  write_file(dir + "/etc/qemu.conf",
             "user = \"root\"\n"
             "group = \"root\"\n"
             "dynamic_ownership = 0\n"
             "security_driver = \"none\"\n"
             "stdio_handler = \"file\"\n");  // no virtlogd needed

  std::string q = detail::shell_quote(dir);
  std::string script = "#!/bin/sh\n# Runs inside unshare -m: these mounts are private.\nset -e\n";
  script += "mount --bind " + q + "/etc /etc/libvirt\n";
  script += detail::private_run_var(dir);
  // libvirtd refuses to start without /var/log/libvirt; these go to the uppers.
  script += "mkdir -p /run/libvirt /var/log/libvirt /var/lib/libvirt /var/cache/libvirt\n";
  script += ": > " + q + "/mounted\n";
  script += "exec sleep infinity\n";
  write_file(dir + "/mounts.sh", script, 0755);

  // passwd and group are bound at every start, inside the held namespace,
  // when what it sees lacks the user: a file bound over /etc/passwd leaves
  // every other namespace's mounts when the host replaces the file (adduser
  // renames a new one over it), so a bind made once could be gone by the
  // next restart.
  auto passwd = read_file("/etc/passwd"), group = read_file("/etc/group");
  // 64055 is Debian's id for it; only the name matters, qemu runs as root.
  if (!has_entry(passwd, "libvirt-qemu"))
    passwd += "libvirt-qemu:x:64055:64055:Libvirt Qemu:/var/lib/libvirt:/usr/sbin/nologin\n";
  if (!has_entry(group, "libvirt-qemu"))
    group += "libvirt-qemu:x:64055:\n";
  write_file(dir + "/passwd", passwd);
  write_file(dir + "/group", group);
  std::string start = "#!/bin/sh\n# Runs inside the held namespace (mounts.sh).\nset -e\n";
  for (auto db : {"passwd", "group"})
    start += std::string{"grep -q '^libvirt-qemu:' /etc/"} + db + " || mount --bind " + q + "/"
             + db + " /etc/" + db + "\n";
  start += "exec /usr/sbin/libvirtd -f " + q + "/etc/libvirtd.conf -p " + q + "/libvirtd.pid\n";
  write_file(dir + "/start.sh", start, 0755);
}

/// The PID in a daemon's pid file; 0 when unreadable.
pid_t read_pid(const fs::path& path) {
  try {
    return std::stoi(read_file(path));
  } catch (...) {
    return 0;
  }
}

} // namespace

libvirtd::libvirtd(libvirtd_options opts) : opts_(std::move(opts)), dir_("libvirtd") {
  if (socket_path().size() >= sizeof(sockaddr_un::sun_path))
    throw std::runtime_error("testbed: socket path too long: " + socket_path());
  write_config(dir(), opts_);
}

libvirtd::~libvirtd() {
  try {
    stop();
  } catch (...) {
    // A destructor must finish: kill_leftover_domains below still runs.
  }
  kill_leftover_domains(dir());
  try {
    unmount_pools(); // if stop() threw before it
  } catch (...) {
  }
}

std::string libvirtd::socket_path() const {
  return dir_ / "sock/libvirt-sock";
}

std::string libvirtd::uri(const std::string& driver) const {
  return driver + "+unix:///" + (driver == "test" ? "default" : "system")
         + "?socket=" + socket_path();
}

std::string libvirtd::log_text() const {
  return read_file(dir_ / "libvirtd.log") + read_file(dir_ / "libvirtd.stderr");
}

// In this (the caller's) namespace, before the holder copies it: the
// holder's copy is the same filesystem, so what a test writes to dir()/pools
// fills the daemon's pools too.
void libvirtd::mount_pools() {
  if (opts_.pools_mib <= 0 || pools_mounted_)
    return;
  fs::create_directories(dir_ / "pools");
  run_checked({"mount", "-t", "tmpfs", "-o", "size=" + std::to_string(opts_.pools_mib) + "m",
               "egress-testbed-pools", dir_ / "pools"});
  pools_mounted_ = true;
}

void libvirtd::unmount_pools() {
  if (!pools_mounted_)
    return;
  // Lazy: a file still open elsewhere must not keep the mount, and with it
  // the directory, from going.
  run({"umount", "--lazy", dir_ / "pools"});
  pools_mounted_ = false;
}

void libvirtd::hold_namespace() {
  if (holder_.alive())
    return;
  mount_pools();
  fs::remove(dir_ / "mounted");
  holder_ = process({detail::in_namespaces(opts_.netns, {"/bin/sh", dir_ / "mounts.sh"}),
                     {},
                     dir_ / "mounts.stderr"});
  auto deadline = clock::now() + std::chrono::seconds(10);
  while (!fs::exists(dir_ / "mounted")) {
    if (!holder_.alive() || clock::now() > deadline)
      throw std::runtime_error("testbed: libvirtd's mounts failed:\n"
                               + read_file(dir_ / "mounts.stderr"));
    std::this_thread::sleep_for(ms(10));
  }
}

void libvirtd::start() {
  if (daemon_.alive())
    throw std::runtime_error("testbed: libvirtd already running");
  hold_namespace();
  // nsenter and start.sh exec (no --fork): the PID we hold is libvirtd's.
  std::vector<std::string> argv{"nsenter", "--target", std::to_string(holder_.pid()), "--mount"};
  if (!opts_.netns.empty())
    argv.push_back("--net");
  argv.insert(argv.end(), {"--", "/bin/sh", dir_ / "start.sh"});
  daemon_ = process({argv, {}, dir_ / "libvirtd.stderr"});
  wait_ready(opts_.ready_timeout);
}

void libvirtd::wait_ready(ms timeout) {
  auto deadline = clock::now() + timeout;
  for (;;) {
    if (!daemon_.alive())
      throw std::runtime_error("testbed: libvirtd exited during start:\n"
                               + detail::tail(log_text(), 20));
    if (socket_accepts(socket_path())) {
      // Blocks until libvirtd has initialised its drivers.
      if (virConnectPtr c = virConnectOpen(uri().c_str())) {
        // QEMU capabilities are probed lazily, by the first call that needs
        // them (~5 s here): do it now, not inside a test's call budget.
        unsigned long version = 0;
        int rc = opts_.warm_qemu_caps ? virConnectGetVersion(c, &version) : 0;
        virConnectClose(c);
        if (rc != 0)
          throw std::runtime_error("testbed: libvirtd cannot probe QEMU:\n"
                                   + detail::tail(log_text(), 20));
        return;
      }
      virResetLastError();
    }
    if (clock::now() > deadline)
      throw std::runtime_error("testbed: libvirtd not ready after "
                               + std::to_string(timeout.count()) + " ms:\n"
                               + detail::tail(log_text(), 20));
    std::this_thread::sleep_for(ms(50));
  }
}

void libvirtd::crash() {
  daemon_.signal(SIGKILL);
  daemon_.stop();  // reaps it
}

void libvirtd::restart() {
  daemon_.stop(std::chrono::seconds(10));
  start();
}

void libvirtd::destroy_domains() {
  auto names = virsh({"list", "--name"}, std::chrono::seconds(10));
  std::stringstream lines(names.output);
  for (std::string name; std::getline(lines, name);)
    if (!name.empty())
      virsh({"destroy", name}, std::chrono::seconds(15));
}

void libvirtd::stop() {
  if (daemon_.alive()) {
    resume();  // a paused daemon would not answer
    // Destroyed through libvirt, a domain's cgroups and files go with it.
    destroy_domains();
  }
  daemon_.stop(std::chrono::seconds(10));
  kill_leftover_domains(dir());
  holder_.stop();
  unmount_pools();
}

run_result libvirtd::virsh(const std::vector<std::string>& args, ms timeout) const {
  std::vector<std::string> argv{"virsh", "-q", "-c", uri()};
  argv.insert(argv.end(), args.begin(), args.end());
  return run(argv, timeout);
}

std::string libvirtd::define_dir_pool(const std::string& name) {
  auto target = dir_ / ("pools/" + name);
  fs::create_directories(target);
  for (auto args : std::vector<std::vector<std::string>>{
         {"pool-define-as", name, "dir", "--target", target},
         {"pool-build", name},
         {"pool-start", name}}) {
    auto res = virsh(args);
    if (!res.ok())
      throw std::runtime_error("testbed: virsh " + args[0] + " " + name + ": " + res.output);
  }
  return target;
}

void libvirtd::kill_leftover_domains(const std::string& dir) {
  // libvirt keeps "<name>.pid" for each running qemu in /run/libvirt/qemu,
  // which for our daemon is our overlay's upper dir: exactly our domains.
  std::error_code ec;
  fs::directory_iterator it(dir + "/run-upper/libvirt/qemu", ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    auto path = it->path();
    if (path.extension() != ".pid")
      continue;
    pid_t pid = read_pid(path);
    if (pid <= 0)
      continue;
    // The PID may have been reused since: only a qemu running this guest.
    auto proc = "/proc/" + std::to_string(pid);
    auto cmdline = read_file(proc + "/cmdline");
    if (pid <= 1 || cmdline.find("guest=" + path.stem().string() + ",") == std::string::npos)
      continue;
    auto cgroups = read_file(proc + "/cgroup");
    ::kill(pid, SIGKILL);
    // Not our child: wait for it to vanish (its parent, init, reaps it).
    for (int i = 0; i < 500 && fs::exists(proc); ++i)
      std::this_thread::sleep_for(ms(10));
    // libvirt would have removed the guest's cgroups; it is not there to.
    std::stringstream lines(cgroups);
    for (std::string line; std::getline(lines, line);) {
      auto rel = line.substr(line.rfind(':') + 1);
      auto guest = rel.find(".libvirt-qemu");
      if (rel.rfind("/machine/", 0) != 0 || guest == std::string::npos)
        continue;
      auto ctrl = line.substr(line.find(':') + 1);
      ctrl = ctrl.substr(0, ctrl.find(':'));
      std::string mnt = "/sys/fs/cgroup";
      if (!ctrl.empty())
        mnt += "/" + ctrl.substr(ctrl.find('=') + 1);  // "cpu", "name=systemd"
      else if (fs::exists(mnt + "/unified"))             // v2 beside v1 (hybrid)
        mnt += "/unified";
      auto root = mnt + rel.substr(0, guest + 13);     // up to ".libvirt-qemu"
      std::error_code iec;
      std::vector<fs::path> dirs{root};  // pre-order: every parent before its children
      for (fs::recursive_directory_iterator d(root, iec), dend; !iec && d != dend;
           d.increment(iec))
        if (d->is_directory(iec))
          dirs.push_back(d->path());
      for (auto p = dirs.rbegin(); p != dirs.rend(); ++p)  // so children go first
        ::rmdir(p->c_str());
    }
    std::error_code rec;
    fs::remove(path, rec);
  }
  // A network's dnsmasq outlives libvirtd on purpose (libvirt reconnects to
  // it on restart); once the daemon is gone for good it is ours to end. Its
  // pid file is "<network>.pid" in our /run overlay, and its command line
  // names "<network>.conf" under the daemon's private /var/lib/libvirt.
  fs::directory_iterator nit(dir + "/run-upper/libvirt/network", ec);
  for (; !ec && nit != end; nit.increment(ec)) {
    auto path = nit->path();
    if (path.extension() != ".pid")
      continue;
    pid_t pid = read_pid(path);
    if (pid <= 0)
      continue;
    auto cmdline = read_file("/proc/" + std::to_string(pid) + "/cmdline");
    if (pid > 1 && cmdline.find("dnsmasq") != std::string::npos
        && cmdline.find("/" + path.stem().string() + ".conf") != std::string::npos)
      ::kill(pid, SIGKILL);
    std::error_code rec;
    fs::remove(path, rec);
  }
}

} // namespace egress::testbed
