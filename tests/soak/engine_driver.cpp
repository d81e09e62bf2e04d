#include "soak/engine_driver.hpp"

#include <chrono>
#include <csignal>
#include <optional>
#include <stdexcept>
#include <thread>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "messages/error.hpp"
#include "runtime/config_dump.hpp"
#include "runtime/engine.hpp"
#include "support/testbed.hpp"

namespace egress::soak {

namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

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
  void kill() override { stop(); }
  caf::expected<std::string> reload(const engine_config& cfg) override {
    return eng_->reload(cfg);
  }
  caf::expected<fleet_status> status() override { return eng_->status(10s); }
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
    s.phase = parse_enum(p.at("phase").get<std::string>(), proxy_phase::failed);
    s.address = p.at("address").get<std::string>();
    s.in_rotation = p.at("in_rotation").get<bool>();
    s.last_error = p.at("last_error").get<std::string>();
    st.proxies.push_back(std::move(s));
  }
  return st;
}

class process : public engine_driver {
public:
  explicit process(std::string dir) : dir_(std::move(dir)) {}
  ~process() override { stop(); }

  void start(const engine_config& cfg) override {
    write(cfg);
    auto log = dir_ + "/caf-run.log";
    auto before = testbed::read_file(log).size(); // each start appends
    proc_ = testbed::process({{EGRESS_CAF_RUN, "--config-file=" + ini()}, {}, log});
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
    if (proc_.pid() == 0 || !proc_.alive())
      return {};
    proc_.signal(SIGTERM);
    auto code = proc_.stop(15s); // past it, SIGKILL: a stop that hangs is the error
    if (code != 0)
      return make_error(ec::libvirt_permanent,
                        "caf-run ended with " + std::to_string(code) + " after SIGTERM");
    return {};
  }

  void kill() override {
    proc_.signal(SIGKILL);
    proc_.stop();
  }

  caf::expected<std::string> reload(const engine_config& cfg) override {
    auto before = status();
    if (!before)
      return before.error();
    write(cfg);
    proc_.signal(SIGHUP);
    auto deadline = clock_type::now() + 15s;
    while (clock_type::now() < deadline) {
      std::this_thread::sleep_for(100ms);
      auto now = status();
      if (!now)
        continue;
      if (now->reloads > before->reloads)
        return now->last_reload;
      if (now->last_reload != before->last_reload)
        return make_error(ec::libvirt_permanent, now->last_reload);
    }
    return make_error(ec::libvirt_permanent, "SIGHUP: no reload seen in the status within 15 s");
  }

  caf::expected<fleet_status> status() override {
    auto r = testbed::run({EGRESS_CAF_SHELL, address_, "--json", "--timeout=5000", "-c", "status"},
                          10s);
    if (!r.ok())
      return make_error(ec::link_down, "caf-shell status: exit " + std::to_string(r.exit_code)
                                         + (r.timed_out ? " (timed out)" : "") + ": "
                                         + testbed::detail::tail(r.output, 3));
    try {
      auto j = nlohmann::json::parse(r.output);
      return from_json(j.is_array() ? j.at(0) : j);
    } catch (const std::exception& e) {
      return make_error(ec::link_down, std::string{"caf-shell status: "} + e.what() + ": "
                                         + testbed::detail::tail(r.output, 3));
    }
  }

  std::string kind() const override { return "caf-run"; }
  pid_t pid() const override { return proc_.pid(); }

private:
  std::string ini() const { return dir_ + "/engine.ini"; }

  // The whole config as caf-run reads it (--dump-config's writer), with the
  // inspector on a free loopback port and no metrics listener.
  void write(engine_config cfg) {
    cfg.inspect.enabled = true;
    cfg.inspect.address = "127.0.0.1";
    cfg.inspect.port = 0;
    cfg.metrics.enabled = false;
    auto text = dump_config(cfg);
    testbed::write_file(ini() + ".new", text);
    if (std::rename((ini() + ".new").c_str(), ini().c_str()) != 0)
      throw std::runtime_error("rename " + ini());
  }

  std::string dir_;
  testbed::process proc_;
  std::string address_;
};

} // namespace

std::unique_ptr<engine_driver> make_in_process_driver(caf::actor_system& sys) {
  return std::make_unique<in_process>(sys);
}

std::unique_ptr<engine_driver> make_process_driver(std::string dir) {
  return std::make_unique<process>(std::move(dir));
}

} // namespace egress::soak
