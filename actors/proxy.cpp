#include "actors/proxy.hpp"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <random>

#include "actors/link_call.hpp"
#include "base/ids.hpp"
#include "base/log.hpp"
#include "base/time_text.hpp"
#include "messages/error.hpp"
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

namespace {

void publish(proxy_pointer self, const proxy_status& before) {
  auto& s = self->state.status;
  bool changed = s.phase != before.phase || s.address != before.address
                 || s.last_error != before.last_error || s.uid != before.uid
                 || s.adopted != before.adopted || s.grace_left != before.grace_left
                 || s.replaced != before.replaced;
  if ((changed || self->state.publish_next) && self->state.opts.sink)
    self->send(self->state.opts.sink, s);
  self->state.publish_next = false;
}

void schedule_poll(proxy_pointer self) {
  self->delayed_send(self, self->state.opts.poll_interval, atom::poll_v);
}

void record_error(proxy_pointer self, const caf::error& err, bool permanent_fails) {
  auto& st = self->state;
  st.status.last_error = render(err);
  st.status.last_error_kind = to_string(kind_of(err));
  // Invariant 10: a transient error never latches a proxy as failed.
  if (permanent_fails && kind_of(err) != error_kind::transient)
    st.status.phase = proxy_phase::failed;
  log::warn("proxy", st.opts.spec.name + ": " + st.status.last_error);
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

void apply_reading(proxy_pointer self, domain_reading& r) {
  auto& st = self->state;
  auto& s = st.status;
  if (!r.exists) {
    if (s.phase == proxy_phase::running || s.phase == proxy_phase::provisioning)
      log::warn("proxy", st.opts.spec.name + ": domain vanished; recreating");
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
  if (r.mark.spec_hash != st.spec_hash) {
    replace(self, r);
    return;
  }
  if (!st.created_by_us && s.uid.empty()) {
    s.adopted = true;
    log::info("proxy", st.opts.spec.name + ": adopted by mark uid=" + r.mark.uid);
  }
  s.uid = r.mark.uid;
  s.created_at = r.mark.created_at;
  s.last_error.clear();
  s.last_error_kind.clear();
  // A running proxy that reads back without an address (a lease that
  // expired with the VM still serving, an address source that blinked, a
  // pause) keeps its last address and its running phase for a grace of N
  // polls before it is demoted (docs/spec.md 11, docs/notes/failures.md#ip-grace): a
  // rotation must not flap on one bad read.
  auto keep_in_grace = [&] {
    if (s.phase != proxy_phase::running || s.address.empty())
      return false;
    if (s.grace_left == 0 && !st.in_grace) {
      if (st.opts.address_grace == 0)
        return false;
      st.in_grace = true;
      s.grace_left = st.opts.address_grace;
      log::warn("proxy", st.opts.spec.name + ": reads back without an address; keeping "
                           + s.address + " for " + std::to_string(s.grace_left) + " poll(s)");
      return true;
    }
    if (s.grace_left > 1) {
      --s.grace_left;
      return true;
    }
    log::warn("proxy", st.opts.spec.name + ": still no address after the grace; demoted");
    s.grace_left = 0;
    st.in_grace = false;
    return false;
  };
  switch (r.state) {
    case domain_state::running:
    case domain_state::blocked:
      if (!r.addresses.empty()) {
        s.address = r.addresses.front();
        s.phase = proxy_phase::running;
        s.grace_left = 0;
        st.in_grace = false;
      } else if (!keep_in_grace()) {
        s.address.clear();
        s.phase = proxy_phase::provisioning;
      }
      break;
    case domain_state::shutoff:
    case domain_state::crashed:
    case domain_state::shutdown: {
      // Restart policy: a VM of ours that stopped out of band is started again.
      s.phase = proxy_phase::creating;
      s.address.clear();
      auto name = st.opts.spec.name;
      st.busy = true;
      link_call<void>(
        self, st.opts.link, st.opts.call_timeout, "start " + name,
        [name](lv::connection& c) { return lv::start_domain(c, name); },
        [self] { self->state.busy = false; },
        [self](const caf::error& err) {
          self->state.busy = false;
          record_error(self, err, false);
        });
      break;
    }
    default:
      if (!keep_in_grace()) {
        s.address.clear();
        s.phase = proxy_phase::provisioning;
      }
  }
}

// The images this proxy boots from, by role, that are not verified yet.
std::vector<std::pair<std::string, image_actor>> missing_images(proxy_pointer self) {
  auto& st = self->state;
  std::vector<std::pair<std::string, image_actor>> out;
  for (auto& [role, actor] : {std::pair{"disk", st.opts.image},
                              std::pair{"kernel", st.opts.kernel},
                              std::pair{"initrd", st.opts.initrd}})
    if (actor && !st.ready.contains(role))
      out.emplace_back(role, actor);
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
void ensure_images_then_create(proxy_pointer self) {
  auto& st = self->state;
  if (st.waiting_image)
    return;
  auto missing = missing_images(self);
  st.waiting_image = true;
  st.busy = true;
  st.ensures_left = static_cast<uint32_t>(missing.size());
  auto one_done = [self] {
    auto& st = self->state;
    if (--st.ensures_left > 0)
      return;
    st.waiting_image = false;
    st.busy = false;
    if (missing_images(self).empty())
      create(self);
  };
  for (auto& [role, actor] : missing)
    self->request(actor, st.opts.image_timeout, atom::ensure_v)
      .then(
        [self, role = role, one_done](image_ready& r) {
          auto& st = self->state;
          log::info("proxy", st.opts.spec.name + ": " + role + " image ready as " + r.volume);
          st.ready[role] = std::move(r);
          one_done();
        },
        [self, one_done](caf::error& err) {
          auto before = self->state.status;
          // Never latches: a permanent image error is fixed by a config
          // change, and the image actor answers it at once until then.
          record_error(self, err, false);
          publish(self, before);
          one_done();
        });
}

void create(proxy_pointer self) {
  auto& st = self->state;
  if (!missing_images(self).empty()) {
    ensure_images_then_create(self);
    return;
  }
  st.status.phase = proxy_phase::creating;
  domain_spec ds;
  ds.name = st.opts.spec.name;
  ds.domain_type = st.opts.domain_type;
  ds.vcpus = st.opts.spec.vcpus;
  ds.memory_mib = st.opts.spec.memory_mib;
  ds.network = st.opts.spec.network;
  if (!st.opts.console_log_dir.empty())
    ds.console_log = st.opts.console_log_dir + "/" + st.opts.spec.name + ".console.log";
  ds.mark.uid = new_uid();
  ds.mark.created_at = now_rfc3339();
  ds.mark.entry = st.opts.entry;
  ds.mark.spec_hash = st.spec_hash;
  ds.mark.host = st.opts.spec.host;
  ds.mark.tags = st.opts.spec.tags;
  st.busy = true;
  auto before = st.status;
  auto sources = sources_of(st.opts.address_sources);
  std::function<caf::expected<domain_reading>(lv::connection&)> job
    = [ds, sources](lv::connection& c) { return lv::define_and_start(c, ds, sources); };
  if (uses_images(st)) {
    // Overlay on the cached image (if it has a disk), the kernel and initrd
    // by path (kernel boot), cloud-init seed, then the domain.
    if (auto k = st.ready.find("kernel"); k != st.ready.end()) {
      ds.kernel = k->second.path;
      ds.cmdline = st.opts.spec.cmdline;
    }
    if (auto i = st.ready.find("initrd"); i != st.ready.end())
      ds.initrd = i->second.path;
    auto seed = cloudinit::render_seed({ds.mark.uid, st.opts.spec.name,
                                        static_cast<uint16_t>(st.opts.spec.port),
                                        st.opts.spec.allow_from});
    if (!seed) {
      st.busy = false;
      st.create_failed = true;
      record_error(self, seed.error(), true);
      publish(self, before);
      return;
    }
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
    job = [req](lv::connection& c) { return provision::create_vm(c, req); };
  }
  link_call<domain_reading>(
    self, st.opts.link, st.opts.call_timeout, "create " + ds.name, std::move(job),
    [self](domain_reading& r) {
      auto before = self->state.status;
      self->state.busy = false;
      self->state.created_by_us = true;
      self->state.status.adopted = false;
      log::info("proxy", self->state.opts.spec.name + ": created uid=" + r.mark.uid);
      apply_reading(self, r);
      publish(self, before);
    },
    [self](const caf::error& err) {
      auto before = self->state.status;
      self->state.busy = false;
      if (kind_of(err) == error_kind::transient) {
        self->state.status.phase = proxy_phase::pending;
      } else {
        self->state.create_failed = true;
      }
      record_error(self, err, true);
      publish(self, before);
    });
  publish(self, before);
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
  log::info("proxy", st.opts.spec.name + ": spec changed (VM uid=" + r.mark.uid
                       + " was made from spec " + r.mark.spec_hash.substr(0, 12)
                       + ", declared is " + st.spec_hash.substr(0, 12) + "); replacing it");
  s.phase = proxy_phase::creating;
  s.address.clear();
  s.grace_left = 0;
  st.in_grace = false;
  ++s.replaced;
  st.busy = true;
  remove_vm(
    self, "replace",
    [self] {
      self->state.busy = false;
      create(self);
    },
    [self](const caf::error& err) {
      auto before = self->state.status;
      self->state.busy = false;
      record_error(self, err, false);
      publish(self, before);
    });
}

void poll(proxy_pointer self) {
  auto& st = self->state;
  if (st.busy || st.erasing)
    return;
  st.busy = true;
  auto name = st.opts.spec.name;
  auto sources = sources_of(st.opts.address_sources);
  auto t0 = std::chrono::steady_clock::now();
  auto took = [t0] {
    return static_cast<uint32_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::steady_clock::now() - t0)
                                   .count());
  };
  link_call<domain_reading>(
    self, st.opts.link, st.opts.call_timeout, "read " + name,
    [name, sources](lv::connection& c) { return lv::read_domain(c, name, sources); },
    [self, took](domain_reading& r) {
      auto before = self->state.status;
      self->state.busy = false;
      ++self->state.status.polls;
      self->state.status.last_poll_ms = took();
      if (!self->state.erasing)
        apply_reading(self, r);
      publish(self, before);
    },
    [self, took](const caf::error& err) {
      auto before = self->state.status;
      self->state.busy = false;
      ++self->state.status.polls;
      self->state.status.last_poll_ms = took();
      record_error(self, err, false);
      publish(self, before);
    });
}

} // namespace

proxy_actor::behavior_type make_proxy(proxy_pointer self, proxy_options opts) {
  auto& st = self->state;
  st.opts = std::move(opts);
  st.name = "proxy/" + st.opts.spec.name;
  st.spec_hash = spec_hash(st.opts.spec, st.opts.domain_type, st.opts.image_sha256,
                           st.opts.kernel_sha256, st.opts.initrd_sha256);
  st.status.name = st.opts.spec.name;
  st.status.host = st.opts.spec.host;
  // Announce the proxy before its first poll, so status lists it at once.
  if (st.opts.sink)
    self->send(st.opts.sink, st.status);
  self->send(self, atom::poll_v);
  return {
    [self](atom::status) { return self->state.status; },
    [self](atom::poll) {
      if (self->state.erasing)
        return;
      poll(self);
      schedule_poll(self);
    },
    // Not atom::poll: that one re-arms the timer, and a second timer chain
    // would double this proxy's polls for good.
    [self](atom::reconcile) {
      self->state.publish_next = true;
      poll(self);
    },
    [self](atom::erase) -> caf::result<proxy_status> {
      auto& st = self->state;
      auto rp = self->make_response_promise<proxy_status>();
      st.erase_waiters.push_back(rp);
      if (st.erasing)
        return rp;
      st.erasing = true;
      auto before = st.status;
      st.status.phase = proxy_phase::deleting;
      publish(self, before);
      remove_vm(
        self, "delete",
        [self] {
          auto before = self->state.status;
          self->state.status.phase = proxy_phase::deleted;
          self->state.status.address.clear();
          publish(self, before);
          for (auto& w : self->state.erase_waiters)
            w.deliver(self->state.status);
          self->quit();
        },
        [self](const caf::error& err) {
          auto before = self->state.status;
          self->state.erasing = false;
          record_error(self, err, false);
          publish(self, before);
          for (auto& w : self->state.erase_waiters)
            w.deliver(err);
          self->state.erase_waiters.clear();
        });
      return rp;
    },
  };
}

} // namespace egress
