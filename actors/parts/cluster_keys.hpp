#pragma once
// Where the cluster keeps what it shares in etcd, and how the values read
// (actors/cluster). Every key lives under <prefix>/<entry>/:
//
//   nodes/<node>     {"avoid":[hosts]}       on the node's lease
//   hosts/<host>     the owning node's name  on the owner's lease; its
//                                            create_revision is the fencing token
//   rotation/<node>  [{name,host,address,port,tags,joined_at}]  on the node's lease
//
// Values are JSON written by this engine, but read back as untrusted: a
// value that does not parse, or a member whose name, tags or address the
// config would not accept, is taken as empty, never thrown; a member that
// reaches this node's HAProxy through the gateway is checked like a
// declared proxy.

#include <optional>
#include <string>
#include <vector>

#include "messages/types.hpp"

namespace egress {

enum class cluster_key_kind { node, host, rotation };

struct cluster_key {
  cluster_key_kind kind;
  std::string name; // the node's or the host's
};

class cluster_keys {
public:
  cluster_keys(const std::string& prefix, const std::string& entry);

  /// Everything of this entry (a range, a watch).
  const std::string& root() const { return root_; }
  std::string node(const std::string& name) const { return root_ + "nodes/" + name; }
  std::string host(const std::string& name) const { return root_ + "hosts/" + name; }
  std::string rotation(const std::string& node) const { return root_ + "rotation/" + node; }

  /// What a key under root() is; nullopt for anything else.
  std::optional<cluster_key> parse(const std::string& key) const;

private:
  std::string root_;
};

std::string encode_avoid(const std::vector<std::string>& hosts);
/// nullopt when `value` is not what encode_avoid writes.
std::optional<std::vector<std::string>> decode_avoid(const std::string& value);

std::string encode_members(const std::vector<rotation_member>& members);
/// nullopt when `value` is not what encode_members writes (at most 100,000
/// members: what a node may hold), or when a member's name, host or tags are
/// not valid names or its address is not an IP address.
std::optional<std::vector<rotation_member>> decode_members(const std::string& value);

} // namespace egress
