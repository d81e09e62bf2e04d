#pragma once
// Who may make this node act (engine.inspect.secret-file): parties that
// proved they know the shared secret, by token.
//
// Why tokens, and not "which node sent it": a BASP message names its sender
// itself, and CAF resolves a sender that claims this node's id from its own
// registry, so a connected party can send as any of this node's actors (a
// review proved it with a forged message). Only content can be checked.
//
// The hello is a mutual challenge, and the secret never crosses the wire:
// the party sends a nonce; the node answers with its own nonce and a proof
// over both (HMAC-SHA-256 under the secret, labelled "node"); the party
// checks it, so a shell or a dialing peer never proves anything to
// something that does not know the secret; then the party proves (labelled
// "party") and gets a token. A relay that passes both sides' messages
// along unchanged is not stopped by proofs; TLS with the CA's certificates
// is what keeps it out of the connection.
//
// The node's nonces are stateless: random bytes, the time and a MAC under a
// key of this process, so a flood of hellos costs no memory; a nonce is
// good for a minute and, once a correct proof used it, never again.
//
// Owned by the node actor, the only actor of the engine that talks to
// another process (see actors/node.cpp).

#include <chrono>
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "providers/crypto/secret.hpp"

namespace egress {

class admission {
public:
  using clock = std::chrono::steady_clock;

  explicit admission(std::string secret = {})
    : secret_(std::move(secret)),
      key_(crypto::random_hex(32)),
      own_(crypto::random_hex(16)),
      born_(clock::now()) {}

  /// False when no secret is configured: every token passes, and the
  /// proofs are made with the empty secret.
  bool required() const noexcept { return !secret_.empty(); }

  // -- the hello -----------------------------------------------------------------

  /// The proof a side sends: `role` is "node" or "party".
  static std::string proof(const std::string& secret, const std::string& role,
                           const std::string& first, const std::string& second) {
    return crypto::hmac_sha256_hex(secret, "egress-hello|" + role + "|" + first + "|" + second);
  }

  /// The node's answer to a party's nonce: its own nonce and its proof.
  std::pair<std::string, std::string> challenge(const std::string& party_nonce) {
    auto rnd = crypto::random_hex(16);
    auto at = std::to_string(now_ms());
    auto nonce = rnd + "." + at + "." + crypto::hmac_sha256_hex(key_, rnd + "." + at);
    return {nonce, proof(secret_, "node", party_nonce, nonce)};
  }

  /// A token for a correct proof of one of this node's nonces (made within
  /// the last minute, not used before); "" for anything else.
  std::string admit(const std::string& node_nonce, const std::string& party_nonce,
                    const std::string& offered) {
    auto age = nonce_age_ms(node_nonce);
    if (!age || *age > nonce_life_ms || used_.count(node_nonce) > 0)
      return {};
    if (!crypto::equal_constant_time(offered, proof(secret_, "party", node_nonce, party_nonce)))
      return {};
    used_.emplace(node_nonce, now_ms());
    prune_used();
    auto t = crypto::random_hex(16);
    tokens_[t] = clock::now();
    if (tokens_.size() > max_tokens)
      evict_idlest();
    return t;
  }

  /// A token for a party that proved the secret another way: a peer this
  /// node dialed, whose own proof it checked in that hello.
  std::string issue() {
    auto t = crypto::random_hex(16);
    tokens_[t] = clock::now();
    if (tokens_.size() > max_tokens)
      evict_idlest();
    return t;
  }

  /// Whether `token` admits its bearer; a valid token's use is recorded, so
  /// the tokens that go when too many were given out are the idlest ones
  /// (a peer link or an open shell in use keeps its own).
  bool valid(const std::string& token) {
    if (!required())
      return true;
    auto i = tokens_.find(token);
    if (i == tokens_.end())
      return false;
    i->second = clock::now();
    return true;
  }

  // -- events ----------------------------------------------------------------------

  /// A token that admits nothing but events, for one peer this node dialed
  /// (whose node actor relays that peer's events here); revoked when that
  /// link ends.
  std::string events_token(const std::string& peer) {
    revoke_events(peer);
    auto t = crypto::random_hex(16);
    events_[peer] = t;
    return t;
  }
  void revoke_events(const std::string& peer) { events_.erase(peer); }

  /// This node's own relay of its fleet's events (never leaves the process).
  const std::string& own_events_token() const noexcept { return own_; }

  bool valid_for_events(const std::string& token) const {
    if (!required())
      return true;
    if (crypto::equal_constant_time(token, own_))
      return true;
    for (auto& [_, t] : events_)
      if (crypto::equal_constant_time(token, t))
        return true;
    return false;
  }

  /// What this node proves with when it dials a peer (nodes share it).
  const std::string& secret() const noexcept { return secret_; }

  static constexpr size_t max_tokens = 4096;
  /// No field of a hello is longer: a nonce of ours is ~110 characters, a
  /// party's 32, a proof 64 (a longer one is refused before it is used).
  static constexpr size_t max_field = 256;
  static constexpr int64_t nonce_life_ms = 60'000;

private:
  int64_t now_ms() const {
    return std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - born_).count();
  }

  /// How old one of this node's nonces is; nullopt if it is not one.
  std::optional<int64_t> nonce_age_ms(const std::string& nonce) const {
    auto a = nonce.find('.');
    auto b = a == std::string::npos ? a : nonce.find('.', a + 1);
    if (b == std::string::npos)
      return std::nullopt;
    auto body = nonce.substr(0, b);
    if (!crypto::equal_constant_time(nonce.substr(b + 1), crypto::hmac_sha256_hex(key_, body)))
      return std::nullopt;
    return now_ms() - std::stoll(nonce.substr(a + 1, b - a - 1));
  }

  void prune_used() {
    auto now = now_ms();
    for (auto i = used_.begin(); i != used_.end();)
      i = now - i->second > nonce_life_ms ? used_.erase(i) : std::next(i);
  }

  void evict_idlest() {
    auto idlest = tokens_.begin();
    for (auto i = tokens_.begin(); i != tokens_.end(); ++i)
      if (i->second < idlest->second)
        idlest = i;
    tokens_.erase(idlest);
  }

  std::string secret_;
  std::string key_; // this process's key for its nonces
  std::string own_;
  clock::time_point born_;
  std::unordered_map<std::string, int64_t> used_;          // nonce -> when used
  std::unordered_map<std::string, clock::time_point> tokens_; // token -> last use
  std::map<std::string, std::string> events_;              // peer address -> token
};

} // namespace egress
