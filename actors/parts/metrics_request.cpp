#include "actors/parts/metrics_request.hpp"

#include <algorithm>
#include <charconv>

namespace egress {

scrape_request parse_scrape_request(std::string_view buf) {
  scrape_request out;
  auto crlf = buf.find("\r\n\r\n");
  auto lf = buf.find("\n\n");
  auto end = std::min(crlf, lf);
  if (end == std::string_view::npos || end > max_request_bytes) {
    if (buf.size() > max_request_bytes)
      out.state = scrape_request::verdict::too_large;
    return out;
  }
  auto line = buf.substr(0, buf.find('\n'));
  if (!line.empty() && line.back() == '\r')
    line.remove_suffix(1);
  auto sp1 = line.find(' ');
  auto sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || sp1 == 0 || sp2 == sp1 + 1) {
    out.state = scrape_request::verdict::malformed;
    return out;
  }
  out.state = scrape_request::verdict::complete;
  out.method = std::string{line.substr(0, sp1)};
  auto path = line.substr(sp1 + 1, sp2 - sp1 - 1);
  auto q = path.find('?');
  out.path = std::string{path.substr(0, q)};
  if (q != std::string_view::npos)
    out.query = std::string{path.substr(q + 1)};
  return out;
}

after_query parse_after(std::string_view query) {
  after_query out;
  while (!query.empty()) {
    auto amp = query.find('&');
    auto pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    if (!pair.starts_with("after="))
      continue;
    auto digits = pair.substr(6);
    out.given = true;
    auto [end, err] = std::from_chars(digits.data(), digits.data() + digits.size(),
                                      out.generation);
    out.valid = !digits.empty() && err == std::errc{} && end == digits.data() + digits.size();
    if (!out.valid)
      return out;
  }
  return out;
}

} // namespace egress
