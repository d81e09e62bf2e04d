#pragma once
// What a host link knows of the proxies watching their domains (docs/spec.md
// 27 and 28): who watches which domain with which MACs, whether one waits
// for an address, the bulk read in progress, whether the host can list
// leases, and the counts. The link (actors/host_link_watch.cpp) makes the
// calls and sends the messages; this decides who gets what.
//
// A plain class with no actor system in it (tests/unit/domain_watch.cpp):
// its proxy handles are only stored and handed back.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "messages/actors.hpp"
#include "providers/libvirt/watch.hpp"

namespace egress {

class domain_watch {
public:
  // A bulk read: when it started, what it found, and the host's leases if
  // it read them.
  struct reading {
    caf::timespan taken{0};
    std::vector<domain_brief> briefs;
    lease_view leases = lease_view::not_read;
    std::vector<lv::lease> lease_list;
  };

  // What the link does after a proxy's address_watch.
  struct after_note {
    bool read_now = false;     // the first MACs on a host whose leases were never read
    bool arm_lease = false;    // the first wait: the lease timer starts
  };

  using delivery = std::pair<proxy_actor, domain_brief>;

  // -- watchers -----------------------------------------------------------------

  /// A proxy watches its domain; one of the same name (a reload replaced
  /// it) starts with nothing said.
  void watch(std::string name, proxy_actor proxy);

  /// A watching proxy ended. False if `is_it` matched none.
  template <class Predicate>
  bool forget_if(Predicate is_it) {
    return std::erase_if(watchers_, [&](auto& kv) { return is_it(kv.second.proxy); }) > 0;
  }

  bool empty() const noexcept { return watchers_.empty(); }

  /// A watching proxy names its MACs and whether it waits for an address.
  after_note note(address_watch& w);

  // -- bulk reads ---------------------------------------------------------------

  /// Whether a bulk read may start now. One runs at a time: asked while one
  /// runs, another follows it (what it reads was decided when it started).
  bool begin_read();

  /// Whether the read about to start lists the leases: only when some
  /// proxy's MACs are known, and not on a host that cannot list them.
  bool with_leases() const;

  /// The read ended: one brief per watching proxy, a missing domain's too
  /// (the proxy knows what it believes, the watch does not); each brief of
  /// a proxy with known MACs carries their leased addresses. Left out: a
  /// running domain's brief that says exactly what this dial last told the
  /// same proxy, which does not wait for an address (nothing in it it has
  /// not had; a fleet at rest is otherwise a message per proxy per read).
  std::vector<delivery> end_read(reading read);

  /// The read failed: the next one is asked for as usual.
  void failed_read() noexcept { reading_ = false; }

  /// Whether another read was asked for while the last one ran (once).
  bool take_read_again() noexcept { return std::exchange(read_again_, false); }

  // -- the lease timer ----------------------------------------------------------

  /// Whether to arm the lease timer now: not armed, a proxy waits, and the
  /// host may list leases. Arming is counted here.
  bool arm_lease();

  /// The lease timer fired: whether to read (a proxy still waits).
  bool lease_fired();

  // -- events and dials ---------------------------------------------------------

  /// An event of dial `generation` while the link's dial is `current`: the
  /// proxy it goes to, if the event is current and its domain watched.
  std::optional<proxy_actor> route(const domain_event& ev, uint64_t current, bool link_dead);

  /// A new dial: a host behind the same name may list leases differently,
  /// and whatever happened while it was down is told again to everyone.
  void dialed() noexcept;

  // -- counts -------------------------------------------------------------------

  uint64_t events() const noexcept { return events_; }
  uint64_t bulk_reads() const noexcept { return bulk_reads_; }
  uint64_t lease_reads() const noexcept { return lease_reads_; }
  /// Briefs left out as nothing new (see end_read).
  uint64_t briefs_unchanged() const noexcept { return briefs_unchanged_; }
  lease_view leases() const noexcept { return leases_; }

private:
  struct watcher {
    proxy_actor proxy;
    std::vector<std::string> macs;
    bool waiting = false; // for an address: the lease timer runs
    // The last brief this dial delivered to it (its name and time unused).
    std::optional<domain_brief> told;
  };

  bool any_macs() const;
  bool any_waiting() const;

  std::map<std::string, watcher> watchers_; // by domain name
  bool reading_ = false;
  bool read_again_ = false;
  bool lease_armed_ = false;
  lease_view leases_ = lease_view::not_read;
  uint64_t events_ = 0;
  uint64_t bulk_reads_ = 0;
  uint64_t lease_reads_ = 0;
  uint64_t briefs_unchanged_ = 0;
};

} // namespace egress
