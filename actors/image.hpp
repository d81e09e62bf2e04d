#pragma once
// The image actor: one cached image (provider entry, image) on one host.
// It dedupes waiters (the first ensure starts one fill, later ones join it),
// runs the fill (providers/images/fill.hpp) in a detached call actor over a
// dedicated connection under the transfer budget, and publishes progress.
//
// Abandoning a fill (budget overrun, kill, the actor's exit) kills the fill's
// two transports: whatever it is blocked in returns, the fill closes its
// connection and ends. A new fill starts only after the old one has ended,
// so two fills never write into one volume.
//
// A ready image is answered from memory until a proxy's create or start
// finds its volume gone from the pool and says `forget`: the next ensure
// fills again (docs/architecture.md, "An image's path from config to the
// pool").

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <caf/typed_event_based_actor.hpp>

#include "actors/parts/call_ledger.hpp"
#include "actors/parts/host_fence.hpp"
#include "messages/actors.hpp"
#include "messages/config.hpp"
#include "providers/images/fill.hpp"
#include "providers/images/stage.hpp"
#include "providers/transport.hpp"

namespace egress {

struct image_options {
  std::string entry;
  host_config host; // its pool takes the image
  images::image_source image;
  caf::timespan transfer_budget = std::chrono::minutes(30);
  caf::timespan retry_min = std::chrono::seconds(5);
  caf::timespan retry_max = std::chrono::minutes(5); // also after a permanent failure
  caf::timespan tick = std::chrono::seconds(1);
  long low_speed_limit = 1024;
  std::chrono::seconds low_speed_time{30};
  /// Builds the transports of each fill's dedicated connections; empty =
  /// transport_for(host), the same kind of path as the host's pooled link.
  transport_factory make_transport;
  /// In a cluster, the host's fence (actors/parts/host_fence.hpp): no fill
  /// starts while it is closed, and one running is abandoned at the next
  /// tick after it closed. Null: no cluster.
  host_fence_ptr fence;
  /// The node's verified copies (providers/images/stage.hpp): the fill
  /// uploads from the node's copy instead of downloading. Null: none.
  images::image_stage_ptr stage;
  status_sink_actor sink; // receives image_status on every change (optional)
};

struct image_actor_state {
  std::string name = to_string(actor_kind::image);
  image_options opts;
  image_status status;
  std::vector<caf::typed_response_promise<image_ready>> waiters;
  image_ready ready;
  caf::error last_error;
  // The fill in flight (if any).
  bool running = false;
  bool abandoned = false;
  std::chrono::steady_clock::time_point started_at;
  std::chrono::steady_clock::time_point retry_at;
  std::shared_ptr<images::fill_progress> progress;
  transport_ptr transfer;
  transport_ptr cleanup;
  std::vector<transport_ptr> more_transfers; // the host's upload-streams - 1
  // What gives a running fill up, for the exit hook too (it runs after the
  // state is gone): its two transports and its download's cancel flag.
  struct giving_up {
    transport_ptr transfer;
    transport_ptr cleanup;
    std::vector<transport_ptr> more_transfers;
    std::shared_ptr<std::atomic<bool>> cancel;
    void now() const noexcept {
      if (cancel)
        *cancel = true;
      if (transfer)
        transfer->kill();
      for (auto& t : more_transfers)
        t->kill();
      if (cleanup)
        cleanup->kill();
    }
  };
  std::shared_ptr<giving_up> live = std::make_shared<giving_up>();
  uint32_t failures_in_a_row = 0;
  uint64_t moved_before = 0; // bytes moved by the fills that ended
  // The fill's detached call, for `caf-shell ls calls`.
  call_ledger calls;
  uint64_t tick_bytes = 0;
  std::chrono::steady_clock::time_point tick_at;
  std::chrono::steady_clock::time_point logged_at;
};

image_actor::behavior_type make_image(image_actor::stateful_pointer<image_actor_state> self,
                                      image_options opts);

image_actor spawn_image(caf::actor_system& sys, image_options opts);

} // namespace egress
