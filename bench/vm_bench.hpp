// What the real-VM benchmarks (bench/e2e.cpp, bench/fleet.cpp) share: their
// integer options, the median of their rounds, and the domain their plain
// virsh script defines for a proxy.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "messages/config.hpp"
#include "messages/error.hpp"
#include "messages/types.hpp"
#include "providers/cloudinit/seed.hpp"
#include "providers/libvirt/domain_xml.hpp"
#include "providers/provision/proxy_vm.hpp"
#include "testbed/testbed.hpp"

namespace egress::bench_cli {

/// `value` as an integer in [lo, hi]; otherwise says so naming `flag` and
/// exits 2 (a usage error).
inline int parse_int(const char* flag, const char* value, int lo, int hi) {
  char* end = nullptr;
  long v = value ? std::strtol(value, &end, 10) : 0;
  if (!value || *end != '\0' || v < lo || v > hi) {
    std::fprintf(stderr, "%s takes an integer in %d..%d\n", flag, lo, hi);
    std::exit(2);
  }
  return static_cast<int>(v);
}

/// The median of `v`; `none` when it is empty.
inline double median(std::vector<double> v, double none = 0) {
  if (v.empty())
    return none;
  std::sort(v.begin(), v.end());
  auto n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/// The domain the engine's proxy actor would define for `spec` on `host`
/// (actors/proxy.cpp), but for its volumes' paths and its mark, which the
/// script sets itself.
inline domain_spec script_domain(const proxy_spec& spec, const host_config& host) {
  domain_spec ds;
  ds.name = spec.name;
  ds.domain_type = host.domain_type;
  ds.vcpus = spec.vcpus;
  ds.memory_mib = spec.memory_mib;
  ds.network = spec.network;
  ds.console_log = host.console_log_dir + "/" + spec.name + ".console.log";
  ds.cmdline = spec.cmdline;
  return ds;
}

/// The seed ISO and the domain XML of `ds` (its mark, kernel, initrd and
/// disk set; its seed is put in `pool_dir`, a dir pool) written into
/// `work_dir`, and the virsh commands that upload the seed, define the
/// domain and start it. Throws std::runtime_error naming what failed.
inline std::string seed_and_start_script(domain_spec ds, const proxy_spec& spec,
                                         const std::string& entry, const std::string& pool_dir,
                                         const std::string& work_dir) {
  auto seed = cloudinit::render_seed({ds.mark.uid, spec.name, static_cast<uint16_t>(spec.port),
                                      spec.allow_from});
  if (!seed)
    throw std::runtime_error("render_seed: " + render(seed.error()));
  auto iso = cloudinit::build_seed_iso(*seed);
  if (!iso)
    throw std::runtime_error("build_seed_iso: " + render(iso.error()));
  auto seed_vol = provision::proxy_volumes::of(entry, spec.name).seed;
  // A dir pool: the volume's path is <pool dir>/<name>.
  ds.seed = pool_dir + "/" + seed_vol;
  auto xml = lv::build_domain_xml(ds);
  if (!xml)
    throw std::runtime_error("build_domain_xml: " + render(xml.error()));
  auto iso_file = work_dir + "/" + spec.name + ".iso";
  auto xml_file = work_dir + "/" + spec.name + ".xml";
  testbed::write_file(iso_file, *iso);
  testbed::write_file(xml_file, *xml);
  return "vol-create-as egress " + seed_vol + " " + std::to_string(iso->size())
         + " --format raw; vol-upload --pool egress " + seed_vol + " " + iso_file + "; define "
         + xml_file + "; start " + spec.name;
}

} // namespace egress::bench_cli
