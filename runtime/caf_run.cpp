// caf-run: the engine as a daemon.
//
//   caf-run --config-file=FILE [--dump-config] [CAF options...]
//
// A hand-written main (not CAF_MAIN, which discards caf_main's return value)
// so that the exit code means something:
//   0  clean shutdown after SIGINT/SIGTERM
//   1  the engine could not start
//   2  usage or configuration error (nothing was started)
//   3  shutdown exceeded its bound and the process was ended hard

#include <atomic>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include <unistd.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>
#include <caf/openssl/manager.hpp>
#include <caf/openssl/publish.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/metrics_server.hpp"
#include "base/log.hpp"
#include "messages/error.hpp"
#include "providers/crypto/identity.hpp"
#include "runtime/config_dump.hpp"
#include "runtime/config_file.hpp"
#include "runtime/engine.hpp"
#include "runtime/status_table.hpp"

namespace {

constexpr int exit_ok = 0;
constexpr int exit_start_failed = 1;
constexpr int exit_usage = 2;
constexpr int exit_forced = 3;

const char* usage_text =
  "usage: caf-run --config-file=FILE [--dump-config] [--long-help]\n"
  "\n"
  "Runs the egress fleet engine on the hosts and proxies FILE declares.\n"
  "FILE uses CAF's INI dialect (';' comments, [sections], lists of {k=v}).\n"
  "Every key is checked, in [engine] and in CAF's own sections: an unknown\n"
  "key, a wrong type or a missing required key is an error naming the file\n"
  "and the key.\n"
  "\n"
  "  --config-file=FILE  the configuration (required)\n"
  "  --dump-config       print the validated configuration with defaults, exit\n"
  "  --help              this text\n"
  "  --long-help         CAF's own options (scheduler, logger, middleman)\n"
  "\n"
  "Signals: SIGINT/SIGTERM stop the engine (links are killed first, then the\n"
  "actors stop, within engine.shutdown-timeout). SIGHUP re-reads FILE and\n"
  "applies only what changed; an invalid file is refused and changes nothing.\n"
  "Exit codes: 0 clean stop,\n"
  "1 could not start, 2 usage or configuration error, 3 forced stop.\n"
  "Logs go to stderr (EGRESS_LOG=error|warn|info|debug); the status table to\n"
  "stdout.\n"
  "See config/default.ini and config/hosts-example.ini for every key.\n";

// Ends the process hard if a stop takes longer than its bound. A detached
// actor blocked in a call that no kill can reach would otherwise hold the
// actor system's destructor forever (docs/notes/caf-0.17.md#detached-actors-are-joined-at-shutdown).
class stop_watchdog {
public:
  explicit stop_watchdog(caf::timespan bound) {
    th_ = std::thread([this, bound] {
      std::unique_lock<std::mutex> guard{mtx_};
      if (!cv_.wait_for(guard, bound, [this] { return done_; })) {
        static const char msg[] = "caf-run: shutdown exceeded its bound; exiting hard\n";
        auto rc = ::write(STDERR_FILENO, msg, sizeof msg - 1);
        (void) rc;
        ::_exit(exit_forced);
      }
    });
  }
  ~stop_watchdog() {
    {
      std::lock_guard<std::mutex> guard{mtx_};
      done_ = true;
    }
    cv_.notify_all();
    th_.join();
  }

private:
  std::mutex mtx_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread th_;
};

// Re-reads the file the engine started with, exactly as at start (same
// arguments, same strict checks). For SIGHUP and for caf-shell's reload,
// which hand it to the fleet: it applies only the difference, and a file
// that does not validate changes nothing.
caf::expected<egress::engine_config> reread(const std::vector<std::string>& args) {
  caf::actor_system_config cfg;
  egress::configure(cfg);
  if (auto err = egress::parse_command_line(cfg, args))
    return err;
  return egress::load_engine_config(cfg);
}

void reload(egress::engine& eng, const std::vector<std::string>& args) {
  egress::log::info("caf-run", "SIGHUP: reloading the configuration");
  auto next = reread(args);
  if (!next) {
    egress::log::error("caf-run", "reload refused, the running fleet is unchanged:\n"
                                    + egress::detail(next.error()));
    return;
  }
  if (auto r = eng.reload(std::move(*next)); r)
    egress::log::info("caf-run", "reload applied: " + *r);
  else
    egress::log::error("caf-run", "reload refused, the running fleet is unchanged: "
                                    + egress::render(r.error()));
}

// What the command line asked for, once read.
struct invocation {
  std::vector<std::string> args; // for CAF, without the program's name
  bool dump = false;
  bool have_config = false;
  bool help = false;
};

invocation read_arguments(int argc, char** argv) {
  invocation inv;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h" || a == "-?") {
      inv.help = true;
      return inv;
    }
    if (a == "--dump-config") {
      inv.dump = true;
      continue;
    }
    if (a.rfind("--config-file=", 0) == 0)
      inv.have_config = true;
    inv.args.push_back(argv[i]);
  }
  return inv;
}

// CAF's options and the engine's config from the command line and the
// file: the config, or the exit code (and the message is printed).
std::variant<egress::engine_config, int> load(caf::actor_system_config& cfg,
                                              const invocation& inv) {
  egress::configure(cfg);
  // For the inspector (caf-shell); it only listens if engine.inspect says so.
  cfg.load<caf::io::middleman>();
  if (auto err = egress::parse_command_line(cfg, inv.args)) {
    std::cerr << "caf-run: " << egress::detail(err) << "\n";
    return exit_usage;
  }
  if (cfg.cli_helptext_printed)
    return exit_ok;
  if (!inv.have_config) {
    std::cerr << "caf-run: --config-file=FILE is required (try --help)\n";
    return exit_usage;
  }
  if (!cfg.remainder.empty()) {
    std::cerr << "caf-run: unexpected argument \"" << cfg.remainder.front()
              << "\" (try --help)\n";
    return exit_usage;
  }
  auto ec = egress::load_engine_config(cfg);
  if (!ec) {
    std::cerr << "caf-run: invalid configuration:\n" << egress::detail(ec.error()) << "\n";
    return exit_usage;
  }
  return std::move(*ec);
}

// BASP over TLS, always (docs/spec.md 24): CAF's OpenSSL module checks a
// certificate before it reads a BASP header, whose declared length it would
// otherwise allocate for anyone who connects. The operator's own
// certificates (tls = true, paths resolved against the config file), or the
// identity this machine's engine generated on its first start. Returns what
// the log line says of it, or nullopt (printed) when the identity fails.
std::optional<std::string> set_up_tls(caf::actor_system_config& cfg,
                                      const egress::engine_config& ec) {
  if (!ec.inspect.enabled)
    return std::string{};
  cfg.load<caf::openssl::manager>();
  if (ec.inspect.tls) {
    cfg.openssl_certificate = ec.tls.certificate;
    cfg.openssl_key = ec.tls.key;
    cfg.openssl_cafile = ec.tls.cafile;
    cfg.openssl_capath = ec.tls.capath;
    return std::string{};
  }
  auto dir = ec.inspect.identity_dir.empty() ? egress::crypto::default_identity_dir()
                                             : ec.inspect.identity_dir;
  auto id = egress::crypto::ensure_identity(dir);
  if (!id) {
    std::cerr << "caf-run: " << cfg.config_file_path
              << ": engine.inspect.identity-dir: " << egress::detail(id.error()) << "\n";
    return std::nullopt;
  }
  cfg.openssl_certificate = id->certificate;
  cfg.openssl_key = id->key;
  cfg.openssl_cafile = id->ca;
  return " (TLS, identity in " + id->dir + ")";
}

// The inspector's node actor, published, and whether it ended: a connected
// party (a certificate holder) can send it an exit `kill`, which no actor
// can refuse. It is then published anew, on the same port.
class published_node {
public:
  published_node(caf::actor_system& sys, egress::engine& eng, const egress::engine_config& ec)
    : sys_(sys), eng_(eng), ec_(ec) {}

  /// Publishes the node; false (printed) when the port cannot be opened.
  bool open(const std::string& identity_note) {
    auto& in = ec_.inspect;
    // The node, not the bare inspector: caf-shell attached here sees this
    // node and every peer it reaches.
    auto port = caf::openssl::publish(eng_.node(), static_cast<uint16_t>(in.port),
                                      in.address.c_str(), true);
    if (!port) {
      std::cerr << "caf-run: cannot open the inspector on " << in.address << ":" << in.port
                << ": " << sys_.render(port.error())
                << " (another engine there? set engine.inspect.port, 0 for any)\n";
      return false;
    }
    port_ = *port;
    watch(eng_.node());
    egress::log::info("caf-run", "inspector listening: caf-shell " + in.address + ":"
                                   + std::to_string(*port)
                                   + (in.tls ? " (TLS: --tls-cert, --tls-key, --tls-ca)"
                                             : identity_note)
                                   + (ec_.inspect_secret.empty() ? "" : " (--secret-file)"));
    return true;
  }

  bool ended() const { return ended_->load(); }

  /// Unpublishes the ended node and publishes a new one on the same port;
  /// false when that fails.
  bool renew() {
    auto old = eng_.node();
    egress::log::error("caf-run", "the inspector's node actor ended (an exit message "
                                  "from a connected party); publishing a new one on port "
                                    + std::to_string(port_));
    {
      // (caf::openssl::unpublish does not compile in 0.17.6: ask its
      // middleman actor directly; the port is free again once it answers.)
      caf::scoped_actor self{sys_};
      self->request(sys_.openssl_manager().actor_handle(), std::chrono::seconds(5),
                    caf::unpublish_atom_v, old.address(), port_)
        .receive([] {}, [](caf::error&) {});
    }
    auto& fresh = eng_.renew_node();
    auto port = caf::openssl::publish(fresh, port_, ec_.inspect.address.c_str(), true);
    if (!port) {
      egress::log::error("caf-run", "cannot publish the new node actor: "
                                      + sys_.render(port.error()) + "; stopping (exit 1)");
      return false;
    }
    watch(fresh);
    return true;
  }

private:
  void watch(const egress::node_actor& n) {
    ended_->store(false);
    caf::actor_cast<caf::abstract_actor*>(n)->attach_functor(
      [ended = ended_](const caf::error&) { ended->store(true); });
  }

  caf::actor_system& sys_;
  egress::engine& eng_;
  const egress::engine_config& ec_;
  uint16_t port_ = 0;
  std::shared_ptr<std::atomic<bool>> ended_ = std::make_shared<std::atomic<bool>>(false);
};

std::optional<caf::actor> open_metrics(caf::actor_system& sys, egress::engine& eng,
                                       const egress::engine_config& ec, bool& failed) {
  failed = false;
  if (!ec.metrics.enabled)
    return std::nullopt;
  auto& m = ec.metrics;
  auto srv = egress::start_metrics_server(sys, eng.fleet(), m.address,
                                          static_cast<uint16_t>(m.port));
  if (!srv) {
    std::cerr << "caf-run: cannot open the metrics endpoint on " << m.address << ":" << m.port
              << ": " << sys.render(srv.error())
              << " (another engine there? set engine.metrics.port, 0 for any)\n";
    failed = true;
    return std::nullopt;
  }
  egress::log::info("caf-run", "metrics listening: http://" + m.address + ":"
                                 + std::to_string(srv->second) + "/metrics");
  return srv->first;
}

// Until SIGINT or SIGTERM: SIGHUP reloads, an ended node is published anew,
// and the status table is printed when it changes. The exit code so far.
int serve(egress::engine& eng, const invocation& inv, const sigset_t& sigs,
          std::optional<published_node>& node) {
  std::string last;
  timespec tick{0, 500'000'000};
  for (;;) {
    int sig = sigtimedwait(&sigs, nullptr, &tick);
    if (sig == SIGINT || sig == SIGTERM) {
      egress::log::info("caf-run", std::string{"received "} + strsignal(sig) + "; stopping");
      return exit_ok;
    }
    if (sig == SIGHUP)
      reload(eng, inv.args);
    if (node && node->ended() && !node->renew())
      return exit_start_failed;
    if (auto st = eng.status(std::chrono::seconds(2))) {
      auto fp = egress::table_fingerprint(*st);
      if (fp != last) {
        last = fp;
        std::cout << "\n" << egress::render_table(*st, std::time(nullptr)) << std::flush;
      }
    }
  }
}

// Starts the engine and its doors, serves until a stop signal, and stops.
int run(caf::actor_system_config& cfg, const egress::engine_config& ec, const invocation& inv,
        const sigset_t& sigs, const std::string& identity_note) {
  int rc = exit_ok;
  // Declared before the actor system so that it is destroyed after it: the
  // watchdog covers the engine's stop and the system's destructor, which
  // joins every detached thread.
  std::optional<stop_watchdog> watchdog;
  caf::actor_system sys{cfg};
  egress::fleet_hooks hooks;
  hooks.reread_config = [args = inv.args] { return reread(args); };
  auto eng = egress::engine::start(sys, ec, std::move(hooks));
  if (!eng) {
    std::cerr << "caf-run: cannot start: " << egress::render(eng.error()) << "\n";
    return exit_start_failed;
  }
  std::optional<published_node> node;
  if (ec.inspect.enabled) {
    node.emplace(sys, *eng, ec);
    if (!node->open(identity_note)) {
      eng->stop();
      return exit_start_failed;
    }
  }
  bool metrics_failed = false;
  auto metrics = open_metrics(sys, *eng, ec, metrics_failed);
  if (metrics_failed) {
    eng->stop();
    return exit_start_failed;
  }
  rc = serve(*eng, inv, sigs, node);
  watchdog.emplace(ec.shutdown_timeout + std::chrono::seconds(2));
  if (metrics)
    caf::anon_send_exit(*metrics, caf::exit_reason::user_shutdown);
  if (auto err = eng->stop()) {
    egress::log::error("caf-run", "stop: " + egress::render(err));
    rc = exit_start_failed;
  }
  return rc;
}

} // namespace

int main(int argc, char** argv) {
  // Signals are handled by this thread alone, synchronously: block them
  // before the actor system starts its threads, which inherit the mask.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);

  auto inv = read_arguments(argc, argv);
  if (inv.help) {
    std::cout << usage_text;
    return exit_ok;
  }
  caf::actor_system_config cfg;
  auto loaded = load(cfg, inv);
  if (auto* code = std::get_if<int>(&loaded))
    return *code;
  auto& ec = std::get<egress::engine_config>(loaded);
  if (inv.dump) {
    std::cout << egress::dump_config(ec);
    return exit_ok;
  }
  auto identity_note = set_up_tls(cfg, ec);
  if (!identity_note)
    return exit_usage;
  int rc = run(cfg, ec, inv, sigs, *identity_note);
  if (rc == exit_ok)
    egress::log::info("caf-run", "stopped cleanly");
  return rc;
}
