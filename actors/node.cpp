#include "actors/node.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iterator>
#include <memory>
#include <set>

#include <caf/io/middleman.hpp>
#include <caf/openssl/manager.hpp>

#include "base/log.hpp"
#include "base/time_text.hpp"
#include "messages/config.hpp"
#include "messages/error.hpp"
#include "providers/crypto/secret.hpp"

namespace egress {

namespace {

using clock_type = std::chrono::steady_clock;
using phase = node_peer::phase;

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
    if (w.shell)
      self->send(w.shell, e);
    else if (e.node == self->state.node) // a peer relays only its own
      self->send(w.peer, e, w.token);
}

void announce(node_pointer self, const node_peer& p, std::string what) {
  tell(self, {now_rfc3339(), to_string(actor_kind::node), label(p), std::move(what),
              self->state.node});
}

/// Events reach watchers through this actor, which adds the nodes' own ups
/// and downs. It subscribes to a node only once a watcher wants events (a
/// fleet builds none for nobody), and once per connection: after a peer
/// comes back it is subscribed anew.
void want_events(node_pointer self) {
  auto& st = self->state;
  if (st.watchers.empty())
    return;
  if (!st.relay) {
    // The fleet sends plain events; this node accepts them with its own
    // token only. A relay that never leaves this process (so nothing
    // outside can address it) adds the token.
    auto node = caf::actor_cast<node_actor>(self);
    auto token = st.gate.own_events_token();
    st.relay = self->spawn([node, token]() -> engine_events_actor::behavior_type {
      return {[node, token](engine_event& e) { caf::anon_send(node, std::move(e), token); }};
    });
    self->link_to(st.relay);
    self->send(st.inspector, atom::subscribe_v, st.relay);
  }
  // A peer's own events come from its node actor, which relays them: its
  // fleet never sends to another process.
  auto me = caf::actor_cast<node_events_actor>(self);
  for (auto& p : st.peers)
    if (p.at == phase::up && !p.events) {
      self->send(p.front, atom::subscribe_v, p.token, me, st.gate.events_token(p.address));
      p.events = true;
    }
}

// -- peers ---------------------------------------------------------------------------

// Of two nodes that list each other, the one with the higher address waits
// before it dials (two nodes of the same machine share nothing but the
// addresses to tell who goes first): the other's dial reaches it first and
// says so (atom::link), and one connection serves both.
bool yields_to(const node_state& st, const node_peer& p) {
  return !st.advertised.empty() && st.advertised > p.address;
}

void schedule_dial(node_pointer self, node_peer& p) {
  auto& st = self->state;
  p.backoff = p.backoff.count() == 0 ? st.redial_min : std::min(p.backoff * 2, st.redial_max);
  auto wait = p.backoff + (yields_to(st, p) ? 2 * st.timeout : caf::timespan{0});
  self->delayed_send(self, wait, atom::poll_v, st.gate.own_events_token(), p.address);
}

void enter(node_pointer self, node_peer& p, phase next, std::string why) {
  p.last_dial = next == phase::up ? std::string{} : why;
  if (p.at == next)
    return; // a redial that failed again: no news (the reason it went down stays)
  p.reason = std::move(why);
  p.at = next;
  p.since = now_rfc3339();
  if (next == phase::up) {
    log::info(to_string(actor_kind::node), self->state.node + ": node " + p.name + " at " + p.address + " is up");
    announce(self, p, "up at " + p.address);
  } else {
    log::warn(to_string(actor_kind::node), self->state.node + ": node "
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
            std::string token, bool dialed = true) {
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
  p.name = std::move(name);
  p.front = std::move(front);
  p.token = std::move(token);
  p.events = false;
  p.up_at = clock_type::now();
  enter(self, p, phase::up, {});
  // The peer need not dial back: it may talk to this node's node actor with
  // this token (it proved the secret in this very hello).
  if (dialed && !st.advertised.empty())
    self->send(p.front, atom::link_v, p.token, caf::actor_cast<caf::actor>(self),
               st.gate.issue(), st.node, st.advertised);
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
  // (A peer that dialed this node first is up already: see atom::link.)
  p.dialing = true;
  ++p.dials;
  auto& sys = self->system();
  auto mm = st.tls ? sys.openssl_manager().actor_handle() : sys.middleman().actor_handle();
  self->request(mm, st.timeout, caf::connect_atom_v, p.host, p.port)
    .then(
      [self, i](caf::node_id&, caf::strong_actor_ptr& ptr, std::set<std::string>& ifs) {
        if (self->state.peers[i].at == phase::up) { // it dialed us meanwhile
          self->state.peers[i].dialing = false;
          return;
        }
        if (!ptr)
          return dial_failed(self, i, "nothing is published there");
        auto want = self->system().message_types<node_actor>();
        if (!std::includes(ifs.begin(), ifs.end(), want.begin(), want.end()))
          return dial_failed(self, i, "what is published there is not an engine node of "
                                      "this version");
        auto front = caf::actor_cast<node_actor>(std::move(ptr));
        auto t = self->state.timeout;
        auto mine = crypto::random_hex(16);
        self->request(front, t, atom::hello_v, mine)
          .then(
            [self, i, front, t, mine](std::string& theirs, std::string& their_proof) {
              // The peer proves first: a node that does not know the
              // secret gets no proof of ours.
              auto& secret = self->state.gate.secret();
              if (!crypto::equal_constant_time(their_proof,
                                               admission::proof(secret, "node", mine, theirs)))
                return dial_failed(self, i, "it does not prove the shared secret "
                                            "(engine.inspect.secret-file differs)");
              self->request(front, t, atom::hello_v, theirs, mine,
                            admission::proof(secret, "party", theirs, mine))
                .then(
                  [self, i, front](std::string& name, std::string& token) {
                    joined(self, i, front, std::move(name), std::move(token));
                  },
                  [self, i](caf::error& err) {
                    dial_failed(self, i, "hello refused: " + render(err));
                  });
            },
            [self, i](caf::error& err) { dial_failed(self, i, "no hello: " + render(err)); });
      },
      [self, i](caf::error& err) { dial_failed(self, i, "cannot connect: " + render(err)); });
}

void lost(node_pointer self, size_t i, const caf::error& reason) {
  auto& p = self->state.peers[i];
  self->demonitor(p.front.address());
  self->state.gate.revoke_events(p.address);
  p.front = nullptr;
  p.token.clear();
  p.events = false;
  // A connection that lasted starts the backoff over; one that keeps
  // dropping at once keeps doubling it.
  if (clock_type::now() - p.up_at > self->state.redial_max)
    p.backoff = caf::timespan{0};
  enter(self, p, phase::down,
        "connection lost (" + (reason ? render(reason) : std::string{"its node stopped"}) + ")");
  schedule_dial(self, p);
}

/// A peer that no longer takes our token (it restarted its admission, or
/// let the token go as its idlest) is dialed again for a new one.
void rehello_if_refused(node_pointer self, const std::string& address, const caf::error& err) {
  if (!is(err, ec::access_denied))
    return;
  auto& ps = self->state.peers;
  for (size_t i = 0; i < ps.size(); ++i)
    if (ps[i].address == address && ps[i].at == phase::up)
      lost(self, i, err);
}

// -- ls ------------------------------------------------------------------------------

actor_row this_node(const node_state& st) {
  actor_row e;
  e.kind = actor_kind::node;
  e.name = st.node;
  e.node = st.node;
  e.state = "up (this node)";
  e.started_at = st.started;
  e.liveness = "ok";
  e.details = {"peers: " + std::to_string(st.peers.size())};
  return e;
}

actor_row peer_entry(const node_peer& p) {
  actor_row e;
  e.kind = actor_kind::node;
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
  caf::typed_response_promise<std::vector<actor_row>> rp;
  ls_query query;
  std::vector<actor_row> rows;
  std::vector<actor_row> nodes; // [0] this node, then the peers in order
  clock_type::time_point sent = clock_type::now();
  size_t open = 0;

  void take(size_t at, std::vector<actor_row>& xs) {
    for (auto& e : xs)
      e.node = nodes[at].name;
    // The first answer as it came (a node's 100,000 rows are not moved one
    // by one into a growing vector); the next ones appended.
    if (rows.empty())
      rows = std::move(xs);
    else
      rows.insert(rows.end(), std::make_move_iterator(xs.begin()),
                  std::make_move_iterator(xs.end()));
    nodes[at].liveness = "ok " + elapsed_text(clock_type::now() - sent);
  }

  void finish() {
    if (query.kind.empty() || actor_kind_from(query.kind) == actor_kind::node)
      for (auto& n : nodes)
        if (query.name.empty() || n.name == query.name) {
          if (!query.details)
            n.details.clear();
          rows.push_back(std::move(n));
        }
    rp.deliver(std::move(rows));
  }
};

/// This node's own actors (a peer's "here only" listing): the inspector's
/// answer, delivered by this actor (only it talks to other processes).
caf::result<std::vector<actor_row>> list_here(node_pointer self, ls_query query) {
  if (actor_kind_from(query.kind) == actor_kind::node)
    return std::vector<actor_row>{}; // the asking node lists the nodes
  auto rp = self->make_response_promise<std::vector<actor_row>>();
  self->request(self->state.inspector, self->state.timeout, atom::ls_v, std::move(query))
    .then(
      [self, rp](std::vector<actor_row>& xs) mutable {
        for (auto& e : xs)
          e.node = self->state.node;
        rp.deliver(std::move(xs));
      },
      [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
  return rp;
}

caf::result<std::vector<actor_row>> list(node_pointer self, ls_query query) {
  auto& st = self->state;
  auto l = std::make_shared<listing>();
  l->rp = self->make_response_promise<std::vector<actor_row>>();
  l->query = query;
  l->nodes.push_back(this_node(st));
  for (auto& p : st.peers)
    l->nodes.push_back(peer_entry(p));
  auto done = [l] {
    if (--l->open == 0)
      l->finish();
  };
  auto t = st.timeout;
  bool only_nodes = actor_kind_from(query.kind) == actor_kind::node;
  // `ls nodes` in a cluster: this node's view of the store (every node's
  // lease and hosts) comes with the nodes it is connected to.
  auto asked = only_nodes ? ls_query{to_string(actor_kind::cluster), "", query.details} : query;
  {
    ++l->open;
    self->request(st.inspector, t, atom::ls_v, asked)
      .then([l, done](std::vector<actor_row>& xs) { l->take(0, xs), done(); },
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
      // A peer's liveness without listing its fleet: a nonce from its node
      // actor (the cheapest question it answers).
      self->request(p.front, t, atom::hello_v, crypto::random_hex(16))
        .then(
          [l, done, at = i + 1](std::string&, std::string&) {
            l->nodes[at].liveness = "ok " + elapsed_text(clock_type::now() - l->sent);
            done();
          },
          failed);
    else
      self->request(p.front, t, atom::ls_v, p.token, query, true)
        .then([l, done, at = i + 1](std::vector<actor_row>& xs) { l->take(at, xs), done(); },
              [self, failed, addr = p.address](caf::error& err) {
                rehello_if_refused(self, addr, err);
                failed(err);
              });
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
    } else if (err.category() == caf::atom("egress") && !is(err, ec::access_denied)) {
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

/// Asks this node's inspector with `xs`, and each reachable peer's node
/// actor with (atom, its token, args..., here only): `local` and `remote`
/// build the two messages.
template <class T, class Local, class Remote>
caf::result<T> routed(node_pointer self, Local local, Remote remote) {
  auto& st = self->state;
  auto job = std::make_shared<route_job<T>>();
  job->rp = self->make_response_promise<T>();
  size_t targets = 1;
  for (auto& p : st.peers)
    if (p.at == phase::up)
      ++targets;
    else
      job->unreachable.push_back(label(p) + " (" + (p.reason.empty() ? "dialing" : p.reason)
                                 + ")");
  job->open = targets;
  job->asked.push_back(st.node);
  local(st.inspector).then([job](T& x) { job->answer(x); },
                           [job, node = st.node](caf::error& err) { job->failed(node, err); });
  for (auto& p : st.peers)
    if (p.at == phase::up) {
      job->asked.push_back(p.name);
      remote(p.front, p.token)
        .then([job](T& x) { job->answer(x); },
              [self, job, node = p.name, addr = p.address](caf::error& err) {
                rehello_if_refused(self, addr, err);
                job->failed(node, err);
              });
    }
  return job->rp;
}

/// The same command for this node only (a peer's "here only" request).
template <class T, class Local>
caf::result<T> here(node_pointer self, Local local) {
  auto rp = self->make_response_promise<T>();
  local(self->state.inspector)
    .then([rp](T& x) mutable { rp.deliver(std::move(x)); },
          [rp](caf::error& err) mutable { rp.deliver(std::move(err)); });
  return rp;
}

/// A command that names a host or a proxy: this node's inspector gets
/// (atom, args...), a reachable peer's node actor (atom, its token,
/// args..., here only); a peer's own "here only" request asks this node
/// alone.
template <class T, class Atom, class... Ts>
caf::result<T> command(node_pointer self, bool here_only, Atom atom, Ts... xs) {
  auto t = self->state.timeout;
  auto local = [self, t, atom, xs...](const inspector_actor& i) {
    return self->request(i, t, atom, xs...);
  };
  if (here_only)
    return here<T>(self, local);
  return routed<T>(self, local, [self, t, atom, xs...](const node_actor& n,
                                                       const std::string& token) {
    return self->request(n, t, atom, token, xs..., true);
  });
}

// The state from its options, and a dial (or a wait for the peer's own
// dial, docs/architecture.md "Several nodes") per peer.
void start_node(node_pointer self, node_options opts) {
  auto& st = self->state;
  st.node = std::move(opts.node);
  st.started = now_rfc3339();
  st.inspector = std::move(opts.inspector);
  st.gate = admission{std::move(opts.secret)};
  st.tls = opts.tls;
  st.advertised = std::move(opts.advertised);
  for (auto& address : opts.peers) {
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
    if (yields_to(st, st.peers[i]))
      self->delayed_send(self, 2 * st.timeout, atom::poll_v, st.gate.own_events_token(),
                         st.peers[i].address);
    else
      dial(self, i);
}

// What reaches the node outside its handlers: a watcher's or peer's down
// message, a message no handler takes, an error or exit message (both can
// come from any connected party).
void set_guards(node_pointer self) {
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
  // What no handler takes is dropped with one line (at most one per 10 s,
  // with a count), never printed: CAF's default writes it to stdout, into
  // the status table's stream, for anyone who can connect.
  self->set_default_handler([self](caf::scheduled_actor*, caf::message_view& x)
                              -> caf::result<caf::message> {
    auto& st = self->state;
    ++st.unexpected;
    auto now = clock_type::now();
    if (now - st.unexpected_logged > std::chrono::seconds(10)) {
      auto sender = self->current_sender();
      log::warn(to_string(actor_kind::node), st.node + ": dropped " + std::to_string(st.unexpected)
                          + " unexpected message(s); the latest from node "
                          + (sender ? caf::to_string(sender->node()) : std::string{"unknown"})
                          + " with " + std::to_string(x.content().size()) + " element(s)");
      st.unexpected = 0;
      st.unexpected_logged = now;
    }
    return caf::sec::unexpected_message;
  });
  // CAF handles errors and exit messages before any handler could look at
  // a token. An error message is logged, never fatal; an exit message other
  // than kill (which engine::stop sends, and which no handler can stop) is
  // ignored.
  self->set_error_handler([self](caf::error& err) {
    log::warn(to_string(actor_kind::node), self->state.node + ": ignored an error message: " + render(err));
  });
  self->set_exit_handler([self](caf::exit_msg& msg) {
    log::warn(to_string(actor_kind::node), self->state.node + ": ignored an exit message: " + render(msg.reason));
  });
}

// The second hello: a token for a proof of the shared secret, or a refusal
// (logged at most once per 10 s, however many a certificate holder sends).
caf::result<std::string, std::string> admit(node_pointer self, const std::string& node_nonce,
                                            const std::string& party_nonce,
                                            const std::string& proof) {
  auto& st = self->state;
  if (node_nonce.size() > admission::max_field || party_nonce.size() > admission::max_field
      || proof.size() > admission::max_field)
    return make_error(ec::access_denied, "hello: fields of at most "
                                           + std::to_string(admission::max_field)
                                           + " characters");
  auto token = st.gate.admit(node_nonce, party_nonce, proof);
  if (!token.empty())
    return {st.node, std::move(token)};
  ++st.refused;
  auto now = clock_type::now();
  if (now - st.refused_logged > std::chrono::seconds(10)) {
    log::warn(to_string(actor_kind::node), st.node + ": refused " + std::to_string(st.refused)
                        + " hello(s): wrong secret, or a stale or reused nonce");
    st.refused = 0;
    st.refused_logged = now;
  }
  return make_error(ec::access_denied, "wrong secret for node \"" + st.node
                                         + "\" (engine.inspect.secret-file), or a stale "
                                           "nonce");
}

// A peer that dialed this node: joined, if it is one of its peers.
void take_link(node_pointer self, caf::actor& peer, std::string& its_token, std::string& name,
               const std::string& address) {
  auto& st = self->state;
  for (size_t i = 0; i < st.peers.size(); ++i)
    if (st.peers[i].address == address && st.peers[i].at != phase::up) {
      st.peers[i].dialing = false;
      joined(self, i, caf::actor_cast<node_actor>(peer), std::move(name),
             std::move(its_token), false);
      return;
    }
}

} // namespace

namespace {

caf::error refused_error() {
  return make_error(ec::access_denied,
                    "no valid token: say hello with the shared secret first (caf-shell "
                    "--secret-file=FILE; a peer node uses its engine.inspect.secret-file)");
}

// hello, first step: this node's nonce and proof for the party's nonce.
caf::result<std::string, std::string> challenge(node_pointer self,
                                                const std::string& party_nonce) {
  if (party_nonce.size() > admission::max_field)
    return make_error(ec::access_denied, "hello: a nonce of at most "
                                           + std::to_string(admission::max_field)
                                           + " characters");
  auto [nonce, proof] = self->state.gate.challenge(party_nonce);
  return {std::move(nonce), std::move(proof)};
}

// A watcher (a shell's, or a peer's node actor), once, monitored.
void add_watcher(node_pointer self, node_watcher w) {
  auto& ws = self->state.watchers;
  auto addr = w.address();
  if (std::none_of(ws.begin(), ws.end(), [&](auto& x) { return x.address() == addr; })) {
    self->monitor(addr);
    ws.push_back(std::move(w));
  }
  want_events(self);
}

// The redial timer of a peer (its own token: nobody else can send it).
void redial(node_pointer self, const std::string& token, const std::string& address) {
  if (!crypto::equal_constant_time(token, self->state.gate.own_events_token()))
    return;
  auto& ps = self->state.peers;
  for (size_t i = 0; i < ps.size(); ++i)
    if (ps[i].address == address)
      dial(self, i);
}

} // namespace

node_actor::behavior_type make_node(node_pointer self, node_options opts) {
  start_node(self, std::move(opts));
  set_guards(self);
  auto refused = refused_error;
  auto watch = [self](node_watcher w) { add_watcher(self, std::move(w)); };
  return {
    [self](atom::hello, std::string& party_nonce) -> caf::result<std::string, std::string> {
      return challenge(self, party_nonce);
    },
    [self](atom::hello, std::string& node_nonce, std::string& party_nonce,
           std::string& proof) -> caf::result<std::string, std::string> {
      return admit(self, node_nonce, party_nonce, proof);
    },
    [self, refused](atom::ls, std::string& token, ls_query& query,
                    bool here_only) -> caf::result<std::vector<actor_row>> {
      if (!self->state.gate.valid(token))
        return refused();
      return here_only ? list_here(self, std::move(query)) : list(self, std::move(query));
    },
    [self, refused](atom::status, std::string& token) -> caf::result<fleet_status> {
      if (!self->state.gate.valid(token))
        return refused();
      return here<fleet_status>(self, [self](const inspector_actor& i) {
        return self->request(i, self->state.timeout, atom::status_v);
      });
    },
    [self, watch](atom::subscribe, std::string& token, engine_events_actor& w) {
      if (self->state.gate.valid(token))
        watch({std::move(w), {}, {}});
    },
    [self, watch](atom::subscribe, std::string& token, node_events_actor& w,
                  std::string& reply) {
      if (self->state.gate.valid(token))
        watch({{}, std::move(w), std::move(reply)});
    },
    [self, refused](atom::kill, std::string& token, std::string& host,
                    bool here_only) -> caf::result<link_status> {
      if (!self->state.gate.valid(token))
        return refused();
      return command<link_status>(self, here_only, atom::kill_v, std::move(host));
    },
    [self, refused](atom::reconcile, std::string& token, std::string& proxy,
                    bool here_only) -> caf::result<proxy_status> {
      if (!self->state.gate.valid(token))
        return refused();
      return command<proxy_status>(self, here_only, atom::reconcile_v, std::move(proxy));
    },
    [self, refused](atom::drain, std::string& token, std::string& proxy, bool drained,
                    bool here_only) -> caf::result<proxy_health> {
      if (!self->state.gate.valid(token))
        return refused();
      return command<proxy_health>(self, here_only, atom::drain_v, std::move(proxy), drained);
    },
    [self, refused](atom::cordon, std::string& token, std::string& host, bool on,
                    bool here_only) -> caf::result<host_drain> {
      if (!self->state.gate.valid(token))
        return refused();
      return command<host_drain>(self, here_only, atom::cordon_v, std::move(host), on);
    },
    [self, refused](atom::reload, std::string& token) -> caf::result<std::string> {
      if (!self->state.gate.valid(token))
        return refused();
      // The re-read runs on a detached thread and may take a while.
      return here<std::string>(self, [self](const inspector_actor& i) {
        return self->request(i, std::chrono::seconds(20), atom::reload_v);
      });
    },
    [self](engine_event& e, std::string& token) {
      if (self->state.gate.valid_for_events(token))
        tell(self, e);
    },
    [self](atom::link, std::string& token, caf::actor& peer, std::string& its_token,
           std::string& name, std::string& address) {
      if (self->state.gate.valid(token) && peer)
        take_link(self, peer, its_token, name, address);
    },
    [self](atom::poll, std::string& token, std::string& address) {
      redial(self, token, address);
    },
  };
}

} // namespace egress
