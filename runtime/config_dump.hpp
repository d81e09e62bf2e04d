#pragma once
// Renders a validated engine_config back into CAF's INI dialect, defaults
// filled in: what `caf-run --dump-config` prints, and readable by caf-run.

#include <string>

#include "messages/config.hpp"

namespace egress {

std::string dump_config(const engine_config& cfg);

} // namespace egress
