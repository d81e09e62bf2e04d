#include "providers/haproxy/sync.hpp"

#include "messages/error.hpp"

namespace egress::haproxy {

namespace {

// Reads one backend and plans it. A refusal ("no such backend") is
// reported and leaves the backend unreached; anything else that is not an
// answer ends the sync.
caf::expected<sync_plan> read_and_plan(runtime_api& api, const backend_request& b,
                                       const sync_request& req, backend_report& report) {
  auto state = api.run("show servers state " + b.backend, req.deadline);
  if (!state)
    return state.error();
  auto rows = parse_servers_state(*state, b.backend);
  if (!rows)
    return rows.error();
  sync_input in;
  in.backend = b.backend;
  in.wanted = b.wanted;
  in.listed = std::move(*rows);
  in.draining_since = b.draining_since;
  in.now = clock::now();
  in.grace = req.grace;
  if (needs_sessions(in)) {
    auto id = std::to_string(in.listed.front().backend_id);
    auto stat = api.run("show stat " + id + " 4 -1", req.deadline);
    if (!stat)
      return stat.error();
    auto sessions = parse_sessions(*stat, b.backend);
    if (!sessions)
      return sessions.error();
    in.sessions = std::move(*sessions);
  }
  for (auto& s : in.listed)
    report.listed.insert(s.name);
  for (auto& w : in.wanted)
    if (!report.listed.contains(w.name))
      report.missing.insert(w.name);
  return plan_sync(in);
}

} // namespace

caf::expected<sync_report> sync(runtime_api& api, const sync_request& req) {
  sync_report out;
  auto info = api.run("show info", req.deadline, max_short_reply_bytes);
  if (!info)
    return info.error();
  auto process = parse_info(*info);
  if (!process)
    return process.error();
  out.process = std::move(*process);
  for (auto& b : req.backends) {
    backend_report report;
    report.backend = b.backend;
    auto plan = read_and_plan(api, b, req, report);
    if (!plan && is(plan.error(), ec::gateway_refused)) {
      out.refusals.push_back(render(plan.error()));
      out.backends.push_back(std::move(report));
      continue;
    }
    if (!plan)
      return plan.error();
    report.reached = true;
    report.present = report.listed;
    std::set<std::string> refused;
    for (auto& cmd : plan->commands) {
      auto answer = api.run(cmd.text, req.deadline, max_short_reply_bytes);
      if (!answer)
        return answer.error();
      if (auto err = check_answer(cmd.answer, *answer, cmd.text)) {
        out.refusals.push_back(b.backend + ": " + render(err));
        refused.insert(cmd.server);
        continue;
      }
      ++out.commands;
      if (cmd.answer == answer_kind::added)
        report.present.insert(cmd.server);
      if (cmd.answer == answer_kind::deleted)
        report.present.erase(cmd.server);
    }
    report.draining_since = std::move(plan->draining_since);
    report.wanted = static_cast<uint32_t>(b.wanted.size());
    for (auto& w : b.wanted)
      report.serving += report.present.contains(w.name) && !refused.contains(w.name) ? 1 : 0;
    report.draining = plan->draining;
    report.removed = plan->removed;
    out.backends.push_back(std::move(report));
  }
  return out;
}

} // namespace egress::haproxy
