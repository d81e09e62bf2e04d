#pragma once
// Who may talk to this node's node actor and inspector from another process
// (engine.inspect.secret-file). BASP authenticates no one, and with TLS it
// authenticates machines (certificates of one CA), not the operator: a party
// is answered only after its hello carried the shared secret, and from then
// on by its CAF node id, so no message needs to carry the secret.
//
// One object, shared by the node actor (which admits) and the inspector
// (which checks), behind a mutex: they may run on different threads.
//
// Why the rest of the engine stays unreachable: BASP delivers to any actor
// whose handle this process ever sent out (the middleman registers it), by
// its id. Only the node actor and the inspector ever send to or answer
// another process (the inspector answers for the fleet instead of
// delegating to it; remote watchers are fed by the node actor), so these two
// are the only doors, and both check.

#include <memory>
#include <mutex>
#include <set>
#include <string>

#include <caf/actor_control_block.hpp>
#include <caf/node_id.hpp>

namespace egress {

class admission {
public:
  explicit admission(std::string secret = {}) : secret_(std::move(secret)) {}

  /// False when no secret is configured: everyone who can connect is in.
  bool required() const noexcept { return !secret_.empty(); }

  /// What this node presents in its own hello to a peer (nodes share it).
  const std::string& secret() const noexcept { return secret_; }

  /// Compares in constant time (no early exit on the first differing byte).
  bool matches(const std::string& offered) const noexcept {
    if (offered.size() != secret_.size())
      return false;
    unsigned char diff = 0;
    for (size_t i = 0; i < offered.size(); ++i)
      diff |= static_cast<unsigned char>(offered[i] ^ secret_[i]);
    return diff == 0;
  }

  void admit(const caf::node_id& who) {
    std::lock_guard<std::mutex> guard{mtx_};
    nodes_.insert(who);
  }

  /// The sender of a message may be answered: this process, or a node that
  /// presented the secret. An anonymous message (no sender) may come from
  /// anywhere, so it is refused while a secret is required.
  bool admits(const caf::strong_actor_ptr& sender, const caf::node_id& here) const {
    if (!required())
      return true;
    if (!sender)
      return false;
    if (sender->node() == here)
      return true;
    std::lock_guard<std::mutex> guard{mtx_};
    return nodes_.count(sender->node()) > 0;
  }

private:
  std::string secret_;
  mutable std::mutex mtx_;
  std::set<caf::node_id> nodes_;
};

using admission_ptr = std::shared_ptr<admission>;

} // namespace egress
