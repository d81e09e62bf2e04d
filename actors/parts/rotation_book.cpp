#include "actors/parts/rotation_book.hpp"

#include <nlohmann/json.hpp>

#include "base/time_text.hpp"

namespace egress {

std::optional<rotation_book::change> rotation_book::put(rotation_member m) {
  cached_ = nullptr;
  auto i = members_.find(m.name);
  if (i != members_.end()) {
    auto& old = i->second;
    bool moved = old.address != m.address || old.port != m.port || old.host != m.host
                 || old.tags != m.tags;
    m.joined_at = old.joined_at;
    old = std::move(m);
    if (!moved)
      return std::nullopt;
    return change{old, true, ++generation_};
  }
  m.joined_at = now_rfc3339();
  auto name = m.name;
  auto& in = members_[name] = std::move(m);
  return change{in, true, ++generation_};
}

std::optional<rotation_book::change> rotation_book::remove(const std::string& name) {
  auto i = members_.find(name);
  if (i == members_.end())
    return std::nullopt;
  cached_ = nullptr;
  change out{std::move(i->second), false, ++generation_};
  members_.erase(i);
  return out;
}

rotation_snapshot rotation_book::snapshot(const std::string& node) const {
  if (cached_ && cached_->node == node)
    return cached_;
  auto view = std::make_shared<rotation_view>();
  view->node = node;
  view->generation = generation_;
  view->members.reserve(members_.size());
  for (auto& [_, m] : members_)
    view->members.push_back(m);
  cached_ = std::move(view);
  return cached_;
}

std::string rotation_json(const rotation_view& view) {
  auto proxies = nlohmann::json::array();
  for (auto& m : view.members) {
    auto host = m.address.find(':') != std::string::npos ? "[" + m.address + "]" : m.address;
    proxies.push_back({{"name", m.name},
                       {"host", m.host},
                       {"address", m.address},
                       {"port", m.port},
                       {"endpoint", host + ":" + std::to_string(m.port)},
                       {"tags", m.tags},
                       {"joined_at", m.joined_at},
                       {"probe_ms", m.probe_ms}});
  }
  nlohmann::json out{{"node", view.node},
                     {"generation", view.generation},
                     {"size", view.members.size()},
                     {"proxies", std::move(proxies)}};
  return out.dump() + "\n";
}

} // namespace egress
