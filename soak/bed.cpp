#include "soak/bed.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>

#include "messages/error.hpp"
#include "providers/libvirt/domains.hpp"
#include "providers/libvirt/error.hpp"
#include "testbed/ssh_host.hpp"

namespace egress::soak {

namespace {

// An unmarked domain: what another tool's VM on the same host looks like to
// the engine.
std::string foreign_xml(bed_kind bed) {
  return std::string{"<domain type='"} + (bed == bed_kind::vms ? "qemu" : "test")
         + "'><name>foreign</name><memory unit='MiB'>64</memory><vcpu>1</vcpu>"
           "<os><type arch='x86_64'>hvm</type></os></domain>";
}

// The text of <tag>...</tag> in a domain's XML ("" when absent).
std::string element(const std::string& xml, const std::string& tag) {
  auto open = "<" + tag + ">";
  auto at = xml.find(open);
  if (at == std::string::npos)
    return "";
  at += open.size();
  auto end = xml.find("</" + tag + ">", at);
  return end == std::string::npos ? "" : xml.substr(at, end - at);
}

} // namespace

soak_host::test_daemons::test_daemons()
  : lv(test::test_driver_daemons::lv_options()), ssh(testbed::sshd_options::in(ns)) {
  lv.start();
  ssh.start();
}

soak_host::soak_host(std::string name, bed_kind bed) : name_(std::move(name)) {
  if (bed == bed_kind::vms) {
    test::local_host_options o;
    o.name = name_;
    o.pools_mib = pool_mib;
    vm_ = std::make_unique<test::local_host>(o);
    ns_ = &vm_->netns();
    lv_ = &vm_->libvirtd();
    ssh_ = &vm_->sshd();
  } else {
    own_ = std::make_unique<test_daemons>();
    ns_ = &own_->ns;
    lv_ = &own_->lv;
    ssh_ = &own_->ssh;
  }
  open_admin();
}

soak_host::~soak_host() {
  if (fault_ == host_fault::libvirtd_stopped)
    lv_->resume();
}

host_config soak_host::config() const {
  if (vm_)
    return vm_->host();
  auto h = test::ssh_host(*ssh_, *lv_, name_, "test:///default");
  h.address = ns_->peer_addr();
  h.port = static_cast<uint32_t>(ssh_->port());
  return h;
}

bool soak_host::readable() const {
  return fault_ != host_fault::libvirtd_stopped && fault_ != host_fault::libvirtd_killed;
}

void soak_host::open_admin() {
  admin_.reset();
  auto c = lv::connection::open(lv_->uri(vm_ ? "qemu" : "test"));
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
    d = virDomainDefineXML(admin_->get(),
                           foreign_xml(vm_ ? bed_kind::vms : bed_kind::test_driver).c_str());
    if (d == nullptr)
      return lv::last_error("define foreign");
  }
  int state = 0;
  caf::error err;
  if (virDomainGetState(d, &state, nullptr, 0) < 0)
    err = lv::last_error("foreign state");
  else if (!vm_ && state != VIR_DOMAIN_RUNNING && virDomainCreate(d) < 0)
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
    case host_fault::partitioned: ns_->partition(); break;
    case host_fault::libvirtd_stopped: lv_->pause(); break;
    case host_fault::libvirtd_killed:
      admin_.reset(); // before the kill: its close must not wait on a dead peer
      lv_->crash();
      break;
    case host_fault::sshd_killed: ssh_->crash(); break;
  }
}

void soak_host::heal() {
  auto was = fault_;
  fault_ = host_fault::none;
  switch (was) {
    case host_fault::none: break;
    case host_fault::partitioned: ns_->heal(); break;
    case host_fault::libvirtd_stopped: lv_->resume(); break;
    case host_fault::libvirtd_killed:
      lv_->restart();
      open_admin();
      break;
    case host_fault::sshd_killed: ssh_->start(); break;
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
    out = vm_ ? state == VIR_DOMAIN_SHUTOFF : state == VIR_DOMAIN_RUNNING;
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

bool soak_host::remove_from_pool(const std::string& volume) {
  std::error_code ec;
  return vm_ && std::filesystem::remove(vm_->pool_dir() + "/" + volume, ec);
}

void soak_host::fill_pool() {
  if (!vm_)
    return;
  auto path = vm_->pool_dir() + "/" + filler_name;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0)
    throw std::runtime_error(path + ": " + std::strerror(errno));
  struct statvfs fs{};
  if (::fstatvfs(fd, &fs) == 0) {
    auto size = static_cast<off_t>(fs.f_bavail * fs.f_frsize);
    auto have = ::lseek(fd, 0, SEEK_END);
    // fallocate takes what is free or fails whole: then fill by writing.
    if (::posix_fallocate(fd, have, size) != 0) {
      std::vector<char> zeros(1 << 20);
      while (::write(fd, zeros.data(), zeros.size()) > 0) {
      }
    }
  }
  ::close(fd);
}

bool soak_host::free_pool() {
  std::error_code ec;
  return !vm_ || std::filesystem::remove(vm_->pool_dir() + "/" + filler_name, ec);
}

std::vector<std::string> soak_host::pool_volumes(const std::string& prefix) const {
  std::vector<std::string> out;
  std::error_code ec;
  if (vm_)
    for (auto& e : std::filesystem::directory_iterator(vm_->pool_dir(), ec)) {
      auto name = e.path().filename().string();
      if (name.rfind(prefix, 0) == 0)
        out.push_back(name);
    }
  std::sort(out.begin(), out.end()); // the pick must draw the same file for one seed
  return out;
}

caf::expected<boot_files> soak_host::booted_from(const std::string& domain) {
  if (!readable())
    return make_error(ec::link_down, name_ + ": libvirtd is down (the nemesis)");
  if (!admin_)
    return make_error(ec::link_down, name_ + ": no admin connection");
  virDomainPtr d = virDomainLookupByName(admin_->get(), domain.c_str());
  if (d == nullptr)
    return lv::last_error("look up " + domain);
  char* xml = virDomainGetXMLDesc(d, 0);
  virDomainFree(d);
  if (xml == nullptr)
    return lv::last_error("XML of " + domain);
  std::string text = xml;
  std::free(xml);
  return boot_files{element(text, "kernel"), element(text, "initrd")};
}

bool soak_host::fetch_through(const std::string& address) const {
  return vm_ && !vm_->fetch_through(address, std::chrono::seconds(3)).empty();
}

// -- the mirror -------------------------------------------------------------------

soak_mirror::soak_mirror(const test::appliance& app)
  : kernel_(testbed::read_file(app.dir + "/vmlinux"), "/vmlinux"),
    initrd_(testbed::read_file(app.dir + "/initrd.gz"), "/initrd.gz"), app_(app) {
  kernel_.start();
  initrd_.start();
}

soak_mirror::~soak_mirror() {
  kernel_.stop();
  initrd_.stop();
}

std::vector<image_config> soak_mirror::images() const {
  auto all = test::appliance_images(app_, [this](const std::string& file) {
    return file == "vmlinux" ? kernel_.url() : initrd_.url();
  });
  std::erase_if(all, [](const image_config& i) { return i.format == "qcow2"; }); // not served
  return all;
}

const char* soak_mirror::to_string(breakage b) {
  switch (b) {
    case breakage::stall: return "stall";
    case breakage::truncate: return "truncate";
    case breakage::corrupt: return "corrupt";
    case breakage::error_500: return "500";
  }
  return "?";
}

void soak_mirror::breaks(breakage b) {
  for (auto* srv : {&kernel_, &initrd_}) {
    test::http_behaviour h;
    auto size = srv == &kernel_ ? app_.kernel_size : app_.initrd_size;
    switch (b) {
      case breakage::stall: h.stall_after = size / 4; break;
      case breakage::truncate: h.truncate_after = size / 2; break;
      case breakage::corrupt: h.corrupt_at = size / 3; break;
      case breakage::error_500: h.error_status = 500; break;
    }
    srv->set(h);
  }
}

void soak_mirror::heal() {
  kernel_.set({});
  initrd_.set({});
}

} // namespace egress::soak
