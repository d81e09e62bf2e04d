#pragma once
// The soak's hosts (soak/main.cpp), on one of two beds:
//
//  - test-driver: per host a network namespace, a private libvirtd serving
//    its test driver and, in front of it, an sshd inside the namespace (the
//    engine's only way in, so a partition cuts the engine off and nothing
//    else). Domains are records; nothing boots.
//  - vms: per host a whole KVM-host stand-in (testbed/local_host.hpp): the
//    same namespace, libvirtd (QEMU, TCG) and sshd, plus a dir pool, an
//    isolated VM network and the page the probes fetch. The proxies are the
//    appliance, booted for real, and the images come from a mirror the
//    nemesis can break (soak_mirror below).
//
// Either way the soak holds its own local connection to each libvirtd (its
// unix socket: partitions never touch it). It is how the nemesis and the
// checker see the host, and on the test driver it keeps the driver's state
// alive across the engine's redials (the driver keeps test:///default while
// any client holds it). Each host also holds one domain without our mark,
// "foreign", that the engine must never touch: running on the test driver,
// defined and shut off on the VM bed (booting it would only cost CPU).

#include <memory>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "messages/config.hpp"
#include "messages/types.hpp"
#include "providers/libvirt/connection.hpp"
#include "testbed/http_server.hpp"
#include "testbed/local_host.hpp"
#include "testbed/testbed.hpp"

namespace egress::soak {

/// What the nemesis did to a host's daemons (one host fault at a time).
enum class host_fault { none, partitioned, libvirtd_stopped, libvirtd_killed, sshd_killed };

enum class bed_kind { test_driver, vms };

/// The files a running domain boots from, as its live XML names them.
struct boot_files {
  std::string kernel, initrd;
};

class soak_host {
public:
  soak_host(std::string name, bed_kind bed);
  /// Continues a stopped libvirtd first: the admin connection's close would
  /// wait on it forever (the soak's connection has no keepalive).
  ~soak_host();
  soak_host(const soak_host&) = delete;
  soak_host& operator=(const soak_host&) = delete;

  const std::string& name() const { return name_; }
  host_config config() const;
  host_fault fault() const { return fault_; }
  /// The VM bed's host (the appliance's proxies need its network); null on
  /// the test driver.
  const test::local_host* vm_host() const { return vm_.get(); }
  /// Whether libvirtd answers (not stopped or killed by the nemesis).
  bool readable() const;

  /// Applies one host fault; heal() undoes whichever is on.
  void apply(host_fault f);
  void heal();

  /// Our domains on this host (by the mark's entry), or why not: never
  /// while libvirtd is stopped or killed (the call would hang or fail).
  caf::expected<std::vector<domain_reading>> marked(const std::string& entry);
  /// Whether "foreign" is still defined and running; an error while the
  /// host cannot be read.
  caf::expected<bool> foreign_intact();
  /// Out of band, as `virsh destroy` / `virsh undefine` would.
  caf::error destroy(const std::string& domain, bool undefine);
  /// The VM bed: `volume`'s file removed from the pool's directory behind
  /// libvirt's back, as an operator's `rm` would. False if it was not there.
  bool remove_from_pool(const std::string& volume);
  /// The VM bed: a file ("soak-filler", not ours) takes every free byte of
  /// the pool's filesystem (a tmpfs of pool_mib), as another tenant's data
  /// would. free_pool() removes it; false if it was gone (the engine must
  /// never delete what is not its own).
  void fill_pool();
  bool free_pool();
  static constexpr int pool_mib = 256;
  static constexpr const char* filler_name = "soak-filler";
  /// The VM bed: the volume names in the pool starting with `prefix`.
  std::vector<std::string> pool_volumes(const std::string& prefix) const;
  /// What the running `domain` boots from (over the soak's connection).
  caf::expected<boot_files> booted_from(const std::string& domain);
  /// The VM bed: an HTTP request through the proxy at `address`, from
  /// inside the host's namespace, as a client on the VM network would.
  bool fetch_through(const std::string& address) const;

  static constexpr const char* foreign_name = "foreign";

private:
  // The test driver's daemons (the VM bed's are the local_host's).
  struct test_daemons {
    testbed::netns ns;
    testbed::libvirtd lv;
    testbed::sshd ssh;
    test_daemons();
  };

  void open_admin();   // the local connection, and "foreign" defined (and started)
  caf::error define_foreign();

  std::string name_;
  std::unique_ptr<test_daemons> own_;
  std::unique_ptr<test::local_host> vm_;
  testbed::netns* ns_ = nullptr;
  testbed::libvirtd* lv_ = nullptr;
  testbed::sshd* ssh_ = nullptr;
  host_fault fault_ = host_fault::none;
  // The nemesis and the checker take turns on the soak's one thread
  // (soak/run.cpp), so nothing here is locked.
  std::shared_ptr<lv::connection> admin_;
};

/// The VM bed's image mirror: one HTTP server per appliance file (the
/// kernel and the initrd), that the nemesis breaks and fixes.
class soak_mirror {
public:
  enum class breakage { stall, truncate, corrupt, error_500 };

  explicit soak_mirror(const test::appliance& app);
  ~soak_mirror();
  soak_mirror(const soak_mirror&) = delete;
  soak_mirror& operator=(const soak_mirror&) = delete;

  /// The kernel and initrd entries, with the appliance's digests and sizes.
  std::vector<image_config> images() const;
  void breaks(breakage b);
  void heal();

  static breakage pick(uint64_t pick) { return static_cast<breakage>(pick % 4); }
  static const char* to_string(breakage b);

private:
  test::http_server kernel_, initrd_;
  const test::appliance& app_;
};

} // namespace egress::soak
