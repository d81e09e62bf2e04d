#pragma once
// The live table caf-run prints: one row per proxy (proxy, host, state,
// address, age), preceded by one line per host link.

#include <ctime>
#include <string>

#include "messages/types.hpp"

namespace egress {

/// Renders the table; ages are computed against `now` (Unix seconds).
std::string render_table(const fleet_status& st, std::time_t now);

/// A fingerprint of everything but ages and counters: the table is printed
/// again only when this changes.
std::string table_fingerprint(const fleet_status& st);

/// Parses "YYYY-MM-DDTHH:MM:SSZ"; returns -1 if it is not in that form.
std::time_t parse_rfc3339(const std::string& s);

} // namespace egress
