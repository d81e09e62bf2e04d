#pragma once
// The configuration file as bytes, before CAF's parser sees it
// (docs/spec.md 25). CAF 0.17's INI parser opens whatever path it is given
// (a FIFO blocks it for good), stops silently at a NUL byte, recurses once
// per nested bracket (50,000 of them overflow the stack), wraps a duration
// that does not fit in 64 bits of nanoseconds, and keeps the first of two
// equal keys. So caf-run reads the file itself, checks the text, and hands
// CAF the bytes it checked:
//
//   - a regular file only, opened without blocking, at most max_config_bytes;
//   - no NUL or control byte but tab, newline and carriage return;
//   - brackets and braces nested at most max_config_depth deep;
//   - every duration fits (value times its unit, in nanoseconds);
//   - no key twice in one section or dict.
//
// Each refusal names the file, the line and the column.

#include <cstddef>
#include <string>

#include <caf/expected.hpp>

namespace egress {

inline constexpr size_t max_config_bytes = size_t{1} << 20; // 1 MiB
inline constexpr size_t max_config_depth = 32;

/// The file's bytes: refused (ec::config_invalid) unless it is a regular
/// file no larger than max_config_bytes. Never blocks on a FIFO or a device.
caf::expected<std::string> read_config_file(const std::string& path);

/// Checks the text as described above; every problem, one line each, in
/// one ec::config_invalid error ("<file>:<line>:<column>: <problem>").
caf::error check_config_text(const std::string& file, const std::string& text);

/// Both: the checked bytes of `path`.
caf::expected<std::string> load_config_text(const std::string& path);

} // namespace egress
