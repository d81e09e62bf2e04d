// Embedding the engine in a larger service's actor system.
//
// The host application owns the actor_system; the engine is one more set of
// actors in it. The application talks to the engine through the typed fleet
// interface (messages/actors.hpp): here an actor of its own asks for the
// fleet status until every proxy runs, prints it; another prints rotation
// changes as they happen; then the application adds a proxy by reloading a
// changed config (only the difference is applied), and stops the engine
// before its actor system goes away.
//
//   embed-example [path/to/testnode.xml]

#include <chrono>
#include <ctime>
#include <iostream>
#include <thread>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include "messages/actors.hpp"
#include "messages/error.hpp"
#include "runtime/engine.hpp"
#include "runtime/status_table.hpp"

using namespace std::chrono_literals;

// The application's own actor: polls the fleet through its typed handle.
caf::behavior watcher(caf::event_based_actor* self, egress::fleet_actor fleet,
                      caf::actor reply_to, size_t declared) {
  self->send(self, egress::atom::poll_v);
  return {
    [=](egress::atom::poll) {
      self->request(fleet, 2s, egress::atom::status_v)
        .then(
          [=](egress::fleet_status& st) {
            size_t running = 0;
            for (auto& p : st.proxies)
              running += p.phase == egress::proxy_phase::running;
            // Every declared proxy, not only those that reported so far: a
            // proxy's actor may not have run yet.
            if (st.proxies.size() == declared && running == declared) {
              self->send(reply_to, std::move(st));
              self->quit();
              return;
            }
            self->delayed_send(self, 100ms, egress::atom::poll_v);
          },
          [=](caf::error& err) {
            std::cerr << "status failed: " << egress::render(err) << "\n";
            self->quit(err);
          });
    },
  };
}

// Rotation changes (who joined or left the healthy set, and why).
egress::rotation_events_actor::behavior_type
rotation_printer(egress::rotation_events_actor::pointer) {
  return {
    [](egress::rotation_event& e) {
      std::cout << "rotation: " << e.proxy << (e.joined ? " joined" : " left") << " ("
                << e.reason << "), size " << e.size << "\n";
    },
  };
}

int main(int argc, char** argv) {
  caf::actor_system_config cfg;
  egress::configure(cfg); // the engine's message types and error rendering
  caf::actor_system sys{cfg};

  egress::engine_config ec;
  ec.entry = "embedded";
  ec.poll_interval = 200ms;
  egress::host_config h;
  h.name = "local";
  h.uri = argc > 1 ? std::string{"test://"} + argv[1] : "test:///default";
  h.domain_type = "test";
  h.network = "default";
  ec.hosts.push_back(h);
  for (auto n : {"embedded-1", "embedded-2"}) {
    egress::proxy_spec p;
    p.name = n;
    p.host = "local";
    p.network = "default";
    ec.proxies.push_back(p);
  }
  auto eng = egress::engine::start(sys, ec);
  if (!eng) {
    std::cerr << "cannot start: " << egress::render(eng.error()) << "\n";
    return 1;
  }
  // Subscribed after the start: proxies that joined before are in the
  // status table below, not in these lines.
  auto printer = sys.spawn(rotation_printer);
  eng->subscribe(printer);
  int rc = 0;
  auto wait_running = [&](bool print) {
    caf::scoped_actor self{sys};
    self->spawn(watcher, eng->fleet(), caf::actor{self}, ec.proxies.size());
    self->receive(
      [&](egress::fleet_status& st) {
        if (print)
          std::cout << egress::render_table(st, std::time(nullptr));
      },
      caf::after(30s) >> [&] {
        std::cerr << "proxies did not converge within 30s\n";
        rc = 1;
      });
  };
  wait_running(true);
  // A new config through the embedding API: strictly validated, then only
  // the difference is applied (here: one proxy more; the others untouched).
  egress::proxy_spec third;
  third.name = "embedded-3";
  third.host = "local";
  third.network = "default";
  ec.proxies.push_back(third);
  if (auto summary = eng->reload(ec))
    std::cout << "reload: " << *summary << "\n";
  else
    std::cerr << "reload refused: " << egress::render(summary.error()) << "\n";
  wait_running(false); // the new one too
  std::this_thread::sleep_for(100ms); // its rotation line on its way
  if (auto err = eng->stop()) {
    std::cerr << "stop: " << egress::render(err) << "\n";
    rc = 1;
  }
  caf::anon_send_exit(printer, caf::exit_reason::user_shutdown);
  return rc;
}
