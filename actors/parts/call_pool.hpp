#pragma once
// Where a host link's call waits and what runs it (docs/architecture.md, "The
// call pool"). A call is queued until the link is up and fewer than
// max_calls run; then it takes a worker (an idle one, or one the link starts)
// and a libvirt connection (the least busy, or a new one while the link has
// fewer than `connections`), and is in flight until it answers, runs past
// its budget or the link dies. A worker whose call was abandoned is never
// used again; when too many abandoned calls still run, the link stays dead
// (actors/host_link.cpp).
//
// A plain class: the link decides when, this says what. It starts nothing,
// sends nothing and has no clock, so its unit tests (tests/unit/call_pool.cpp)
// need no actor system. `Worker` is a handle compared with ==, `Promise` what
// the caller waits on; the link uses call_pool, the tests their own types.

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include <caf/typed_response_promise.hpp>

#include "messages/actors.hpp"

namespace egress {

namespace lv {
class lazy_connection;
} // namespace lv

template <class Worker, class Promise>
class basic_call_pool {
public:
  using connection_ptr = std::shared_ptr<lv::lazy_connection>;

  // Set from the link's options (actors/host_link.hpp), which hold the
  // defaults; a default pool admits nothing.
  struct limits {
    uint32_t max_calls = 0;
    // libvirt connections per link, 1..max_calls (actors/parts/transport_choice):
    // max_calls where no two calls may share one, 1 where they may.
    uint32_t connections = 0;
    // Abandoned calls still running past which the link stays dead; 0:
    // twice max_calls.
    uint32_t abandoned_cap = 0;
    // Creates (call_job::create) running at once, at most; 0: no limit of
    // their own. A reload or a re-placement that creates many VMs on one
    // host must not fill every slot with long creates while reads wait.
    uint32_t max_creates = 0;
  };

  struct waiting {
    uint64_t id = 0;
    call_job job;
    Promise rp;
  };

  struct running {
    Promise rp;
    Worker worker;
    connection_ptr conn;
    bool create = false;
  };

  // What a dead link still held: the callers to fail, the workers to retire
  // (their calls are abandoned) and the connections to close off the link's
  // thread (a close may block).
  struct released {
    std::vector<Promise> callers;
    std::vector<Worker> workers;
    std::vector<connection_ptr> connections;
  };

  explicit basic_call_pool(limits l = {}) : limits_(l) {}

  // -- the queue ----------------------------------------------------------------

  void enqueue(call_job job, Promise rp) {
    queued_.push_back({next_id_++, std::move(job), std::move(rp)});
  }

  /// The next call to run, if one waits and fewer than max_calls run (the
  /// link asks only while it is up): the first in the queue, but for a
  /// create while max_creates run, which the next other call passes.
  std::optional<waiting> admit() {
    if (in_flight_.size() >= limits_.max_calls)
      return std::nullopt;
    bool creates_full = limits_.max_creates > 0 && creates_ >= limits_.max_creates;
    auto i = std::find_if(queued_.begin(), queued_.end(),
                          [&](const waiting& w) { return !(creates_full && w.job.create); });
    if (i == queued_.end())
      return std::nullopt;
    auto w = std::move(*i);
    queued_.erase(i);
    return w;
  }

  // -- workers ------------------------------------------------------------------

  /// An idle worker, if any; otherwise the link starts one and adds it.
  std::optional<Worker> idle_worker() {
    if (idle_.empty())
      return std::nullopt;
    auto w = std::move(idle_.back().worker);
    idle_.pop_back();
    return w;
  }

  void add_worker(Worker w) {
    all_->push_back(std::move(w));
    ++workers_started_;
  }

  /// A worker that answered takes the next call (unless its thread ended).
  void return_worker(const Worker& w) {
    if (std::find(all_->begin(), all_->end(), w) != all_->end())
      idle_.push_back({w, sweeps_});
  }

  /// The idle workers that took no call since the last sweep, but the
  /// `keep` used last: the link sends each an exit (idle, it quits at once)
  /// and forgets it at its down message. Swept once a bulk-read interval, a
  /// link at rest keeps one thread instead of max_calls of them for ever
  /// (5,000 threads over 1,000 hosts, docs/notes/scale.md#threads).
  std::vector<Worker> sweep_idle(size_t keep) {
    std::vector<Worker> out;
    std::vector<idle_slot> kept;
    // Returned in order: the back was used last.
    auto sweepable = idle_.size() > keep ? idle_.size() - keep : 0;
    for (size_t i = 0; i < idle_.size(); ++i) {
      if (i < sweepable && idle_[i].since < sweeps_)
        out.push_back(std::move(idle_[i].worker));
      else
        kept.push_back(std::move(idle_[i]));
    }
    idle_ = std::move(kept);
    ++sweeps_;
    return out;
  }

  /// A worker's thread ended: it is gone from the pool. False if `is_it`
  /// matched none.
  template <class Predicate>
  bool forget_worker_if(Predicate is_it) {
    auto n = std::erase_if(*all_, is_it);
    std::erase_if(idle_, [&](const idle_slot& x) { return is_it(x.worker); });
    return n > 0;
  }

  /// Every worker until its thread ends, shared so that the link's end can
  /// send each an exit however the link ends.
  std::shared_ptr<const std::vector<Worker>> workers() const { return all_; }

  uint64_t workers_started() const noexcept { return workers_started_; }

  // -- connections --------------------------------------------------------------

  /// The dial's connection, already open.
  void add_connection(connection_ptr c) { connections_.push_back({std::move(c), 0}); }

  /// The connection for the next call: the least busy, or a new one from
  /// `open` (opened later by the call itself, on its worker) when there is
  /// none, or every one carries a call and there are fewer than
  /// `connections`.
  connection_ptr take_connection(const std::function<connection_ptr()>& open) {
    auto least = std::min_element(connections_.begin(), connections_.end(),
                                  [](auto& a, auto& b) { return a.calls < b.calls; });
    if (least == connections_.end()
        || (least->calls > 0 && connections_.size() < limits_.connections)) {
      connections_.push_back({open(), 0});
      least = std::prev(connections_.end());
    }
    ++least->calls;
    return least->conn;
  }

  // -- in flight ----------------------------------------------------------------

  void start(uint64_t id, Promise rp, Worker w, connection_ptr c, bool create = false) {
    creates_ += create ? 1 : 0;
    in_flight_.emplace(id, running{std::move(rp), std::move(w), std::move(c), create});
  }

  /// The call ended (answered, failed or past its budget): its promise,
  /// worker and connection, the connection's count given back. None if the
  /// link had already given it up (it died while the call ran).
  std::optional<running> finish(uint64_t id) {
    auto i = in_flight_.find(id);
    if (i == in_flight_.end())
      return std::nullopt;
    auto r = std::move(i->second);
    in_flight_.erase(i);
    creates_ -= r.create ? 1 : 0;
    for (auto& c : connections_)
      if (c.conn == r.conn && c.calls > 0)
        --c.calls;
    return r;
  }

  void note_overrun() noexcept { ++overruns_; }

  /// The link died: every waiting and running call, and every connection,
  /// handed over at once; the pool keeps only its workers and counts.
  released release_all() {
    released out;
    for (auto& [id, r] : in_flight_) {
      out.callers.push_back(std::move(r.rp));
      out.workers.push_back(std::move(r.worker));
    }
    in_flight_.clear();
    creates_ = 0;
    for (auto& w : queued_)
      out.callers.push_back(std::move(w.rp));
    queued_.clear();
    for (auto& c : connections_)
      out.connections.push_back(std::move(c.conn));
    connections_.clear();
    return out;
  }

  // -- the abandoned cap --------------------------------------------------------

  uint32_t abandoned_cap() const noexcept {
    return limits_.abandoned_cap > 0 ? limits_.abandoned_cap : 2 * limits_.max_calls;
  }

  /// Whether `abandoned` calls still running keep the link from redialing:
  /// each redial could abandon more.
  bool over_abandoned_cap(size_t abandoned) const noexcept { return abandoned >= abandoned_cap(); }

  // -- counts -------------------------------------------------------------------

  uint32_t in_flight() const noexcept { return static_cast<uint32_t>(in_flight_.size()); }
  uint32_t creates() const noexcept { return creates_; }
  uint32_t queued() const noexcept { return static_cast<uint32_t>(queued_.size()); }
  uint32_t connections() const noexcept { return static_cast<uint32_t>(connections_.size()); }
  uint64_t overruns() const noexcept { return overruns_; }

  /// How many calls run on each connection, in the order they were added.
  std::vector<uint32_t> connection_load() const {
    std::vector<uint32_t> out;
    for (auto& c : connections_)
      out.push_back(c.calls);
    return out;
  }

private:
  struct connection_slot {
    connection_ptr conn;
    uint32_t calls = 0;
  };

  limits limits_;
  uint64_t next_id_ = 0;
  std::deque<waiting> queued_;
  std::map<uint64_t, running> in_flight_;
  uint32_t creates_ = 0;
  std::vector<connection_slot> connections_;
  struct idle_slot {
    Worker worker;
    uint64_t since = 0; // the sweeps done when it was returned
  };
  std::vector<idle_slot> idle_;
  uint64_t sweeps_ = 0;
  std::shared_ptr<std::vector<Worker>> all_ = std::make_shared<std::vector<Worker>>();
  uint64_t workers_started_ = 0;
  uint64_t overruns_ = 0;
};

using call_pool = basic_call_pool<call_worker_actor, caf::typed_response_promise<call_result>>;

} // namespace egress
