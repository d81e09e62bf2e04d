#include "soak/bed.hpp"

#include <stdexcept>

#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>

#include "messages/error.hpp"
#include "providers/libvirt/domains.hpp"
#include "providers/libvirt/error.hpp"
#include "support/ssh_host.hpp"

namespace egress::soak {

namespace {

// An unmarked test-driver domain: what another tool's VM on the same host
// looks like to the engine.
const char* foreign_xml = "<domain type='test'><name>foreign</name>"
                          "<memory unit='MiB'>64</memory><vcpu>1</vcpu>"
                          "<os><type arch='x86_64'>hvm</type></os></domain>";

} // namespace

soak_host::soak_host(std::string name)
  : name_(std::move(name)),
    lv_(test::test_driver_daemons::lv_options()),
    ssh_(testbed::sshd_options::in(ns_)) {
  lv_.start();
  ssh_.start();
  open_admin();
}

soak_host::~soak_host() {
  if (fault_ == host_fault::libvirtd_stopped)
    lv_.resume();
}

host_config soak_host::config() const {
  auto h = test::ssh_host(ssh_, lv_, name_, "test:///default");
  h.address = ns_.peer_addr();
  h.port = static_cast<uint32_t>(ssh_.port());
  return h;
}

bool soak_host::readable() const {
  return fault_ != host_fault::libvirtd_stopped && fault_ != host_fault::libvirtd_killed;
}

void soak_host::open_admin() {
  admin_.reset();
  auto c = lv::connection::open(lv_.uri("test"));
  if (!c)
    throw std::runtime_error(name_ + ": admin connection: " + render(c.error()));
  admin_ = std::move(*c);
  if (auto err = define_foreign())
    throw std::runtime_error(name_ + ": foreign domain: " + render(err));
}

// A restarted libvirtd's test driver starts empty: the foreign
// domain is defined again (the engine must leave it alone either way).
caf::error soak_host::define_foreign() {
  virDomainPtr d = virDomainLookupByName(admin_->get(), foreign_name);
  if (d == nullptr) {
    virResetLastError();
    d = virDomainDefineXML(admin_->get(), foreign_xml);
    if (d == nullptr)
      return lv::last_error("define foreign");
  }
  int state = 0;
  caf::error err;
  if (virDomainGetState(d, &state, nullptr, 0) < 0)
    err = lv::last_error("foreign state");
  else if (state != VIR_DOMAIN_RUNNING && virDomainCreate(d) < 0)
    err = lv::last_error("start foreign");
  virDomainFree(d);
  return err;
}

void soak_host::apply(host_fault f) {
  if (fault_ != host_fault::none)
    throw std::logic_error(name_ + ": a second host fault while one is on");
  fault_ = f;
  switch (f) {
    case host_fault::none: break;
    case host_fault::partitioned: ns_.partition(); break;
    case host_fault::libvirtd_stopped: lv_.pause(); break;
    case host_fault::libvirtd_killed: {
          admin_.reset(); // before the kill: its close must not wait on a dead peer
      lv_.crash();
      break;
    }
    case host_fault::sshd_killed: ssh_.crash(); break;
  }
}

void soak_host::heal() {
  auto was = fault_;
  fault_ = host_fault::none;
  switch (was) {
    case host_fault::none: break;
    case host_fault::partitioned: ns_.heal(); break;
    case host_fault::libvirtd_stopped: lv_.resume(); break;
    case host_fault::libvirtd_killed:
      lv_.restart();
      open_admin();
      break;
    case host_fault::sshd_killed: ssh_.start(); break;
  }
}

caf::expected<std::vector<domain_reading>> soak_host::marked(const std::string& entry) {
  if (!readable())
    return make_error(ec::link_down, name_ + ": libvirtd is down (the nemesis)");
  if (!admin_)
    return make_error(ec::link_down, name_ + ": no admin connection");
  return lv::list_marked(*admin_, entry);
}

caf::expected<bool> soak_host::foreign_intact() {
  if (!readable())
    return make_error(ec::link_down, name_ + ": libvirtd is down (the nemesis)");
  if (!admin_)
    return make_error(ec::link_down, name_ + ": no admin connection");
  // Only libvirt's own "no such domain" means removed; any other failure is
  // the soak's connection, not the engine's doing.
  virDomainPtr d = virDomainLookupByName(admin_->get(), foreign_name);
  if (d == nullptr) {
    bool gone = virGetLastErrorCode() == VIR_ERR_NO_DOMAIN;
    auto err = lv::last_error("look up foreign");
    if (gone)
      return false;
    return err;
  }
  int state = 0;
  caf::expected<bool> out = false;
  if (virDomainGetState(d, &state, nullptr, 0) < 0)
    out = lv::last_error("foreign state");
  else
    out = state == VIR_DOMAIN_RUNNING;
  virDomainFree(d);
  return out;
}

caf::error soak_host::destroy(const std::string& domain, bool undefine) {
  if (!readable())
    return make_error(ec::link_down, name_ + ": libvirtd is down (the nemesis)");
  if (!admin_)
    return make_error(ec::link_down, name_ + ": no admin connection");
  return undefine ? lv::delete_domain(*admin_, domain) : lv::destroy_domain(*admin_, domain);
}

} // namespace egress::soak
