// bench/scale: N proxies on libvirt's in-process test driver.
//
//   bench-scale [--proxies N] [--hosts H] [--poll-ms P] [--rest-s S]
//   bench-scale --groups [--proxies N] [--hosts H]
//
// Prints: time to converge (every proxy running with an address), peak RSS
// per proxy (the in-process test driver's domains included), the heap in
// use per proxy at rest split into the test driver's domain (measured alone
// before the engine starts: that memory is libvirtd's on a real host) and
// the engine's own, the time to answer a status query for all proxies (median and
// max of 20), the engine's CPU at rest: the process's CPU time over S
// seconds (default 20) after convergence, in cores, with the read-backs and
// bulk reads it did meanwhile (libvirt calls per second per host), and how
// long a domain destroyed out of band takes to leave the rotation: the
// engine (libvirt's event) against a loop that reads the domain's state
// every P ms, as a poller would (today's poll-interval), side by side in
// five rounds. No assertions: figures only.
//
// With --groups: the same N proxies over H hosts declared by hand, then as
// one group of N members on the H hosts, each from start to every proxy
// running, side by side in one run (the ratio is the cost of the engine
// placing them: the hosts' surveys, then place()), and place() alone over
// that shape (median of 5).

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <random>
#include <vector>

#include <malloc.h>
#include <sys/resource.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include "actors/parts/placement.hpp"
#include "base/log.hpp"
#include "messages/error.hpp"
#include "providers/libvirt/domains.hpp"
#include "runtime/engine.hpp"

#include "figures.hpp"

using namespace std::chrono;

namespace {

long rss_kib(const char* field) {
  std::ifstream in{"/proc/self/status"};
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field, 0) == 0)
      return std::stol(line.substr(std::strlen(field)));
  return -1;
}

// Bytes malloc has handed out and not taken back, over every arena: what
// the process holds, free of RSS's arena slack and page granularity.
double heap_in_use() {
  auto m = ::mallinfo2();
  return double(m.uordblks) + double(m.hblkhd);
}

// What the in-process test driver holds per running domain of a proxy's
// shape: `k` defined and started on their own, measured, then deleted.
double driver_bytes_per_domain(size_t k) {
  auto c = egress::lv::connection::open("test:///default");
  if (!c)
    return 0;
  auto h0 = heap_in_use();
  for (size_t i = 0; i < k; ++i) {
    egress::domain_spec d;
    d.name = "driver-" + std::to_string(i);
    d.domain_type = "test";
    d.network = "default";
    d.mark = {"driver-" + std::to_string(i), "2026-01-01T00:00:00Z", "driver",
              std::string(64, '0'), {}, "hv0", {}, 0};
    if (auto r = egress::lv::define_and_start(**c, d, {}); !r) {
      std::fprintf(stderr, "define %s: %s\n", d.name.c_str(), egress::render(r.error()).c_str());
      return 0;
    }
  }
  auto per = (heap_in_use() - h0) / double(k);
  for (size_t i = 0; i < k; ++i)
    (void)egress::lv::delete_domain(**c, "driver-" + std::to_string(i));
  return per;
}

double ms(steady_clock::duration d) {
  return duration_cast<microseconds>(d).count() / 1000.0;
}

double cpu_seconds() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  auto s = [](const timeval& tv) { return double(tv.tv_sec) + double(tv.tv_usec) / 1e6; };
  return s(ru.ru_utime) + s(ru.ru_stime);
}

uint64_t read_backs(const egress::fleet_status& st) {
  uint64_t n = 0;
  for (auto& p : st.proxies)
    n += p.polls;
  return n;
}

uint64_t bulk_reads(const egress::fleet_status& st) {
  uint64_t n = 0;
  for (auto& l : st.links)
    n += l.bulk_reads;
  return n;
}

// When each proxy left the rotation, as the fleet announces it.
struct departures {
  std::mutex mtx;
  std::map<std::string, steady_clock::time_point> at;
};

egress::rotation_events_actor::behavior_type
record_departures(egress::rotation_events_actor::pointer, std::shared_ptr<departures> d) {
  return {[d](egress::rotation_event& e) {
    if (e.joined)
      return;
    std::lock_guard<std::mutex> guard{d->mtx};
    d->at.emplace(e.proxy, steady_clock::now());
  }};
}

// A poller: reads `name`'s state every `every` on its own connection until
// it is not running; returns when it saw that.
steady_clock::time_point poll_until_stopped(const std::string& name, milliseconds every) {
  auto c = egress::lv::connection::open("test:///default");
  if (!c)
    return steady_clock::now();
  for (;;) {
    auto r = egress::lv::read_domain(**c, name, {});
    if (r && (!r->exists || r->state != egress::domain_state::running))
      return steady_clock::now();
    std::this_thread::sleep_for(every);
  }
}

struct destroy_figures {
  double engine_ms;
  double poll_ms;
};

// Five domains destroyed out of band, one at a time, each at a random point
// of the poller's period; the medians of both. The poller watches a domain
// of its own destroyed at the same instant (the engine starts its own again
// within a millisecond or so: a poller would never see it stopped).
destroy_figures destroy_out_of_band(caf::actor_system& sys, egress::engine& eng,
                                    milliseconds poll_every) {
  auto d = std::make_shared<departures>();
  auto rec = sys.spawn(record_departures, d);
  caf::anon_send(eng.fleet(), egress::atom::subscribe_v, rec);
  auto witness = egress::lv::connection::open("test:///default");
  std::vector<double> engine_ms, poll_ms;
  std::minstd_rand rng{42};
  for (int i = 0; i < 5; ++i) {
    auto name = "px-" + std::to_string(i);
    egress::domain_spec polled_domain;
    polled_domain.name = "polled-" + std::to_string(i);
    polled_domain.domain_type = "test";
    polled_domain.network = "default";
    polled_domain.vcpus = 1;
    polled_domain.memory_mib = 64;
    polled_domain.mark = {"poller-" + std::to_string(i), "2026-01-01T00:00:00Z", "poller",
                          std::string(64, '0'), {}, "hv0", {}, 0};
    if (witness)
      if (auto r = egress::lv::define_and_start(**witness, polled_domain); !r)
        std::fprintf(stderr, "define %s: %s\n", polled_domain.name.c_str(),
                     egress::render(r.error()).c_str());
    std::atomic<bool> ready{false};
    steady_clock::time_point polled;
    std::thread poller{[&] {
      ready = true;
      polled = poll_until_stopped(polled_domain.name, poll_every);
    }};
    while (!ready)
      std::this_thread::yield();
    std::this_thread::sleep_for(milliseconds(rng() % poll_every.count()));
    auto t0 = steady_clock::now();
    auto err = witness ? egress::lv::destroy_domain(**witness, name) : witness.error();
    if (!err)
      err = egress::lv::destroy_domain(**witness, polled_domain.name);
    if (err) {
      std::fprintf(stderr, "destroy %s: %s\n", name.c_str(), egress::render(err).c_str());
      std::exit(1);
    }
    poller.join();
    (void)egress::lv::delete_domain(**witness, polled_domain.name);
    steady_clock::time_point left;
    for (auto deadline = t0 + seconds(30); steady_clock::now() < deadline;) {
      std::lock_guard<std::mutex> guard{d->mtx};
      if (auto j = d->at.find(name); j != d->at.end()) {
        left = j->second;
        break;
      }
    }
    engine_ms.push_back(left == steady_clock::time_point{} ? -1 : ms(left - t0));
    poll_ms.push_back(ms(polled - t0));
  }
  caf::anon_send_exit(rec, caf::exit_reason::user_shutdown);
  std::sort(engine_ms.begin(), engine_ms.end());
  std::sort(poll_ms.begin(), poll_ms.end());
  return {engine_ms[2], poll_ms[2]};
}

} // namespace

// From start to `n` proxies running; the engine is stopped after.
double converge_s(caf::actor_system& sys, const egress::engine_config& ec, size_t n) {
  auto t0 = steady_clock::now();
  auto eng = egress::engine::start(sys, ec);
  if (!eng) {
    std::fprintf(stderr, "start failed: %s\n", egress::render(eng.error()).c_str());
    return -1;
  }
  for (;;) {
    if (auto st = eng->status(seconds(30))) {
      auto running = std::count_if(st->proxies.begin(), st->proxies.end(), [](auto& p) {
        return p.phase == egress::proxy_phase::running;
      });
      if (static_cast<size_t>(running) == n)
        break;
    }
    if (steady_clock::now() - t0 > minutes(10)) {
      std::fprintf(stderr, "%s did not converge in 10 min\n", ec.entry.c_str());
      return -1;
    }
    std::this_thread::sleep_for(milliseconds(50));
  }
  auto out = ms(steady_clock::now() - t0) / 1000.0;
  if (auto err = eng->stop(seconds(60)))
    std::fprintf(stderr, "stop: %s\n", egress::render(err).c_str());
  return out;
}

egress::engine_config fleet_on(const std::string& entry, size_t hosts, long poll_ms) {
  egress::engine_config ec;
  ec.entry = entry;
  ec.poll_interval = milliseconds(poll_ms);
  ec.probe.mode = "off";
  ec.gc = false;
  for (size_t h = 0; h < hosts; ++h) {
    egress::host_config hc;
    hc.name = "hv" + std::to_string(h);
    hc.uri = "test:///default";
    hc.domain_type = "test";
    hc.network = "default";
    hc.address_sources = {"lease"};
    ec.hosts.push_back(hc);
  }
  return ec;
}

// --groups: by hand against as a group, and place() alone.
int groups_case(caf::actor_system& sys, size_t n, size_t hosts, long poll_ms) {
  // No connection held here: the test driver drops its domains when the
  // first engine's last connection closes, so both start from an empty one.
  auto hand = fleet_on("hand", hosts, poll_ms);
  for (size_t i = 0; i < n; ++i) {
    egress::proxy_spec p;
    p.name = "px-" + std::to_string(i);
    p.host = "hv" + std::to_string(i % hosts);
    p.network = "default";
    hand.proxies.push_back(p);
  }
  auto grouped = fleet_on("grouped", hosts, poll_ms);
  egress::group_config g;
  g.name = "g";
  g.count = static_cast<uint32_t>(n);
  for (auto& h : grouped.hosts)
    g.hosts.push_back(h.name);
  g.member.network = "default";
  grouped.groups.push_back(g);
  auto hand_s = converge_s(sys, hand, n);
  auto group_s = converge_s(sys, grouped, n);
  // place() alone: every member new, every host open.
  std::vector<egress::placement_group> pgs{{g.name, g.count, g.hosts, g.member.memory_mib, {}}};
  std::map<std::string, egress::placement_host> room;
  for (auto& h : g.hosts)
    room[h].free_memory_mib = UINT64_MAX;
  std::vector<double> place_ms;
  size_t placed = 0;
  for (int i = 0; i < 5; ++i) {
    auto t0 = steady_clock::now();
    placed = egress::place(pgs, room, {}).host_of.size();
    place_ms.push_back(ms(steady_clock::now() - t0));
  }
  std::sort(place_ms.begin(), place_ms.end());
  std::printf("bench/scale --groups: %zu proxies on %zu test-driver hosts, poll %ld ms\n", n,
              hosts, poll_ms);
  std::printf("  converge, declared by hand: %.2f s; as one group: %.2f s: %.2fx (goal <= 1.1x)\n",
              hand_s, group_s, hand_s > 0 ? group_s / hand_s : 0.0);
  std::printf("  place() alone, %zu members over %zu hosts: %.1f ms (median of 5)\n", placed,
              hosts, place_ms[2]);
  using egress::test::figures;
  // Columns of their own: scale-groups.csv beside scale.csv.
  if (const char* path = std::getenv("EGRESS_BENCH_CSV"); path != nullptr && *path != '\0') {
    std::string p = path;
    if (p.ends_with(".csv"))
      p.resize(p.size() - 4);
    ::setenv("EGRESS_BENCH_CSV", (p + "-groups.csv").c_str(), 1);
  }
  figures csv{"proxies", "hosts", "hand_converge_s", "group_converge_s", "ratio", "place_ms"};
  csv.row({std::to_string(n), std::to_string(hosts), figures::cell(hand_s),
           figures::cell(group_s), figures::cell(hand_s > 0 ? group_s / hand_s : 0.0),
           figures::cell(place_ms[2])});
  return hand_s > 0 && group_s > 0 ? 0 : 1;
}

int main(int argc, char** argv) {
  size_t n = 10000;
  size_t hosts = 1;
  long poll_ms = 2000;
  long rest_s = 20;
  bool groups = false;
  for (int i = 1; i < argc; ++i)
    if (std::string{argv[i]} == "--groups")
      groups = true;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--groups") {
      --i; // no value
      continue;
    }
    if (a == "--proxies")
      n = std::stoul(argv[i + 1]);
    else if (a == "--hosts")
      hosts = std::stoul(argv[i + 1]);
    else if (a == "--poll-ms")
      poll_ms = std::stol(argv[i + 1]);
    else if (a == "--rest-s")
      rest_s = std::stol(argv[i + 1]);
  }
  egress::log::set_level(egress::log::level::error);
  caf::actor_system_config cfg;
  egress::configure(cfg);
  caf::actor_system sys{cfg};
  if (groups)
    return groups_case(sys, n, hosts, poll_ms);

  // Every host is a separate link (own connection, queue and limit) onto
  // the same in-process test:///default state; the test driver's addresses
  // are made up: the rotation follows the phase.
  auto ec = fleet_on("bench", hosts, poll_ms);
  ec.gc = true;
  for (size_t i = 0; i < n; ++i) {
    egress::proxy_spec p;
    p.name = "px-" + std::to_string(i);
    p.host = "hv" + std::to_string(i % hosts);
    p.network = "default";
    ec.proxies.push_back(p);
  }
  // Held open for the whole run: the test driver's state lives while a
  // connection to it does, so the measure below and the engine share it.
  auto held = egress::lv::connection::open("test:///default");
  auto driver_kib = driver_bytes_per_domain(std::min<size_t>(n, 1000)) / 1024.0;
  auto base_heap = heap_in_use();
  auto base_rss = rss_kib("VmRSS:");
  auto t0 = steady_clock::now();
  auto eng = egress::engine::start(sys, ec);
  if (!eng) {
    std::fprintf(stderr, "start failed: %s\n", egress::render(eng.error()).c_str());
    return 1;
  }
  size_t running = 0;
  for (;;) {
    auto st = eng->status(seconds(30));
    if (st) {
      running = std::count_if(st->proxies.begin(), st->proxies.end(), [](auto& p) {
        return p.phase == egress::proxy_phase::running;
      });
      if (running == n)
        break;
    }
    if (steady_clock::now() - t0 > minutes(10)) {
      std::fprintf(stderr, "did not converge in 10 min (%zu/%zu running)\n", running, n);
      break;
    }
    std::this_thread::sleep_for(milliseconds(50));
  }
  auto converge = steady_clock::now() - t0;
  std::vector<double> query;
  for (int i = 0; i < 20; ++i) {
    auto q0 = steady_clock::now();
    auto st = eng->status(seconds(30));
    query.push_back(ms(steady_clock::now() - q0));
    if (!st || st->proxies.size() != n)
      std::fprintf(stderr, "status query %d incomplete\n", i);
  }
  std::sort(query.begin(), query.end());
  auto peak = rss_kib("VmHWM:");
  auto before = eng->status(seconds(30));
  auto cpu0 = cpu_seconds();
  auto r0 = steady_clock::now();
  std::this_thread::sleep_for(seconds(rest_s));
  double rest_s_real = ms(steady_clock::now() - r0) / 1000.0;
  double rest_cores = (cpu_seconds() - cpu0) / rest_s_real;
  double rest_rss_per_proxy = double(rss_kib("VmRSS:") - base_rss) / double(n);
  double rest_heap_kib = (heap_in_use() - base_heap) / 1024.0 / double(n);
  auto after = eng->status(seconds(30));
  // A read-back is 4 libvirt calls (lookup, state, mark, addresses), a bulk
  // read is one.
  double reads = before && after ? double(read_backs(*after) - read_backs(*before)) : -1;
  double bulks = before && after ? double(bulk_reads(*after) - bulk_reads(*before)) : -1;
  double calls_per_s_host = (4 * reads + bulks) / rest_s_real / double(hosts);
  auto destroy = destroy_out_of_band(sys, *eng, milliseconds(poll_ms));
  double rss_per_proxy = double(peak - base_rss) / double(n);
  std::printf("bench/scale: %zu proxies on %zu test-driver host(s), poll %ld ms\n", n, hosts, poll_ms);
  std::printf("  converge (all running with an address): %.0f ms  (%.1f proxies/s)\n",
              ms(converge), n / (ms(converge) / 1000.0));
  std::printf("  peak RSS: %ld KiB total, %.1f KiB per proxy (above a %ld KiB baseline); "
              "at rest %.1f KiB per proxy\n",
              peak, rss_per_proxy, base_rss, rest_rss_per_proxy);
  std::printf("  heap in use at rest: %.1f KiB per proxy = the test driver's domain %.1f KiB"
              " (%zu defined alone first) + the engine's own %.1f KiB\n",
              rest_heap_kib, driver_kib, std::min<size_t>(n, 1000), rest_heap_kib - driver_kib);
  std::printf("  status query for all proxies: median %.2f ms, max %.2f ms (20 runs)\n",
              query[query.size() / 2], query.back());
  std::printf("  CPU at rest over %ld s after convergence: %.3f of a core\n", rest_s, rest_cores);
  std::printf("  at rest: %.0f read-backs, %.0f bulk reads: %.2f libvirt calls/s per host\n",
              reads, bulks, calls_per_s_host);
  std::printf("  a domain destroyed out of band leaves the rotation after: engine %.1f ms, "
              "a %ld ms poll %.1f ms (median of 5): %.0fx sooner\n",
              destroy.engine_ms, poll_ms, destroy.poll_ms,
              destroy.engine_ms > 0 ? destroy.poll_ms / destroy.engine_ms : 0.0);
  using egress::test::figures;
  figures csv{"proxies", "hosts", "poll_ms", "converge_s", "rest_cpu_cores",
              "rss_kib_per_proxy", "status_query_ms", "rest_calls_per_s_host",
              "destroy_engine_ms", "destroy_poll_ms", "rest_rss_kib_per_proxy",
              "rest_heap_kib_per_proxy", "driver_heap_kib_per_domain"};
  csv.row({std::to_string(n), std::to_string(hosts), std::to_string(poll_ms),
           figures::cell(ms(converge) / 1000.0), figures::cell(rest_cores),
           figures::cell(rss_per_proxy), figures::cell(query[query.size() / 2]),
           figures::cell(calls_per_s_host), figures::cell(destroy.engine_ms),
           figures::cell(destroy.poll_ms), figures::cell(rest_rss_per_proxy),
           figures::cell(rest_heap_kib), figures::cell(driver_kib)});
  if (auto err = eng->stop(seconds(30)))
    std::fprintf(stderr, "stop: %s\n", egress::render(err).c_str());
  return running == n ? 0 : 1;
}
