#include "providers/haproxy/servers.hpp"

#include <algorithm>
#include <charconv>

#include "messages/error.hpp"
#include "messages/names.hpp"

namespace egress::haproxy {

namespace {

std::vector<std::string_view> split(std::string_view line, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    auto end = line.find(sep, start);
    out.push_back(line.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos)
      return out;
    start = end + 1;
  }
}

// Lines without their '\r', empty lines dropped.
std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> out;
  for (auto line : split(text, '\n')) {
    if (!line.empty() && line.back() == '\r')
      line.remove_suffix(1);
    if (!line.empty())
      out.push_back(line);
  }
  return out;
}

std::string_view first_line(std::string_view text) {
  auto lines = lines_of(text);
  return lines.empty() ? std::string_view{} : lines.front();
}

template <class T>
bool number(std::string_view text, T& out) {
  auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), out);
  return err == std::errc{} && end == text.data() + text.size();
}

caf::error garbage(const std::string& what, std::string_view found) {
  return make_error(ec::gateway_garbage, what + ", got " + quote(found.substr(0, 120)));
}

// Where each named column is in a header; missing ones are reported.
caf::expected<std::map<std::string, size_t>>
columns(const std::vector<std::string_view>& header, const std::vector<std::string>& needed,
        const std::string& what) {
  std::map<std::string, size_t> at;
  for (size_t i = 0; i < header.size(); ++i)
    at.emplace(std::string{header[i]}, i);
  for (auto& n : needed)
    if (!at.contains(n))
      return make_error(ec::gateway_garbage, what + ": the header has no column \"" + n + "\"");
  return at;
}

} // namespace

caf::expected<std::vector<server_row>> parse_servers_state(std::string_view text,
                                                           const std::string& backend) {
  const std::string what = "show servers state " + backend;
  auto lines = lines_of(text);
  if (!lines.empty() && lines.front() == "Can't find backend.")
    return make_error(ec::gateway_refused, what + ": HAProxy has no backend \"" + backend
                                             + "\" (declare it in haproxy.cfg)");
  if (lines.size() < 2 || lines[0] != "1" || !lines[1].starts_with("# "))
    return garbage(what + ": expected format version 1 and a header", first_line(text));
  auto header = split(lines[1].substr(2), ' ');
  auto at = columns(header, {"be_id", "be_name", "srv_id", "srv_name", "srv_addr",
                             "srv_op_state", "srv_admin_state", "srv_port"},
                    what);
  if (!at)
    return at.error();
  std::vector<server_row> out;
  for (size_t i = 2; i < lines.size(); ++i) {
    if (lines[i].starts_with("#"))
      continue;
    auto f = split(lines[i], ' ');
    if (f.size() != header.size())
      return garbage(what + ": a line with " + std::to_string(f.size()) + " fields under a "
                       + std::to_string(header.size()) + "-field header",
                     lines[i]);
    server_row r;
    r.backend = std::string{f[(*at)["be_name"]]};
    r.name = std::string{f[(*at)["srv_name"]]};
    r.address = std::string{f[(*at)["srv_addr"]]};
    if (!number(f[(*at)["be_id"]], r.backend_id) || !number(f[(*at)["srv_id"]], r.id)
        || !number(f[(*at)["srv_op_state"]], r.op_state)
        || !number(f[(*at)["srv_admin_state"]], r.admin_state)
        || !number(f[(*at)["srv_port"]], r.port))
      return garbage(what + ": a server line with a field that is not a number", lines[i]);
    if (r.backend != backend)
      return garbage(what + ": a server of another backend", lines[i]);
    out.push_back(std::move(r));
  }
  return out;
}

caf::expected<std::map<std::string, uint64_t>> parse_sessions(std::string_view text,
                                                              const std::string& backend) {
  return parse_stat_column(text, backend, "scur");
}

caf::expected<std::map<std::string, uint64_t>>
parse_stat_column(std::string_view text, const std::string& backend, const std::string& column) {
  const std::string what = "show stat " + backend;
  auto lines = lines_of(text);
  if (!lines.empty() && lines.front() == "No such proxy.")
    return make_error(ec::gateway_refused, what + ": HAProxy has no backend \"" + backend + "\"");
  if (lines.empty() || !lines[0].starts_with("# "))
    return garbage(what + ": expected a CSV header", first_line(text));
  auto header = split(lines[0].substr(2), ',');
  auto at = columns(header, {"pxname", "svname", column}, what);
  if (!at)
    return at.error();
  std::map<std::string, uint64_t> out;
  for (size_t i = 1; i < lines.size(); ++i) {
    auto f = split(lines[i], ',');
    // Every line ends with a comma: one more field than the header names.
    if (f.size() < header.size())
      return garbage(what + ": a line with fewer fields than the header", lines[i]);
    auto name = f[(*at)["svname"]];
    if (name == "BACKEND" || name == "FRONTEND" || f[(*at)["pxname"]] != backend)
      continue;
    uint64_t value = 0;
    if (!number(f[(*at)[column]], value))
      return garbage(what + ": " + column + " is not a number", lines[i]);
    out[std::string{name}] = value;
  }
  return out;
}

caf::expected<process_info> parse_info(std::string_view text) {
  process_info out;
  bool named = false;
  for (auto line : lines_of(text)) {
    auto colon = line.find(": ");
    if (colon == std::string_view::npos)
      continue;
    auto key = line.substr(0, colon);
    auto value = line.substr(colon + 2);
    if (key == "Name")
      named = value == "HAProxy";
    else if (key == "Version")
      out.version = std::string{value};
    else if (key == "Pid" && !number(value, out.pid))
      return garbage("show info: Pid is not a number", line);
    else if (key == "Uptime_sec" && !number(value, out.uptime_s))
      return garbage("show info: Uptime_sec is not a number", line);
  }
  if (!named || out.pid == 0)
    return garbage("show info: not HAProxy's answer", first_line(text));
  return out;
}

caf::error check_answer(answer_kind kind, std::string_view answer, const std::string& command) {
  auto line = first_line(answer);
  bool ok = false;
  switch (kind) {
    case answer_kind::empty:
      ok = line.empty();
      break;
    case answer_kind::added:
      ok = line == "New server registered.";
      break;
    case answer_kind::deleted:
      ok = line == "Server deleted.";
      break;
    case answer_kind::moved:
      ok = line.starts_with("IP changed from") || line.starts_with("no need to change the addr")
           || line.starts_with("port changed from");
      break;
  }
  if (ok)
    return {};
  return make_error(ec::gateway_refused,
                    "\"" + command + "\": " + (line.empty() ? std::string{"no answer"}
                                                            : quote(line.substr(0, 200))));
}

} // namespace egress::haproxy
