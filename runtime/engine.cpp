#include "runtime/engine.hpp"

#include <csignal>

#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/settings.hpp>

#include "actors/inspector.hpp"
#include "actors/node.hpp"
#include "messages/error.hpp"
#include "messages/vocabulary.hpp"

namespace egress {

void configure(caf::actor_system_config& cfg) {
  cfg.add_message_types<caf::id_block::egress>();
  // A watcher's handle travels from caf-shell to the fleet: it must be
  // serializable too. (It is an interface of messages/actors.hpp, which
  // includes the type-ID block, so it is announced here.)
  cfg.add_message_type<engine_events_actor>("egress::engine_events_actor");
  // A node actor subscribes at its peers as a receiver of their events.
  cfg.add_message_type<node_events_actor>("egress::node_events_actor");
  // Work sharing, not CAF's default work stealing: an idle stealing worker
  // polls its peers, sleeping 50 us between up to 500 attempts after every
  // message, and the engine's message rate (polls, probes, status) kept all
  // four workers there: ~6,000 wake-ups a second and ~10 % of a core at
  // rest, CPU taken from the TCG guests booting beside it (bench/e2e). A
  // shared queue sleeps on a condition variable. A config file or the
  // embedding application can still choose (before or after this call):
  // this is only the default.
  if (!caf::get_if(&cfg.content, "scheduler.policy"))
    cfg.set("scheduler.policy", caf::atom("sharing"));
  // BASP notices a closed connection, not a silent one: a peer node that
  // hangs (or is stopped) with its socket open would stay "up" and cost
  // every listing the node timeout. Heartbeats each second, and a
  // connection silent for 5 s is closed (the peer is then reported down).
  if (!caf::get_if(&cfg.content, "middleman.heartbeat-interval"))
    cfg.set("middleman.heartbeat-interval", caf::timespan{std::chrono::seconds(1)});
  if (!caf::get_if(&cfg.content, "middleman.connection-timeout"))
    cfg.set("middleman.connection-timeout", caf::timespan{std::chrono::seconds(5)});
  add_error_renderer(cfg);
}

caf::expected<engine> engine::start(caf::actor_system& sys, engine_config cfg,
                                    fleet_hooks hooks) {
  if (auto err = validate(cfg))
    return err;
  cfg.node = node_name(cfg);
  if (!cfg.peers.empty() && !sys.has_middleman())
    return make_error(ec::config_invalid, "engine.peers: the node dials its peers through CAF's "
                                          "middleman: load it (cfg.load<caf::io::middleman>()) "
                                          "before the actor system starts");
  // A kill shuts sockets down under libvirt's client, which may write to
  // them once more: with SIGPIPE's default action that write would end the
  // whole process. An application that installed its own handler keeps it.
  struct sigaction old{};
  if (sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL)
    std::signal(SIGPIPE, SIG_IGN);
  if (!cfg.stage_dir.empty() && !hooks.stage) {
    auto stage = images::image_stage::open(cfg.stage_dir, cfg.entry);
    if (!stage)
      return stage.error();
    hooks.stage = std::move(*stage);
  }
  auto reread = hooks.reread_config;
  auto f = sys.spawn(make_fleet, cfg, std::move(hooks));
  auto i = sys.spawn(make_inspector, f, caf::timespan{std::chrono::milliseconds(300)},
                     std::move(reread));
  auto n = spawn_node(sys, cfg, i);
  return engine{sys, std::move(f), std::move(i), std::move(n), std::move(cfg)};
}

node_actor engine::spawn_node(caf::actor_system& sys, const engine_config& cfg,
                              const inspector_actor& inspector) {
  // What the peers list this node as: its inspector's fixed address (a
  // port chosen at start is nobody's to list).
  std::string advertised;
  if (cfg.inspect.enabled && cfg.inspect.port != 0)
    advertised = (cfg.inspect.address.find(':') == std::string::npos
                    ? cfg.inspect.address
                    : "[" + cfg.inspect.address + "]")
                 + ":" + std::to_string(cfg.inspect.port);
  // Peers are dialed over TLS whenever the application loaded CAF's OpenSSL
  // module (caf-run always does: docs/spec.md 24).
  return sys.spawn(make_node, node_options{cfg.node, inspector, cfg.peers, cfg.inspect_secret,
                                           sys.has_openssl_manager(), advertised});
}

const node_actor& engine::renew_node() {
  node_ = spawn_node(*sys_, cfg_, inspector_);
  return node_;
}

caf::expected<fleet_status> engine::status(caf::timespan timeout) const {
  caf::scoped_actor self{*sys_};
  caf::expected<fleet_status> out = make_error(ec::shutting_down, "no answer");
  self->request(fleet_, timeout, atom::status_v)
    .receive([&](fleet_status& s) { out = std::move(s); },
             [&](caf::error& err) { out = std::move(err); });
  return out;
}

caf::expected<std::string> engine::reload(engine_config next, caf::timespan timeout) {
  // Checked here as well as in the fleet: a caller gets the reasons without
  // a round trip, and an invalid config never reaches an actor.
  if (auto err = validate(next))
    return err;
  next.node = node_name(next);
  caf::scoped_actor self{*sys_};
  caf::expected<std::string> out = make_error(ec::shutting_down, "no answer");
  auto copy = next;
  self->request(fleet_, timeout, atom::reload_v, std::move(copy))
    .receive([&](std::string& summary) { out = std::move(summary); },
             [&](caf::error& err) { out = std::move(err); });
  if (out)
    cfg_ = std::move(next);
  return out;
}

void engine::subscribe(const rotation_events_actor& who) const {
  caf::anon_send(fleet_, atom::subscribe_v, who);
}

caf::error engine::stop(caf::timespan timeout) {
  if (!fleet_)
    return {};
  if (timeout.count() <= 0)
    timeout = cfg_.shutdown_timeout;
  caf::scoped_actor self{*sys_};
  self->monitor(fleet_);
  caf::error result;
  self->request(fleet_, timeout, atom::shutdown_v)
    .receive([](bool) {}, [&](caf::error& err) { result = std::move(err); });
  if (!result) {
    bool down = false;
    self->receive_while([&] { return !down; })(
      [&](caf::down_msg&) { down = true; },
      caf::after(timeout) >> [&] {
        result = make_error(ec::shutting_down, "the fleet did not stop within the shutdown timeout");
        down = true;
      });
  }
  fleet_ = nullptr;
  // Explicitly: a handle that went to a remote shell keeps an actor alive
  // otherwise, and the actor system's destructor would wait for it.
  // kill: the node actor ignores every other exit message (any connected
  // party can send one).
  if (node_)
    caf::anon_send_exit(node_, caf::exit_reason::kill);
  node_ = nullptr;
  if (inspector_)
    caf::anon_send_exit(inspector_, caf::exit_reason::user_shutdown);
  inspector_ = nullptr;
  return result;
}

} // namespace egress
