#pragma once
// The engine's configuration: the validated form of the [engine] section of a
// CAF INI file. CAF alone accepts typos and wrongly typed values silently
// (notes/caf.md); load_engine_config walks the whole settings tree and
// refuses anything it does not know, naming the file and the key.

#include <string>
#include <vector>

#include <caf/actor_system_config.hpp>
#include <caf/expected.hpp>
#include <caf/timespan.hpp>

#include "messages/types.hpp"

namespace egress {

struct host_config {
  std::string name;
  std::string uri;          // libvirt URI; for `test-node` the resolved test:///<abs path>
  std::string domain_type;  // "test" for test:// URIs unless set; otherwise "kvm" unless set
  std::string pool;         // storage pool for the engine's volumes ("" = none yet)
  std::string network;      // default libvirt network for proxies on this host ("" = no NIC)
  uint32_t max_calls = 5;   // libvirtd's max_client_requests default
  caf::timespan call_budget = std::chrono::seconds(30);
  caf::timespan connect_timeout = std::chrono::seconds(10);
  std::vector<std::string> address_sources{"lease", "agent", "arp"};
};

struct engine_config {
  std::string config_file;  // the file it came from ("" when built in code)
  std::string entry;        // provider entry: written into every mark
  caf::timespan poll_interval = std::chrono::seconds(2);
  caf::timespan shutdown_timeout = std::chrono::seconds(10);
  caf::timespan redial_min = std::chrono::milliseconds(500);
  caf::timespan redial_max = std::chrono::seconds(30);
  std::vector<host_config> hosts;
  std::vector<proxy_spec> proxies; // network already defaulted from the host
};

/// Validates the parsed configuration strictly and returns the engine's view
/// of it. Every problem found is reported (not just the first), one per line,
/// as "<file>: <key path>: <problem>", inside a permanent ec::config_invalid
/// error. Keys outside `engine` must be options CAF itself declares.
caf::expected<engine_config> load_engine_config(const caf::actor_system_config& cfg);

/// Validates an engine_config built in code (the embedding API): the same
/// semantic checks as the file path (names, references, duplicates, ranges).
caf::error validate(const engine_config& cfg);

} // namespace egress
