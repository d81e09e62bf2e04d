#include "actors/parts/fleet_view.hpp"

#include <cstdlib>
#include <tuple>

#include "base/time_text.hpp"

namespace egress {

namespace {

// Stores `now` under `key` and returns the events between the old entry and
// it (only when someone watches).
template <class Status>
std::vector<engine_event> store(std::map<std::string, Status>& view, const std::string& key,
                                Status now, bool watched) {
  auto i = view.find(key);
  std::vector<engine_event> out;
  if (watched)
    out = events_between(i == view.end() ? nullptr : &i->second, now);
  view[key] = std::move(now);
  return out;
}

} // namespace

std::vector<engine_event> fleet_view::record(link_status s, bool watched) {
  auto i = links_.find(s.host);
  auto prev = i == links_.end() ? 0 : i->second.deaths;
  if (s.deaths > prev)
    link_deaths_[{s.host, death_cause(s.reason)}] += s.deaths - prev;
  auto key = s.host;
  return store(links_, key, std::move(s), watched);
}

std::vector<engine_event> fleet_view::record(image_status s, bool watched) {
  auto key = s.image + "@" + s.host;
  return store(images_, key, std::move(s), watched);
}

std::vector<engine_event> fleet_view::record(proxy_status s, bool watched) {
  auto i = proxies_.find(s.name);
  // A proxy pushes once per reconcile read-back, with its duration.
  if (s.polls > (i == proxies_.end() ? 0 : i->second.polls))
    reconcile_seconds_.observe(s.last_poll_ms / 1000.0);
  auto key = s.name;
  return store(proxies_, key, std::move(s), watched);
}

std::vector<engine_event> fleet_view::record(proxy_health h, bool watched) {
  auto i = health_.find(h.name);
  // Health pushes once per probe; a pass carries its latency.
  if (h.probes_ok > (i == health_.end() ? 0 : i->second.probes_ok))
    probe_seconds_.observe(h.probe_ms / 1000.0);
  auto key = h.name;
  health_[key] = std::move(h);
  return place(key, watched);
}

std::vector<engine_event> fleet_view::record(gateway_status s, bool watched) {
  std::vector<engine_event> out;
  if (watched)
    out = events_between(&gateway_, s);
  gateway_ = std::move(s);
  return out;
}

namespace {

// "10.0.0.5:8888" or "[fd00::5]:8888" (the health actor's endpoint) as
// (address, port).
std::pair<std::string, uint32_t> split_endpoint(const std::string& ep) {
  auto colon = ep.rfind(':');
  if (colon == std::string::npos)
    return {ep, 0};
  auto host = ep.substr(0, colon);
  if (host.size() > 1 && host.front() == '[')
    host = host.substr(1, host.size() - 2);
  return {host, static_cast<uint32_t>(std::strtoul(ep.c_str() + colon + 1, nullptr, 10))};
}

} // namespace

std::vector<engine_event> fleet_view::place(const std::string& name, bool watched) {
  auto h = health_.find(name);
  auto d = declared_.find(name);
  std::optional<rotation_book::change> c;
  std::string why;
  if (h != health_.end() && h->second.in_rotation && d != declared_.end()
      && !retiring_.contains(name)) {
    rotation_member m;
    m.name = name;
    m.host = h->second.host;
    std::tie(m.address, m.port) = split_endpoint(h->second.address);
    m.tags = d->second.tags;
    m.probe_ms = h->second.probe_ms;
    c = rotation_.put(std::move(m));
    why = h->second.last_probe;
  } else {
    c = rotation_.remove(name);
    why = retiring_.contains(name) ? "retiring: drained before its VM is deleted or replaced"
          : d == declared_.end()   ? "no longer declared"
          : h == health_.end()     ? "retired"
          : h->second.drained      ? "drained by operator"
                                   : h->second.last_probe;
  }
  if (!c || !watched)
    return {};
  return {rotation_event_of(*c, why)};
}

void fleet_view::forget_link(const std::string& host) {
  links_.erase(host);
}

void fleet_view::forget_image(const std::string& key) {
  images_.erase(key);
}

std::vector<engine_event> fleet_view::forget_proxy(const std::string& name, bool watched) {
  proxies_.erase(name);
  health_.erase(name);
  retiring_.erase(name);
  return place(name, watched);
}

std::vector<engine_event> fleet_view::clear_rotation(bool watched) {
  std::vector<engine_event> out;
  for (auto& [name, h] : health_) {
    h.in_rotation = false;
    for (auto& ev : place(name, watched))
      out.push_back(std::move(ev));
  }
  return out;
}

void fleet_view::declare_proxy(const proxy_spec& p) {
  declared_[p.name] = {p.tags, p.port};
}

std::vector<engine_event> fleet_view::undeclare_proxy(const std::string& name, bool watched) {
  declared_.erase(name);
  return place(name, watched);
}

std::vector<engine_event> fleet_view::set_retiring(const std::string& name, bool retiring,
                                                   bool watched) {
  if (retiring)
    retiring_.insert(name);
  else
    retiring_.erase(name);
  return place(name, watched);
}

void fleet_view::spawned(const std::string& what) {
  spawned_[what] = now_rfc3339();
}

std::string fleet_view::spawned_at(const std::string& what) const {
  auto i = spawned_.find(what);
  return i == spawned_.end() ? std::string{} : i->second;
}

void fleet_view::reload_applied(const std::string& summary) {
  ++reloads_;
  last_reload_ = "applied: " + summary;
}

void fleet_view::reload_rejected(const std::string& reason) {
  last_reload_ = "rejected: " + reason;
}

fleet_status fleet_view::status(const std::string& node, const std::string& entry) const {
  fleet_status out;
  out.node = node;
  out.entry = entry;
  for (auto& [_, s] : links_)
    out.links.push_back(s);
  for (auto& [name, s] : proxies_) {
    auto p = s;
    if (auto h = health_.find(name); h != health_.end()) {
      p.in_rotation = h->second.in_rotation;
      p.probes_ok = h->second.probes_ok;
      p.probes_failed = h->second.probes_failed;
      p.probe_streak = h->second.streak;
      p.last_probe = h->second.last_probe;
      p.probe_ms = h->second.probe_ms;
    }
    out.proxies.push_back(std::move(p));
  }
  out.rotation.reserve(rotation_.size());
  for (auto& [name, _] : rotation_.members())
    out.rotation.push_back(name);
  for (auto& [_, s] : images_)
    out.images.push_back(s);
  out.reloads = reloads_;
  out.last_reload = last_reload_;
  out.generation = rotation_.generation();
  out.gateway = gateway_;
  return out;
}

} // namespace egress
