#pragma once
// A real (threaded) actor system running the engine on libvirt's in-process
// test driver, for tests that exercise whole flows.

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>
#include <thread>

#include <boost/test/unit_test.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include "base/log.hpp"
#include "messages/error.hpp"
#include "providers/libvirt/connection.hpp"
#include "runtime/engine.hpp"
#include "testbed/test_config.hpp"

namespace egress::test {

/// Polls `pred` until it holds or `max` passed; true if it held.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds max = std::chrono::seconds(10)) {
  auto deadline = std::chrono::steady_clock::now() + max;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred())
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return pred();
}

/// The host link the fleet runs for `host`.
inline host_link_actor link_of(caf::scoped_actor& self, engine& eng, const std::string& host) {
  host_link_actor out;
  self->request(eng.fleet(), std::chrono::seconds(5), atom::link_v, host)
    .receive([&](host_link_actor& h) { out = h; },
             [&](caf::error& err) { BOOST_FAIL(render(err)); });
  return out;
}

/// A link's status, asked through its typed interface.
inline link_status status_of(caf::scoped_actor& self, const host_link_actor& link) {
  link_status out;
  self->request(link, std::chrono::seconds(5), atom::status_v)
    .receive([&](link_status& s) { out = s; },
             [&](caf::error& err) { BOOST_FAIL(render(err)); });
  return out;
}

/// Waits until `link` is up. A link redials only when a call arrives, so a
/// first dial that failed (a loaded machine, a daemon still starting) is
/// retried here with a no-op call, as a proxy's next poll would.
inline bool wait_up(caf::scoped_actor& self, const host_link_actor& link,
                    std::chrono::milliseconds max = std::chrono::seconds(20)) {
  link_status last;
  bool up = eventually([&] {
    last = status_of(self, link);
    if (last.state == link_state::dead) {
      call_job noop{"wait-up", [](lv::connection&) -> caf::expected<std::any> {
                      return std::any{};
                    }};
      self->request(link, std::chrono::seconds(10), atom::call_v, std::move(noop))
        .receive([](call_result&) {}, [](caf::error&) {});
    }
    return last.state == link_state::up;
  }, max);
  if (!up)
    BOOST_TEST_MESSAGE("link " << last.host << " not up: " << to_string(last.state)
                               << " (" << last.reason << "), dials " << last.dials);
  return up;
}

/// Stops the engine when a test leaves early (a failed REQUIRE): an engine
/// left running would hold the actor system's destructor forever. stop() is
/// idempotent, so a test's own explicit stop is not repeated.
struct stop_on_exit {
  caf::expected<engine>& eng;
  ~stop_on_exit() {
    if (eng)
      eng->stop();
  }
};

/// test:///default keeps its state only while a connection to it is open:
/// a witness (of it, or of the daemon at `uri`) holds it across engine
/// restarts (as a real libvirtd would) and
/// reads back what the engine did.
inline lv::connection_ptr witness(const std::string& uri = "test:///default") {
  auto c = lv::connection::open(uri);
  // Not BOOST_REQUIRE_MESSAGE: Boost builds the message even on success.
  if (!c)
    BOOST_FAIL(render(c.error()));
  return *c;
}

/// Records every rotation event it receives (for tests that check who
/// joined and who left, in order).
struct rotation_log {
  using time_point = std::chrono::steady_clock::time_point;
  std::mutex mtx;
  std::vector<rotation_event> events;
  std::vector<time_point> times; // when each event reached the recorder

  /// When `proxy` first joined (or left) at or after `since`.
  std::optional<time_point> when(const std::string& proxy, bool joined,
                                 time_point since = time_point{}) {
    std::lock_guard<std::mutex> guard{mtx};
    for (size_t i = 0; i < events.size(); ++i)
      if (events[i].proxy == proxy && events[i].joined == joined && times[i] >= since)
        return times[i];
    return std::nullopt;
  }

  std::vector<rotation_event> snapshot() {
    std::lock_guard<std::mutex> guard{mtx};
    return events;
  }

  /// How many times `proxy` left (or, with joined, joined) the rotation.
  size_t count(const std::string& proxy, bool joined) {
    size_t n = 0;
    for (auto& e : snapshot())
      if (e.proxy == proxy && e.joined == joined)
        ++n;
    return n;
  }
};

inline rotation_events_actor::behavior_type
rotation_recorder(rotation_events_actor::pointer, std::shared_ptr<rotation_log> log) {
  return {[log](rotation_event& e) {
    std::lock_guard<std::mutex> guard{log->mtx};
    log->events.push_back(std::move(e));
    log->times.push_back(std::chrono::steady_clock::now());
  }};
}

struct engine_fixture {
  static caf::actor_system_config& init(caf::actor_system_config& cfg) {
    cfg.set("logger.file-verbosity", caf::atom("quiet"));
    egress::configure(cfg);
    return cfg;
  }

  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;

  engine_fixture() {
    log::set_level(log::level::error);
    sys = std::make_unique<caf::actor_system>(init(cfg));
  }

  /// Polls the engine's status until `pred(status)` holds.
  template <class Pred>
  bool wait_status(engine& eng, Pred pred,
                   std::chrono::milliseconds max = std::chrono::seconds(10)) {
    auto deadline = std::chrono::steady_clock::now() + max;
    while (std::chrono::steady_clock::now() < deadline) {
      if (auto st = eng.status(); st && pred(*st))
        return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  static bool all_running(const fleet_status& st, size_t n) {
    size_t k = 0;
    for (auto& p : st.proxies)
      if (p.phase == proxy_phase::running && !p.address.empty())
        ++k;
    return k == n;
  }

  static const proxy_status* find(const fleet_status& st, const std::string& name) {
    for (auto& p : st.proxies)
      if (p.name == name)
        return &p;
    return nullptr;
  }
};

} // namespace egress::test
