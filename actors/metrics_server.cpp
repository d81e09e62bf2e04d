#include "actors/metrics_server.hpp"

#include <chrono>

#include <caf/io/middleman.hpp>

#include "actors/parts/rotation_book.hpp"
#include "base/log.hpp"
#include "messages/error.hpp"

namespace egress {

namespace {

using clock_type = std::chrono::steady_clock;
using phase = metrics_connection::phase;

// Closes `h` after writing one response; its state goes with it (CAF sends
// no connection_closed_msg for a close of our own).
void respond(metrics_server_pointer self, caf::io::connection_handle h,
             const std::string& status, const std::string& type, const std::string& body,
             bool head, const std::string& extra_headers = {}) {
  self->state.connections.erase(h);
  std::string out = "HTTP/1.1 " + status + "\r\nContent-Type: " + type
                    + "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n"
                    + extra_headers + "Connection: close\r\n\r\n";
  if (!head)
    out += body;
  self->write(h, out.size(), out.data());
  self->flush(h);
  // A graceful close: the scribe sends what is buffered first.
  self->close(h);
}

void respond_busy(metrics_server_pointer self, caf::io::connection_handle h,
                  const std::string& why) {
  respond(self, h, "503 Service Unavailable", "text/plain", why + "\n", false,
          "Retry-After: 1\r\n");
}

size_t count(const metrics_server_state& st, bool waiting) {
  size_t n = 0;
  for (auto& [_, c] : st.connections)
    n += (c.now == phase::waiting) == waiting ? 1 : 0;
  return n;
}

// One log line per 10 s at most, with what the cap did since the last one.
void log_cap(metrics_server_pointer self) {
  auto& st = self->state;
  auto now = clock_type::now();
  if (now - st.last_refusal_log < std::chrono::seconds(10))
    return;
  log::warn(to_string(actor_kind::metrics), "connection cap of " + std::to_string(st.opts.max_connections)
                         + " reached: closed " + std::to_string(st.evicted)
                         + " idle connection(s) to admit new ones and refused "
                         + std::to_string(st.refused) + " since the last report");
  st.refused = 0;
  st.evicted = 0;
  st.last_refusal_log = now;
}

// At the cap: the oldest connection that has not sent a whole request
// within the header deadline makes room; nullptr-like end() when none has.
auto oldest_idle(metrics_server_state& st) {
  auto limit = clock_type::now() - st.opts.header_deadline;
  auto best = st.connections.end();
  for (auto i = st.connections.begin(); i != st.connections.end(); ++i)
    if (i->second.now == phase::reading && i->second.since < limit
        && (best == st.connections.end() || i->second.since < best->second.since))
      best = i;
  return best;
}

// Admits a new connection, closing an idle one at the cap; false when it
// was refused (and closed).
bool admit(metrics_server_pointer self, caf::io::connection_handle h) {
  auto& st = self->state;
  if (count(st, false) >= st.opts.max_connections) {
    auto idle = oldest_idle(st);
    if (idle == st.connections.end()) {
      ++st.refused;
      log_cap(self);
      respond_busy(self, h, "too many connections");
      return false;
    }
    auto gone = idle->first;
    st.connections.erase(idle);
    self->close(gone);
    ++st.evicted;
    log_cap(self);
  }
  st.connections[h].since = clock_type::now();
  return true;
}

void close_idle(metrics_server_pointer self) {
  auto& st = self->state;
  auto limit = clock_type::now() - st.opts.idle_timeout;
  for (auto i = st.connections.begin(); i != st.connections.end();) {
    if (i->second.now == phase::reading && i->second.since < limit) {
      auto h = i->first;
      i = st.connections.erase(i);
      self->close(h);
    } else {
      ++i;
    }
  }
}

void answer_rotation(metrics_server_pointer self, caf::io::connection_handle h, bool head,
                     const rotation_view& view) {
  respond(self, h, "200 OK", "application/json", rotation_json(view), head,
          "X-Rotation-Generation: " + std::to_string(view.generation) + "\r\n");
}

// Answers every waiter the rotation has moved past, and (`expired`) those
// whose wait is over, with the rotation as it is.
void wake_waiters(metrics_server_pointer self, bool expired) {
  auto& st = self->state;
  auto limit = clock_type::now() - st.opts.wait_timeout;
  if (!st.rotation) {
    // The fleet sends the rotation at once when the server subscribes:
    // none by now means the fleet is gone.
    std::vector<caf::io::connection_handle> late;
    for (auto& [h, c] : st.connections)
      if (expired && c.now == phase::waiting && c.since < limit)
        late.push_back(h);
    for (auto h : late)
      respond_busy(self, h, "the rotation is not known yet");
    return;
  }
  std::vector<std::pair<caf::io::connection_handle, bool>> due;
  for (auto& [h, c] : st.connections)
    if (c.now == phase::waiting
        && (c.after < st.rotation->generation || (expired && c.since < limit)))
      due.emplace_back(h, c.head);
  auto view = st.rotation; // answering erases connections
  for (auto& [h, head] : due)
    answer_rotation(self, h, head, *view);
}

void answer_metrics(metrics_server_pointer self, caf::io::connection_handle h, bool head) {
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

void answer_rotation_request(metrics_server_pointer self, caf::io::connection_handle h,
                             const scrape_request& req, bool head) {
  auto& st = self->state;
  auto after = parse_after(req.query);
  if (!after.valid) {
    respond(self, h, "400 Bad Request", "text/plain",
            "after must be a rotation generation (a decimal number)\n", head);
    return;
  }
  if (after.given && !(st.rotation && st.rotation->generation > after.generation)) {
    if (count(st, true) >= st.opts.max_waiters) {
      respond_busy(self, h, "too many clients waiting for the rotation");
      return;
    }
    auto& c = st.connections[h];
    c.now = phase::waiting;
    c.since = clock_type::now();
    c.after = after.generation;
    c.head = head;
    c.buf.clear();
    return;
  }
  if (after.given) {
    answer_rotation(self, h, head, *st.rotation);
    return;
  }
  // Without `after`: the rotation now, its latencies included.
  self->request(st.opts.fleet, std::chrono::seconds(5), atom::rotation_v)
    .then([self, h, head](rotation_view& view) { answer_rotation(self, h, head, view); },
          [self, h, head](caf::error& err) {
            respond(self, h, "503 Service Unavailable", "text/plain",
                    "the fleet did not answer: " + render(err) + "\n", head);
          });
}

void answer(metrics_server_pointer self, caf::io::connection_handle h,
            const scrape_request& req) {
  bool head = req.method == "HEAD";
  if (req.method != "GET" && !head) {
    respond(self, h, "405 Method Not Allowed", "text/plain", "GET /metrics or /rotation only\n",
            false);
    return;
  }
  if (req.path != "/metrics" && req.path != "/rotation") {
    respond(self, h, "404 Not Found", "text/plain",
            "the metrics are at /metrics, the rotation at /rotation\n", head);
    return;
  }
  // What the client sends from now on is dropped as it arrives: one
  // response per connection, then a clean close.
  self->state.connections[h].now = phase::answering;
  if (req.path == "/metrics")
    answer_metrics(self, h, head);
  else
    answer_rotation_request(self, h, req, head);
}

void on_data(metrics_server_pointer self, const caf::io::new_data_msg& msg) {
  auto h = msg.handle;
  auto i = self->state.connections.find(h);
  if (i == self->state.connections.end() || i->second.now != phase::reading)
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
  self->send(o.fleet, atom::subscribe_v, caf::actor_cast<rotation_follower_actor>(self));
  self->delayed_send(self, std::chrono::seconds(1), atom::poll_v);
  return {
    [self](const caf::io::new_connection_msg& msg) {
      if (admit(self, msg.handle))
        self->configure_read(msg.handle, caf::io::receive_policy::at_most(4096));
    },
    [self](const caf::io::new_data_msg& msg) { on_data(self, msg); },
    [self](const caf::io::connection_closed_msg& msg) {
      self->state.connections.erase(msg.handle);
    },
    [self](rotation_snapshot& r) {
      self->state.rotation = std::move(r);
      wake_waiters(self, false);
    },
    [self](atom::poll) {
      close_idle(self);
      wake_waiters(self, true);
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
