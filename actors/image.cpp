#include "actors/image.hpp"

#include <algorithm>
#include <any>
#include <random>

#include "actors/call.hpp"
#include "actors/parts/transport_choice.hpp"
#include "base/log.hpp"
#include "messages/error.hpp"

namespace egress {

namespace {

using clock = std::chrono::steady_clock;
using image_pointer = image_actor::stateful_pointer<image_actor_state>;

// The download's own deadline sits one minute inside the transfer budget,
// so a slow mirror ends through the reader with its own error (and the
// fill closes and cleans up) before the budget has to kill anything. Short
// budgets (tests) keep a quarter of their length instead.
std::chrono::milliseconds download_deadline(caf::timespan budget) {
  auto b = std::chrono::duration_cast<std::chrono::milliseconds>(budget);
  if (b > std::chrono::minutes(2))
    return b - std::chrono::minutes(1);
  return b * 3 / 4;
}

caf::timespan retry_delay(image_actor_state& st) {
  // Exponential with equal jitter, as the host links redial.
  auto base = st.opts.retry_min;
  for (uint32_t i = 1; i < st.failures_in_a_row && base < st.opts.retry_max; ++i)
    base *= 2;
  base = std::min(base, st.opts.retry_max);
  static thread_local std::minstd_rand rng{std::random_device{}()};
  auto half = base / 2;
  std::uniform_int_distribution<int64_t> d{0, half.count()};
  return half + caf::timespan{d(rng)};
}

image_status snapshot(image_actor_state& st) {
  auto s = st.status;
  if (s.state == image_state::failed)
    s.retry_in_ms = std::max<int64_t>(
      0, std::chrono::duration_cast<std::chrono::milliseconds>(st.retry_at - clock::now())
           .count());
  return s;
}

// Pushes the status to the sink (the fleet's view, the shell's progress bars).
void push(image_pointer self) {
  if (self->state.opts.sink)
    self->send(self->state.opts.sink, snapshot(self->state));
}

void publish_progress(image_pointer self) {
  auto& st = self->state;
  if (!st.progress)
    return;
  auto now = clock::now();
  auto bytes = st.progress->bytes.load();
  st.status.bytes = bytes;
  st.status.total = st.progress->total.load();
  st.status.resumed_from = st.progress->resumed_from.load();
  st.status.moved_total = st.moved_before + st.progress->moved.load();
  auto dt = std::chrono::duration<double>(now - st.tick_at).count();
  if (dt > 0 && bytes >= st.tick_bytes) {
    st.status.rate_bps = static_cast<uint64_t>(static_cast<double>(bytes - st.tick_bytes) / dt);
    st.status.eta_s = st.status.rate_bps > 0 && st.status.total > bytes
                        ? (st.status.total - bytes) / st.status.rate_bps
                        : 0;
  }
  st.tick_bytes = bytes;
  st.tick_at = now;
  // Logs at a sane interval: every 10 s of a transfer, not every tick.
  if (st.progress->transferring && now - st.logged_at >= std::chrono::seconds(10)) {
    st.logged_at = now;
    log::info(to_string(actor_kind::image), st.name + ": " + std::to_string(bytes >> 20) + " of "
                         + std::to_string(st.status.total >> 20) + " MiB, "
                         + std::to_string(st.status.rate_bps >> 20) + " MiB/s, ETA "
                         + std::to_string(st.status.eta_s) + " s");
  }
}

void fail_waiters(image_pointer self, const caf::error& err) {
  for (auto& w : self->state.waiters)
    w.deliver(err);
  self->state.waiters.clear();
  self->state.status.waiters = 0;
}

void record_failure(image_pointer self, const caf::error& err) {
  auto& st = self->state;
  st.last_error = err;
  st.status.state = image_state::failed;
  st.status.last_error = render(err);
  st.status.last_error_kind = to_string(kind_of(err));
  ++st.failures_in_a_row;
  // A permanent failure (a digest mismatch, a 404, a full pool) is not
  // retried in a loop, but not given up for good either: a daemon runs for
  // years, and the mirror or the pool gets fixed. It waits retry_max.
  st.retry_at = clock::now()
                + (kind_of(err) == error_kind::transient ? retry_delay(st) : st.opts.retry_max);
  log::warn(to_string(actor_kind::image), st.name + ": " + st.status.last_error);
}

void abandon(image_pointer self, ec code, const std::string& why) {
  auto& st = self->state;
  if (!st.running || st.abandoned)
    return;
  st.abandoned = true;
  st.calls.abandon_all(why); // the fill is its only call
  // Lock-free: whatever the fill is blocked in (libvirt, libcurl) returns.
  st.live->now();
  auto err = make_error(code, st.name + ": " + why);
  record_failure(self, err);
  fail_waiters(self, err);
  push(self);
}

void finished(image_pointer self, caf::expected<images::fill_result> r) {
  auto& st = self->state;
  st.running = false;
  publish_progress(self);
  st.moved_before = st.status.moved_total;
  st.progress.reset();
  st.transfer.reset();
  st.cleanup.reset();
  st.more_transfers.clear();
  *st.live = {};
  st.status.rate_bps = 0;
  st.status.eta_s = 0;
  if (r) {
    // Also after an abandon: a fill that completed before the kill reached
    // it has verified and marked its image; the next ensure uses it.
    st.ready = image_ready{st.opts.image.name, st.opts.host.name, r->volume, r->path,
                           r->length, r->virtual_size};
    st.status.state = image_state::ready;
    st.status.volume = r->volume;
    st.status.bytes = r->length;
    st.status.total = r->length;
    st.status.last_error.clear();
    st.status.last_error_kind.clear();
    st.failures_in_a_row = 0;
    if (r->transferred)
      ++st.status.transfers;
    log::info(to_string(actor_kind::image), st.name + ": ready as " + r->volume
                         + (r->transferred ? " (transferred" : " (found verified")
                         + (r->resumed_from > 0
                              ? ", resumed at " + std::to_string(r->resumed_from)
                              : std::string{})
                         + (r->holes > 0
                              ? ", " + std::to_string(r->holes) + " bytes of zeros as holes"
                              : std::string{})
                         + ")");
    for (auto& w : st.waiters)
      w.deliver(st.ready);
    st.waiters.clear();
    st.status.waiters = 0;
    push(self);
    return;
  }
  if (st.abandoned) {
    push(self); // failure recorded and waiters told when it was abandoned
    return;
  }
  record_failure(self, r.error());
  fail_waiters(self, r.error());
  push(self);
}

void start_fill(image_pointer self) {
  auto& st = self->state;
  st.running = true;
  st.abandoned = false;
  st.started_at = clock::now();
  st.tick_at = st.started_at;
  st.logged_at = st.started_at;
  st.tick_bytes = 0;
  st.status.state = image_state::fetching;
  ++st.status.fills;
  st.progress = std::make_shared<images::fill_progress>();
  auto make = st.opts.make_transport ? st.opts.make_transport
                                     : transport_for(st.opts.host);
  st.transfer = make();
  st.cleanup = make();
  st.more_transfers.clear();
  for (uint32_t i = 1; i < st.opts.host.upload_streams; ++i)
    st.more_transfers.push_back(make());
  *st.live = {st.transfer, st.cleanup, st.more_transfers, st.progress->cancel};
  images::fill_request req;
  req.entry = st.opts.entry;
  req.pool = st.opts.host.pool;
  req.image = st.opts.image;
  req.download_deadline = download_deadline(st.opts.transfer_budget);
  req.low_speed_limit = st.opts.low_speed_limit;
  req.low_speed_time = st.opts.low_speed_time;
  req.keepalive = lv::keepalive{
    static_cast<int>(std::chrono::duration_cast<std::chrono::seconds>(
                       st.opts.host.keepalive_interval)
                       .count()),
    st.opts.host.keepalive_count};
  req.transfer = st.transfer;
  req.cleanup = st.cleanup;
  req.more_transfers = st.more_transfers;
  req.stage = st.opts.stage;
  auto progress = st.progress;
  auto h = st.calls.spawn(self, st.opts.host.name,
                      blocking_work{"fill " + st.name, [req, progress]()
                                                         -> caf::expected<std::any> {
                                      auto r = images::fill(req, *progress);
                                      if (!r)
                                        return std::move(r.error());
                                      return std::any{std::move(*r)};
                                    }});
  // No timeout here: the budget is enforced by the tick (abandon), and the
  // answer is awaited even after that, because a new fill must not start
  // before this one has ended.
  self->request(h, caf::infinite, atom::run_v)
    .then(
      [self](call_result& res) {
        finished(self, std::any_cast<images::fill_result>(std::move(res.value)));
      },
      [self](caf::error& err) { finished(self, std::move(err)); });
  self->delayed_send(self, st.opts.tick, atom::poll_v);
  push(self);
}

} // namespace

image_actor::behavior_type make_image(image_actor::stateful_pointer<image_actor_state> self,
                                      image_options opts) {
  auto& st = self->state;
  st.name = actor_name(actor_kind::image, opts.image.name + "@" + opts.host.name);
  st.status.image = opts.image.name;
  st.status.host = opts.host.name;
  st.opts = std::move(opts);
  st.calls.set_owner(st.name);
  self->set_down_handler([self](const caf::down_msg& msg) { self->state.calls.ended(msg); });
  // On exit (engine shutdown) a running fill is freed at once: its
  // transports are killed, so the detached call ends and shutdown is not
  // held up by a 20-minute upload (docs/spec.md 15).
  // (The state is gone when attached functors run: they share the slots.)
  self->attach_functor([live = st.live](const caf::error&) { live->now(); });
  // Waiters hold promises: without an answer they would wait out their own
  // timeouts (and hold up the actor system's shutdown that long).
  self->set_exit_handler([self](caf::exit_msg& msg) {
    auto& st = self->state;
    st.live->now();
    fail_waiters(self, make_error(ec::shutting_down, st.name + ": the image cache is stopping"));
    self->quit(msg.reason);
  });
  push(self); // listed in status before anyone asks for it
  return {
    [self](atom::ensure) -> caf::result<image_ready> {
      auto& st = self->state;
      switch (st.status.state) {
        case image_state::ready:
          return st.ready;
        case image_state::failed:
          if (st.running || clock::now() < st.retry_at) {
            auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
              st.retry_at - clock::now());
            return make_error(static_cast<ec>(st.last_error.code()),
                              detail(st.last_error)
                                + (st.running ? " (the abandoned fill is still ending)"
                                              : " (retry in "
                                                  + std::to_string(std::max<int64_t>(
                                                    0, left.count()))
                                                  + " ms)"));
          }
          break;
        default:
          break;
      }
      if (!st.running && st.opts.fence && !st.opts.fence->open()) {
        st.opts.fence->refused();
        return make_error(ec::fenced, st.name + ": no fill while this node may not change "
                                                "the host");
      }
      auto rp = self->make_response_promise<image_ready>();
      st.waiters.push_back(rp);
      st.status.waiters = static_cast<uint32_t>(st.waiters.size());
      if (!st.running)
        start_fill(self);
      else
        push(self);
      return rp;
    },
    [self](atom::forget, std::string& volume) {
      auto& st = self->state;
      if (st.status.state != image_state::ready || st.ready.volume != volume)
        return; // already being checked or fetched again
      log::warn(to_string(actor_kind::image), st.name + ": " + volume
                           + " is gone from the pool; checked and fetched again on the next"
                             " ensure");
      st.status.state = image_state::absent;
      st.status.volume.clear();
      st.status.bytes = 0;
      push(self);
    },
    [self](atom::status) -> image_status { return snapshot(self->state); },
    [self](atom::ls) { return self->state.calls.rows(); },
    [self](atom::kill, std::string& why) -> image_status {
      abandon(self, ec::link_down, "transfer abandoned: " + why);
      return self->state.status;
    },
    [self](atom::poll) {
      auto& st = self->state;
      if (!st.running)
        return;
      publish_progress(self);
      push(self);
      // The budget is the upload's: the wait for the node's copy is bounded
      // by that fetch's own deadline (providers/images/stage.hpp).
      if (st.progress && st.progress->staging)
        st.started_at = clock::now();
      if (!st.abandoned && st.opts.fence && !st.opts.fence->open())
        abandon(self, ec::fenced, "transfer abandoned: this node may not change the host now");
      if (!st.abandoned && clock::now() - st.started_at > st.opts.transfer_budget)
        abandon(self, ec::budget_exceeded,
                "transfer budget of "
                  + std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                     st.opts.transfer_budget)
                                     .count())
                  + " ms exceeded");
      self->delayed_send(self, st.opts.tick, atom::poll_v);
    },
  };
}

image_actor spawn_image(caf::actor_system& sys, image_options opts) {
  return sys.spawn(make_image, std::move(opts));
}

} // namespace egress
