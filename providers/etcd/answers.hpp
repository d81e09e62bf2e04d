#pragma once
// How etcd 3.4's JSON gateway answers, read strictly (providers/etcd/client.cpp
// is the only user): keys and values in base64, int64 fields as strings,
// default values left out, two error shapes, and what each answer means for
// the request (docs/notes/etcd.md has every shape as measured).

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "providers/etcd/client.hpp"

namespace egress::etcd::gateway {

using json = nlohmann::json;

/// An answer that is not of the shape etcd gives: thrown by the parsers
/// below, caught where an answer is read and turned into store_garbage.
struct garbage : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// -- text ---------------------------------------------------------------------

/// Keys are bytes: messages show them with anything unprintable escaped.
std::string printable(std::string_view s);
/// The first bytes of an answer, for a message about it.
std::string excerpt(std::string_view body);
std::string base64_encode(std::string_view in);
/// Standard padded base64, as Go's encoding/json writes []byte; anything
/// else throws garbage.
std::string base64_decode(std::string_view in);

// -- reading the gateway's JSON (each throws garbage on another shape) ---------

/// An int64 field: written as a string ("revision":"5"); left out is 0.
int64_t int_field(const json& obj, const char* name);
/// A string field; "" when left out.
std::string string_field(const json& obj, const char* name);
bool bool_field(const json& obj, const char* name);
/// An object member; an empty object when left out.
const json& object_field(const json& obj, const char* name);
/// An array member; an empty array when left out.
const json& array_field(const json& obj, const char* name);
/// Every answer carries the store's revision in its header.
int64_t header_revision(const json& answer);
key_value parse_kv(const json& j);
std::vector<key_value> parse_kvs(const json& answer);
/// The only response of a transaction, unwrapped ("response_put", ...).
const json& txn_response(const json& answer, const char* kind);
std::vector<watch_event> parse_events(const json& result);

// -- what an answer means -------------------------------------------------------

/// What one exchange with the store came to.
enum class verdict {
  ok,
  unavailable,   // refused, reset, silent, or a member without quorum
  token_expired, // etcd no longer accepts our token: authenticate again
  refused,       // etcd said no (permanent)
  garbage,       // not an answer etcd gives
};

struct outcome {
  verdict v = verdict::ok;
  std::string endpoint; // the one that answered or failed; "" when every one failed
  std::string what;     // !ok: what went wrong, etcd's own words where it said
  json body;            // ok: the answer
  bool established = false; // watch: etcd confirmed the watch before it ended
};

outcome failed(verdict v, std::string endpoint, std::string what);

/// etcd's words for a token it no longer takes (simple tokens expire after
/// --auth-token-ttl, and every token dies with a restart of the member).
bool says_token_expired(int grpc_code, const std::string& message);

/// An error answer ({"error":...}) with its HTTP status.
outcome judge_error(const std::string& endpoint, const json& answer, long status);

/// One whole answer of a unary call: its status and body.
outcome judge(const std::string& endpoint, long status, const std::string& body);

} // namespace egress::etcd::gateway
