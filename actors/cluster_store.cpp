// The cluster actor's store side: what it reads from etcd (a range, then a
// watch from the revision after it), the claims and releases the ownership
// book asks for, and what this node publishes under its lease (its node key
// and its share of the rotation). Every request runs on a detached worker.
#include "actors/call.hpp"
#include "actors/cluster.hpp"
#include "base/log.hpp"
#include "messages/error.hpp"

namespace egress {

namespace {

using clock = std::chrono::steady_clock;

// One request may try every endpoint in turn, each within the timeout.
caf::timespan request_bound(const cluster_state& st) {
  auto n = static_cast<int64_t>(std::max<size_t>(1, st.opts.cfg.etcd.size()));
  return st.opts.cfg.request_timeout * n + std::chrono::seconds(1);
}

} // namespace

void on_worker(cluster_pointer self, store_lane lane, std::string what,
               std::function<caf::expected<std::any>()> fn,
               std::function<void(caf::expected<std::any>)> done) {
  auto& worker = lane == store_lane::lease ? self->state.lease_worker : self->state.store_worker;
  self->request(worker, request_bound(self->state), atom::run_v,
                blocking_work{std::move(what), std::move(fn)})
    .then([done](call_result& r) { done(std::move(r.value)); },
          [done](caf::error& err) { done(std::move(err)); });
}

namespace {

owner_key owner_of(const store_change& c) {
  return owner_key{c.value, c.lease, c.create_revision, c.mod_revision};
}

store_change change_of(const etcd::key_value& kv, bool deleted) {
  return store_change{deleted, kv.key, kv.value, kv.create_revision, kv.mod_revision, kv.lease};
}

// One change of a key under the entry, into the book or the others' rotation.
void take_change(cluster_pointer self, const store_change& c, clock::time_point now) {
  auto& st = self->state;
  auto k = st.keys.parse(c.key);
  if (!k)
    return;
  switch (k->kind) {
    case cluster_key_kind::host:
      if (c.deleted)
        st.book.host_freed(k->name, now);
      else
        st.book.host_owned(k->name, owner_of(c), now);
      break;
    case cluster_key_kind::node:
      if (c.deleted)
        st.book.node_gone(k->name);
      else
        st.book.node_put(k->name, decode_avoid(c.value).value_or(std::vector<std::string>{}),
                         c.lease, now);
      break;
    case cluster_key_kind::rotation:
      if (k->name == st.opts.node)
        break;
      if (auto members = decode_members(c.value); members && !c.deleted)
        st.others[k->name] = std::move(*members);
      else
        st.others.erase(k->name);
      break;
  }
}

// etcd 3.4 tells a quiet watch where the store is only every 10 minutes
// unless started otherwise (docs/notes/etcd.md): a silent stream is read
// again past this, and a node that lost etcd reads the store anyway when a
// keepalive confirms its lease again.
constexpr auto watch_idle = std::chrono::minutes(11);

void start_watch(cluster_pointer self, int64_t from) {
  auto& st = self->state;
  stop_watch(self);
  auto no = ++st.watch_no;
  auto cancel = std::make_shared<std::atomic<bool>>(false);
  *st.watch_box = cancel;
  auto me = caf::actor_cast<cluster_actor>(self);
  auto prefix = st.keys.root();
  blocking_work work{"watch " + prefix, [store = st.store, prefix, from, cancel, me,
                                         no]() -> caf::expected<std::any> {
    auto err = store->watch(prefix, from, [&](int64_t rev, std::vector<etcd::watch_event> evs) {
      std::vector<store_change> out;
      for (auto& e : evs)
        out.push_back(change_of(e.kv, e.deleted));
      caf::anon_send(me, atom::watch_v, no, rev, std::move(out));
    }, *cancel, watch_idle);
    if (err)
      return err;
    return std::any{true};
  }};
  auto call = spawn_call(self->system(), "etcd", std::move(work));
  self->request(call, caf::infinite, atom::run_v)
    .then([](call_result&) {}, // cancelled: a newer watch or the end
          [self, no](caf::error& err) {
            auto& st = self->state;
            if (st.watch_no != no || st.phase == cluster_phase::stopping)
              return;
            ++st.counters.store_errors;
            log::warn(st.name, "the watch ended: " + render(err) + "; reading again in 1 s");
            self->delayed_send(self, std::chrono::seconds(1), atom::watch_v, atom::poll_v);
          });
}

void on_range(cluster_pointer self, caf::expected<etcd::range_result> r) {
  auto& st = self->state;
  st.reading = false;
  if (st.phase == cluster_phase::stopping)
    return;
  if (!r) {
    ++st.counters.store_errors;
    log::warn(st.name, "reading the store failed: " + render(r.error()) + "; again in 1 s");
    self->delayed_send(self, std::chrono::seconds(1), atom::watch_v, atom::poll_v);
    return;
  }
  auto& range = *r;
  auto now = clock::now();
  std::map<std::string, owner_key> hosts;
  std::map<std::string, ownership::node_key> nodes;
  st.others.clear();
  for (auto& kv : range.kvs) {
    auto k = st.keys.parse(kv.key);
    if (!k)
      continue;
    if (k->kind == cluster_key_kind::host)
      hosts[k->name] = owner_of(change_of(kv, false));
    else if (k->kind == cluster_key_kind::node)
      nodes[k->name] = {decode_avoid(kv.value).value_or(std::vector<std::string>{}), kv.lease};
    else
      take_change(self, change_of(kv, false), now);
  }
  st.book.reset(hosts, nodes, now);
  st.revision = range.revision;
  start_watch(self, range.revision + 1);
  claim_and_release(self);
  push_view(self, true);
}

void on_claimed(cluster_pointer self, const std::string& host, int64_t lease,
                caf::expected<etcd::claim_result> r) {
  auto& st = self->state;
  st.book.claiming(host, false);
  if (lease != st.lease)
    return; // made under a lease that is gone: its key went with it
  if (!r) {
    ++st.counters.store_errors;
    log::warn(st.name, "claim of " + host + " failed: " + render(r.error()));
    return;
  }
  auto& c = *r;
  auto now = clock::now();
  if (c.won) {
    ++st.counters.claims_won;
    st.book.host_owned(host, owner_key{st.opts.node, lease, c.revision, c.revision}, now);
  } else if (c.holder) {
    st.book.host_owned(host, owner_of(change_of(*c.holder, false)), now);
  }
  push_view(self);
}

void claim(cluster_pointer self, const std::string& host) {
  auto& st = self->state;
  st.book.claiming(host, true);
  auto key = st.keys.host(host);
  ask_store(self, store_lane::store, "claim " + host,
            [store = st.store, key, node = st.opts.node, lease = st.lease] {
              return store->claim(key, node, lease);
            },
            [self, host, lease = st.lease](caf::expected<etcd::claim_result> r) {
              on_claimed(self, host, lease, std::move(r));
            });
}

const char* to_string(ownership::release_reason why) {
  switch (why) {
    case ownership::release_reason::unconfigured: return "no longer in the config";
    case ownership::release_reason::unreachable: return "its link stayed down";
    case ownership::release_reason::handover: return "another node is wanted for it";
  }
  return "?";
}

// The fence closes before the key goes (the book took the host out of
// usable() when it decided): nothing of this node changes the host once
// another node may claim it. The book keeps the release due until the
// store shows the key gone or another owner's: a failed request is made
// again at the next tick.
void release(cluster_pointer self, const ownership::release& r) {
  auto& st = self->state;
  st.opts.fences->of(r.host)->close();
  st.book.releasing(r.host, true);
  push_view(self);
  log::info(st.name, r.host + ": given up (" + to_string(r.why) + ")");
  auto key = st.keys.host(r.host);
  ask_store(self, store_lane::store, "release " + r.host,
            [store = st.store, key, mod = r.mod_revision] { return store->release(key, mod); },
            [self, host = r.host](caf::expected<bool> x) {
                    self->state.book.releasing(host, false);
                    if (!x) {
                      ++self->state.counters.store_errors;
                      log::warn(self->state.name, "release of " + host + " failed (again at "
                                                    "the next tick): " + render(x.error()));
                    }
                  });
}

void put(cluster_pointer self, std::string what, std::string key, std::string value,
         std::function<void(bool)> done) {
  auto& st = self->state;
  ask_store(self, store_lane::store, std::move(what),
            [store = st.store, key = std::move(key), value = std::move(value), lease = st.lease] {
              return store->put(key, value, lease);
            },
            [self, done](caf::expected<int64_t> r) {
                    if (!r) {
                      ++self->state.counters.store_errors;
                      log::warn(self->state.name, "put failed: " + render(r.error()));
                    }
                    done(static_cast<bool>(r));
                  });
}

} // namespace

void stop_watch(cluster_pointer self) {
  auto& st = self->state;
  if (*st.watch_box)
    (*st.watch_box)->store(true);
  st.watch_box->reset();
  ++st.watch_no;
}

void read_and_watch(cluster_pointer self) {
  auto& st = self->state;
  if (st.reading || st.phase == cluster_phase::stopping)
    return;
  st.reading = true;
  stop_watch(self);
  ask_store(self, store_lane::store, "range " + st.keys.root(),
            [store = st.store, prefix = st.keys.root()] { return store->range(prefix); },
            [self](caf::expected<etcd::range_result> r) { on_range(self, std::move(r)); });
}

void take_watch_batch(cluster_pointer self, uint64_t watch_no, int64_t revision,
                  std::vector<store_change>& changes) {
  auto& st = self->state;
  if (watch_no != st.watch_no || st.phase == cluster_phase::stopping)
    return;
  auto now = clock::now();
  for (auto& c : changes)
    take_change(self, c, now);
  st.revision = std::max(st.revision, revision);
  if (st.phase == cluster_phase::member)
    claim_and_release(self);
  push_view(self, true);
}

void claim_and_release(cluster_pointer self) {
  auto& st = self->state;
  if (st.phase != cluster_phase::member || st.reading)
    return;
  auto step = st.book.decide(clock::now());
  for (auto& r : step.releases)
    release(self, r);
  for (auto& host : step.claim)
    claim(self, host);
}

void publish_node(cluster_pointer self) {
  auto& st = self->state;
  if (st.lease == 0 || st.phase == cluster_phase::stopping)
    return;
  auto value = encode_avoid(st.book.avoiding(clock::now()));
  if (value == st.avoid_published)
    return;
  st.avoid_published = value;
  put(self, "put node key", st.keys.node(st.opts.node), value, [self](bool ok) {
    if (!ok)
      self->state.avoid_published.clear(); // put again at the next tick
  });
}

void publish_rotation(cluster_pointer self) {
  auto& st = self->state;
  if (st.lease == 0 || st.phase != cluster_phase::member || st.own_putting)
    return;
  auto value = encode_members(st.own_rotation);
  if (value == st.own_published)
    return;
  st.own_putting = true;
  put(self, "put rotation", st.keys.rotation(st.opts.node), value,
      [self, value, lease = st.lease](bool ok) {
    auto& st = self->state;
    st.own_putting = false;
    if (!ok || lease != st.lease)
      return; // the claim tick tries again (under the lease it has now)
    st.own_published = value;
    publish_rotation(self); // what changed meanwhile
  });
}

} // namespace egress
