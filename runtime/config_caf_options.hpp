#pragma once
// Internal to the config loader (runtime/config_file.cpp): the checks of every key
// outside [engine], which must be an option the actor_system_config declares
// (CAF's own scheduler.*, logger.*, middleman.* ... plus any the application
// adds) and must hold a value of that option's type. Not a public interface.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <caf/actor_system_config.hpp>
#include <caf/config_value.hpp>

#include "messages/config_check.hpp"

namespace egress::config_detail {

/// One problem with a key outside `engine`, worded like the loader's others.
struct key_problem {
  std::string path; // "scheduler.max-threads"
  std::string text; // "expected an integer, got string \"2\""
};

/// Every problem with the keys outside `engine`: unknown sections and keys in
/// content(cfg), then values of declared options with the wrong type. CAF
/// drops the latter from content(cfg) silently, so they are found by reading
/// cfg.config_file_path again, raw, when it names a readable file.
std::vector<key_problem> check_caf_options(const caf::actor_system_config& cfg);

// -- shared with runtime/config_file.cpp ------------------------------------

/// What a value is, for "got ...": `string "2"`, `integer 5`, `a list`.
/// Defined in runtime/config_file.cpp.
std::string describe(const caf::config_value& x);

using config_check::at;
using config_check::join;

} // namespace egress::config_detail
