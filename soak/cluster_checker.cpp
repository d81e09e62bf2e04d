#include "soak/cluster_checker.hpp"

#include <algorithm>
#include <cstdio>

namespace egress::soak {

namespace {

std::string token_text(int64_t token, const std::string& node) {
  return std::to_string(token) + " (" + (node.empty() ? "?" : node) + ")";
}

} // namespace

void cluster_checker::owner_lost(const std::string& node, const std::string& cause,
                                 clock_type::time_point now) {
  for (auto& [host, k] : owners_) {
    if (k.node != node)
      continue;
    waiting_host w;
    w.t.host = host;
    w.t.lost_node = node;
    w.t.cause = cause;
    w.old_token = k.token;
    w.counted_until = now;
    waiting_[host] = std::move(w);
  }
}

void cluster_checker::owner_back(const std::string& node, clock_type::time_point now) {
  for (auto& [host, w] : waiting_)
    if (w.t.lost_node == node && w.new_token == 0) {
      w.back_at = now;
      w.back_counted_s = w.counted_s;
    }
}

// The owner that ran again still holds the key it had a lease TTL later:
// its keepalive renewed the lease, and it resumed with its claims.
bool cluster_checker::kept_by_owner(const std::string& host, const waiting_host& w,
                                    clock_type::time_point now) const {
  auto k = owners_.find(host);
  return w.back_at && w.new_token == 0 && k != owners_.end() && k->second.token == w.old_token
         && std::chrono::duration<double>(now - *w.back_at).count() >= ttl_s_;
}

void cluster_checker::on_owners(const owner_map& owners, clock_type::time_point now,
                                double t_s) {
  std::set<std::string> hosts;
  for (auto& [h, k] : owners_)
    hosts.insert(h);
  for (auto& [h, k] : owners)
    hosts.insert(h);
  for (auto& h : hosts) {
    auto was = owners_.find(h);
    auto is = owners.find(h);
    // A new epoch whenever the key changes: freed, claimed, claimed anew.
    bool same = read_once_ && was != owners_.end() && is != owners.end()
                && was->second.token == is->second.token;
    if (!same)
      ++epoch_[h];
    if (!same && is != owners.end())
      claim_seen_[h] = now;
    if (is != owners.end())
      check_token_grows(h, is->second, t_s);
  }
  owners_ = owners;
  read_once_ = true;
  for (auto& [h, w] : waiting_) {
    auto k = owners_.find(h);
    if (k == owners_.end() || k->second.token <= w.old_token || k->second.token == w.new_token)
      continue;
    if (w.new_token == 0) {
      w.t.claimed_s = w.counted_s;
    } else { // the claim seen before was handed over (or lost) unstamped
      ++w.t.handovers;
      w.judged_s = 0;
      w.reported = false;
    }
    w.new_token = k->second.token;
    w.t.token = k->second.token;
    w.t.new_node = k->second.node;
  }
}

void cluster_checker::check_token_grows(const std::string& host, const owner_key& k,
                                        double t_s) {
  auto& max = max_token_[host];
  if (k.token < max && reported_.insert("owner " + host + "@" + std::to_string(k.token)).second)
    check_.add(t_s, "the fencing token of " + host + " went back from " + std::to_string(max)
                      + " to " + token_text(k.token, k.node));
  max = std::max(max, k.token);
}

void cluster_checker::on_marks(const std::string& host, const std::vector<domain_reading>& ours,
                               const std::set<std::string>& declared,
                               clock_type::time_point now, double t_s) {
  auto last = last_read_.find(host);
  // Only against a reading a moment ago is a domain "new": one made while
  // its libvirtd could not be read may be older than it looks.
  bool consecutive = last != last_read_.end() && now - last->second.at < std::chrono::seconds(2);
  std::string marks;
  std::set<std::string> names;
  for (auto& d : ours) {
    auto key = host + "/" + d.name;
    auto& seen = domains_[key];
    bool fresh = consecutive && (last->second.names.count(d.name) == 0 || seen.uid != d.mark.uid);
    check_token_back(key, d, seen, t_s);
    check_uid_kept(host, d, seen, now, t_s);
    if (fresh)
      check_not_superseded(host, d, now, t_s);
    remember(host, d, seen);
    marks += (marks.empty() ? "" : " ") + d.name + "=" + std::to_string(d.mark.token);
    names.insert(d.name);
  }
  last_marks_[host] = marks.empty() ? "none" : marks;
  last_read_[host] = {now, std::move(names)};
  auto w = waiting_.find(host);
  if (w == waiting_.end() || w->second.new_token == 0 || w->second.host_held
      || !stamped(ours, declared, w->second.new_token))
    return;
  complete(w->second, t_s);
  waiting_.erase(w);
}

// A mark's token never goes back: an older one over a newer one was
// written by a node whose claim was superseded.
void cluster_checker::check_token_back(const std::string& key, const domain_reading& d,
                                       const domain_seen& seen, double t_s) {
  if (d.mark.token < seen.max_token
      && reported_.insert(key + "@" + std::to_string(d.mark.token)).second)
    check_.add(t_s, "the mark of " + d.name + " on " + key.substr(0, key.find('/'))
                      + " went back from token " + token_text(seen.max_token, seen.max_owner)
                      + " to " + token_text(d.mark.token, d.mark.owner)
                      + ": written by a node whose claim was superseded");
}

// A uid changes only across a change of the host's owner key, or where the
// nemesis made the domain go (undefined, its spec changed, its libvirtd's
// domains lost).
void cluster_checker::check_uid_kept(const std::string& host, const domain_reading& d,
                                     const domain_seen& seen, clock_type::time_point now,
                                     double t_s) {
  auto owner = owners_.find(host);
  bool owner_kept = owner != owners_.end() && !seen.uid.empty() && seen.epoch == epoch_[host];
  if (owner_kept && d.mark.uid != seen.uid && !check_.remake_excused(host, d.name, now)
      && reported_.insert(host + "/" + d.name + "/" + d.mark.uid).second)
    check_.add(t_s, d.name + " on " + host + " was made anew (uid " + seen.uid + " -> "
                      + d.mark.uid + ", mark " + token_text(d.mark.token, d.mark.owner)
                      + ") while " + owner->second.node + " kept the host (token "
                      + std::to_string(owner->second.token) + ")");
}

// A domain that appeared (or came back with another uid) carrying a token
// older than the host's claim, more than a guard after that claim was seen:
// made by a node whose claim was superseded. Within the guard it may be a
// call the old owner sent before its fence closed, which the guard exists
// to wait out.
void cluster_checker::check_not_superseded(const std::string& host, const domain_reading& d,
                                           clock_type::time_point now, double t_s) {
  auto owner = owners_.find(host);
  if (owner == owners_.end() || d.mark.token >= owner->second.token)
    return;
  auto after_s = std::chrono::duration<double>(now - claim_seen_[host]).count();
  if (after_s > guard_s_ && reported_.insert(host + "/" + d.name + "/" + d.mark.uid).second)
    check_.add(t_s, d.name + " on " + host + " appeared (uid " + d.mark.uid + ") with token "
                      + token_text(d.mark.token, d.mark.owner) + ", " + seconds_text(after_s)
                      + " after the claim " + token_text(owner->second.token, owner->second.node)
                      + " was seen (guard " + seconds_text(guard_s_)
                      + "): made by a node whose claim was superseded");
}

void cluster_checker::remember(const std::string& host, const domain_reading& d,
                               domain_seen& seen) {
  seen.uid = d.mark.uid;
  seen.epoch = epoch_[host];
  if (d.mark.token > seen.max_token) {
    seen.max_token = d.mark.token;
    seen.max_owner = d.mark.owner;
  }
}

// Every declared domain on the host carries `token` or a newer one: the
// new owner's proxies have read (and so adopted) them.
bool cluster_checker::stamped(const std::vector<domain_reading>& ours,
                              const std::set<std::string>& declared, int64_t token) {
  return std::all_of(ours.begin(), ours.end(), [&](const domain_reading& d) {
    return declared.count(d.name) == 0 || d.mark.token >= token;
  });
}

void cluster_checker::tick(bool clock_runs, const std::set<std::string>& held,
                           clock_type::time_point now, double t_s) {
  // The clock starting again means etcd is back (a new leader extends every
  // lease by a whole TTL, the dead owner's too: its key lives that long
  // again), or a node can act again (it needs a lease first): a host not
  // claimed yet is judged from then on (seed 4242: a node killed while etcd
  // was stopped, etcd stopped again after its return: 14.24 s counted).
  bool restarted = clock_runs && !clock_ran_;
  clock_ran_ = clock_runs;
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    auto& w = it->second;
    if (restarted && w.new_token == 0)
      w.judged_s = 0;
    if (clock_runs) {
      auto dt = std::chrono::duration<double>(now - w.counted_until).count();
      w.counted_s += dt;
      w.judged_s += dt;
    }
    w.counted_until = now;
    w.host_held = w.host_held || held.count(it->first) != 0;
    bool kept = kept_by_owner(it->first, w, now);
    if (kept || (w.new_token != 0 && w.host_held)) {
      w.t.kept = kept;
      w.t.claim_only = !kept;
      complete(w, t_s);
      it = waiting_.erase(it);
      continue;
    }
    // While its returned owner may still hold a live lease, nobody claims.
    bool confirming = w.back_at && w.new_token == 0 && owners_.count(it->first) != 0;
    if (w.judged_s > bound_s_ && !w.reported && !confirming) {
      w.reported = true;
      auto after = w.t.handovers == 0 ? w.t.lost_node + "'s " + w.t.cause
                                      : "its hand-over (after " + w.t.lost_node + "'s "
                                          + w.t.cause + ")";
      check_.add(t_s, it->first + " not owned again " + seconds_text(w.judged_s) + " after "
                        + after + " (bound " + seconds_text(bound_s_)
                        + "): " + why_waiting(it->first, w));
    }
    ++it;
  }
}

// What a host waiting past its bound shows: no claim yet, or a claim its
// domains do not carry.
std::string cluster_checker::why_waiting(const std::string& host, const waiting_host& w) const {
  auto marks = last_marks_.find(host);
  auto seen = marks == last_marks_.end() ? std::string{"not read"} : marks->second;
  if (w.new_token != 0)
    return "claimed " + token_text(w.new_token, w.t.new_node)
           + " but not every declared domain carries it (marks: " + seen + ")";
  auto k = owners_.find(host);
  if (k == owners_.end())
    return "no new claim: the host is free";
  return "no new claim: the key is still " + token_text(k->second.token, k->second.node);
}

void cluster_checker::complete(waiting_host& w, double t_s) {
  w.t.owned_s = w.t.kept ? w.back_counted_s : w.counted_s;
  done_.push_back(w.t);
  if (w.t.kept) {
    std::printf("soak: %7.1f s  %s kept by %s (token %lld): it ran again %.1f s after its %s"
                " with its lease alive\n",
                t_s, w.t.host.c_str(), w.t.lost_node.c_str(),
                static_cast<long long>(w.old_token), w.t.owned_s, w.t.cause.c_str());
    return;
  }
  std::printf("soak: %7.1f s  %s owned again by %s (token %lld) %.1f s after %s's %s"
              " (claimed after %.1f s%s%s)\n",
              t_s, w.t.host.c_str(), w.t.new_node.c_str(), static_cast<long long>(w.t.token),
              w.t.owned_s, w.t.lost_node.c_str(), w.t.cause.c_str(), w.t.claimed_s,
              w.t.handovers > 0 ? "; then handed over" : "",
              w.t.claim_only ? "; its host held: the claim only" : "");
}

std::vector<std::string> cluster_checker::waiting() const {
  std::vector<std::string> out;
  for (auto& [h, w] : waiting_)
    out.push_back(h + " (since " + w.t.lost_node + "'s " + w.t.cause + ", "
                  + seconds_text(w.counted_s) + " counted)");
  return out;
}

} // namespace egress::soak
