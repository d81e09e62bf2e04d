#pragma once
// Who may make this node act (engine.inspect.secret-file): parties that
// proved they know the shared secret, by token.
//
// Why tokens, and not "which node sent it": a BASP message names its sender
// itself, and CAF resolves a sender on this node's id from its own registry,
// so a connected party can send with the node actor's own address as the
// sender (a review proved it). Only what a message carries can be checked.
//
// Why a nonce and an HMAC, and not the secret: the secret never crosses the
// wire, so a party that answers at a peer's address (or a shell pointed at
// the wrong host) learns only a proof for a nonce nobody will ask again.
//
// Owned by the node actor, the only actor of the engine that talks to
// another process (the inspector, fleet, links and proxies never do, so no
// other actor of this process is addressable from outside: BASP delivers by
// id only to actors whose handles left the process).

#include <algorithm>
#include <cstddef>
#include <deque>
#include <string>
#include <unordered_set>

#include "providers/crypto/secret.hpp"

namespace egress {

class admission {
public:
  explicit admission(std::string secret = {})
    : secret_(std::move(secret)), own_(crypto::random_hex(16)) {}

  /// False when no secret is configured: every proof and token pass.
  bool required() const noexcept { return !secret_.empty(); }

  /// A fresh nonce for a hello; usable once. At most `max_open` are kept
  /// (the oldest is forgotten), so a flood of hellos costs bounded memory.
  std::string challenge() {
    auto n = crypto::random_hex(16);
    nonces_.push_back(n);
    if (nonces_.size() > max_open)
      nonces_.pop_front();
    return n;
  }

  /// What a party sends for `nonce`, knowing `secret`.
  static std::string proof(const std::string& secret, const std::string& nonce) {
    return crypto::hmac_sha256_hex(secret, "egress-hello:" + nonce);
  }

  /// A new token for a correct proof of a nonce this node issued (and had
  /// not used yet); "" for anything else.
  std::string admit(const std::string& nonce, const std::string& offered) {
    if (!required())
      return "open"; // nothing to prove; any token passes anyway
    auto i = std::find(nonces_.begin(), nonces_.end(), nonce);
    if (i == nonces_.end())
      return {};
    nonces_.erase(i);
    if (!crypto::equal_constant_time(offered, proof(secret_, nonce)))
      return {};
    auto t = crypto::random_hex(16);
    tokens_.insert(t);
    order_.push_back(t);
    if (order_.size() > max_tokens) {
      tokens_.erase(order_.front());
      order_.pop_front();
    }
    return t;
  }

  /// A token that admits nothing but events: for a peer this node dialed,
  /// whose node actor relays that peer's events here. (Dialing proves this
  /// node's knowledge of the secret to the peer, not the peer's to us.)
  std::string events_token() {
    auto t = crypto::random_hex(16);
    events_.insert(t);
    return t;
  }

  bool valid_for_events(const std::string& token) const {
    return valid(token) || events_.count(token) > 0;
  }

  /// This node's own token: its local relay of the fleet's events.
  const std::string& own_token() const noexcept { return own_; }

  /// What this node proves with when it dials a peer (nodes share it).
  const std::string& secret() const noexcept { return secret_; }

  bool valid(const std::string& token) const {
    if (!required())
      return true;
    return crypto::equal_constant_time(token, own_) || tokens_.count(token) > 0;
  }

  /// Tokens this node gave out: one per shell session and peer link. The
  /// oldest is dropped beyond this many (a shell then says hello again).
  static constexpr size_t max_tokens = 4096;
  static constexpr size_t max_open = 256;

private:
  std::string secret_;
  std::string own_;
  std::deque<std::string> nonces_;
  std::unordered_set<std::string> tokens_;
  std::deque<std::string> order_;
  std::unordered_set<std::string> events_; // one per configured peer and dial
};

} // namespace egress
