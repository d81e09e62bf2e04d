#pragma once
// Domain XML, built with pugixml (never by string concatenation), and the
// engine's metadata mark read back from it.

#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <caf/expected.hpp>

#include "messages/types.hpp"

namespace egress::lv {

/// XML namespace of the mark inside <metadata>.
inline constexpr const char* mark_namespace = "urn:x-egress-engine:mark:1";
/// Element prefix used when the engine writes the mark.
inline constexpr const char* mark_prefix = "egress";

/// Builds the domain XML. Validates spec.name (check_name), the network name,
/// the tags and every mark field first; an invalid value is a permanent
/// ec::invalid_name / ec::invalid_argument error naming the field.
caf::expected<std::string> build_domain_xml(const domain_spec& spec);

/// Renders just the mark element (used with virDomainSetMetadata).
caf::expected<std::string> build_mark_xml(const domain_mark& mark);

/// Finds the mark in a full domain XML document (or in a bare mark element as
/// returned by virDomainGetMetadata). Returns nullopt if there is none;
/// an error only if the XML itself cannot be parsed.
caf::expected<std::optional<domain_mark>> parse_mark(std::string_view xml);

/// The MACs of a domain's interfaces, from its full XML (virDomainGetXMLDesc),
/// lowercased as lease lists write them. Interfaces without one are skipped.
caf::expected<std::vector<std::string>> parse_macs(std::string_view xml);

/// A new MAC for a domain's NIC, chosen by the engine so that the proxy knows
/// it from its own spec: no read-back needed to find its lease.
std::string random_mac(std::minstd_rand& rng);

} // namespace egress::lv
