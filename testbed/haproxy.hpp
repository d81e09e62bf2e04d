#pragma once
// A private HAProxy (Debian's haproxy 2.6) for the gateway's tests, `make
// run` and bench/gateway: its own config, admin socket and log in a temp
// dir, run in the foreground (-db) so that its PID is HAProxy's own and it
// is stopped by that PID; optionally inside a network namespace (the VM
// network's side), with its frontends bound where the test can reach them.
// Nothing of the machine's /etc/haproxy, /run/haproxy or its service is
// used or touched.
//
// The config is the one the Debian package ships for operators
// (dist/haproxy/egress-gateway.cfg) with its admin socket and its frontends'
// addresses rewritten, so the documented config is the tested one.
//
// And a page the exits fetch: a real HTTP server (python3's http.server)
// that answers every request with the address it came from, "exit
// 10.213.7.23", so a request through the gateway says which proxy carried
// it; /slow?ms=N answers after N ms (a connection in flight), /bytes?n=N
// sends N bytes.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "testbed/testbed.hpp"

namespace egress::test {

/// The frontends of dist/haproxy/egress-gateway.cfg, by what they do.
struct gateway_ports {
  int rotate = 0;  // per connection across the rotation (backend egress)
  int client = 0;  // sticky by client address (backend egress_by_client)
  int session = 0; // sticky by the proxy username's session (backend egress_by_session)
  int tagged = 0;  // proxies tagged "eu" only (backend egress_eu)
};

struct haproxy_options {
  std::string netns;             // run inside this network namespace ("" = here)
  std::string address = "127.0.0.1"; // where the frontends listen
  /// The admin socket's path; "" = admin.sock in the temp dir.
  std::string socket;
  /// Appended to every backend (e.g. HAProxy's own checks for a baseline).
  std::string backend_extra;
};

class haproxy {
public:
  /// Writes the config (free ports picked on `address`); start() runs it.
  explicit haproxy(haproxy_options opts = {});
  ~haproxy();
  haproxy(const haproxy&) = delete;
  haproxy& operator=(const haproxy&) = delete;

  /// Starts HAProxy and waits until its admin socket answers. Throws with
  /// the log's tail.
  void start();
  void stop();
  /// SIGKILL and start again: an HAProxy with none of the engine's servers.
  void restart();
  void pause();  // SIGSTOP: its socket still accepts (the backlog), answers nothing
  void resume(); // SIGCONT
  bool alive() { return proc_.alive(); }
  pid_t pid() const { return proc_.pid(); }

  const std::string& socket() const { return socket_; }
  const std::string& address() const { return opts_.address; }
  const gateway_ports& ports() const { return ports_; }
  std::string config_text() const;
  std::string log_text() const;

  /// One runtime API command's answer ("" when it failed).
  std::string command(const std::string& line) const;

  /// A server of a backend as `show servers state` lists it.
  struct server {
    std::string address;
    uint32_t port = 0;
    uint32_t admin_state = 0;
    uint32_t op_state = 0; // 2: running; 0: stopped (HAProxy's own check failed)
    bool ready() const { return admin_state == 0; }
    /// Takes new connections: ready, and not down by a check of HAProxy's.
    bool serving() const { return admin_state == 0 && op_state == 2; }
  };
  /// name -> server; empty when the backend could not be read.
  std::map<std::string, server> servers(const std::string& backend = "egress") const;
  /// Sessions a server carries now (show stat's scur); -1 when unknown.
  int64_t sessions(const std::string& backend, const std::string& name) const {
    return stat(backend, name, "scur");
  }
  /// One column of a server's `show stat` line (scur: sessions now, stot:
  /// sessions ever); -1 when unknown.
  int64_t stat(const std::string& backend, const std::string& name,
               const std::string& column) const;

  /// The shipped config, for reading: dist/haproxy/egress-gateway.cfg.
  static std::string shipped_config();

private:
  haproxy_options opts_;
  testbed::temp_dir dir_{"haproxy"};
  std::string socket_;
  gateway_ports ports_;
  testbed::process proc_;
};

/// Reads a backend's servers every 2 ms, in a thread of its own, and notes
/// when each was first seen serving (taking new connections) and, after
/// that, first seen not serving (in maintenance, down by a check of
/// HAProxy's, or gone).
class server_watch {
public:
  using time_point = std::chrono::steady_clock::time_point;
  server_watch(const haproxy& h, std::string backend);
  ~server_watch();
  server_watch(const server_watch&) = delete;
  server_watch& operator=(const server_watch&) = delete;

  std::optional<time_point> serving(const std::string& name) const { return at(serving_, name); }
  std::optional<time_point> out(const std::string& name) const { return at(out_, name); }

private:
  std::optional<time_point> at(const std::map<std::string, time_point>& m,
                               const std::string& name) const;
  void run();

  const haproxy& h_;
  std::string backend_;
  mutable std::mutex mtx_;
  std::map<std::string, time_point> serving_, out_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

/// The page the exits fetch (see the header's comment), on address:port,
/// inside `netns` if given.
class exit_target {
public:
  exit_target(std::string address, int port, std::string netns = {});
  ~exit_target() { server_.stop(); }
  exit_target(const exit_target&) = delete;
  exit_target& operator=(const exit_target&) = delete;

  std::string url(const std::string& path = "/") const;

private:
  testbed::temp_dir dir_{"exit-target"};
  std::string address_;
  int port_;
  testbed::process server_;
};

/// One HTTP GET of `url` through the HTTP proxy at proxy_address:proxy_port,
/// with an optional proxy user (the session), from this process: (status,
/// body); status 0 when the request failed or timed out.
std::pair<int, std::string> get_through(const std::string& proxy_address, int proxy_port,
                                        const std::string& url,
                                        const std::string& proxy_user = {},
                                        std::chrono::milliseconds timeout
                                        = std::chrono::seconds(5));

/// One request of a request_load: when it started and ended, and what came
/// back (the exit's address, when the page named one).
struct request_record {
  std::chrono::steady_clock::time_point start, end;
  int code = 0;
  size_t bytes = 0;
  std::string exit;
};

/// Clients that send GET `url` through the HTTP proxy at proxy:port one
/// after another, each in a thread of its own, until finish(); inside
/// network namespace `netns` if given (each thread enters it: setns acts on
/// the calling thread only).
class request_load {
public:
  request_load(std::string proxy, int port, std::string url, int clients,
               std::chrono::milliseconds timeout, std::string netns = {});
  ~request_load() { finish(); }
  request_load(const request_load&) = delete;
  request_load& operator=(const request_load&) = delete;

  /// Stops the clients, waits for their requests in flight, and returns
  /// every request's record.
  std::vector<request_record> finish();

private:
  void run(const std::string& proxy, int port, const std::string& url,
           std::chrono::milliseconds timeout, const std::string& netns);
  std::atomic<bool> stop_{false};
  std::mutex mtx_;
  std::vector<request_record> records_;
  std::vector<std::thread> threads_;
};

} // namespace egress::test
