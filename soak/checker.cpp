#include "soak/checker.hpp"

#include <cstdio>

namespace egress::soak {

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f s", s);
  return buf;
}

void checker::add(double t_s, std::string what) {
  std::printf("soak: VIOLATION at %.1f s: %s\n", t_s, what.c_str());
  violations_.push_back({t_s, std::move(what)});
}

bool checker::excused(const proxy_status& p, clock_type::time_point now) const {
  if (now < all_until_)
    return true;
  if (auto i = host_until_.find(p.host); i != host_until_.end() && now < i->second)
    return true;
  auto i = proxy_until_.find(p.name);
  return i != proxy_until_.end() && now < i->second;
}

namespace {

bool before(const std::map<std::string, clock_type::time_point>& until, const std::string& key,
            clock_type::time_point now) {
  auto i = until.find(key);
  return i != until.end() && now < i->second;
}

} // namespace

bool checker::remake_excused(const std::string& host, const std::string& name,
                             clock_type::time_point now) const {
  return before(remake_host_until_, host, now) || before(remake_proxy_until_, name, now);
}

void checker::on_status(const fleet_status& st, double answer_s, clock_type::time_point now,
                        double t_s) {
  if (answer_s > held_bound_s_)
    add(t_s, "a status request was held " + seconds_text(answer_s) + " (bound "
               + seconds_text(held_bound_s_) + ")");
  std::set<std::string> names;
  for (auto& n : st.rotation)
    if (!names.insert(n).second)
      add(t_s, n + " is in the rotation twice");
  std::set<std::string> in;
  for (auto& p : st.proxies) {
    if (p.in_rotation) {
      in.insert(p.name);
      out_since_.erase(p.name);
      continue;
    }
    auto why = " (" + std::string{to_string(p.phase)}
               + (p.last_error.empty() ? "" : ": " + p.last_error) + ")";
    if (excused(p, now)) {
      out_since_.erase(p.name);
      continue;
    }
    if (was_in_rotation_.count(p.name) != 0)
      add(t_s, p.name + " on " + p.host + " left the rotation with no fault on its host" + why);
    if (now < patient_until_) {
      out_since_.erase(p.name); // the stuck bound counts from the end of the patience
      continue;
    }
    auto at = out_since_.try_emplace(p.name, now).first;
    auto out_s = std::chrono::duration<double>(now - at->second).count();
    if (out_s > stuck_bound_s_ && stuck_reported_.insert(p.name).second)
      add(t_s, p.name + " on " + p.host + " has been out of the rotation for "
                 + seconds_text(out_s) + " with nothing to excuse it" + why);
  }
  std::erase_if(out_since_, [&](auto& kv) {
    for (auto& p : st.proxies)
      if (p.name == kv.first)
        return false;
    return true; // no longer declared
  });
  was_in_rotation_ = std::move(in);
}

void checker::on_status_failed(const std::string& why, double answer_s, double t_s) {
  add(t_s, "no status (" + why + ") after " + seconds_text(answer_s));
}

void checker::on_host(const std::string& host, const std::vector<domain_reading>& ours,
                      const std::set<std::string>& declared, clock_type::time_point now,
                      double t_s) {
  std::set<std::string> seen;
  for (auto& d : ours) {
    if (declared.count(d.name) != 0)
      continue;
    auto key = host + "/" + d.name;
    seen.insert(key);
    auto at = orphan_since_.try_emplace(key, now).first;
    auto age = std::chrono::duration<double>(now - at->second).count();
    if (age > orphan_bound_s_ && orphans_reported_.insert(key).second)
      add(t_s, "domain " + d.name + " on " + host + " carries our mark but no proxy declares it"
                 " there, for " + seconds_text(age));
  }
  std::erase_if(orphan_since_, [&](auto& kv) {
    return kv.first.rfind(host + "/", 0) == 0 && seen.count(kv.first) == 0;
  });
}

void checker::on_probe(const std::string& proxy, bool in_rotation, bool passed,
                       clock_type::time_point now, double t_s) {
  if (!in_rotation || passed) {
    failing_since_.erase(proxy);
    return;
  }
  auto at = failing_since_.try_emplace(proxy, now).first;
  auto failing_s = std::chrono::duration<double>(now - at->second).count();
  if (failing_s > probe_bound_s && dead_served_reported_.insert(proxy).second)
    add(t_s, proxy + " stayed in the rotation while requests through it failed for "
               + seconds_text(failing_s));
}

void checker::on_foreign(const std::string& host, bool intact, double t_s) {
  if (!intact && foreign_reported_.insert(host).second)
    add(t_s, "the unmarked domain \"foreign\" on " + host + " was stopped or removed");
}

} // namespace egress::soak
