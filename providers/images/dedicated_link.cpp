#include "providers/images/dedicated_link.hpp"

#include <csignal>

#include <signal.h>

#include "messages/error.hpp"

namespace egress::images {

caf::expected<std::unique_ptr<dedicated_link>> dedicated_link::open(transport_ptr t,
                                                                    lv::keepalive ka) {
  if (!t)
    return make_error(ec::invalid_argument, "dedicated link: no transport given");
  // close() kills the transport before it releases libvirt's connection,
  // whose close then writes into a shut-down socket: with SIGPIPE's default
  // action that write would end the process. engine::start does the same;
  // this covers a fill run without the engine. An own handler is kept.
  struct sigaction old{};
  if (sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL)
    std::signal(SIGPIPE, SIG_IGN);
  std::unique_ptr<dedicated_link> out{new dedicated_link(t)};
  if (auto err = t->connect())
    return err;
  if (t->has_pump())
    out->pump_ = std::thread{[t] { t->pump(); }};
  auto c = lv::connection::open(t->uri(), ka);
  if (!c)
    return c.error(); // out's destructor kills and joins
  out->conn_ = std::move(*c);
  return out;
}

void dedicated_link::close() noexcept {
  if (t_)
    t_->kill();
  conn_.reset();
  if (pump_.joinable())
    pump_.join();
  t_.reset();
}

} // namespace egress::images
