#pragma once
// What HAProxy's runtime API answers, read strictly: `show servers state`
// (every server of a backend, its address and states), `show stat` (the
// sessions a server still carries) and the one-line answers of the commands
// the gateway sends. An answer that does not have the documented shape is
// transient gateway_garbage naming what was wrong (a wrong socket, a
// different program, a cut answer): the gateway then acts on nothing it read.
// Pure functions over text: tests/unit/haproxy.cpp feeds them anything.

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <caf/error.hpp>
#include <caf/expected.hpp>

namespace egress::haproxy {

/// Admin state bits of `show servers state` (HAProxy's SRV_ADMF_*).
inline constexpr uint32_t admin_forced_maint = 0x01;
inline constexpr uint32_t admin_inherited_maint = 0x02;
inline constexpr uint32_t admin_config_maint = 0x04;
inline constexpr uint32_t admin_forced_drain = 0x08;
inline constexpr uint32_t admin_any_maint
  = admin_forced_maint | admin_inherited_maint | admin_config_maint | 0x20 /* resolver */;

/// One server as `show servers state` lists it.
struct server_row {
  std::string backend;
  uint32_t backend_id = 0; // `show stat` finds a backend by it (a frontend may share its name)
  uint32_t id = 0;
  std::string name;
  std::string address;
  uint32_t port = 0;
  uint32_t op_state = 0;    // 0 stopped, 1 starting, 2 running, 3 stopping
  uint32_t admin_state = 0; // admin_* bits

  bool in_maint() const { return (admin_state & admin_any_maint) != 0; }
  bool draining() const { return (admin_state & admin_forced_drain) != 0; }
  bool operator==(const server_row&) const = default;
};

/// Parses `show servers state <backend>`: the format version (1), the
/// header, one line per server. "Can't find backend." is gateway_refused.
caf::expected<std::vector<server_row>> parse_servers_state(std::string_view text,
                                                           const std::string& backend);

/// Parses `show stat <backend id> 4 -1` (servers only, CSV): server name ->
/// current sessions (scur). By id: given a name, HAProxy 2.6 shows the first
/// proxy of that name, and a frontend named like its backend comes first.
/// "No such proxy." is gateway_refused.
caf::expected<std::map<std::string, uint64_t>> parse_sessions(std::string_view text,
                                                              const std::string& backend);

/// The same answer's numeric `column` for every server of `backend` (scur,
/// stot, ...); parse_sessions is its scur.
caf::expected<std::map<std::string, uint64_t>>
parse_stat_column(std::string_view text, const std::string& backend, const std::string& column);

/// Who answers: `show info`'s process id and uptime tell a restarted (or
/// reloaded) HAProxy, which has lost every server the engine added.
struct process_info {
  std::string version;
  uint64_t pid = 0;
  uint64_t uptime_s = 0;
};

/// Parses `show info`; anything without "Name: HAProxy" is gateway_garbage
/// (another program's socket).
caf::expected<process_info> parse_info(std::string_view text);

/// What a command's answer must look like to count as done.
enum class answer_kind : uint8_t {
  empty,   // set server ... state, shutdown sessions: nothing on success
  added,   // add server: "New server registered."
  deleted, // del server: "Server deleted."
  moved,   // set server ... addr: "IP changed ...", "no need to change ..."
};

/// An empty error when `answer` is the success of a command of that kind;
/// otherwise gateway_refused with HAProxy's own first line (it names what
/// was wrong: "No such backend.", "Only servers in maintenance mode can be
/// deleted.", "Permission denied").
caf::error check_answer(answer_kind kind, std::string_view answer, const std::string& command);

} // namespace egress::haproxy
