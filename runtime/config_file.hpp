#pragma once
// Reading the engine's configuration from a CAF INI file: the [engine]
// section into an engine_config (messages/config.hpp), strictly. CAF alone
// accepts typos and wrongly typed values silently (docs/notes/caf-0.17.md), so
// load_engine_config walks the whole settings tree and refuses anything it
// does not know, naming the file and the key, then runs validate()'s checks.

#include <string>
#include <vector>

#include <caf/actor_system_config.hpp>
#include <caf/expected.hpp>

#include "messages/config.hpp"

namespace egress {

/// Validates the parsed configuration strictly and returns the engine's view
/// of it. Every problem found is reported (not just the first), one per line,
/// as "<file>: <key path>: <problem>", inside a permanent ec::config_invalid
/// error. Keys outside `engine` must be options CAF itself declares.
caf::expected<engine_config> load_engine_config(const caf::actor_system_config& cfg);

/// Parses a command line (`args` without the program's name) into `cfg`,
/// CAF's way, except for the file: `--config-file=FILE` is read and checked
/// first (runtime/config_text.hpp: a regular file, bounded, no NUL, no deep
/// nesting, no duplicate key, no overflowing duration) and CAF parses the
/// bytes that were checked, never the path (which may be a FIFO). A refusal
/// is ec::config_invalid naming the file, the line and the column; CAF's
/// own parse errors come back rendered.
caf::error parse_command_line(caf::actor_system_config& cfg, std::vector<std::string> args);

} // namespace egress
