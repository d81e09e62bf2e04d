#include "providers/etcd/answers.hpp"

#include <algorithm>
#include <charconv>

namespace egress::etcd::gateway {

// -- text ---------------------------------------------------------------------

/// Keys are bytes: messages show them with anything unprintable escaped.
std::string printable(std::string_view s) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

/// The first bytes of an answer, for a message about it.
std::string excerpt(std::string_view body) {
  constexpr size_t max = 200;
  auto s = printable(body.substr(0, max));
  return body.size() > max ? s + "..." : s;
}

const char b64_alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64_encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  for (size_t i = 0; i < in.size(); i += 3) {
    uint32_t v = uint32_t(uint8_t(in[i])) << 16;
    if (i + 1 < in.size())
      v |= uint32_t(uint8_t(in[i + 1])) << 8;
    if (i + 2 < in.size())
      v |= uint8_t(in[i + 2]);
    out += b64_alphabet[v >> 18];
    out += b64_alphabet[(v >> 12) & 63];
    out += i + 1 < in.size() ? b64_alphabet[(v >> 6) & 63] : '=';
    out += i + 2 < in.size() ? b64_alphabet[v & 63] : '=';
  }
  return out;
}

static int b64_value(char c) {
  const char* p = std::char_traits<char>::find(b64_alphabet, 64, c);
  return p ? static_cast<int>(p - b64_alphabet) : -1;
}

/// Standard padded base64, as Go's encoding/json writes []byte; anything
/// else is garbage.
std::string base64_decode(std::string_view in) {
  if (in.size() % 4 != 0)
    throw garbage("base64 of length " + std::to_string(in.size()));
  std::string out;
  out.reserve(in.size() / 4 * 3);
  for (size_t i = 0; i < in.size(); i += 4) {
    size_t pad = 0;
    uint32_t v = 0;
    for (size_t k = 0; k < 4; ++k) {
      char c = in[i + k];
      bool last_group = i + 4 == in.size();
      if (c == '=' && last_group && k >= 2 && (k == 3 || in[i + 3] == '=')) {
        ++pad;
        v <<= 6;
        continue;
      }
      int d = b64_value(c);
      if (d < 0 || pad > 0)
        throw garbage("not base64: \"" + excerpt(in) + "\"");
      v = (v << 6) | static_cast<uint32_t>(d);
    }
    out += static_cast<char>(v >> 16);
    if (pad < 2)
      out += static_cast<char>((v >> 8) & 255);
    if (pad < 1)
      out += static_cast<char>(v & 255);
  }
  return out;
}

// -- reading the gateway's JSON -------------------------------------------------

/// An int64 field: the gateway writes them as strings ("revision":"5"); a
/// field left out is 0 (proto3 leaves out every default value).
int64_t int_field(const json& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null())
    return 0;
  if (it->is_number_integer())
    return it->get<int64_t>();
  if (!it->is_string())
    throw garbage(std::string{name} + " is neither a number nor a string");
  const auto& s = it->get_ref<const std::string&>();
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size())
    throw garbage(std::string{name} + " is \"" + excerpt(s) + "\", not an integer");
  return v;
}

/// A string field; "" when left out.
std::string string_field(const json& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null())
    return {};
  if (!it->is_string())
    throw garbage(std::string{name} + " is not a string");
  return it->get<std::string>();
}

bool bool_field(const json& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null())
    return false;
  if (!it->is_boolean())
    throw garbage(std::string{name} + " is not a boolean");
  return it->get<bool>();
}

/// An object member; an empty object when left out.
const json& object_field(const json& obj, const char* name) {
  static const json empty = json::object();
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null())
    return empty;
  if (!it->is_object())
    throw garbage(std::string{name} + " is not an object");
  return *it;
}

/// An array member; an empty array when left out.
const json& array_field(const json& obj, const char* name) {
  static const json empty = json::array();
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null())
    return empty;
  if (!it->is_array())
    throw garbage(std::string{name} + " is not an array");
  return *it;
}

/// Every answer carries the store's revision in its header.
int64_t header_revision(const json& answer) {
  if (!answer.contains("header"))
    throw garbage("no header");
  return int_field(object_field(answer, "header"), "revision");
}

key_value parse_kv(const json& j) {
  if (!j.is_object())
    throw garbage("a key-value that is not an object");
  key_value kv;
  kv.key = base64_decode(string_field(j, "key"));
  kv.value = base64_decode(string_field(j, "value"));
  kv.create_revision = int_field(j, "create_revision");
  kv.mod_revision = int_field(j, "mod_revision");
  kv.lease = int_field(j, "lease");
  return kv;
}

std::vector<key_value> parse_kvs(const json& answer) {
  std::vector<key_value> out;
  for (const auto& kv : array_field(answer, "kvs"))
    out.push_back(parse_kv(kv));
  return out;
}

/// The n-th response of a transaction, unwrapped ("response_put", ...).
const json& txn_response(const json& answer, const char* kind) {
  const auto& responses = array_field(answer, "responses");
  if (responses.empty() || !responses.front().is_object())
    throw garbage(std::string{"no "} + kind + " in the transaction's answer");
  return object_field(responses.front(), kind);
}

std::vector<watch_event> parse_events(const json& result) {
  std::vector<watch_event> out;
  for (const auto& e : array_field(result, "events")) {
    if (!e.is_object())
      throw garbage("an event that is not an object");
    auto type = string_field(e, "type");
    if (!type.empty() && type != "PUT" && type != "DELETE")
      throw garbage("an event of type \"" + excerpt(type) + "\"");
    out.push_back({type == "DELETE", parse_kv(object_field(e, "kv"))});
  }
  return out;
}

// -- what an answer means -------------------------------------------------------



outcome failed(verdict v, std::string endpoint, std::string what) {
  return {v, std::move(endpoint), std::move(what), {}, false};
}

/// etcd's words for "not now, maybe elsewhere": a member without quorum
/// answers put and range with "request timed out" (HTTP 503), grant with
/// "context deadline exceeded" (HTTP 500), keepalive with "no leader"
/// (docs/notes/etcd.md#without-quorum); gRPC's Unavailable and
/// DeadlineExceeded say the same in codes.
static bool says_unavailable(int grpc_code, const std::string& message) {
  for (auto words : {"request timed out", "no leader", "context deadline exceeded"})
    if (message.find(words) != std::string::npos)
      return true;
  return grpc_code == 14 /* Unavailable */ || grpc_code == 4 /* DeadlineExceeded */;
}

/// etcd's words for a token it no longer takes (simple tokens expire after
/// --auth-token-ttl, and every token dies with a restart of the member).
bool says_token_expired(int grpc_code, const std::string& message) {
  return grpc_code == 16 /* Unauthenticated */
         || message.find("invalid auth token") != std::string::npos
         || message.find("revision of auth store is old") != std::string::npos;
}

/// The gateway's two error shapes: {"error":"text","code":n} for a unary
/// call, {"error":{"grpc_code":n,"message":"text",...}} inside a stream
/// (keepalive, watch).
static std::pair<int, std::string> error_of(const json& answer) {
  const auto& e = answer.at("error");
  if (e.is_object())
    return {static_cast<int>(int_field(e, "grpc_code")), string_field(e, "message")};
  return {static_cast<int>(int_field(answer, "code")),
          e.is_string() ? e.get<std::string>() : e.dump()};
}

outcome judge_error(const std::string& endpoint, const json& answer, long status) {
  auto [code, message] = error_of(answer);
  auto what = message + " (HTTP " + std::to_string(status) + ", code " + std::to_string(code)
              + ")";
  if (says_token_expired(code, message))
    return failed(verdict::token_expired, endpoint, what);
  if (says_unavailable(code, message) || status == 503)
    return failed(verdict::unavailable, endpoint, what);
  return failed(verdict::refused, endpoint, what);
}

/// One whole answer of a unary call: its status and body.
outcome judge(const std::string& endpoint, long status, const std::string& body) {
  auto j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    if (status == 503 || status == 502 || status == 504)
      return failed(verdict::unavailable, endpoint, "HTTP " + std::to_string(status));
    return failed(verdict::garbage, endpoint, "HTTP " + std::to_string(status)
                                                + " with a body that is not a JSON object: \""
                                                + excerpt(body) + "\"");
  }
  try {
    if (j.contains("error"))
      return judge_error(endpoint, j, status);
  } catch (const std::exception& e) {
    return failed(verdict::garbage, endpoint, std::string{"an error answer of an unknown shape: "}
                                                + e.what() + ": \"" + excerpt(body) + "\"");
  }
  if (status != 200)
    return failed(verdict::garbage, endpoint, "HTTP " + std::to_string(status) + " without an "
                                                "error: \"" + excerpt(body) + "\"");
  // A stream's message (keepalive) is wrapped: {"result":{...}}.
  if (auto r = j.find("result"); r != j.end() && r->is_object())
    return {verdict::ok, endpoint, {}, *r, false};
  return {verdict::ok, endpoint, {}, std::move(j), false};
}

} // namespace egress::etcd::gateway
