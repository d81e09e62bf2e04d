#include "actors/parts/domain_watch.hpp"

namespace egress {

namespace {

// The addresses the leases give these MACs, IPv4 first (what a proxy is
// reached by when it has both).
std::vector<std::string> leased_to(const std::multimap<std::string, std::string>& by_mac,
                                   const std::vector<std::string>& macs) {
  std::vector<std::string> v4, v6;
  for (auto& mac : macs)
    for (auto [i, end] = by_mac.equal_range(mac); i != end; ++i)
      (i->second.find(':') == std::string::npos ? v4 : v6).push_back(i->second);
  v4.insert(v4.end(), v6.begin(), v6.end());
  return v4;
}

// A brief the proxy may go without: its domain runs (a missing or stopped
// one is always told, so a domain gone while the link looked away is never
// taken for one that did not change) and it says what the proxy was last
// told, word for word. A proxy that waits for an address always gets its
// brief: each one without an address counts for its IP grace.
bool nothing_new(const std::optional<domain_brief>& told, const domain_brief& b, bool waiting) {
  bool runs = b.exists && (b.state == domain_state::running || b.state == domain_state::blocked);
  return runs && !waiting && told && told->exists == b.exists && told->state == b.state
         && told->uuid == b.uuid && told->leases == b.leases && told->addresses == b.addresses;
}

} // namespace

void domain_watch::dialed() noexcept {
  leases_ = lease_view::not_read;
  for (auto& [_, w] : watchers_)
    w.told.reset();
}

void domain_watch::watch(std::string name, proxy_actor proxy) {
  watchers_[std::move(name)] = watcher{std::move(proxy), {}, false, std::nullopt};
}

domain_watch::after_note domain_watch::note(address_watch& w) {
  after_note out;
  auto i = watchers_.find(w.name);
  if (i == watchers_.end())
    return out; // a proxy subscribes before it says anything else
  bool starts_waiting = w.waiting && !i->second.waiting;
  bool new_macs = !w.macs.empty() && i->second.macs.empty();
  i->second.macs = std::move(w.macs);
  i->second.waiting = w.waiting;
  // The first proxy with MACs on a host whose leases were never read: read
  // them now, so that it learns at once whether it can rely on them.
  out.read_now = new_macs && leases_ == lease_view::not_read;
  out.arm_lease = starts_waiting;
  return out;
}

bool domain_watch::begin_read() {
  if (reading_) {
    read_again_ = true;
    return false;
  }
  reading_ = true;
  read_again_ = false;
  return true;
}

bool domain_watch::with_leases() const {
  return leases_ != lease_view::unsupported && any_macs();
}

// A diff against the previous read would miss a domain created after it and
// gone while the link was dead (absent both times): every watcher gets a
// brief unless its domain runs and nothing in the brief is new to it.
std::vector<domain_watch::delivery> domain_watch::end_read(reading read) {
  reading_ = false;
  ++bulk_reads_;
  if (read.leases != lease_view::not_read)
    leases_ = read.leases;
  if (read.leases == lease_view::read)
    ++lease_reads_;
  std::multimap<std::string, std::string> by_mac;
  for (auto& l : read.lease_list)
    by_mac.emplace(std::move(l.mac), std::move(l.address));
  std::map<std::string, domain_brief*> by_name;
  for (auto& b : read.briefs)
    by_name.emplace(b.name, &b);
  std::vector<delivery> out;
  out.reserve(watchers_.size());
  for (auto& [name, w] : watchers_) {
    domain_brief brief;
    if (auto i = by_name.find(name); i != by_name.end()) {
      brief = std::move(*i->second);
    } else {
      brief.name = name;
      brief.exists = false;
      brief.taken = read.taken;
    }
    if (read.leases == lease_view::unsupported)
      brief.leases = lease_view::unsupported;
    else if (read.leases != lease_view::not_read && !w.macs.empty())
      brief.leases = read.leases;
    if (brief.leases == lease_view::read)
      brief.addresses = leased_to(by_mac, w.macs);
    if (nothing_new(w.told, brief, w.waiting)) {
      ++briefs_unchanged_;
      continue;
    }
    w.told = brief;
    out.emplace_back(w.proxy, std::move(brief));
  }
  return out;
}

bool domain_watch::arm_lease() {
  if (lease_armed_ || leases_ == lease_view::unsupported || !any_waiting())
    return false;
  lease_armed_ = true;
  return true;
}

bool domain_watch::lease_fired() {
  lease_armed_ = false;
  return any_waiting() && leases_ != lease_view::unsupported;
}

std::optional<proxy_actor> domain_watch::route(const domain_event& ev, uint64_t current,
                                               bool link_dead) {
  ++events_;
  // An event of an older dial arrived late, or of a dial already dead: the
  // resync after the next dial reads the domain since.
  if (ev.generation != current || link_dead)
    return std::nullopt;
  if (auto i = watchers_.find(ev.name); i != watchers_.end())
    return i->second.proxy;
  return std::nullopt;
}

bool domain_watch::any_macs() const {
  for (auto& [name, w] : watchers_)
    if (!w.macs.empty())
      return true;
  return false;
}

bool domain_watch::any_waiting() const {
  for (auto& [name, w] : watchers_)
    if (w.waiting)
      return true;
  return false;
}

} // namespace egress
