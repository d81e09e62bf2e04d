#pragma once
// The node actor: this process as one of several engine nodes. caf-run
// publishes it (not the inspector) on the middleman, so caf-shell attached
// to any node sees all of them.
//
// Each node owns its own hosts by config and runs its own fleet; nodes share
// nothing but this view. At start the node actor dials every peer in
// engine.peers through the middleman (the middleman actor's asynchronous
// connect, never a blocking remote_actor on a scheduler thread), asks it for
// its name and inspector (hello), and monitors it. A peer whose connection
// ends (the process died, the socket closed) is marked down with the
// reason, announced to watchers, and redialed with backoff; the other nodes
// and their fleets are not touched.
//
// Requests fan out to this node's inspector and each reachable peer's, each
// under its own timeout, so a wedged or dead node costs a listing that
// timeout and shows as such (invariant 22). Commands that name a host or a
// proxy go to this node first and then to the peers in order, until one
// owns the name.

#include <chrono>
#include <string>
#include <vector>

#include <caf/typed_event_based_actor.hpp>

#include "actors/parts/admission.hpp"
#include "messages/actors.hpp"

namespace egress {

struct node_peer {
  std::string address; // as configured: HOST:PORT of its inspector
  std::string host;
  uint16_t port = 0;
  std::string name;    // its engine.node, once it said hello
  enum class phase { dialing, up, down } at = phase::dialing;
  std::string since;   // RFC 3339: when it entered that phase
  std::string reason;  // why it went down (or why the first dial failed)
  std::string last_dial; // why the latest dial failed ("" after one that worked)
  uint32_t dials = 0;
  bool dialing = false;      // a dial is in flight
  caf::timespan backoff{0};
  std::chrono::steady_clock::time_point up_at; // when it last came up
  node_actor front;          // while up
  std::string token;         // what it gave this node in its hello (while up)
  bool events = false;       // this node gets its events (a watcher wants them)
};

/// A watcher of this node's events: a shell's (every node's events) or a
/// peer's node actor (this node's own only, with that peer's token).
struct node_watcher {
  engine_events_actor shell;
  node_events_actor peer;
  std::string token;
  caf::actor_addr address() const {
    return shell ? shell.address() : peer.address();
  }
};

struct node_state {
  std::string name = to_string(actor_kind::node);
  std::string node;    // engine.node
  std::string started; // RFC 3339
  inspector_actor inspector;
  std::vector<node_peer> peers;
  std::vector<node_watcher> watchers;
  engine_events_actor relay; // this node's fleet's events, with the own token
  admission gate;      // the shared secret, and the tokens given out
  uint64_t refused = 0; // hellos refused since the last warning
  std::chrono::steady_clock::time_point refused_logged{};
  uint64_t unexpected = 0; // messages no handler takes, since the last warning
  std::chrono::steady_clock::time_point unexpected_logged{};
  bool tls = false;    // dial peers through CAF's OpenSSL middleman
  /// This node's inspector as the peers list it ("" when its port is
  /// chosen at start): of two nodes that list each other, the one with the
  /// lower address dials first, and tells the other it did.
  std::string advertised;
  /// How long one node may take to answer a fan-out (a listing, a command).
  caf::timespan timeout = std::chrono::seconds(3);
  caf::timespan redial_min = std::chrono::seconds(1);
  caf::timespan redial_max = std::chrono::seconds(15);
};

using node_pointer = node_actor::stateful_pointer<node_state>;

/// What a node starts from: its name, this process's inspector, the other
/// nodes' inspectors (engine.peers, validated), the shared secret, whether
/// peers are dialed over TLS, and this node's own address as peers list it.
struct node_options {
  std::string node;
  inspector_actor inspector;
  std::vector<std::string> peers;
  std::string secret;
  bool tls = false;
  std::string advertised;
};

node_actor::behavior_type make_node(node_pointer self, node_options opts);

} // namespace egress
