// Child processes, commands and temp dirs for the test bed.
//
// fork()+execve() by hand rather than posix_spawn: the child must set
// PR_SET_PDEATHSIG (daemons die with a killed test), start its own process
// group, reset signal dispositions and masks inherited from the test (CAF
// threads, Boost.Test handlers) and close every inherited fd, so a daemon
// never holds one of the test's sockets open. Between fork and exec the
// child only makes async-signal-safe calls: the test is multithreaded.
#include "testbed/testbed.hpp"

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace egress::testbed {

namespace {

using clock = std::chrono::steady_clock;

std::string find_in_path(const std::string& name) {
  if (name.find('/') != std::string::npos)
    return name;
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/sbin:/usr/bin:/sbin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    auto candidate = (dir.empty() ? std::string(".") : dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0)
      return candidate;
  }
  throw std::runtime_error("testbed: command not found: " + name);
}

/// Forks and execs; the child's stdout and stderr go to `out_fd`.
pid_t spawn_raw(const std::vector<std::string>& argv, const std::vector<std::string>& env_add,
                int out_fd) {
  if (argv.empty())
    throw std::runtime_error("testbed: empty argv");
  // Everything the child needs is built before fork: no allocation after it.
  std::string path = find_in_path(argv[0]);
  std::vector<char*> args;
  for (auto& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_store;
  for (auto& add : env_add)
    if (add.find('=') == std::string::npos)
      throw std::runtime_error("testbed: env entry without '=': " + add);
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    bool overridden = false;
    for (auto& add : env_add)
      overridden |= kv.rfind(add.substr(0, add.find('=') + 1), 0) == 0;
    if (!overridden)
      env_store.push_back(std::move(kv));
  }
  env_store.insert(env_store.end(), env_add.begin(), env_add.end());
  std::vector<char*> envp;
  for (auto& kv : env_store)
    envp.push_back(const_cast<char*>(kv.c_str()));
  envp.push_back(nullptr);
  pid_t parent = ::getpid();

  pid_t pid = ::fork();
  if (pid < 0)
    throw std::runtime_error(std::string("testbed: fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent)  // the test died before prctl took effect
      ::_exit(127);
    ::setpgid(0, 0);
    struct sigaction dfl{};
    dfl.sa_handler = SIG_DFL;
    for (int sig = 1; sig < NSIG; ++sig)
      ::sigaction(sig, &dfl, nullptr);
    sigset_t none;
    ::sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    int devnull = ::open("/dev/null", O_RDONLY);
    ::dup2(devnull, 0);
    ::dup2(out_fd, 1);
    ::dup2(out_fd, 2);
    ::close_range(3, ~0U, 0);
    ::execve(path.c_str(), args.data(), envp.data());
    static const char msg[] = "testbed: execve failed\n";
    [[maybe_unused]] auto n = ::write(2, msg, sizeof msg - 1);
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here, so a kill(-pid) right after fork can't miss
  return pid;
}

int exit_code_of(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

} // namespace

// ---- process ----------------------------------------------------------------

process::process(const spawn_options& opts) {
  int fd = ::open(opts.log_path.empty() ? "/dev/null" : opts.log_path.c_str(),
                  O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0)
    throw std::runtime_error("testbed: cannot open log " + opts.log_path);
  try {
    pid_ = spawn_raw(opts.argv, opts.env, fd);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
}

process::~process() {
  stop();
}

process::process(process&& other) noexcept : pid_(other.pid_), status_(other.status_) {
  other.pid_ = 0;
  other.status_.reset();
}

process& process::operator=(process&& other) noexcept {
  if (this != &other) {
    stop();
    pid_ = other.pid_;
    status_ = other.status_;
    other.pid_ = 0;
    other.status_.reset();
  }
  return *this;
}

bool process::reap(bool block) {
  if (pid_ == 0 || status_)
    return true;
  for (;;) {
    int st = 0;
    pid_t r = ::waitpid(pid_, &st, block ? 0 : WNOHANG);
    if (r == pid_) {
      status_ = st;
      return true;
    }
    if (r == 0)
      return false;
    if (errno == EINTR)
      continue;
    status_ = -1;  // ECHILD: someone else reaped it; it is gone either way
    return true;
  }
}

bool process::alive() {
  return pid_ != 0 && !reap(false);
}

void process::signal(int sig) {
  if (alive())
    ::kill(pid_, sig);
}

int process::stop(ms grace) {
  if (pid_ == 0)
    return 0;
  if (!reap(false)) {
    ::kill(pid_, SIGTERM);
    ::kill(pid_, SIGCONT);  // a stopped process never sees the SIGTERM
    auto deadline = clock::now() + grace;
    while (!reap(false) && clock::now() < deadline)
      std::this_thread::sleep_for(ms(10));
    if (!reap(false)) {
      ::kill(pid_, SIGKILL);
      reap(true);
    }
  }
  return *status_;
}

// ---- commands ---------------------------------------------------------------

run_result run(const std::vector<std::string>& argv, ms timeout) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    throw std::runtime_error("testbed: pipe2 failed");
  pid_t pid;
  try {
    pid = spawn_raw(argv, {}, fds[1]);
  } catch (...) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw;
  }
  ::close(fds[1]);
  run_result res;
  auto deadline = clock::now() + timeout;
  std::optional<int> status;
  char buf[4096];
  // Read until the child has exited and the pipe is drained. A grandchild
  // may keep the pipe open (a daemon), so EOF alone is not the end, and a
  // child may close its output early, so exit alone is not either.
  for (bool eof = false;;) {
    if (!eof) {
      pollfd p{fds[0], POLLIN, 0};
      if (::poll(&p, 1, status ? 0 : 50) > 0) {
        ssize_t n = ::read(fds[0], buf, sizeof buf);
        if (n > 0)
          res.output.append(buf, static_cast<size_t>(n));
        else if (n == 0 || errno != EINTR)
          eof = true;
        continue;
      }
    } else if (!status) {
      std::this_thread::sleep_for(ms(10));
    }
    if (status)
      break;
    int st = 0;
    if (::waitpid(pid, &st, WNOHANG) == pid) {
      status = st;
    } else if (clock::now() >= deadline) {
      res.timed_out = true;
      ::kill(-pid, SIGKILL);  // its process group: the child we made leader
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &st, 0);
      status = st;
    }
  }
  ::close(fds[0]);
  res.exit_code = res.timed_out ? -1 : exit_code_of(*status);
  return res;
}

std::string run_checked(const std::vector<std::string>& argv, ms timeout) {
  auto res = run(argv, timeout);
  if (!res.ok()) {
    std::string cmd;
    for (auto& a : argv)
      cmd += (cmd.empty() ? "" : " ") + a;
    throw std::runtime_error("testbed: `" + cmd + "` "
                             + (res.timed_out ? "timed out"
                                              : "exited " + std::to_string(res.exit_code))
                             + ": " + res.output);
  }
  return res.output;
}

// ---- files ------------------------------------------------------------------

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const std::string& path, const std::string& text, mode_t mode) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0)
    throw std::runtime_error("testbed: cannot write " + path + ": " + std::strerror(errno));
  ::fchmod(fd, mode);  // the umask must not weaken or strengthen it
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  if (!ok)
    throw std::runtime_error("testbed: short write to " + path);
}

temp_dir::temp_dir(const std::string& tag) {
  const char* env = std::getenv("EGRESS_TESTBED_TMP");
  std::string base = env && *env ? env : "/tmp";
  // The daemons overlay /run and /var: a directory below them would be hidden.
  if (base.rfind("/var", 0) == 0 || base.rfind("/run", 0) == 0)
    throw std::runtime_error("testbed: EGRESS_TESTBED_TMP must not be under /var or /run");
  std::string tmpl = base + "/egress-testbed-" + std::to_string(::getpid()) + "-" + tag + "-XXXXXX";
  if (!::mkdtemp(tmpl.data()))
    throw std::runtime_error("testbed: mkdtemp " + tmpl + ": " + std::strerror(errno));
  path_ = tmpl;
}

temp_dir::~temp_dir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

// ---- detail -----------------------------------------------------------------

namespace detail {

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s)
    out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string tail(const std::string& text, size_t lines) {
  size_t pos = text.size();
  while (lines-- > 0 && pos > 0) {
    pos = text.rfind('\n', pos - 1);
    if (pos == std::string::npos)
      return text;
  }
  return text.substr(pos);
}

std::string private_run_var(const std::string& dir) {
  std::string out;
  for (const char* top : {"run", "var"}) {
    auto upper = shell_quote(dir + "/" + top + "-upper");
    auto work = shell_quote(dir + "/" + top + "-work");
    out += "mkdir -p " + upper + " " + work + "\n";
    out += std::string("mount -t overlay overlay -o lowerdir=/") + top + ",upperdir=" + upper
           + ",workdir=" + work + " /" + top + "\n";
  }
  return out;
}

std::vector<std::string> in_namespaces(const std::string& ns, std::vector<std::string> argv) {
  std::vector<std::string> out;
  if (!ns.empty())
    out = {"ip", "netns", "exec", ns};  // setns + exec: no extra process
  // Without --fork unshare execs too, so the PID we hold ends up the daemon's.
  for (auto a : {"unshare", "-m", "--propagation", "private"})
    out.push_back(a);
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

} // namespace detail

} // namespace egress::testbed
