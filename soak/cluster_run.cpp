#include "soak/cluster_run.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "messages/error.hpp"
#include "soak/checked_run.hpp"
#include "soak/cluster_checker.hpp"

namespace egress::soak {

namespace {

using namespace std::chrono_literals;

constexpr double silent_bound_s = 15; // a running node not answering its metrics

// "min/median/max" of `xs` in seconds, "-" without any.
std::string spread(std::vector<double> xs) {
  if (xs.empty())
    return "-";
  std::sort(xs.begin(), xs.end());
  auto n = xs.size();
  double median = n % 2 == 1 ? xs[n / 2] : (xs[n / 2 - 1] + xs[n / 2]) / 2;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f/%.1f/%.1f", xs.front(), median, xs.back());
  return buf;
}

// A new owner's guard (docs/spec.md 38) on the hosts as the nodes run
// them: every host of the bed has the same settings.
double guard_s(const soak_cluster& c, const engine_config& fleet) {
  return std::chrono::duration<double>(guard_of(c.config_of(0, fleet).hosts.front())).count();
}

// What the run last read of one node, once a second.
struct node_seen {
  std::optional<node_reading> metrics;
  std::optional<size_t> rotation_size;
  clock_type::time_point silent_since{}; // running, yet its metrics unanswered
  bool silence_reported = false;
};

// The run owns the nodes' config and the cluster's checker; the course of
// the run, the declared fleet, the checker, the nemesis and the log are
// soak/checked_run.hpp's.
class cluster_run final : public checked_run {
public:
  cluster_run(const run_options& o, std::vector<std::unique_ptr<soak_host>>& hosts,
              soak_cluster& cluster)
    // No status requests in a cluster run: the held bound is not used. Etcd
    // and the hosts are read every 300 ms.
    : checked_run(o, hosts, nullptr, 9.0, 300ms,
                  {"t_s,declared,least_rotation,hosts_owned,nodes_running,nodes_member,"
                   "hosts_held,etcd_up,violations,events",
                   "soak/cluster.gp"}),
      cluster_(cluster),
      owners_check_(check_, std::chrono::duration<double>(cluster.lease_ttl()).count(),
                    guard_s(cluster, fleet_config())),
      seen_(cluster.size()) {}

  // run_hooks: what the nemesis does to the nodes.
  caf::expected<std::string> reload(const declared_fleet& fleet) override;
  void restart_engine(bool hard, int node) override;
  void cordon(const std::string&, bool) override {
    throw std::logic_error("drain-host in a cluster: groups are refused there, never drawn");
  }
  void inflict_cluster_fault(const fault& f) override;
  void heal_cluster_fault(fault_kind kind, int node) override;

private:
  // The nodes: all started and stopped, one started, one lost.
  void start_engine() override;
  void stop_engine() override;
  engine_config fleet_config() const { return config_of(fleet_, hosts_, nullptr); }
  void start_node(size_t i);
  void lose_owner(size_t i, const std::string& cause);
  // The readings: etcd and the hosts every tick, the nodes once a second.
  void tick(bool nodes_due) override;
  void read_owners();
  void read_nodes();
  // The cluster's convergence, and what is checked or printed around it.
  bool converged() override;
  bool nodes_converged();
  bool owners_converged(const owner_map& owners);
  bool rotations_converged();
  bool hosts_converged(const owner_map& owners);
  std::string not_converged_at_start() const override {
    return "the cluster did not converge at the start within 120 s: " + last_unconverged_;
  }
  void converged_at_start(double s) override;
  void check_at_the_end(bool converged_after_heal) override;
  // The report: the timeline's row, the take-overs in the summary.
  std::string row() override;
  void print_summary(double converged_s) override;
  std::string summary_tail() const override;

  soak_cluster& cluster_;
  cluster_checker owners_check_;
  std::vector<node_seen> seen_;
  bool etcd_unreadable_noted_ = false;
};

void cluster_run::start_engine() {
  for (size_t i = 0; i < cluster_.size(); ++i)
    start_node(i);
}

void cluster_run::stop_engine() {
  for (size_t i = 0; i < cluster_.size(); ++i) {
    if (cluster_.fault(i) != node_fault::none)
      continue; // ended by the destructor
    if (auto err = cluster_.stop(i))
      check_.add(now_s(), cluster_.name(i) + " stop: " + render(err));
  }
}

void cluster_run::start_node(size_t i) {
  try {
    cluster_.start(i, fleet_config());
  } catch (const std::exception& e) {
    throw did_not_come_up{"a node did not come up: " + cluster_.name(i) + ": " + e.what()};
  }
  seen_[i].silent_since = {};
}

// The hosts `i` owned must be owned again (the checker's clock starts now).
void cluster_run::lose_owner(size_t i, const std::string& cause) {
  read_owners(); // the freshest owners: the loss is judged against them
  owners_check_.owner_lost(cluster_.name(i), cause, clock_type::now());
}

caf::expected<std::string> cluster_run::reload(const declared_fleet& fleet) {
  auto cfg = config_of(fleet, hosts_, nullptr);
  std::string answers;
  for (size_t i = 0; i < cluster_.size(); ++i) {
    auto r = cluster_.reload(i, cfg);
    if (!r)
      return make_error(ec::config_invalid, cluster_.name(i) + ": " + render(r.error()));
    answers += (answers.empty() ? "" : "; ") + cluster_.name(i) + ": " + *r;
  }
  return answers;
}

void cluster_run::restart_engine(bool hard, int node) {
  auto i = static_cast<size_t>(node) % cluster_.size();
  auto& name = cluster_.name(i);
  if (cluster_.fault(i) != node_fault::none) { // played late, onto a held node
    note("restart " + name + ": skipped, the node is held");
    return;
  }
  lose_owner(i, hard ? "restart (SIGKILL)" : "restart (SIGTERM)");
  if (auto err = hard ? cluster_.kill(i) : cluster_.stop(i))
    check_.add(now_s(), name + (hard ? " kill: " : " stop: ") + render(err));
  start_node(i);
  note("restart " + name);
}

void cluster_run::inflict_cluster_fault(const fault& f) {
  if (f.kind == fault_kind::restart_etcd) {
    cluster_.stop_etcd();
    note("restart_etcd: etcd stopped");
    return;
  }
  auto i = static_cast<size_t>(f.node) % cluster_.size();
  auto& name = cluster_.name(i);
  lose_owner(i, to_string(f.kind));
  if (f.kind == fault_kind::kill_node) {
    if (auto err = cluster_.kill(i))
      check_.add(now_s(), name + " kill: " + render(err));
  } else if (f.kind == fault_kind::stop_node) {
    cluster_.pause(i);
  } else {
    cluster_.cut(i);
  }
  note(std::string{to_string(f.kind)} + " " + name);
}

void cluster_run::heal_cluster_fault(fault_kind kind, int node) {
  if (kind == fault_kind::restart_etcd) {
    auto t = clock_type::now();
    cluster_.start_etcd();
    char buf[64];
    std::snprintf(buf, sizeof buf, "etcd started again (ready in %.1f s)", since(t));
    note(buf);
    return;
  }
  auto i = static_cast<size_t>(node) % cluster_.size();
  caf::error err;
  try {
    err = cluster_.heal(i, fleet_config());
  } catch (const std::exception& e) {
    throw did_not_come_up{"a node did not come up: " + cluster_.name(i) + ": " + e.what()};
  }
  if (err)
    check_.add(now_s(), cluster_.name(i) + ": a valid reload was refused after SIGCONT: "
                          + render(err));
  seen_[i].silent_since = {};
  if (kind != fault_kind::kill_node) // the same process, its lease perhaps alive
    owners_check_.owner_back(cluster_.name(i), clock_type::now());
  note("heal " + cluster_.name(i));
}

// One reading of etcd and the hosts (every tick), and of the nodes
// (`nodes_due`, once a second).
void cluster_run::tick(bool nodes_due) {
  read_owners();
  read_hosts([this](soak_host& h, const std::vector<domain_reading>& ours,
                    clock_type::time_point read_at) {
    auto declared = fleet_.on(h.name());
    owners_check_.on_marks(h.name(), ours, declared, read_at, now_s());
    check_.on_host(h.name(), ours, declared, read_at, now_s());
  });
  std::set<std::string> held;
  for (auto& h : hosts_)
    if (h->fault() != host_fault::none)
      held.insert(h->name());
  owners_check_.tick(cluster_.etcd_up() && cluster_.some_node_acts(), held, clock_type::now(),
                     now_s());
  if (nodes_due)
    read_nodes();
}

void cluster_run::read_owners() {
  if (!cluster_.etcd_up())
    return;
  auto owners = cluster_.owners();
  if (owners) {
    owners_check_.on_owners(*owners, clock_type::now(), now_s());
    etcd_unreadable_noted_ = false;
  } else if (!etcd_unreadable_noted_) { // the soak's read, not the engine's doing
    etcd_unreadable_noted_ = true;
    note("the soak cannot read etcd: " + render(owners.error()));
  }
}

// Each running node's metrics and rotation; a running node that stays
// silent (ended on its own, or wedged) is a violation.
void cluster_run::read_nodes() {
  for (size_t i = 0; i < cluster_.size(); ++i) {
    auto& s = seen_[i];
    auto f = cluster_.fault(i);
    if (f == node_fault::killed || f == node_fault::stopped) {
      s = node_seen{};
      continue;
    }
    s.metrics = cluster_.metrics_of(i);
    auto rotation = cluster_.rotation_of(i);
    s.rotation_size = rotation ? std::optional<size_t>{rotation->size()} : std::nullopt;
    if (s.metrics) {
      s.silent_since = {};
      s.silence_reported = false;
      continue;
    }
    if (s.silent_since == clock_type::time_point{})
      s.silent_since = clock_type::now();
    if (since(s.silent_since) > silent_bound_s && !s.silence_reported) {
      s.silence_reported = true;
      check_.add(now_s(), cluster_.name(i) + " (pid " + std::to_string(cluster_.pid(i))
                            + ") has not answered its metrics for "
                            + std::to_string(int(since(s.silent_since))) + " s");
    }
  }
}

bool cluster_run::converged() {
  if (!nodes_converged() || !rotations_converged())
    return false;
  auto owners = cluster_.owners();
  if (!owners) {
    last_unconverged_ = "etcd: " + render(owners.error());
    return false;
  }
  return owners_converged(*owners) && hosts_converged(*owners);
}

// Every node running, a member, its metrics answering.
bool cluster_run::nodes_converged() {
  if (!cluster_.etcd_up()) {
    last_unconverged_ = "etcd is down";
    return false;
  }
  for (size_t i = 0; i < cluster_.size(); ++i) {
    if (cluster_.fault(i) != node_fault::none) {
      last_unconverged_ = cluster_.name(i) + " is held by the nemesis";
      return false;
    }
    auto m = cluster_.metrics_of(i);
    if (!m || m->phase != "member") {
      last_unconverged_ = cluster_.name(i) + " is " + (m ? m->phase : "silent");
      return false;
    }
  }
  return true;
}

// Every host owned by one of the nodes, and the hosts each node says it
// owns adding up to them (no node holding a host the store gave another).
bool cluster_run::owners_converged(const owner_map& owners) {
  std::set<std::string> names;
  for (size_t i = 0; i < cluster_.size(); ++i)
    names.insert(cluster_.name(i));
  for (auto& h : hosts_) {
    auto k = owners.find(h->name());
    if (k == owners.end() || names.count(k->second.node) == 0) {
      last_unconverged_ = h->name() + " is owned by "
                          + (k == owners.end() ? std::string{"no node"} : k->second.node);
      return false;
    }
  }
  int owned = 0;
  std::string by_node;
  for (size_t i = 0; i < cluster_.size(); ++i) {
    auto m = cluster_.metrics_of(i);
    owned += m ? m->hosts_owned : 0;
    by_node += " " + cluster_.name(i) + "=" + (m ? std::to_string(m->hosts_owned) : "?");
  }
  if (owned != static_cast<int>(hosts_.size())) {
    last_unconverged_ = "the nodes own " + std::to_string(owned) + " hosts of "
                        + std::to_string(hosts_.size()) + ":" + by_node;
    return false;
  }
  return true;
}

// Every declared proxy, and nothing else, in every node's /rotation.
bool cluster_run::rotations_converged() {
  std::set<std::string> declared;
  for (auto& p : fleet_.proxies())
    declared.insert(p.name);
  for (size_t i = 0; i < cluster_.size(); ++i) {
    auto r = cluster_.rotation_of(i);
    if (r && *r == declared)
      continue;
    std::string missing;
    for (auto& n : declared)
      if (r && r->count(n) == 0)
        missing += " " + n;
    last_unconverged_ = cluster_.name(i) + "'s /rotation "
                        + (r ? "has " + std::to_string(r->size()) + " of "
                                 + std::to_string(declared.size()) + " (missing:" + missing + ")"
                             : std::string{"does not answer"});
    return false;
  }
  return true;
}

// Exactly the declared domains of ours on every host, each stamped with
// its host's current token (adopted by the owner).
bool cluster_run::hosts_converged(const owner_map& owners) {
  auto declared = [this](const std::string& host) { return fleet_.on(host); };
  auto stamped = [&](const std::string& host, const domain_reading& d) {
    auto token = owners.at(host).token;
    if (d.mark.token == token)
      return true;
    last_unconverged_ = d.name + " on " + host + " carries token " + std::to_string(d.mark.token)
                        + ", its host's is " + std::to_string(token);
    return false;
  };
  return checked_run::hosts_converged(declared, stamped);
}

void cluster_run::converged_at_start(double s) {
  std::printf("soak: the cluster converged at the start in %.1f s; take-over bound %.1f s\n", s,
              owners_check_.bound_s());
}

void cluster_run::check_at_the_end(bool converged_after_heal) {
  if (converged_after_heal && !converged())
    check_.add(now_s(), "no longer converged at the end: " + last_unconverged_);
}

std::string cluster_run::row() {
  size_t running = 0, members = 0, held = 0;
  std::optional<size_t> least;
  for (size_t i = 0; i < cluster_.size(); ++i) {
    running += cluster_.fault(i) == node_fault::none;
    auto& s = seen_[i];
    members += s.metrics && s.metrics->phase == "member";
    if (s.rotation_size)
      least = std::min(least.value_or(*s.rotation_size), *s.rotation_size);
  }
  for (auto& h : hosts_)
    held += h->fault() != host_fault::none;
  char buf[256];
  std::snprintf(buf, sizeof buf, "%.1f,%zu,%zu,%zu,%zu,%zu,%zu,%d,%zu,", now_s(),
                fleet_.proxies().size(), least.value_or(0), owners_check_.owners().size(),
                running, members, held, cluster_.etcd_up() ? 1 : 0,
                check_.violations().size());
  return buf;
}

// The hosts still waiting for an owner at the end, before the summary line.
void cluster_run::print_summary(double converged_s) {
  for (auto& w : owners_check_.waiting())
    std::printf("soak: still waiting to be owned again: %s\n", w.c_str());
  checked_run::print_summary(converged_s);
}

// The measured take-overs: how long until a lost owner's hosts were claimed
// and owned again (min/median/max), against the bound.
std::string cluster_run::summary_tail() const {
  std::vector<double> owned, claimed;
  size_t kept = 0, handed_over = 0;
  for (auto& t : owners_check_.takeovers()) {
    kept += t.kept;
    handed_over += t.handovers > 0;
    if (t.kept)
      continue;
    claimed.push_back(t.claimed_s);
    if (!t.claim_only)
      owned.push_back(t.owned_s);
  }
  char buf[256];
  std::snprintf(buf, sizeof buf,
                " takeovers=%zu takeover_s=%s claim_s=%s bound_s=%.1f handed_over=%zu kept=%zu",
                claimed.size(), spread(owned).c_str(), spread(claimed).c_str(),
                owners_check_.bound_s(), handed_over, kept);
  return buf;
}

} // namespace

int run_cluster_soak(const run_options& o, std::vector<std::unique_ptr<soak_host>>& hosts,
                     soak_cluster& cluster, const std::vector<fault>& schedule,
                     double nemesis_s) {
  cluster_run run{o, hosts, cluster};
  return run.run(schedule, nemesis_s);
}

} // namespace egress::soak
