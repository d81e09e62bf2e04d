#include "actors/proxy.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <random>
#include <utility>

#include "actors/parts/link_call.hpp"
#include "base/ids.hpp"
#include "base/log.hpp"
#include "base/time_text.hpp"
#include "messages/error.hpp"
#include "providers/libvirt/domain_xml.hpp"
#include "providers/libvirt/domains.hpp"
#include "providers/mirror/sha256.hpp"
#include "providers/provision/proxy_vm.hpp"

namespace egress {

std::string spec_hash(const proxy_spec& spec, const std::string& domain_type,
                      const std::string& image_sha256, const std::string& kernel_sha256,
                      const std::string& initrd_sha256) {
  // A canonical, unambiguous text: each field on its own line, tags in order.
  std::string text = "v1\n" + spec.name + "\n" + domain_type + "\n"
                     + std::to_string(spec.vcpus) + "\n"
                     + std::to_string(spec.memory_mib) + "\n" + spec.network + "\n";
  for (auto& t : spec.tags)
    text += "tag:" + t + "\n";
  // Appended only with an image, so that image-less specs keep their hashes.
  if (!spec.image.empty() || !spec.kernel.empty())
    text += "image:" + spec.image + "\nport:" + std::to_string(spec.port)
            + "\nallow-from:" + spec.allow_from + "\n";
  // A new base image (same name, new digest) means a new VM, too.
  if (!image_sha256.empty())
    text += "image-sha256:" + image_sha256 + "\n";
  if (!spec.kernel.empty())
    text += "kernel:" + spec.kernel + "\nkernel-sha256:" + kernel_sha256 + "\ninitrd:"
            + spec.initrd + "\ninitrd-sha256:" + initrd_sha256 + "\ncmdline:" + spec.cmdline
            + "\n";
  return mirror::sha256_hex(text);
}

bool proxy_may_move(proxy_activity from, proxy_activity to) {
  using a = proxy_activity;
  switch (from) {
    case a::idle:
      return true;
    case a::first_look:
      return to == a::idle || to == a::reading || to == a::erasing;
    case a::reading:
    case a::creating:
    case a::starting:
    case a::replacing:
      return to == a::idle;
    case a::awaiting_images:
      return to == a::idle || to == a::erasing;
    case a::erasing:
      return to == a::erasing || to == a::idle || to == a::awaiting_images;
  }
  return false;
}

namespace {

// What counts as a change worth pushing to the sink (the fleet's view, the
// rotation, watchers): defined once, here.
bool worth_pushing(const proxy_status& a, const proxy_status& b) {
  return a.phase != b.phase || a.address != b.address || a.last_error != b.last_error
         || a.uid != b.uid || a.adopted != b.adopted || a.grace_left != b.grace_left
         || a.replaced != b.replaced;
}

// Running on an address it read back, outside its IP grace: nothing to wait
// for, so no timer; its link's events and bulk reads say when to look again.
bool settled(const proxy_state& st) {
  return st.status.phase == proxy_phase::running && st.status.grace_left == 0;
}

bool lease_first(const proxy_state& st) {
  return !st.opts.address_sources.empty() && st.opts.address_sources.front() == "lease";
}

// Its domain runs (as last seen) and it has no address, or keeps its last
// one inside the IP grace: an address is what it waits for.
bool waits_for_address(const proxy_state& st) {
  auto phase = st.status.phase;
  return st.domain_runs && !settled(st)
         && (phase == proxy_phase::provisioning || phase == proxy_phase::running);
}

// The link brings its address: one lease list per network for the host
// (docs/spec.md 28), so no poll of its own while it waits for one.
bool link_brings_address(const proxy_state& st) {
  return lease_first(st) && !st.macs.empty() && st.link_leases == lease_view::read;
}

// The link learns its MACs once and each change of its wait.
void tell_link(proxy_pointer self) {
  auto& st = self->state;
  if (!lease_first(st) || st.macs.empty())
    return;
  bool waiting = waits_for_address(st);
  if (st.macs_told && st.waiting_told == waiting)
    return;
  st.macs_told = true;
  st.waiting_told = waiting;
  self->send(st.opts.link, address_watch{st.opts.spec.name, st.macs, waiting});
}

// Whether a transition pushes its status: when it changed in a way that
// matters, or always (the answer to an operator's reconcile).
enum class push : uint8_t { if_changed, always };

// Every status change reaches the sink through here: compared with what the
// sink last received, so a change is pushed once, wherever it was made.
void publish(proxy_pointer self, push mode = push::if_changed) {
  auto& st = self->state;
  if ((mode == push::always || worth_pushing(st.status, st.pushed)) && st.opts.sink) {
    self->send(st.opts.sink, st.status);
    st.pushed = st.status;
    ++st.pushes;
  }
  tell_link(self);
}

void raise_pending(proxy_state& st, proxy_pending p) {
  st.pending = std::max(st.pending, p);
}

void learn_macs(proxy_state& st, std::vector<std::string>& macs) {
  if (macs.empty() || macs == st.macs)
    return;
  st.macs = std::move(macs);
  st.macs_told = false;
}

// Another domain has its name now: its MACs are unknown until a read-back
// finds the new one ours, and the link must not look up the old ones' leases.
void forget_macs(proxy_pointer self) {
  auto& st = self->state;
  if (st.macs_told)
    self->send(st.opts.link, address_watch{st.opts.spec.name, {}, false});
  st.macs.clear();
  st.macs_told = false;
  st.waiting_told = false;
}

void poll(proxy_pointer self);

// No libvirt step in flight: idle, or waiting for its first look (which is
// the link's read, not its own).
bool between_steps(const proxy_state& st) {
  return st.activity == proxy_activity::idle || st.activity == proxy_activity::first_look;
}

// The poll timer runs only while the proxy is not settled and no lease list
// of its link brings the address it waits for (one timer at a time).
bool polls_itself(const proxy_state& st) {
  return !settled(st) && !(waits_for_address(st) && link_brings_address(st));
}

void arm_poll(proxy_pointer self) {
  auto& st = self->state;
  if (st.poll_armed || !polls_itself(st) || st.activity == proxy_activity::erasing)
    return;
  st.poll_armed = true;
  self->delayed_send(self, st.opts.poll_interval, atom::poll_v);
}

void erase(proxy_pointer self);

// Every move of the machine goes through here, and only here is the
// activity changed: from `from` (the step this answers, or the activity a
// step begins from) to `next` (proxy_may_move in actors/proxy.hpp lists
// them); `change` edits the status and may begin the next step; the status
// is pushed if it changed; a proxy left idle takes what was pending (an
// erase first, else a read-back) or arms its poll timer if it is not
// settled. A proxy no longer in `from` ignores the call: a step overtaken
// by an erase changes nothing when it answers late.
template <class Change>
void transition(proxy_pointer self, proxy_activity from, proxy_activity next, Change&& change,
                push mode = push::if_changed) {
  auto& st = self->state;
  if (st.activity != from)
    return;
  if (!proxy_may_move(from, next)) {
    log::error(to_string(actor_kind::proxy), st.opts.spec.name + ": no move from activity "
                          + std::to_string(static_cast<int>(from)) + " to "
                          + std::to_string(static_cast<int>(next)));
    return;
  }
  st.activity = next;
  // An erase waited for this step: what the step found no longer matters.
  if (next == proxy_activity::idle && st.pending == proxy_pending::erase) {
    st.pending = proxy_pending::none;
    erase(self);
    return;
  }
  auto pushes = st.pushes;
  change();
  // A step that `change` began (a read that finds its domain missing goes
  // on to create it) pushed the status already: one push per answer.
  if (st.pushes == pushes)
    publish(self, mode);
  if (st.activity != proxy_activity::idle)
    return;
  if (st.pending != proxy_pending::none) {
    poll(self);
    return;
  }
  arm_poll(self);
}

// A step begins between steps (or, an erase, while images are awaited).
template <class Change>
void begin_step(proxy_pointer self, proxy_activity step, Change&& change) {
  transition(self, self->state.activity, step, std::forward<Change>(change));
}

// A step whose answer is a fresh look at the domain (a read, a create, a
// start followed by a read): bulk-read briefs taken before it are stale.
void begin_looking(proxy_pointer self, proxy_activity step) {
  begin_step(self, step, [&st = self->state] {
    st.last_read_at = std::chrono::steady_clock::now().time_since_epoch();
  });
}

void record_error(proxy_pointer self, const caf::error& err, bool permanent_fails) {
  auto& st = self->state;
  st.status.last_error = render(err);
  st.status.last_error_kind = to_string(kind_of(err));
  // Invariant 10: a transient error never latches a proxy as failed.
  if (permanent_fails && kind_of(err) != error_kind::transient)
    st.status.phase = proxy_phase::failed;
  log::warn(to_string(actor_kind::proxy), st.opts.spec.name + ": " + st.status.last_error);
}

std::vector<lv::address_source> sources_of(const std::vector<std::string>& names) {
  std::vector<lv::address_source> out;
  for (auto& n : names)
    if (auto s = lv::parse_address_source(n))
      out.push_back(*s);
  return out;
}

void create(proxy_pointer self);
void replace(proxy_pointer self, const domain_reading& r);
void start(proxy_pointer self);

// A running proxy that reads back without an address (a lease that expired
// with the VM still serving, an address source that blinked, a pause) keeps
// its last address and its running phase for a grace of N read-backs before
// it is demoted (docs/spec.md 11, docs/notes/failures.md#ip-grace): a
// rotation must not flap on one bad read. True while it keeps them.
bool keep_in_grace(proxy_state& st) {
  auto& s = st.status;
  if (s.phase != proxy_phase::running || s.address.empty())
    return false;
  if (s.grace_left == 0) {
    if (st.opts.address_grace == 0)
      return false;
    s.grace_left = st.opts.address_grace;
    log::warn(to_string(actor_kind::proxy), st.opts.spec.name + ": reads back without an address; keeping "
                         + s.address + " for " + std::to_string(s.grace_left)
                         + " read-back(s)");
    return true;
  }
  if (s.grace_left > 1) {
    --s.grace_left;
    return true;
  }
  log::warn(to_string(actor_kind::proxy), st.opts.spec.name + ": still no address after the grace; demoted");
  s.grace_left = 0;
  return false;
}

void apply_reading(proxy_pointer self, domain_reading& r) {
  auto& st = self->state;
  auto& s = st.status;
  st.domain_runs = r.exists
                   && (r.state == domain_state::running || r.state == domain_state::blocked);
  if (!r.exists) {
    if (s.phase == proxy_phase::running || s.phase == proxy_phase::provisioning)
      log::warn(to_string(actor_kind::proxy), st.opts.spec.name + ": domain vanished; recreating");
    if (!st.create_failed)
      create(self);
    return;
  }
  if (!r.has_mark || r.mark.entry != st.opts.entry) {
    // Never touch what is not ours: a same-named domain without our mark (or
    // with another entry's mark) belongs to someone else.
    auto owner = r.has_mark ? "entry \"" + r.mark.entry + "\"" : std::string{"no egress mark"};
    record_error(self,
                 make_error(ec::foreign_domain,
                            st.opts.spec.name + ": a domain with this name exists on "
                              + st.opts.spec.host + " with " + owner
                              + "; refusing to touch it"),
                 true);
    return;
  }
  if (st.opts.token > 0 && r.mark.token > st.opts.token) {
    // Another node claimed the host after this node did: its claim is the
    // one that counts, whatever this node last heard from the store.
    record_error(self,
                 make_error(ec::superseded,
                            st.opts.spec.name + ": the domain's mark carries token "
                              + std::to_string(r.mark.token) + " of node \"" + r.mark.owner
                              + "\", newer than this node's " + std::to_string(st.opts.token)
                              + "; refusing to touch it"),
                 true);
    if (st.opts.sink)
      self->send(st.opts.sink, atom::superseded_v, st.opts.spec.host, r.mark.token);
    return;
  }
  if (r.mark.spec_hash != st.spec_hash) {
    replace(self, r);
    return;
  }
  if (!st.created_by_us && s.uid.empty()) {
    s.adopted = true;
    log::info(to_string(actor_kind::proxy), st.opts.spec.name + ": adopted by mark uid=" + r.mark.uid);
  }
  learn_macs(st, r.macs);
  st.domain_uuid = r.uuid;
  s.uid = r.mark.uid;
  s.created_at = r.mark.created_at;
  s.last_error.clear();
  s.last_error_kind.clear();
  switch (r.state) {
    case domain_state::running:
    case domain_state::blocked:
      if (!r.addresses.empty()) {
        s.address = r.addresses.front();
        s.phase = proxy_phase::running;
        s.grace_left = 0;
      } else if (!keep_in_grace(st)) {
        s.address.clear();
        s.phase = proxy_phase::provisioning;
      }
      break;
    case domain_state::shutoff:
    case domain_state::crashed:
    case domain_state::shutdown:
      start(self);
      break;
    default:
      if (!keep_in_grace(st)) {
        s.address.clear();
        s.phase = proxy_phase::provisioning;
      }
  }
}

// The image actors this proxy boots from, by role.
std::vector<std::pair<std::string, image_actor>> image_roles(const proxy_state& st) {
  std::vector<std::pair<std::string, image_actor>> out;
  for (auto& [role, actor] : {std::pair{"disk", st.opts.image},
                              std::pair{"kernel", st.opts.kernel},
                              std::pair{"initrd", st.opts.initrd}})
    if (actor)
      out.emplace_back(role, actor);
  return out;
}

// The images this proxy boots from, by role, that are not verified yet.
std::vector<std::pair<std::string, image_actor>> missing_images(proxy_pointer self) {
  auto out = image_roles(self->state);
  std::erase_if(out, [&](auto& r) { return self->state.ready.contains(r.first); });
  return out;
}

// A create or start found one of its images gone from the pool: the image
// actors remember them as verified until told, and so does this proxy. Both
// forget; the next create or start ensures them again, which checks the
// pool and fetches what is missing.
void forget_images(proxy_pointer self) {
  auto& st = self->state;
  for (auto& [role, actor] : image_roles(st))
    if (auto r = st.ready.find(role); r != st.ready.end())
      self->send(actor, atom::forget_v, r->second.volume);
  st.ready.clear();
}

// The cached image volumes the proxy's domain boots from, as last ensured.
std::vector<std::string> image_volumes(const proxy_state& st) {
  std::vector<std::string> out;
  for (auto& [role, ready] : st.ready)
    out.push_back(ready.volume);
  return out;
}

bool uses_images(const proxy_state& st) {
  return st.opts.image || st.opts.kernel;
}

// Waits for the images the proxy boots from (one transfer for all proxies on
// the host that need one, run by its image actor) and creates the domain once
// all are verified in the pool. The proxy stays pending meanwhile: a
// transient image failure is retried by the next poll, a permanent one is
// shown as the proxy's error.
void ensure_images_then(proxy_pointer self, void (*next)(proxy_pointer)) {
  auto& st = self->state;
  auto missing = missing_images(self);
  begin_step(self, proxy_activity::awaiting_images,
             [&] { st.ensures_left = static_cast<uint32_t>(missing.size()); });
  auto one_done = [self, next] {
    auto& st = self->state;
    if (--st.ensures_left > 0)
      return;
    transition(self, proxy_activity::awaiting_images, proxy_activity::idle, [self, next] {
      if (missing_images(self).empty())
        next(self);
    });
  };
  for (auto& [role, actor] : missing)
    self->request(actor, st.opts.image_timeout, atom::ensure_v)
      .then(
        [self, role = role, one_done](image_ready& r) {
          auto& st = self->state;
          log::info(to_string(actor_kind::proxy), st.opts.spec.name + ": " + role + " image ready as " + r.volume);
          st.ready[role] = std::move(r);
          one_done();
        },
        [self, one_done](caf::error& err) {
          // Never latches: a permanent image error is fixed by a config
          // change, and the image actor answers it at once until then.
          record_error(self, err, false);
          publish(self);
          one_done();
        });
}

domain_spec domain_of(const proxy_state& st) {
  domain_spec ds;
  ds.name = st.opts.spec.name;
  ds.domain_type = st.opts.domain_type;
  ds.vcpus = st.opts.spec.vcpus;
  ds.memory_mib = st.opts.spec.memory_mib;
  ds.network = st.opts.spec.network;
  if (!ds.network.empty()) {
    // Chosen here, so the proxy knows its lease's MAC without a read.
    thread_local std::minstd_rand rng{std::random_device{}()};
    ds.mac = lv::random_mac(rng);
  }
  if (!st.opts.console_log_dir.empty())
    ds.console_log = st.opts.console_log_dir + "/" + st.opts.spec.name + ".console.log";
  ds.mark.uid = new_uid();
  ds.mark.created_at = now_rfc3339();
  ds.mark.entry = st.opts.entry;
  ds.mark.spec_hash = st.spec_hash;
  ds.mark.host = st.opts.spec.host;
  ds.mark.tags = st.opts.spec.tags;
  if (st.opts.token > 0) {
    ds.mark.owner = st.opts.owner;
    ds.mark.token = st.opts.token;
  }
  return ds;
}

using create_job = std::function<caf::expected<domain_reading>(lv::connection&)>;

// The create as one job: the domain alone, or (with images) overlay on the
// cached image (if it has a disk), the kernel and initrd by path (kernel
// boot), cloud-init seed, then the domain.
caf::expected<create_job> create_job_of(proxy_state& st) {
  auto ds = domain_of(st);
  auto sources = sources_of(st.opts.address_sources);
  if (!uses_images(st))
    return create_job{[ds, sources](lv::connection& c) {
      return lv::define_and_start(c, ds, sources);
    }};
  if (auto k = st.ready.find("kernel"); k != st.ready.end()) {
    ds.kernel = k->second.path;
    ds.cmdline = st.opts.spec.cmdline;
  }
  if (auto i = st.ready.find("initrd"); i != st.ready.end())
    ds.initrd = i->second.path;
  auto seed = cloudinit::render_seed({ds.mark.uid, st.opts.spec.name,
                                      static_cast<uint16_t>(st.opts.spec.port),
                                      st.opts.spec.allow_from});
  if (!seed)
    return seed.error();
  provision::vm_request req;
  req.pool = st.opts.pool;
  if (auto d = st.ready.find("disk"); d != st.ready.end()) {
    req.base_path = d->second.path;
    req.base_size = d->second.virtual_size;
  }
  req.base_format = st.opts.image_format;
  req.volumes = provision::proxy_volumes::of(st.opts.entry, st.opts.spec.name);
  req.seed = std::move(*seed);
  req.domain = ds;
  req.sources = sources;
  req.images = image_volumes(st);
  return create_job{[req](lv::connection& c) { return provision::create_vm(c, req); }};
}

// Restart policy: a VM of ours that stopped out of band is started again.
// Its address is read back after (the start's event, or this read).
void start(proxy_pointer self) {
  auto& st = self->state;
  if (!missing_images(self).empty()) {
    // Forgotten after a step found one gone: the domain boots from the same
    // paths once the image is back, so it is started, not replaced.
    ensure_images_then(self, start);
    return;
  }
  st.status.phase = proxy_phase::creating;
  st.status.address.clear();
  st.status.grace_left = 0;
  begin_looking(self, proxy_activity::starting);
  auto name = st.opts.spec.name;
  link_call<void>(
    self, st.opts.link, st.opts.call_timeout, "start " + name,
    [name, pool = st.opts.pool, images = image_volumes(st)](lv::connection& c) {
      return provision::start_vm(c, name, pool, images);
    },
    [self] {
      // Started: what it runs as (and its address) is the next read's.
      raise_pending(self->state, proxy_pending::read);
      transition(self, proxy_activity::starting, proxy_activity::idle, [] {});
    },
    [self](const caf::error& err) {
      transition(self, proxy_activity::starting, proxy_activity::idle, [&] {
        if (is(err, ec::image_gone))
          forget_images(self);
        record_error(self, err, false);
      });
    });
}

void create(proxy_pointer self) {
  auto& st = self->state;
  if (!missing_images(self).empty()) {
    ensure_images_then(self, create);
    return;
  }
  auto job = create_job_of(st);
  if (!job) {
    st.create_failed = true;
    record_error(self, job.error(), true);
    return;
  }
  st.status.phase = proxy_phase::creating;
  begin_looking(self, proxy_activity::creating);
  link_call<domain_reading>(
    self, st.opts.link, st.opts.call_timeout, "create " + st.opts.spec.name, std::move(*job),
    [self](domain_reading& r) {
      transition(self, proxy_activity::creating, proxy_activity::idle, [&] {
        self->state.created_by_us = true;
        self->state.status.adopted = false;
        log::info(to_string(actor_kind::proxy), self->state.opts.spec.name + ": created uid=" + r.mark.uid);
        apply_reading(self, r);
      });
    },
    [self](const caf::error& err) {
      transition(self, proxy_activity::creating, proxy_activity::idle, [&] {
        if (is(err, ec::image_gone))
          forget_images(self);
        if (kind_of(err) == error_kind::transient)
          self->state.status.phase = proxy_phase::pending;
        else
          self->state.create_failed = true;
        record_error(self, err, true);
      });
    },
    true);
}

// Destroys and undefines the domain and deletes its overlay and seed (if it
// ever had them: missing is fine), through the host's link.
template <class OnOk, class OnErr>
void remove_vm(proxy_pointer self, const std::string& verb, OnOk on_ok, OnErr on_err) {
  auto& st = self->state;
  auto name = st.opts.spec.name;
  auto pool = st.opts.pool;
  auto vols = provision::proxy_volumes::of(st.opts.entry, name);
  link_call<void>(
    self, st.opts.link, st.opts.call_timeout, verb + " " + name,
    [name, pool, vols](lv::connection& c) {
      return provision::delete_vm(c, name, pool, vols);
    },
    std::move(on_ok), std::move(on_err));
}

// The declared spec no longer matches the one the VM was made from (its
// mark's spec hash): a VM's shape cannot be changed in place without a
// reboot and a changed seed, so it is deleted with its volumes and created
// again from the declared spec, under a new uid.
void replace(proxy_pointer self, const domain_reading& r) {
  auto& st = self->state;
  auto& s = st.status;
  log::info(to_string(actor_kind::proxy), st.opts.spec.name + ": spec changed (VM uid=" + r.mark.uid
                       + " was made from spec " + r.mark.spec_hash.substr(0, 12)
                       + ", declared is " + st.spec_hash.substr(0, 12) + "); replacing it");
  begin_step(self, proxy_activity::replacing, [&] {
    s.phase = proxy_phase::creating;
    s.address.clear();
    s.grace_left = 0;
    ++s.replaced;
  });
  constexpr auto step = proxy_activity::replacing;
  remove_vm(
    self, "replace",
    [self] { transition(self, step, proxy_activity::idle, [self] { create(self); }); },
    [self](const caf::error& err) {
      transition(self, step, proxy_activity::idle, [&] { record_error(self, err, false); });
    });
}

// A read-back answered (the domain or an error): counted with its time.
void count_read(proxy_state& st, uint32_t took_ms) {
  ++st.status.polls;
  st.status.last_poll_ms = took_ms;
}

// One read-back now, or (a step in flight) right after that step.
void poll(proxy_pointer self) {
  auto& st = self->state;
  if (st.activity == proxy_activity::erasing || st.pending == proxy_pending::erase)
    return;
  if (!between_steps(st)) {
    raise_pending(st, proxy_pending::read);
    return;
  }
  // Taken when the read begins, not when it was asked: a step (or a read)
  // already in flight pushes its own result, not the operator's.
  auto mode = st.pending == proxy_pending::reconcile ? push::always : push::if_changed;
  st.pending = proxy_pending::none;
  begin_looking(self, proxy_activity::reading);
  auto name = st.opts.spec.name;
  auto sources = sources_of(st.opts.address_sources);
  bool with_macs = lease_first(st) && st.macs.empty();
  auto t0 = std::chrono::steady_clock::now();
  auto took = [t0] {
    return static_cast<uint32_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::steady_clock::now() - t0)
                                   .count());
  };
  link_call<domain_reading>(
    self, st.opts.link, st.opts.call_timeout, "read " + name,
    [name, sources, with_macs, entry = st.opts.entry, owner = st.opts.owner,
     token = st.opts.token](lv::connection& c) {
      if (token > 0)
        return lv::read_and_stamp(c, name, sources, with_macs, entry, owner, token);
      return lv::read_domain(c, name, sources, with_macs);
    },
    [self, took, mode](domain_reading& r) {
      transition(self, proxy_activity::reading, proxy_activity::idle, [&] {
        count_read(self->state, took());
        apply_reading(self, r);
      }, mode);
    },
    [self, took, mode](const caf::error& err) {
      transition(self, proxy_activity::reading, proxy_activity::idle, [&] {
        count_read(self->state, took());
        record_error(self, err, false);
      }, mode);
    });
}

// The link says the domain changed. A change that ends its running takes
// the proxy out of running at once (out of the rotation), before the read
// that decides what to do; a pause does not: that is the IP grace's case.
void on_domain_event(proxy_pointer self, const domain_event& ev) {
  auto& st = self->state;
  if (st.activity == proxy_activity::erasing || st.pending == proxy_pending::erase)
    return;
  log::info(to_string(actor_kind::proxy), st.opts.spec.name + ": domain " + to_string(ev.change) + " on "
                       + ev.host);
  if (ends_running(ev.change))
    st.domain_runs = false;
  if (ends_running(ev.change) && st.status.phase == proxy_phase::running) {
    // Not a step (the read below is): only the status changes here.
    st.status.phase = proxy_phase::provisioning;
    st.status.address.clear();
    st.status.grace_left = 0;
    publish(self);
  }
  bool news = ends_running(ev.change) || ev.change == domain_change::undefined
              || ev.change == domain_change::suspended
              || ev.change == domain_change::pmsuspended
              || ev.change == domain_change::agent || ev.change == domain_change::other
              || ev.change == domain_change::metadata;
  // Defined, started, resumed: mostly the echo of its own create or start.
  // Settled, or with a step in flight, it has nothing to learn from them.
  if (news || (st.activity == proxy_activity::idle && !settled(st)))
    poll(self);
}

// A brief's leased addresses, for a proxy whose domain (read back, ours)
// runs. Its address stays while it is still leased to it (a MAC with two
// leases must not flip it). No lease: with another source configured
// (agent, arp) a proxy without its address reads the domain for it (the
// grace counts that read), and a settled one keeps what it has; with the
// lease alone it is one read without an address (the IP grace, spec 11).
void take_leased(proxy_pointer self, const std::vector<std::string>& addresses) {
  auto& st = self->state;
  transition(self, proxy_activity::idle, proxy_activity::idle, [&] {
    auto& s = st.status;
    if (!addresses.empty()) {
      if (std::find(addresses.begin(), addresses.end(), s.address) == addresses.end()) {
        if (!s.address.empty())
          log::info(to_string(actor_kind::proxy), st.opts.spec.name + ": its lease moved from " + s.address
                               + " to " + addresses.front());
        s.address = addresses.front();
      }
      s.phase = proxy_phase::running;
      s.grace_left = 0;
      return;
    }
    if (st.opts.address_sources.size() > 1) {
      if (!settled(st))
        raise_pending(st, proxy_pending::read);
      return;
    }
    if (s.phase == proxy_phase::running && !keep_in_grace(st)) {
      s.address.clear();
      s.phase = proxy_phase::provisioning;
    }
  });
}

// Its link's first bulk read since it subscribed: a missing domain is
// created at once, without a read of its own; one that exists is read back
// (a brief has no mark: whose it is, and from which spec, is in the domain).
void take_first_look(proxy_pointer self, const domain_brief& b) {
  if (b.exists) {
    poll(self);
    return;
  }
  domain_reading missing;
  missing.name = b.name;
  missing.exists = false;
  transition(self, proxy_activity::first_look, proxy_activity::idle,
             [&] { apply_reading(self, missing); });
}

// The link's bulk read says what the host has under this proxy's name. A
// proxy that believes its domain runs reads back when it does not (or it is
// another domain by now, a new uuid): an event was missed. With the host's
// leases read, a brief of its running domain brings its address (docs/spec.md
// 28); a host that cannot list them (or failed to) leaves it to poll.
void on_domain_brief(proxy_pointer self, domain_brief& b) {
  auto& st = self->state;
  if (b.taken < st.last_read_at)
    return; // read before this proxy's own last look at its domain
  if (b.leases != lease_view::not_read)
    st.link_leases = b.leases;
  if (st.activity == proxy_activity::first_look) {
    take_first_look(self, b);
    return;
  }
  bool runs = b.exists && (b.state == domain_state::running || b.state == domain_state::blocked);
  bool other_domain = b.exists && !st.domain_uuid.empty() && b.uuid != st.domain_uuid;
  if (!runs || other_domain) {
    bool believed = std::exchange(st.domain_runs, false);
    if (other_domain)
      forget_macs(self);
    if (!believed && !settled(st)) {
      // It did not count on it: its own timer reads (armed when its step
      // in flight, if any, answers).
      if (st.activity == proxy_activity::idle)
        arm_poll(self);
      return;
    }
    log::warn(to_string(actor_kind::proxy), st.opts.spec.name + ": the bulk read finds its domain "
                         + (b.exists ? std::string{to_string(b.state)} : "missing")
                         + (other_domain ? " (another uuid)" : "") + "; reading it back");
    poll(self);
    return;
  }
  if (st.activity != proxy_activity::idle || st.pending == proxy_pending::erase)
    return;
  if (st.domain_runs && link_brings_address(st))
    take_leased(self, b.addresses);
  else
    arm_poll(self);
}

// Deletes the VM for good; the actor quits once it is gone. On failure the
// proxy goes on as before and every waiter hears why.
void erase(proxy_pointer self) {
  auto& st = self->state;
  begin_step(self, proxy_activity::erasing, [&] { st.status.phase = proxy_phase::deleting; });
  remove_vm(
    self, "delete",
    [self] {
      transition(self, proxy_activity::erasing, proxy_activity::erasing, [self] {
        self->state.status.phase = proxy_phase::deleted;
        self->state.status.address.clear();
      });
      for (auto& w : self->state.erase_waiters)
        w.deliver(self->state.status);
      self->quit();
    },
    [self](const caf::error& err) {
      // Back to what it did: idle, or still waiting for its images.
      auto& st = self->state;
      auto to = st.ensures_left > 0 ? proxy_activity::awaiting_images : proxy_activity::idle;
      transition(self, proxy_activity::erasing, to, [&] { record_error(self, err, false); });
      for (auto& w : self->state.erase_waiters)
        w.deliver(err);
      self->state.erase_waiters.clear();
    });
}

} // namespace

proxy_actor::behavior_type make_proxy(proxy_pointer self, proxy_options opts) {
  auto& st = self->state;
  st.opts = std::move(opts);
  st.name = actor_name(actor_kind::proxy, st.opts.spec.name);
  st.spec_hash = spec_hash(st.opts.spec, st.opts.domain_type, st.opts.image_sha256,
                           st.opts.kernel_sha256, st.opts.initrd_sha256);
  st.status.name = st.opts.spec.name;
  st.status.host = st.opts.spec.host;
  // Announce the proxy before its first read, so status lists it at once.
  publish(self, push::always);
  // Watch before the first look: a change after it is then reported. The
  // first look is the link's bulk read after this subscription, one for all
  // the proxies that start together (docs/spec.md 27); if it is late (a
  // link still dialing), the poll timer reads the domain itself.
  self->send(st.opts.link, atom::subscribe_v, st.opts.spec.name,
             caf::actor_cast<proxy_actor>(self));
  begin_looking(self, proxy_activity::first_look);
  arm_poll(self);
  return {
    [self](atom::status) { return self->state.status; },
    [self](atom::poll) {
      auto& st = self->state;
      st.poll_armed = false;
      // Mid-step it waits: the step's end reads back or arms it again.
      if (!between_steps(st))
        return;
      if (polls_itself(st))
        poll(self);
      arm_poll(self);
    },
    [self](atom::reconcile) {
      raise_pending(self->state, proxy_pending::reconcile);
      poll(self);
    },
    [self](domain_event& ev) { on_domain_event(self, ev); },
    [self](domain_brief& b) { on_domain_brief(self, b); },
    [self](atom::erase) -> caf::result<proxy_status> {
      auto& st = self->state;
      auto rp = self->make_response_promise<proxy_status>();
      st.erase_waiters.push_back(rp);
      if (st.activity == proxy_activity::erasing || st.pending == proxy_pending::erase)
        return rp;
      // Waiting for images is no libvirt step: nothing to race, and a fill
      // may take its whole budget. Their late answers change nothing then.
      if (between_steps(st) || st.activity == proxy_activity::awaiting_images) {
        erase(self);
        return rp;
      }
      // A step is in flight (a create, say): deleting now could race it and
      // leave a VM no proxy owns. The erase starts when the step answers.
      raise_pending(st, proxy_pending::erase);
      st.status.phase = proxy_phase::deleting;
      publish(self);
      return rp;
    },
  };
}

} // namespace egress
