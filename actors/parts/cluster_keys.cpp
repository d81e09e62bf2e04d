#include "actors/parts/cluster_keys.hpp"

#include <arpa/inet.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "messages/names.hpp"

namespace egress {

cluster_keys::cluster_keys(const std::string& prefix, const std::string& entry)
  : root_(prefix + "/" + entry + "/") {
}

std::optional<cluster_key> cluster_keys::parse(const std::string& key) const {
  if (!key.starts_with(root_))
    return std::nullopt;
  auto rest = key.substr(root_.size());
  auto slash = rest.find('/');
  if (slash == std::string::npos)
    return std::nullopt;
  auto kind = rest.substr(0, slash);
  auto name = rest.substr(slash + 1);
  // Names are the config's: a key naming anything else is not ours.
  if (check_name("cluster key", name))
    return std::nullopt;
  if (kind == "nodes")
    return cluster_key{cluster_key_kind::node, name};
  if (kind == "hosts")
    return cluster_key{cluster_key_kind::host, name};
  if (kind == "rotation")
    return cluster_key{cluster_key_kind::rotation, name};
  return std::nullopt;
}

// Invalid UTF-8 (an address a guest agent reported, say) is replaced, not
// thrown: nlohmann's dump() throws on it by default.
std::string dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string encode_avoid(const std::vector<std::string>& hosts) {
  return dump(nlohmann::json{{"avoid", hosts}});
}

namespace {

std::optional<nlohmann::json> parse_json(const std::string& value) {
  auto j = nlohmann::json::parse(value, nullptr, false);
  if (j.is_discarded())
    return std::nullopt;
  return j;
}

bool strings(const nlohmann::json& j, std::vector<std::string>& out) {
  if (!j.is_array())
    return false;
  for (auto& x : j) {
    if (!x.is_string())
      return false;
    out.push_back(x.get<std::string>());
  }
  return true;
}

bool ip_address(const std::string& text) {
  unsigned char buf[16];
  return inet_pton(AF_INET, text.c_str(), buf) == 1 || inet_pton(AF_INET6, text.c_str(), buf) == 1;
}

// Another node's member reaches this node's HAProxy through the gateway:
// a name and tags the config would accept and a literal address, or none.
bool acceptable(const rotation_member& m) {
  if (check_name("member", m.name) || (!m.host.empty() && check_name("member host", m.host)))
    return false;
  if (m.port == 0 || m.port > 65'535 || !ip_address(m.address))
    return false;
  return std::all_of(m.tags.begin(), m.tags.end(),
                     [](const std::string& t) { return !check_tag("member tag", t); });
}

std::optional<rotation_member> decode_member(const nlohmann::json& x) {
  if (!x.is_object() || !x.contains("name") || !x["name"].is_string()
      || !x.contains("port") || !x["port"].is_number_unsigned())
    return std::nullopt;
  rotation_member m;
  m.name = x["name"].get<std::string>();
  m.port = x["port"].get<uint32_t>();
  for (auto [key, field] : {std::pair{"host", &m.host}, std::pair{"address", &m.address},
                            std::pair{"joined_at", &m.joined_at}}) {
    if (!x.contains(key))
      continue;
    if (!x[key].is_string())
      return std::nullopt;
    *field = x[key].get<std::string>();
  }
  if (x.contains("tags") && !strings(x["tags"], m.tags))
    return std::nullopt;
  if (!acceptable(m))
    return std::nullopt;
  return m;
}

} // namespace

std::optional<std::vector<std::string>> decode_avoid(const std::string& value) {
  auto j = parse_json(value);
  std::vector<std::string> out;
  if (!j || !j->is_object() || !j->contains("avoid") || !strings((*j)["avoid"], out))
    return std::nullopt;
  return out;
}

std::string encode_members(const std::vector<rotation_member>& members) {
  auto out = nlohmann::json::array();
  for (auto& m : members)
    out.push_back({{"name", m.name},
                   {"host", m.host},
                   {"address", m.address},
                   {"port", m.port},
                   {"tags", m.tags},
                   {"joined_at", m.joined_at}});
  return dump(out);
}

std::optional<std::vector<rotation_member>> decode_members(const std::string& value) {
  auto j = parse_json(value);
  if (!j || !j->is_array() || j->size() > 100'000)
    return std::nullopt;
  std::vector<rotation_member> out;
  for (auto& x : *j) {
    auto m = decode_member(x);
    if (!m)
      return std::nullopt;
    out.push_back(std::move(*m));
  }
  return out;
}

} // namespace egress
