// bench/scale: N proxies on libvirt's in-process test driver.
//
//   bench-scale [--proxies N] [--hosts H] [--poll-ms P] [--rest-s S]
//
// Prints: time to converge (every proxy running with an address), peak RSS
// per proxy, the time to answer a status query for all proxies (median and
// max of 20), and the engine's CPU at rest: the process's CPU time over S
// seconds (default 20) after convergence, in cores. No assertions: figures
// only.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <sys/resource.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include "base/log.hpp"
#include "messages/error.hpp"
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

double ms(steady_clock::duration d) {
  return duration_cast<microseconds>(d).count() / 1000.0;
}

double cpu_seconds() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  auto s = [](const timeval& tv) { return double(tv.tv_sec) + double(tv.tv_usec) / 1e6; };
  return s(ru.ru_utime) + s(ru.ru_stime);
}

} // namespace

int main(int argc, char** argv) {
  size_t n = 10000;
  size_t hosts = 1;
  long poll_ms = 2000;
  long rest_s = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
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

  egress::engine_config ec;
  ec.entry = "bench";
  ec.poll_interval = milliseconds(poll_ms);
  for (size_t h = 0; h < hosts; ++h) {
    egress::host_config hc;
    hc.name = "hv" + std::to_string(h);
    // Every host is a separate link (own connection, queue and limit) onto
    // the same in-process test:///default state.
    hc.uri = "test:///default";
    hc.domain_type = "test";
    hc.network = "default";
    hc.address_sources = {"lease"};
    ec.hosts.push_back(hc);
  }
  for (size_t i = 0; i < n; ++i) {
    egress::proxy_spec p;
    p.name = "px-" + std::to_string(i);
    p.host = "hv" + std::to_string(i % hosts);
    p.network = "default";
    ec.proxies.push_back(p);
  }
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
  auto cpu0 = cpu_seconds();
  auto r0 = steady_clock::now();
  std::this_thread::sleep_for(seconds(rest_s));
  double rest_cores = (cpu_seconds() - cpu0) / (ms(steady_clock::now() - r0) / 1000.0);
  double rss_per_proxy = double(peak - base_rss) / double(n);
  std::printf("bench/scale: %zu proxies on %zu test-driver host(s), poll %ld ms\n", n, hosts, poll_ms);
  std::printf("  converge (all running with an address): %.0f ms  (%.1f proxies/s)\n",
              ms(converge), n / (ms(converge) / 1000.0));
  std::printf("  peak RSS: %ld KiB total, %.1f KiB per proxy (above a %ld KiB baseline)\n",
              peak, rss_per_proxy, base_rss);
  std::printf("  status query for all proxies: median %.2f ms, max %.2f ms (20 runs)\n",
              query[query.size() / 2], query.back());
  std::printf("  CPU at rest over %ld s after convergence: %.3f of a core\n", rest_s, rest_cores);
  egress::test::figures csv{"proxies", "hosts", "poll_ms", "converge_s", "rest_cpu_cores",
                     "rss_kib_per_proxy", "status_query_ms"};
  csv.row({std::to_string(n), std::to_string(hosts), std::to_string(poll_ms),
           egress::test::figures::cell(ms(converge) / 1000.0), egress::test::figures::cell(rest_cores),
           egress::test::figures::cell(rss_per_proxy), egress::test::figures::cell(query[query.size() / 2])});
  if (auto err = eng->stop(seconds(30)))
    std::fprintf(stderr, "stop: %s\n", egress::render(err).c_str());
  return running == n ? 0 : 1;
}
