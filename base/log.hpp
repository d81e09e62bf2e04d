#pragma once
// A small line logger for the engine. CAF 0.17.6 as packaged by Debian has its
// own logging compiled out (CAF_LOG_LEVEL_QUIET), so the engine writes its
// own lines: one write(2) per line, so lines from threads never interleave.
// The level comes from EGRESS_LOG (error, warn, info, debug; default info).

#include <string>
#include <string_view>

namespace egress::log {

enum class level { error = 0, warn = 1, info = 2, debug = 3 };

/// Changes the level at run time (tests silence the engine this way).
void set_level(level x);
bool enabled(level x);

void write(level x, std::string_view component, std::string_view text);

inline void error(std::string_view c, std::string_view t) { write(level::error, c, t); }
inline void warn(std::string_view c, std::string_view t) { write(level::warn, c, t); }
inline void info(std::string_view c, std::string_view t) { write(level::info, c, t); }
inline void debug(std::string_view c, std::string_view t) { write(level::debug, c, t); }

} // namespace egress::log
