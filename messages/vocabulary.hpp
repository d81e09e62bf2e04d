#pragma once
// The engine's message vocabulary in one place: every atom and every message
// type, in one CAF type-ID block (the model is Zeek Broker's fwd.hh). Adding a
// message means adding it here, so a reviewer sees the whole protocol at once.

#include <caf/atom.hpp>
#include <caf/type_id.hpp>

#include "messages/types.hpp"

CAF_BEGIN_TYPE_ID_BLOCK(egress, caf::first_custom_type_id)

  CAF_ADD_TYPE_ID(egress, (egress::domain_mark))
  CAF_ADD_TYPE_ID(egress, (egress::proxy_spec))
  CAF_ADD_TYPE_ID(egress, (egress::domain_spec))
  CAF_ADD_TYPE_ID(egress, (egress::domain_reading))
  CAF_ADD_TYPE_ID(egress, (egress::link_status))
  CAF_ADD_TYPE_ID(egress, (egress::proxy_status))
  CAF_ADD_TYPE_ID(egress, (egress::fleet_status))
  CAF_ADD_TYPE_ID(egress, (egress::link_down))
  CAF_ADD_TYPE_ID(egress, (egress::domain_event))
  CAF_ADD_TYPE_ID(egress, (egress::domain_brief))
  CAF_ADD_TYPE_ID(egress, (egress::address_watch))
  CAF_ADD_TYPE_ID(egress, (egress::image_status))
  CAF_ADD_TYPE_ID(egress, (egress::image_ready))
  CAF_ADD_TYPE_ID(egress, (egress::proxy_health))
  CAF_ADD_TYPE_ID(egress, (egress::rotation_event))
  CAF_ADD_TYPE_ID(egress, (egress::gc_report))
  CAF_ADD_TYPE_ID(egress, (std::vector<egress::gc_report>))
  CAF_ADD_TYPE_ID(egress, (std::vector<egress::proxy_health>))
  CAF_ADD_TYPE_ID(egress, (egress::actor_row))
  CAF_ADD_TYPE_ID(egress, (std::vector<egress::actor_row>))
  CAF_ADD_TYPE_ID(egress, (egress::ls_query))
  CAF_ADD_TYPE_ID(egress, (egress::engine_event))
  CAF_ADD_TYPE_ID(egress, (egress::rotation_member))
  CAF_ADD_TYPE_ID(egress, (std::vector<egress::rotation_member>))
  CAF_ADD_TYPE_ID(egress, (egress::rotation_view))
  CAF_ADD_TYPE_ID(egress, (egress::gateway_backend_status))
  CAF_ADD_TYPE_ID(egress, (std::vector<egress::gateway_backend_status>))
  CAF_ADD_TYPE_ID(egress, (egress::gateway_status))
  CAF_ADD_TYPE_ID(egress, (egress::group_status))
  CAF_ADD_TYPE_ID(egress, (std::vector<egress::group_status>))
  CAF_ADD_TYPE_ID(egress, (egress::host_drain))
  CAF_ADD_TYPE_ID(egress, (std::vector<egress::host_drain>))
  CAF_ADD_TYPE_ID(egress, (egress::store_change))
  CAF_ADD_TYPE_ID(egress, (std::vector<egress::store_change>))
  CAF_ADD_TYPE_ID(egress, (egress::host_owner))
  CAF_ADD_TYPE_ID(egress, (std::vector<egress::host_owner>))
  CAF_ADD_TYPE_ID(egress, (egress::cluster_member))
  CAF_ADD_TYPE_ID(egress, (std::vector<egress::cluster_member>))
  CAF_ADD_TYPE_ID(egress, (egress::cluster_status))

  // Atoms are at most 10 characters in CAF 0.17.
  CAF_ADD_ATOM(egress, egress::atom, status, "status")
  CAF_ADD_ATOM(egress, egress::atom, call, "call")
  CAF_ADD_ATOM(egress, egress::atom, run, "run")             // a detached call runs its work
  CAF_ADD_ATOM(egress, egress::atom, reconcile, "reconcile") // a proxy reads its VM back now
  CAF_ADD_ATOM(egress, egress::atom, subscribe, "subscribe")
  CAF_ADD_ATOM(egress, egress::atom, kill, "kill")
  CAF_ADD_ATOM(egress, egress::atom, shutdown, "shutdown")
  CAF_ADD_ATOM(egress, egress::atom, poll, "poll")
  CAF_ADD_ATOM(egress, egress::atom, erase, "erase")
  CAF_ADD_ATOM(egress, egress::atom, link, "link")
  CAF_ADD_ATOM(egress, egress::atom, ensure, "ensure")
  CAF_ADD_ATOM(egress, egress::atom, reload, "reload")
  CAF_ADD_ATOM(egress, egress::atom, gc, "gc")
  CAF_ADD_ATOM(egress, egress::atom, forget, "forget")
  CAF_ADD_ATOM(egress, egress::atom, ls, "ls")
  CAF_ADD_ATOM(egress, egress::atom, drain, "drain")
  CAF_ADD_ATOM(egress, egress::atom, metrics, "metrics")
  CAF_ADD_ATOM(egress, egress::atom, hello, "hello")
  CAF_ADD_ATOM(egress, egress::atom, lease, "lease")         // a link re-reads leases for a waiting proxy
  CAF_ADD_ATOM(egress, egress::atom, counts, "counts")       // a link pushes its call counts
  CAF_ADD_ATOM(egress, egress::atom, rotation, "rotation")   // the rotation, published
  CAF_ADD_ATOM(egress, egress::atom, place, "place")         // the fleet places group members
  CAF_ADD_ATOM(egress, egress::atom, cordon, "cordon")       // drain-host / undrain-host
  CAF_ADD_ATOM(egress, egress::atom, rename, "rename")       // a replacement takes its member's name
  CAF_ADD_ATOM(egress, egress::atom, claim, "claim")         // the cluster claims and releases hosts
  CAF_ADD_ATOM(egress, egress::atom, watch, "watch")         // the cluster's watch of the store
  CAF_ADD_ATOM(egress, egress::atom, superseded, "superseded") // a newer owner's mark was seen

CAF_END_TYPE_ID_BLOCK(egress)
