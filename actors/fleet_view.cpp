#include "actors/fleet_view.hpp"

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
  return store(health_, key, std::move(h), watched);
}

void fleet_view::forget_link(const std::string& host) {
  links_.erase(host);
}

void fleet_view::forget_image(const std::string& key) {
  images_.erase(key);
}

void fleet_view::forget_proxy(const std::string& name) {
  proxies_.erase(name);
  health_.erase(name);
}

void fleet_view::clear_rotation() {
  for (auto& [_, h] : health_)
    h.in_rotation = false;
}

void fleet_view::declare_proxy(const std::string& name, bool declared) {
  if (declared)
    declared_.insert(name);
  else
    declared_.erase(name);
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
      if (p.in_rotation)
        out.rotation.push_back(name);
    }
    out.proxies.push_back(std::move(p));
  }
  for (auto& [_, s] : images_)
    out.images.push_back(s);
  out.reloads = reloads_;
  out.last_reload = last_reload_;
  return out;
}

} // namespace egress
