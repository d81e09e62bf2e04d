// The cluster actor's lease side: the phase machine, the keepalive, the
// fences and what the fleet is told. The store's side (claims, the watch,
// the publications) is actors/cluster_store.cpp.
#include "actors/cluster.hpp"

#include "actors/call_worker.hpp"
#include "base/log.hpp"
#include "base/time_text.hpp"
#include "messages/error.hpp"

namespace egress {

const char* to_string(cluster_phase x) {
  switch (x) {
    case cluster_phase::joining: return "joining";
    case cluster_phase::member: return "member";
    case cluster_phase::fenced: return "fenced";
    case cluster_phase::stopping: return "stopping";
  }
  return "unknown";
}

namespace {

using clock = std::chrono::steady_clock;

std::chrono::milliseconds ttl(const cluster_state& st) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(st.opts.cfg.lease_ttl);
}

// A keepalive every third of the TTL; the node stops changing its hosts
// once its last confirmed keepalive is older than two thirds: one lost
// keepalive is tolerated, two are not, and the store expires the lease a
// third of the TTL later at the earliest (it counts from when it received
// the keepalive, which is after it was sent).
std::chrono::milliseconds keepalive_interval(const cluster_state& st) {
  return ttl(st) / 3;
}

clock::time_point deadline(const cluster_state& st) {
  return st.confirmed + ttl(st) - ttl(st) / 3;
}

bool confirmed_young(const cluster_state& st, clock::time_point now) {
  return st.lease != 0 && now < deadline(st);
}

// The hosts the fleet runs: those the book says are this node's and past
// their guard, but for one whose domains carry a newer token than its claim
// (the store and the hosts disagree: an operator must look). Fenced with its
// lease alive, the node keeps them: their fences are closed (every call is
// refused), but their proxies are still probed and served, and nothing
// churns when the store answers again. Without a lease it has none.
std::map<std::string, int64_t> hosts_to_run(const cluster_state& st, clock::time_point now) {
  if (st.phase != cluster_phase::member && st.phase != cluster_phase::fenced)
    return {};
  auto out = st.book.usable(now);
  std::erase_if(out, [&](auto& h) {
    auto s = st.superseded.find(h.first);
    return s != st.superseded.end() && s->second > h.second;
  });
  return out;
}

std::shared_ptr<cluster_view> build_view(cluster_pointer self, clock::time_point now) {
  auto& st = self->state;
  auto v = std::make_shared<cluster_view>();
  v->member = st.phase == cluster_phase::member;
  v->hosts = hosts_to_run(st, now);
  v->others = st.others;
  auto& s = v->status;
  s = st.counters;
  s.enabled = true;
  s.phase = to_string(st.phase);
  s.reason = st.phase == cluster_phase::member ? std::string{} : st.reason;
  s.lease = st.lease;
  if (st.confirmed != clock::time_point{})
    s.lease_age_s = std::chrono::duration<double>(now - st.confirmed).count();
  s.revision = st.revision;
  s.nodes = st.book.nodes(now);
  for (auto& n : s.nodes) {
    if (auto r = st.others.find(n.name); r != st.others.end())
      n.rotation = static_cast<uint32_t>(r->second.size());
    if (n.name == st.opts.node)
      n.rotation = static_cast<uint32_t>(st.own_rotation.size());
  }
  s.hosts = st.book.hosts(now);
  for (auto& h : s.hosts)
    if (auto x = st.superseded.find(h.host); x != st.superseded.end() && x->second > h.token)
      h.state += ", superseded: a domain carries token " + std::to_string(x->second);
  s.refusals += st.opts.fences->refusals();
  return v;
}

// The one place the phase changes. Leaving member closes every fence at
// once (the hosts' calls are refused from then on); a lost lease forgets
// every claim (the store deleted them with the lease), and the fleet drops
// the hosts.
void transition(cluster_pointer self, cluster_phase next, std::string reason) {
  auto& st = self->state;
  if (st.phase == next && st.reason == reason)
    return;
  auto was = st.phase;
  st.phase = next;
  st.reason = std::move(reason);
  if (was == cluster_phase::member && next != cluster_phase::member)
    ++st.counters.fenced;
  if (next == cluster_phase::joining) {
    st.lease = 0;
    st.book.set_lease(0);
  }
  auto text = std::string{to_string(was)} + " -> " + to_string(next)
              + (st.reason.empty() ? std::string{} : ": " + st.reason);
  if (next == cluster_phase::member)
    log::info(st.name, text);
  else
    log::warn(st.name, text);
  push_view(self, true);
}

void grant(cluster_pointer self);

// A grant or keepalive answered: the next may go; false once stopping.
bool lease_answered(cluster_pointer self) {
  self->state.lease_busy = false;
  return self->state.phase != cluster_phase::stopping;
}

// The store answered a keepalive sent at `sent`.
void on_keepalive(cluster_pointer self, clock::time_point sent, caf::expected<int64_t> r) {
  auto& st = self->state;
  if (!lease_answered(self))
    return;
  if (!r) {
    ++st.counters.store_errors;
    log::warn(st.name, "keepalive failed: " + render(r.error()));
    return;
  }
  if (*r <= 0) {
    transition(self, cluster_phase::joining, "the lease expired in the store");
    grant(self);
    return;
  }
  if (sent > st.confirmed)
    st.confirmed = sent;
  // The phase leaves member at the fences' deadline, not up to a tick after.
  self->delayed_send(self, deadline(st) - clock::now() + std::chrono::milliseconds(1),
                     atom::lease_v);
  if (st.phase == cluster_phase::fenced && confirmed_young(st, clock::now())) {
    // Still ours: nobody could have claimed a key on it meanwhile. (Not on
    // an answer so late that its confirmation is stale already.)
    transition(self, cluster_phase::member, {});
    read_and_watch(self);
  } else {
    push_view(self, true); // the fences' new deadline
  }
}

void keepalive(cluster_pointer self) {
  auto& st = self->state;
  st.lease_busy = true;
  auto sent = clock::now();
  auto id = st.lease;
  ask_store(self, store_lane::lease, "keepalive",
            [store = st.store, id] { return store->keepalive(id); },
            [self, sent](caf::expected<int64_t> r) { on_keepalive(self, sent, std::move(r)); });
}

void on_granted(cluster_pointer self, clock::time_point sent, caf::expected<etcd::lease> r) {
  auto& st = self->state;
  if (!lease_answered(self))
    return;
  if (!r) {
    ++st.counters.store_errors;
    st.reason = "no lease: " + render(r.error());
    log::warn(st.name, st.reason);
    push_view(self, true);
    return; // the next tick grants again
  }
  st.lease = r->id;
  st.confirmed = sent;
  st.book.set_lease(st.lease);
  st.avoid_published.clear();
  st.own_published.clear();
  log::info(st.name, "lease " + std::to_string(st.lease) + " granted ("
                       + duration_text(st.opts.cfg.lease_ttl) + ")");
  publish_node(self);
  transition(self, cluster_phase::member, {});
  read_and_watch(self);
  publish_rotation(self);
}

void grant(cluster_pointer self) {
  auto& st = self->state;
  st.lease_busy = true;
  auto sent = clock::now();
  // Whole seconds, rounded up: the store never expires the lease before
  // the configured TTL the fences count with.
  auto seconds = std::chrono::ceil<std::chrono::seconds>(st.opts.cfg.lease_ttl);
  ask_store(self, store_lane::lease, "grant",
            [store = st.store, seconds] { return store->grant(seconds); },
            [self, sent](caf::expected<etcd::lease> r) { on_granted(self, sent, std::move(r)); });
}

// Every third of the TTL: a keepalive (or a grant while joining), and the
// check that fences a node whose keepalives stopped being confirmed.
void lease_tick(cluster_pointer self) {
  auto& st = self->state;
  if (st.phase == cluster_phase::stopping)
    return;
  auto now = clock::now();
  if (st.phase == cluster_phase::member && !confirmed_young(st, now))
    transition(self, cluster_phase::fenced,
               "no keepalive confirmed since " + duration_text(now - st.confirmed));
  if (!st.lease_busy)
    st.lease == 0 ? grant(self) : keepalive(self);
  push_view(self, true); // the lease's age, also while nothing else changes
  self->delayed_send(self, keepalive_interval(st), atom::lease_v, atom::poll_v);
}

void claim_tick(cluster_pointer self) {
  auto& st = self->state;
  if (st.phase == cluster_phase::stopping)
    return;
  if (st.phase == cluster_phase::member) {
    claim_and_release(self);
    publish_node(self);
    publish_rotation(self);
    push_view(self);
  }
  self->delayed_send(self, std::chrono::seconds(1), atom::claim_v, atom::poll_v);
}

// A proxy found a newer token than this node's claim in a domain's mark.
// A report about an older claim (a proxy of a host given up and won again)
// is stale. Otherwise the host is not run until the store says who owns
// it; if the store still says this node, under an older token (etcd
// restored from a backup restarts its revisions), it stays out, shown as
// superseded, rather than taken and refused again and again.
void on_superseded(cluster_pointer self, const std::string& host, int64_t token) {
  auto& st = self->state;
  auto mine = st.book.token_of(host);
  if (!mine || *mine >= token)
    return;
  ++st.counters.refusals;
  log::warn(st.name, host + ": a domain's mark carries token " + std::to_string(token)
                       + ", newer than this node's claim (" + std::to_string(*mine)
                       + "): not run until the store says otherwise");
  st.superseded[host] = token;
  push_view(self);
  read_and_watch(self);
}

caf::result<bool> shut_down(cluster_pointer self) {
  auto& st = self->state;
  auto id = st.lease;
  transition(self, cluster_phase::stopping, "the engine is stopping");
  stop_watch(self);
  auto rp = self->make_response_promise<bool>();
  if (id == 0) {
    rp.deliver(true);
    self->quit();
    return rp;
  }
  ask_store(self, store_lane::lease, "revoke",
            [store = st.store, id]() -> caf::expected<bool> {
              if (auto err = store->revoke(id))
                return err;
              return true;
            },
            [self, rp](caf::expected<bool> r) mutable {
    if (!r)
      log::warn(self->state.name, "revoke failed (the lease expires on its own): "
                                    + render(r.error()));
    rp.deliver(true);
    self->quit();
  });
  return rp;
}

etcd::client_options client_options_of(const cluster_config& c) {
  etcd::client_options o;
  o.endpoints = c.etcd;
  o.ca_file = c.ca_file;
  o.cert_file = c.cert_file;
  o.key_file = c.key_file;
  o.user = c.user;
  o.password = c.password;
  o.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(c.request_timeout);
  return o;
}

void begin_cluster(cluster_pointer self, cluster_options opts) {
  auto& st = self->state;
  st.name = actor_name(actor_kind::cluster, opts.node);
  st.keys = cluster_keys{opts.cfg.prefix, opts.entry};
  st.book = ownership{ownership::settings{
    opts.node, std::chrono::duration_cast<std::chrono::milliseconds>(opts.cfg.lease_ttl),
    std::chrono::duration_cast<std::chrono::milliseconds>(opts.cfg.unreachable_release),
    std::chrono::minutes(10)}};
  st.book.configure(opts.guards);
  st.opts = std::move(opts);
  st.lease_worker = spawn_call_worker(self->system(), "etcd lease");
  st.store_worker = spawn_call_worker(self->system(), "etcd");
  // The workers and the watch end with this actor, however it ends: a
  // detached thread left behind would hold the actor system's shutdown.
  self->attach_functor([lw = st.lease_worker, sw = st.store_worker, watch = st.watch_box] {
    caf::anon_send_exit(lw, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(sw, caf::exit_reason::user_shutdown);
    if (*watch)
      (*watch)->store(true);
  });
  // Without its fleet the node supervises nothing: the lease goes, so the
  // other nodes take the hosts at once.
  self->monitor(st.opts.fleet);
  self->set_down_handler([self](const caf::down_msg& msg) {
    if (msg.source == self->state.opts.fleet.address()
        && self->state.phase != cluster_phase::stopping)
      shut_down(self);
  });
  if (auto c = etcd::client::make(client_options_of(st.opts.cfg)))
    st.store = *c;
  else
    log::error(st.name, render(c.error())); // validated: not reached
  lease_tick(self);
  claim_tick(self);
}

} // namespace

void push_view(cluster_pointer self, bool always) {
  auto& st = self->state;
  auto now = clock::now();
  auto v = build_view(self, now);
  for (auto& [host, _] : st.running)
    if (!v->hosts.contains(host)) {
      st.opts.fences->of(host)->close();
      ++st.counters.hosts_lost;
      log::warn(st.name, host + ": no longer this node's to change");
    }
  for (auto& [host, token] : v->hosts) {
    if (v->member)
      st.opts.fences->of(host)->open_until(deadline(st));
    else
      st.opts.fences->of(host)->close();
    if (!st.running.contains(host))
      log::info(st.name, host + ": this node's (token " + std::to_string(token) + ")");
  }
  bool changed = v->hosts != st.running;
  st.running = v->hosts;
  if (changed || always)
    self->send(st.opts.fleet, cluster_snapshot{std::move(v)});
}

// Over SSH, bytes a call wrote may sit in the kernel's send queue while
// the path is cut, and reach libvirtd when it heals: until TCP_USER_TIMEOUT
// ends the connection. The guard covers that too.
std::map<std::string, std::chrono::milliseconds> guards_of(const engine_config& cfg) {
  std::map<std::string, std::chrono::milliseconds> out;
  for (auto& h : cfg.hosts) {
    auto longest = h.transport == "ssh" ? std::max(h.call_budget, h.tcp_user_timeout)
                                        : h.call_budget;
    out[h.name] = std::chrono::duration_cast<std::chrono::milliseconds>(longest)
                  + std::chrono::seconds(1);
  }
  return out;
}

cluster_actor::behavior_type make_cluster(cluster_pointer self, cluster_options opts) {
  begin_cluster(self, std::move(opts));
  return {
    [self](rotation_snapshot& r) {
      self->state.own_rotation = r->members;
      publish_rotation(self);
    },
    [self](link_status& s) {
      if (s.state != link_state::dialing)
        self->state.book.link_changed(s.host, s.state == link_state::up, clock::now());
    },
    [self](atom::superseded, const std::string& host, int64_t token) {
      on_superseded(self, host, token);
    },
    [self](atom::shutdown) { return shut_down(self); },
    [self](atom::reload, const engine_config& next) {
      self->state.book.configure(guards_of(next));
      claim_and_release(self);
    },
    [self](atom::lease, atom::poll) { lease_tick(self); },
    [self](atom::lease) {
      auto& st = self->state;
      auto now = clock::now();
      if (st.phase == cluster_phase::member && !confirmed_young(st, now))
        transition(self, cluster_phase::fenced,
                   "no keepalive confirmed since " + duration_text(now - st.confirmed));
    },
    [self](atom::claim, atom::poll) { claim_tick(self); },
    [self](atom::watch, atom::poll) { read_and_watch(self); },
    [self](atom::watch, uint64_t no, int64_t revision, std::vector<store_change>& changes) {
      take_watch_batch(self, no, revision, changes);
    },
  };
}

} // namespace egress
