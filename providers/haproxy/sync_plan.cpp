#include "providers/haproxy/sync_plan.hpp"

#include <set>

namespace egress::haproxy {

namespace {

std::string at(const std::string& backend, const std::string& server) {
  return backend + "/" + server;
}

std::string endpoint_of(const wanted_server& w) {
  return (w.address.find(':') != std::string::npos ? "[" + w.address + "]" : w.address) + ":"
         + std::to_string(w.port);
}

void want(sync_plan& out, const std::string& backend, const wanted_server& w,
          const server_row* listed) {
  auto where = at(backend, w.name);
  if (!listed) {
    out.commands.push_back({"add server " + where + " " + endpoint_of(w), answer_kind::added,
                            w.name});
    out.commands.push_back({"set server " + where + " state ready", answer_kind::empty, w.name});
    return;
  }
  if (listed->address != w.address || listed->port != w.port)
    out.commands.push_back({"set server " + where + " addr " + w.address + " port "
                              + std::to_string(w.port),
                            answer_kind::moved, w.name});
  if (listed->in_maint() || listed->draining())
    out.commands.push_back({"set server " + where + " state ready", answer_kind::empty, w.name});
}

void unwant(sync_plan& out, const sync_input& in, const server_row& s) {
  auto where = at(in.backend, s.name);
  auto since = in.draining_since.find(s.name);
  auto started = since == in.draining_since.end() ? in.now : since->second;
  out.draining_since[s.name] = started;
  if (!s.in_maint()) {
    // Read before this command: its sessions are counted at the next sync.
    out.commands.push_back({"set server " + where + " state maint", answer_kind::empty, s.name});
    ++out.draining;
    return;
  }
  auto sessions = in.sessions.find(s.name);
  bool idle = sessions != in.sessions.end() && sessions->second == 0;
  bool overdue = in.now - started >= in.grace;
  if (!idle && !overdue) {
    ++out.draining;
    return;
  }
  if (!idle)
    out.commands.push_back({"shutdown sessions server " + where, answer_kind::empty, s.name});
  out.commands.push_back({"del server " + where, answer_kind::deleted, s.name});
  out.draining_since.erase(s.name);
  ++out.removed;
}

} // namespace

bool needs_sessions(const sync_input& in) {
  std::set<std::string> wanted;
  for (auto& w : in.wanted)
    wanted.insert(w.name);
  for (auto& s : in.listed)
    if (!wanted.contains(s.name) && s.in_maint())
      return true;
  return false;
}

sync_plan plan_sync(const sync_input& in) {
  sync_plan out;
  std::map<std::string, const server_row*> listed;
  for (auto& s : in.listed)
    listed[s.name] = &s;
  std::set<std::string> wanted;
  for (auto& w : in.wanted) {
    wanted.insert(w.name);
    auto i = listed.find(w.name);
    want(out, in.backend, w, i == listed.end() ? nullptr : i->second);
  }
  for (auto& s : in.listed)
    if (!wanted.contains(s.name))
      unwant(out, in, s);
  return out;
}

} // namespace egress::haproxy
