#include "soak/nemesis.hpp"

#include <algorithm>
#include <cstdio>
#include <stdexcept>
#include <thread>
#include <utility>

#include "messages/error.hpp"
#include "providers/images/volume_names.hpp"

namespace egress::soak {

namespace {

using namespace std::chrono_literals;

constexpr auto grace = std::chrono::seconds(30); // a fault's excuse outlives its heal by this

} // namespace

void run_hooks::inflict_cluster_fault(const fault& f) {
  throw std::logic_error(std::string{"a run of one engine was given "} + to_string(f.kind));
}

void run_hooks::heal_cluster_fault(fault_kind kind, int) {
  throw std::logic_error(std::string{"a run of one engine was given "} + to_string(kind));
}

nemesis::nemesis(std::vector<std::unique_ptr<soak_host>>& hosts, soak_mirror* mirror,
                 declared_fleet& fleet, checker& check, run_hooks& run)
  : hosts_(hosts), mirror_(mirror), fleet_(fleet), check_(check), run_(run) {}

soak_host& nemesis::host(int index) const {
  return *hosts_[static_cast<size_t>(index) % hosts_.size()];
}

bool nemesis::lost_image_within(const std::string& host, clock_type::duration within) const {
  auto lost = lost_at_.find(host);
  return lost != lost_at_.end() && clock_type::now() - lost->second < within;
}

void nemesis::inflict(const fault& f) {
  auto& h = host(f.host);
  ++counts_[to_string(f.kind)];
  auto far = clock_type::time_point::max();
  auto excuse = clock_type::now() + grace;
  std::string what = std::string{to_string(f.kind)} + " " + h.name();
  switch (f.kind) {
    case fault_kind::kill_node:
    case fault_kind::stop_node:
    case fault_kind::restart_etcd:
    case fault_kind::cut_node_from_etcd:
      run_.inflict_cluster_fault(f);
      return;
    case fault_kind::drain_host:
      // Nothing excused: a drain must keep every member in the rotation.
      run_.cordon(h.name(), true);
      run_.note(what);
      return;
    case fault_kind::partition:
    case fault_kind::lose_host:
    case fault_kind::stop_libvirtd:
    case fault_kind::kill_libvirtd:
    case fault_kind::kill_sshd:
      // A killed sshd listener leaves the open session, and the link on
      // it, alone: its proxies have no excuse to leave the rotation.
      if (f.kind != fault_kind::kill_sshd)
        check_.excuse_host(h.name(), far);
      if (f.kind == fault_kind::kill_libvirtd) // the test driver forgets its domains
        check_.excuse_remake_host(h.name(), far);
      h.apply(f.kind == fault_kind::partition || f.kind == fault_kind::lose_host
                ? host_fault::partitioned
              : f.kind == fault_kind::stop_libvirtd ? host_fault::libvirtd_stopped
              : f.kind == fault_kind::kill_libvirtd ? host_fault::libvirtd_killed
                                                    : host_fault::sshd_killed);
      run_.note(what);
      return;
    case fault_kind::destroy_domain:
    case fault_kind::undefine_domain: {
      auto name = fleet_.pick_on(h.name(), f.pick);
      if (!name) {
        run_.note(what + ": no proxy there");
        return;
      }
      check_.excuse_proxy(*name, excuse);
      if (f.kind == fault_kind::undefine_domain)
        check_.excuse_remake_proxy(*name, excuse);
      auto err = h.destroy(*name, f.kind == fault_kind::undefine_domain);
      run_.note(what + " " + *name + (err ? " (" + render(err) + ")" : ""));
      return;
    }
    case fault_kind::reload:
      reload(f, h);
      return;
    case fault_kind::lose_image:
      lose_image(h, f.pick);
      return;
    case fault_kind::break_mirror:
      breakage_ = soak_mirror::pick(f.pick);
      mirror_->breaks(breakage_);
      be_patient("mirror", far);
      run_.note(std::string{"break_mirror ("} + soak_mirror::to_string(breakage_) + ")");
      return;
    case fault_kind::fill_pool:
      // With an image lost too: the engine must write into the full pool
      // (a fetch again, a seed), or the fill would rarely meet a write.
      h.fill_pool();
      be_patient("pool " + h.name(), far);
      run_.note(what);
      lose_image(h, f.pick);
      return;
    case fault_kind::restart_engine:
      restart_engine(f);
      return;
  }
}

void nemesis::reload(const fault& f, soak_host& h) {
  // The change counts once the engine took it: a refused reload leaves the
  // declared fleet as the engine has it.
  auto next = fleet_;
  auto [did, changed] = next.change(f.pick, h.name());
  auto answer = run_.reload(next);
  run_.note("reload: " + did + (answer ? "" : " REFUSED: " + render(answer.error())));
  if (!answer) {
    check_.add(run_.now_s(), "a valid reload was refused: " + render(answer.error()));
    return;
  }
  fleet_ = std::move(next);
  if (!changed.empty()) { // a changed spec replaces the VM
    check_.excuse_proxy(changed, clock_type::now() + grace);
    check_.excuse_remake_proxy(changed, clock_type::now() + grace);
  }
}

void nemesis::restart_engine(const fault& f) {
  // Half of them, drawn from the pick, SIGKILL a caf-run engine.
  bool hard = f.pick % 2 == 1;
  auto t = clock_type::now();
  run_.restart_engine(hard, f.node);
  check_.restart(clock_type::now() + grace);
  char buf[96];
  std::snprintf(buf, sizeof buf, " (%s + start %.2f s)", hard ? "kill" : "stop", since(t));
  run_.note("restart_engine" + std::string{buf});
}

// One of the host's cached image files (data or marker) removed behind
// libvirt's back, and one of its VMs destroyed (or undefined) so that the
// engine has to boot from the images again.
void nemesis::lose_image(soak_host& h, uint64_t pick) {
  auto files = h.pool_volumes(images::volume_names::entry_prefix(entry));
  std::erase_if(files, [](const std::string& n) {
    return n.find(".proxy.") != std::string::npos // a proxy's own overlay or seed
           || n.ends_with(".partial");
  });
  std::string what = "lose_image " + h.name();
  if (files.empty()) {
    run_.note(what + ": no image there");
    return;
  }
  auto file = files[pick % files.size()];
  h.remove_from_pool(file);
  lost_at_[h.name()] = clock_type::now();
  what += " " + file;
  if (auto name = fleet_.pick_on(h.name(), pick / 7)) {
    check_.excuse_proxy(*name, clock_type::now() + grace);
    bool undefine = (pick / 7) % 2 == 1;
    if (undefine)
      check_.excuse_remake_proxy(*name, clock_type::now() + grace);
    auto err = h.destroy(*name, undefine);
    what += std::string{undefine ? ", undefined " : ", destroyed "} + *name
            + (err ? " (" + render(err) + ")" : "");
  }
  run_.note(what);
}

void nemesis::heal(fault_kind kind, int index) {
  if (holds_node(kind) || kind == fault_kind::restart_etcd) {
    run_.heal_cluster_fault(kind, index);
    return;
  }
  auto& h = host(index);
  if (kind == fault_kind::break_mirror) {
    heal_mirror();
    return;
  }
  if (kind == fault_kind::fill_pool) {
    free_pool(h);
    return;
  }
  if (kind == fault_kind::drain_host) {
    run_.cordon(h.name(), false);
    run_.note("undrain " + h.name());
    return;
  }
  h.heal();
  check_.excuse_host(h.name(), clock_type::now() + grace);
  if (kind == fault_kind::kill_libvirtd)
    check_.excuse_remake_host(h.name(), clock_type::now() + grace);
  run_.note("heal " + h.name());
}

void nemesis::heal_mirror() {
  mirror_->heal();
  // A corrupt body fails its digest, a permanent failure the image actor
  // retries after its retry_max (5 min, actors/image.hpp); a stalled one
  // ends at the low-speed limit (30 s) and backs off.
  auto patience = breakage_ == soak_mirror::breakage::corrupt ? 330s : 90s;
  be_patient("mirror", clock_type::now() + patience);
  run_.note("heal mirror");
}

// A full pool fails every fill and every create there (a seed, an image)
// until it is freed; then the retries' backoff, as for the mirror.
void nemesis::free_pool(soak_host& h) {
  if (!h.free_pool())
    check_.add(run_.now_s(), h.name() + ": the file filling the pool (not ours) was removed");
  be_patient("pool " + h.name(), clock_type::now() + 90s);
  run_.note("free pool " + h.name());
}

// The checker is patient until the last of its causes ends.
void nemesis::be_patient(const std::string& cause, clock_type::time_point until) {
  patience_[cause] = until;
  patient_until_ = {};
  for (auto& [c, t] : patience_)
    patient_until_ = std::max(patient_until_, t);
  check_.be_patient(patient_until_);
}

// Behind the schedule (an action that took long, an engine restart that
// waited on its bound), the faults due are played in their order, each one's
// heals first: the schedule's one fault per host (and per node) holds only
// then.
void play(nemesis& n, const std::vector<fault>& schedule, clock_type::time_point t0,
          clock_type::duration period, const std::function<void(bool hosts_due)>& between) {
  struct holding_fault {
    double until_s;
    fault_kind kind;
    int index; // its node for a cluster's fault, its host otherwise
  };
  std::vector<holding_fault> holding;
  size_t next = 0;
  double next_hosts = 0;
  // Heals every fault held until `t` or before.
  auto heal_until = [&](double t) {
    for (auto it = holding.begin(); it != holding.end();) {
      if (it->until_s > t) {
        ++it;
        continue;
      }
      n.heal(it->kind, it->index);
      it = holding.erase(it);
    }
  };
  while (next < schedule.size() || !holding.empty()) {
    double t = since(t0);
    heal_until(t);
    while (next < schedule.size() && schedule[next].at_s <= t) {
      auto& f = schedule[next++];
      heal_until(f.at_s);
      n.inflict(f);
      bool on_node = holds_node(f.kind) || f.kind == fault_kind::restart_etcd;
      if (held(f.kind))
        holding.push_back({f.at_s + f.hold_s, f.kind, on_node ? f.node : f.host});
    }
    between(t >= next_hosts);
    if (t >= next_hosts)
      next_hosts = t + 1;
    std::this_thread::sleep_for(period);
  }
}

} // namespace egress::soak
