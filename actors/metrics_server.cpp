#include "actors/metrics_server.hpp"

#include <chrono>

#include <caf/io/middleman.hpp>

#include "base/log.hpp"
#include "messages/error.hpp"

namespace egress {

namespace {

using clock_type = std::chrono::steady_clock;

// Closes `h` after writing one response; its state goes with it (CAF sends
// no connection_closed_msg for a close of our own).
void respond(metrics_server_pointer self, caf::io::connection_handle h,
             const std::string& status, const std::string& type, const std::string& body,
             bool head) {
  self->state.connections.erase(h);
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

void refuse_over_cap(metrics_server_pointer self, caf::io::connection_handle h) {
  auto& st = self->state;
  ++st.refused;
  auto now = clock_type::now();
  if (now - st.last_refusal_log >= std::chrono::seconds(10)) {
    log::warn("metrics", "connection cap of " + std::to_string(st.opts.max_connections)
                           + " reached: refused " + std::to_string(st.refused)
                           + " connection(s) since the last report");
    st.refused = 0;
    st.last_refusal_log = now;
  }
  std::string out = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                    "Retry-After: 1\r\nConnection: close\r\n\r\n";
  self->write(h, out.size(), out.data());
  self->flush(h);
  self->close(h);
}

void close_idle(metrics_server_pointer self) {
  auto& st = self->state;
  auto limit = clock_type::now() - st.opts.idle_timeout;
  for (auto i = st.connections.begin(); i != st.connections.end();) {
    if (!i->second.answering && i->second.since < limit) {
      auto h = i->first;
      i = st.connections.erase(i);
      self->close(h);
    } else {
      ++i;
    }
  }
}

void answer(metrics_server_pointer self, caf::io::connection_handle h,
            const scrape_request& req) {
  bool head = req.method == "HEAD";
  if (req.method != "GET" && !head) {
    respond(self, h, "405 Method Not Allowed", "text/plain", "GET /metrics only\n", false);
    return;
  }
  if (req.path != "/metrics") {
    respond(self, h, "404 Not Found", "text/plain", "the metrics are at /metrics\n", head);
    return;
  }
  // What the client sends from now on is dropped as it arrives: one
  // response per connection, then a clean close.
  self->state.connections[h].answering = true;
  self->request(self->state.opts.fleet, std::chrono::seconds(5), atom::metrics_v)
    .then(
      [self, h, head](std::string& text) {
        respond(self, h, "200 OK", "text/plain; version=0.0.4; charset=utf-8", text, head);
      },
      [self, h, head](caf::error& err) {
        respond(self, h, "503 Service Unavailable", "text/plain",
                "the fleet did not answer: " + render(err) + "\n", head);
      });
}

} // namespace

caf::behavior make_metrics_server(metrics_server_pointer self, metrics_server_options opts) {
  self->state.opts = std::move(opts);
  auto& o = self->state.opts;
  auto bound = self->add_tcp_doorman(o.port, o.address.c_str(), true);
  if (!bound) {
    o.bound->set_value(bound.error());
    self->quit(bound.error());
    return {};
  }
  o.bound->set_value(bound->second);
  self->delayed_send(self, std::chrono::seconds(1), atom::poll_v);
  return {
    [self](const caf::io::new_connection_msg& msg) {
      auto& st = self->state;
      if (st.connections.size() >= st.opts.max_connections) {
        refuse_over_cap(self, msg.handle);
        return;
      }
      st.connections[msg.handle].since = clock_type::now();
      self->configure_read(msg.handle, caf::io::receive_policy::at_most(4096));
    },
    [self](const caf::io::new_data_msg& msg) {
      auto h = msg.handle;
      auto i = self->state.connections.find(h);
      if (i == self->state.connections.end() || i->second.answering)
        return; // closed by us, or already answered: nothing more is read
      auto& buf = i->second.buf;
      buf.append(msg.buf.begin(), msg.buf.end());
      auto req = parse_scrape_request(buf);
      switch (req.state) {
        case scrape_request::verdict::incomplete:
          return;
        case scrape_request::verdict::too_large:
          respond(self, h, "431 Request Header Fields Too Large", "text/plain",
                  "request too large\n", false);
          return;
        case scrape_request::verdict::malformed:
          respond(self, h, "400 Bad Request", "text/plain", "malformed request line\n", false);
          return;
        case scrape_request::verdict::complete:
          answer(self, h, req);
      }
    },
    [self](const caf::io::connection_closed_msg& msg) {
      self->state.connections.erase(msg.handle);
    },
    [self](atom::poll) {
      close_idle(self);
      self->delayed_send(self, std::chrono::seconds(1), atom::poll_v);
    },
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
