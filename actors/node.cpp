#include "actors/node.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <set>

#include <caf/io/middleman.hpp>
#include <caf/openssl/manager.hpp>

#include "actors/proxy.hpp" // now_rfc3339
#include "messages/error.hpp"
#include "runtime/config.hpp"
#include "runtime/log.hpp"

namespace egress {

namespace {

using clock_type = std::chrono::steady_clock;
using phase = node_peer::phase;

std::string millis(clock_type::duration d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f ms",
                std::chrono::duration<double, std::milli>(d).count());
  return buf;
}

/// What a node's failed answer looks like in a listing.
std::string unanswered(const caf::error& err, caf::timespan timeout) {
  if (err == caf::sec::request_timeout)
    return "no reply within "
           + std::to_string(
             std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count())
           + " ms";
  return "failed: " + render(err);
}

std::string label(const node_peer& p) {
  return p.name.empty() ? p.address : p.name;
}

// -- watchers ------------------------------------------------------------------------

void tell(node_pointer self, const engine_event& e) {
  for (auto& w : self->state.watchers)
    if (!w.own_only || e.node == self->state.node)
      self->send(w.handle, e);
}

void announce(node_pointer self, const node_peer& p, std::string what) {
  tell(self, {now_rfc3339(), "node", label(p), std::move(what), self->state.node});
}

/// Events reach watchers through this actor, which adds the nodes' own ups
/// and downs. It subscribes to a node only once a watcher wants events (a
/// fleet builds none for nobody), and once per connection: after a peer
/// comes back it is subscribed anew.
void want_events(node_pointer self) {
  auto& st = self->state;
  if (st.watchers.empty())
    return;
  auto me = caf::actor_cast<engine_events_actor>(self);
  if (!st.local_events) {
    self->send(st.inspector, atom::subscribe_v, me);
    st.local_events = true;
  }
  // A peer's own events come from its node actor, which relays them: its
  // fleet never sends to another process (see admission.hpp).
  for (auto& p : st.peers)
    if (p.at == phase::up && !p.events) {
      self->send(p.front, atom::subscribe_v, me, true);
      p.events = true;
    }
}

// -- peers ---------------------------------------------------------------------------

void schedule_dial(node_pointer self, node_peer& p) {
  auto& st = self->state;
  p.backoff = p.backoff.count() == 0 ? st.redial_min : std::min(p.backoff * 2, st.redial_max);
  self->delayed_send(self, p.backoff, atom::poll_v, p.address);
}

void enter(node_pointer self, node_peer& p, phase next, std::string why) {
  p.last_dial = next == phase::up ? std::string{} : why;
  if (p.at == next)
    return; // a redial that failed again: no news (the reason it went down stays)
  p.reason = std::move(why);
  p.at = next;
  p.since = now_rfc3339();
  if (next == phase::up) {
    log::info("node", self->state.node + ": node " + p.name + " at " + p.address + " is up");
    announce(self, p, "up at " + p.address);
  } else {
    log::warn("node", self->state.node + ": node "
                        + (p.name.empty() ? "at " + p.address : p.name + " at " + p.address)
                        + " is down: " + p.reason);
    announce(self, p, "down: " + p.reason);
  }
}

void dial_failed(node_pointer self, size_t i, std::string why) {
  auto& p = self->state.peers[i];
  p.dialing = false;
  enter(self, p, phase::down, std::move(why));
  schedule_dial(self, p);
}

void joined(node_pointer self, size_t i, node_actor front, std::string name,
            inspector_actor inspector) {
  auto& st = self->state;
  auto& p = st.peers[i];
  if (name == st.node)
    return dial_failed(self, i, "it is named \"" + name
                                  + "\" like this node (give each node its own engine.node)");
  for (size_t j = 0; j < st.peers.size(); ++j)
    if (j != i && st.peers[j].at == phase::up && st.peers[j].name == name)
      return dial_failed(self, i, "node \"" + name + "\" is connected already at "
                                    + st.peers[j].address);
  p.dialing = false;
  self->monitor(front);
  // A configured peer that took our secret may send us its events.
  st.gate->admit(front->node());
  p.name = std::move(name);
  p.front = std::move(front);
  p.inspector = std::move(inspector);
  p.events = false;
  p.up_at = clock_type::now();
  enter(self, p, phase::up, {});
  want_events(self);
}

/// The middleman actor's connect, not middleman().remote_actor(): that one
/// blocks its caller until the handshake ends, and this is a scheduler
/// thread. A dial is bounded by the node timeout; one that fails is retried
/// with backoff, for as long as this node runs.
void dial(node_pointer self, size_t i) {
  auto& st = self->state;
  auto& p = st.peers[i];
  if (p.dialing || p.at == phase::up)
    return; // one dial at a time: a stray poll must not start a second chain
  p.dialing = true;
  ++p.dials;
  auto& sys = self->system();
  auto mm = st.tls ? sys.openssl_manager().actor_handle() : sys.middleman().actor_handle();
  self->request(mm, st.timeout, caf::connect_atom_v, p.host, p.port)
    .then(
      [self, i](caf::node_id&, caf::strong_actor_ptr& ptr, std::set<std::string>& ifs) {
        if (!ptr)
          return dial_failed(self, i, "nothing is published there");
        auto want = self->system().message_types<node_actor>();
        if (!std::includes(ifs.begin(), ifs.end(), want.begin(), want.end()))
          return dial_failed(self, i, "what is published there is not an engine node of "
                                      "this version");
        auto front = caf::actor_cast<node_actor>(std::move(ptr));
        self->request(front, self->state.timeout, atom::hello_v, self->state.gate->secret())
          .then(
            [self, i, front](std::string& name, inspector_actor& inspector) {
              joined(self, i, front, std::move(name), std::move(inspector));
            },
            [self, i](caf::error& err) { dial_failed(self, i, "no hello: " + render(err)); });
      },
      [self, i](caf::error& err) { dial_failed(self, i, "cannot connect: " + render(err)); });
}

void lost(node_pointer self, size_t i, const caf::error& reason) {
  auto& p = self->state.peers[i];
  p.front = nullptr;
  p.inspector = nullptr;
  p.events = false;
  // A connection that lasted starts the backoff over; one that keeps
  // dropping at once keeps doubling it.
  if (clock_type::now() - p.up_at > self->state.redial_max)
    p.backoff = caf::timespan{0};
  enter(self, p, phase::down,
        "connection lost (" + (reason ? render(reason) : std::string{"its node stopped"}) + ")");
  schedule_dial(self, p);
}

// -- ls ------------------------------------------------------------------------------

actor_entry this_node(const node_state& st) {
  actor_entry e;
  e.kind = "node";
  e.name = st.node;
  e.node = st.node;
  e.state = "up (this node)";
  e.started_at = st.started;
  e.liveness = "ok";
  e.details = {"peers: " + std::to_string(st.peers.size())};
  return e;
}

actor_entry peer_entry(const node_peer& p) {
  actor_entry e;
  e.kind = "node";
  e.name = label(p);
  e.node = label(p);
  e.started_at = p.since;
  switch (p.at) {
    case phase::dialing:
      e.state = "dialing";
      e.liveness = "not connected yet";
      break;
    case phase::up:
      e.state = "up";
      break;
    case phase::down:
      e.state = "down: " + p.reason;
      e.liveness = "unreachable";
      break;
  }
  e.details = {"address: " + p.address, "since: " + p.since,
               "dials: " + std::to_string(p.dials)};
  if (p.at != phase::up && !p.last_dial.empty())
    e.details.push_back("last dial: " + p.last_dial);
  return e;
}

/// One listing across the nodes: this node's inspector and every reachable
/// peer's, each under the node timeout; the nodes themselves are entries too.
struct listing {
  caf::typed_response_promise<std::vector<actor_entry>> rp;
  std::string kind;
  std::vector<actor_entry> entries;
  std::vector<actor_entry> nodes; // [0] this node, then the peers in order
  clock_type::time_point sent = clock_type::now();
  size_t open = 0;

  void take(size_t at, std::vector<actor_entry>& xs) {
    for (auto& e : xs) {
      e.node = nodes[at].name;
      entries.push_back(std::move(e));
    }
    nodes[at].liveness = "ok " + millis(clock_type::now() - sent);
  }

  void finish() {
    if (kind.empty() || kind == "node")
      for (auto& n : nodes)
        entries.push_back(std::move(n));
    rp.deliver(std::move(entries));
  }
};

caf::result<std::vector<actor_entry>> list(node_pointer self, std::string kind) {
  auto& st = self->state;
  auto l = std::make_shared<listing>();
  l->rp = self->make_response_promise<std::vector<actor_entry>>();
  l->kind = kind;
  l->nodes.push_back(this_node(st));
  for (auto& p : st.peers)
    l->nodes.push_back(peer_entry(p));
  auto done = [l] {
    if (--l->open == 0)
      l->finish();
  };
  auto t = st.timeout;
  bool only_nodes = kind == "node";
  if (!only_nodes) {
    ++l->open;
    self->request(st.inspector, t, atom::ls_v, kind)
      .then([l, done](std::vector<actor_entry>& xs) { l->take(0, xs), done(); },
            [l, done, t](caf::error& err) { l->nodes[0].liveness = unanswered(err, t), done(); });
  }
  for (size_t i = 0; i < st.peers.size(); ++i) {
    auto& p = st.peers[i];
    if (p.at != phase::up)
      continue;
    ++l->open;
    auto failed = [l, done, t, at = i + 1](caf::error& err) {
      l->nodes[at].liveness = unanswered(err, t);
      done();
    };
    if (only_nodes)
      // A peer's liveness without listing its fleet: its node actor's hello.
      self->request(p.front, t, atom::hello_v, st.gate->secret())
        .then(
          [l, done, at = i + 1](std::string&, inspector_actor&) {
            l->nodes[at].liveness = "ok " + millis(clock_type::now() - l->sent);
            done();
          },
          failed);
    else
      self->request(p.inspector, t, atom::ls_v, kind)
        .then([l, done, at = i + 1](std::vector<actor_entry>& xs) { l->take(at, xs), done(); },
              failed);
  }
  if (l->open == 0)
    l->finish();
  return l->rp;
}

// -- commands ------------------------------------------------------------------------

/// A command that names a host or a proxy, asked of this node and every
/// reachable peer at once (one after another, a wedged node would cost the
/// names of every node after it its timeout): the first answer other than
/// unknown_name is the owner's, success or not. CAF's own errors (no reply,
/// the node went away) make a node unreachable, not an answer.
template <class T>
struct route_job {
  caf::typed_response_promise<T> rp;
  std::vector<std::string> asked;
  std::vector<std::string> unreachable;
  caf::error first; // an unknown_name, for its text
  size_t open = 0;
  bool done = false;

  void answer(T& x) {
    if (!done)
      rp.deliver(std::move(x));
    done = true;
  }

  void failed(const std::string& node, caf::error& err) {
    if (done)
      return;
    if (is(err, ec::unknown_name)) {
      if (!first)
        first = err;
    } else if (err.category() == caf::atom("egress")) {
      rp.deliver(std::move(err)); // the owner's own failure
      done = true;
      return;
    } else {
      unreachable.push_back(node + " (" + render(err) + ")");
    }
    if (--open == 0)
      nobody();
  }

  void nobody() {
    done = true;
    std::string text = first ? detail(first) : std::string{"no such name"};
    text += " on any node (asked ";
    for (size_t i = 0; i < asked.size(); ++i)
      text += (i ? ", " : "") + asked[i];
    text += ")";
    if (!unreachable.empty()) {
      text += "; not reachable now, and may own it: ";
      for (size_t i = 0; i < unreachable.size(); ++i)
        text += (i ? ", " : "") + unreachable[i];
    }
    rp.deliver(make_error(ec::unknown_name, text));
  }
};

template <class T, class... Ts>
caf::result<T> routed(node_pointer self, Ts... xs) {
  auto& st = self->state;
  auto job = std::make_shared<route_job<T>>();
  job->rp = self->make_response_promise<T>();
  std::vector<std::pair<std::string, inspector_actor>> targets{{st.node, st.inspector}};
  for (auto& p : st.peers)
    if (p.at == phase::up)
      targets.emplace_back(p.name, p.inspector);
    else
      job->unreachable.push_back(label(p) + " (" + (p.reason.empty() ? "dialing" : p.reason)
                                 + ")");
  job->open = targets.size();
  for (auto& [node, inspector] : targets) {
    job->asked.push_back(node);
    self->request(inspector, st.timeout, xs...)
      .then([job](T& x) { job->answer(x); },
            [job, node = node](caf::error& err) { job->failed(node, err); });
  }
  return job->rp;
}

} // namespace

node_actor::behavior_type make_node(node_pointer self, std::string node,
                                    inspector_actor inspector,
                                    std::vector<std::string> peers, admission_ptr gate,
                                    bool tls) {
  auto& st = self->state;
  st.node = std::move(node);
  st.started = now_rfc3339();
  st.inspector = std::move(inspector);
  st.gate = gate ? std::move(gate) : std::make_shared<admission>();
  st.tls = tls;
  for (auto& address : peers) {
    node_peer p;
    p.address = address;
    // Validated with the configuration (engine.peers).
    if (auto hp = split_host_port(address)) {
      p.host = hp->first;
      p.port = hp->second;
    }
    p.since = st.started;
    st.peers.push_back(std::move(p));
  }
  for (size_t i = 0; i < st.peers.size(); ++i)
    dial(self, i);
  self->set_down_handler([self](caf::down_msg& msg) {
    auto& st = self->state;
    auto& ws = st.watchers;
    ws.erase(std::remove_if(ws.begin(), ws.end(),
                            [&](auto& w) { return w.handle.address() == msg.source; }),
             ws.end());
    for (size_t i = 0; i < st.peers.size(); ++i)
      if (st.peers[i].at == phase::up && st.peers[i].front.address() == msg.source)
        lost(self, i, msg.reason);
  });
  // Everything but hello is answered only to this process and to parties
  // whose hello carried the secret (when one is configured).
  auto admitted = [self] {
    return self->state.gate->admits(self->current_sender(), self->node());
  };
  auto refused = [] {
    return make_error(ec::access_denied,
                      "this node requires the shared secret first (caf-shell --secret-file=FILE; "
                      "a peer node presents its own engine.inspect.secret-file)");
  };
  auto watch = [self](engine_events_actor& w, bool own_only) {
    auto& ws = self->state.watchers;
    auto i = std::find_if(ws.begin(), ws.end(), [&](auto& x) { return x.handle == w; });
    if (i == ws.end()) {
      self->monitor(w);
      ws.push_back({std::move(w), own_only});
    }
    want_events(self);
  };
  return {
    [self, admitted, refused](atom::ls, std::string& kind) -> caf::result<std::vector<actor_entry>> {
      if (!admitted())
        return refused();
      return list(self, std::move(kind));
    },
    [self, admitted, refused](atom::status) -> caf::result<fleet_status> {
      if (!admitted())
        return refused();
      return self->delegate(self->state.inspector, atom::status_v);
    },
    [admitted, watch](atom::subscribe, engine_events_actor& w) {
      if (admitted())
        watch(w, false);
    },
    [admitted, watch](atom::subscribe, engine_events_actor& w, bool own_only) {
      if (admitted())
        watch(w, own_only);
    },
    [self, admitted, refused](atom::kill, std::string& host) -> caf::result<link_status> {
      if (!admitted())
        return refused();
      return routed<link_status>(self, atom::kill_v, std::move(host));
    },
    [self, admitted, refused](atom::run, std::string& proxy) -> caf::result<proxy_status> {
      if (!admitted())
        return refused();
      return routed<proxy_status>(self, atom::run_v, std::move(proxy));
    },
    [self, admitted, refused](atom::drain, std::string& proxy,
                              bool drained) -> caf::result<proxy_health> {
      if (!admitted())
        return refused();
      return routed<proxy_health>(self, atom::drain_v, std::move(proxy), drained);
    },
    [self, admitted, refused](atom::reload) -> caf::result<std::string> {
      if (!admitted())
        return refused();
      return self->delegate(self->state.inspector, atom::reload_v);
    },
    [self](atom::hello, std::string& secret) -> caf::result<std::string, inspector_actor> {
      auto& st = self->state;
      auto sender = self->current_sender();
      if (st.gate->required()) {
        if (!st.gate->matches(secret)) {
          log::warn("node", st.node + ": refused a hello with a wrong secret"
                              + (sender ? " from node " + to_string(sender->node()) : ""));
          return make_error(ec::access_denied, "wrong secret for node \"" + st.node
                                                 + "\" (engine.inspect.secret-file)");
        }
        if (sender)
          st.gate->admit(sender->node());
      }
      return {st.node, st.inspector};
    },
    [self, admitted](engine_event& e) {
      if (admitted())
        tell(self, e);
    },
    [self, admitted](atom::poll, std::string& address) {
      if (!admitted())
        return;
      auto& ps = self->state.peers;
      for (size_t i = 0; i < ps.size(); ++i)
        if (ps[i].address == address)
          dial(self, i);
    },
  };
}

} // namespace egress
