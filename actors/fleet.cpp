#include "actors/fleet.hpp"

#include <algorithm>
#include <set>

#include "actors/call.hpp"
#include "actors/gateway.hpp"
#include "actors/health.hpp"
#include "actors/host_link.hpp"
#include "actors/image.hpp"
#include "actors/parts/link_call.hpp"
#include "actors/proxy.hpp"
#include "actors/parts/transport_choice.hpp"
#include "base/log.hpp"
#include "messages/error.hpp"
#include "providers/libvirt/connection.hpp"
#include "providers/provision/gc.hpp"

namespace egress {

caf::timespan caller_timeout(const host_config& host) {
  return host.connect_timeout + 2 * host.call_budget + std::chrono::seconds(1);
}

// -- the difference between two configs -----------------------------------------

namespace {

template <class T>
const T* by_name(const std::vector<T>& xs, const std::string& name) {
  auto i = std::find_if(xs.begin(), xs.end(), [&](const T& x) { return x.name == name; });
  return i == xs.end() ? nullptr : &*i;
}

// Proxies by name: a fleet of 10,000 is compared name by name on every
// placement (bench/scale.cpp --groups), which a linear search made quadratic.
std::unordered_map<std::string, const proxy_spec*> by_names(const std::vector<proxy_spec>& xs) {
  std::unordered_map<std::string, const proxy_spec*> out;
  out.reserve(xs.size());
  for (auto& x : xs)
    out.emplace(x.name, &x);
  return out;
}

const proxy_spec* find_in(const std::unordered_map<std::string, const proxy_spec*>& m,
                          const std::string& name) {
  auto i = m.find(name);
  return i == m.end() ? nullptr : i->second;
}

std::string names(const std::vector<std::string>& xs) {
  std::string out;
  for (auto& x : xs)
    out += (out.empty() ? "" : ",") + x;
  return out;
}

} // namespace

config_diff diff(const engine_config& from, const engine_config& to) {
  config_diff d;
  d.engine_changed = from.poll_interval != to.poll_interval
                     || from.bulk_read_interval != to.bulk_read_interval
                     || from.address_grace != to.address_grace
                     || from.redial_min != to.redial_min || from.redial_max != to.redial_max;
  d.probe_changed = !(from.probe == to.probe);
  d.gateway_changed = !(from.gateway == to.gateway);
  for (auto& h : to.hosts) {
    auto old = by_name(from.hosts, h.name);
    if (!old)
      d.hosts_added.push_back(h.name);
    else if (!(*old == h) || d.engine_changed)
      d.hosts_changed.push_back(h.name);
  }
  for (auto& h : from.hosts)
    if (!by_name(to.hosts, h.name))
      d.hosts_removed.push_back(h.name);
  for (auto& img : from.images) {
    auto now = by_name(to.images, img.name);
    if (!now || !(*now == img))
      d.images_changed.push_back(img.name);
  }
  auto touched = [&](const std::vector<std::string>& xs, const std::string& x) {
    return std::find(xs.begin(), xs.end(), x) != xs.end();
  };
  auto before = by_names(from.proxies);
  auto after = by_names(to.proxies);
  for (auto& p : to.proxies) {
    auto old = find_in(before, p.name);
    if (!old)
      d.proxies_added.push_back(p.name);
    else if (auto imgs = p.images();
             !(*old == p) || touched(d.hosts_changed, p.host)
             || std::any_of(imgs.begin(), imgs.end(),
                            [&](auto& i) { return touched(d.images_changed, i); }))
      d.proxies_changed.push_back(p.name);
  }
  for (auto& p : from.proxies)
    if (!after.contains(p.name))
      d.proxies_removed.push_back(p.name);
  return d;
}

void index_specs(fleet_state& st) {
  st.spec_at.clear();
  st.spec_at.reserve(st.cfg.proxies.size());
  for (size_t i = 0; i < st.cfg.proxies.size(); ++i)
    st.spec_at.emplace(st.cfg.proxies[i].name, i);
}

const proxy_spec* spec_of(const fleet_state& st, const std::string& name) {
  auto i = st.spec_at.find(name);
  return i == st.spec_at.end() ? nullptr : &st.cfg.proxies[i->second];
}

std::string config_diff::summary() const {
  auto out = "proxies +" + std::to_string(proxies_added.size()) + " -"
             + std::to_string(proxies_removed.size()) + " ~"
             + std::to_string(proxies_changed.size());
  if (!hosts_added.empty() || !hosts_removed.empty() || !hosts_changed.empty())
    out += "; hosts +" + names(hosts_added) + " -" + names(hosts_removed) + " ~"
           + names(hosts_changed);
  if (!images_changed.empty())
    out += "; images ~" + names(images_changed);
  if (probe_changed)
    out += "; probe settings";
  if (gateway_changed)
    out += "; gateway settings";
  return out;
}

namespace {

const host_config& host_of(fleet_pointer self, const std::string& name) {
  return *by_name(self->state.cfg.hosts, name); // validated: every proxy names a host
}

// The rotation reaches its followers (the gateway, GET /rotation) at most
// once per publish delay: the joins and leaves of one burst (a link's death,
// a reload) become one snapshot, and a change is never older than the delay
// when it leaves the fleet. The delay is publish_delay, or four times what
// the last publication cost if that is more: a publication copies every
// member into a new snapshot, and at 100,000 proxies one per 20 ms while the
// fleet converged left the fleet little time for anything else
// (docs/notes/scale.md#the-rotation-published). So the fleet spends at most
// a fifth of its time publishing, and a small fleet still within 20 ms.
constexpr auto publish_delay = std::chrono::milliseconds(20);
constexpr int publish_cost_factor = 4;

// Nobody to publish to: no follower, no cluster (a follower gets the
// rotation as it is when it subscribes).
bool unfollowed(const fleet_state& st) {
  return st.followers.empty() && !st.cluster;
}

void note_rotation(fleet_pointer self) {
  auto& st = self->state;
  if (st.publish_armed || st.view.rotation().generation() == st.published)
    return;
  if (unfollowed(st)) {
    st.published = st.view.rotation().generation();
    return;
  }
  st.publish_armed = true;
  auto delay = std::max<caf::timespan>(publish_delay, publish_cost_factor * st.publish_cost);
  self->delayed_send(self, delay, atom::rotation_v, atom::poll_v);
}

// In a cluster the cluster actor publishes this node's own rotation, and
// the followers get every node's (fleet_cluster.cpp).
void publish_rotation(fleet_pointer self) {
  auto& st = self->state;
  auto t0 = std::chrono::steady_clock::now();
  st.publish_armed = false;
  if (unfollowed(st)) {
    st.published = st.view.rotation().generation();
    return;
  }
  auto own = st.view.rotation().snapshot(st.cfg.node);
  st.published = own->generation;
  if (st.cluster)
    self->send(st.cluster, own);
  auto snap = followed_rotation(st);
  for (auto& f : st.followers)
    self->send(f, snap);
  st.publish_cost = std::chrono::steady_clock::now() - t0;
}

// Sends the events a change of the view made to every watcher (none are
// built while nobody watches), and schedules the rotation's publication if
// it changed.
void tell(fleet_pointer self, std::vector<engine_event> events) {
  auto& st = self->state;
  for (auto& ev : events) {
    ev.node = st.cfg.node;
    for (auto& w : st.watchers)
      self->send(w, ev);
  }
  note_rotation(self);
}

bool watched(fleet_pointer self) {
  return !self->state.watchers.empty();
}

// Records a push in the view and sends what it changed to every watcher.
template <class Status>
void record(fleet_pointer self, Status now) {
  tell(self, self->state.view.record(std::move(now), watched(self)));
}

// The link's options come from the config (link_options_of in
// actors/parts/transport_choice): where libvirt's remote client must not be
// entered by two threads at once, each call it runs at once has a connection
// of its own.
void spawn_link(fleet_pointer self, const host_config& h) {
  auto& st = self->state;
  auto o = link_options_of(h, st.cfg);
  o.make_transport = st.hooks.make_transport(h);
  o.sink = status_sink_actor{self};
  if (st.fences)
    o.fence = st.fences->of(h.name);
  auto link = self->spawn(make_host_link, std::move(o));
  self->send(link, atom::subscribe_v, link_events_actor{self});
  self->monitor(link);
  st.links[h.name] = link;
  st.view.spawned(actor_name(actor_kind::link, h.name));
  std::lock_guard<std::mutex> guard{st.book->mtx};
  st.book->hosts[h.name] = h;
}

// Kills the link first (a blocked call on it returns), then lets it exit.
void retire_link(fleet_pointer self, const std::string& host, const std::string& why) {
  auto& st = self->state;
  if (auto i = st.links.find(host); i != st.links.end()) {
    self->send(i->second, atom::kill_v, why);
    self->send_exit(i->second, caf::exit_reason::user_shutdown);
    st.links.erase(i);
  }
  st.view.forget_link(host);
  self->send(st.health, atom::kill_v, host);
  std::lock_guard<std::mutex> guard{st.book->mtx};
  st.book->hosts.erase(host);
}

images::image_source source_of(const image_config& c) {
  return {c.name, c.url, c.sha256, c.size, c.format, c.max_size};
}

// The node's copies of images no longer declared (or declared with another
// digest) go: the stage holds what the config names, nothing more. Listing
// and deleting files blocks: a detached call, never the fleet's thread
// (invariant 4).
void keep_staged_images(fleet_pointer self) {
  auto& stage = self->state.hooks.stage;
  if (!stage)
    return;
  std::set<std::string> kept;
  for (auto& img : self->state.declared.images)
    kept.insert(stage->stem_of(source_of(img)));
  auto h = spawn_call(self->system(), "fleet",
                      blocking_work{"delete the node's copies no longer declared",
                                    [stage, kept]() -> caf::expected<std::any> {
                                      stage->keep_only(kept);
                                      return std::any{};
                                    }});
  self->request(h, std::chrono::minutes(1), atom::run_v)
    .then([](call_result&) {},
          [](caf::error& err) {
            log::warn(to_string(actor_kind::fleet), "the node's copies: " + render(err));
          });
}

// One image actor per (image, host) that a proxy needs, spawned on first
// need: the provider entry is the fleet's own, so every cached image is
// (entry, image) on a host.
image_actor image_for(fleet_pointer self, const std::string& image, const std::string& host) {
  auto& st = self->state;
  if (image.empty())
    return {};
  auto key = image + "@" + host;
  if (auto i = st.images.find(key); i != st.images.end())
    return i->second;
  auto cfg_of = by_name(st.cfg.images, image); // validated: declared
  image_options o;
  o.entry = st.cfg.entry;
  o.host = host_of(self, host); // validated: the host has a pool
  o.image = source_of(*cfg_of);
  o.transfer_budget = cfg_of->transfer_budget;
  o.make_transport = st.hooks.make_transport(o.host);
  o.stage = st.hooks.stage;
  o.sink = status_sink_actor{self};
  if (st.fences)
    o.fence = st.fences->of(host);
  auto img = spawn_image(self->system(), std::move(o));
  self->monitor(img);
  st.images.emplace(key, img);
  st.view.spawned(actor_name(actor_kind::image, key));
  return img;
}

// Ends every image actor whose image or host is in the lists (their fills
// are given up); the next proxy that needs one spawns it anew.
void retire_images(fleet_pointer self, const std::vector<std::string>& images,
                   const std::vector<std::string>& hosts) {
  auto& st = self->state;
  auto in = [](const std::vector<std::string>& xs, const std::string& x) {
    return std::find(xs.begin(), xs.end(), x) != xs.end();
  };
  for (auto i = st.images.begin(); i != st.images.end();) {
    auto at = i->first.find('@');
    if (in(images, i->first.substr(0, at)) || in(hosts, i->first.substr(at + 1))) {
      self->send_exit(i->second, caf::exit_reason::user_shutdown);
      st.view.forget_image(i->first);
      i = st.images.erase(i);
    } else {
      ++i;
    }
  }
}

proxy_actor make_proxy_actor(fleet_pointer self, const proxy_spec& p) {
  auto& st = self->state;
  auto& h = host_of(self, p.host);
  proxy_options o;
  o.spec = p;
  o.entry = st.cfg.entry;
  o.domain_type = h.domain_type;
  o.address_sources = h.address_sources;
  o.poll_interval = st.cfg.poll_interval;
  o.address_grace = st.cfg.address_grace;
  o.call_timeout = caller_timeout(h);
  o.link = st.links.at(p.host);
  o.image = image_for(self, p.image, p.host);
  o.kernel = image_for(self, p.kernel, p.host);
  o.initrd = image_for(self, p.initrd, p.host);
  o.pool = h.pool;
  o.console_log_dir = h.console_log_dir;
  for (auto& name : p.images()) {
    auto img = by_name(st.cfg.images, name); // validated: declared
    // A waiter outlasts the longest budget of the images it needs.
    o.image_timeout = std::max(o.image_timeout, img->transfer_budget + std::chrono::minutes(1));
  }
  if (auto img = by_name(st.cfg.images, p.image)) {
    o.image_format = img->format == "qcow2" ? "qcow2" : "raw";
    o.image_sha256 = img->sha256;
  }
  if (auto img = by_name(st.cfg.images, p.kernel))
    o.kernel_sha256 = img->sha256;
  if (auto img = by_name(st.cfg.images, p.initrd))
    o.initrd_sha256 = img->sha256;
  o.sink = status_sink_actor{self};
  if (h.fencing_token > 0) {
    o.owner = st.cfg.node;
    o.token = h.fencing_token;
  }
  auto proxy = self->spawn(make_proxy, std::move(o));
  self->monitor(proxy);
  return proxy;
}

void spawn_proxy(fleet_pointer self, const proxy_spec& p) {
  auto& st = self->state;
  st.proxies[p.name] = make_proxy_actor(self, p);
  st.view.spawned(actor_name(actor_kind::proxy, p.name));
  st.view.declare_proxy(p);
}

// Ends a proxy's actor without touching its VM: the VM is adopted by mark
// if the proxy comes back, and collected by mark if it does not.
void retire_proxy(fleet_pointer self, const std::string& name) {
  auto& st = self->state;
  if (auto i = st.proxies.find(name); i != st.proxies.end()) {
    self->send_exit(i->second, caf::exit_reason::user_shutdown);
    st.proxies.erase(i);
  }
  st.retiring.erase(name);
  tell(self, st.view.undeclare_proxy(name, watched(self)));
  tell(self, st.view.forget_proxy(name, watched(self)));
  self->send(st.health, atom::forget_v, name);
}

// -- drain before delete ----------------------------------------------------------

// What the gateway's answer is awaited for at most: its drain grace, then
// one sync.
caf::timespan drain_bound(const gateway_config& g) {
  return g.drain_grace + 2 * g.call_budget + std::chrono::seconds(1);
}

// Leaves the rotation now (the gateway stops sending it connections),
// then, once the gateway has drained them (or cannot be reached), runs
// `then` for each proxy still retiring under this drain. Without a gateway
// `then` runs at once. The proxies keep their actors meanwhile: a proxy's
// VM is only ever deleted or replaced after its drain (docs/spec.md 30).
void drain_then(fleet_pointer self, const std::vector<std::string>& names,
                std::function<void(const std::string&)> then) {
  auto& st = self->state;
  if (!st.gateway || names.empty()) {
    for (auto& n : names)
      then(n);
    return;
  }
  auto id = ++st.drains;
  for (auto& n : names) {
    st.retiring[n] = id;
    tell(self, st.view.set_retiring(n, true, watched(self)));
    self->send(st.health, atom::forget_v, n);
  }
  // The rotation without them goes out now, not after the publish delay:
  // the gateway syncs with the drain request and this snapshot together.
  publish_rotation(self);
  auto finish = [self, names, id, then](const char* how) {
    auto& st = self->state;
    for (auto& n : names) {
      auto i = st.retiring.find(n);
      if (i == st.retiring.end() || i->second != id)
        continue; // retired meanwhile, or drained again by a later change
      log::info(to_string(actor_kind::gateway), n + ": " + how);
      then(n);
    }
  };
  self->request(st.gateway, drain_bound(st.cfg.gateway), atom::drain_v, names)
    .then(
      [finish](bool drained) {
        finish(drained ? "drained out of HAProxy" : "HAProxy unreachable: not drained");
      },
      [finish](caf::error&) { finish("the gateway did not answer its drain in time"); });
}

// The test driver invents addresses (192.168.122.x): a probe from the engine
// would reach whatever really answers there. Behind an ssh transport the
// probe runs on that host (a test bed's namespace), where it may be real.
bool probes_make_sense(const host_config& h) {
  return !(h.domain_type == "test" && h.transport == "direct");
}

void spawn_health(fleet_pointer self) {
  auto& st = self->state;
  health_options o;
  o.probe = st.cfg.probe;
  o.sink = status_sink_actor{self};
  // Runs in the health actor: reads the shared book, never the fleet's state.
  o.prober_for = [book = st.book, make = st.hooks.make_prober](const std::string& host) {
    host_config h;
    {
      std::lock_guard<std::mutex> guard{book->mtx};
      auto i = book->hosts.find(host);
      if (i == book->hosts.end())
        return probe::prober_ptr{}; // retired meanwhile: nothing to probe
      h = i->second;
    }
    return probes_make_sense(h) ? make(h) : probe::prober_ptr{};
  };
  st.health = self->spawn(make_health, std::move(o));
  st.view.spawned(actor_name(actor_kind::health, "health"));
  self->monitor(st.health);
  for (auto& s : st.subscribers)
    self->send(st.health, atom::subscribe_v, s);
  // The new health actor learns the current state from the views.
  for (auto& [_, s] : st.view.links())
    self->send(st.health, s);
}

void add_follower(fleet_pointer self, rotation_follower_actor f) {
  auto& st = self->state;
  self->monitor(f);
  self->send(f, followed_rotation(st));
  st.followers.push_back(std::move(f));
}

// The gateway follows the rotation like any follower; its status comes
// back as pushes.
void spawn_gateway(fleet_pointer self) {
  auto& st = self->state;
  gateway_options o;
  o.cfg = st.cfg.gateway;
  o.sink = status_sink_actor{self};
  st.gateway = self->spawn(make_gateway, std::move(o));
  st.view.spawned(actor_name(actor_kind::gateway, st.cfg.gateway.socket));
  add_follower(self, caf::actor_cast<rotation_follower_actor>(st.gateway));
}

void retire_gateway(fleet_pointer self) {
  auto& st = self->state;
  if (!st.gateway)
    return;
  auto addr = st.gateway.address();
  std::erase_if(st.followers, [&](auto& f) { return f.address() == addr; });
  self->send_exit(st.gateway, caf::exit_reason::user_shutdown);
  st.gateway = nullptr;
  record(self, gateway_status{}); // off
}

// "10.0.0.5:8888" or "[fd00::5]:8888": where a proxy's clients connect.
std::string endpoint_of(const proxy_status& s, uint32_t port) {
  if (s.address.empty())
    return {};
  auto host = s.address.find(':') != std::string::npos ? "[" + s.address + "]" : s.address;
  return host + ":" + std::to_string(port);
}

// Under `key` when it is not the proxy's name: a drain's replacement is
// probed as member@host (actors/fleet_drain.cpp).
void tell_health(fleet_pointer self, const proxy_status& s, const std::string& key = {}) {
  auto& st = self->state;
  auto spec = spec_of(st, s.name);
  if (!spec || st.retiring.contains(s.name))
    return;
  auto copy = s;
  copy.address = endpoint_of(s, spec->port);
  if (!key.empty())
    copy.name = key;
  self->send(st.health, std::move(copy));
}

// -- garbage collection -------------------------------------------------------

using names_by_host = std::unordered_map<std::string, std::set<std::string>>;

// The names each host should have, for the collection, in one pass over
// the fleet: a pass per host looked through every proxy for each host, and
// over 1,000 hosts with 100,000 proxies that was 10^8 name comparisons at
// every collection (at start, after each reload, every gc_period): 40% of
// the fleet's time in the reload of bench/scale.cpp, which answered after
// 9-16 s (docs/notes/scale.md#a-reload-of-1).
// With `only`, that host's names alone (a pass on one host).
names_by_host declared_by_host(const fleet_state& st, const std::string* only = nullptr) {
  names_by_host out;
  auto add = [&](const std::string& host, const std::string& name) {
    if (!only || host == *only)
      out[host].insert(name);
  };
  for (auto& p : st.cfg.proxies)
    add(p.host, p.name);
  // Every member placed there, whatever the config as it runs says.
  for (auto& [member, at] : st.groups.host_of())
    add(at, member);
  // A member handed over has a VM on both hosts until its original goes.
  for (auto& [name, ho] : st.handovers) {
    add(ho.from, name);
    add(ho.to, name);
  }
  // A proxy still draining keeps its VM until the drain ends and it retires.
  for (auto& [name, _] : st.retiring)
    if (auto i = st.view.proxies().find(name); i != st.view.proxies().end())
      add(i->second.host, name);
  return out;
}

std::set<std::string> declared_on(const fleet_state& st, const std::string& host) {
  return std::move(declared_by_host(st, &host)[host]);
}

// One host's collection; `declared`: what declared_by_host says of it. A
// host that could not be collected owes a pass (fleet_state::gc_owed) until
// one succeeds there; `done` gets the report, or nullptr when the host
// failed (logged).
void collect_on(fleet_pointer self, const host_config& h, std::set<std::string> declared,
                std::function<void(gc_report*)> done) {
  auto& st = self->state;
  if (!st.groups.settled(h.name)) {
    // A member found there and not placed yet is not garbage.
    st.gc_owed.insert(h.name);
    done(nullptr);
    return;
  }
  provision::gc_request req;
  req.entry = st.cfg.entry;
  req.host = h.name;
  req.pool = h.pool;
  req.declared = std::move(declared);
  link_call<gc_report>(
    self, st.links.at(h.name), caller_timeout(h), "gc",
    [req](lv::connection& c) { return provision::collect(c, req); },
    [self, done](gc_report& r) {
      if (!r.domains.empty() || !r.volumes.empty())
        log::info("gc", r.host + ": removed " + std::to_string(r.domains.size())
                          + " undeclared domain(s) " + names(r.domains) + " and "
                          + std::to_string(r.volumes.size()) + " volume(s) "
                          + names(r.volumes));
      self->state.gc_owed.erase(r.host);
      done(&r);
    },
    [self, done, host = h.name](const caf::error& err) {
      log::warn("gc", host + ": " + render(err) + " (retried when its link is up again)");
      self->state.gc_owed.insert(host);
      done(nullptr);
    });
}

// One pass on every host: each host's result arrives on its own, so a dead
// host delays nobody's collection (invariant 5). `done` gets all reports
// (a failed host's report says so in its domains list being empty and is
// logged).
void run_gc(fleet_pointer self,
            std::function<void(std::vector<gc_report>)> done = nullptr) {
  auto& st = self->state;
  struct pass {
    size_t left = 0;
    bool all_ok = true;
    std::vector<gc_report> reports;
    std::function<void(std::vector<gc_report>)> done;
  };
  auto shared = std::make_shared<pass>();
  shared->left = st.links.size();
  shared->done = std::move(done);
  auto finish_one = [self, shared] {
    if (--shared->left > 0)
      return;
    if (shared->all_ok)
      self->state.gc_done = true;
    if (shared->done)
      shared->done(std::move(shared->reports));
  };
  if (shared->left == 0) {
    shared->left = 1;
    finish_one();
    return;
  }
  auto declared = declared_by_host(st);
  for (auto& h : st.cfg.hosts)
    collect_on(self, h, std::move(declared[h.name]),
               [shared, finish_one, host = h.name](gc_report* r) {
                 shared->all_ok = shared->all_ok && r != nullptr;
                 shared->reports.push_back(r != nullptr ? std::move(*r)
                                                        : gc_report{host, {}, {}});
                 finish_one();
               });
}

// A host that owes a pass is collected again when its link comes up: a
// proxy removed while its host was unreachable loses its VM once the host
// answers, not at the next periodic pass (gc_period). Only the transition
// to up starts it, so a host whose collection keeps failing on a live link
// is not retried on every status push of that link.
void collect_owed(fleet_pointer self, const link_status& now) {
  auto& st = self->state;
  if (now.state != link_state::up || !st.cfg.gc || st.stopping
      || !st.gc_owed.contains(now.host))
    return;
  auto& seen = st.view.links();
  if (auto before = seen.find(now.host);
      before != seen.end() && before->second.state == link_state::up)
    return;
  if (auto h = by_name(st.cfg.hosts, now.host))
    collect_on(self, *h, declared_on(st, h->name), [](gc_report*) {});
}

// Repeats the first pass until it succeeded on every host, then runs again
// every gc_period: a proxy retired while its create was in flight leaves a
// VM that only a later pass can see.
constexpr auto gc_retry = std::chrono::seconds(30);
constexpr auto gc_period = std::chrono::minutes(10);

// -- reload ---------------------------------------------------------------------

// Whether a changed proxy's VM is deleted and made anew (its spec or one of
// its images changed), not adopted by its new actor.
bool vm_replaced(const proxy_spec* before, const proxy_spec* after, const config_diff& d) {
  if (!before || !after || !(*before == *after))
    return true;
  auto imgs = after->images();
  return std::any_of(imgs.begin(), imgs.end(), [&](auto& i) {
    return std::find(d.images_changed.begin(), d.images_changed.end(), i)
           != d.images_changed.end();
  });
}

// Whether `name` leaves a host that is down for another: nothing there can
// be drained or serves, so its new VM is not kept waiting for a drain.
bool leaves_down_host(fleet_pointer self, const proxy_spec* before, const proxy_spec* after) {
  if (!before || !after || before->host == after->host)
    return false;
  auto& links = self->state.view.links();
  auto l = links.find(before->host);
  return l == links.end() || l->second.state != link_state::up;
}

// Runs `next` (a config as it runs: members placed) as the difference from
// the current one: retire first, then build (a changed host's proxies need
// its new link). A proxy whose VM goes (removed) or is replaced (its spec or
// an image changed) is drained in the gateway first and retired after; one
// whose host settings alone changed keeps its VM (adopted by the new
// actor).
config_diff converge(fleet_pointer self, engine_config next) {
  auto& st = self->state;
  auto d = diff(st.cfg, next);
  cancel_handovers(self, d.proxies_removed);
  cancel_handovers(self, d.proxies_changed);
  // One that leaves a host that is down is made anew at once, like one
  // whose host settings alone changed (its new actor is spawned below).
  std::vector<std::string> to_drain = d.proxies_removed;
  auto before = by_names(st.cfg.proxies);
  auto after = by_names(next.proxies);
  for (auto& name : d.proxies_changed) {
    auto b = find_in(before, name);
    auto a = find_in(after, name);
    if (vm_replaced(b, a, d) && !leaves_down_host(self, b, a))
      to_drain.push_back(name);
    else
      retire_proxy(self, name);
  }
  for (auto& h : d.hosts_removed)
    st.host_drains.erase(h);
  auto gone_hosts = d.hosts_removed;
  gone_hosts.insert(gone_hosts.end(), d.hosts_changed.begin(), d.hosts_changed.end());
  retire_images(self, d.images_changed, gone_hosts);
  for (auto& h : gone_hosts)
    retire_link(self, h, "host settings changed by a reload");
  st.cfg = std::move(next);
  index_specs(st);
  if (d.probe_changed) {
    self->send_exit(st.health, caf::exit_reason::user_shutdown);
    tell(self, st.view.clear_rotation(watched(self)));
    spawn_health(self);
  }
  if (d.gateway_changed) {
    retire_gateway(self);
    if (st.cfg.gateway.enabled)
      spawn_gateway(self);
  }
  for (auto& h : st.cfg.hosts)
    if (!st.links.contains(h.name))
      spawn_link(self, h);
  for (auto& p : st.cfg.proxies)
    if (!st.proxies.contains(p.name))
      spawn_proxy(self, p);
  // What the new health actor must know about proxies nobody respawned.
  if (d.probe_changed)
    for (auto& [_, s] : st.view.proxies())
      tell_health(self, s);
  drain_then(self, to_drain, [self](const std::string& name) {
    auto& st = self->state;
    auto seen = st.view.proxies().find(name);
    auto host = seen == st.view.proxies().end() ? std::string{} : seen->second.host;
    retire_proxy(self, name);
    if (st.stopping)
      return;
    if (auto p = spec_of(st, name)) {
      spawn_proxy(self, *p); // its VM is replaced by the new actor
    } else if (auto h = by_name(st.cfg.hosts, host); h && st.cfg.gc && st.gateway) {
      // Drained: now its VM goes (the reload's own pass kept it).
      collect_on(self, *h, declared_on(st, h->name), [](gc_report*) {});
    }
  });
  return d;
}

} // namespace

void drop_host(fleet_pointer self, const std::string& host, const std::string& why) {
  auto& st = self->state;
  log::warn(to_string(actor_kind::fleet), host + ": dropped: " + why);
  // Its proxies, those a reload removed and still draining too.
  std::vector<std::string> names;
  for (auto& [name, _] : st.proxies) {
    auto spec = spec_of(st, name);
    auto seen = st.view.proxies().find(name);
    if ((spec && spec->host == host)
        || (seen != st.view.proxies().end() && seen->second.host == host))
      names.push_back(name);
  }
  for (auto& n : names)
    retire_proxy(self, n);
  retire_images(self, {}, {host});
  retire_link(self, host, why);
  st.gc_owed.erase(host);
  std::erase_if(st.cfg.hosts, [&](const host_config& h) { return h.name == host; });
  std::erase_if(st.cfg.proxies, [&](const proxy_spec& p) { return p.host == host; });
  index_specs(st);
}

void converge_to(fleet_pointer self, engine_config next) {
  auto d = converge(self, std::move(next));
  if (!d.hosts_added.empty() || !d.proxies_added.empty())
    log::info(to_string(actor_kind::fleet), "cluster: " + d.summary());
}

namespace {

bool in_rotation(fleet_pointer self, const std::string& name) {
  return self->state.view.rotation().contains(name);
}

caf::expected<std::string> apply(fleet_pointer self, engine_config next) {
  auto& st = self->state;
  if (auto err = validate(next))
    return err;
  next.node = node_name(next);
  if (next.entry != st.cfg.entry)
    return make_error(ec::config_invalid,
                      (next.config_file.empty() ? std::string{} : next.config_file + ": ")
                        + "engine.entry: cannot change from \"" + st.cfg.entry + "\" to \""
                        + next.entry + "\" while running (the entry owns every VM's mark); "
                        "restart the engine instead");
  // Who this node is and whom it connects to are settled at start (the
  // node actor dials its peers once and keeps redialing them).
  // So are the listener and its credentials: a reload that seemed to
  // rotate a leaked secret but left the old one valid would be worse than a
  // refusal.
  const char* fixed = next.node != st.cfg.node                      ? "engine.node"
                      : next.peers != st.cfg.peers                  ? "engine.peers"
                      : next.inspect != st.cfg.inspect              ? "engine.inspect"
                      : next.inspect_secret != st.cfg.inspect_secret ? "engine.inspect.secret-file"
                      : next.tls != st.cfg.tls                      ? "openssl"
                      : next.cluster != st.cfg.cluster              ? "engine.cluster"
                      : next.stage_dir != st.cfg.stage_dir          ? "engine.stage-dir"
                                                                    : nullptr;
  if (fixed)
    return make_error(ec::config_invalid,
                      (next.config_file.empty() ? std::string{} : next.config_file + ": ")
                        + fixed + ": cannot change while running; restart the engine instead");
  st.declared = next;
  st.groups.configure(next, std::chrono::steady_clock::now());
  st.groups.step(std::chrono::steady_clock::now(),
                 [self](const std::string& n) { return in_rotation(self, n); });
  if (st.cluster)
    self->send(st.cluster, atom::reload_v, next);
  auto d = converge(self, running_config(st));
  st.view.reload_applied(d.summary());
  log::info(to_string(actor_kind::fleet), "reload " + st.view.last_reload());
  if (st.cfg.gc)
    run_gc(self);
  remove_stale(self);
  keep_staged_images(self);
  return d.summary();
}

} // namespace

proxy_actor start_proxy(fleet_pointer self, const proxy_spec& p) {
  return make_proxy_actor(self, p);
}

void probe_as(fleet_pointer self, const proxy_status& s, const std::string& key) {
  tell_health(self, s, key);
}

void record_status(fleet_pointer self, proxy_status s) {
  record(self, std::move(s));
}

void regroup(fleet_pointer self) {
  auto& st = self->state;
  auto now = std::chrono::steady_clock::now();
  if (st.stopping || !st.groups.due(now))
    return;
  if (st.groups.step(now, [self](const std::string& n) { return in_rotation(self, n); })) {
    auto d = converge(self, running_config(st));
    log::info(to_string(actor_kind::fleet), "placed group members: " + d.summary());
  }
}

namespace {

// The placement's tick: a lost host is noticed within it.
constexpr auto place_tick = std::chrono::seconds(1);

// Out of the gateway first; then the proxy deletes its VM and quits. It is
// forgotten at once, so that status and shutdown no longer wait for it.
caf::result<proxy_status> erase_proxy(fleet_pointer self, const std::string& name) {
  if (!self->state.proxies.contains(name))
    return make_error(ec::unknown_name, "no proxy named \"" + name + "\"");
  auto rp = self->make_response_promise<proxy_status>();
  drain_then(self, {name}, [self, rp](const std::string& n) mutable {
    auto& st = self->state;
    auto i = st.proxies.find(n);
    if (i == st.proxies.end()) {
      rp.deliver(make_error(ec::unknown_name, "proxy \"" + n + "\" retired meanwhile"));
      return;
    }
    auto proxy = i->second;
    st.proxies.erase(i);
    st.retiring.erase(n);
    self->send(st.health, atom::forget_v, n);
    rp.delegate(proxy, atom::erase_v);
  });
  return rp;
}

caf::result<proxy_status> reconcile_proxy(fleet_pointer self, const std::string& name) {
  auto& st = self->state;
  auto i = st.proxies.find(name);
  if (i == st.proxies.end())
    return make_error(ec::unknown_name, "no proxy named \"" + name + "\"");
  self->send(i->second, atom::reconcile_v);
  auto v = st.view.proxies().find(name);
  if (v != st.view.proxies().end())
    return v->second;
  proxy_status s;
  s.name = name;
  return s;
}

// Kills first, so that no detached call stays blocked on a dead host and
// the actor system's final join cannot hang (invariant 15). An image's exit
// gives its fill up (transports killed, download cancelled), so a 20-minute
// upload does not hold the shutdown.
void shut_down(fleet_pointer self) {
  auto& st = self->state;
  st.stopping = true;
  log::info(to_string(actor_kind::fleet), "shutting down: killing " + std::to_string(st.links.size())
                       + " link(s) first");
  // The lease is revoked (the other nodes take the hosts at once); the
  // cluster actor quits once the store answered or the request timed out.
  if (st.cluster)
    caf::anon_send(st.cluster, atom::shutdown_v);
  for (auto& [_, l] : st.links)
    self->send(l, atom::kill_v, std::string{"engine shutdown"});
  for (auto& [_, i] : st.images)
    self->send_exit(i, caf::exit_reason::user_shutdown);
  for (auto& [_, p] : st.proxies)
    self->send_exit(p, caf::exit_reason::user_shutdown);
  for (auto& [_, h] : st.handovers)
    self->send_exit(h.original ? h.original : h.replacement, caf::exit_reason::user_shutdown);
  for (auto& [_, l] : st.links)
    self->send_exit(l, caf::exit_reason::user_shutdown);
  self->send_exit(st.health, caf::exit_reason::user_shutdown);
  if (st.gateway)
    self->send_exit(st.gateway, caf::exit_reason::user_shutdown);
  self->quit();
}

// Its actors, from the config: a link per host, the health actor, the
// gateway (when configured), a proxy per declared proxy; then a first
// collection pass if GC is on.
void start_fleet(fleet_pointer self, engine_config cfg, fleet_hooks hooks) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  st.name = actor_name(actor_kind::fleet, st.cfg.entry);
  st.hooks = std::move(hooks);
  if (!st.hooks.make_transport)
    st.hooks.make_transport = transport_for;
  if (!st.hooks.make_prober)
    st.hooks.make_prober = prober_for;
  st.book = std::make_shared<host_book>();
  // Members are placed once their hosts are surveyed (regroup).
  st.declared = st.cfg;
  // In a cluster no host is this node's until the cluster says so.
  if (st.declared.cluster.enabled) {
    start_cluster(self);
    st.cfg = running_config(st);
  }
  index_specs(st);
  st.groups.configure(st.declared, std::chrono::steady_clock::now());
  for (auto& h : st.cfg.hosts)
    spawn_link(self, h);
  spawn_health(self);
  if (st.cfg.gateway.enabled)
    spawn_gateway(self);
  for (auto& p : st.cfg.proxies)
    spawn_proxy(self, p);
  log::info(to_string(actor_kind::fleet), st.cfg.entry + ": " + std::to_string(st.links.size())
                       + " host(s), " + std::to_string(st.proxies.size())
                       + " proxy(ies)");
  if (st.cfg.gc)
    self->send(self, atom::gc_v, atom::poll_v);
  self->send(self, atom::place_v, atom::poll_v);
  keep_staged_images(self);
}

// A watcher or a follower that went away (a shell that quit or lost its
// connection, the HTTP listener at exit); any other child's unexpected end
// is logged.
void on_down(fleet_pointer self, const caf::down_msg& msg) {
  if (self->state.silenced.erase(msg.source) > 0 || replacement_down(self, msg.source))
    return;
  if (self->state.cluster && msg.source == self->state.cluster.address()) {
    cluster_ended(self, msg.reason);
    return;
  }
  auto& ws = self->state.watchers;
  auto before = ws.size() + self->state.followers.size();
  std::erase_if(ws, [&](auto& w) { return w.address() == msg.source; });
  std::erase_if(self->state.followers, [&](auto& f) { return f.address() == msg.source; });
  if (ws.size() + self->state.followers.size() != before)
    return;
  if (self->state.stopping || !msg.reason || msg.reason == caf::exit_reason::user_shutdown)
    return;
  log::error(to_string(actor_kind::fleet), "a child actor ended unexpectedly: " + caf::to_string(msg.reason));
}

// A reload's answer: what changed, or why nothing did (an invalid config,
// or one that changes what cannot change while running).
caf::result<std::string> reload_fleet(fleet_pointer self, engine_config next) {
  auto& st = self->state;
  if (st.stopping)
    return make_error(ec::shutting_down, "the engine is stopping");
  auto r = apply(self, std::move(next));
  if (!r) {
    st.view.reload_rejected(render(r.error()));
    log::error(to_string(actor_kind::fleet), "reload " + st.view.last_reload());
    return r.error();
  }
  return *r;
}

// The collection's timer: retried soon until one pass succeeded
// everywhere, then periodic.
void gc_tick(fleet_pointer self) {
  if (!self->state.cfg.gc || self->state.stopping)
    return;
  run_gc(self, [self](std::vector<gc_report>) {
    auto next = self->state.gc_done ? caf::timespan{gc_period} : caf::timespan{gc_retry};
    if (!self->state.stopping)
      self->delayed_send(self, next, atom::gc_v, atom::poll_v);
  });
}

// A proxy's push. Pushes from a retired actor (a removed or replaced
// proxy, or one erased) must not resurrect its entry.
void take_proxy_status(fleet_pointer self, proxy_status& s) {
  auto& st = self->state;
  if (from_silenced(self) || take_replacement_status(self, s))
    return;
  auto i = st.proxies.find(s.name);
  auto sender = self->current_sender();
  // An older actor of that name (retired, its successor running): not news.
  if (i != st.proxies.end() && sender && sender->address() != i->second.address())
    return;
  if (i == st.proxies.end() && s.phase != proxy_phase::deleted
      && s.phase != proxy_phase::deleting)
    return;
  tell_health(self, s);
  record(self, std::move(s));
}

// A link's push: the health actor, owed collections and the group book
// hear of it; a link that came up is surveyed.
void take_link_status(fleet_pointer self, link_status& s) {
  auto& st = self->state;
  // A retired link's last words are not news, even when a new link of
  // that host runs (a reload changed its settings).
  auto link = st.links.find(s.host);
  auto sender = self->current_sender();
  if (link == st.links.end() || (sender && sender->address() != link->second.address()))
    return;
  self->send(st.health, s);
  if (st.cluster)
    self->send(st.cluster, s);
  collect_owed(self, s);
  auto seen = st.view.links().find(s.host);
  bool came_up = s.state == link_state::up
                 && (seen == st.view.links().end() || seen->second.state != link_state::up);
  auto host = s.host;
  st.groups.link_changed(host, s.state, std::chrono::steady_clock::now());
  record(self, std::move(s));
  // Only a host a group may use is surveyed: without groups the fleet
  // makes no call it did not make before.
  if (came_up && st.groups.listed(host)) {
    st.survey_owed.insert(host);
    survey_host(self, host);
  }
}

// `ls`: the actors the query names, and the members no host can take
// (answered for by the fleet itself).
std::vector<directory_row> listing(fleet_pointer self, const ls_query& query) {
  auto rows = directory_of(self->state, query);
  add_unplaced(rows, self->state, caf::actor_cast<caf::actor>(self), query);
  return rows;
}

fleet_status status_of(const fleet_state& st) {
  auto out = st.view.status(st.cfg.node, st.cfg.entry);
  out.groups = st.groups.status();
  out.replacements = st.groups.replacements();
  out.drains = drain_rows(st);
  if (st.clustered) {
    out.cluster = st.clustered->status;
    // The cluster's rotation, as the followers got it last.
    out.rotation.clear();
    for (auto& m : st.merged_last)
      out.rotation.push_back(m.name);
    out.generation = st.merged_generation;
  }
  return out;
}

std::string metrics_of(const fleet_state& st) {
  return st.view.metrics()
         + group_metrics(st.groups.status(), st.groups.replacements(), drain_rows(st))
         + (st.clustered ? cluster_metrics(st.clustered->status) : std::string{});
}

// The placement's tick: members placed, owed surveys and stale removals
// retried, drains advanced; then the next tick.
void place_tick_step(fleet_pointer self) {
  regroup(self);
  survey_owed(self);
  remove_stale(self);
  advance_drains(self);
  if (!self->state.stopping)
    self->delayed_send(self, place_tick, atom::place_v, atom::poll_v);
}

// A verdict of the health actor; a replacement's is the drain's.
void take_proxy_health(fleet_pointer self, proxy_health& h) {
  auto& st = self->state;
  if (take_replacement_health(self, h))
    return;
  if (!st.view.proxies().contains(h.name) && !st.proxies.contains(h.name))
    return;
  record(self, std::move(h));
}

} // namespace

fleet_actor::behavior_type make_fleet(fleet_pointer self, engine_config cfg,
                                      fleet_hooks hooks) {
  start_fleet(self, std::move(cfg), std::move(hooks));
  self->set_down_handler([self](const caf::down_msg& msg) { on_down(self, msg); });
  return {
    [self](atom::ls, const ls_query& query) { return listing(self, query); },
    [self](atom::status) { return status_of(self->state); },
    [self](atom::link, const std::string& host) -> caf::result<host_link_actor> {
      auto i = self->state.links.find(host);
      if (i == self->state.links.end())
        return make_error(ec::unknown_name, "no host named \"" + host + "\"");
      return i->second;
    },
    [self](atom::kill, const std::string& host) -> caf::result<link_status> {
      auto i = self->state.links.find(host);
      if (i == self->state.links.end())
        return make_error(ec::unknown_name, "no host named \"" + host + "\"");
      return self->delegate(i->second, atom::kill_v, std::string{"by operator"});
    },
    [self](atom::erase, const std::string& name) { return erase_proxy(self, name); },
    [self](atom::reload, engine_config& next) { return reload_fleet(self, std::move(next)); },
    [self](atom::gc) -> caf::result<std::vector<gc_report>> {
      auto rp = self->make_response_promise<std::vector<gc_report>>();
      run_gc(self, [rp](std::vector<gc_report> reports) mutable {
        rp.deliver(std::move(reports));
      });
      return rp;
    },
    [self](atom::gc, atom::poll) { gc_tick(self); },
    [self](atom::place, atom::poll) { place_tick_step(self); },
    [self](atom::drain, std::string& name, bool drained) -> caf::result<proxy_health> {
      if (!self->state.proxies.contains(name))
        return make_error(ec::unknown_name, "no proxy named \"" + name + "\"");
      return self->delegate(self->state.health, atom::drain_v, std::move(name), drained);
    },
    [self](atom::reconcile, std::string& name) { return reconcile_proxy(self, name); },
    [self](atom::cordon, const std::string& host, bool on) {
      return cordon_host(self, host, on);
    },
    [self](atom::erase, atom::poll, const std::string& member) { erase_original(self, member); },
    [self](atom::subscribe, engine_events_actor& w) {
      auto& ws = self->state.watchers;
      if (std::find(ws.begin(), ws.end(), w) != ws.end())
        return; // subscribed again after a reconnect: one copy of each event
      self->monitor(w);
      ws.push_back(std::move(w));
    },
    [self](atom::subscribe, rotation_events_actor& s) {
      self->state.subscribers.push_back(s);
      self->send(self->state.health, atom::subscribe_v, std::move(s));
    },
    [self](atom::subscribe, rotation_follower_actor& f) { add_follower(self, std::move(f)); },
    [self](atom::rotation) { return *followed_rotation(self->state); },
    [self](atom::rotation, atom::poll) { publish_rotation(self); },
    [self](gateway_status& s) {
      // A replaced gateway's last words are not news.
      if (self->state.gateway
          && self->current_sender() == caf::actor_cast<caf::strong_actor_ptr>(self->state.gateway))
        record(self, std::move(s));
    },
    [self](atom::shutdown) {
      shut_down(self);
      return true;
    },
    [self](atom::metrics) { return metrics_of(self->state); },
    [self](link_down& ev) {
      log::warn(to_string(actor_kind::fleet), "link_down " + ev.host + ": " + ev.reason);
    },
    [self](link_status& s) { take_link_status(self, s); },
    [self](proxy_status& s) { take_proxy_status(self, s); },
    [self](image_status& s) {
      if (!self->state.images.contains(s.image + "@" + s.host))
        return;
      record(self, std::move(s));
    },
    [self](proxy_health& h) { take_proxy_health(self, h); },
    [self](atom::superseded, std::string& host, int64_t token) {
      if (self->state.cluster)
        self->send(self->state.cluster, atom::superseded_v, std::move(host), token);
    },
    [self](cluster_snapshot& v) { take_cluster_view(self, std::move(v)); },
  };
}

} // namespace egress
