#include "runtime/status_table.hpp"

#include <algorithm>
#include <cstdio>
#include <vector>

namespace egress {

std::time_t parse_rfc3339(const std::string& s) {
  std::tm tm{};
  if (s.size() != 20 || strptime(s.c_str(), "%Y-%m-%dT%H:%M:%SZ", &tm) == nullptr)
    return -1;
  return timegm(&tm);
}

namespace {

std::string age_text(std::time_t created, std::time_t now) {
  if (created < 0)
    return "-";
  auto s = std::max<std::time_t>(0, now - created);
  char buf[32];
  if (s < 120)
    std::snprintf(buf, sizeof buf, "%lds", static_cast<long>(s));
  else if (s < 7200)
    std::snprintf(buf, sizeof buf, "%ldm", static_cast<long>(s / 60));
  else if (s < 172800)
    std::snprintf(buf, sizeof buf, "%ldh", static_cast<long>(s / 3600));
  else
    std::snprintf(buf, sizeof buf, "%ldd", static_cast<long>(s / 86400));
  return buf;
}

std::string pad(std::string s, size_t n) {
  if (s.size() < n)
    s.append(n - s.size(), ' ');
  return s;
}

} // namespace

std::string render_table(const fleet_status& st, std::time_t now) {
  std::string out;
  for (auto& l : st.links) {
    out += "host " + l.host + ": " + to_string(l.state);
    if (!l.reason.empty())
      out += " (" + l.reason + ")";
    out += ", calls " + std::to_string(l.in_flight) + "/" + std::to_string(l.limit)
           + ", queued " + std::to_string(l.queued) + "\n";
  }
  for (auto& i : st.images) {
    out += "image " + i.image + "@" + i.host + ": " + to_string(i.state);
    if (i.state == image_state::fetching && i.total > 0)
      out += " " + std::to_string(i.bytes * 100 / i.total) + "% of "
             + std::to_string(i.total >> 20) + " MiB, "
             + std::to_string(i.rate_bps >> 20) + " MiB/s, ETA "
             + std::to_string(i.eta_s) + " s";
    if (i.state == image_state::ready)
      out += " as " + i.volume;
    if (!i.last_error.empty() && i.state == image_state::failed)
      out += " (" + i.last_error + ")";
    out += "\n";
  }
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"PROXY", "HOST", "STATE", "ADDRESS", "AGE", "ROTATION", "PROBES",
                  "LAST ERROR"});
  for (auto& p : st.proxies)
    rows.push_back({p.name, p.host, to_string(p.phase),
                    p.address.empty() ? "-" : p.address,
                    age_text(p.created_at.empty() ? -1 : parse_rfc3339(p.created_at), now),
                    p.in_rotation ? "in" : "out",
                    std::to_string(p.probes_ok) + " ok/" + std::to_string(p.probes_failed)
                      + " failed",
                    p.last_error.empty() && !p.in_rotation && p.probe_streak < 0
                      ? "probe " + p.last_probe
                      : p.last_error});
  out += "rotation: " + std::to_string(st.rotation.size()) + " of "
         + std::to_string(st.proxies.size()) + " proxy(ies), generation "
         + std::to_string(st.generation) + "\n";
  if (st.gateway.state != haproxy_state::off) {
    auto& g = st.gateway;
    out += "gateway " + g.socket + ": " + to_string(g.state);
    for (auto& b : g.backends)
      out += ", " + b.name + " " + std::to_string(b.servers) + "/" + std::to_string(b.desired)
             + (b.draining > 0 ? " (" + std::to_string(b.draining) + " draining)" : "");
    if (!g.reason.empty())
      out += " (" + g.reason + ")";
    out += "\n";
  }
  for (auto& g : st.groups) {
    out += "group " + g.name + ": " + std::to_string(g.placed) + " of "
           + std::to_string(g.count) + " placed";
    for (auto& [host, n] : g.per_host)
      out += ", " + host + " " + std::to_string(n);
    if (g.replacing > 0)
      out += ", " + std::to_string(g.replacing) + " placed again, not in the rotation yet";
    if (!g.held.empty())
      out += " (held: " + g.held + ")";
    out += "\n";
    for (auto& w : g.waiting)
      out += "  waiting " + w + "\n";
  }
  for (auto& d : st.drains)
    out += "host " + d.host + ": " + describe(d) + "\n";
  std::vector<size_t> width(rows.front().size(), 0);
  for (auto& r : rows)
    for (size_t i = 0; i < r.size(); ++i)
      width[i] = std::max(width[i], r[i].size());
  for (auto& r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i)
      line += i + 1 < r.size() ? pad(r[i], width[i] + 2) : r[i];
    while (!line.empty() && line.back() == ' ')
      line.pop_back();
    out += line + "\n";
  }
  return out;
}

std::string table_fingerprint(const fleet_status& st) {
  std::string out;
  for (auto& l : st.links)
    out += l.host + "|" + to_string(l.state) + "|" + l.reason + "\n";
  // Progress counts in tenths, so a transfer reprints the table now and then
  // rather than on every tick.
  for (auto& i : st.images)
    out += i.image + "@" + i.host + "|" + to_string(i.state) + "|"
           + (i.total > 0 ? std::to_string(i.bytes * 10 / i.total) : std::string{}) + "|"
           + i.last_error + "\n";
  for (auto& p : st.proxies)
    out += p.name + "|" + p.host + "|" + to_string(p.phase) + "|" + p.address + "|"
           + p.last_error + "|" + (p.in_rotation ? "in" : "out") + "\n";
  for (auto& g : st.groups)
    out += "group|" + g.name + "|" + std::to_string(g.placed) + "|"
           + std::to_string(g.replacing) + "|" + g.held + "|" + std::to_string(g.waiting.size())
           + "\n";
  for (auto& d : st.drains)
    out += "drain|" + d.host + "|" + std::to_string(d.members) + "|" + std::to_string(d.moving)
           + "|" + std::to_string(d.moved) + "|" + d.waiting + "\n";
  out += std::string{"gateway|"} + to_string(st.gateway.state) + "|" + st.gateway.reason;
  for (auto& b : st.gateway.backends)
    out += "|" + std::to_string(b.servers) + "/" + std::to_string(b.desired) + "/"
           + std::to_string(b.draining);
  return out + "\n";
}

} // namespace egress
