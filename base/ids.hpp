#pragma once
// Identifiers the engine makes up: a VM's uid in its mark (docs/architecture.md,
// "The mark"), which survives restarts and tells our domains apart.

#include <string>

namespace egress {

/// 128 random bits (the kernel's getrandom) as 32 lowercase hex digits.
std::string new_uid();

} // namespace egress
