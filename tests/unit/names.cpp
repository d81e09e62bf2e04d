#define BOOST_TEST_MODULE names
// The rules for user-supplied names and values (messages/names.hpp): what
// may reach libvirt XML, a volume name or a path, and how a refused value is
// shown (docs/spec.md 14).
#include <boost/test/unit_test.hpp>

#include <string>
#include <utility>
#include <vector>

#include "messages/error.hpp"
#include "messages/names.hpp"

using namespace egress;

namespace {

const std::string tricky_tag = "<&\"'";

// Strings, so that Boost.Test can print what it compares.
std::string code_of(const caf::error& err) {
  return to_string(static_cast<ec>(err.code()));
}

std::string kind(const caf::error& err) {
  return to_string(kind_of(err));
}

// Values that must never pass check_name, with why.
const std::vector<std::pair<std::string, std::string>> bad_names = {
  {"a<b", "markup"},
  {"a&b", "entity"},
  {"a\"b", "double quote"},
  {"a'b", "single quote"},
  {"a/b", "path separator"},
  {"..", "parent directory"},
  {"../etc", "path traversal"},
  {std::string(300, 'a'), "300 characters"},
  {std::string(64, 'a'), "64 characters"},
  {"", "empty"},
  {"Proxy", "uppercase"},
  {"-px", "leading dash"},
  {"px-", "trailing dash"},
  {"a\x01z", "control character"},
  {"a\nb", "newline"},
  {"a b", "space"},
  {"a_b", "underscore"},
  {"a.b", "dot"},
  {"caf\xc3\xa9", "non-ASCII"},
};

} // namespace

BOOST_AUTO_TEST_CASE(spec_14_check_name_accepts_the_pattern) {
  for (std::string ok : {"a", "0", "px-1", "a-b-c", "9lives"})
    BOOST_TEST(!check_name("n", ok), ok);
  BOOST_TEST(!check_name("n", std::string(63, 'a')));
}

BOOST_AUTO_TEST_CASE(spec_14_check_name_rejects_unsafe_values) {
  for (auto& [value, why] : bad_names) {
    auto err = check_name("engine.proxies[0].name", value);
    BOOST_TEST_CONTEXT(why) {
      BOOST_TEST(code_of(err) == "invalid_name");
      BOOST_TEST(kind(err) == "permanent");
      BOOST_TEST(detail(err).find("engine.proxies[0].name: ") == 0u);
    }
  }
}

BOOST_AUTO_TEST_CASE(spec_14_check_name_message_names_field_and_value) {
  auto err = check_name("engine.proxies[0].name", "a/b");
  BOOST_TEST(detail(err)
             == "engine.proxies[0].name: \"a/b\" is not a valid name "
                "(must match [a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)");
}

BOOST_AUTO_TEST_CASE(spec_14_error_messages_escape_control_characters) {
  auto msg = detail(check_name("n", std::string{"a\x01\x1b[2J\n\"\\"}));
  BOOST_TEST(msg.find("\"a\\x01\\x1b[2J\\n\\\"\\\\\"") != std::string::npos, msg);
  for (auto c : msg)
    BOOST_TEST((c >= 0x20 && c <= 0x7e), "raw byte in message: " << int(c));
}

BOOST_AUTO_TEST_CASE(spec_14_long_values_are_cut_short_in_messages) {
  auto msg = detail(check_name("n", std::string(300, 'x')));
  BOOST_TEST(msg.find("(300 characters)") != std::string::npos, msg);
  BOOST_TEST(msg.size() < 200u);
}

BOOST_AUTO_TEST_CASE(spec_14_check_tag_allows_markup_but_not_control_bytes) {
  BOOST_TEST(!check_tag("t", tricky_tag));
  BOOST_TEST(!check_tag("t", "eu west / 2"));
  BOOST_TEST(!check_tag("t", std::string(64, 't')));
  for (std::string bad : {std::string{}, std::string(65, 't'), std::string{"a\tb"},
                          std::string{"a\x7f"}, std::string{"caf\xc3\xa9"}}) {
    auto err = check_tag("engine.proxies[2].tags[1]", bad);
    BOOST_TEST(kind(err) == "permanent");
    BOOST_TEST(detail(err).find("engine.proxies[2].tags[1]: ") == 0u);
  }
}

BOOST_AUTO_TEST_CASE(check_cidr_takes_v4_and_v6_prefixes_only) {
  for (std::string ok : {"10.0.0.0/8", "192.168.7.0/24", "fd00::/64", "0.0.0.0/0"})
    BOOST_TEST(!check_cidr("allow-from", ok), ok);
  for (std::string bad : {"10.0.0.0", "10.0.0.0/33", "fd00::/129", "/8", "x/8", "10.0.0.0/8x"})
    BOOST_TEST(is(check_cidr("allow-from", bad), ec::invalid_argument), bad);
}
