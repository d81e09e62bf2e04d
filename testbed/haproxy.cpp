// A private HAProxy and the exits' page (see haproxy.hpp).

#include "testbed/haproxy.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <regex>
#include <stdexcept>
#include <thread>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include "providers/haproxy/runtime_api.hpp"
#include "providers/haproxy/servers.hpp"

namespace egress::test {

namespace {

using namespace std::chrono_literals;

std::vector<std::string> in_netns(const std::string& netns, std::vector<std::string> argv) {
  if (netns.empty())
    return argv;
  std::vector<std::string> out{"ip", "netns", "exec", netns};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

// Rewrites `bind ...` under `frontend <name>`.
std::string rebind(std::string text, const std::string& frontend, const std::string& address,
                   int port) {
  std::regex re("(frontend " + frontend + "\n    bind )[^\n]*");
  return std::regex_replace(text, re, "$01" + address + ":" + std::to_string(port));
}

} // namespace

std::string haproxy::shipped_config() {
  auto text = testbed::read_file(std::string{EGRESS_SOURCE_DIR}
                                 + "/dist/haproxy/egress-gateway.cfg");
  if (text.empty())
    throw std::runtime_error("dist/haproxy/egress-gateway.cfg is missing");
  return text;
}

haproxy::haproxy(haproxy_options opts) : opts_(std::move(opts)) {
  if (::access("/usr/sbin/haproxy", X_OK) != 0)
    throw std::runtime_error("/usr/sbin/haproxy is missing (scripts/install-deps)");
  socket_ = opts_.socket.empty() ? dir_ / "admin.sock" : opts_.socket;
  ports_.rotate = testbed::free_port(opts_.address, opts_.netns);
  do
    ports_.client = testbed::free_port(opts_.address, opts_.netns);
  while (ports_.client == ports_.rotate);
  do
    ports_.session = testbed::free_port(opts_.address, opts_.netns);
  while (ports_.session == ports_.rotate || ports_.session == ports_.client);
  do
    ports_.tagged = testbed::free_port(opts_.address, opts_.netns);
  while (ports_.tagged == ports_.rotate || ports_.tagged == ports_.client
         || ports_.tagged == ports_.session);
  auto text = shipped_config();
  text = std::regex_replace(text, std::regex("stats socket [^ ]+"), "stats socket " + socket_);
  text = rebind(text, "egress_rotate", opts_.address, ports_.rotate);
  text = rebind(text, "egress_by_client", opts_.address, ports_.client);
  text = rebind(text, "egress_by_session", opts_.address, ports_.session);
  text = rebind(text, "egress_eu", opts_.address, ports_.tagged);
  if (!opts_.backend_extra.empty())
    text = std::regex_replace(text, std::regex("(\nbackend [^\n]+\n)"),
                              "$01    " + opts_.backend_extra + "\n");
  testbed::write_file(dir_ / "haproxy.cfg", text);
}

haproxy::~haproxy() {
  stop();
}

std::string haproxy::config_text() const {
  return testbed::read_file(dir_ / "haproxy.cfg");
}

std::string haproxy::log_text() const {
  return testbed::read_file(dir_ / "haproxy.log");
}

void haproxy::start() {
  ::unlink(socket_.c_str());
  proc_ = testbed::process({in_netns(opts_.netns, {"/usr/sbin/haproxy", "-db", "-f",
                                                   dir_ / "haproxy.cfg"}),
                            {},
                            dir_ / "haproxy.log"});
  for (int i = 0; i < 200; ++i) {
    if (!proc_.alive())
      throw std::runtime_error("haproxy exited during start:\n"
                               + testbed::detail::tail(log_text(), 20));
    if (command("show info").find("Name: HAProxy") != std::string::npos)
      return;
    std::this_thread::sleep_for(25ms);
  }
  throw std::runtime_error("haproxy's admin socket does not answer:\n"
                           + testbed::detail::tail(log_text(), 20));
}

void haproxy::stop() {
  proc_.stop(2s);
}

void haproxy::restart() {
  proc_.signal(SIGKILL);
  proc_.stop();
  start();
}

void haproxy::pause() {
  proc_.signal(SIGSTOP);
}

void haproxy::resume() {
  proc_.signal(SIGCONT);
}

std::string haproxy::command(const std::string& line) const {
  egress::haproxy::runtime_api api{egress::haproxy::endpoint::parse(socket_)};
  auto r = api.run(line, std::chrono::steady_clock::now() + 2s);
  return r ? *r : std::string{};
}

std::map<std::string, haproxy::server> haproxy::servers(const std::string& backend) const {
  std::map<std::string, server> out;
  auto rows = egress::haproxy::parse_servers_state(command("show servers state " + backend),
                                                   backend);
  if (!rows)
    return out;
  for (auto& r : *rows)
    out[r.name] = {r.address, r.port, r.admin_state, r.op_state};
  return out;
}

int64_t haproxy::stat(const std::string& backend, const std::string& name,
                      const std::string& column) const {
  // By id: a frontend of the same name would hide the backend.
  auto rows = egress::haproxy::parse_servers_state(command("show servers state " + backend),
                                                   backend);
  if (!rows || rows->empty())
    return -1;
  auto values = egress::haproxy::parse_stat_column(
    command("show stat " + std::to_string(rows->front().backend_id) + " 4 -1"), backend, column);
  if (!values || !values->contains(name))
    return -1;
  return static_cast<int64_t>(values->at(name));
}

// -- watching servers ---------------------------------------------------------------

server_watch::server_watch(const haproxy& h, std::string backend)
  : h_(h), backend_(std::move(backend)), thread_([this] { run(); }) {}

server_watch::~server_watch() {
  stop_ = true;
  thread_.join();
}

std::optional<server_watch::time_point>
server_watch::at(const std::map<std::string, time_point>& m, const std::string& name) const {
  std::lock_guard<std::mutex> guard{mtx_};
  auto i = m.find(name);
  if (i == m.end())
    return std::nullopt;
  return i->second;
}

void server_watch::run() {
  while (!stop_) {
    auto servers = h_.servers(backend_);
    auto now = std::chrono::steady_clock::now();
    {
      std::lock_guard<std::mutex> guard{mtx_};
      for (auto& [name, s] : servers)
        if (s.serving())
          serving_.emplace(name, now);
      for (auto& [name, _] : serving_) {
        auto s = servers.find(name);
        if (s == servers.end() || !s->second.serving())
          out_.emplace(name, now);
      }
    }
    std::this_thread::sleep_for(2ms);
  }
}

// -- the exits' page ------------------------------------------------------------------

exit_target::exit_target(std::string address, int port, std::string netns)
  : address_(std::move(address)), port_(port) {
  auto script = dir_ / "exit_target.py";
  testbed::write_file(script, R"(import http.server, socketserver, sys, time, urllib.parse

class Page(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        if url.path == "/slow":
            time.sleep(int(query.get("ms", ["1000"])[0]) / 1000)
        if url.path == "/bytes":
            body = b"x" * int(query.get("n", ["0"])[0])
        else:
            body = ("exit %s\n" % self.client_address[0]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    request_queue_size = 256

Server((sys.argv[1], int(sys.argv[2])), Page).serve_forever()
)");
  server_ = testbed::process({in_netns(netns, {"/usr/bin/python3", script, address_,
                                               std::to_string(port_)}),
                              {},
                              dir_ / "exit_target.log"});
  for (int i = 0; i < 100; ++i) {
    auto probe = in_netns(netns, {"/usr/bin/python3", "-c",
                                  "import socket; socket.create_connection(('" + address_ + "', "
                                    + std::to_string(port_) + "), 1)"});
    if (testbed::run(probe, 5s).ok())
      return;
    if (!server_.alive())
      break;
    std::this_thread::sleep_for(100ms);
  }
  throw std::runtime_error("exit_target does not listen on " + address_ + ":"
                           + std::to_string(port_) + "\n"
                           + testbed::read_file(dir_ / "exit_target.log"));
}

std::string exit_target::url(const std::string& path) const {
  return "http://" + address_ + ":" + std::to_string(port_) + path;
}

// -- a client -------------------------------------------------------------------------

namespace {

std::string base64(const std::string& in) {
  static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    out += {t[v >> 18], t[(v >> 12) & 63], t[(v >> 6) & 63], t[v & 63]};
  }
  if (i + 1 == in.size()) {
    uint32_t v = uint8_t(in[i]) << 16;
    out += {t[v >> 18], t[(v >> 12) & 63], '=', '='};
  } else if (i + 2 == in.size()) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8);
    out += {t[v >> 18], t[(v >> 12) & 63], t[(v >> 6) & 63], '='};
  }
  return out;
}

} // namespace

std::pair<int, std::string> get_through(const std::string& proxy_address, int proxy_port,
                                        const std::string& url, const std::string& proxy_user,
                                        std::chrono::milliseconds timeout) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(proxy_port));
  ::inet_pton(AF_INET, proxy_address.c_str(), &sa.sin_addr);
  timeval tv{static_cast<time_t>(timeout.count() / 1000),
             static_cast<suseconds_t>((timeout.count() % 1000) * 1000)};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    ::close(fd);
    return {0, "connect failed"};
  }
  auto host = url.substr(7, url.find('/', 7) - 7);
  std::string req = "GET " + url + " HTTP/1.0\r\nHost: " + host + "\r\n";
  if (!proxy_user.empty())
    req += "Proxy-Authorization: Basic " + base64(proxy_user + ":x") + "\r\n";
  req += "\r\n";
  if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    ::close(fd);
    return {0, "send failed"};
  }
  std::string out;
  char buf[16384];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0)
    out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  if (n < 0 || out.size() < 12 || !out.starts_with("HTTP/1."))
    return {0, out};
  auto body = out.find("\r\n\r\n");
  return {std::stoi(out.substr(9, 3)), body == std::string::npos ? "" : out.substr(body + 4)};
}

// -- load -------------------------------------------------------------------------

request_load::request_load(std::string proxy, int port, std::string url, int clients,
                           std::chrono::milliseconds timeout, std::string netns) {
  for (int i = 0; i < clients; ++i)
    threads_.emplace_back([=, this] { run(proxy, port, url, timeout, netns); });
}

void request_load::run(const std::string& proxy, int port, const std::string& url,
                       std::chrono::milliseconds timeout, const std::string& netns) {
  if (!netns.empty()) {
    int fd = ::open(("/run/netns/" + netns).c_str(), O_RDONLY | O_CLOEXEC);
    bool entered = fd >= 0 && ::setns(fd, CLONE_NEWNET) == 0;
    if (fd >= 0)
      ::close(fd);
    if (!entered) {
      std::fprintf(stderr, "request_load: cannot enter %s: %s\n", netns.c_str(),
                   std::strerror(errno));
      return;
    }
  }
  while (!stop_) {
    request_record r;
    r.start = std::chrono::steady_clock::now();
    auto [code, body] = get_through(proxy, port, url, {}, timeout);
    r.end = std::chrono::steady_clock::now();
    r.code = code;
    r.bytes = body.size();
    if (code == 200 && body.starts_with("exit "))
      r.exit = body.substr(5, body.find('\n') - 5);
    std::lock_guard<std::mutex> guard{mtx_};
    records_.push_back(std::move(r));
  }
}

std::vector<request_record> request_load::finish() {
  stop_ = true;
  for (auto& t : threads_)
    if (t.joinable())
      t.join();
  std::lock_guard<std::mutex> guard{mtx_};
  return records_;
}

} // namespace egress::test
