#pragma once
// Times as text, two ways and no more: a duration someone configured is
// shown exactly, in the INI's own units, so it reads back as the same value
// (2h, 250ms, 1500us); a time the engine measured is shown rounded, to one
// decimal of a second or a millisecond (4.2 s, 12.5 ms). Wall-clock times
// are RFC 3339 in UTC.

#include <chrono>
#include <string>

namespace egress {

/// The largest unit (h, min, s, ms, us, ns) that states `d` exactly: "0s",
/// "2h", "90s", "1500ms", "-3s". CAF's INI parser reads each of them back.
std::string duration_text(std::chrono::nanoseconds d);

/// A measured time: "12.5 ms" below one second, "4.2 s" from one second on.
std::string elapsed_text(std::chrono::nanoseconds d);

/// Now, as "2026-12-03T14:12:42Z".
std::string now_rfc3339();

} // namespace egress
