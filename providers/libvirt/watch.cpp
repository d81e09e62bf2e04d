#include "providers/libvirt/watch.hpp"

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <memory>

#include <libvirt/virterror.h>

#include "messages/error.hpp"
#include "providers/libvirt/domain_xml.hpp"
#include "providers/libvirt/error.hpp"

namespace egress::lv {

namespace {

domain_change change_of(int event) {
  switch (event) {
    case VIR_DOMAIN_EVENT_DEFINED: return domain_change::defined;
    case VIR_DOMAIN_EVENT_UNDEFINED: return domain_change::undefined;
    case VIR_DOMAIN_EVENT_STARTED: return domain_change::started;
    case VIR_DOMAIN_EVENT_SUSPENDED: return domain_change::suspended;
    case VIR_DOMAIN_EVENT_RESUMED: return domain_change::resumed;
    case VIR_DOMAIN_EVENT_STOPPED: return domain_change::stopped;
    case VIR_DOMAIN_EVENT_SHUTDOWN: return domain_change::shutdown;
    case VIR_DOMAIN_EVENT_PMSUSPENDED: return domain_change::pmsuspended;
    case VIR_DOMAIN_EVENT_CRASHED: return domain_change::crashed;
    default: return domain_change::other;
  }
}

void hand_on(virDomainPtr dom, domain_change change, void* opaque) {
  auto name = virDomainGetName(dom); // local: no round trip
  if (name != nullptr)
    (*static_cast<domain_sink*>(opaque))(name, change);
}

void on_lifecycle(virConnectPtr, virDomainPtr dom, int event, int, void* opaque) {
  hand_on(dom, change_of(event), opaque);
}

void on_agent(virConnectPtr, virDomainPtr dom, int, int, void* opaque) {
  hand_on(dom, domain_change::agent, opaque);
}

// Only the mark's namespace: in a cluster a newer owner stamps it, and the
// node whose claim is older must read it back at once.
void on_metadata(virConnectPtr, virDomainPtr dom, int type, const char* nsuri, void* opaque) {
  if (type == VIR_DOMAIN_METADATA_ELEMENT && nsuri != nullptr
      && std::strcmp(nsuri, mark_namespace) == 0)
    hand_on(dom, domain_change::metadata, opaque);
}

void free_sink(void* opaque) {
  delete static_cast<domain_sink*>(opaque);
}

int register_one(connection& c, int id, virConnectDomainEventGenericCallback cb,
                 const domain_sink& sink) {
  auto copy = std::make_unique<domain_sink>(sink);
  int n = virConnectDomainEventRegisterAny(c.get(), nullptr, id, cb, copy.get(), free_sink);
  if (n >= 0) {
    copy.release(); // libvirt owns it now and frees it with free_sink
    c.keep_event_callback(n);
  }
  return n;
}

domain_state state_of(const virDomainStatsRecord& rec) {
  for (int i = 0; i < rec.nparams; ++i) {
    auto& p = rec.params[i];
    if (std::strcmp(p.field, "state.state") == 0 && p.type == VIR_TYPED_PARAM_INT)
      return p.value.i >= 0 && p.value.i <= static_cast<int>(domain_state::pmsuspended)
               ? static_cast<domain_state>(p.value.i)
               : domain_state::nostate;
  }
  return domain_state::nostate;
}

} // namespace

caf::error watch_domains(connection& c, domain_sink sink) {
  if (register_one(c, VIR_DOMAIN_EVENT_ID_LIFECYCLE,
                   VIR_DOMAIN_EVENT_CALLBACK(on_lifecycle), sink)
      < 0)
    return last_error("register domain lifecycle events");
  // Agent events are a hint (its address may be readable now); a driver
  // without them still has lifecycle events.
  if (register_one(c, VIR_DOMAIN_EVENT_ID_AGENT_LIFECYCLE, VIR_DOMAIN_EVENT_CALLBACK(on_agent),
                   sink)
      < 0)
    virResetLastError();
  // Metadata events are from libvirt 3.0; a driver without them leaves the
  // newer mark to the next read.
  if (register_one(c, VIR_DOMAIN_EVENT_ID_METADATA_CHANGE,
                   VIR_DOMAIN_EVENT_CALLBACK(on_metadata), sink)
      < 0)
    virResetLastError();
  return {};
}

caf::expected<std::vector<domain_brief>> read_states(connection& c) {
  virDomainStatsRecordPtr* recs = nullptr;
  int n = virConnectGetAllDomainStats(c.get(), VIR_DOMAIN_STATS_STATE, &recs,
                                      VIR_CONNECT_GET_ALL_DOMAINS_STATS_NOWAIT);
  if (n < 0) {
    // NOWAIT is from libvirt 4.5; an older daemon refuses the flag.
    auto err = last_error("read every domain's state");
    if (!is(err, ec::invalid_argument) && !is(err, ec::unsupported))
      return err;
    n = virConnectGetAllDomainStats(c.get(), VIR_DOMAIN_STATS_STATE, &recs, 0);
    if (n < 0)
      return last_error("read every domain's state");
  }
  std::vector<domain_brief> out;
  out.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    auto name = virDomainGetName(recs[i]->dom);
    if (name == nullptr)
      continue;
    domain_brief b;
    b.name = name;
    b.uuid = uuid_of(recs[i]->dom);
    b.state = state_of(*recs[i]);
    out.push_back(std::move(b));
  }
  virDomainStatsRecordListFree(recs);
  return out;
}

caf::expected<std::vector<lease>> read_leases(connection& c) {
  virNetworkPtr* nets = nullptr;
  int n = virConnectListAllNetworks(c.get(), &nets, VIR_CONNECT_LIST_NETWORKS_ACTIVE);
  if (n < 0)
    return last_error("list networks");
  std::vector<lease> out;
  caf::error failed;
  for (int i = 0; i < n; ++i) {
    virNetworkDHCPLeasePtr* leases = nullptr;
    int k = failed ? 0 : virNetworkGetDHCPLeases(nets[i], nullptr, &leases, 0);
    if (k < 0) {
      // Copied before anything else: virNetworkGetName resets it.
      auto err = last_error("read the DHCP leases of a network");
      auto net = virNetworkGetName(nets[i]);
      // A network gone between the list and its read has no leases to
      // give; any other failure fails the list (a proxy must not take a
      // network's unread leases for none).
      if (!is(err, ec::no_network))
        failed = make_error(static_cast<ec>(err.code()),
                            std::string{"network "} + (net != nullptr ? net : "?") + ": "
                              + detail(err));
      k = 0;
    }
    for (int j = 0; j < k; ++j) {
      auto* l = leases[j];
      if (l->mac != nullptr && l->ipaddr != nullptr) {
        std::string mac = l->mac;
        for (auto& ch : mac)
          ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        out.push_back({std::move(mac), l->ipaddr});
      }
      virNetworkDHCPLeaseFree(l);
    }
    std::free(leases);
    virNetworkFree(nets[i]);
  }
  std::free(nets);
  if (failed)
    return failed;
  return out;
}

} // namespace egress::lv
