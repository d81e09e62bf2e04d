#include "actors/metrics_server.hpp"

#include <chrono>
#include <map>

#include <caf/io/middleman.hpp>

#include "messages/error.hpp"

namespace egress {

namespace {

// A scrape request is a few hundred bytes; anything larger is not one.
constexpr size_t max_request = 8192;

void respond(caf::io::broker* self, caf::io::connection_handle h, const std::string& status,
             const std::string& type, const std::string& body, bool head) {
  std::string out = "HTTP/1.1 " + status + "\r\nContent-Type: " + type
                    + "\r\nContent-Length: " + std::to_string(body.size())
                    + "\r\nConnection: close\r\n\r\n";
  if (!head)
    out += body;
  self->write(h, out.size(), out.data());
  self->flush(h);
  // A graceful close: the scribe sends what is buffered first.
  self->close(h);
}

} // namespace

caf::behavior make_metrics_server(caf::io::broker* self, metrics_server_options opts) {
  auto bound = self->add_tcp_doorman(opts.port, opts.address.c_str(), true);
  if (!bound) {
    opts.bound->set_value(bound.error());
    self->quit(bound.error());
    return {};
  }
  opts.bound->set_value(bound->second);
  auto fleet = opts.fleet;
  auto pending = std::make_shared<std::map<caf::io::connection_handle, std::string>>();
  return {
    [self](const caf::io::new_connection_msg& msg) {
      self->configure_read(msg.handle, caf::io::receive_policy::at_most(4096));
    },
    [self, fleet, pending](const caf::io::new_data_msg& msg) {
      auto h = msg.handle;
      auto& buf = (*pending)[h];
      buf.append(msg.buf.begin(), msg.buf.end());
      auto end = buf.find("\r\n\r\n");
      if (end == std::string::npos) {
        if (buf.size() > max_request) {
          pending->erase(h);
          respond(self, h, "431 Request Header Fields Too Large", "text/plain",
                  "request too large\n", false);
        }
        return;
      }
      auto line = buf.substr(0, buf.find("\r\n"));
      pending->erase(h);
      auto sp1 = line.find(' ');
      auto sp2 = sp1 == std::string::npos ? sp1 : line.find(' ', sp1 + 1);
      if (sp2 == std::string::npos) {
        respond(self, h, "400 Bad Request", "text/plain", "malformed request line\n", false);
        return;
      }
      auto method = line.substr(0, sp1);
      auto path = line.substr(sp1 + 1, sp2 - sp1 - 1);
      path = path.substr(0, path.find('?'));
      bool head = method == "HEAD";
      if (method != "GET" && !head) {
        respond(self, h, "405 Method Not Allowed", "text/plain", "GET /metrics only\n", false);
        return;
      }
      if (path != "/metrics") {
        respond(self, h, "404 Not Found", "text/plain", "the metrics are at /metrics\n", head);
        return;
      }
      self->request(fleet, std::chrono::seconds(5), atom::metrics_v)
        .then(
          [self, h, head](std::string& text) {
            respond(self, h, "200 OK", "text/plain; version=0.0.4; charset=utf-8", text, head);
          },
          [self, h, head](caf::error& err) {
            respond(self, h, "503 Service Unavailable", "text/plain",
                    "the fleet did not answer: " + render(err) + "\n", head);
          });
    },
    [pending](const caf::io::connection_closed_msg& msg) { pending->erase(msg.handle); },
    [self](const caf::io::acceptor_closed_msg&) { self->quit(); },
  };
}

caf::expected<std::pair<caf::actor, uint16_t>>
start_metrics_server(caf::actor_system& sys, fleet_actor fleet, const std::string& address,
                     uint16_t port) {
  metrics_server_options opts;
  opts.fleet = std::move(fleet);
  opts.address = address;
  opts.port = port;
  opts.bound = std::make_shared<std::promise<caf::expected<uint16_t>>>();
  auto ready = opts.bound->get_future();
  auto h = sys.middleman().spawn_broker(make_metrics_server, std::move(opts));
  if (ready.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    caf::anon_send_exit(h, caf::exit_reason::user_shutdown);
    return make_error(ec::unsupported, "the metrics server did not start within 10 s");
  }
  auto p = ready.get();
  if (!p)
    return std::move(p.error());
  return std::make_pair(h, *p);
}

} // namespace egress
