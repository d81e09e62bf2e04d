#include "messages/actor_kind.hpp"

namespace egress {

namespace {

constexpr actor_kind all_kinds[] = {
  actor_kind::fleet, actor_kind::link,   actor_kind::image, actor_kind::proxy,
  actor_kind::health, actor_kind::gateway, actor_kind::call, actor_kind::worker,
  actor_kind::node, actor_kind::inspector, actor_kind::metrics, actor_kind::cluster,
};

} // namespace

const char* to_string(actor_kind x) {
  switch (x) {
    case actor_kind::fleet: return "fleet";
    case actor_kind::link: return "link";
    case actor_kind::image: return "image";
    case actor_kind::proxy: return "proxy";
    case actor_kind::health: return "health";
    case actor_kind::gateway: return "gateway";
    case actor_kind::call: return "call";
    case actor_kind::worker: return "worker";
    case actor_kind::node: return "node";
    case actor_kind::inspector: return "inspector";
    case actor_kind::metrics: return "metrics";
    case actor_kind::cluster: return "cluster";
  }
  return "unknown";
}

std::optional<actor_kind> actor_kind_from(std::string_view word) {
  for (auto k : all_kinds) {
    std::string_view name = to_string(k);
    if (word == name)
      return k;
    // The plural: the word with an "s" (what `names proxys`-style scripts
    // built from the singular send), and "proxies".
    if ((word.size() == name.size() + 1 && word.starts_with(name) && word.back() == 's')
        || (k == actor_kind::proxy && word == "proxies"))
      return k;
  }
  return std::nullopt;
}

std::string actor_name(actor_kind kind, std::string_view name) {
  std::string out = to_string(kind);
  out += '/';
  out += name;
  return out;
}

} // namespace egress
