#include "messages/error.hpp"

#include <caf/actor_system_config.hpp>
#include <caf/message.hpp>

namespace egress {

error_kind kind_of(ec code) {
  auto x = static_cast<uint8_t>(code);
  if (x < 64)
    return error_kind::transient;
  if (x < 128)
    return error_kind::not_found;
  return error_kind::permanent;
}

error_kind kind_of(const caf::error& err) {
  // CAF 0.17.6: category() on an empty error reads through a null pointer.
  if (!err)
    return error_kind::permanent;
  if (err.category() == caf::atom("egress"))
    return kind_of(static_cast<ec>(err.code()));
  // CAF's own request timeout means "no answer in time": the far side may
  // still answer next time.
  if (err == caf::sec::request_timeout)
    return error_kind::transient;
  return error_kind::permanent;
}

const char* to_string(ec code) {
  switch (code) {
    case ec::none: return "none";
    case ec::link_down: return "link_down";
    case ec::budget_exceeded: return "budget_exceeded";
    case ec::connection_broken: return "connection_broken";
    case ec::libvirt_timeout: return "libvirt_timeout";
    case ec::libvirt_transient: return "libvirt_transient";
    case ec::shutting_down: return "shutting_down";
    case ec::no_address_source: return "no_address_source";
    case ec::ssh_failed: return "ssh_failed";
    case ec::source_failed: return "source_failed";
    case ec::source_timeout: return "source_timeout";
    case ec::image_gone: return "image_gone";
    case ec::storage_full: return "storage_full";
    case ec::volume_gone: return "volume_gone";
    case ec::gateway_unreachable: return "gateway_unreachable";
    case ec::gateway_garbage: return "gateway_garbage";
    case ec::gateway_timeout: return "gateway_timeout";
    case ec::store_unreachable: return "store_unreachable";
    case ec::store_garbage: return "store_garbage";
    case ec::fenced: return "fenced";
    case ec::no_domain: return "no_domain";
    case ec::no_pool: return "no_pool";
    case ec::no_volume: return "no_volume";
    case ec::no_network: return "no_network";
    case ec::libvirt_not_found: return "libvirt_not_found";
    case ec::source_not_found: return "source_not_found";
    case ec::unknown_name: return "unknown_name";
    case ec::invalid_argument: return "invalid_argument";
    case ec::xml_error: return "xml_error";
    case ec::access_denied: return "access_denied";
    case ec::unsupported: return "unsupported";
    case ec::invalid_name: return "invalid_name";
    case ec::config_invalid: return "config_invalid";
    case ec::libvirt_permanent: return "libvirt_permanent";
    case ec::foreign_domain: return "foreign_domain";
    case ec::host_key_rejected: return "host_key_rejected";
    case ec::auth_failed: return "auth_failed";
    case ec::source_rejected: return "source_rejected";
    case ec::length_mismatch: return "length_mismatch";
    case ec::digest_mismatch: return "digest_mismatch";
    case ec::image_rejected: return "image_rejected";
    case ec::gateway_refused: return "gateway_refused";
    case ec::superseded: return "superseded";
    case ec::store_refused: return "store_refused";
  }
  return "unknown";
}

const char* to_string(error_kind kind) {
  switch (kind) {
    case error_kind::transient: return "transient";
    case error_kind::not_found: return "not_found";
    case error_kind::permanent: return "permanent";
  }
  return "unknown";
}

std::string detail(const caf::error& err) {
  if (!err || err.category() != caf::atom("egress"))
    return {};
  auto& ctx = err.context();
  if (ctx.size() == 1 && ctx.match_element<std::string>(0))
    return ctx.get_as<std::string>(0);
  return {};
}

std::string render(const caf::error& err) {
  if (!err)
    return "ok";
  if (err.category() == caf::atom("egress")) {
    auto code = static_cast<ec>(err.code());
    std::string out = to_string(kind_of(code));
    out += '/';
    out += to_string(code);
    auto ctx = detail(err);
    if (!ctx.empty()) {
      out += ": ";
      out += ctx;
    }
    return out;
  }
  std::string out = to_string(kind_of(err));
  out += '/';
  out += caf::to_string(err);
  return out;
}

caf::error make_error(ec code, std::string context) {
  return caf::error{static_cast<uint8_t>(code), caf::atom("egress"),
                    caf::make_message(std::move(context))};
}

caf::error with_context(const caf::error& err, const std::string& prefix) {
  if (!err || err.category() != caf::atom("egress"))
    return err;
  return make_error(static_cast<ec>(err.code()), prefix + ": " + detail(err));
}

caf::error as_transient(const caf::error& err) {
  if (!err || kind_of(err) == error_kind::transient)
    return err;
  return make_error(ec::libvirt_transient, render(err));
}

void add_error_renderer(caf::actor_system_config& cfg) {
  cfg.add_error_category(caf::atom("egress"),
                         [](uint8_t code, caf::atom_value, const caf::message& ctx) {
                           caf::error tmp{code, caf::atom("egress"), ctx};
                           return render(tmp);
                         });
}

bool is(const caf::error& err, ec code) {
  return err && err.category() == caf::atom("egress")
         && err.code() == static_cast<uint8_t>(code);
}

} // namespace egress
