#include "providers/provision/gc.hpp"

#include "messages/error.hpp"
#include "providers/libvirt/domains.hpp"
#include "providers/libvirt/volumes.hpp"
#include "providers/provision/proxy_vm.hpp"

namespace egress::provision {

namespace {

// "egress.<entry>.proxy.<name>.disk" -> "<name>"; "" for anything else.
std::string proxy_of_volume(const std::string& volume, const std::string& prefix) {
  auto rest = volume.substr(prefix.size());
  auto dot = rest.rfind('.');
  if (dot == std::string::npos)
    return {};
  auto suffix = rest.substr(dot);
  if (suffix != ".disk" && suffix != ".seed")
    return {};
  return rest.substr(0, dot);
}

} // namespace

caf::expected<gc_report> collect(lv::connection& c, const gc_request& req) {
  gc_report out;
  out.host = req.host;
  auto marked = lv::list_marked(c, req.entry);
  if (!marked)
    return marked.error();
  for (auto& d : *marked) {
    // list_marked filters by entry already; checked again because this is
    // the one place that deletes what it did not get asked to.
    if (!d.has_mark || d.mark.entry != req.entry || req.declared.contains(d.name)
        || (!req.only.empty() && !req.only.contains(d.name)))
      continue;
    // Made through another host that reaches the same daemon: that
    // entry's pass decides about it.
    if (!d.mark.host.empty() && d.mark.host != req.host)
      continue;
    auto vols = proxy_volumes::of(req.entry, d.name);
    if (auto err = delete_vm(c, d.name, req.pool, vols))
      return err;
    out.domains.push_back(d.name);
  }
  if (req.pool.empty())
    return out;
  auto prefix = "egress." + req.entry + ".proxy.";
  auto vols = lv::list_volumes(c, req.pool, prefix);
  if (!vols) {
    // A host whose pool is missing has no proxy volumes to collect.
    if (is(vols.error(), ec::no_pool))
      return out;
    return vols.error();
  }
  for (auto& v : *vols) {
    auto name = proxy_of_volume(v, prefix);
    if (name.empty() || req.declared.contains(name)
        || (!req.only.empty() && !req.only.contains(name)))
      continue;
    if (auto err = lv::delete_volume(c, req.pool, v))
      return err;
    out.volumes.push_back(v);
  }
  return out;
}

} // namespace egress::provision
