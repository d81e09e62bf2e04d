#include "providers/provision/proxy_vm.hpp"

#include <cstring>

#include "messages/error.hpp"
#include "providers/libvirt/domains.hpp"
#include "providers/libvirt/volumes.hpp"

namespace egress::provision {

namespace {

caf::expected<std::string> path_of(lv::connection& c, const std::string& pool,
                                   const std::string& name) {
  auto facts = lv::volume_info(c, pool, name);
  if (!facts)
    return facts.error();
  if (!*facts)
    return make_error(ec::no_volume, "volume " + pool + "/" + name + " vanished");
  return (*facts)->path;
}

// Removes what one attempt created; the first error stays the one returned.
void remove_quietly(lv::connection& c, const std::string& pool, const std::string& name) {
  if (lv::delete_volume(c, pool, name)) {
    // Nothing to do: the next attempt replaces it, delete_vm removes it.
  }
}

caf::expected<domain_reading> create_steps(lv::connection& c, const vm_request& req) {
  auto& v = req.volumes;
  // Earlier attempts' volumes are the proxy's own by name: replace them.
  if (auto err = lv::delete_volume(c, req.pool, v.disk))
    return err;
  if (auto err = lv::delete_volume(c, req.pool, v.seed))
    return err;
  // A kernel-boot appliance may run from its initramfs alone: no disk.
  if (!req.base_path.empty())
    if (auto disk = lv::create_overlay(c, req.pool, v.disk, req.base_path, req.base_format,
                                       req.base_size);
        !disk)
      return disk.error();
  auto fail = [&](caf::error err) -> caf::expected<domain_reading> {
    remove_quietly(c, req.pool, v.seed);
    remove_quietly(c, req.pool, v.disk);
    return err;
  };
  auto iso = cloudinit::build_seed_iso(req.seed);
  if (!iso)
    return fail(iso.error());
  auto seed = lv::create_volume(c, req.pool, v.seed, iso->size(), "raw");
  if (!seed)
    return fail(seed.error());
  size_t pos = 0;
  auto up = lv::upload_volume(c, seed->get(), 0, iso->size(),
                              [&](char* buf, size_t cap) -> caf::expected<size_t> {
                                auto n = std::min(cap, iso->size() - pos);
                                std::memcpy(buf, iso->data() + pos, n);
                                pos += n;
                                return n;
                              });
  if (up)
    return fail(up);
  auto spec = req.domain;
  if (!req.base_path.empty()) {
    auto disk_path = path_of(c, req.pool, v.disk);
    if (!disk_path)
      return fail(disk_path.error());
    spec.disk = *disk_path;
    spec.disk_format = "qcow2";
  }
  auto seed_path = path_of(c, req.pool, v.seed);
  if (!seed_path)
    return fail(seed_path.error());
  spec.seed = *seed_path;
  auto r = lv::define_and_start(c, spec, req.sources);
  if (!r)
    return fail(r.error());
  return r;
}

} // namespace

// Called only after a failure, so a step that works costs no extra round
// trip. volume_info refreshes the pool first, so a file removed behind
// libvirt's back counts as gone too. A lookup that fails (the link went
// down) is not an answer: the caller keeps its own error.
caf::error image_gone(lv::connection& c, const std::string& pool,
                      const std::vector<std::string>& images) {
  for (auto& image : images) {
    auto facts = lv::volume_info(c, pool, image);
    if (facts && !*facts)
      return make_error(ec::image_gone, "the cached image volume " + pool + "/" + image
                                          + " is gone from the pool; it is fetched again");
  }
  return {};
}

caf::expected<domain_reading> create_vm(lv::connection& c, const vm_request& req) {
  auto r = create_steps(c, req);
  if (!r)
    if (auto gone = image_gone(c, req.pool, req.images))
      return gone;
  return r;
}

caf::error start_vm(lv::connection& c, const std::string& name, const std::string& pool,
                    const std::vector<std::string>& images) {
  auto err = lv::start_domain(c, name);
  if (err)
    if (auto gone = image_gone(c, pool, images))
      return gone;
  return err;
}

caf::error delete_vm(lv::connection& c, const std::string& name, const std::string& pool,
                     const proxy_volumes& volumes) {
  if (auto err = lv::delete_domain(c, name))
    return err;
  if (pool.empty())
    return {};
  // A pool that does not exist holds no volumes of ours: nothing to delete.
  auto err = lv::delete_volume(c, pool, volumes.disk);
  if (!err)
    err = lv::delete_volume(c, pool, volumes.seed);
  return is(err, ec::no_pool) ? caf::error{} : err;
}

} // namespace egress::provision
