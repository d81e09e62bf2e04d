#include "providers/ssh/ssh_transport.hpp"

#include <cerrno>
#include <cstring>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <libssh2.h>

#include "messages/error.hpp"

namespace egress {

namespace {

caf::error invalid(std::string what) {
  return make_error(ec::invalid_argument, std::move(what));
}

caf::error check_connections(size_t n) {
  if (n == 0 || n > ssh::kill_switch::max_lanes)
    return invalid("connections " + std::to_string(n) + ": 1 to "
                   + std::to_string(ssh::kill_switch::max_lanes));
  return {};
}

} // namespace

// -- ssh_transport ------------------------------------------------------------

caf::error validate(const ssh_transport_options& opts) {
  if (opts.remote_command.empty() && opts.remote_socket.empty())
    return invalid("ssh: neither remote_socket nor remote_command given");
  if (opts.ssh_keepalive_interval.count() < 0 || opts.ssh_watchdog.count() < 0)
    return invalid("ssh: negative ssh_keepalive_interval or ssh_watchdog");
  // The watchdog counts silence; only keepalive replies break the silence of
  // an idle link, so they must come more often than the watchdog's limit.
  if (opts.ssh_watchdog.count() > 0
      && (opts.ssh_keepalive_interval.count() == 0
          || opts.ssh_keepalive_interval >= opts.ssh_watchdog))
    return invalid("ssh: ssh_watchdog needs an ssh_keepalive_interval shorter than "
                   "itself");
  if (auto uri = ssh::bridged_uri(opts.libvirt_uri, "/x"); !uri)
    return uri.error();
  if (auto err = check_connections(opts.connections))
    return err;
  return ssh::validate(opts.session);
}

ssh_transport::ssh_transport(ssh_transport_options opts)
  : opts_(std::move(opts)), session_(kill_) {
}

ssh_transport::~ssh_transport() {
  // Shut every fd down before freeing: libssh2's channel and session frees
  // would otherwise talk to sshd and wait for answers.
  kill_.fire();
  lanes_.reset(); // the later lanes' channels, before the session
}

std::string ssh_transport::bridge_path() const {
  return bridge_ ? bridge_->path() : std::string{};
}

caf::error ssh_transport::connect() {
  if (connect_started_.exchange(true))
    return invalid("ssh: connect() called twice on one transport");
  auto err = connect_steps();
  // A failed dial lets go of the server at once (it sees the close now, not
  // when the last owner drops us), and of any client of the bridge.
  if (err)
    kill_.fire();
  return err;
}

caf::error ssh_transport::connect_steps() {
  if (kill_.fired())
    return make_error(ec::ssh_failed,
                      ssh::endpoint_name(opts_.session.host, opts_.session.address, opts_.session.port)
                        + ": killed before connect");
  if (auto err = validate(opts_))
    return err;
  // Local things first: a bad bridge_dir should not cost a login.
  auto bridge = ssh::bridge_socket::open(opts_.bridge_dir, kill_, ec::ssh_failed,
                                         opts_.connections);
  if (!bridge)
    return bridge.error();
  bridge_ = std::move(*bridge);
  auto uri = ssh::bridged_uri(opts_.libvirt_uri, bridge_->path());
  if (!uri)
    return uri.error();
  if (auto err = session_.open(opts_.session))
    return err;
  auto ch = opts_.remote_command.empty()
              ? ssh::channel::open_streamlocal(session_, opts_.remote_socket)
              : ssh::channel::open_exec(session_, opts_.remote_command);
  if (kill_.fired())
    return make_error(ec::ssh_failed, session_.who() + ": killed during channel open");
  if (!ch)
    return ch.error();
  channel_ = std::move(*ch);
  uri_ = std::move(*uri);
  connected_ = true;
  return {};
}

caf::error ssh_transport::pump() {
  if (!connected_)
    return make_error(ec::ssh_failed, "ssh: pump() without a successful connect()");
  if (pump_started_.exchange(true))
    return invalid("ssh: pump() called twice on one transport");
  // From here on the session is driven by poll(): non-blocking libssh2.
  libssh2_session_set_blocking(session_.get(), 0);
  session_.coalesce_sends(true);
  session_.gate_receives(true);
  if (opts_.ssh_keepalive_interval.count() > 0)
    libssh2_keepalive_config(session_.get(), 1,
                             static_cast<unsigned>(opts_.ssh_keepalive_interval.count()));
  session_.touch_received();
  lanes_ = std::make_unique<ssh::channel_source>(
    session_, *channel_, opts_.remote_socket, opts_.remote_command,
    opts_.ssh_keepalive_interval, opts_.ssh_watchdog,
    opts_.session.host.empty() ? opts_.session.address : opts_.session.host);
  return ssh::run_pump(*bridge_, *lanes_, kill_, ec::ssh_failed, session_.who(),
                       opts_.stall_limit);
}

transport_factory over_ssh(ssh_transport_options opts) {
  return [opts = std::move(opts)]() -> transport_ptr {
    return std::make_shared<ssh_transport>(opts);
  };
}

// -- local_socket_transport ---------------------------------------------------

caf::error validate(const local_socket_options& opts) {
  sockaddr_un addr{};
  if (opts.socket_path.empty() || opts.socket_path[0] != '/')
    return invalid("local socket: socket_path '" + opts.socket_path
                   + "' is not an absolute path");
  if (opts.socket_path.size() >= sizeof(addr.sun_path))
    return invalid("local socket: socket_path " + opts.socket_path + " is too long");
  if (auto uri = ssh::bridged_uri(opts.libvirt_uri, "/x"); !uri)
    return uri.error();
  return check_connections(opts.connections);
}

local_socket_transport::local_socket_transport(local_socket_options opts)
  : opts_(std::move(opts)) {
}

local_socket_transport::~local_socket_transport() {
  kill_.fire();
  lanes_.reset();
  bridge_.reset();
  if (daemon_fd_ >= 0)
    ::close(daemon_fd_);
}

std::string local_socket_transport::who() const {
  return opts_.host.empty() ? opts_.socket_path
                            : opts_.host + " (" + opts_.socket_path + ")";
}

std::string local_socket_transport::bridge_path() const {
  return bridge_ ? bridge_->path() : std::string{};
}

caf::error local_socket_transport::connect() {
  if (connect_started_.exchange(true))
    return invalid("local socket: connect() called twice on one transport");
  auto err = connect_steps();
  if (err)
    kill_.fire();
  return err;
}

caf::error local_socket_transport::connect_steps() {
  auto broken = [this](const std::string& why) {
    return make_error(ec::connection_broken, who() + ": " + why);
  };
  if (kill_.fired())
    return broken("killed before connect");
  if (auto err = validate(opts_))
    return err;
  auto bridge = ssh::bridge_socket::open(opts_.bridge_dir, kill_, ec::connection_broken,
                                         opts_.connections);
  if (!bridge)
    return bridge.error();
  bridge_ = std::move(*bridge);
  auto uri = ssh::bridged_uri(opts_.libvirt_uri, bridge_->path());
  if (!uri)
    return uri.error();
  std::string error;
  daemon_fd_ = ssh::connect_daemon_socket(opts_.socket_path, kill_, 0, error);
  if (!error.empty())
    return broken(error);
  uri_ = std::move(*uri);
  connected_ = true;
  return {};
}

caf::error local_socket_transport::pump() {
  if (!connected_)
    return make_error(ec::connection_broken,
                      who() + ": pump() without a successful connect()");
  if (pump_started_.exchange(true))
    return invalid("local socket: pump() called twice on one transport");
  lanes_ = std::make_unique<ssh::socket_source>(daemon_fd_, opts_.socket_path, kill_);
  return ssh::run_pump(*bridge_, *lanes_, kill_, ec::connection_broken, who(),
                       opts_.stall_limit);
}

transport_factory over_local_socket(local_socket_options opts) {
  return [opts = std::move(opts)]() -> transport_ptr {
    return std::make_shared<local_socket_transport>(opts);
  };
}

} // namespace egress
