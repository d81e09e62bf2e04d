#include "actors/parts/call_ledger.hpp"

#include <algorithm>
#include <cstdio>

#include "base/time_text.hpp"

namespace egress {

void call_ledger::started(const caf::actor_addr& addr, uint64_t id, std::string host,
                          std::string what) {
  record r;
  r.id = id;
  r.host = std::move(host);
  r.what = std::move(what);
  r.started = clock::now();
  r.started_at = now_rfc3339();
  calls_.emplace(addr, std::move(r));
}

void call_ledger::finished(const caf::actor_addr& addr) {
  if (auto i = calls_.find(addr); i != calls_.end() && !i->second.abandoned)
    calls_.erase(i);
}

void call_ledger::mark_abandoned(record& r, const std::string& reason) {
  if (r.ended || r.abandoned)
    return;
  r.abandoned = true;
  r.abandon_reason = reason;
  r.abandoned_at = clock::now();
}

void call_ledger::abandon(const caf::actor_addr& addr, const std::string& reason) {
  if (auto i = calls_.find(addr); i != calls_.end())
    mark_abandoned(i->second, reason);
}

void call_ledger::abandon_all(const std::string& reason) {
  for (auto& [addr, r] : calls_)
    mark_abandoned(r, reason);
}

bool call_ledger::ended(const caf::down_msg& msg) {
  auto i = calls_.find(msg.source);
  if (i == calls_.end())
    return false;
  if (!i->second.abandoned) {
    calls_.erase(i); // answered its owner: nothing left to show
    return true;
  }
  i->second.ended = true;
  i->second.ended_at = clock::now();
  prune();
  return true;
}

size_t call_ledger::abandoned_running() const {
  return std::count_if(calls_.begin(), calls_.end(), [](auto& kv) {
    return kv.second.abandoned && !kv.second.ended;
  });
}

void call_ledger::prune() {
  auto now = clock::now();
  std::erase_if(calls_, [&](auto& kv) {
    return kv.second.ended && now - kv.second.ended_at > keep_ended;
  });
  std::vector<std::map<caf::actor_addr, record>::iterator> done;
  for (auto i = calls_.begin(); i != calls_.end(); ++i)
    if (i->second.ended)
      done.push_back(i);
  if (done.size() <= max_ended)
    return;
  std::sort(done.begin(), done.end(),
            [](auto a, auto b) { return a->second.ended_at < b->second.ended_at; });
  for (size_t k = 0; k + max_ended < done.size(); ++k)
    calls_.erase(done[k]);
}

std::vector<actor_row> call_ledger::rows() const {
  auto now = clock::now();
  std::vector<actor_row> out;
  out.reserve(calls_.size());
  for (auto& [addr, r] : calls_) {
    if (r.ended && now - r.ended_at > keep_ended)
      continue; // pruned on the next end
    actor_row e;
    e.kind = actor_kind::call;
    e.name = r.host + "#" + std::to_string(r.id);
    e.started_at = r.started_at;
    if (!r.abandoned)
      e.state = "running";
    else if (!r.ended)
      e.state = "abandoned, thread still running";
    else
      e.state = "abandoned, thread ended";
    // A detached call blocked in libvirt cannot answer a liveness probe by
    // design; its liveness is whether its thread still runs.
    e.liveness = r.ended ? "ended" : "busy (detached)";
    e.details = {"call: " + r.what, "host: " + r.host, "owner: " + owner_,
                 "age: " + elapsed_text((r.ended ? r.ended_at : now) - r.started)};
    if (r.abandoned) {
      e.details.push_back("abandoned: " + elapsed_text(now - r.abandoned_at) + " ago: "
                          + r.abandon_reason);
      e.details.push_back(r.ended ? "thread: ended " + elapsed_text(now - r.ended_at) + " ago"
                                  : "thread: still running");
    }
    out.push_back(std::move(e));
  }
  return out;
}

} // namespace egress
