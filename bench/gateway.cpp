// bench/gateway: the gateway (HAProxy driven by the engine) against what a
// user would otherwise run, side by side in one run.
//
//   bench-gateway [--seconds S] [--clients N] [--rounds R]   (root; exit 77 otherwise)
//
// Test bed (tests/integration/gateway.cpp's): a private libvirtd serving its
// test driver, reached through the engine's SSH link to a real sshd in a
// network namespace; in that namespace a real tinyproxy on each address
// libvirt reports for the three proxies (testbed/vm_network.hpp), the page
// the exits fetch (testbed/haproxy.hpp's exit_target: python's
// ThreadingHTTPServer), and two real HAProxies from the shipped
// dist/haproxy/egress-gateway.cfg:
//
//  engine  its servers added, drained and removed by the engine's gateway
//          (engine.gateway), no checks of HAProxy's own;
//  checks  the same config with the three proxies as static servers and
//          HAProxy's health checks at their defaults (`check inter 2s fall 3
//          rise 2`): what a user runs without the engine.
//
// The clients run inside the namespace (a thread each, setns), one HTTP/1.0
// GET per connection through a proxy, as test::get_through sends it.
//
// 1. Throughput and latency: the engine's HAProxy with one proxy in the
//    rotation (the other two drained, so both sides use the same exit)
//    against that proxy straight, N clients for S seconds per run, a small
//    page and 1 MiB, R rounds alternating which side goes first.
// 2. A proxy's death under load: N clients on each HAProxy at once; the
//    proxy's traffic is dropped (iptables DROP on its address inside the
//    namespace: connects and connections in flight hang, as with a VM that
//    died) and its domain destroyed at the same moment. Measured per side:
//    the time until HAProxy gives it no new connection (its server, read
//    every 2 ms, is in maintenance or down), and the requests that failed
//    (no 200 within the clients' 5 s) or took over 1 s. Then the DROP is
//    lifted, the engine starts the domain again, and both HAProxies take
//    the proxy back before the next round (each round another proxy).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>

#include "base/log.hpp"
#include "messages/error.hpp"
#include "runtime/engine.hpp"
#include "testbed/haproxy.hpp"
#include "testbed/probe_bed.hpp"
#include "testbed/testbed.hpp"

#include "figures.hpp"

using namespace egress;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

struct options {
  int seconds = 5;
  int clients = 4;
  int rounds = 3;
};

double ms_of(clock_type::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

double percentile(std::vector<double> v, double p) {
  if (v.empty())
    return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

double median(std::vector<double> v) {
  return percentile(std::move(v), 0.5);
}

const std::vector<std::string> names{"bg-1", "bg-2", "bg-3"};

struct bed : test::probe_bed {
  options o;
  test::exit_target page{test::vm_network::web_addr, 8081, net.name()};
  test::haproxy gw{[this] {
    test::haproxy_options ho;
    ho.netns = net.name();
    ho.address = net.peer_addr();
    return ho;
  }()};
  std::unique_ptr<test::haproxy> checks; // made once the addresses are known
  caf::actor_system_config sys_cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::optional<engine> eng;
  std::map<std::string, std::string> address; // proxy -> address

  explicit bed(options opts) : o(opts) {
    gw.start();
    sys_cfg.set("logger.file-verbosity", caf::atom("quiet"));
    configure(sys_cfg);
    sys = std::make_unique<caf::actor_system>(sys_cfg);
  }

  ~bed() {
    if (eng)
      (void)eng->stop();
  }

  engine_config config() {
    auto c = probed_config("bench-gateway", names);
    c.gc = true;
    c.gateway.enabled = true;
    c.gateway.socket = gw.socket();
    c.gateway.backends = {{"egress", ""}};
    return c;
  }

  template <class Pred>
  bool wait_status(Pred pred, clock_type::duration max) {
    auto deadline = clock_type::now() + max;
    while (clock_type::now() < deadline) {
      if (auto st = eng->status(); st && pred(*st))
        return true;
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }

  template <class Pred>
  static bool eventually(Pred pred, clock_type::duration max) {
    auto deadline = clock_type::now() + max;
    while (clock_type::now() < deadline) {
      if (pred())
        return true;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }

  void start() {
    auto e = engine::start(*sys, config());
    if (!e) {
      std::fprintf(stderr, "bench-gateway: engine: %s\n", render(e.error()).c_str());
      std::exit(1);
    }
    eng.emplace(std::move(*e));
    if (!wait_status([](auto& st) { return st.proxies.size() == 3
                       && std::all_of(st.proxies.begin(), st.proxies.end(),
                                      [](auto& p) { return !p.address.empty(); }); }, 30s))
      fail("the proxies never got addresses");
    auto st = eng->status();
    serve_all(*eng);
    for (auto& p : st->proxies)
      address[p.name] = p.address;
    if (!wait_status([](auto& st) { return st.rotation.size() == 3; }, 30s))
      fail("the rotation never held all three");
    // The baseline: the same proxies as static servers with HAProxy's checks.
    test::haproxy_options ho;
    ho.netns = net.name();
    ho.address = net.peer_addr();
    for (auto& n : names)
      ho.backend_extra += "server " + n + " " + address[n]
                          + ":8888 check inter 2s fall 3 rise 2\n    ";
    checks = std::make_unique<test::haproxy>(ho);
    checks->start();
    if (!eventually([&] { return serving(gw, 3) && serving(*checks, 3); }, 10s))
      fail("the HAProxies never served all three");
  }

  static bool serving(const test::haproxy& h, size_t n) {
    auto s = h.servers("egress");
    return static_cast<size_t>(std::count_if(s.begin(), s.end(), [](auto& kv) {
             return kv.second.serving();
           })) == n;
  }

  [[noreturn]] void fail(const std::string& what) {
    std::fprintf(stderr, "bench-gateway: %s\n", what.c_str());
    std::exit(1);
  }

  void drain(const std::string& name, bool on) {
    caf::scoped_actor self{*sys};
    self->request(eng->fleet(), 5s, atom::drain_v, name, on)
      .receive([](proxy_health&) {}, [&](caf::error& err) { fail(render(err)); });
  }

  void revive(const std::string& name) {
    std::string now;
    if (!wait_status([&](auto& st) {
          for (auto& p : st.proxies)
            if (p.name == name && p.phase == proxy_phase::running && !p.address.empty()) {
              now = p.address;
              return true;
            }
          return false;
        }, 30s))
      fail(name + " was never running again");
    if (now != address[name]) {
      vms.start_proxy(now);
      checks->command("set server egress/" + name + " addr " + now + " port 8888");
      address[name] = now;
    }
  }

  std::vector<std::string> drop_rule(const char* op, const std::string& addr) {
    auto argv = net.exec_prefix();
    argv.insert(argv.end(), {"iptables", "-w", op, "INPUT", "-d", addr, "-j", "DROP", "-m",
                             "comment", "--comment", testbed::netns::rule_tag()});
    return argv;
  }
};

struct run_figures {
  double rps = 0, mbps = 0, p50 = 0, p99 = 0;
  size_t failed = 0;
};

run_figures measure(bed& b, const std::string& proxy, int port, const std::string& url) {
  auto t0 = clock_type::now();
  test::request_load l{proxy, port, url, b.o.clients, 5s, b.net.name()};
  std::this_thread::sleep_for(std::chrono::seconds(b.o.seconds));
  auto records = l.finish();
  double secs = ms_of(clock_type::now() - t0) / 1000;
  run_figures f;
  std::vector<double> lat;
  size_t bytes = 0;
  for (auto& r : records) {
    if (r.code != 200) {
      ++f.failed;
      continue;
    }
    lat.push_back(ms_of(r.end - r.start));
    bytes += r.bytes;
  }
  f.rps = static_cast<double>(lat.size()) / secs;
  f.mbps = static_cast<double>(bytes) / secs / 1e6;
  f.p50 = percentile(lat, 0.5);
  f.p99 = percentile(lat, 0.99);
  return f;
}

struct kill_figures {
  double out_ms = -1;
  size_t total = 0, failed = 0, slow = 0;
};

kill_figures count(const std::vector<test::request_record>& records,
                   std::optional<clock_type::time_point> out, clock_type::time_point t_kill) {
  kill_figures k;
  k.out_ms = out ? ms_of(*out - t_kill) : -1;
  for (auto& r : records) {
    ++k.total;
    if (r.code != 200)
      ++k.failed;
    else if (r.end - r.start > 1s)
      ++k.slow;
  }
  return k;
}

} // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::atoi(argv[++i]) : 0; };
    if (a == "--seconds")
      o.seconds = next();
    else if (a == "--clients")
      o.clients = next();
    else if (a == "--rounds")
      o.rounds = next();
    else {
      std::fprintf(stderr, "usage: bench-gateway [--seconds S] [--clients N] [--rounds R]\n");
      return 2;
    }
  }
  if (o.seconds < 1 || o.clients < 1 || o.clients > 8 || o.rounds < 1) {
    std::fprintf(stderr, "bench-gateway: --seconds >= 1, --clients 1..8 (tinyproxy's "
                         "MaxClients), --rounds >= 1\n");
    return 2;
  }
  log::set_level(log::level::error);
  bed b{o};
  b.start();
  test::figures csv{"phase", "size", "side", "round", "rps", "mbps", "p50_ms", "p99_ms",
                    "out_ms", "requests", "failed", "slow"};
  std::printf("bench-gateway: 3 proxies (tinyproxy, test-driver domains) behind a real HAProxy "
              "2.6; %d clients; %ld cores\n",
              o.clients, ::sysconf(_SC_NPROCESSORS_ONLN));

  // 1. Throughput and latency through one proxy.
  b.drain("bg-2", true);
  b.drain("bg-3", true);
  if (!bed::eventually([&] { return bed::serving(b.gw, 1); }, 5s))
    b.fail("the engine's HAProxy still serves more than bg-1");
  auto one = b.address["bg-1"];
  struct size_case {
    const char* name;
    std::string path;
  };
  std::printf("\n1. throughput and latency, %d s per run: the engine's HAProxy (bg-1 alone in "
              "the rotation) against bg-1 straight\n",
              o.seconds);
  std::printf("  %-6s %-5s %-8s %9s %9s %8s %8s %6s\n", "size", "round", "side", "req/s", "MB/s",
              "p50 ms", "p99 ms", "failed");
  std::map<std::string, std::vector<double>> ratio, p50_diff;
  for (auto& sc : {size_case{"small", "/"}, size_case{"1MiB", "/bytes?n=1048576"}}) {
    for (int r = 0; r < o.rounds; ++r) {
      run_figures direct, via;
      for (int k = 0; k < 2; ++k) {
        bool gateway_side = (k == 0) == (r % 2 == 1);
        auto f = gateway_side ? measure(b, b.gw.address(), b.gw.ports().rotate, b.page.url(sc.path))
                              : measure(b, one, 8888, b.page.url(sc.path));
        (gateway_side ? via : direct) = f;
        const char* side = gateway_side ? "gateway" : "direct";
        std::printf("  %-6s %-5d %-8s %9.1f %9.2f %8.2f %8.2f %6zu\n", sc.name, r + 1, side,
                    f.rps, f.mbps, f.p50, f.p99, f.failed);
        csv.row({"throughput", sc.name, side, std::to_string(r + 1), test::figures::cell(f.rps),
                 test::figures::cell(f.mbps), test::figures::cell(f.p50),
                 test::figures::cell(f.p99), "", "", std::to_string(f.failed), ""});
      }
      ratio[sc.name].push_back(direct.rps > 0 ? via.rps / direct.rps : 0);
      p50_diff[sc.name].push_back(via.p50 - direct.p50);
    }
  }
  b.drain("bg-2", false);
  b.drain("bg-3", false);
  if (!bed::eventually([&] { return bed::serving(b.gw, 3); }, 10s))
    b.fail("bg-2 and bg-3 never came back after the undrain");

  // 2. A proxy's death under load, both HAProxies at once.
  std::printf("\n2. a proxy's death under load (%d clients on each HAProxy; the proxy's traffic "
              "dropped and its domain destroyed at once)\n",
              o.clients);
  std::printf("  %-5s %-6s %-8s %12s %9s %7s %6s\n", "round", "proxy", "side", "out after ms",
              "requests", "failed", "slow");
  std::map<std::string, std::vector<double>> out_ms, failed;
  for (int r = 0; r < o.rounds; ++r) {
    auto victim = names[static_cast<size_t>(r) % names.size()];
    auto addr = b.address[victim];
    test::request_load on_engine{b.gw.address(), b.gw.ports().rotate, b.page.url(), o.clients,
                                 5s, b.net.name()};
    test::request_load on_checks{b.checks->address(), b.checks->ports().rotate, b.page.url(),
                                 o.clients, 5s, b.net.name()};
    std::this_thread::sleep_for(1s);
    test::server_watch w_engine{b.gw, "egress"}, w_checks{*b.checks, "egress"};
    auto t_kill = clock_type::now();
    testbed::run_checked(b.drop_rule("-I", addr));
    testbed::run({"virsh", "-c", b.lv.uri("test"), "destroy", victim});
    // Long enough for HAProxy's checks (three failures, each a connect that
    // gets no answer for `inter`, 2 s, then the next check 2 s later) and
    // the clients' timeouts (5 s) of the connections the death caught.
    std::this_thread::sleep_for(15s);
    auto e = count(on_engine.finish(), w_engine.out(victim), t_kill);
    auto c = count(on_checks.finish(), w_checks.out(victim), t_kill);
    testbed::run(b.drop_rule("-D", addr));
    for (auto& [side, k] : {std::pair<const char*, kill_figures&>{"engine", e}, {"checks", c}}) {
      std::printf("  %-5d %-6s %-8s %12.0f %9zu %7zu %6zu\n", r + 1, victim.c_str(), side,
                  k.out_ms, k.total, k.failed, k.slow);
      csv.row({"death", "small", side, std::to_string(r + 1), "", "", "", "",
               test::figures::cell(k.out_ms), std::to_string(k.total), std::to_string(k.failed),
               std::to_string(k.slow)});
      out_ms[side].push_back(k.out_ms);
      failed[side].push_back(static_cast<double>(k.failed + k.slow));
    }
    // Back: the engine starts the domain again. The test driver gives a
    // started domain a new address: a proxy is started there, and the
    // baseline's server is pointed at it, as a user's discovery would.
    b.revive(victim);
    if (!bed::eventually([&] { return bed::serving(b.gw, 3) && bed::serving(*b.checks, 3); },
                         30s))
      b.fail(victim + " never came back into both HAProxies");
  }

  std::printf("\nsummary (medians over %d round(s))\n", o.rounds);
  for (auto size : {"small", "1MiB"})
    std::printf("  throughput %-5s gateway/direct %.2fx (goal >= 0.9), p50 %+.2f ms (goal within "
                "+1 ms)\n",
                size, median(ratio[size]), median(p50_diff[size]));
  auto eo = median(out_ms["engine"]), co = median(out_ms["checks"]);
  std::printf("  death to no new connection: engine %.0f ms, HAProxy checks %.0f ms: %.3fx "
              "(goal <= 0.1x)\n",
              eo, co, co > 0 ? eo / co : 0);
  std::printf("  requests failed or over 1 s per proxy killed: engine %.1f, HAProxy checks %.1f\n",
              median(failed["engine"]), median(failed["checks"]));
  return 0;
}
