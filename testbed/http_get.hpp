#pragma once
// A plain HTTP/1.1 GET to 127.0.0.1:port, for the suites that scrape
// caf-run's listener and for `make run`, which follows /rotation with it.
// Free of Boost.Test.

#include <chrono>
#include <string>
#include <utility>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace egress::test {

/// (status code, body); (0, what came) when no status line came. A read
/// that waits longer than `timeout` for the next bytes ends the answer (a
/// long poll of /rotation?after= waits up to 30 s).
inline std::pair<int, std::string> http_get(int port, const std::string& path,
                                            std::chrono::seconds timeout
                                            = std::chrono::seconds(5)) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return {0, ""};
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{static_cast<time_t>(timeout.count()), 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    ::close(fd);
    return {0, ""};
  }
  auto req = "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  if (::write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    ::close(fd);
    return {0, ""};
  }
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;)
    out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  auto sp = out.find(' ');
  auto body = out.find("\r\n\r\n");
  if (sp == std::string::npos || body == std::string::npos)
    return {0, out};
  return {std::stoi(out.substr(sp + 1, 3)), out.substr(body + 4)};
}

} // namespace egress::test
