#pragma once
// Domain operations: synchronous, blocking, one libvirt round trip or a few.
// Called only from detached call actors.

#include <string>
#include <vector>

#include <caf/expected.hpp>

#include "messages/types.hpp"
#include "providers/libvirt/connection.hpp"

namespace egress::lv {

/// Address sources, tried in the configured order.
enum class address_source { lease, agent, arp };

/// Parses "lease" / "agent" / "arp".
caf::expected<address_source> parse_address_source(const std::string& s);

/// Reads one domain back: existence, state, mark and addresses. A missing
/// domain is not an error: it yields exists == false. Addresses are read only
/// for a running domain, trying `sources` in order; the first source that
/// answers with at least one IPv4/IPv6 address wins. A source that fails while
/// another answers (even empty) is recorded in `notes`; if every source
/// fails the whole read is a transient ec::no_address_source error (an
/// unreadable address is not a missing one, docs/notes/failures.md#unreadable-address-taken-for-missing).
/// With `with_macs`, its interfaces' MACs too (one more round trip): what
/// a proxy that adopted a domain needs once to find its leases.
caf::expected<domain_reading>
read_domain(connection& c, const std::string& name,
            const std::vector<address_source>& sources, bool with_macs = false);

/// Writes `mark` as the domain's mark (virDomainSetMetadata, the element in
/// the mark's namespace): into its persistent definition, and into the
/// running one while it runs.
caf::error write_mark(connection& c, const std::string& name, const domain_mark& mark);

/// In a cluster: read_domain, then, when the domain carries `entry`'s mark
/// with a token older than `token`, that mark rewritten with `owner` and
/// `token` (the fence on the host: the node whose claim is older reads the
/// newer token at its next read, or at once from the metadata-change event).
/// A newer token is left as it is: the caller refuses the domain.
caf::expected<domain_reading>
read_and_stamp(connection& c, const std::string& name, const std::vector<address_source>& sources,
               bool with_macs, const std::string& entry, const std::string& owner, int64_t token);

/// Lists every domain whose mark names `entry`, with state (no addresses).
caf::expected<std::vector<domain_reading>>
list_marked(connection& c, const std::string& entry);

/// What the host has free for new domains, in MiB (virNodeGetFreeMemory).
caf::expected<uint64_t> free_memory_mib(connection& c);

/// Defines the domain from build_domain_xml(spec) and starts it. If the start
/// fails, the definition made by this call is undefined again before the
/// error is returned, so a failed attempt leaves nothing behind. With
/// `sources`, the running domain's addresses are read too (best effort: a
/// failure is a note, never a failed create). Its MACs are the spec's.
caf::expected<domain_reading> define_and_start(connection& c,
                                               const domain_spec& spec,
                                               const std::vector<address_source>& sources = {});

/// Starts an existing, defined-but-stopped domain.
caf::error start_domain(connection& c, const std::string& name);

/// A failed start's error, given whether the domain was undefined by
/// someone else meanwhile (gone, or left transient: define_and_start and
/// start_domain ask libvirt right after the failure). A domain undefined out
/// of band while libvirt started it makes the start fail with what reads as
/// permanent ("process exited while connecting to monitor": libvirt ended
/// the QEMU it was starting); the next pass defines it again, so that is
/// transient. A failure of a domain still defined keeps its kind.
caf::error start_failure(caf::error err, bool undefined_meanwhile);

/// Pauses (virDomainSuspend) or resumes (virDomainResume) a running domain:
/// for draining a proxy without losing it, and for tests that need a
/// running domain to read back without an address.
caf::error suspend_domain(connection& c, const std::string& name);
caf::error resume_domain(connection& c, const std::string& name);

/// Stops a running domain hard (virDomainDestroy) and keeps its definition:
/// what an out-of-band `virsh destroy` does (tests, tools).
caf::error destroy_domain(connection& c, const std::string& name);

/// Destroys (if running) and undefines the domain. A domain that does not
/// exist is success (the goal state is reached).
caf::error delete_domain(connection& c, const std::string& name);

} // namespace egress::lv
