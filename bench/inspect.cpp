// bench/inspect: `ls proxies` through CAF's middleman, as caf-shell does it,
// for a large and a small fleet on libvirt's in-process test driver.
//
//   bench-inspect [--proxies N] [--small S] [--poll-ms P]
//
// Defaults: N = 10000, S = 100, P = 2000. The small fleet runs first, then
// the large one, one engine at a time in this process (the first is stopped
// before the second starts; their proxy names differ, so the second adopts
// nothing of the first). For each fleet, once every proxy is running, the
// engine's inspector is published on 127.0.0.1 (port 0) and this prints:
//   - converge: time until every proxy is running
//   - fleet directory: the fleet's own `ls proxy` (in process, no probes),
//     and the inspector's `ls proxy` in process (directory + one sys/get/"info"
//     liveness probe per proxy), no middleman: where the time goes
//   - (a) in-process client: a second actor_system in this process connects
//     with remote_actor<node_actor> and asks `ls proxy` as the shell's
//     table does, without the details (median and max
//     of 20), plus the answer's serialized size and its slowest probe
//   - (b) caf-shell: `caf-shell 127.0.0.1:PORT -c "ls proxies" --json`, the
//     binary next to this one, output to /dev/null (median and max wall time
//     of 5; each must exit 0)
//   - (c) the same without --json: the table a person reads
// then the ratios large/small and the large fleet's figures against the
// issue's goal (ls proxies round trip <= 200 ms with 10,000 proxies).
//
// The proxies keep polling while they are measured (every P ms, as in
// bench-scale): on a small machine that background work competes with the
// ls. --poll-ms 3600000 measures the inspector on a quiet fleet.
// Exit 1 if a fleet does not converge, an answer is incomplete or caf-shell
// fails; no other assertions: figures only.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/openssl/publish.hpp>
#include <caf/scoped_actor.hpp>

#include "base/log.hpp"
#include "messages/actors.hpp"
#include "messages/error.hpp"
#include "runtime/engine.hpp"

#include "inspect_client.hpp"

using namespace std::chrono;
using egress::test::identity_dir;

namespace {

constexpr double goal_ms = 200.0;
constexpr size_t goal_proxies = 10000;
constexpr int client_runs = 20;
constexpr int shell_runs = 5;

double ms(steady_clock::duration d) {
  return duration_cast<microseconds>(d).count() / 1000.0;
}

double median(std::vector<double> xs) {
  if (xs.empty())
    return 0;
  std::sort(xs.begin(), xs.end());
  return xs[xs.size() / 2];
}

double maximum(const std::vector<double>& xs) {
  return xs.empty() ? 0 : *std::max_element(xs.begin(), xs.end());
}

struct fleet_figures {
  size_t n = 0;
  bool ok = true;
  double converge_ms = 0;
  std::vector<double> directory;  // fleet ls, in process
  std::vector<double> local;      // inspector ls proxy, in process
  std::vector<double> client;     // (a) through the middleman
  std::vector<double> shell;      // (b) caf-shell process, --json
  std::vector<double> table;      // (c) caf-shell process, the table
  size_t answer_entries = 0;
  size_t answer_bytes = 0;
  size_t not_ok = 0;              // probes without an "ok" in the last answer
  double slowest_probe_ms = 0;
};

fleet_figures measure(caf::actor_system& sys, caf::actor_system& client, size_t n,
                      long poll_ms, const std::string& prefix, const std::string& shell) {
  fleet_figures out;
  out.n = n;
  egress::engine_config ec;
  ec.entry = "bench-" + prefix;
  ec.poll_interval = milliseconds(poll_ms);
  egress::host_config hc;
  hc.name = "hv0";
  hc.uri = "test:///default";
  hc.domain_type = "test";
  hc.network = "default";
  hc.address_sources = {"lease"};
  ec.hosts.push_back(hc);
  for (size_t i = 0; i < n; ++i) {
    egress::proxy_spec p;
    p.name = prefix + "-" + std::to_string(i);
    p.host = "hv0";
    p.network = "default";
    ec.proxies.push_back(p);
  }
  auto t0 = steady_clock::now();
  auto eng = egress::engine::start(sys, ec);
  if (!eng) {
    std::fprintf(stderr, "start failed: %s\n", egress::render(eng.error()).c_str());
    out.ok = false;
    return out;
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
      std::fprintf(stderr, "%s: did not converge in 10 min (%zu/%zu running)\n",
                   prefix.c_str(), running, n);
      out.ok = false;
      eng->stop(seconds(30));
      return out;
    }
    std::this_thread::sleep_for(milliseconds(50));
  }
  out.converge_ms = ms(steady_clock::now() - t0);
  std::fprintf(stderr, "%s: %zu proxies running after %.0f ms; measuring\n", prefix.c_str(), n,
               out.converge_ms);

  // In process, no middleman: the fleet's directory alone, then the
  // inspector's whole ls (directory + one liveness probe per proxy), both
  // as the shell's table asks (no details).
  const egress::ls_query table{"proxy", "", false};
  for (int i = 0; i < client_runs; ++i) {
    caf::scoped_actor self{sys};
    auto q0 = steady_clock::now();
    size_t got = 0;
    self->request(eng->fleet(), seconds(5), egress::atom::ls_v, table)
      .receive([&](std::vector<egress::directory_row>& xs) { got = xs.size(); },
               [&](caf::error&) {});
    out.directory.push_back(ms(steady_clock::now() - q0));
    if (got < n) {
      std::fprintf(stderr, "%s: fleet directory %d incomplete (%zu entries)\n", prefix.c_str(),
                   i, got);
      out.ok = false;
    }
  }
  for (int i = 0; i < client_runs; ++i) {
    caf::scoped_actor self{sys};
    auto q0 = steady_clock::now();
    size_t got = 0;
    self->request(eng->inspector(), seconds(5), egress::atom::ls_v, table)
      .receive([&](std::vector<egress::actor_row>& xs) { got = xs.size(); },
               [&](caf::error&) {});
    out.local.push_back(ms(steady_clock::now() - q0));
    if (got != n) {
      std::fprintf(stderr, "%s: in-process ls %d incomplete (%zu entries)\n", prefix.c_str(), i,
                   got);
      out.ok = false;
    }
  }

  // What caf-run publishes: the node actor, which asks the inspector.
  auto port = caf::openssl::publish(eng->node(), 0, "127.0.0.1", true);
  if (!port) {
    std::fprintf(stderr, "publish: %s\n", sys.render(port.error()).c_str());
    out.ok = false;
    eng->stop(seconds(30));
    return out;
  }

  // (a) A second actor system in this process, over the middleman.
  if (auto node = egress::test::dial_node(client, *port); !node) {
    std::fprintf(stderr, "remote_actor: %s\n", client.render(node.error()).c_str());
    out.ok = false;
  } else {
    if (node->node() == client.node())
      std::fprintf(stderr, "warning: the inspector resolved to a local actor\n");
    for (int i = 0; i < client_runs; ++i) {
      auto a = egress::test::ls_through(client, *node, "proxy", false);
      out.client.push_back(a.ms);
      if (a.rows.size() != n) {
        std::fprintf(stderr, "%s: ls %d over the middleman incomplete (%zu entries%s%s)\n",
                     prefix.c_str(), i, a.rows.size(), a.failed ? ": " : "",
                     a.failed ? client.render(a.failed).c_str() : "");
        out.ok = false;
      }
      if (i == client_runs - 1) {
        out.answer_entries = a.rows.size();
        out.not_ok = egress::test::not_ok(a.rows);
        out.slowest_probe_ms = 0;
        for (auto& e : a.rows)
          out.slowest_probe_ms = std::max(out.slowest_probe_ms, egress::test::probe_ms(e.liveness));
        out.answer_bytes = egress::test::serialized_bytes(client, a.rows);
      }
    }
  }

  // (b) The whole caf-shell process.
  auto target = "127.0.0.1:" + std::to_string(*port);
  for (int i = 0; i < shell_runs; ++i) {
    auto q0 = steady_clock::now();
    int rc = egress::test::run_quiet({shell, target, "-c", "ls proxies", "--json", "--identity=" + identity_dir()});
    out.shell.push_back(ms(steady_clock::now() - q0));
    if (rc != 0) {
      std::fprintf(stderr, "%s: %s exited with %d\n", prefix.c_str(), shell.c_str(), rc);
      out.ok = false;
    }
  }
  // (c) The same for a person: the table, no JSON.
  for (int i = 0; i < shell_runs; ++i) {
    auto q0 = steady_clock::now();
    int rc = egress::test::run_quiet({shell, target, "-c", "ls proxies", "--identity=" + identity_dir()});
    out.table.push_back(ms(steady_clock::now() - q0));
    if (rc != 0) {
      std::fprintf(stderr, "%s: %s exited with %d\n", prefix.c_str(), shell.c_str(), rc);
      out.ok = false;
    }
  }

  sys.middleman().unpublish(eng->node(), *port);
  if (auto err = eng->stop(seconds(60)))
    std::fprintf(stderr, "stop: %s\n", egress::render(err).c_str());
  return out;
}

void print_fleet(const char* label, const fleet_figures& f) {
  std::printf("  %s fleet, %zu proxies: converged in %.0f ms\n", label, f.n, f.converge_ms);
  std::printf("    fleet directory, in process:        median %8.2f ms, max %8.2f ms (%zu runs)\n",
              median(f.directory), maximum(f.directory), f.directory.size());
  std::printf("    inspector ls proxy, in process:     median %8.2f ms, max %8.2f ms (%zu runs)\n",
              median(f.local), maximum(f.local), f.local.size());
  std::printf("    (a) ls proxy over the middleman:    median %8.2f ms, max %8.2f ms (%zu runs)\n",
              median(f.client), maximum(f.client), f.client.size());
  std::printf("        answer %zu entries, %.1f KiB serialized; slowest probe %.1f ms;"
              " %zu without \"ok\"\n",
              f.answer_entries, f.answer_bytes / 1024.0, f.slowest_probe_ms, f.not_ok);
  std::printf("    (b) caf-shell -c \"ls proxies\" --json: median %8.2f ms, max %8.2f ms (%zu runs)\n",
              median(f.shell), maximum(f.shell), f.shell.size());
  std::printf("    (c) caf-shell -c \"ls proxies\":        median %8.2f ms, max %8.2f ms (%zu runs)\n",
              median(f.table), maximum(f.table), f.table.size());
}

double ratio(double a, double b) {
  return b > 0 ? a / b : 0;
}

} // namespace

int main(int argc, char** argv) {
  size_t n = goal_proxies;
  size_t small = 100;
  long poll_ms = 2000;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--proxies")
      n = std::stoul(argv[i + 1]);
    else if (a == "--small")
      small = std::stoul(argv[i + 1]);
    else if (a == "--poll-ms")
      poll_ms = std::stol(argv[i + 1]);
  }
  egress::log::set_level(egress::log::level::error);
  auto shell = egress::test::shell_path();
  if (::access(shell.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "no caf-shell at %s (build the caf-shell target)\n", shell.c_str());
    return 1;
  }
  caf::actor_system_config cfg;
  caf::actor_system sys{egress::test::with_tls(cfg)};
  fleet_figures lo;
  fleet_figures hi;
  {
    caf::actor_system_config client_cfg;
    caf::actor_system client{egress::test::with_tls(client_cfg)};
    lo = measure(sys, client, small, poll_ms, "small", shell);
    if (lo.ok)
      hi = measure(sys, client, n, poll_ms, "large", shell);
  }
  std::printf("bench/inspect: ls proxies through the middleman, test driver, poll %ld ms\n",
              poll_ms);
  print_fleet("small", lo);
  if (hi.n > 0)
    print_fleet("large", hi);
  if (!lo.ok || !hi.ok || hi.n == 0)
    return 1;
  std::printf("  %zu vs %zu proxies (x%.0f): directory x%.1f, in-process ls x%.1f,"
              " (a) x%.1f, (b) x%.1f, (c) x%.1f\n",
              n, small, ratio(double(n), double(small)),
              ratio(median(hi.directory), median(lo.directory)),
              ratio(median(hi.local), median(lo.local)),
              ratio(median(hi.client), median(lo.client)),
              ratio(median(hi.shell), median(lo.shell)),
              ratio(median(hi.table), median(lo.table)));
  if (n > small)
    std::printf("  per extra proxy: (a) %.1f us, (b) %.1f us, (c) %.1f us\n",
                1000 * (median(hi.client) - median(lo.client)) / double(n - small),
                1000 * (median(hi.shell) - median(lo.shell)) / double(n - small),
                1000 * (median(hi.table) - median(lo.table)) / double(n - small));
  std::printf("  goal: ls proxies round trip <= %.0f ms with 10,000 proxies%s\n", goal_ms,
              n == goal_proxies ? "" : " (this run has a different N)");
  std::printf("    (a) median %.2f ms = %.2fx the goal; (b) median %.2f ms = %.2fx the goal;"
              " (c) median %.2f ms = %.2fx the goal\n",
              median(hi.client), median(hi.client) / goal_ms, median(hi.shell),
              median(hi.shell) / goal_ms, median(hi.table), median(hi.table) / goal_ms);
  std::error_code ignored;
  std::filesystem::remove_all(identity_dir(), ignored);
  return 0;
}
