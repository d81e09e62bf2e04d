#pragma once
// Creates and removes everything one proxy VM consists of on its host, as
// one blocking job: its overlay disk on the cached base image, its cloud-init
// seed, its domain. Runs in a detached call actor (through the host's link).
//
// A create that fails half-way removes what this attempt created, so a retry
// starts from nothing; volumes left by an earlier attempt (an engine killed
// half-way) are replaced, never trusted: their names are the proxy's own.

#include <string>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "messages/types.hpp"
#include "providers/cloudinit/seed.hpp"
#include "providers/libvirt/connection.hpp"
#include "providers/libvirt/domains.hpp"

namespace egress::provision {

/// The volumes of one proxy: `egress.<entry>.proxy.<name>.disk|.seed`.
/// Dot-joined names, so they never meet a cached image's volumes.
struct proxy_volumes {
  std::string disk;
  std::string seed;
  static proxy_volumes of(const std::string& entry, const std::string& proxy) {
    auto stem = "egress." + entry + ".proxy." + proxy;
    return {stem + ".disk", stem + ".seed"};
  }
};

struct vm_request {
  std::string pool;
  std::string base_path;    // the cached disk image's data volume ("" = no disk)
  std::string base_format;  // qcow2 or raw
  uint64_t base_size = 0;   // its virtual size: the overlay's capacity
  proxy_volumes volumes;
  cloudinit::seed_files seed;
  domain_spec domain;       // disk and seed paths are filled in here
  /// The cached image data volumes (in `pool`) it boots from: the disk's
  /// base, the kernel, the initrd. Looked up when the create fails.
  std::vector<std::string> images;
  std::vector<lv::address_source> sources; // read right after the start
};

/// Overlay (with a base disk), seed (built and uploaded), define + start;
/// a kernel boot's kernel and initrd paths come in `domain`. On failure, what this
/// attempt created is removed (the domain by define_and_start itself), and
/// a failure whose cause is one of `images` gone from the pool (deleted out
/// of band: libvirt and QEMU then only say a file could not be opened) is
/// reported as transient/image_gone naming that volume.
caf::expected<domain_reading> create_vm(lv::connection& c, const vm_request& req);

/// Starts the defined domain `name`; a failure whose cause is one of its
/// `images` gone from `pool` is transient/image_gone, as in create_vm.
caf::error start_vm(lv::connection& c, const std::string& name, const std::string& pool,
                    const std::vector<std::string>& images);

/// The first of `images` missing from `pool`, as transient/image_gone; none
/// when all are there or the lookup itself failed.
caf::error image_gone(lv::connection& c, const std::string& pool,
                      const std::vector<std::string>& images);

/// Destroys and undefines the domain, then deletes its volumes. Missing
/// parts are success.
caf::error delete_vm(lv::connection& c, const std::string& name, const std::string& pool,
                     const proxy_volumes& volumes);

} // namespace egress::provision
