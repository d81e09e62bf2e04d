// The skip rule (exit 77 when the machine can't host the test bed) and the
// sweeper for what killed test processes left behind.
#include "testbed/testbed.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <sstream>

#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

namespace egress::testbed {

namespace {

namespace fs = std::filesystem;

bool on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/sbin:/usr/bin:/sbin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');)
    if (::access((dir + "/" + name).c_str(), X_OK) == 0)
      return true;
  return false;
}

/// In a child: new mount and network namespaces, and the overlay mount the
/// daemons' start scripts make. Returns "" or what failed.
std::string probe_namespaces() {
  temp_dir probe("probe");
  for (auto d : {"lower", "upper", "work", "merged"})
    fs::create_directory(probe / d);
  std::string opts = "lowerdir=" + (probe / "lower") + ",upperdir=" + (probe / "upper")
                     + ",workdir=" + (probe / "work");
  std::string merged = probe / "merged";
  pid_t pid = ::fork();
  if (pid == 0) {
    if (::unshare(CLONE_NEWNS | CLONE_NEWNET) != 0)
      ::_exit(1);
    if (::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
      ::_exit(2);
    if (::mount("overlay", merged.c_str(), "overlay", 0, opts.c_str()) != 0)
      ::_exit(3);
    ::_exit(0);
  }
  int st = 0;
  ::waitpid(pid, &st, 0);
  switch (WIFEXITED(st) ? WEXITSTATUS(st) : -1) {
  case 0: return "";
  case 1: return "unshare(CLONE_NEWNS|CLONE_NEWNET) not permitted";
  case 2: return "cannot make mounts private in a mount namespace";
  case 3: return "cannot mount overlayfs in a mount namespace";
  default: return "namespace probe crashed";
  }
}

bool pid_alive(pid_t pid) {
  return ::kill(pid, 0) == 0 || errno == EPERM;
}

/// The owner PID in a name made by this test bed, if that process is gone.
std::optional<pid_t> dead_owner(const std::string& name, const std::regex& re) {
  std::smatch m;
  if (!std::regex_search(name, m, re))
    return std::nullopt;
  pid_t pid = std::stoi(m[1]);
  if (pid <= 1 || pid_alive(pid))
    return std::nullopt;
  return pid;
}

std::vector<std::string> split_words(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false, any = false;
  for (char c : line) {
    if (c == '"') {
      quoted = !quoted;
      any = true;
    } else if (c == ' ' && !quoted) {
      if (any || !cur.empty())
        out.push_back(cur);
      cur.clear();
      any = false;
    } else {
      cur += c;
    }
  }
  if (any || !cur.empty())
    out.push_back(cur);
  return out;
}

} // namespace

void skip(const std::string& reason) {
  std::printf("SKIPPED: %s\n", reason.c_str());
  std::fflush(stdout);
  std::_Exit(77);
}

void require_root_or_skip() {
  if (::geteuid() != 0)
    skip("the test bed needs root (uid " + std::to_string(::geteuid()) + ")");
  for (auto daemon : {"/usr/sbin/libvirtd", "/usr/sbin/sshd"})
    if (::access(daemon, X_OK) != 0)
      skip(std::string(daemon) + " is not installed");
  for (auto tool : {"ip", "iptables", "unshare", "mount", "virsh", "ssh", "ssh-keygen"})
    if (!on_path(tool))
      skip(std::string(tool) + " is not installed");
  if (auto why = probe_namespaces(); !why.empty())
    skip(why);
  sweep_stale();
}

void sweep_stale() {
  static const std::regex ns_re("^egt-([0-9]+)-[0-9]+"), if_re("^egt([0-9]+)h[0-9]+");
  std::stringstream nss(run({"ip", "netns", "list"}).output);
  for (std::string line; std::getline(nss, line);) {
    auto name = line.substr(0, line.find(' '));
    if (dead_owner(name, ns_re))
      run({"ip", "netns", "del", name});
  }
  // The host ends of veths (deleting one end deletes its peer).
  std::stringstream links(run({"ip", "-o", "link", "show"}).output);
  for (std::string line; std::getline(links, line);) {
    std::stringstream ws(line);
    std::string idx, name;
    ws >> idx >> name;
    name = name.substr(0, name.find_first_of("@:"));
    if (dead_owner(name, if_re))
      run({"ip", "link", "del", name});
  }
  // Root-namespace rules tagged by the test bed's convention.
  static const std::regex tag_re("egress-test-([0-9]+)");
  for (auto table : {"filter", "nat", "mangle", "raw"}) {
    std::stringstream rules(run({"iptables", "-w", "-t", table, "-S"}).output);
    for (std::string line; std::getline(rules, line);) {
      if (line.rfind("-A ", 0) != 0 || !dead_owner(line, tag_re))
        continue;
      std::vector<std::string> argv{"iptables", "-w", "-t", table};
      auto words = split_words(line);
      words[0] = "-D";
      argv.insert(argv.end(), words.begin(), words.end());
      run(argv);
    }
  }
  // Temp dirs; a libvirtd's may still have qemu processes running.
  static const std::regex dir_re("^egress-testbed-([0-9]+)-");
  const char* env = std::getenv("EGRESS_TESTBED_TMP");
  std::error_code ec;
  for (auto& entry : fs::directory_iterator(env && *env ? env : "/tmp", ec)) {
    auto name = entry.path().filename().string();
    if (!entry.is_directory() || !dead_owner(name, dir_re))
      continue;
    libvirtd::kill_leftover_domains(entry.path());
    fs::remove_all(entry.path(), ec);
  }
}

} // namespace egress::testbed
