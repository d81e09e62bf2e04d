#include "soak/nemesis.hpp"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "messages/error.hpp"
#include "providers/images/volume_names.hpp"

namespace egress::soak {

namespace {

using namespace std::chrono_literals;

constexpr auto grace = std::chrono::seconds(30); // a fault's excuse outlives its heal by this

double since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

} // namespace

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
  if (!changed.empty())
    check_.excuse_proxy(changed, clock_type::now() + grace);
}

void nemesis::restart_engine(const fault& f) {
  // Half of them, drawn from the pick, SIGKILL a caf-run engine.
  bool hard = f.pick % 2 == 1;
  auto t = clock_type::now();
  run_.restart_engine(hard);
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
    auto err = h.destroy(*name, undefine);
    what += std::string{undefine ? ", undefined " : ", destroyed "} + *name
            + (err ? " (" + render(err) + ")" : "");
  }
  run_.note(what);
}

void nemesis::heal(fault_kind kind, int host_index) {
  auto& h = host(host_index);
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

} // namespace egress::soak
