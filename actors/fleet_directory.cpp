// The fleet's directory for the inspector: every actor it runs, with the
// state its last status push said and the lines `caf-shell show` prints.
// Built from the fleet's own maps on request, so it cannot drift from what
// the fleet supervises: an actor is listed exactly while the fleet holds it.
#include "actors/fleet.hpp"

#include <charconv>
#include <optional>
#include <string_view>

namespace egress {

namespace {

// One "key: value" line in one allocation at most (none when it fits the
// string's own buffer): a listing of 100,000 proxies builds a million of
// them, and malloc and free were most of the directory's time
// (docs/notes/scale.md#ls-proxies).
std::string kv(std::string_view key, std::string_view value) {
  std::string out;
  out.reserve(key.size() + 2 + value.size());
  out.append(key).append(": ").append(value);
  return out;
}

std::string kv(std::string_view key, uint64_t value) {
  char digits[24];
  auto end = std::to_chars(digits, digits + sizeof digits, value).ptr;
  return kv(key, std::string_view{digits, static_cast<size_t>(end - digits)});
}

template <class Handle>
directory_row entry(const fleet_state& st, actor_kind kind, std::string name,
                    const Handle& handle) {
  directory_row e;
  e.row.kind = kind;
  e.row.name = std::move(name);
  e.row.started_at = st.view.spawned_at(actor_name(kind, e.row.name));
  e.handle = caf::actor_cast<caf::actor>(handle);
  return e;
}

// What one `ls` asks of the directory: the rows of which kinds, of which
// names, and whether with their details.
class asked {
public:
  explicit asked(const ls_query& q) : q_(q), kind_(actor_kind_from(q.kind)) {}

  // Every kind (""), the one named, or for "call" the kinds that own calls:
  // their rows tell the inspector whom to ask. A word that names no kind
  // lists nothing.
  bool lists(actor_kind k) const {
    if (q_.kind.empty())
      return true;
    if (kind_ == actor_kind::call)
      return k == actor_kind::link || k == actor_kind::image || k == actor_kind::gateway
             || k == actor_kind::health;
    return kind_ == k;
  }

  // The name is filtered here only when the query names a kind that is
  // not "call": calls are named after their owner's calls, and with every
  // kind asked the inspector filters what comes back from everyone.
  bool lists(actor_kind k, const std::string& name) const {
    return lists(k) && (!by_name() || name == q_.name);
  }

  bool by_name() const {
    return !q_.name.empty() && !q_.kind.empty() && kind_ != actor_kind::call;
  }

  const std::string& name() const { return q_.name; }
  bool details() const { return q_.details; }

private:
  const ls_query& q_;
  std::optional<actor_kind> kind_;
};

} // namespace

namespace {

// In a cluster: the token of this node's claim on `host` (0: none).
int64_t owner_token(const fleet_state& st, const std::string& host) {
  if (!st.clustered)
    return 0;
  auto i = st.clustered->hosts.find(host);
  return i == st.clustered->hosts.end() ? 0 : i->second;
}

// A host's link, with its cordon and drain when it has one (ls hosts).
void add_links(std::vector<directory_row>& out, const fleet_state& st, const asked& q) {
  if (!q.lists(actor_kind::link))
    return;
  auto drains = drain_rows(st);
  for (auto& [host, h] : st.links) {
    if (!q.lists(actor_kind::link, host))
      continue;
    auto e = entry(st, actor_kind::link, host, h);
    e.calls = h;
    if (auto v = st.view.links().find(host); v != st.view.links().end()) {
      auto& s = v->second;
      e.row.state = to_string(s.state);
      if (!s.reason.empty())
        e.row.state += " (" + s.reason + ")";
      for (auto& d : drains)
        if (d.host == host)
          e.row.state += ", " + describe(d);
      if (auto token = owner_token(st, host); token > 0)
        e.row.state += ", owner " + st.cfg.node + " token " + std::to_string(token);
      if (q.details())
        e.row.details = {kv("calls in flight", s.in_flight), kv("queued", s.queued),
                         kv("limit", s.limit), kv("libvirt connections", s.connections),
                         kv("dials", s.dials), kv("deaths", s.deaths),
                         kv("budget overruns", s.overruns),
                         kv("abandoned calls running", s.abandoned_calls),
                         kv("domain events", s.events), kv("bulk reads", s.bulk_reads),
                         kv("lease reads", s.lease_reads),
                         kv("leases", to_string(s.leases))};
    }
    out.push_back(std::move(e));
  }
}

void add_images(std::vector<directory_row>& out, const fleet_state& st, const asked& q) {
  if (!q.lists(actor_kind::image))
    return;
  for (auto& [key, h] : st.images) {
    if (!q.lists(actor_kind::image, key))
      continue;
    auto e = entry(st, actor_kind::image, key, h);
    e.calls = h;
    if (auto v = st.view.images().find(key); v != st.view.images().end()) {
      auto& s = v->second;
      e.row.state = to_string(s.state);
      if (q.details()) {
        e.row.details = {kv("volume", s.volume), kv("bytes", s.bytes), kv("total", s.total),
                         kv("rate B/s", s.rate_bps), kv("eta s", s.eta_s),
                         kv("fills", s.fills), kv("transfers", s.transfers),
                         kv("waiters", s.waiters)};
        if (!s.last_error.empty())
          e.row.details.push_back(kv("last error", s.last_error));
      }
    }
    out.push_back(std::move(e));
  }
}

// A proxy's lines from its last status, then from its health. Pushed one
// by one: an initializer list would copy every line once more.
void add_status_lines(actor_row& row, const proxy_status& s) {
  auto& d = row.details;
  d.reserve(12);
  d.push_back(kv("host", s.host));
  d.push_back(kv("address", s.address));
  d.push_back(kv("uid", s.uid));
  d.push_back(kv("created at", s.created_at));
  d.push_back(kv("adopted", s.adopted ? "yes" : "no"));
  d.push_back(kv("polls", s.polls));
  d.push_back(kv("replaced", s.replaced));
  if (!s.last_error.empty())
    d.push_back(kv("last error", s.last_error));
}

void add_health_lines(actor_row& row, const proxy_health& s) {
  auto& d = row.details;
  d.push_back(kv("rotation", s.in_rotation ? "in" : "out"));
  if (s.drained)
    d.push_back(kv("drained", "yes"));
  auto probes = std::to_string(s.probes_ok);
  probes.append(" ok, ").append(std::to_string(s.probes_failed)).append(" failed");
  d.push_back(kv("probes", probes));
  if (!s.last_probe.empty())
    d.push_back(kv("last probe", s.last_probe));
}

// The view's entry for `name` in `m`, sorted by name like the fleet's own
// map: `at` moves forward through it as the names do, so a listing walks
// each map once instead of looking every name up (one comparison per row,
// not a search of 100,000).
template <class Map>
const typename Map::mapped_type* next_of(const Map& m, typename Map::const_iterator& at,
                                         const std::string& name) {
  while (at != m.end() && at->first < name)
    ++at;
  return at != m.end() && at->first == name ? &at->second : nullptr;
}

void add_proxies(std::vector<directory_row>& out, const fleet_state& st, const asked& q) {
  if (!q.lists(actor_kind::proxy))
    return;
  // Every proxy, or the one named (a `show` among 100,000 is one lookup).
  auto from = q.by_name() ? st.proxies.lower_bound(q.name()) : st.proxies.begin();
  auto to = q.by_name() ? st.proxies.upper_bound(q.name()) : st.proxies.end();
  if (from == to)
    return;
  auto& seen = st.view.proxies();
  auto& health = st.view.health();
  auto& spawns = st.view.spawn_times();
  auto s = seen.lower_bound(from->first);
  auto h = health.lower_bound(from->first);
  // "proxy/<name>" sorts like <name> within its kind.
  auto t = spawns.lower_bound(actor_name(actor_kind::proxy, from->first));
  for (auto i = from; i != to; ++i) {
    auto& [name, handle] = *i;
    directory_row e;
    e.row.kind = actor_kind::proxy;
    e.row.name = name;
    if (auto* at = next_of(spawns, t, actor_name(actor_kind::proxy, name)))
      e.row.started_at = *at;
    e.handle = caf::actor_cast<caf::actor>(handle);
    auto* status = next_of(seen, s, name);
    if (status)
      e.row.state = to_string(status->phase);
    if (status && q.details())
      add_status_lines(e.row, *status);
    if (auto* verdict = next_of(health, h, name); verdict && q.details())
      add_health_lines(e.row, *verdict);
    out.push_back(std::move(e));
  }
}

void add_gateway(std::vector<directory_row>& out, const fleet_state& st, const asked& q) {
  if (st.gateway && q.lists(actor_kind::gateway, st.cfg.gateway.socket)) {
    auto& g = st.view.gateway();
    auto e = entry(st, actor_kind::gateway, st.cfg.gateway.socket, st.gateway);
    e.calls = st.gateway;
    e.row.state = to_string(g.state);
    if (!g.reason.empty())
      e.row.state += " (" + g.reason + ")";
    if (!q.details()) {
      out.push_back(std::move(e));
      return;
    }
    for (auto& b : g.backends)
      e.row.details.push_back(kv("backend " + b.name + (b.tag.empty() ? "" : " (tag " + b.tag + ")"),
                                 std::to_string(b.servers) + " of " + std::to_string(b.desired)
                                   + " serving, " + std::to_string(b.draining) + " draining"));
    e.row.details.push_back(kv("rotation generation applied", g.generation));
    e.row.details.push_back(kv("syncs", g.syncs));
    e.row.details.push_back(kv("last sync", g.last_sync_at.empty()
                                               ? std::string{"never"}
                                               : g.last_sync_at + " in "
                                                   + std::to_string(g.last_sync_ms) + " ms"));
    e.row.details.push_back(kv("commands accepted", g.commands));
    e.row.details.push_back(kv("commands refused", g.refused));
    e.row.details.push_back(kv("HAProxy restarts filled again", g.resyncs));
    e.row.details.push_back(kv("drains", g.drains));
    e.row.details.push_back(kv("socket errors", std::to_string(g.errors_gone) + " gone, "
                                                  + std::to_string(g.errors_timeout) + " timeout, "
                                                  + std::to_string(g.errors_garbage) + " garbage"));
    if (g.retry_in_ms > 0)
      e.row.details.push_back(kv("retry in ms", static_cast<uint64_t>(g.retry_in_ms)));
    out.push_back(std::move(e));
  }
}

void add_health(std::vector<directory_row>& out, const fleet_state& st, const asked& q) {
  if (st.health && q.lists(actor_kind::health, "health")) {
    auto e = entry(st, actor_kind::health, "health", st.health);
    e.calls = st.health;
    size_t in = 0;
    for (auto& [_, s] : st.view.health())
      in += s.in_rotation ? 1 : 0;
    e.row.state = "rotation " + std::to_string(in) + " of " + std::to_string(st.proxies.size());
    out.push_back(std::move(e));
  }
}

// The cluster actor (ls cluster): this node's phase and lease, then one
// line per node of the store and per host (owner, token, state).
void add_cluster(std::vector<directory_row>& out, const fleet_state& st, const asked& q) {
  if (!st.cluster || !q.lists(actor_kind::cluster, st.cfg.node))
    return;
  auto e = entry(st, actor_kind::cluster, st.cfg.node, st.cluster);
  if (!st.clustered) {
    e.row.state = "joining";
    out.push_back(std::move(e));
    return;
  }
  auto& c = st.clustered->status;
  e.row.state = c.phase + (c.reason.empty() ? std::string{} : " (" + c.reason + ")");
  if (!q.details()) {
    out.push_back(std::move(e));
    return;
  }
  auto age = c.lease_age_s < 0 ? std::string{"none"}
                               : std::to_string(static_cast<int64_t>(c.lease_age_s * 1000)) + " ms";
  e.row.details = {kv("lease", std::to_string(c.lease)), kv("lease confirmed", age + " ago"),
                   kv("store revision", std::to_string(c.revision)),
                   kv("claims won", c.claims_won), kv("hosts lost", c.hosts_lost),
                   kv("fenced", c.fenced), kv("refusals", c.refusals),
                   kv("store errors", c.store_errors)};
  for (auto& n : c.nodes)
    e.row.details.push_back(kv("node " + n.name, "lease " + std::to_string(n.lease) + " (seen "
                                                   + std::to_string(static_cast<int64_t>(
                                                     n.lease_age_s))
                                                   + " s), " + std::to_string(n.hosts)
                                                   + " host(s), "
                                                   + std::to_string(n.rotation) + " in rotation"
                                                   + (n.avoid.empty() ? std::string{}
                                                      : ", avoids " + std::to_string(n.avoid.size()))));
  for (auto& h : c.hosts)
    e.row.details.push_back(kv("host " + h.host, (h.owner.empty() ? std::string{"no owner"}
                                                   : "owner " + h.owner + " token "
                                                       + std::to_string(h.token))
                                                   + ", " + h.state + ", wanted by " + h.wanted_by));
  out.push_back(std::move(e));
}

} // namespace

std::vector<directory_row> directory_of(const fleet_state& st, const ls_query& query) {
  asked q{query};
  std::vector<directory_row> out;
  auto n = [&](actor_kind k, size_t count) { return q.lists(k) ? count : 0; };
  out.reserve(n(actor_kind::link, st.links.size()) + n(actor_kind::image, st.images.size())
              + n(actor_kind::proxy, st.proxies.size()) + 4);
  add_links(out, st, q);
  add_images(out, st, q);
  add_proxies(out, st, q);
  add_gateway(out, st, q);
  add_health(out, st, q);
  add_cluster(out, st, q);
  return out;
}

void add_unplaced(std::vector<directory_row>& rows, const fleet_state& st,
                  const caf::actor& fleet, const ls_query& query) {
  asked q{query};
  // Bounded: the reasons repeat, and each row is probed (the fleet answers
  // for the members it holds no actor for).
  constexpr size_t shown = 100;
  size_t n = 0;
  for (auto& w : st.groups.waiting()) {
    if (!q.lists(actor_kind::proxy, w.member) || st.groups.host_of().contains(w.member)
        || n++ >= shown)
      continue;
    directory_row e;
    e.row.kind = actor_kind::proxy;
    e.row.name = w.member;
    e.row.state = "unplaced";
    if (q.details())
      e.row.details = {kv("why", w.reason)};
    e.handle = fleet;
    rows.push_back(std::move(e));
  }
}

} // namespace egress
