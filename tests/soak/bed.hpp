#pragma once
// The soak's hosts (tests/soak/main.cpp): per host a network namespace, a
// private libvirtd serving its test driver, an sshd inside the namespace in
// front of it (the engine's only way in, so a partition cuts the engine off
// and nothing else), and the soak's own local connection to the libvirtd
// (its unix socket: partitions never touch it). That connection keeps the
// test driver's state alive across the engine's redials (the driver keeps
// test:///default while any client holds it) and is how the nemesis and the
// checker see the host. Each host also holds one domain without our mark,
// "foreign", that the engine must never touch.

#include <memory>
#include <string>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "messages/config.hpp"
#include "messages/types.hpp"
#include "providers/libvirt/connection.hpp"
#include "support/testbed.hpp"

namespace egress::soak {

/// What the nemesis did to a host's daemons (one host fault at a time).
enum class host_fault { none, partitioned, libvirtd_stopped, libvirtd_killed, sshd_killed };

class soak_host {
public:
  explicit soak_host(std::string name);
  /// Continues a stopped libvirtd first: the admin connection's close would
  /// wait on it forever (the soak's connection has no keepalive).
  ~soak_host();
  soak_host(const soak_host&) = delete;
  soak_host& operator=(const soak_host&) = delete;

  const std::string& name() const { return name_; }
  host_config config() const;
  host_fault fault() const { return fault_; }
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

  static constexpr const char* foreign_name = "foreign";

private:
  void open_admin();   // the local connection, and "foreign" defined and started
  caf::error define_foreign();

  std::string name_;
  testbed::netns ns_;
  testbed::libvirtd lv_;
  testbed::sshd ssh_;
  host_fault fault_ = host_fault::none;
  // The nemesis and the checker take turns on the soak's one thread
  // (tests/soak/main.cpp), so nothing here is locked.
  std::shared_ptr<lv::connection> admin_;
};

} // namespace egress::soak
