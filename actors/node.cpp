#include "actors/node.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <set>

#include <caf/io/middleman.hpp>

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
    self->send(w, e);
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
  for (auto& p : st.peers)
    if (p.at == phase::up && !p.events) {
      self->send(p.inspector, atom::subscribe_v, me);
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
  self->monitor(front);
  p.name = std::move(name);
  p.front = std::move(front);
  p.inspector = std::move(inspector);
  p.events = false;
  p.backoff = caf::timespan{0};
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
  ++p.dials;
  auto mm = self->system().middleman().actor_handle();
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
        self->request(front, self->state.timeout, atom::hello_v)
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
      self->request(p.front, t, atom::hello_v)
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

/// A command that names a host or a proxy: this node first, then each
/// reachable peer in order, until one owns the name. Any answer other than
/// unknown_name (success or another error) is the answer.
template <class T>
struct route_job {
  caf::typed_response_promise<T> rp;
  std::vector<std::pair<std::string, inspector_actor>> targets; // node, its inspector
  std::vector<std::string> unreachable;
  caf::error first; // this node's unknown_name
};

template <class T, class... Ts>
void route(node_pointer self, std::shared_ptr<route_job<T>> job, size_t at, Ts... xs) {
  if (at == job->targets.size()) {
    std::string asked;
    for (auto& [n, _] : job->targets)
      asked += (asked.empty() ? "" : ", ") + n;
    auto text = detail(job->first) + " on any node (asked " + asked + ")";
    if (!job->unreachable.empty()) {
      std::string down;
      for (auto& n : job->unreachable)
        down += (down.empty() ? "" : ", ") + n;
      text += "; not reachable now, and may own it: " + down;
    }
    job->rp.deliver(make_error(ec::unknown_name, text));
    return;
  }
  self->request(job->targets[at].second, self->state.timeout, xs...)
    .then([job](T& x) { job->rp.deliver(std::move(x)); },
          [self, job, at, xs...](caf::error& err) {
            if (!is(err, ec::unknown_name)) {
              job->rp.deliver(std::move(err));
              return;
            }
            if (!job->first)
              job->first = err;
            route<T>(self, job, at + 1, xs...);
          });
}

template <class T, class... Ts>
caf::result<T> routed(node_pointer self, Ts... xs) {
  auto& st = self->state;
  auto job = std::make_shared<route_job<T>>();
  job->rp = self->make_response_promise<T>();
  job->targets.emplace_back(st.node, st.inspector);
  for (auto& p : st.peers)
    if (p.at == phase::up)
      job->targets.emplace_back(p.name, p.inspector);
    else
      job->unreachable.push_back(label(p));
  route<T>(self, job, 0, xs...);
  return job->rp;
}

} // namespace

node_actor::behavior_type make_node(node_pointer self, std::string node,
                                    inspector_actor inspector,
                                    std::vector<std::string> peers) {
  auto& st = self->state;
  st.node = std::move(node);
  st.started = now_rfc3339();
  st.inspector = std::move(inspector);
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
                            [&](auto& w) { return w.address() == msg.source; }),
             ws.end());
    for (size_t i = 0; i < st.peers.size(); ++i)
      if (st.peers[i].at == phase::up && st.peers[i].front.address() == msg.source)
        lost(self, i, msg.reason);
  });
  return {
    [self](atom::ls, std::string& kind) { return list(self, std::move(kind)); },
    [self](atom::status) -> caf::result<fleet_status> {
      return self->delegate(self->state.inspector, atom::status_v);
    },
    [self](atom::subscribe, engine_events_actor& w) {
      auto& ws = self->state.watchers;
      if (std::find(ws.begin(), ws.end(), w) == ws.end()) {
        self->monitor(w);
        ws.push_back(std::move(w));
      }
      want_events(self);
    },
    [self](atom::kill, std::string& host) {
      return routed<link_status>(self, atom::kill_v, std::move(host));
    },
    [self](atom::run, std::string& proxy) {
      return routed<proxy_status>(self, atom::run_v, std::move(proxy));
    },
    [self](atom::drain, std::string& proxy, bool drained) {
      return routed<proxy_health>(self, atom::drain_v, std::move(proxy), drained);
    },
    [self](atom::reload) -> caf::result<std::string> {
      return self->delegate(self->state.inspector, atom::reload_v);
    },
    [self](atom::hello) -> caf::result<std::string, inspector_actor> {
      return {self->state.node, self->state.inspector};
    },
    [self](engine_event& e) { tell(self, e); },
    [self](atom::poll, std::string& address) {
      auto& ps = self->state.peers;
      for (size_t i = 0; i < ps.size(); ++i)
        if (ps[i].address == address && ps[i].at != phase::up)
          dial(self, i);
    },
  };
}

} // namespace egress
