#include "soak/engine_driver.hpp"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include <caf/scoped_actor.hpp>
#include <nlohmann/json.hpp>

#include "messages/error.hpp"
#include "runtime/config_dump.hpp"
#include "runtime/engine.hpp"
#include "testbed/testbed.hpp"

namespace egress::soak {

namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

// The build's caf-run and caf-shell, or the ones the environment names
// (EGRESS_CAF_RUN, EGRESS_CAF_SHELL): an installed engine, or copies that
// a rebuild during a long soak does not replace under it.
std::string program(const char* env, const char* built) {
  auto* v = std::getenv(env);
  return v != nullptr && *v != '\0' ? v : built;
}
const std::string caf_run = program("EGRESS_CAF_RUN", EGRESS_CAF_RUN);
const std::string caf_shell = program("EGRESS_CAF_SHELL", EGRESS_CAF_SHELL);

class in_process : public engine_driver {
public:
  explicit in_process(caf::actor_system& sys) : sys_(sys) {}
  ~in_process() override { stop(); }

  void start(const engine_config& cfg) override {
    auto eng = engine::start(sys_, cfg);
    if (!eng)
      throw std::runtime_error("engine start: " + render(eng.error()));
    eng_.emplace(std::move(*eng));
  }
  caf::error stop() override {
    if (!eng_)
      return {};
    auto err = eng_->stop();
    eng_.reset();
    return err;
  }
  caf::error kill() override { return stop(); }
  void pause(bool) override {}
  caf::expected<std::string> reload(const engine_config& cfg) override {
    return eng_->reload(cfg);
  }
  caf::expected<fleet_status> status() override { return eng_->status(10s); }
  caf::expected<host_drain> cordon(const std::string& host, bool on) override {
    caf::scoped_actor self{sys_};
    caf::expected<host_drain> out{host_drain{}};
    self->request(eng_->fleet(), 10s, atom::cordon_v, host, on)
      .receive([&](host_drain& d) { out = std::move(d); },
               [&](caf::error& err) { out = std::move(err); });
    return out;
  }
  std::string kind() const override { return "in-process"; }
  pid_t pid() const override { return ::getpid(); }

private:
  caf::actor_system& sys_;
  std::optional<engine> eng_;
};

template <class Enum>
Enum parse_enum(const std::string& text, Enum last) {
  for (int i = 0; i <= static_cast<int>(last); ++i)
    if (text == to_string(static_cast<Enum>(i)))
      return static_cast<Enum>(i);
  throw std::runtime_error("unknown state in caf-shell's JSON: " + text);
}

// What the checker reads of caf-shell's `status --json` (runtime/caf_shell.cpp).
fleet_status from_json(const nlohmann::json& j) {
  fleet_status st;
  st.reloads = j.at("reloads").get<uint64_t>();
  st.last_reload = j.at("last_reload").get<std::string>();
  for (auto& l : j.at("links")) {
    link_status s;
    s.host = l.at("host").get<std::string>();
    s.state = parse_enum(l.at("state").get<std::string>(), link_state::dead);
    s.reason = l.value("reason", "");
    st.links.push_back(std::move(s));
  }
  for (auto& p : j.at("proxies")) {
    proxy_status s;
    s.name = p.at("name").get<std::string>();
    s.host = p.at("host").get<std::string>();
    s.phase = parse_enum(p.at("phase").get<std::string>(), proxy_phase::deleted);
    s.address = p.at("address").get<std::string>();
    s.in_rotation = p.at("in_rotation").get<bool>();
    s.last_error = p.at("last_error").get<std::string>();
    st.proxies.push_back(std::move(s));
  }
  st.rotation = j.at("rotation").get<std::vector<std::string>>();
  return st;
}

class process : public engine_driver {
public:
  process(std::string dir, int metrics_port)
    : dir_(std::move(dir)), metrics_port_(metrics_port) {}
  ~process() override { stop(); }

  void start(const engine_config& cfg) override {
    write(cfg);
    auto log = dir_ + "/caf-run.log";
    auto before = testbed::read_file(log).size(); // each start appends
    // In the run's directory, with core dumps on: a crash leaves its core
    // there (where the kernel's core_pattern is a plain file name), and
    // the stacks are read from it (crash_stacks). exec keeps the PID.
    proc_ = testbed::process({{"/bin/sh", "-c",
                               "cd \"$0\" && { ulimit -c unlimited 2>/dev/null; exec \"$@\"; }",
                               dir_, caf_run, "--config-file=" + ini()},
                              {},
                              log});
    auto deadline = clock_type::now() + 20s;
    const std::string mark = "inspector listening: caf-shell ";
    for (;;) {
      auto text = testbed::read_file(log);
      if (auto at = text.find(mark, before); at != std::string::npos) {
        auto end = text.find_first_of(" \n", at + mark.size());
        address_ = text.substr(at + mark.size(), end - at - mark.size());
        return;
      }
      if (!proc_.alive() || clock_type::now() > deadline)
        throw std::runtime_error("caf-run did not come up:\n" + testbed::detail::tail(text, 20));
      std::this_thread::sleep_for(50ms);
    }
  }

  caf::error stop() override {
    if (proc_.pid() == 0)
      return {};
    if (!proc_.alive()) // it died on its own: that is the news
      return failure("caf-run had ended before its SIGTERM: " + ended(*proc_.wait_status())
                     + crash_stacks());
    // SIGTERM, then SIGKILL past the grace: a stop that hangs is the error.
    // A stop still running past the engine's own bound (10 s) is what its
    // threads are doing: their stacks are saved before its watchdog (12 s)
    // ends it. (Not earlier: gdb stops the process while it attaches.)
    proc_.signal(SIGTERM);
    auto slow = clock_type::now() + 10500ms;
    while (proc_.alive() && clock_type::now() < slow)
      std::this_thread::sleep_for(10ms);
    std::string stacks;
    if (proc_.alive())
      stacks = save_stacks({"-p", std::to_string(proc_.pid())}, "stop");
    auto status = proc_.stop(15s);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
      return failure("caf-run after SIGTERM: " + ended(status) + stacks);
    return {};
  }

  caf::error kill() override {
    if (proc_.pid() != 0 && !proc_.alive())
      return failure("caf-run had ended before its SIGKILL: " + ended(*proc_.wait_status())
                     + crash_stacks());
    proc_.signal(SIGKILL);
    proc_.stop();
    return {};
  }

  void pause(bool on) override { proc_.signal(on ? SIGSTOP : SIGCONT); }

  // caf-run logs the outcome of each SIGHUP (runtime/caf_run.cpp): read from
  // where the log ended before the signal, so two equal outcomes in a row,
  // and a file it could not read, are told apart.
  caf::expected<std::string> reload(const engine_config& cfg) override {
    auto log = dir_ + "/caf-run.log";
    auto before = testbed::read_file(log).size();
    write(cfg);
    proc_.signal(SIGHUP);
    auto deadline = clock_type::now() + 15s;
    while (clock_type::now() < deadline) {
      auto text = testbed::read_file(log);
      if (auto at = text.find("reload applied: ", before); at != std::string::npos)
        return text.substr(at, text.find('\n', at) - at);
      if (auto at = text.find("reload refused", before); at != std::string::npos)
        return failure(testbed::detail::tail(text.substr(at), 4));
      std::this_thread::sleep_for(50ms);
    }
    return failure("SIGHUP: caf-run logged no reload outcome within 15 s");
  }

  caf::expected<fleet_status> status() override {
    auto r = testbed::run({caf_shell, address_, "--identity=" + identity_dir(), "--json",
                           "--timeout=5000", "-c", "status"},
                          10s);
    if (!r.ok())
      return failure("caf-shell status: exit " + std::to_string(r.exit_code)
                     + (r.timed_out ? " (timed out)" : "") + ": "
                     + testbed::detail::tail(r.output, 3));
    // The output holds stderr too: the object is from its first brace to
    // its last.
    auto first = r.output.find('{'), last = r.output.rfind('}');
    try {
      if (first == std::string::npos || last == std::string::npos || last < first)
        throw std::runtime_error("no JSON object");
      return from_json(nlohmann::json::parse(r.output.substr(first, last - first + 1)));
    } catch (const std::exception& e) {
      return failure(std::string{"caf-shell status: "} + e.what() + ": "
                     + testbed::detail::tail(r.output, 3));
    }
  }

  caf::expected<host_drain> cordon(const std::string& host, bool on) override {
    auto r = testbed::run({caf_shell, address_, "--identity=" + identity_dir(), "--json",
                           "--timeout=5000", "-c",
                           (on ? "drain-host " : "undrain-host ") + host},
                          10s);
    if (!r.ok())
      return failure("caf-shell " + std::string{on ? "drain-host" : "undrain-host"} + ": exit "
                     + std::to_string(r.exit_code) + ": " + testbed::detail::tail(r.output, 3));
    host_drain d;
    d.host = host;
    d.cordoned = on;
    return d;
  }

  std::string kind() const override { return "caf-run"; }
  pid_t pid() const override { return proc_.pid(); }

private:
  std::string ini() const { return dir_ + "/engine.ini"; }
  // The TLS identity caf-run makes on its first start, kept in the run's
  // directory rather than the user's state directory.
  std::string identity_dir() const { return dir_ + "/identity"; }

  static caf::error failure(std::string what) {
    return make_error(ec::libvirt_permanent, std::move(what));
  }

  // Every thread's stack, by gdb (when installed) from a live process
  // ("-p PID") or a core, into the run's directory: "; stacks in FILE".
  std::string save_stacks(std::vector<std::string> target, const std::string& what) {
    if (::access("/usr/bin/gdb", X_OK) != 0)
      return "";
    auto file = dir_ + "/" + what + "-stacks-" + std::to_string(++stacks_saved_) + ".txt";
    std::vector<std::string> argv{"/usr/bin/gdb", "-batch", "-nx", "-ex",
                                  "thread apply all bt", caf_run};
    argv.insert(argv.end(), target.begin(), target.end());
    auto r = testbed::run(argv, 60s);
    testbed::write_file(file, r.output);
    return "; stacks in " + file;
  }

  // A crashed caf-run's core (the kernel wrote "core" in its directory): its
  // stacks saved, the core removed (one run can crash more than once).
  std::string crash_stacks() {
    auto core = dir_ + "/core";
    if (::access(core.c_str(), R_OK) != 0)
      return "";
    auto out = save_stacks({core}, "crash");
    std::remove(core.c_str());
    return out;
  }

  static std::string ended(int status) {
    if (WIFEXITED(status))
      return "exit " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status))
      return std::string{"signal "} + strsignal(WTERMSIG(status));
    return "wait status " + std::to_string(status);
  }

  // The whole config as caf-run reads it (--dump-config's writer), with the
  // inspector on a free loopback port and the metrics listener only where
  // one was asked for.
  void write(engine_config cfg) {
    cfg.inspect.enabled = true;
    cfg.inspect.address = "127.0.0.1";
    cfg.inspect.port = 0;
    cfg.inspect.identity_dir = identity_dir();
    cfg.metrics.enabled = metrics_port_ != 0;
    if (metrics_port_ != 0) {
      cfg.metrics.address = "127.0.0.1";
      cfg.metrics.port = static_cast<uint32_t>(metrics_port_);
    }
    auto text = dump_config(cfg);
    testbed::write_file(ini() + ".new", text);
    if (std::rename((ini() + ".new").c_str(), ini().c_str()) != 0)
      throw std::runtime_error("rename " + ini());
  }

  std::string dir_;
  int metrics_port_ = 0;
  testbed::process proc_;
  std::string address_;
  int stacks_saved_ = 0;
};

} // namespace

std::unique_ptr<engine_driver> make_in_process_driver(caf::actor_system& sys) {
  return std::make_unique<in_process>(sys);
}

std::unique_ptr<engine_driver> make_process_driver(std::string dir, int metrics_port) {
  return std::make_unique<process>(std::move(dir), metrics_port);
}

} // namespace egress::soak
