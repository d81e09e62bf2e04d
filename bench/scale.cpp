// bench/scale: N proxies over H hosts of libvirt's in-process test driver:
// from start to converged, at rest, listed, scraped and reloaded.
//
//   bench-scale [--proxies N] [--hosts H] [--poll-ms P] [--rest-s S]
//               [--compare-to M]
//   bench-scale --groups [--proxies N] [--hosts H]
//
// H defaults to one host per 100 proxies (100,000 over 1,000). Host hv0 is
// test:///default, which the bench holds open as well: the test driver's
// memory per domain is measured there before the engine starts, and the
// out-of-band destroys below go through it. Every other host is
// test:///<this tree>/config/testnode.xml: the test driver gives each
// connection to a file URI a state of its own, and a link opens one
// connection to the test driver (plan_calls in
// actors/parts/transport_choice.cpp), so each such host holds and reports
// only its own domains, as a host's libvirtd does. Were they all on the one
// test:///default, every link would get every domain's events and
// bulk-read every domain: H times a fleet's traffic (docs/notes/scale.md).
//
// As caf-run does, the engine's node actor is published over TLS on
// 127.0.0.1 and its metrics endpoint listens from the start (the endpoint
// follows the rotation while the fleet converges). Prints, in this order:
//   - time to converge: from the engine's start until every proxy is
//     running with an address (bench/rotation_log.hpp: the probes are off,
//     so a proxy joins the rotation on that alone);
//   - with --compare-to M: M proxies over H*M/N hosts converged in a
//     process of its own, run first (nothing of it stays in this one's
//     memory), and this run's time against linear growth from it;
//   - the process's threads right after convergence and at rest;
//   - peak RSS per proxy, and the heap in use at rest per proxy split into
//     the test driver's domains, the test driver's hosts (both measured
//     alone before the engine starts: libvirtd's memory on a real host) and
//     the engine's own;
//   - a status query of the whole fleet (median and max of 20);
//   - CPU: the process's CPU time over S seconds (default 30, the
//     bulk-read-interval: each link's safety-net read once) right after
//     convergence, in cores, and again at rest: S seconds from a caller
//     timeout (71 s) after convergence, when the last request timeout of
//     convergence has fired (CAF 0.17 cancels none); with the read-backs
//     and bulk reads meanwhile, and the same less the test driver's side of
//     those reads (one host's read timed alone first: libvirtd's CPU on a
//     real host, as the driver's heap is its memory);
//   - a domain destroyed out of band leaving the rotation: the engine
//     (libvirt's event) against a loop reading its state every P ms
//     (median of 5);
//   - `ls proxies` as caf-shell asks it: the node actor asked from a second
//     actor system through the middleman (median and max of 5; rows,
//     serialized size, probes without "ok"), without the details as the
//     shell's table asks and with them as `ls --json` does, then the
//     caf-shell process itself, the table and --json (median of 3 each);
//   - a metrics scrape: GET /metrics from the engine's metrics endpoint
//     (time and size, median of 5);
//   - a reload that changes 1% of the proxies (memory-mib of every
//     hundredth proxy of each host): the fleet's answer, the time until
//     each changed proxy is back in the rotation on a new VM, and how many
//     of the other 99% were touched (a rotation move, a new VM, or not
//     running after).
// Figures only, no assertions (exit 1 if the fleet does not converge).
//
// With --groups: the same N proxies over H hosts declared by hand, then as
// one group of N members on the H hosts, each from start to every proxy
// running, side by side in one run (the ratio is the cost of the engine
// placing them: the hosts' surveys, then place()), and place() alone over
// that shape (median of 5). These hosts all share test:///default, as when
// docs/notes/placement.md's figures were taken.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <malloc.h>
#include <sys/resource.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/openssl/publish.hpp>

#include "actors/metrics_server.hpp"
#include "actors/parts/placement.hpp"
#include "base/log.hpp"
#include "messages/error.hpp"
#include "providers/libvirt/domains.hpp"
#include "providers/libvirt/watch.hpp"
#include "runtime/engine.hpp"
#include "testbed/http_get.hpp"

#include "figures.hpp"
#include "inspect_client.hpp"
#include "rotation_log.hpp"

using namespace std::chrono;
using egress::test::rotation_log;

namespace {

constexpr auto converge_limit = minutes(15);

struct options {
  size_t n = 10000;
  size_t hosts = 0; // 0: n / 100
  long poll_ms = 2000;
  // The engine's bulk-read-interval: each link's safety-net read falls
  // once in any window this long. The links start together, so their reads
  // come in bursts: 20 s windows saw from 168 to 1,000 of 1,000 hosts'
  // reads, and 0.02 to 0.14 of a core.
  long rest_s = 30;
  size_t compare_to = 0;
  bool groups = false;
  bool converge_only = false; // the --compare-to run, in its own process
};

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&] { return i + 1 < argc ? std::string{argv[++i]} : std::string{"0"}; };
    if (a == "--groups")
      o.groups = true;
    else if (a == "--converge-only")
      o.converge_only = true;
    else if (a == "--proxies")
      o.n = std::stoul(value());
    else if (a == "--hosts")
      o.hosts = std::stoul(value());
    else if (a == "--poll-ms")
      o.poll_ms = std::stol(value());
    else if (a == "--rest-s")
      o.rest_s = std::stol(value());
    else if (a == "--compare-to")
      o.compare_to = std::stoul(value());
  }
  if (o.hosts == 0)
    o.hosts = std::max<size_t>(1, o.n / 100);
  return o;
}

// -- memory, CPU, time ----------------------------------------------------------------

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

double ms(steady_clock::duration d) {
  return duration_cast<microseconds>(d).count() / 1000.0;
}

double cpu_seconds() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  auto s = [](const timeval& tv) { return double(tv.tv_sec) + double(tv.tv_usec) / 1e6; };
  return s(ru.ru_utime) + s(ru.ru_stime);
}

double median(std::vector<double> xs) {
  if (xs.empty())
    return -1;
  std::sort(xs.begin(), xs.end());
  return xs[xs.size() / 2];
}

double maximum(const std::vector<double>& xs) {
  return xs.empty() ? -1 : *std::max_element(xs.begin(), xs.end());
}

// -- the test driver's hosts --------------------------------------------------------

// A state of its own per connection (see the header).
std::string private_driver_uri() {
  return std::string{"test://"} + EGRESS_SOURCE_DIR + "/config/testnode.xml";
}

enum class drivers { shared, one_per_host };

egress::domain_spec driver_domain(const std::string& name) {
  egress::domain_spec d;
  d.name = name;
  d.domain_type = "test";
  d.network = "default";
  d.mark = {name, "2026-01-01T00:00:00Z", "driver", std::string(64, '0'), {}, "hv0", {}, 0};
  return d;
}

// What the in-process test driver holds per running domain of a proxy's
// shape: `k` defined and started on their own, measured, then deleted.
double driver_bytes_per_domain(size_t k) {
  auto c = egress::lv::connection::open("test:///default");
  if (!c)
    return 0;
  auto h0 = heap_in_use();
  for (size_t i = 0; i < k; ++i) {
    auto d = driver_domain("driver-" + std::to_string(i));
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

// What one bulk read of a host costs the in-process test driver: a private
// host with `k` running domains (a host's share of the fleet), read `reads`
// times on this thread; CPU ms per read. On a real host that work is
// libvirtd's, as the domains' memory is.
double driver_ms_per_read(size_t k, int reads) {
  auto c = egress::lv::connection::open(private_driver_uri());
  if (!c)
    return 0;
  for (size_t i = 0; i < k; ++i)
    if (!egress::lv::define_and_start(**c, driver_domain("read-" + std::to_string(i)), {}))
      return 0;
  timespec a{}, b{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
  for (int i = 0; i < reads; ++i)
    (void)egress::lv::read_states(**c);
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
  return ((b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6) / reads;
}

// What the test driver holds per host of its own, empty: `k` private
// drivers opened alone, measured, closed.
double driver_bytes_per_host(size_t k) {
  std::vector<egress::lv::connection_ptr> open;
  auto h0 = heap_in_use();
  for (size_t i = 0; i < k; ++i)
    if (auto c = egress::lv::connection::open(private_driver_uri()))
      open.push_back(std::move(*c));
  return open.empty() ? 0 : (heap_in_use() - h0) / double(open.size());
}

egress::engine_config fleet_on(const std::string& entry, size_t hosts, long poll_ms,
                               drivers d) {
  egress::engine_config ec;
  ec.entry = entry;
  ec.poll_interval = milliseconds(poll_ms);
  ec.probe.mode = "off";
  ec.gc = false;
  for (size_t h = 0; h < hosts; ++h) {
    egress::host_config hc;
    hc.name = "hv" + std::to_string(h);
    hc.uri = h == 0 || d == drivers::shared ? "test:///default" : private_driver_uri();
    hc.domain_type = "test";
    hc.network = "default";
    hc.address_sources = {"lease"};
    ec.hosts.push_back(hc);
  }
  return ec;
}

// px-i on hv(i mod hosts).
void declare_by_hand(egress::engine_config& ec, size_t n, size_t hosts);

// The fleet of a run and of its --compare-to child alike: by hand, a host
// of its own per 100 proxies, the collection on (as the engine's default).
egress::engine_config bench_fleet(const std::string& entry, size_t n, size_t hosts,
                                  long poll_ms) {
  auto ec = fleet_on(entry, hosts, poll_ms, drivers::one_per_host);
  ec.gc = true;
  declare_by_hand(ec, n, hosts);
  return ec;
}

void declare_by_hand(egress::engine_config& ec, size_t n, size_t hosts) {
  for (size_t i = 0; i < n; ++i) {
    egress::proxy_spec p;
    p.name = "px-" + std::to_string(i);
    p.host = "hv" + std::to_string(i % hosts);
    p.network = "default";
    ec.proxies.push_back(p);
  }
}

// -- converging -------------------------------------------------------------------

// Until the rotation holds `n` (see bench/rotation_log.hpp): the time from
// `t0` to the event that made it so; negative past converge_limit.
double seconds_to_converge(rotation_log& log, steady_clock::time_point t0, size_t n) {
  bool all = log.wait_until([n](const rotation_log& l) { return l.size() >= n; },
                            t0 + converge_limit);
  if (!all) {
    std::fprintf(stderr, "did not converge in %ld min (%u/%zu in the rotation)\n",
                 long(duration_cast<minutes>(converge_limit).count()),
                 log.read([](const rotation_log& l) { return l.size(); }), n);
    return -1;
  }
  return ms(log.read([](const rotation_log& l) { return l.sized_at(); }) - t0) / 1000.0;
}

// From start to `n` proxies running; the engine is stopped after.
double converge_s(caf::actor_system& sys, const egress::engine_config& ec, size_t n) {
  auto t0 = steady_clock::now();
  auto eng = egress::engine::start(sys, ec);
  if (!eng) {
    std::fprintf(stderr, "start failed: %s\n", egress::render(eng.error()).c_str());
    return -1;
  }
  auto [log, follower] = egress::test::follow(sys, *eng);
  auto out = seconds_to_converge(*log, t0, n);
  caf::anon_send_exit(follower, caf::exit_reason::user_shutdown);
  if (auto err = eng->stop(seconds(120)))
    std::fprintf(stderr, "stop: %s\n", egress::render(err).c_str());
  return out;
}

// The time to converge, and the process's CPU meanwhile: on two cores
// shared with other work the CPU is the steadier figure of the two.
struct converged {
  double s = -1;
  double cpu_s = -1;
};

// What caf-run starts with the engine: the node actor published over TLS
// (caf-shell's door) and the metrics endpoint, a follower of the rotation
// from the start.
struct listeners {
  uint16_t node_port = 0;
  caf::actor metrics;
  uint16_t metrics_port = 0;
};

caf::expected<listeners> listen(caf::actor_system& sys, const egress::engine& eng) {
  listeners out;
  auto port = caf::openssl::publish(eng.node(), 0, "127.0.0.1", true);
  if (!port)
    return std::move(port.error());
  out.node_port = *port;
  auto server = egress::start_metrics_server(sys, eng.fleet(), "127.0.0.1", 0);
  if (!server)
    return std::move(server.error());
  std::tie(out.metrics, out.metrics_port) = *server;
  return out;
}

void close(caf::actor_system& sys, const egress::engine& eng, const listeners& l) {
  sys.middleman().unpublish(eng.node(), l.node_port);
  caf::anon_send_exit(l.metrics, caf::exit_reason::user_shutdown);
}

// An engine as caf-run runs it, from its start until it converged; the
// caller stops it.
struct started {
  egress::engine eng;
  std::shared_ptr<rotation_log> log;
  egress::rotation_events_actor follower;
  listeners doors;
  steady_clock::time_point t0;
  converged took;
};

std::optional<started> start_and_converge(caf::actor_system& sys,
                                          const egress::engine_config& ec, size_t n) {
  auto cpu0 = cpu_seconds();
  auto t0 = steady_clock::now();
  auto eng = egress::engine::start(sys, ec);
  if (!eng) {
    std::fprintf(stderr, "start failed: %s\n", egress::render(eng.error()).c_str());
    return std::nullopt;
  }
  auto [log, follower] = egress::test::follow(sys, *eng);
  auto doors = listen(sys, *eng);
  if (!doors) {
    std::fprintf(stderr, "listen: %s\n", sys.render(doors.error()).c_str());
    eng->stop(seconds(120));
    return std::nullopt;
  }
  converged took;
  took.s = seconds_to_converge(*log, t0, n);
  took.cpu_s = cpu_seconds() - cpu0;
  return started{std::move(*eng), log, follower, *doors, t0, took};
}

void stop(caf::actor_system& sys, started& run) {
  caf::anon_send_exit(run.follower, caf::exit_reason::user_shutdown);
  close(sys, run.eng, run.doors);
  if (auto err = run.eng.stop(seconds(120)))
    std::fprintf(stderr, "stop: %s\n", egress::render(err).c_str());
}

std::string self_path() {
  std::string self(4096, '\0');
  auto len = ::readlink("/proc/self/exe", self.data(), self.size());
  self.resize(len > 0 ? static_cast<size_t>(len) : 0);
  return self;
}

// --compare-to: the smaller fleet converges in a child process of this
// binary, so that neither run's memory or threads are in the other's.
converged converge_elsewhere(size_t n, size_t hosts, long poll_ms) {
  auto cmd = self_path() + " --converge-only --proxies " + std::to_string(n) + " --hosts "
             + std::to_string(hosts) + " --poll-ms " + std::to_string(poll_ms);
  std::FILE* child = ::popen(cmd.c_str(), "r");
  if (child == nullptr)
    return {};
  converged out;
  char line[256];
  while (std::fgets(line, sizeof line, child) != nullptr)
    if (std::strncmp(line, "converge_s ", 11) == 0)
      out.s = std::atof(line + 11);
    else if (std::strncmp(line, "converge_cpu_s ", 15) == 0)
      out.cpu_s = std::atof(line + 15);
  return ::pclose(child) == 0 ? out : converged{};
}

// -- at rest ----------------------------------------------------------------------

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

struct rest_figures {
  double cores = 0;
  double calls_per_s_host = 0;
  double reads = 0;
  double bulks = 0;
};

// S seconds of nothing asked of the engine; a read-back is 4 libvirt
// calls (lookup, state, mark, addresses), a bulk read is one.
rest_figures rest(egress::engine& eng, long rest_s, size_t hosts, const char* what) {
  auto before = eng.status(seconds(60));
  std::fprintf(stderr, "%s for %ld s (pid %d)\n", what, rest_s, int(::getpid()));
  auto cpu0 = cpu_seconds();
  auto r0 = steady_clock::now();
  std::this_thread::sleep_for(seconds(rest_s));
  double real = ms(steady_clock::now() - r0) / 1000.0;
  rest_figures out;
  out.cores = (cpu_seconds() - cpu0) / real;
  auto after = eng.status(seconds(60));
  out.reads = before && after ? double(read_backs(*after) - read_backs(*before)) : -1;
  out.bulks = before && after ? double(bulk_reads(*after) - bulk_reads(*before)) : -1;
  out.calls_per_s_host = (4 * out.reads + out.bulks) / real / double(hosts);
  return out;
}

// -- a domain destroyed out of band -------------------------------------------------

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

// When `name` first left the rotation after `t0` (time_point{} if it did
// not within 30 s).
steady_clock::time_point left_after(rotation_log& log, const std::string& name,
                                    steady_clock::time_point t0) {
  steady_clock::time_point left{};
  log.wait_until(
    [&](const rotation_log& l) {
      if (auto* ms = l.moves_of(name))
        for (auto& m : *ms)
          if (!m.joined && m.at >= t0) {
            left = m.at;
            return true;
          }
      return false;
    },
    t0 + seconds(30));
  return left;
}

// Five domains of hv0 (the host the bench shares: px-0, px-H, ...)
// destroyed out of band, one at a time, each at a random point of the
// poller's period; the medians of both. The poller watches a domain of its
// own destroyed at the same instant (the engine starts its own again within
// a millisecond or so: a poller would never see it stopped).
destroy_figures destroy_out_of_band(rotation_log& log, milliseconds poll_every, size_t hosts) {
  log.record_moves(true);
  auto witness = egress::lv::connection::open("test:///default");
  std::vector<double> engine_ms, poll_ms;
  std::minstd_rand rng{42};
  for (size_t i = 0; i < 5; ++i) {
    auto name = "px-" + std::to_string(i * hosts);
    auto polled_domain = driver_domain("polled-" + std::to_string(i));
    polled_domain.vcpus = 1;
    polled_domain.memory_mib = 64;
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
    auto left = left_after(log, name, t0);
    engine_ms.push_back(left == steady_clock::time_point{} ? -1 : ms(left - t0));
    poll_ms.push_back(ms(polled - t0));
  }
  log.record_moves(false);
  return {median(engine_ms), median(poll_ms)};
}

// -- ls proxies, as caf-shell ---------------------------------------------------------

struct ls_figures {
  std::vector<double> directory_ms; // the fleet's directory, in process
  std::vector<double> inspector_ms; // the inspector's ls proxy, in process
  std::vector<double> client_ms; // through the middleman, answered in full
  std::vector<double> client_cpu_ms; // this process's CPU (engine and client) per ls
  std::vector<double> details_ms; // the same with the details (ls --json)
  size_t details_bytes = 0;
  size_t failures = 0;           // answers that failed or came short
  std::string failure;           // the last failure's text
  size_t rows = 0;
  size_t bytes = 0;
  size_t not_ok = 0;             // rows whose liveness probe did not answer "ok"
  std::vector<double> shell_ms;  // the caf-shell process, --json
  std::vector<double> shell_table_ms; // the caf-shell process, its table
  int shell_rc = 0;              // the last nonzero exit of caf-shell
};

void list_from_client(ls_figures& out, caf::actor_system& client, uint16_t port, size_t n) {
  auto node = egress::test::dial_node(client, port);
  if (!node) {
    out.failure = client.render(node.error());
    ++out.failures;
    return;
  }
  // Alternately without and with the details, so that both see the same
  // machine.
  for (int i = 0; i < 10; ++i) {
    bool details = i % 2 == 1;
    auto cpu0 = cpu_seconds();
    auto a = egress::test::ls_through(client, *node, "proxy", details);
    auto cpu_ms = 1000 * (cpu_seconds() - cpu0);
    if (a.failed || a.rows.size() != n) {
      ++out.failures;
      out.failure = a.failed ? client.render(a.failed)
                             : std::to_string(a.rows.size()) + " of " + std::to_string(n) + " rows";
      continue;
    }
    if (details) {
      out.details_ms.push_back(a.ms);
      out.details_bytes = egress::test::serialized_bytes(client, a.rows);
      continue;
    }
    out.client_ms.push_back(a.ms);
    out.client_cpu_ms.push_back(cpu_ms);
    out.rows = a.rows.size();
    out.not_ok = egress::test::not_ok(a.rows);
    out.bytes = egress::test::serialized_bytes(client, a.rows);
  }
}

void list_from_shell(ls_figures& out, uint16_t port) {
  auto shell = egress::test::shell_path();
  if (::access(shell.c_str(), X_OK) != 0) {
    std::fprintf(stderr, "no caf-shell at %s: its runs are left out\n", shell.c_str());
    return;
  }
  for (int i = 0; i < 6; ++i) {
    bool json = i % 2 == 1;
    std::vector<std::string> argv{shell, "127.0.0.1:" + std::to_string(port), "-c",
                                  "ls proxies", "--identity=" + egress::test::identity_dir()};
    if (json)
      argv.push_back("--json");
    auto t0 = steady_clock::now();
    int rc = egress::test::run_quiet(argv);
    if (rc != 0)
      out.shell_rc = rc;
    else
      (json ? out.shell_ms : out.shell_table_ms).push_back(ms(steady_clock::now() - t0));
  }
}

// Where an ls goes, in process: the fleet's directory alone (every proxy
// with its state, no probes), then the inspector's whole listing (the
// directory and a liveness probe per proxy), no middleman; both as the
// shell's table asks, without the details.
template <class Result, class Request>
std::vector<double> five_in_process(caf::actor_system& sys, Request request) {
  std::vector<double> out;
  for (int i = 0; i < 5; ++i) {
    caf::scoped_actor self{sys};
    auto t0 = steady_clock::now();
    bool ok = false;
    request(self).receive([&](Result&) { ok = true; }, [&](caf::error&) {});
    if (ok)
      out.push_back(ms(steady_clock::now() - t0));
  }
  return out;
}

ls_figures list_proxies(caf::actor_system& sys, caf::actor_system& client,
                        const egress::engine& eng, uint16_t port, size_t n) {
  ls_figures out;
  using directory = std::vector<egress::directory_row>;
  using rows = std::vector<egress::actor_row>;
  const egress::ls_query table{"proxy", "", false};
  out.directory_ms = five_in_process<directory>(sys, [&](caf::scoped_actor& self) {
    return self->request(eng.fleet(), seconds(30), egress::atom::ls_v, table);
  });
  out.inspector_ms = five_in_process<rows>(sys, [&](caf::scoped_actor& self) {
    return self->request(eng.inspector(), seconds(30), egress::atom::ls_v, table);
  });
  list_from_client(out, client, port, n);
  list_from_shell(out, port);
  return out;
}

// -- a metrics scrape ---------------------------------------------------------------

struct scrape_figures {
  std::vector<double> ms;
  size_t bytes = 0;
  size_t samples = 0; // lines that are not comments
  int status = 0;     // the last HTTP status
};

// Lines of the exposition that are not comments (# HELP, # TYPE).
size_t samples_in(const std::string& text) {
  size_t n = 0;
  for (size_t at = 0; at < text.size();) {
    auto end = text.find('\n', at);
    n += text[at] != '#' ? 1 : 0;
    at = end == std::string::npos ? text.size() : end + 1;
  }
  return n;
}

scrape_figures scrape(uint16_t port) {
  scrape_figures out;
  for (int i = 0; i < 5; ++i) {
    auto t0 = steady_clock::now();
    auto [status, body] = egress::test::http_get(port, "/metrics", seconds(30));
    out.status = status;
    if (status != 200)
      continue;
    out.ms.push_back(ms(steady_clock::now() - t0));
    out.bytes = body.size();
    out.samples = samples_in(body);
  }
  return out;
}

// -- a reload that changes 1% -------------------------------------------------------

struct reload_figures {
  size_t changed = 0;
  double apply_ms = -1;     // engine::reload's answer
  double converge_s = -1;   // the last changed proxy back in the rotation
  size_t renewed = 0;       // changed ones running on a new VM after
  size_t others_touched = 0; // unchanged ones moved, on a new VM, or not running
  std::string error;
};

// Every hundredth proxy of each host (px-i with (i / hosts) % 100 == 0):
// one in a hundred on every host, not a hundred on a few.
std::set<std::string> change_one_percent(egress::engine_config& ec, size_t hosts) {
  std::set<std::string> changed;
  for (size_t i = 0; i < ec.proxies.size(); ++i)
    if ((i / hosts) % 100 == 0) {
      ec.proxies[i].memory_mib += 64;
      changed.insert(ec.proxies[i].name);
    }
  return changed;
}

// Each changed proxy left the rotation and is back in it.
bool all_back(const rotation_log& l, const std::set<std::string>& changed,
              steady_clock::time_point& last) {
  for (auto& name : changed) {
    auto* ms = l.moves_of(name);
    if (ms == nullptr || ms->size() < 2 || !ms->back().joined)
      return false;
    last = std::max(last, ms->back().at);
  }
  return true;
}

void count_touched(reload_figures& out, const egress::fleet_status& before,
                   const egress::fleet_status& after, const std::set<std::string>& changed,
                   const rotation_log& l) {
  std::map<std::string, const egress::proxy_status*> was;
  for (auto& p : before.proxies)
    was.emplace(p.name, &p);
  for (auto& p : after.proxies) {
    auto w = was.find(p.name);
    bool same_vm = w != was.end() && w->second->uid == p.uid;
    bool running = p.phase == egress::proxy_phase::running;
    if (changed.contains(p.name))
      out.renewed += !same_vm && running ? 1 : 0;
    else
      out.others_touched += !same_vm || !running || l.moves_of(p.name) != nullptr ? 1 : 0;
  }
}

reload_figures reload_one_percent(egress::engine& eng, egress::engine_config ec, size_t hosts,
                                  rotation_log& log) {
  reload_figures out;
  auto before = eng.status(seconds(60));
  auto changed = change_one_percent(ec, hosts);
  out.changed = changed.size();
  log.record_moves(true);
  auto t0 = steady_clock::now();
  auto summary = eng.reload(std::move(ec), seconds(120));
  out.apply_ms = ms(steady_clock::now() - t0);
  if (!summary || !before) {
    out.error = egress::render(summary ? before.error() : summary.error());
    return out;
  }
  auto last = t0;
  if (log.wait_until([&](const rotation_log& l) { return all_back(l, changed, last); },
                     t0 + converge_limit))
    out.converge_s = ms(last - t0) / 1000.0;
  auto after = eng.status(seconds(60));
  if (after)
    log.read([&](const rotation_log& l) {
      count_touched(out, *before, *after, changed, l);
      return 0;
    });
  log.record_moves(false);
  return out;
}

// -- --groups -----------------------------------------------------------------------

// By hand against as a group, and place() alone.
int groups_case(caf::actor_system& sys, size_t n, size_t hosts, long poll_ms) {
  // No connection held here: the test driver drops its domains when the
  // first engine's last connection closes, so both start from an empty one.
  auto hand = fleet_on("hand", hosts, poll_ms, drivers::shared);
  declare_by_hand(hand, n, hosts);
  auto grouped = fleet_on("grouped", hosts, poll_ms, drivers::shared);
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
  std::printf("bench/scale --groups: %zu proxies on %zu test-driver hosts, poll %ld ms\n", n,
              hosts, poll_ms);
  std::printf("  converge, declared by hand: %.2f s; as one group: %.2f s: %.2fx (goal <= 1.1x)\n",
              hand_s, group_s, hand_s > 0 ? group_s / hand_s : 0.0);
  std::printf("  place() alone, %zu members over %zu hosts: %.1f ms (median of 5)\n", placed,
              hosts, median(place_ms));
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
           figures::cell(median(place_ms))});
  return hand_s > 0 && group_s > 0 ? 0 : 1;
}

// -- the whole run ------------------------------------------------------------------

struct memory_figures {
  double driver_domain_kib = 0; // per domain
  double driver_host_kib = 0;   // per private host
  double driver_read_ms = 0;    // CPU per bulk read of one host
  long base_rss = 0;
  double base_heap = 0;
  long peak = 0;
  double rss_per_proxy = 0;      // peak
  double rest_rss_per_proxy = 0;
  double rest_heap_kib = 0;      // per proxy
  long threads_converged = 0;    // the process's threads right after convergence
  long threads_at_rest = 0;      // and at rest
  // The test driver's share per proxy: its domain, its hosts.
  double driver_kib(size_t n, size_t hosts) const {
    return driver_domain_kib + driver_host_kib * double(hosts - 1) / double(n);
  }
};

struct run_figures {
  converged took;
  converged compare; // --compare-to
  memory_figures mem;
  std::vector<double> query_ms;
  rest_figures just_after; // the S s after the status queries
  rest_figures at_rest;    // S s from a caller timeout after convergence
  destroy_figures destroyed{};
  ls_figures ls;
  scrape_figures scraped;
  reload_figures reloaded;
};

// The --compare-to run's hosts: the same proxies per host.
size_t compared_hosts(const options& o) {
  return std::max<size_t>(1, o.hosts * o.compare_to / o.n);
}

double ratio(double a, double b) {
  return a > 0 && b > 0 ? a / b : 0.0;
}

void print_converge(const options& o, const run_figures& f) {
  std::printf("bench/scale: %zu proxies on %zu test-driver hosts (hv0 shared with the bench,"
              " %zu of their own), poll %ld ms\n",
              o.n, o.hosts, o.hosts - 1, o.poll_ms);
  std::printf("  converge (all running with an address): %.2f s (%.1f proxies/s),"
              " %.1f s of CPU (%.2f ms per proxy)\n",
              f.took.s, double(o.n) / f.took.s, f.took.cpu_s, 1000 * f.took.cpu_s / double(o.n));
  if (o.compare_to == 0)
    return;
  auto grow = double(o.n) / double(o.compare_to);
  std::printf("  scaling: %zu proxies on %zu hosts converged in %.2f s, %.1f s of CPU (its own"
              " process, first): %.1fx the proxies took %.2fx the time = %.2fx linear"
              " (goal <= 2x), %.2fx the CPU = %.2fx linear\n",
              o.compare_to, compared_hosts(o), f.compare.s, f.compare.cpu_s, grow,
              ratio(f.took.s, f.compare.s), ratio(f.took.s, f.compare.s) / grow,
              ratio(f.took.cpu_s, f.compare.cpu_s), ratio(f.took.cpu_s, f.compare.cpu_s) / grow);
}

void print_memory(const options& o, const memory_figures& m) {
  auto driver = m.driver_kib(o.n, o.hosts);
  std::printf("  peak RSS: %ld KiB total, %.1f KiB per proxy (above a %ld KiB baseline); "
              "at rest %.1f KiB per proxy; less the test driver's heap (%.1f KiB): "
              "%.1f KiB per proxy (goal <= 20)\n",
              m.peak, m.rss_per_proxy, m.base_rss, m.rest_rss_per_proxy, driver,
              m.rss_per_proxy - driver);
  std::printf("  heap in use at rest: %.1f KiB per proxy = the test driver's domain %.1f KiB"
              " + its hosts %.1f KiB (%.0f KiB per host of its own, measured alone first)"
              " + the engine's own %.1f KiB\n",
              m.rest_heap_kib, m.driver_domain_kib, driver - m.driver_domain_kib,
              m.driver_host_kib, m.rest_heap_kib - driver);
  std::printf("  threads: %ld right after convergence, %ld at rest (%.1f per host)\n",
              m.threads_converged, m.threads_at_rest,
              double(m.threads_at_rest) / double(std::max<size_t>(1, o.hosts)));
}

void print_ls(const ls_figures& l) {
  std::printf("  ls proxies through the node actor over TLS (as caf-shell): median %.1f ms,"
              " max %.1f ms (%zu of 5 answered in full; goal <= 1000 ms), %.1f ms of CPU\n",
              median(l.client_ms), maximum(l.client_ms), l.client_ms.size(),
              median(l.client_cpu_ms));
  std::printf("    in process: the fleet's directory %.1f ms, the inspector's ls proxy"
              " (directory and probes) %.1f ms (medians of 5)\n",
              median(l.directory_ms), median(l.inspector_ms));
  std::printf("    answer: %zu rows, %.1f KiB serialized, %zu without an \"ok\" probe%s%s\n",
              l.rows, double(l.bytes) / 1024.0, l.not_ok, l.failures ? "; last failure: " : "",
              l.failure.c_str());
  std::printf("    with the details (as ls --json asks): median %.1f ms, %.1f KiB serialized;"
              " without/with %.2f\n",
              median(l.details_ms), double(l.details_bytes) / 1024.0,
              ratio(median(l.client_ms), median(l.details_ms)));
  std::printf("    caf-shell -c \"ls proxies\", the whole process: median %.1f ms (table),"
              " %.1f ms (--json) (%zu and %zu of 3 exited 0%s)\n",
              median(l.shell_table_ms), median(l.shell_ms), l.shell_table_ms.size(),
              l.shell_ms.size(),
              l.shell_rc ? (", last exit " + std::to_string(l.shell_rc)).c_str() : "");
}

void print_rest_of(const options& o, const run_figures& f) {
  std::printf("  status query for all proxies: median %.2f ms, max %.2f ms (20 runs)\n",
              median(f.query_ms), maximum(f.query_ms));
  auto late = duration_cast<seconds>(egress::caller_timeout(egress::host_config{})).count() + 1;
  std::printf("  CPU over the %ld s after the status queries: %.3f of a core (the request"
              " timeouts of convergence firing)\n",
              o.rest_s, f.just_after.cores);
  std::printf("  CPU at rest over %ld s from %ld s after convergence: %.3f of a core"
              " (goal <= 0.05)\n",
              o.rest_s, long(late), f.at_rest.cores);
  std::printf("  at rest: %.0f read-backs, %.0f bulk reads: %.2f libvirt calls/s per host\n",
              f.at_rest.reads, f.at_rest.bulks, f.at_rest.calls_per_s_host);
  double driver_cores = f.at_rest.bulks * f.mem.driver_read_ms / 1000.0 / double(o.rest_s);
  std::printf("  less the test driver's side of those reads (%.3f ms of CPU each, %zu domains,"
              " measured alone first; libvirtd's on a real host): %.3f of a core\n",
              f.mem.driver_read_ms, o.n / o.hosts, std::max(0.0, f.at_rest.cores - driver_cores));
  std::printf("  a domain destroyed out of band leaves the rotation after: engine %.1f ms, "
              "a %ld ms poll %.1f ms (median of 5): %.0fx sooner\n",
              f.destroyed.engine_ms, o.poll_ms, f.destroyed.poll_ms,
              f.destroyed.engine_ms > 0 ? f.destroyed.poll_ms / f.destroyed.engine_ms : 0.0);
  print_ls(f.ls);
  std::printf("  metrics scrape (GET /metrics): median %.1f ms, max %.1f ms (%zu of 5 with 200),"
              " %.1f KiB, %zu samples (goal <= 1000 ms)\n",
              median(f.scraped.ms), maximum(f.scraped.ms), f.scraped.ms.size(),
              double(f.scraped.bytes) / 1024.0, f.scraped.samples);
  auto& r = f.reloaded;
  std::printf("  reload changing %zu proxies (1%%, memory-mib): answered in %.1f ms; all back in"
              " the rotation after %.2f s, %zu of them on a new VM; of the other %zu: %zu"
              " touched%s%s\n",
              r.changed, r.apply_ms, r.converge_s, r.renewed, o.n - r.changed, r.others_touched,
              r.error.empty() ? "" : "; ", r.error.c_str());
}

void write_csv(const options& o, const run_figures& f) {
  using egress::test::figures;
  auto& m = f.mem;
  figures csv{"proxies", "hosts", "poll_ms", "converge_s", "rest_cpu_cores",
              "rss_kib_per_proxy", "status_query_ms", "rest_calls_per_s_host",
              "destroy_engine_ms", "destroy_poll_ms", "rest_rss_kib_per_proxy",
              "rest_heap_kib_per_proxy", "driver_heap_kib_per_domain",
              "driver_heap_kib_per_host", "rss_kib_per_proxy_less_driver", "ls_ms", "ls_kib",
              "ls_not_ok", "shell_ls_ms", "scrape_ms", "scrape_kib", "reload_apply_ms",
              "reload_converge_s", "reload_others_touched", "compare_proxies",
              "compare_converge_s", "times_linear", "just_after_cpu_cores", "converge_cpu_s",
              "compare_converge_cpu_s", "ls_details_ms", "ls_details_kib",
              "shell_table_ms"};
  auto grow = o.compare_to ? double(o.n) / double(o.compare_to) : 0.0;
  auto linear = grow > 0 ? ratio(f.took.s, f.compare.s) / grow : 0.0;
  csv.row({std::to_string(o.n), std::to_string(o.hosts), std::to_string(o.poll_ms),
           figures::cell(f.took.s), figures::cell(f.at_rest.cores),
           figures::cell(m.rss_per_proxy), figures::cell(median(f.query_ms)),
           figures::cell(f.at_rest.calls_per_s_host), figures::cell(f.destroyed.engine_ms),
           figures::cell(f.destroyed.poll_ms), figures::cell(m.rest_rss_per_proxy),
           figures::cell(m.rest_heap_kib), figures::cell(m.driver_domain_kib),
           figures::cell(m.driver_host_kib),
           figures::cell(m.rss_per_proxy - m.driver_kib(o.n, o.hosts)),
           figures::cell(median(f.ls.client_ms)), figures::cell(double(f.ls.bytes) / 1024.0),
           std::to_string(f.ls.not_ok), figures::cell(median(f.ls.shell_ms)),
           figures::cell(median(f.scraped.ms)), figures::cell(double(f.scraped.bytes) / 1024.0),
           figures::cell(f.reloaded.apply_ms), figures::cell(f.reloaded.converge_s),
           std::to_string(f.reloaded.others_touched), std::to_string(o.compare_to),
           figures::cell(f.compare.s), figures::cell(linear),
           figures::cell(f.just_after.cores), figures::cell(f.took.cpu_s),
           figures::cell(f.compare.cpu_s), figures::cell(median(f.ls.details_ms)),
           figures::cell(double(f.ls.details_bytes) / 1024.0),
           figures::cell(median(f.ls.shell_table_ms))});
}

// The test driver's share, measured alone, and the baselines, before the
// engine starts. `held` keeps test:///default's state alive for the run.
memory_figures measure_before(const options& o) {
  memory_figures m;
  m.driver_domain_kib = driver_bytes_per_domain(std::min<size_t>(o.n, 1000)) / 1024.0;
  m.driver_host_kib = driver_bytes_per_host(std::min<size_t>(o.hosts, 100)) / 1024.0;
  m.driver_read_ms = driver_ms_per_read(o.n / o.hosts, 200);
  m.base_heap = heap_in_use();
  m.base_rss = rss_kib("VmRSS:");
  return m;
}

int run(const options& o, caf::actor_system& sys, caf::actor_system& client) {
  run_figures f;
  if (o.compare_to > 0)
    f.compare = converge_elsewhere(o.compare_to, compared_hosts(o), o.poll_ms);
  auto ec = bench_fleet("bench", o.n, o.hosts, o.poll_ms);
  auto held = egress::lv::connection::open("test:///default");
  f.mem = measure_before(o);
  auto run = start_and_converge(sys, ec, o.n);
  if (!run)
    return 1;
  auto& eng = run->eng;
  f.took = run->took;
  std::fprintf(stderr, "converged after %.2f s; measuring\n", f.took.s);
  for (int i = 0; i < 20; ++i) {
    auto q0 = steady_clock::now();
    auto st = eng.status(seconds(60));
    f.query_ms.push_back(ms(steady_clock::now() - q0));
    if (!st || st->proxies.size() != o.n)
      std::fprintf(stderr, "status query %d incomplete\n", i);
  }
  f.mem.peak = rss_kib("VmHWM:");
  f.mem.threads_converged = rss_kib("Threads:");
  f.just_after = rest(eng, o.rest_s, o.hosts, "just after");
  // CAF 0.17 cancels no request's timeout: each fires once, up to a caller
  // timeout after its request, and wakes its requester for nothing. At rest
  // is when the last of convergence's have fired.
  std::this_thread::sleep_until(run->t0 + milliseconds(long(f.took.s * 1000))
                                + egress::caller_timeout(ec.hosts.front()) + seconds(1));
  f.at_rest = rest(eng, o.rest_s, o.hosts, "at rest");
  f.mem.threads_at_rest = rss_kib("Threads:");
  f.mem.rest_rss_per_proxy = double(rss_kib("VmRSS:") - f.mem.base_rss) / double(o.n);
  f.mem.rest_heap_kib = (heap_in_use() - f.mem.base_heap) / 1024.0 / double(o.n);
  f.mem.rss_per_proxy = double(f.mem.peak - f.mem.base_rss) / double(o.n);
  f.destroyed = destroy_out_of_band(*run->log, milliseconds(o.poll_ms), o.hosts);
  std::fprintf(stderr, "ls proxies\n");
  f.ls = list_proxies(sys, client, eng, run->doors.node_port, o.n);
  std::fprintf(stderr, "scrape\n");
  f.scraped = scrape(run->doors.metrics_port);
  std::fprintf(stderr, "reload\n");
  f.reloaded = reload_one_percent(eng, ec, o.hosts, *run->log);
  print_converge(o, f);
  print_memory(o, f.mem);
  print_rest_of(o, f);
  write_csv(o, f);
  stop(sys, *run);
  return f.took.s > 0 ? 0 : 1;
}

// --converge-only: the --compare-to run, in a process of its own, set up
// as the main run is.
int converge_only(const options& o) {
  caf::actor_system_config cfg;
  caf::actor_system sys{egress::test::with_tls(cfg)};
  auto ec = bench_fleet("compare", o.n, o.hosts, o.poll_ms);
  auto run = start_and_converge(sys, ec, o.n);
  if (!run)
    return 1;
  std::printf("converge_s %.6f\nconverge_cpu_s %.6f\n", run->took.s, run->took.cpu_s);
  stop(sys, *run);
  return run->took.s > 0 ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
  auto o = parse(argc, argv);
  egress::log::set_level(egress::log::level::error);
  int rc = 0;
  if (o.groups) {
    caf::actor_system_config cfg;
    egress::configure(cfg);
    caf::actor_system sys{cfg};
    return groups_case(sys, o.n, o.hosts, o.poll_ms);
  }
  if (o.converge_only) {
    rc = converge_only(o);
  } else {
    // Both systems before the baseline: their threads are not the fleet's.
    caf::actor_system_config cfg;
    caf::actor_system sys{egress::test::with_tls(cfg)};
    caf::actor_system_config client_cfg;
    caf::actor_system client{egress::test::with_tls(client_cfg)};
    rc = run(o, sys, client);
  }
  std::error_code ignored;
  std::filesystem::remove_all(egress::test::identity_dir(), ignored);
  return rc;
}
