#include "soak/schedule.hpp"

#include <algorithm>
#include <cstdio>
#include <random>

namespace egress::soak {

namespace {

constexpr fault_kind kinds[] = {
  fault_kind::partition,      fault_kind::stop_libvirtd,   fault_kind::kill_libvirtd,
  fault_kind::kill_sshd,      fault_kind::destroy_domain,  fault_kind::undefine_domain,
  fault_kind::reload,         fault_kind::restart_engine,
};

constexpr fault_kind image_kinds[] = {
  fault_kind::partition,      fault_kind::stop_libvirtd,   fault_kind::kill_libvirtd,
  fault_kind::kill_sshd,      fault_kind::destroy_domain,  fault_kind::undefine_domain,
  fault_kind::reload,         fault_kind::restart_engine,  fault_kind::lose_image,
  fault_kind::break_mirror,   fault_kind::fill_pool,
};

constexpr fault_kind group_kinds[] = {
  fault_kind::partition,      fault_kind::stop_libvirtd,   fault_kind::kill_libvirtd,
  fault_kind::kill_sshd,      fault_kind::destroy_domain,  fault_kind::undefine_domain,
  fault_kind::reload,         fault_kind::restart_engine,  fault_kind::drain_host,
  fault_kind::lose_host,      fault_kind::lose_host,
};

// std::mt19937_64's output is fixed by the standard; the distributions are
// not (they differ between standard libraries), so the draws are done here.
double uniform(std::mt19937_64& rng, double lo, double hi) {
  return lo + (hi - lo) * static_cast<double>(rng() >> 11) / static_cast<double>(1ull << 53);
}

} // namespace

const char* to_string(fault_kind k) {
  switch (k) {
    case fault_kind::partition: return "partition";
    case fault_kind::stop_libvirtd: return "stop_libvirtd";
    case fault_kind::kill_libvirtd: return "kill_libvirtd";
    case fault_kind::kill_sshd: return "kill_sshd";
    case fault_kind::destroy_domain: return "destroy_domain";
    case fault_kind::undefine_domain: return "undefine_domain";
    case fault_kind::reload: return "reload";
    case fault_kind::restart_engine: return "restart_engine";
    case fault_kind::lose_image: return "lose_image";
    case fault_kind::break_mirror: return "break_mirror";
    case fault_kind::fill_pool: return "fill_pool";
    case fault_kind::drain_host: return "drain_host";
    case fault_kind::lose_host: return "lose_host";
  }
  return "?";
}

bool holds_host(fault_kind k) {
  return k == fault_kind::partition || k == fault_kind::stop_libvirtd
         || k == fault_kind::kill_libvirtd || k == fault_kind::kill_sshd
         || k == fault_kind::drain_host || k == fault_kind::lose_host;
}

bool held(fault_kind k) {
  return holds_host(k) || k == fault_kind::break_mirror || k == fault_kind::fill_pool;
}

std::vector<fault> make_schedule(const schedule_options& o) {
  std::mt19937_64 rng{o.seed};
  std::vector<fault> out;
  std::vector<double> busy_until(static_cast<size_t>(std::max(o.hosts, 1)), 0.0);
  double mirror_busy_until = 0;
  std::vector<double> pool_busy_until(busy_until.size(), 0.0);
  const double last_heal = o.seconds - o.quiet_s;
  for (double t = uniform(rng, o.min_gap_s, o.max_gap_s); t < last_heal;
       t += uniform(rng, o.min_gap_s, o.max_gap_s)) {
    fault f;
    f.at_s = t;
    f.kind = o.images   ? image_kinds[rng() % std::size(image_kinds)]
             : o.groups ? group_kinds[rng() % std::size(group_kinds)]
                        : kinds[rng() % std::size(kinds)];
    f.host = static_cast<int>(rng() % busy_until.size());
    f.pick = rng();
    double hold = uniform(rng, o.min_hold_s, o.max_hold_s);
    if (f.kind == fault_kind::lose_host)
      hold = o.lose_min_s + (hold - o.min_hold_s) / std::max(o.max_hold_s - o.min_hold_s, 1e-9)
                              * (o.lose_max_s - o.lose_min_s);
    // The mirror and each pool hold one fault at a time; neither takes a
    // host out.
    if (f.kind == fault_kind::break_mirror || f.kind == fault_kind::fill_pool) {
      auto& until = f.kind == fault_kind::break_mirror
                      ? mirror_busy_until
                      : pool_busy_until[static_cast<size_t>(f.host)];
      if (until > t)
        continue;
      f.hold_s = std::min(hold, last_heal - t);
      until = t + f.hold_s;
      out.push_back(f);
      continue;
    }
    if (!holds_host(f.kind)) {
      out.push_back(f);
      continue;
    }
    size_t held = 0;
    for (double b : busy_until)
      held += b > t;
    if (busy_until[static_cast<size_t>(f.host)] > t || held + 1 >= busy_until.size())
      continue; // the host is taken, or it would be the last healthy one
    f.hold_s = std::min(hold, last_heal - t);
    busy_until[static_cast<size_t>(f.host)] = t + f.hold_s;
    out.push_back(f);
  }
  return out;
}

std::string describe(const fault& f) {
  char buf[128];
  if (held(f.kind))
    std::snprintf(buf, sizeof buf, "%7.1fs %-15s host %d for %.1fs", f.at_s, to_string(f.kind),
                  f.host, f.hold_s);
  else
    std::snprintf(buf, sizeof buf, "%7.1fs %-15s host %d pick %llu", f.at_s, to_string(f.kind),
                  f.host, static_cast<unsigned long long>(f.pick % 1000));
  return buf;
}

} // namespace egress::soak
