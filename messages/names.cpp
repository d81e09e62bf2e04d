#include "messages/names.hpp"

#include <arpa/inet.h>

#include <cstdio>
#include <string>

#include "messages/error.hpp"

namespace egress {

namespace {

// Long enough to recognize a value, short enough to keep a log line readable.
constexpr size_t shown_max = 64;

bool lower_alnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

bool printable_ascii(char c) {
  return c >= 0x20 && c <= 0x7e;
}

} // namespace

std::string quote(std::string_view value) {
  std::string out = "\"";
  for (auto c : value.substr(0, shown_max)) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (printable_ascii(c)) {
          out += c;
        } else {
          char buf[5];
          std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(c));
          out += buf;
        }
    }
  }
  out += '"';
  if (value.size() > shown_max)
    out += "... (" + std::to_string(value.size()) + " characters)";
  return out;
}

caf::error check_name(std::string_view what, std::string_view value) {
  bool ok = !value.empty() && value.size() <= 63 && lower_alnum(value.front())
            && lower_alnum(value.back());
  for (size_t i = 0; ok && i < value.size(); ++i)
    ok = lower_alnum(value[i]) || value[i] == '-';
  if (ok)
    return {};
  return make_error(ec::invalid_name, std::string{what} + ": " + quote(value)
                                        + " is not a valid name (must match "
                                        + name_pattern + ")");
}

caf::error check_volume_name(std::string_view what, std::string_view value) {
  bool ok = !value.empty() && value.size() <= 255;
  for (size_t from = 0; ok;) {
    auto dot = value.find('.', from);
    auto part = value.substr(from, dot == std::string_view::npos ? value.npos : dot - from);
    ok = !check_name(what, part);
    if (dot == std::string_view::npos)
      break;
    from = dot + 1;
  }
  if (ok)
    return {};
  return make_error(ec::invalid_name, std::string{what} + ": " + quote(value)
                                        + " is not a valid volume name (must match "
                                        + volume_name_pattern + ", at most 255 characters)");
}

caf::error check_tag(std::string_view what, std::string_view value) {
  bool ok = !value.empty() && value.size() <= 64;
  for (size_t i = 0; ok && i < value.size(); ++i)
    ok = printable_ascii(value[i]);
  if (ok)
    return {};
  return make_error(ec::invalid_argument,
                    std::string{what} + ": " + quote(value)
                      + " is not a valid tag (must be 1..64 printable ASCII characters)");
}

caf::error check_cidr(std::string_view what, std::string_view value) {
  auto slash = value.find('/');
  bool ok = slash != std::string_view::npos && slash > 0 && slash + 1 < value.size()
            && value.size() - slash - 1 <= 3;
  if (ok) {
    std::string addr{value.substr(0, slash)};
    unsigned char bytes[16];
    int max_prefix = 0;
    if (inet_pton(AF_INET, addr.c_str(), bytes) == 1)
      max_prefix = 32;
    else if (inet_pton(AF_INET6, addr.c_str(), bytes) == 1)
      max_prefix = 128;
    else
      ok = false;
    int prefix = 0;
    for (auto c : value.substr(slash + 1)) {
      ok = ok && c >= '0' && c <= '9';
      prefix = prefix * 10 + (c - '0');
    }
    ok = ok && prefix <= max_prefix;
  }
  if (ok)
    return {};
  return make_error(ec::invalid_argument,
                    std::string{what} + ": " + quote(value)
                      + " is not an address with a prefix length (e.g. 10.0.0.0/8 or "
                        "fd00::/64)");
}

} // namespace egress
