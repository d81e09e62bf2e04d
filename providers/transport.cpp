#include "providers/transport.hpp"

namespace egress {

transport::~transport() = default;

transport_factory direct(std::string uri) {
  return [uri = std::move(uri)]() -> transport_ptr {
    return std::make_shared<direct_transport>(uri);
  };
}

} // namespace egress
