#pragma once
// What a bridge forwards to: an SSH channel (remote host) or a plain unix
// socket (local daemon). The pump (bridge.hpp) drives either through this
// interface, so local and remote hosts share one pump and one kill path.
//
// All calls are non-blocking; the pump waits in poll() on fd().

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <sys/types.h>
#include <vector>

#include "providers/ssh/channel.hpp"
#include "providers/ssh/kill_switch.hpp"
#include "providers/ssh/session.hpp"

namespace egress::ssh {

class far_end {
public:
  /// Return values of read() and write() besides a byte count.
  static constexpr ssize_t would_block = 0;
  static constexpr ssize_t end_of_stream = -1; // read() only
  static constexpr ssize_t failed = -2;        // see failure()

  virtual ~far_end();

  /// The descriptor the pump polls.
  virtual int fd() const noexcept = 0;

  virtual ssize_t read(char* buf, size_t len) = 0;
  virtual ssize_t write(const char* buf, size_t len) = 0;

  /// poll() events that let the far end progress, given what the pump
  /// wants. May be 0 (the pump then leaves the fd out of the poll).
  virtual short poll_events(bool want_read, bool want_write) const = 0;

  /// Runs timers (keepalive, watchdog). A non-empty result ends the pump
  /// with that reason. `reading` is false while the pump does not read from
  /// the far end (its buffer toward the client is full).
  virtual std::string tick(bool reading) = 0;

  /// Milliseconds until tick() wants to run again; -1 for never.
  virtual int next_tick_ms() const = 0;

  /// Pushes out what write() (or tick()) left gathered in userspace, without
  /// blocking: 0 when nothing is left, 1 when some is (poll_events() then
  /// asks for POLLOUT), failed when the connection broke (see failure()).
  virtual int flush() { return 0; }

  /// The pump begins a turn: a far end that skips reads it knows to be
  /// empty (session::gate_receives) tries its source once more.
  virtual void new_turn() {}

  /// Bytes the far end has taken in from the host so far, into buffers of
  /// its own (libssh2's queue): a change counts as the pump's progress.
  virtual uint64_t received() const { return 0; }

  /// Called after end_of_stream until it returns true: whether the far end
  /// has nothing more to tell. An exec channel's exit status and the rest
  /// of its stderr arrive after its EOF; the pump gives them a short grace.
  virtual bool settle() { return true; }

  /// Why the far end stopped: after end_of_stream, or after failed.
  virtual std::string end_reason() const = 0;
  virtual std::string failure() const = 0;
};

/// Where a bridge's lanes lead (bridge.hpp): lane 0's far end is open before
/// the pump starts (the transport's connect() opened it and proved the path);
/// a later lane's is opened when libvirt's client connects once more, by the
/// pump's thread, without blocking. It owns the far ends it gives out.
class far_source {
public:
  virtual ~far_source();

  /// The far end of `lane`: open (a pointer valid as long as this source),
  /// still opening (nullptr, `error` left empty: ask again after the next
  /// poll), or refused (nullptr, `error` says why). Lanes are asked for in
  /// order: lane n only once lane n - 1 is open.
  virtual far_end* open_lane(size_t lane, std::string& error) = 0;
};

/// A connected unix socket to a local daemon. Does not own the fd.
class socket_end final : public far_end {
public:
  socket_end(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}

  int fd() const noexcept override { return fd_; }
  ssize_t read(char* buf, size_t len) override;
  ssize_t write(const char* buf, size_t len) override;
  short poll_events(bool want_read, bool want_write) const override;
  std::string tick(bool) override { return {}; }
  int next_tick_ms() const override { return -1; }
  std::string end_reason() const override;
  std::string failure() const override { return failure_; }

private:
  int fd_;
  std::string path_;
  std::string failure_;
};

/// An SSH channel on a session in non-blocking mode, with the SSH keepalive
/// and the watchdog that notice a silent server.
class channel_end final : public far_end {
public:
  /// `keepalive` 0 disables keepalives; `watchdog` 0 disables the watchdog.
  /// `host` names the server in the watchdog's message.
  channel_end(session& s, channel& ch, std::chrono::seconds keepalive,
              std::chrono::milliseconds watchdog, std::string host);

  int fd() const noexcept override { return session_.fd(); }
  ssize_t read(char* buf, size_t len) override;
  ssize_t write(const char* buf, size_t len) override;
  short poll_events(bool want_read, bool want_write) const override;
  std::string tick(bool reading) override;
  int next_tick_ms() const override;
  int flush() override;
  uint64_t received() const override { return session_.received(); }
  void new_turn() override { session_.new_turn(); }
  bool settle() override;
  std::string end_reason() const override;
  std::string failure() const override { return failure_ + channel_.end_detail(); }

private:
  session& session_;
  channel& channel_;
  std::chrono::seconds keepalive_;
  std::chrono::milliseconds watchdog_;
  std::string host_;
  std::string failure_;
  int next_keepalive_ms_ = -1;
};

/// The lanes of an SSH transport: channels of its one session. Lane 0's
/// channel was opened by connect() and is owned there; the others are opened
/// here, one at a time, and owned here (the transport owns this, so they are
/// freed after its kill). Lane 0's far end alone runs the session's
/// keepalive and watchdog (bridge.cpp, timers()).
class channel_source final : public far_source {
public:
  /// `command` empty: the later lanes are direct-streamlocal channels to
  /// `socket_path`; else exec channels running `command` (sessions, which
  /// sshd allows MaxSessions of per connection, 10 by default).
  channel_source(session& s, channel& first, std::string socket_path, std::string command,
                 std::chrono::seconds keepalive, std::chrono::milliseconds watchdog,
                 std::string host);
  ~channel_source() override;

  far_end* open_lane(size_t lane, std::string& error) override;

private:
  session& session_;
  std::string socket_path_;
  std::string command_;
  std::vector<channel_ptr> channels_;             // lanes 1..: declared before
  std::vector<std::unique_ptr<channel_end>> ends_; // their ends, which use them
  std::unique_ptr<channel::opener> opening_;
};

/// The lanes of a local-socket transport: a socket of its own to the daemon
/// each. Lane 0's was connected by connect() and is owned there; the others
/// are connected here (a unix connect never blocks), published in the kill
/// switch and closed by the destructor, which must run after the switch's
/// last fire: the transport owns it.
class socket_source final : public far_source {
public:
  socket_source(int first_fd, std::string path, kill_switch& ks);
  ~socket_source() override;

  far_end* open_lane(size_t lane, std::string& error) override;

private:
  std::string path_;
  kill_switch& kill_;
  std::vector<int> fds_; // lanes 1..
  std::vector<std::unique_ptr<socket_end>> ends_;
};

/// Connects a non-blocking unix socket to `path` and publishes it in `ks` as
/// lane `lane`'s far end. Returns the fd, which the caller closes only after
/// the switch's last fire (the switch holds the number), also when the
/// connect failed or the switch had fired (`error` set); -1 only if no
/// socket was made.
int connect_daemon_socket(const std::string& path, kill_switch& ks, size_t lane,
                          std::string& error);

} // namespace egress::ssh
