#pragma once
// HAProxy's runtime API (its admin "stats socket"), one command per
// connection: HAProxy answers a command and closes the connection unless the
// client asked for its interactive prompt, so each command's answer is
// exactly what came before the close.
//
// HAProxy is a peer that fails like any other: a socket that is gone,
// refuses, hangs (a stopped process still accepts on its backlog) or answers
// without end. Every exchange is bounded by the caller's deadline and by
// max_reply bytes, and kill() ends a blocked exchange from another thread at
// once (shutdown() of its socket), so the gateway can abandon a sync that
// ran past its budget (actors/gateway.hpp).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

#include <caf/expected.hpp>

namespace egress::haproxy {

/// Where the runtime API listens: a unix socket, or IP:PORT (loopback).
struct endpoint {
  std::string path; // a unix socket; empty for TCP
  std::string host; // numeric IP, for TCP
  uint16_t port = 0;

  /// "/run/haproxy/admin.sock" or "127.0.0.1:9999" (validated by the config).
  static endpoint parse(const std::string& text);
  std::string text() const;
};

/// The longest answer taken: `show servers state` of 100,000 servers is
/// about 12 MiB.
inline constexpr size_t max_reply_bytes = size_t{16} << 20;
/// The longest answer to anything but a listing: `show info` is ~1.5 KiB,
/// a command's answer one line.
inline constexpr size_t max_short_reply_bytes = size_t{64} << 10;

class runtime_api {
public:
  using clock = std::chrono::steady_clock;

  explicit runtime_api(endpoint where) : where_(std::move(where)) {}
  ~runtime_api();
  runtime_api(const runtime_api&) = delete;
  runtime_api& operator=(const runtime_api&) = delete;

  /// Sends `command` on a connection of its own and returns HAProxy's whole
  /// answer. Errors: transient gateway_unreachable (no socket, refused,
  /// reset, killed), gateway_timeout (no whole answer before `deadline`),
  /// gateway_garbage (an answer longer than `max_reply`).
  caf::expected<std::string> run(const std::string& command, clock::time_point deadline,
                                 size_t max_reply = max_reply_bytes);

  /// Ends the exchange in progress at once and fails every later one.
  /// Safe from any thread, any number of times. It takes a lock that guards
  /// only the socket's number (never held across I/O), so that a kill can
  /// never shut down a number the exchange has closed and the process reused.
  void kill() noexcept;

  const endpoint& where() const noexcept { return where_; }

private:
  int open_socket(std::string* why);
  void forget_socket(int fd) noexcept;

  endpoint where_;
  std::mutex mtx_;
  int fd_ = -1;
  bool killed_ = false;
};

} // namespace egress::haproxy
