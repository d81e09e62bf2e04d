#pragma once
// Garbage collection on one host: removes what this provider entry created
// and no longer declares. Only two things qualify, and both are recognized
// by what the engine itself wrote, never by a name alone:
//  - a domain whose metadata mark names this entry (and this host, if
//    the mark names one), and whose name no proxy of this host declares
//    (with its overlay and seed volumes);
//  - a proxy volume `egress.<entry>.proxy.<name>.disk|.seed` whose proxy no
//    config declares on this host (what a create killed half-way left).
// An unmarked domain, or one marked by another entry, is never touched; the
// image cache's volumes are the image actors' business, not this pass's.

#include <set>
#include <string>

#include <caf/expected.hpp>

#include "messages/types.hpp"
#include "providers/libvirt/connection.hpp"

namespace egress::provision {

struct gc_request {
  std::string entry;
  std::string host;                  // for the report
  std::string pool;                  // "" = the host keeps no proxy volumes
  std::set<std::string> declared;    // proxy names this host should have
  /// Non-empty: only these names are judged (the stale copies of group
  /// members, removed even where a full collection is off).
  std::set<std::string> only;
};

/// Runs one pass; the report lists what was removed. Stops at the first
/// libvirt error (what was removed before it stays removed; the next pass
/// finishes the job).
caf::expected<gc_report> collect(lv::connection& c, const gc_request& req);

} // namespace egress::provision
