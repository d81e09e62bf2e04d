// caf-run as an operator meets it: the real binary, started as a child
// process with its stdout and stderr captured in files, checked for its exit
// code and what it printed. Every child runs under a hard timeout and is
// killed by its PID if it overstays; none outlives its test (or this process:
// it gets SIGKILL if the test runner dies first).
#define BOOST_TEST_MODULE caf_run
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

using steady = std::chrono::steady_clock;

// What a child's end looked like: an exit code, or 128 + the signal that
// ended it (the shell's convention), or timed_out when this test killed it.
constexpr int timed_out = -1;

std::string slurp(const fs::path& path) {
  std::ifstream in{path, std::ios::binary};
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// A child process with stdin from /dev/null and stdout/stderr into files.
class child {
public:
  child(const std::string& exe, const std::vector<std::string>& args,
        const fs::path& out, const fs::path& err) {
    // Everything the child needs is built before fork(): after it, only
    // async-signal-safe calls.
    std::vector<std::string> strings{exe};
    strings.insert(strings.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& s : strings)
      argv.push_back(s.data());
    argv.push_back(nullptr);
    auto out_path = out.string();
    auto err_path = err.string();
    auto parent = ::getpid();
    pid_ = ::fork();
    BOOST_REQUIRE_MESSAGE(pid_ >= 0, "fork failed: " << std::strerror(errno));
    if (pid_ == 0) {
      // Dies with the test runner, so no engine is left behind even if the
      // runner itself is killed.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent)
        ::_exit(127);
      // caf-run blocks its signals itself; start it as a shell would.
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      ::sigaction(SIGINT, &dfl, nullptr);
      ::sigaction(SIGTERM, &dfl, nullptr);
      int in_fd = ::open("/dev/null", O_RDONLY);
      int out_fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      int err_fd = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (in_fd < 0 || out_fd < 0 || err_fd < 0 || ::dup2(in_fd, 0) < 0
          || ::dup2(out_fd, 1) < 0 || ::dup2(err_fd, 2) < 0)
        ::_exit(127);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
  }

  child(const child&) = delete;
  child& operator=(const child&) = delete;

  ~child() {
    if (!result_)
      kill_hard();
  }

  pid_t pid() const {
    return pid_;
  }

  /// True until the child has exited (and has been reaped).
  bool running() {
    if (result_)
      return false;
    int status = 0;
    auto rc = ::waitpid(pid_, &status, WNOHANG);
    if (rc == pid_)
      result_ = decode(status);
    return !result_;
  }

  void signal(int sig) {
    BOOST_REQUIRE_MESSAGE(running(), "child " << pid_ << " is gone before signal " << sig);
    BOOST_REQUIRE_EQUAL(::kill(pid_, sig), 0);
  }

  /// The exit code within `timeout`; otherwise the child is killed with
  /// SIGKILL by its PID and the result is `timed_out`.
  int wait(steady::duration timeout) {
    auto deadline = steady::now() + timeout;
    while (running()) {
      if (steady::now() >= deadline) {
        kill_hard();
        return timed_out;
      }
      std::this_thread::sleep_for(10ms);
    }
    return *result_;
  }

private:
  static int decode(int status) {
    if (WIFEXITED(status))
      return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
      return 128 + WTERMSIG(status);
    return timed_out;
  }

  void kill_hard() {
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    result_ = timed_out;
  }

  pid_t pid_ = -1;
  std::optional<int> result_;
};

// One temporary directory per test: input files and captured output.
struct fixture {
  fs::path dir;
  fs::path out;
  fs::path err;

  fixture() {
    static int counter = 0;
    dir = fs::temp_directory_path()
          / ("egress-caf-run-" + std::to_string(::getpid()) + "-"
             + std::to_string(++counter));
    fs::create_directories(dir);
    out = dir / "stdout.txt";
    err = dir / "stderr.txt";
  }

  ~fixture() {
    std::error_code ignored;
    fs::remove_all(dir, ignored);
  }

  std::string write(const std::string& name, const std::string& text) {
    auto path = dir / name;
    std::ofstream{path} << text;
    return path.string();
  }

  std::string stdout_text() const {
    return slurp(out);
  }

  std::string stderr_text() const {
    return slurp(err);
  }

  // Runs caf-run to its end (hard timeout: 10 s) and returns its exit code.
  int run(const std::vector<std::string>& args) {
    child c{EGRESS_CAF_RUN, args, out, err};
    return c.wait(10s);
  }
};

const std::string default_ini = std::string{EGRESS_SOURCE_DIR} + "/config/default.ini";

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Whether the last status table in `text` shows every one of `names` running.
bool all_running(const std::string& text, const std::vector<std::string>& names) {
  auto header = text.rfind("\nPROXY ");
  if (header == std::string::npos)
    return false;
  std::istringstream lines{text.substr(header + 1)};
  size_t running = 0;
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words{line};
    std::string name, host, state;
    words >> name >> host >> state;
    for (auto& n : names)
      if (name == n && state == "running")
        ++running;
  }
  return running == names.size();
}

// Starts caf-run on config/default.ini, waits for its three proxies to run,
// sends `sig` and checks for a clean stop within 10 s.
void stops_cleanly_on(fixture& f, int sig, const std::string& received) {
  child c{EGRESS_CAF_RUN, {"--config-file=" + default_ini}, f.out, f.err};
  std::vector<std::string> proxies{"egress-1", "egress-2", "egress-3"};
  auto deadline = steady::now() + 20s;
  while (!all_running(f.stdout_text(), proxies) && c.running()
         && steady::now() < deadline)
    std::this_thread::sleep_for(100ms);
  BOOST_REQUIRE_MESSAGE(all_running(f.stdout_text(), proxies),
                        "proxies not all running within 20 s (caf-run "
                          << (c.running() ? "still running" : "exited") << ")\nstdout:\n"
                          << f.stdout_text() << "\nstderr:\n" << f.stderr_text());
  c.signal(sig);
  auto started = steady::now();
  auto rc = c.wait(10s);
  auto took = std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - started);
  BOOST_TEST_MESSAGE("stop after " << received << " took " << took.count() << " ms");
  BOOST_CHECK_MESSAGE(rc == 0, "exit code " << rc << " (-1: killed after 10 s)\nstderr:\n"
                                 << f.stderr_text());
  auto err = f.stderr_text();
  BOOST_CHECK_MESSAGE(contains(err, "received " + received + "; stopping"), err);
  BOOST_CHECK_MESSAGE(contains(err, "stopped cleanly"), err);
  BOOST_CHECK_MESSAGE(!contains(err, "exceeded its bound"), err);
}

} // namespace

BOOST_FIXTURE_TEST_SUITE(caf_run_cli_suite, fixture)

BOOST_AUTO_TEST_CASE(help_exits_0_and_prints_usage) {
  BOOST_CHECK_EQUAL(run({"--help"}), 0);
  auto text = stdout_text();
  BOOST_CHECK_MESSAGE(text.starts_with("usage: caf-run --config-file=FILE"), text);
  BOOST_CHECK_MESSAGE(contains(text, "Exit codes"), text);
}

BOOST_AUTO_TEST_CASE(missing_config_file_exits_2) {
  BOOST_CHECK_EQUAL(run({}), 2);
  auto err = stderr_text();
  BOOST_CHECK_MESSAGE(contains(err, "--config-file=FILE is required"), err);
  BOOST_CHECK_EQUAL(stdout_text(), "");
}

BOOST_AUTO_TEST_CASE(typo_key_exits_2_naming_file_and_key) {
  auto file = write("typo.ini", "[engine]\n"
                                "entry = \"e1\"\n"
                                "hosts = [{name = \"hv1\", uri = \"test:///default\"}]\n"
                                "proxies = [{name = \"px-1\", host = \"hv1\", memroy-mib = 256}]\n");
  BOOST_CHECK_EQUAL(run({"--config-file=" + file}), 2);
  auto err = stderr_text();
  BOOST_CHECK_MESSAGE(contains(err, file + ": engine.proxies[0].memroy-mib: unknown key"), err);
  BOOST_CHECK_EQUAL(stdout_text(), ""); // nothing started: no status table
  BOOST_CHECK_MESSAGE(!contains(err, "fleet:"), err);
}

BOOST_AUTO_TEST_CASE(syntax_error_exits_2_naming_file) {
  auto file = write("syntax.ini", "[engine\nentry = \"e1\"\n");
  BOOST_CHECK_EQUAL(run({"--config-file=" + file}), 2);
  auto err = stderr_text();
  BOOST_CHECK_MESSAGE(contains(err, file + ": cannot parse"), err);
  BOOST_CHECK_EQUAL(stdout_text(), "");
}

BOOST_AUTO_TEST_CASE(dump_config_prints_defaults_and_round_trips) {
  BOOST_REQUIRE_EQUAL(run({"--config-file=" + default_ini, "--dump-config"}), 0);
  auto dump = stdout_text();
  BOOST_CHECK_MESSAGE(contains(dump, "entry = \"local-demo\""), dump);
  // The dump is a config in its own right: caf-run accepts it and dumps the
  // same configuration again (all but the first line, which names the file).
  auto again = write("dumped.ini", dump);
  auto rc = run({"--config-file=" + again, "--dump-config"});
  BOOST_CHECK_MESSAGE(rc == 0, "the dump is not accepted again (exit " << rc << "):\n"
                                 << stderr_text() << "\ndump:\n" << dump);
  auto body = [](const std::string& x) { return x.substr(std::min(x.find('\n'), x.size())); };
  BOOST_CHECK_EQUAL(body(stdout_text()), body(dump));
}

BOOST_AUTO_TEST_CASE(spec_15_sigint_stops_cleanly_within_bound) {
  stops_cleanly_on(*this, SIGINT, "Interrupt");
}

BOOST_AUTO_TEST_CASE(sigterm_stops_cleanly_within_bound) {
  stops_cleanly_on(*this, SIGTERM, "Terminated");
}

// Waits until `pred(stdout, stderr)` holds while caf-run runs (at most 20 s).
template <class Pred>
bool wait_output(fixture& f, child& c, Pred pred) {
  auto deadline = steady::now() + 20s;
  while (!pred(f.stdout_text(), f.stderr_text()) && c.running() && steady::now() < deadline)
    std::this_thread::sleep_for(100ms);
  return pred(f.stdout_text(), f.stderr_text());
}

// SIGHUP re-reads the file: the difference is applied (one proxy added, one
// removed), and a broken file is refused with its reasons while the running
// fleet stays as it was.
BOOST_AUTO_TEST_CASE(sighup_applies_the_difference_and_refuses_a_bad_file) {
  fs::copy_file(std::string{EGRESS_SOURCE_DIR} + "/config/testnode.xml", dir / "testnode.xml");
  auto ini = slurp(default_ini);
  auto path = write("engine.ini", ini);
  child c{EGRESS_CAF_RUN, {"--config-file=" + path}, out, err};
  BOOST_REQUIRE_MESSAGE(wait_output(*this, c, [](const auto& o, const auto&) {
                          return all_running(o, {"egress-1", "egress-2", "egress-3"});
                        }),
                        "stdout:\n" << stdout_text() << "\nstderr:\n" << stderr_text());
  auto third = ini.find("  { name = \"egress-3\"");
  BOOST_REQUIRE(third != std::string::npos);
  auto changed = ini.substr(0, third) + "  { name = \"egress-4\", host = \"local\" },\n]\n";
  write("engine.ini", changed);
  c.signal(SIGHUP);
  BOOST_REQUIRE_MESSAGE(wait_output(*this, c, [](const auto& o, const auto& e) {
                          auto table = o.substr(o.rfind("\nPROXY "));
                          return contains(e, "reload applied: proxies +1 -1 ~0")
                                 && all_running(o, {"egress-1", "egress-2", "egress-4"})
                                 && !contains(table, "egress-3");
                        }),
                        "stdout:\n" << stdout_text() << "\nstderr:\n" << stderr_text());
  write("engine.ini", changed + "pol-interval = 2s\n");
  c.signal(SIGHUP);
  BOOST_REQUIRE_MESSAGE(wait_output(*this, c, [](const auto&, const auto& e) {
                          return contains(e, "reload refused, the running fleet is unchanged");
                        }),
                        stderr_text());
  BOOST_CHECK_MESSAGE(contains(stderr_text(), "engine.pol-interval: unknown key"), stderr_text());
  std::this_thread::sleep_for(500ms);
  BOOST_CHECK(all_running(stdout_text(), {"egress-1", "egress-2", "egress-4"}));
  c.signal(SIGTERM);
  BOOST_CHECK_EQUAL(c.wait(10s), 0);
}

// docs/spec.md 25: files CAF's own parser would crash on (50,000 nested
// brackets: exit 139 before), hang on (a FIFO), or take silently (a NUL
// ends the file, a duration wraps, the first of two equal keys wins) stop
// caf-run with exit 2 naming the file, the line and the column; and the
// same files sent by SIGHUP are refused while the engine keeps running.
BOOST_AUTO_TEST_CASE(spec_25_a_hostile_file_is_refused_at_start_and_on_sighup) {
  auto nested = "[engine]\nentry = " + std::string(50'000, '[') + "\n";
  struct hostile {
    std::string name, text, expect;
  };
  std::vector<hostile> files{
    {"nested.ini", nested, "nested.ini:2:41: nested more than 32 levels deep"},
    {"nul.ini", std::string{"[engine]\nentry = \"a\"\0\n", 22}, "nul.ini:2:12: a NUL byte"},
    {"wrap.ini", "[engine]\npoll-interval = 5124096h\n", "wrap.ini:2:17: duration"},
    {"twice.ini", "[engine]\nentry = \"a\"\nentry = \"b\"\n",
     "twice.ini:3:1: duplicate key \"entry\" (first at line 2"},
  };
  for (auto& f : files) {
    auto path = write(f.name, f.text);
    BOOST_CHECK_EQUAL(run({"--config-file=" + path}), 2);
    BOOST_CHECK_MESSAGE(contains(stderr_text(), f.expect), f.name << ": " << stderr_text());
  }
  auto fifo = (dir / "fifo.ini").string();
  BOOST_REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  auto t0 = steady::now();
  BOOST_CHECK_EQUAL(run({"--config-file=" + fifo}), 2);
  BOOST_CHECK(steady::now() - t0 < 5s);
  BOOST_CHECK_MESSAGE(contains(stderr_text(), "is a FIFO, not a regular file"), stderr_text());

  fs::copy_file(std::string{EGRESS_SOURCE_DIR} + "/config/testnode.xml", dir / "testnode.xml");
  auto ini = slurp(default_ini);
  auto path = write("engine.ini", ini);
  child c{EGRESS_CAF_RUN, {"--config-file=" + path}, out, err};
  BOOST_REQUIRE_MESSAGE(wait_output(*this, c, [](const auto& o, const auto&) {
                          return all_running(o, {"egress-1", "egress-2", "egress-3"});
                        }),
                        "stdout:\n" << stdout_text() << "\nstderr:\n" << stderr_text());
  write("engine.ini", nested);
  c.signal(SIGHUP);
  BOOST_REQUIRE_MESSAGE(wait_output(*this, c, [](const auto&, const auto& e) {
                          return contains(e, "nested more than 32 levels deep");
                        }),
                        stderr_text());
  BOOST_CHECK(contains(stderr_text(), "reload refused, the running fleet is unchanged"));
  BOOST_CHECK(c.running());
  c.signal(SIGTERM);
  BOOST_CHECK_EQUAL(c.wait(10s), 0);
}

BOOST_AUTO_TEST_CASE(embed_example_runs_its_proxies_and_exits_0) {
  child c{EGRESS_EMBED_EXAMPLE, {}, out, err};
  auto rc = c.wait(45s); // the example gives up on its own after 30 s
  BOOST_CHECK_MESSAGE(rc == 0, "exit code " << rc << "\nstderr:\n" << stderr_text());
  auto text = stdout_text();
  BOOST_CHECK_MESSAGE(contains(text, "embedded-1"), text);
  // Joined after the example subscribed (the first two may join before).
  BOOST_CHECK_MESSAGE(contains(text, "rotation: embedded-3 joined"), text);
  BOOST_CHECK_MESSAGE(contains(text, "reload: proxies +1 -0 ~0"), text);
  BOOST_CHECK_MESSAGE(contains(text, "running"), text);
}

// The harness itself: a child past its timeout is killed by its PID and
// reaped, so a hanging caf-run fails its test instead of outliving it.
BOOST_AUTO_TEST_CASE(harness_kills_a_child_past_its_timeout) {
  child c{EGRESS_CAF_RUN, {"--config-file=" + default_ini}, out, err};
  auto pid = c.pid();
  BOOST_CHECK_EQUAL(c.wait(300ms), timed_out);
  BOOST_CHECK(!c.running());
  BOOST_CHECK_EQUAL(::kill(pid, 0), -1); // reaped: the PID names no process
  BOOST_CHECK_EQUAL(errno, ESRCH);
}

// dist/caf-run.service: systemd accepts it (pointed at this build's
// caf-run), and it agrees with caf-run on what it relies on: exit 2 is a
// configuration error (never restarted) and SIGHUP reloads.
BOOST_AUTO_TEST_CASE(systemd_unit_verifies_and_matches_caf_run) {
  auto unit = slurp(fs::path{EGRESS_SOURCE_DIR} / "dist/caf-run.service");
  BOOST_CHECK(contains(unit, "RestartPreventExitStatus=2"));
  BOOST_CHECK(contains(unit, "ExecReload=/bin/kill -HUP $MAINPID"));
  BOOST_CHECK(contains(unit, "LimitNOFILE=65536"));
  BOOST_CHECK(contains(unit, "StateDirectory=egress"));
  if (::access("/usr/bin/systemd-analyze", X_OK) != 0) {
    BOOST_TEST_MESSAGE("skipped: no systemd-analyze on this machine");
    return;
  }
  auto dir = fs::temp_directory_path() / ("unit-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  auto copy = unit;
  auto at = copy.find("/usr/local/bin/caf-run");
  BOOST_REQUIRE(at != std::string::npos);
  copy.replace(at, std::strlen("/usr/local/bin/caf-run"), EGRESS_CAF_RUN);
  std::ofstream{dir / "caf-run.service"} << copy;
  // The unit's Documentation= names the man pages, which systemd-analyze
  // looks up: the repository's, not yet installed.
  auto cmd = "cd " + dir.string() + " && MANPATH=" + std::string{EGRESS_SOURCE_DIR}
             + "/docs/man /usr/bin/systemd-analyze verify ./caf-run.service > "
             + (dir / "verify.log").string() + " 2>&1";
  auto rc = std::system(cmd.c_str());
  auto log = slurp(dir / "verify.log");
  fs::remove_all(dir);
  BOOST_CHECK_MESSAGE(rc == 0, "systemd-analyze verify failed:\n" << log);
}

BOOST_AUTO_TEST_SUITE_END()
