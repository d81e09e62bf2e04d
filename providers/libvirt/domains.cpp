#include "providers/libvirt/domains.hpp"

#include <cstdlib>

#include <libvirt/virterror.h>

#include "messages/error.hpp"
#include "providers/libvirt/domain_xml.hpp"
#include "providers/libvirt/error.hpp"

namespace egress::lv {

namespace {

const char* to_string(address_source s) {
  switch (s) {
    case address_source::lease: return "lease";
    case address_source::agent: return "agent";
    case address_source::arp: return "arp";
  }
  return "unknown";
}

unsigned int libvirt_source(address_source s) {
  switch (s) {
    case address_source::lease: return VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_LEASE;
    case address_source::agent: return VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_AGENT;
    case address_source::arp: return VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_ARP;
  }
  return VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_LEASE;
}

// Loopback and IPv6 link-local addresses are never how a proxy is reached;
// counting them would let the guest agent's "lo" win before DHCP finished.
bool usable(const virDomainIPAddress& a) {
  std::string_view s = a.addr != nullptr ? a.addr : "";
  if (s.empty())
    return false;
  if (a.type == VIR_IP_ADDR_TYPE_IPV4)
    return s.substr(0, 4) != "127.";
  return s != "::1" && s.substr(0, 5) != "fe80:";
}

// One address source: the usable addresses it reported (maybe none), or the
// copied libvirt error.
caf::expected<std::vector<std::string>> addresses_from(virDomainPtr dom,
                                                       const std::string& name,
                                                       address_source src) {
  virDomainInterfacePtr* ifaces = nullptr;
  int n = virDomainInterfaceAddresses(dom, &ifaces, libvirt_source(src), 0);
  if (n < 0)
    return last_error(name + ": addresses from " + to_string(src));
  std::vector<std::string> out;
  for (int i = 0; i < n; ++i) {
    for (unsigned j = 0; j < ifaces[i]->naddrs; ++j)
      if (usable(ifaces[i]->addrs[j]))
        out.emplace_back(ifaces[i]->addrs[j].addr); // the prefix length is separate
    virDomainInterfaceFree(ifaces[i]);
  }
  std::free(ifaces);
  return out;
}

caf::error read_addresses(connection& c, virDomainPtr dom, domain_reading& r,
                          const std::vector<address_source>& sources) {
  bool answered = false;
  for (auto src : sources) {
    auto addrs = addresses_from(dom, r.name, src);
    if (!addrs) {
      // A dead connection is not "no address yet" (docs/notes/failures.md#pooled-connection-killed-under-a-caller): fail the read.
      if (is(addrs.error(), ec::connection_broken) || !c.alive())
        return as_transient(addrs.error());
      r.notes.push_back(render(addrs.error()));
      continue;
    }
    answered = true;
    if (!addrs->empty()) {
      r.addresses = std::move(*addrs);
      return {};
    }
  }
  if (!answered && !sources.empty()) {
    std::string ctx = r.name + ": every address source failed";
    for (auto& note : r.notes)
      ctx += "; " + note;
    return make_error(ec::no_address_source, std::move(ctx));
  }
  return {};
}

// The mark via virDomainGetMetadata: it selects by namespace URI, so the
// prefix libvirt stored does not matter. A domain without one is not an error.
caf::error read_mark(virDomainPtr dom, domain_reading& r) {
  char* xml = virDomainGetMetadata(dom, VIR_DOMAIN_METADATA_ELEMENT, mark_namespace,
                                   VIR_DOMAIN_AFFECT_CURRENT);
  if (xml == nullptr) {
    auto err = last_error(r.name + ": read mark");
    return is(err, ec::libvirt_not_found) ? caf::error{} : err;
  }
  std::string text = xml;
  std::free(xml);
  auto mark = parse_mark(text);
  if (!mark)
    return mark.error();
  if (*mark) {
    r.has_mark = true;
    r.mark = std::move(**mark);
  }
  return {};
}

caf::error read_state(virDomainPtr dom, domain_reading& r) {
  int state = 0;
  int reason = 0;
  if (virDomainGetState(dom, &state, &reason, 0) < 0)
    return last_error(r.name + ": read state");
  r.state = state >= 0 && state <= static_cast<int>(domain_state::pmsuspended)
              ? static_cast<domain_state>(state)
              : domain_state::nostate;
  return {};
}

// The MACs of its interfaces, from its XML (one round trip).
caf::error read_macs(virDomainPtr dom, domain_reading& r) {
  char* xml = virDomainGetXMLDesc(dom, 0);
  if (xml == nullptr)
    return last_error(r.name + ": read its interfaces");
  std::string text = xml;
  std::free(xml);
  auto macs = parse_macs(text);
  if (!macs)
    return macs.error();
  r.macs = std::move(*macs);
  return {};
}

// Looks a domain up by name. A missing one yields a null pointer and no error.
caf::expected<domain_ptr> lookup(connection& c, const std::string& name,
                                 const std::string& what) {
  domain_ptr dom{virDomainLookupByName(c.get(), name.c_str())};
  if (dom)
    return dom;
  auto err = last_error(what);
  if (is(err, ec::no_domain))
    return domain_ptr{};
  return err;
}

} // namespace

caf::expected<address_source> parse_address_source(const std::string& s) {
  if (s == "lease")
    return address_source::lease;
  if (s == "agent")
    return address_source::agent;
  if (s == "arp")
    return address_source::arp;
  return make_error(ec::invalid_argument,
                    "address source \"" + s + "\" is unknown (lease, agent or arp)");
}

caf::expected<domain_reading>
read_domain(connection& c, const std::string& name,
            const std::vector<address_source>& sources, bool with_macs) {
  domain_reading r;
  r.name = name;
  auto dom = lookup(c, name, "read " + name);
  if (!dom)
    return dom.error();
  if (!*dom)
    return r;
  r.exists = true;
  r.uuid = uuid_of(dom->get());
  auto err = read_state(dom->get(), r);
  if (!err)
    err = read_mark(dom->get(), r);
  if (!err && with_macs)
    err = read_macs(dom->get(), r);
  if (is(err, ec::no_domain)) {
    // Undefined between the lookup and the read: it is simply gone.
    domain_reading missing;
    missing.name = name;
    return missing;
  }
  if (err)
    return err;
  if (r.state == domain_state::running)
    if (auto err = read_addresses(c, dom->get(), r, sources))
      return err;
  return r;
}

caf::error write_mark(connection& c, const std::string& name, const domain_mark& mark) {
  auto xml = build_mark_xml(mark);
  if (!xml)
    return xml.error();
  auto dom = lookup(c, name, "write the mark of " + name);
  if (!dom)
    return dom.error();
  if (!*dom)
    return make_error(ec::no_domain, name + ": write the mark: no such domain");
  unsigned flags = VIR_DOMAIN_AFFECT_CONFIG;
  if (virDomainIsActive(dom->get()) == 1)
    flags |= VIR_DOMAIN_AFFECT_LIVE;
  if (virDomainSetMetadata(dom->get(), VIR_DOMAIN_METADATA_ELEMENT, xml->c_str(), mark_prefix,
                           mark_namespace, flags)
      < 0)
    return last_error(name + ": write the mark");
  return {};
}

caf::expected<domain_reading>
read_and_stamp(connection& c, const std::string& name, const std::vector<address_source>& sources,
               bool with_macs, const std::string& entry, const std::string& owner, int64_t token) {
  auto r = read_domain(c, name, sources, with_macs);
  if (!r || !r->exists || !r->has_mark || r->mark.entry != entry || r->mark.token >= token)
    return r;
  auto stamped = r->mark;
  stamped.owner = owner;
  stamped.token = token;
  if (auto err = write_mark(c, name, stamped))
    return err;
  r->mark = std::move(stamped);
  return r;
}

caf::expected<std::vector<domain_reading>>
list_marked(connection& c, const std::string& entry) {
  virDomainPtr* raw = nullptr;
  int n = virConnectListAllDomains(c.get(), &raw, 0);
  if (n < 0)
    return last_error("list domains");
  // Own every handle before anything can return early.
  std::vector<domain_ptr> doms;
  for (int i = 0; i < n; ++i)
    doms.emplace_back(raw[i]);
  std::free(raw);
  std::vector<domain_reading> out;
  for (auto& dom : doms) {
    domain_reading r;
    auto name = virDomainGetName(dom.get());
    r.name = name != nullptr ? name : "";
    r.exists = true;
    auto err = read_mark(dom.get(), r);
    if (!err && r.has_mark && r.mark.entry == entry)
      err = read_state(dom.get(), r);
    if (is(err, ec::no_domain))
      continue; // undefined while we listed
    if (err)
      return err;
    if (r.has_mark && r.mark.entry == entry)
      out.push_back(std::move(r));
  }
  return out;
}

namespace {

// Whether a domain we hold a handle of was undefined by someone else: gone
// (VIR_ERR_NO_DOMAIN), or transient, which is what an undefine makes of a
// domain while it starts (it goes away once its QEMU has ended; the seed-38
// soak saw the start fail with it still there). A broken connection says
// gone too; its start error is transient already.
bool undefined_by_someone(virDomainPtr dom) {
  auto persistent = virDomainIsPersistent(dom);
  virResetLastError();
  return persistent != 1;
}

} // namespace

caf::error start_failure(caf::error err, bool undefined_meanwhile) {
  if (!undefined_meanwhile || kind_of(err) != error_kind::permanent)
    return err;
  return make_error(ec::libvirt_transient,
                    detail(err) + "; the domain was undefined during its start (out of band)");
}

caf::expected<domain_reading> define_and_start(connection& c, const domain_spec& spec,
                                               const std::vector<address_source>& sources) {
  auto xml = build_domain_xml(spec);
  if (!xml)
    return xml.error();
  domain_ptr dom{virDomainDefineXML(c.get(), xml->c_str())};
  if (!dom)
    return last_error("define " + spec.name);
  // virDomainCreateWithFlags, not virDomainCreate: over the remote driver
  // the latter is two round trips (the start, then a lookup by uuid for the
  // domain's id), the former one (its answer carries the domain).
  if (virDomainCreateWithFlags(dom.get(), 0) < 0) {
    auto err = last_error("start " + spec.name);
    // Leave nothing behind; if this fails too, the create error still wins
    // and the next reconcile finds (and owns, by its mark) the leftover.
    // Failing because the domain is no longer ours to undefine says why
    // the start failed.
    bool undefined_meanwhile = false;
    if (virDomainUndefine(dom.get()) < 0) {
      virResetLastError();
      undefined_meanwhile = undefined_by_someone(dom.get());
    }
    return start_failure(std::move(err), undefined_meanwhile);
  }
  domain_reading r;
  r.name = spec.name;
  r.exists = true;
  r.uuid = uuid_of(dom.get());
  r.has_mark = true;
  r.mark = spec.mark;
  if (!spec.mac.empty())
    r.macs.push_back(spec.mac);
  // The start returned once the domain ran: no read of its state (an RPC
  // per create). A crash right after is the link's event to report.
  r.state = domain_state::running;
  // The addresses too, while we hold the domain: a VM that already has one
  // (a fast lease, the test driver) is running now, not one poll later. A
  // failure here is only a note: the next poll reads them again.
  if (!sources.empty() && r.state == domain_state::running)
    if (auto err = read_addresses(c, dom.get(), r, sources))
      r.notes.push_back(render(err));
  return r;
}

namespace {

// One state change of an existing domain: virDomainSuspend, -Resume, -Destroy.
caf::error change_state(connection& c, const std::string& name, const char* verb,
                        int (*op)(virDomainPtr)) {
  auto what = std::string{verb} + " " + name;
  auto dom = lookup(c, name, what);
  if (!dom)
    return dom.error();
  if (!*dom)
    return make_error(ec::no_domain, what + ": no such domain");
  if (op(dom->get()) < 0)
    return last_error(what);
  return {};
}

} // namespace

caf::error suspend_domain(connection& c, const std::string& name) {
  return change_state(c, name, "suspend", virDomainSuspend);
}

caf::error resume_domain(connection& c, const std::string& name) {
  return change_state(c, name, "resume", virDomainResume);
}

caf::error destroy_domain(connection& c, const std::string& name) {
  return change_state(c, name, "destroy", virDomainDestroy);
}

caf::error start_domain(connection& c, const std::string& name) {
  auto dom = lookup(c, name, "start " + name);
  if (!dom)
    return dom.error();
  if (!*dom)
    return make_error(ec::no_domain, "start " + name + ": no such domain");
  int active = virDomainIsActive(dom->get());
  if (active < 0)
    return last_error("start " + name);
  if (active == 1)
    return {};
  if (virDomainCreateWithFlags(dom->get(), 0) < 0) { // one round trip (see define_and_start)
    auto err = last_error("start " + name);
    return start_failure(std::move(err), undefined_by_someone(dom->get()));
  }
  return {};
}

caf::error delete_domain(connection& c, const std::string& name) {
  auto what = "delete " + name;
  auto dom = lookup(c, name, what);
  if (!dom)
    return dom.error();
  if (!*dom)
    return {};
  int active = virDomainIsActive(dom->get());
  if (active < 0) {
    auto err = last_error(what);
    return is(err, ec::no_domain) ? caf::error{} : err;
  }
  if (active == 1 && virDomainDestroy(dom->get()) < 0) {
    auto err = last_error(what);
    if (is(err, ec::no_domain))
      return {};
    // It may have stopped on its own in between; only a live domain is a failure.
    if (virDomainIsActive(dom->get()) != 0) {
      virResetLastError();
      return err;
    }
  }
  // Drivers reject flags they do not know (the test driver refuses NVRAM and
  // CHECKPOINTS_METADATA with INVALID_ARG), so fall back to fewer flags.
  const unsigned all = VIR_DOMAIN_UNDEFINE_MANAGED_SAVE
                       | VIR_DOMAIN_UNDEFINE_SNAPSHOTS_METADATA
                       | VIR_DOMAIN_UNDEFINE_CHECKPOINTS_METADATA
                       | VIR_DOMAIN_UNDEFINE_NVRAM;
  const unsigned basic = VIR_DOMAIN_UNDEFINE_MANAGED_SAVE
                         | VIR_DOMAIN_UNDEFINE_SNAPSHOTS_METADATA;
  caf::error err;
  for (unsigned flags : {all, basic, 0u}) {
    if (virDomainUndefineFlags(dom->get(), flags) == 0)
      return {};
    err = last_error(what);
    if (!is(err, ec::invalid_argument) && !is(err, ec::unsupported))
      break;
  }
  // A transient domain is gone once destroyed: nothing is left to undefine.
  if (is(err, ec::no_domain))
    return {};
  if (virDomainIsPersistent(dom->get()) == 0)
    return {};
  virResetLastError();
  return err;
}

caf::expected<uint64_t> free_memory_mib(connection& c) {
  // 0 is also what a host with nothing free reports; libvirt's error says
  // which it is.
  virResetLastError();
  auto bytes = virNodeGetFreeMemory(c.get());
  if (bytes == 0 && virGetLastError() != nullptr)
    return last_error("read the host's free memory");
  return static_cast<uint64_t>(bytes >> 20);
}

} // namespace egress::lv
