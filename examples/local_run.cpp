// `make run` on a machine that can boot VMs: a local KVM-host stand-in
// (private libvirtd with QEMU/TCG and a private sshd, inside a network
// namespace, with an isolated VM network and a page to fetch; see
// testbed/local_host.hpp), the proxy appliance served over HTTP on
// 127.0.0.1 as the image mirror, and caf-run on a generated config that
// declares three proxies on that host, reached through SSH; each boots with
// root= on a qcow2 overlay of the cached appliance disk (--boot=initramfs:
// from the appliance's initramfs alone, no disk). caf-run shares
// this terminal: its table shows the images arriving, the VMs starting and
// each proxy joining the rotation once a request through it came back.
//
// The gateway: a private HAProxy (the shipped dist/haproxy/egress-gateway.cfg
// with its own socket and free ports on 127.0.0.1; no system config or
// service touched) whose servers caf-run keeps in step with the rotation,
// the VM network made reachable from this machine for it
// (test::vm_network_route), and a page on the VM network that answers with
// the exit a request came from; the line to paste is printed.
// Ctrl-C stops caf-run (it leaves the VMs running, as it would on a real
// host), then this program destroys the VMs and removes the daemons, the
// namespace with its bridge, and every file it made.
//
// Where VMs cannot run here (no root, no /dev/net/tun, no appliance), it
// says why and runs caf-run on the embedded default (libvirt's test driver)
// instead, without a gateway (there is no proxy to send traffic through).
#include <atomic>
#include <csignal>
#include <functional>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "messages/error.hpp"
#include "runtime/config_dump.hpp"
#include "testbed/haproxy.hpp"
#include "testbed/http_get.hpp"
#include "testbed/local_host.hpp"
#include "testbed/testbed.hpp"

using namespace egress;

namespace {

volatile sig_atomic_t child_pid = 0;
volatile sig_atomic_t stop_requested = 0;

// Installed before anything starts, so a Ctrl-C during the host's start
// still ends in the teardown: while there is no engine it only notes the
// request, which main checks before starting caf-run. Once caf-run runs it
// gets the signal (it is in its own process group, so a terminal's Ctrl-C
// reaches only this program and is passed on exactly once); a hangup becomes
// SIGTERM, since caf-run reads SIGHUP as "reload the config".
void on_signal(int sig) {
  stop_requested = 1;
  if (child_pid > 0)
    ::kill(child_pid, sig == SIGHUP ? SIGTERM : sig);
}

void install_handlers() {
  struct sigaction sa{};
  sa.sa_handler = on_signal;
  for (int sig : {SIGINT, SIGTERM, SIGHUP})
    ::sigaction(sig, &sa, nullptr);
}

[[noreturn]] void run_default(const std::string& caf_run, const std::string& why) {
  std::fprintf(stderr, "local-run: %s\nlocal-run: running the embedded default instead "
                       "(libvirt's test driver, no VMs); the gateway is off: without VMs "
                       "there is no proxy to send traffic through\n", why.c_str());
  std::string arg = "--config-file=" EGRESS_SOURCE_DIR "/config/default.ini";
  // caf-run handles the signals itself from here on.
  for (int sig : {SIGINT, SIGTERM, SIGHUP})
    ::signal(sig, SIG_DFL);
  ::execl(caf_run.c_str(), caf_run.c_str(), arg.c_str(), static_cast<char*>(nullptr));
  std::fprintf(stderr, "local-run: cannot exec %s: %s\n", caf_run.c_str(), std::strerror(errno));
  std::exit(127);
}

/// caf-run in its own process group, output to this terminal; returns its
/// exit status.
int run_engine(const std::string& caf_run, const std::string& config_file) {
  // Blocked across fork: a signal arriving before child_pid is set would be
  // noted but never passed on.
  sigset_t block, old;
  sigemptyset(&block);
  for (int sig : {SIGINT, SIGTERM, SIGHUP})
    sigaddset(&block, sig);
  ::sigprocmask(SIG_BLOCK, &block, &old);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    for (int sig : {SIGINT, SIGTERM, SIGHUP})
      ::signal(sig, SIG_DFL);
    ::sigprocmask(SIG_SETMASK, &old, nullptr);
    std::string arg = "--config-file=" + config_file;
    ::execl(caf_run.c_str(), caf_run.c_str(), arg.c_str(), static_cast<char*>(nullptr));
    std::_Exit(127);
  }
  if (pid < 0) {
    ::sigprocmask(SIG_SETMASK, &old, nullptr);
    std::fprintf(stderr, "local-run: fork: %s\n", std::strerror(errno));
    return 1;
  }
  ::setpgid(pid, pid); // also here: whichever runs first, the group exists
  child_pid = pid;
  ::sigprocmask(SIG_SETMASK, &old, nullptr);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  child_pid = 0;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The page the exits fetch: on the VM network's bridge, beside the probes'.
constexpr int exit_port = 8081;

// Follows the rotation the way any consumer can (GET /rotation?after=G)
// and says once, when every proxy is in it, that the gateway serves: the
// line printed at the start has scrolled away behind caf-run's table by
// then. Ends when caf-run does (its listener closes).
std::atomic<bool> engine_ended{false};

void announce_when_full(const test::haproxy& gateway, int metrics_port, size_t proxies,
                        std::string curl_line) {
  uint64_t generation = 0;
  while (!stop_requested && !engine_ended) {
    // Beyond the long poll's 30 s.
    auto [code, body] = test::http_get(metrics_port,
                                       "/rotation?after=" + std::to_string(generation),
                                       std::chrono::seconds(40));
    auto rotation = nlohmann::json::parse(body, nullptr, false);
    if (code != 200 || rotation.is_discarded() || !rotation.is_object()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      continue;
    }
    generation = rotation.value("generation", uint64_t{0});
    if (rotation.value("size", size_t{0}) == proxies) {
      // HAProxy follows the rotation within milliseconds (docs/spec.md 29).
      for (int i = 0; i < 40 && gateway.servers("egress").size() < proxies; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::printf("local-run: all %zu proxies are in the rotation, and HAProxy has %zu of them; "
                  "try:\n  %s\n",
                  proxies, gateway.servers("egress").size(), curl_line.c_str());
      std::fflush(stdout);
      return;
    }
  }
}

void print_gateway(const test::haproxy& gw, const test::exit_target& page,
                   const engine_config& cfg) {
  auto via = [&](int port) { return "http://127.0.0.1:" + std::to_string(port); };
  auto& p = gw.ports();
  std::printf(
    "local-run: the gateway: HAProxy (pid %d, admin socket %s) follows the rotation; once the\n"
    "local-run: proxies have joined, each request leaves through one of them, and the page\n"
    "local-run: answers with the exit it came from. Paste:\n"
    "  curl -x %s %s            # a new exit per connection: three requests, three proxies\n"
    "  curl -x %s -U session-1:x %s   # one exit per named session\n"
    "  curl -x %s %s            # by client address\n",
    gw.pid(), gw.socket().c_str(), via(p.rotate).c_str(), page.url().c_str(),
    via(p.session).c_str(), page.url().c_str(), via(p.client).c_str(), page.url().c_str());
  if (cfg.proxies.size() > 1)
    std::printf("  curl -x %s %s            # only the proxy tagged \"eu\" (%s)\n",
                via(p.tagged).c_str(), page.url().c_str(), cfg.proxies.back().name.c_str());
  std::printf("  curl http://127.0.0.1:%d/rotation   # the rotation as JSON; ?after=GEN waits "
              "for the next change\n",
              cfg.metrics.port);
}

} // namespace

int main(int argc, char** argv) {
  std::string caf_run = EGRESS_CAF_RUN;
  std::string dir = test::appliance::default_dir();
  int proxies = 3;
  auto boot = test::appliance_boot::disk;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--appliance" && i + 1 < argc)
      dir = argv[++i];
    else if (a == "--proxies" && i + 1 < argc)
      proxies = std::atoi(argv[++i]);
    else if (a == "--boot=disk")
      boot = test::appliance_boot::disk;
    else if (a == "--boot=initramfs")
      boot = test::appliance_boot::initramfs;
    else {
      std::fprintf(stderr, "usage: %s [--appliance DIR] [--proxies 1..4] "
                           "[--boot=disk|initramfs]\n", argv[0]);
      return 2;
    }
  }
  if (proxies < 1 || proxies > 4) {
    std::fprintf(stderr, "local-run: --proxies must be 1..4 (2 cores boot at most 4 VMs "
                         "at once in reasonable time), got %d\n", proxies);
    return 2;
  }
  install_handlers();
  if (auto why = test::local_host::cannot_run(); !why.empty())
    run_default(caf_run, why);
  std::string why;
  auto app = test::appliance::load(dir, &why);
  if (!app.ok())
    run_default(caf_run, why);

  int rc = 0;
  try {
    testbed::sweep_stale(); // what a killed earlier run left behind
    std::printf("local-run: starting the local host (private libvirtd + sshd in a network "
                "namespace, VM network 10.213.7.0/24)...\n");
    std::fflush(stdout);
    test::file_mirror mirror{app.dir};
    test::local_host host;
    std::vector<std::pair<std::string, std::string>> names;
    for (int i = 1; i <= proxies; ++i)
      names.emplace_back("egress-" + std::to_string(i), host.name());
    auto cfg = test::appliance_config("local-vms", app, mirror, {&host}, names, boot);
    cfg.poll_interval = std::chrono::seconds(1);
    // The gateway, in front of the VMs.
    test::haproxy gateway;
    gateway.start();
    test::vm_network_route route{host};
    test::exit_target page{host.bridge_addr(), exit_port, host.netns().name()};
    if (proxies > 1)
      cfg.proxies.back().tags.push_back("eu");
    cfg.gateway.enabled = true;
    cfg.gateway.socket = gateway.socket();
    cfg.gateway.backends = {{"egress", ""}, {"egress_by_client", ""},
                            {"egress_by_session", ""}, {"egress_eu", "eu"}};
    cfg.metrics.port = testbed::free_port("127.0.0.1");
    if (auto err = validate(cfg)) {
      std::fprintf(stderr, "local-run: generated config invalid: %s\n", render(err).c_str());
      return 1;
    }
    testbed::temp_dir run_dir{"local-run"};
    auto config_file = run_dir / "local-vms.ini";
    testbed::write_file(config_file, dump_config(cfg));
    std::printf("local-run: the proxies boot %s\n",
                boot == test::appliance_boot::disk
                  ? "from qcow2 overlays of the appliance disk (root=/dev/vda; "
                    "--boot=initramfs boots the initramfs alone)"
                  : "from the appliance initramfs alone (--boot=disk: from qcow2 overlays "
                    "of the appliance disk)");
    std::printf("local-run: host up; config %s; mirror %s; consoles in %s\n"
                "local-run: Ctrl-C stops the engine and tears everything down; caf-shell attaches "
                "to the port caf-run logs (\"inspector listening\")\n",
                config_file.c_str(), mirror.url("").c_str(), host.console_dir().c_str());
    print_gateway(gateway, page, cfg);
    std::fflush(stdout);
    if (stop_requested) {
      std::printf("local-run: stopped before the engine started\n");
      return 0;
    }
    std::thread announcer{announce_when_full, std::cref(gateway), cfg.metrics.port,
                          cfg.proxies.size(),
                          "curl -x http://127.0.0.1:" + std::to_string(gateway.ports().rotate)
                            + " " + page.url()};
    rc = run_engine(caf_run, config_file);
    engine_ended = true;
    announcer.join();
    std::printf("local-run: caf-run exited (%d); destroying the VMs and stopping the host...\n",
                rc);
    std::fflush(stdout);
  } catch (const std::exception& e) {
    // Everything started so far was stopped by the destructors on the way
    // here. A machine whose kernel or container refuses part of the host
    // (namespaces, bridges, tap devices) still gets the demo.
    run_default(caf_run, std::string{"the local host could not start: "} + e.what());
  }
  std::printf("local-run: done: no VM, daemon, namespace, bridge or file of this run is left\n");
  return rc == 130 ? 0 : rc;
}
