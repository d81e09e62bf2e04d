#pragma once
// A real HTTP/1.1 server for tests of image downloads: 127.0.0.1 on a free
// port, one thread of its own, an in-memory body, and misbehaviours the test
// switches at run time (slow drip, stall, truncation, a corrupt byte, a wrong
// Content-Length, error statuses, redirects, Range on or off). It records
// every request (path and Range header).
//
//   test::http_server srv{image};
//   srv.start();
//   srv.set({.stall_after = 4096});
//   ... download srv.url() ...
//   srv.stop();                        // ends a stall or a drip at once
//
// One connection at a time, and every response says "Connection: close", so
// a request's fate never depends on another's and the thread count never
// changes while it runs. While it serves a connection it holds one more fd;
// wait_idle() waits until it holds none (a test counting fds needs that).

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace egress::test {

/// How the server answers. Fields combine (e.g. ranges off + truncate).
struct http_behaviour {
  /// Honour "Range: bytes=N-[M]" with 206 + Content-Range (416 past the
  /// end); when false, ignore Range and answer 200 with the whole body.
  bool ranges = true;
  /// Answer a range from this many bytes off the one asked for (a broken
  /// server: 206 with a Content-Range the client did not ask for).
  int64_t range_shift = 0;
  /// Answer this status (with a short text body) instead of the image ...
  int error_status = 0;
  /// ... for the first this-many requests since set() (-1: every request).
  int error_count = -1;
  /// Send this many body bytes, then nothing more and keep the connection
  /// open until the client closes it or the server stops.
  std::optional<size_t> stall_after = std::nullopt;
  /// Send this many body bytes, then close the connection.
  std::optional<size_t> truncate_after = std::nullopt;
  /// Flip the bits of the image byte at this offset (an absolute offset:
  /// ranged answers carry it too when they cover it).
  std::optional<uint64_t> corrupt_at = std::nullopt;
  /// Declare Content-Length as the true length plus this (the true body is
  /// sent either way, then the connection is closed).
  int64_t length_delta = 0;
  /// Send no Content-Length at all: the body ends when the connection does.
  bool no_length = false;
  /// Send the body in pieces of this many bytes, one per interval.
  size_t drip_bytes = 0;
  std::chrono::milliseconds drip_interval{0};
  /// path -> Location: answer 302 with that Location (a path or a URL).
  std::map<std::string, std::string> redirects = {};
};

/// One request as the server saw it.
struct http_request {
  std::string method;
  std::string path;   // without the query
  std::string range;  // the Range header's value, "" when absent
};

class http_server {
public:
  /// Serves `body` at `path`; any other path (not redirected) is 404.
  explicit http_server(std::string body, std::string path = "/image.img");
  ~http_server();
  http_server(const http_server&) = delete;
  http_server& operator=(const http_server&) = delete;

  /// Binds 127.0.0.1:0 and starts the thread. Throws std::runtime_error.
  void start();
  /// Ends whatever the thread is doing (a stall, a drip, a blocked send)
  /// and joins it; closes every fd. Idempotent.
  void stop();

  uint16_t port() const { return port_; }
  /// "http://127.0.0.1:<port>" + path (default: the body's path).
  std::string url(const std::string& path = {}) const;

  /// Changes behaviour for the next requests; resets the error_count tally.
  void set(http_behaviour b);
  void set_body(std::string body);

  size_t requests() const;
  std::vector<http_request> log() const;
  void clear_log();

  /// Waits until no connection is open; false if `timeout` passed first.
  bool wait_idle(std::chrono::milliseconds timeout = std::chrono::seconds(5)) const;

private:
  void run();
  void serve(int fd);

  std::string path_;
  mutable std::mutex mu_;
  mutable std::condition_variable idle_cv_;
  // Shared, never copied: a request holds the body it started with while
  // set_body() swaps in another (a 512 MiB copy per request cost seconds).
  std::shared_ptr<const std::string> body_;
  http_behaviour behaviour_;
  int errors_sent_ = 0;
  std::vector<http_request> log_;
  bool busy_ = false;

  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: readable once stop() ran, for every poll
  uint16_t port_ = 0;
  std::thread thread_;
};

} // namespace egress::test
