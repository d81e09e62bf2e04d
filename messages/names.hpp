#pragma once
// The rules for user-supplied names and values, shared by the config's
// validation and every provider that puts them somewhere. Every name is
// checked against one strict pattern before it can reach libvirt XML, a
// volume name or a file path. pugixml escapes what it
// writes, but a name that is merely escaped can still be a path ("../x"), too
// long for a volume, or confusing in a log; refusing it early is simpler.

#include <string>
#include <string_view>

#include <caf/error.hpp>

namespace egress {

/// The pattern, for error messages and docs.
inline constexpr const char* name_pattern = "[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?";

/// Quotes `value` for an error message: control and non-ASCII bytes as \xNN,
/// long values cut short with their length noted.
std::string quote(std::string_view value);

/// Returns an empty error if `value` matches name_pattern, otherwise a
/// permanent ec::invalid_name error that names `what` and shows the value
/// (escaped so that control characters cannot garble a terminal).
caf::error check_name(std::string_view what, std::string_view value);

/// A volume name is one or more names joined by dots (at most 255
/// characters): the image cache builds its names as
/// `egress.<entry>.<image>.<digest>[.partial|.verified]`, and a dot is the
/// one separator a name itself can never contain, so two entries can never
/// produce the same volume name. No empty part, so never "..".
inline constexpr const char* volume_name_pattern = "NAME(.NAME)* with NAME = [a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?";

caf::error check_volume_name(std::string_view what, std::string_view value);

/// An address with a prefix length, IPv4 or IPv6 ("10.0.0.0/8",
/// "fd00::/64"): a proxy's allow-from. Worded like check_name.
caf::error check_cidr(std::string_view what, std::string_view value);

/// A tag is a free-form label: 1..64 printable ASCII characters, no control
/// characters. It reaches XML only as escaped text content.
caf::error check_tag(std::string_view what, std::string_view value);

} // namespace egress
