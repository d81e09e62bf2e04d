#pragma once
// This node in a cluster of engine nodes (engine.cluster): its lease in
// etcd, its claims on hosts, its fences, and its share of the rotation
// (docs/architecture.md, "Node failover").
//
//   joining ── lease granted, node key put, store read, watch started ──> member
//   member ── last confirmed keepalive older than TTL - TTL/3 ──────────> fenced
//   fenced ── a keepalive confirms the lease again ─────────────────────> member
//   member, fenced ── the lease is gone (keepalive answers TTL 0) ──────> joining
//   any ── shutdown (lease revoked: the hosts go at once) ──────────────> stopping
//
// A member claims the hosts actors/parts/ownership.hpp says it should and
// tells the fleet which of its hosts it may change (guard passed) with
// their tokens; the fleet runs exactly those. Each host's fence
// (actors/parts/host_fence.hpp) is open until the lease deadline while the
// host is usable and closed otherwise, and every call of the host's link
// checks it on the worker's thread. Blocking etcd requests run on two
// detached workers (the lease's own, so a keepalive never waits behind a
// claim, and the rest) and the watch on a detached call of its own.

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include <caf/typed_event_based_actor.hpp>

#include "actors/parts/cluster_keys.hpp"
#include "actors/parts/host_fence.hpp"
#include "actors/parts/ownership.hpp"
#include "messages/actors.hpp"
#include "providers/etcd/client.hpp"

namespace egress {

enum class cluster_phase : uint8_t { joining, member, fenced, stopping };

const char* to_string(cluster_phase x);

struct cluster_options {
  cluster_config cfg;
  std::string node;
  std::string entry;
  /// Each host's guard: its call budget and a second.
  std::map<std::string, std::chrono::milliseconds> guards;
  fence_board_ptr fences;
  fleet_actor fleet;
};

struct cluster_state {
  using clock = std::chrono::steady_clock;

  std::string name = to_string(actor_kind::cluster);
  cluster_options opts;
  etcd::client_ptr store;
  cluster_keys keys{"/", "-"};
  ownership book{ownership::settings{}};
  cluster_phase phase = cluster_phase::joining;
  std::string reason = "starting";
  int64_t lease = 0;
  clock::time_point confirmed{}; // when the last keepalive that confirmed the lease was sent
  bool lease_busy = false;       // a grant or keepalive in flight
  call_worker_actor lease_worker, store_worker;
  // The watch: its number tells a current batch from a stale one.
  uint64_t watch_no = 0;
  // The running watch's cancel flag, in a box the actor's end can reach.
  std::shared_ptr<std::shared_ptr<std::atomic<bool>>> watch_box
    = std::make_shared<std::shared_ptr<std::atomic<bool>>>();
  bool reading = false; // a range (before a watch) in flight
  int64_t revision = 0;
  std::map<std::string, int64_t> running; // the hosts the fleet was last told to run
  std::map<std::string, std::vector<rotation_member>> others;
  std::vector<rotation_member> own_rotation; // this node's, from the fleet
  std::string own_published;   // the value last put under rotation/<node>
  bool own_putting = false;
  std::string avoid_published; // the value last put under nodes/<node>
  // Hosts whose domains carry a newer token than this node's claim: by
  // host, the newest token seen (actors/cluster.cpp, on_superseded).
  std::map<std::string, int64_t> superseded;
  cluster_status counters;     // the counters only; the rest is built on push
};

using cluster_pointer = cluster_actor::stateful_pointer<cluster_state>;

cluster_actor::behavior_type make_cluster(cluster_pointer self, cluster_options opts);

/// Each host's guard: its call budget (over SSH, its TCP user timeout when
/// that is longer) and a second: a call the old owner sent may still be
/// running inside libvirtd, or on its way there, when its key goes.
std::map<std::string, std::chrono::milliseconds> guards_of(const engine_config& cfg);

// -- the store's side (actors/cluster_store.cpp) ----------------------------------

/// Which of the cluster's two workers runs a request: the lease's own (a
/// keepalive never waits behind a claim) or the store's.
enum class store_lane { lease, store };

/// Runs `fn` on that worker under the request timeout of every endpoint;
/// `done` gets its value or the error.
void on_worker(cluster_pointer self, store_lane lane, std::string what,
               std::function<caf::expected<std::any>()> fn,
               std::function<void(caf::expected<std::any>)> done);

/// The same, typed: `fn` returns caf::expected<T>, `done` takes it (the
/// std::any a worker carries stays in here).
template <class Fn, class Done>
void ask_store(cluster_pointer self, store_lane lane, std::string what, Fn fn, Done done) {
  using value = typename std::invoke_result_t<Fn>::value_type;
  on_worker(
    self, lane, std::move(what),
    [fn = std::move(fn)]() -> caf::expected<std::any> {
      auto r = fn();
      if (!r)
        return std::move(r.error());
      return std::any{std::move(*r)};
    },
    [done = std::move(done)](caf::expected<std::any> r) mutable {
      if (!r)
        return done(caf::expected<value>{std::move(r.error())});
      if (auto* v = std::any_cast<value>(&*r))
        return done(caf::expected<value>{std::move(*v)});
      done(caf::expected<value>{caf::make_error(caf::sec::unexpected_response)});
    });
}

/// Reads every key of the entry, resets the book from it and starts a
/// watch from the revision after it.
void read_and_watch(cluster_pointer self);

/// Takes one batch of the watch.
void take_watch_batch(cluster_pointer self, uint64_t watch_no, int64_t revision,
                  std::vector<store_change>& changes);

/// Claims and releases what the book says, now.
void claim_and_release(cluster_pointer self);

/// Puts this node's key (its avoided hosts) and its rotation when they
/// changed since the last put.
void publish_node(cluster_pointer self);
void publish_rotation(cluster_pointer self);

/// Stops the watch (its call returns within 100 ms).
void stop_watch(cluster_pointer self);

// -- the lease's side (actors/cluster.cpp) ------------------------------------------

/// Tells the fleet the hosts it may change now and the other nodes'
/// rotation; opens and closes the fences to match. Sent only on a change
/// unless `always`.
void push_view(cluster_pointer self, bool always = false);

} // namespace egress
