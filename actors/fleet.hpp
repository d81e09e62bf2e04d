#pragma once
// The engine's root actor: turns the validated config into one host link per
// host, one proxy per declared proxy, the cached images they need and
// one health actor; keeps the status view they push; applies a reloaded
// config as a difference; runs garbage collection by mark; and runs the
// shutdown order (kill links first, then let everything exit).

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>

#include <caf/typed_event_based_actor.hpp>

#include "actors/parts/fleet_view.hpp"
#include "actors/parts/group_book.hpp"
#include "actors/parts/host_fence.hpp"
#include "messages/actors.hpp"
#include "messages/config.hpp"
#include "providers/images/stage.hpp"
#include "providers/probe/probe.hpp"
#include "providers/transport.hpp"

namespace egress {

struct fleet_hooks {
  /// Chooses the transport for a host; default: transport_for (by config).
  std::function<transport_factory(const host_config&)> make_transport;
  /// Builds the prober for a host's proxies; default: prober_for (by config).
  std::function<probe::prober_ptr(const host_config&)> make_prober;
  /// Reads the configuration again, exactly as at start, for an operator's
  /// `caf-shell reload` (caf-run re-reads its file). Runs on a detached
  /// thread. Empty: the embedding application owns its config, and a reload
  /// from the shell is refused with that reason.
  std::function<caf::expected<engine_config>()> reread_config;
  /// The node's verified copies of the images, which every host's fill
  /// uploads from (engine::start opens engine.stage-dir). Null: each fill
  /// downloads from the image's url.
  images::image_stage_ptr stage;
};

/// The host configs the health actor builds its probers from. Shared with
/// the health actor (which runs elsewhere) and updated by reloads, hence the
/// lock; it is taken only to copy one entry.
struct host_book {
  std::mutex mtx;
  std::map<std::string, host_config> hosts;
};

/// A member leaving a drained host, make-before-break: its replacement on
/// another host is made and probed under the key member@host, then takes
/// the member's name; only then does the original drain and go
/// (actors/fleet_drain.cpp).
struct handover {
  std::string from, to;
  proxy_actor replacement;
  host_link_actor link; // the link of `to` it was made through
  std::chrono::steady_clock::time_point started;
  proxy_status last; // the replacement's last push
  proxy_actor original; // set once the replacement took the name
};

struct fleet_state {
  std::string name = to_string(actor_kind::fleet);
  engine_config declared; // as the operator wrote it
  engine_config cfg;      // as it runs: `declared` with each placed group member a proxy
  std::unordered_map<std::string, size_t> spec_at; // cfg.proxies by name (index_specs)
  fleet_hooks hooks;
  std::map<std::string, host_link_actor> links;
  std::map<std::string, proxy_actor> proxies;
  std::map<std::string, image_actor> images; // by "<image>@<host>"
  health_actor health;
  std::shared_ptr<host_book> book;
  // Rotation subscribers, kept to subscribe a new health actor after a
  // reload that changed the probe settings.
  std::vector<rotation_events_actor> subscribers;
  std::vector<engine_events_actor> watchers; // caf-shell watch, monitored
  std::vector<rotation_follower_actor> followers; // the rotation's (monitored)
  gateway_actor gateway; // with engine.gateway; also a follower
  uint64_t published = 0;     // the rotation generation last sent to followers
  bool publish_armed = false; // a publication is due within the publish delay
  caf::timespan publish_cost{0}; // what the last publication took (fleet.cpp)
  // Proxies the fleet is about to delete or replace, drained in the gateway
  // first: name -> the drain's number (a later drain of the name wins).
  std::map<std::string, uint64_t> retiring;
  uint64_t drains = 0;
  fleet_view view; // the pushes, the metrics' counters, the events
  bool gc_done = false; // the first pass after start succeeded everywhere
  std::set<std::string> gc_owed; // hosts whose last collection failed
  group_book groups;               // where group members run (fleet_groups.cpp)
  std::set<std::string> surveying; // hosts whose survey is in flight
  std::set<std::string> survey_owed; // hosts to survey (again) once their link is up
  std::set<std::string> removing;  // hosts whose stale copies are being removed
  std::map<std::string, handover> handovers; // by member (fleet_drain.cpp)
  std::map<std::string, host_drain> host_drains; // by host: the cordoned ones
  std::set<caf::actor_addr> silenced;        // see from_silenced
  // -- engine.cluster (fleet_cluster.cpp) --
  cluster_actor cluster;       // null without engine.cluster
  fence_board_ptr fences;      // every host's fence, shared with the links
  cluster_snapshot clustered;  // the cluster's last view
  uint64_t merged_generation = 0;          // of the rotation followers get
  std::vector<rotation_member> merged_last; // what they got last
  bool stopping = false;
};

using fleet_pointer = fleet_actor::stateful_pointer<fleet_state>;

/// Indexes st.cfg.proxies by name; after every change of st.cfg.
void index_specs(fleet_state& st);

/// The proxy of the config as it runs, by name (nullptr if none).
const proxy_spec* spec_of(const fleet_state& st, const std::string& name);

fleet_actor::behavior_type make_fleet(fleet_pointer self, engine_config cfg,
                                      fleet_hooks hooks);

/// The fleet's actors the query names with their state, for the inspector
/// (fleet_directory.cpp).
std::vector<directory_row> directory_of(const fleet_state& st, const ls_query& query);

/// A row for each group member no host can take now (the first 100) that
/// the query names, state "unplaced" and why, answered for by the fleet
/// itself (`fleet`).
void add_unplaced(std::vector<directory_row>& rows, const fleet_state& st,
                  const caf::actor& fleet, const ls_query& query);

/// How long a proxy waits for its link's answer: a dial, a wait in the queue
/// behind one full budget, the call's own budget, and a second of slack.
caf::timespan caller_timeout(const host_config& host);

// -- proxy groups (fleet_groups.cpp) ---------------------------------------------

/// A member as a proxy on `h`: the group's member keys, its name and host,
/// and the host's network where the group names none.
proxy_spec member_spec(const group_config& g, const std::string& name, const host_config& h);

/// `declared` with each member the book placed as a proxy on its host.
engine_config with_members(const engine_config& declared, const group_book& book);

/// Reads the marked domains and free memory of a host whose link came up,
/// for the next placement tick (regroup). One at a time per host: a host that owes a
/// survey meanwhile (its link went down and up again) is surveyed again
/// at the next tick, as is one whose survey failed.
void survey_host(fleet_pointer self, const std::string& host);

/// Surveys every host that owes one and whose link is up.
void survey_owed(fleet_pointer self);

/// Removes the copies of members that run on other hosts now from the
/// hosts that are up.
void remove_stale(fleet_pointer self);

/// Places group members if anything changed (fleet.cpp): the book decides,
/// the fleet converges on the result as after a reload.
void regroup(fleet_pointer self);

/// Spawns (and monitors) a proxy actor for `p`, registered nowhere
/// (fleet.cpp): a member's replacement runs beside its original.
proxy_actor start_proxy(fleet_pointer self, const proxy_spec& p);

/// Sends a proxy's status to the health actor under `key` (its name, or a
/// replacement's member@host), its address made the endpoint to probe.
void probe_as(fleet_pointer self, const proxy_status& s, const std::string& key);

/// Records a push in the view and tells the watchers (fleet.cpp).
void record_status(fleet_pointer self, proxy_status s);

// -- drain-host (fleet_drain.cpp) -------------------------------------------------

/// drain-host (on) or undrain-host: the host's drain as it stands after.
caf::result<host_drain> cordon_host(fleet_pointer self, const std::string& host, bool on);

/// Gives up the replacements that cannot pass (their host lost, removed or
/// relinked by a reload, or past handover_bound), then starts the ones the
/// drains may have now (max-surge per group). Run at every placement tick.
void advance_drains(fleet_pointer self);

/// A replacement actor that ended before it took its member's name: its
/// handover is given up (tried again by the next advance_drains). False if
/// `who` was none.
bool replacement_down(fleet_pointer self, const caf::actor_addr& who);

/// A replacement's push or verdict: true when it was one (taken here).
bool take_replacement_status(fleet_pointer self, const proxy_status& s);
bool take_replacement_health(fleet_pointer self, const proxy_health& h);

/// Whether the current message comes from an actor whose pushes no longer
/// count: an original whose replacement took its name, or a replacement
/// given up.
bool from_silenced(fleet_pointer self);

/// The original of a handed-over member goes now (its drain grace is over).
void erase_original(fleet_pointer self, const std::string& member);

/// Gives up the handovers of these members (their config changed): the
/// replacements that have not taken the name are deleted.
void cancel_handovers(fleet_pointer self, const std::vector<std::string>& members);

/// Every drain as status and ls show it.
std::vector<host_drain> drain_rows(const fleet_state& st);

// -- engine.cluster (fleet_cluster.cpp) --------------------------------------------

/// `full` with only the hosts of `owned`, each with its fencing token, and
/// the proxies of those hosts.
engine_config owned_only(const engine_config& full, const std::map<std::string, int64_t>& owned);

/// The config as it runs: the declared one with group members placed, and
/// in a cluster only the hosts this node may change now.
engine_config running_config(const fleet_state& st);

/// With engine.cluster: the fences and the cluster actor. The fleet then
/// runs no host until the cluster says which are this node's.
void start_cluster(fleet_pointer self);

/// The cluster's view changed: hosts that are not this node's any more are
/// dropped at once (their actors end, their VMs stay: the new owner adopts
/// them), hosts it won start (created or adopted by mark), and the
/// followers get the other nodes' rotation. A node that is fenced keeps its
/// hosts (their fences refuse every call).
void take_cluster_view(fleet_pointer self, cluster_snapshot v);

/// The cluster actor ended while the engine runs (a bug: it throws nowhere
/// on purpose): its fences expire on their own; every host is dropped and a
/// new one starts, with a new lease.
void cluster_ended(fleet_pointer self, const caf::error& reason);

/// What the rotation's followers get: this node's rotation, and in a
/// cluster every other node's share added.
rotation_snapshot followed_rotation(fleet_state& st);

/// Ends a host's link, proxies and images at once, without a drain or a
/// collection: the host is not this node's to change (fleet.cpp).
void drop_host(fleet_pointer self, const std::string& host, const std::string& why);

/// Runs `next` as the difference from the current config (fleet.cpp).
void converge_to(fleet_pointer self, engine_config next);

/// What a reload changes, by name: computed before anything is touched.
struct config_diff {
  std::vector<std::string> hosts_added, hosts_removed, hosts_changed;
  std::vector<std::string> images_changed; // changed or removed
  std::vector<std::string> proxies_added, proxies_removed, proxies_changed;
  bool engine_changed = false; // poll interval, grace, redial: every actor anew
  bool probe_changed = false;  // a new health actor
  bool gateway_changed = false; // a new gateway actor (or none)

  /// "+1 -0 ~2 proxies; hosts: ~hv2" (what the log and status show).
  std::string summary() const;
};

/// The difference between two validated configs. A proxy counts as changed
/// when its spec, its host's settings or its image changed.
config_diff diff(const engine_config& from, const engine_config& to);

} // namespace egress
