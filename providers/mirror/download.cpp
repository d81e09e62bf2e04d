#include "providers/mirror/download.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <string_view>
#include <vector>

#include <curl/curl.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "messages/error.hpp"

namespace egress::mirror {

namespace {

using clock_type = std::chrono::steady_clock;

void global_init() {
  // libcurl 7.88 is built thread-safe (curl -V: "threadsafe"), but one init
  // for the process is still all it needs; never cleaned up, as other
  // libcurl users in the process may rely on it.
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct curlu_deleter {
  void operator()(CURLU* u) const { curl_url_cleanup(u); }
};
using curlu_ptr = std::unique_ptr<CURLU, curlu_deleter>;

struct curl_string {
  char* p = nullptr;
  ~curl_string() { curl_free(p); }
};

bool iequals_prefix(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size())
    return false;
  for (size_t i = 0; i < prefix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[i]))
        != std::tolower(static_cast<unsigned char>(prefix[i])))
      return false;
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'
                        || s.back() == '\n'))
    s.remove_suffix(1);
  return s;
}

std::optional<uint64_t> parse_u64(std::string_view s) {
  if (s.empty() || s.size() > 19)
    return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9')
      return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  return v;
}

/// "bytes A-B/T", "bytes A-B/*" or "bytes */T" (a 416's).
struct content_range {
  std::optional<uint64_t> first;  // absent in "*/T"
  std::optional<uint64_t> total;  // absent in ".../*"
};

std::optional<content_range> parse_content_range(std::string_view v) {
  v = trim(v);
  if (!iequals_prefix(v, "bytes "))
    return std::nullopt;
  v.remove_prefix(6);
  auto slash = v.find('/');
  if (slash == std::string_view::npos)
    return std::nullopt;
  auto range = trim(v.substr(0, slash));
  auto total = trim(v.substr(slash + 1));
  content_range out;
  if (total != "*") {
    out.total = parse_u64(total);
    if (!out.total)
      return std::nullopt;
  }
  if (range != "*") {
    auto dash = range.find('-');
    if (dash == std::string_view::npos)
      return std::nullopt;
    out.first = parse_u64(range.substr(0, dash));
    if (!out.first || !parse_u64(range.substr(dash + 1)))
      return std::nullopt;
  }
  return out;
}

std::string bytes(uint64_t n) {
  return std::to_string(n) + (n == 1 ? " byte" : " bytes");
}

} // namespace

std::string redact_url(const std::string& url) {
  global_init();
  curlu_ptr u{curl_url()};
  if (u && curl_url_set(u.get(), CURLUPART_URL, url.c_str(), CURLU_NON_SUPPORT_SCHEME) == CURLUE_OK) {
    for (auto part : {CURLUPART_USER, CURLUPART_PASSWORD, CURLUPART_OPTIONS,
                      CURLUPART_QUERY, CURLUPART_FRAGMENT})
      curl_url_set(u.get(), part, nullptr, 0);
    curl_string out;
    if (curl_url_get(u.get(), CURLUPART_URL, &out.p, 0) == CURLUE_OK)
      return out.p;
  }
  // Unparsable: still never echo what looks like a secret.
  std::string s = url.substr(0, url.find_first_of("?#"));
  auto scheme_end = s.find("://");
  auto host_start = scheme_end == std::string::npos ? 0 : scheme_end + 3;
  auto at = s.find('@', host_start);
  if (at != std::string::npos && at < s.find('/', host_start))
    s.erase(host_start, at + 1 - host_start);
  return s;
}

struct download::impl {
  fetch_options opts;
  std::string where;  // the redacted URL, for messages
  bool is_file = false;
  std::string file_path;

  // -- verification ----------------------------------------------------------
  sha256 hasher;
  bool whole_digest = false;       // hasher covers the image from byte 0
  uint64_t pos = 0;                // image offset of the next body byte
  uint64_t received = 0;           // bytes delivered to the caller
  std::optional<uint64_t> total;   // the whole image's length, if known
  bool resumed = false;
  bool started = false;            // response (or file) examined
  bool drop_body = false;          // a 416 saying "nothing left": ignore its page
  bool nothing_left = false;       // offset == expected_length: no transfer at all
  bool complete = false;
  std::optional<caf::error> failed;
  std::string digest;

  // -- http(s): libcurl -------------------------------------------------------
  CURLM* multi = nullptr;
  CURL* easy = nullptr;
  bool added = false;
  char errbuf[CURL_ERROR_SIZE] = {};
  std::string range_header;        // this response's Content-Range
  // Where the write callback puts bytes: the caller's buffer during read(),
  // and whatever does not fit into `spill`, which the next read() drains
  // before driving curl again. So spill never holds more than one
  // curl_multi_perform delivered (libcurl reads one CURLOPT_BUFFERSIZE,
  // 16 KiB, per plain socket per perform).
  char* out = nullptr;
  size_t out_cap = 0;
  size_t out_len = 0;
  std::vector<char> spill;
  size_t spill_pos = 0;
  bool transfer_done = false;
  CURLcode result = CURLE_OK;
  std::optional<caf::error> callback_error;  // why a callback aborted

  // -- file -------------------------------------------------------------------
  int fd = -1;
  std::optional<clock_type::time_point> first_read;

  explicit impl(fetch_options o) : opts(std::move(o)) {}

  ~impl() {
    if (added)
      curl_multi_remove_handle(multi, easy);
    if (easy)
      curl_easy_cleanup(easy);
    if (multi)
      curl_multi_cleanup(multi);
    if (fd >= 0)
      ::close(fd);
  }

  caf::error fail(ec code, const std::string& what) const {
    return make_error(code, location() + ": " + what);
  }

  std::string location() const {
    if (easy) {
      char* eff = nullptr;
      if (curl_easy_getinfo(easy, CURLINFO_EFFECTIVE_URL, &eff) == CURLE_OK && eff) {
        auto e = redact_url(eff);
        if (e != where)
          return where + " (redirected to " + e + ")";
      }
    }
    return where;
  }

  // -- what every source shares ------------------------------------------------

  /// The source declared the whole image's length (`how` says where from).
  caf::error declare_total(uint64_t n, const char* how) {
    if (opts.expected_length && n != *opts.expected_length)
      return fail(ec::length_mismatch, how + std::string{" declares "} + bytes(n)
                                         + ", expected " + bytes(*opts.expected_length));
    total = n;
    return {};
  }

  /// Body bytes at image offset `pos`, to be delivered.
  caf::error account(const char* p, size_t n) {
    if (total && pos + n > *total)
      return fail(ec::length_mismatch, "the source sent more than the "
                                         + std::string{opts.expected_length ? "expected " : "declared "}
                                         + bytes(*total) + " (at least " + bytes(pos + n) + ")");
    hasher.update(p, n);
    pos += n;
    received += n;
    return {};
  }

  /// The source ended cleanly: check everything known, then the digest.
  caf::expected<size_t> verify() {
    if (pos < opts.offset)
      return fail(ec::length_mismatch, "the image ended after " + bytes(pos)
                                         + ", before the resume offset "
                                         + std::to_string(opts.offset));
    if (total && pos != *total)
      return fail(ec::length_mismatch, "got " + bytes(pos) + ", expected " + bytes(*total));
    if (whole_digest) {
      digest = hasher.hex();
      if (opts.expected_sha256 && digest != *opts.expected_sha256)
        return fail(ec::digest_mismatch, "sha256 mismatch over " + bytes(pos) + ": expected "
                                           + *opts.expected_sha256 + ", got " + digest);
    }
    complete = true;
    return size_t{0};
  }

  // -- file:// -----------------------------------------------------------------

  caf::error open_file() {
    started = true;
    fd = ::open(file_path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
      int e = errno;
      std::string why = "open: " + std::string{std::strerror(e)};
      if (e == ENOENT || e == ENOTDIR)
        return fail(ec::source_not_found, why);
      if (e == EACCES || e == EPERM)
        return fail(ec::access_denied, why);
      return fail(ec::source_failed, why);
    }
    struct stat st{};
    if (::fstat(fd, &st) != 0)
      return fail(ec::source_failed, "fstat: " + std::string{std::strerror(errno)});
    if (!S_ISREG(st.st_mode))
      return fail(ec::source_rejected, "not a regular file");
    auto size = static_cast<uint64_t>(st.st_size);
    if (auto err = declare_total(size, "the file"))
      return err;
    if (opts.offset > size)
      return fail(ec::length_mismatch, "the file has " + bytes(size)
                                         + ", fewer than the resume offset "
                                         + std::to_string(opts.offset));
    pos = opts.offset;
    resumed = opts.offset > 0;
    return {};
  }

  caf::expected<size_t> read_file(char* buf, size_t cap) {
    auto now = clock_type::now();
    if (!first_read)
      first_read = now;
    else if (now - *first_read > opts.deadline)
      return fail(ec::source_timeout, "deadline of " + std::to_string(opts.deadline.count())
                                        + " ms passed after " + bytes(received));
    if (!started)
      if (auto err = open_file())
        return err;
    // Never past the size seen at open: a file that grows is not what the
    // length was checked against.
    auto want = static_cast<size_t>(std::min<uint64_t>(cap, *total - pos));
    if (want == 0)
      return verify();
    ssize_t n;
    do
      n = ::pread(fd, buf, want, static_cast<off_t>(pos));
    while (n < 0 && errno == EINTR);
    if (n < 0)
      return fail(ec::source_failed, "read at byte " + std::to_string(pos) + ": "
                                       + std::strerror(errno));
    if (n == 0)  // shrank under us
      return fail(ec::length_mismatch, "the file ended after " + bytes(pos) + " of "
                                         + bytes(*total));
    if (auto err = account(buf, static_cast<size_t>(n)))
      return err;
    return static_cast<size_t>(n);
  }

  // -- http(s) -----------------------------------------------------------------

  static size_t on_header(char* p, size_t size, size_t n, void* self) {
    auto* d = static_cast<impl*>(self);
    std::string_view line{p, size * n};
    // Headers of every response pass here (redirects too): keep the last one's.
    if (line.starts_with("HTTP/"))
      d->range_header.clear();
    else if (iequals_prefix(line, "content-range:"))
      d->range_header = std::string{trim(line.substr(14))};
    return size * n;
  }

  static size_t on_write(char* p, size_t size, size_t n, void* self) {
    auto* d = static_cast<impl*>(self);
    // Called from C: nothing may be thrown through libcurl.
    try {
      if (auto err = d->body(p, size * n)) {
        d->callback_error = std::move(err);
        return CURL_WRITEFUNC_ERROR;
      }
    } catch (const std::exception& e) {
      d->callback_error = d->fail(ec::source_failed, std::string{"write callback: "} + e.what());
      return CURL_WRITEFUNC_ERROR;
    }
    return size * n;
  }

  caf::error http_status_error(long code) {
    auto what = "the server answered HTTP " + std::to_string(code);
    if (code == 404 || code == 410)
      return fail(ec::source_not_found, what);
    if (code == 401 || code == 403 || code == 407)
      return fail(ec::access_denied, what);
    // 408 and 429 say "try later" in so many words.
    if (code == 408 || code == 429 || (code >= 500 && code < 600))
      return fail(ec::source_failed, what);
    return fail(ec::source_rejected, what);
  }

  /// The final response's status and headers, before its first body byte
  /// (or at its end, if it had no body).
  caf::error begin_response() {
    started = true;
    long code = 0;
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &code);
    curl_off_t length = -1;
    curl_easy_getinfo(easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
    auto range = parse_content_range(range_header);
    if (code == 206) {
      if (!range || !range->first || *range->first != opts.offset)
        return fail(ec::source_rejected, "asked for bytes from " + std::to_string(opts.offset)
                                           + ", got 206 with Content-Range \"" + range_header
                                           + "\"");
      pos = opts.offset;
      resumed = opts.offset > 0;
      if (range->total)
        if (auto err = declare_total(*range->total, "Content-Range"))
          return err;
      return {};
    }
    if (code == 416 && opts.offset > 0 && range && !range->first && range->total
        && *range->total == opts.offset) {
      // Asked for the bytes after the end: everything is already stored.
      drop_body = true;
      pos = opts.offset;
      resumed = true;
      return declare_total(*range->total, "Content-Range");
    }
    if (code < 200 || code >= 300)
      return http_status_error(code);
    // A 2xx but no 206: the whole image, from byte 0. Its first `offset`
    // bytes are dropped in body().
    pos = 0;
    resumed = false;
    if (length >= 0) {
      if (auto err = declare_total(static_cast<uint64_t>(length), "Content-Length"))
        return err;
      if (*total < opts.offset)
        return fail(ec::length_mismatch, "the image has " + bytes(*total)
                                           + ", fewer than the resume offset "
                                           + std::to_string(opts.offset));
    }
    return {};
  }

  caf::error body(const char* p, size_t n) {
    if (!started)
      if (auto err = begin_response())
        return err;
    if (drop_body)
      return {};
    if (pos < opts.offset) {  // a 200 to a ranged request: skip what is stored
      auto skip = static_cast<size_t>(std::min<uint64_t>(n, opts.offset - pos));
      pos += skip;
      p += skip;
      n -= skip;
      if (n == 0)
        return {};
    }
    if (auto err = account(p, n))
      return err;
    auto direct = std::min(n, out_cap - out_len);
    if (direct > 0) {
      std::memcpy(out + out_len, p, direct);
      out_len += direct;
    }
    spill.insert(spill.end(), p + direct, p + n);
    return {};
  }

  caf::error curl_error(CURLcode rc) const {
    std::string why = errbuf[0] ? std::string{trim(errbuf)} : curl_easy_strerror(rc);
    why += " (curl " + std::to_string(static_cast<int>(rc)) + ", after " + bytes(received) + ")";
    switch (rc) {
      case CURLE_OPERATION_TIMEDOUT:
        return fail(ec::source_timeout, why);
      case CURLE_PEER_FAILED_VERIFICATION:
      case CURLE_SSL_CACERT_BADFILE:
      case CURLE_SSL_CERTPROBLEM:
      case CURLE_SSL_ISSUER_ERROR:
      case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
      case CURLE_SSL_CRL_BADFILE:
      case CURLE_SSL_INVALIDCERTSTATUS:
        return fail(ec::source_rejected, "TLS verification failed: " + why);
      case CURLE_TOO_MANY_REDIRECTS:
      case CURLE_UNSUPPORTED_PROTOCOL:  // a redirect to a protocol not allowed
      case CURLE_URL_MALFORMAT:         // a Location that is not a URL
        return fail(ec::source_rejected, why);
      case CURLE_LOGIN_DENIED:
      case CURLE_REMOTE_ACCESS_DENIED:
        return fail(ec::access_denied, why);
      case CURLE_REMOTE_FILE_NOT_FOUND:
        return fail(ec::source_not_found, why);
      default:
        // Refused, reset, DNS, handshake, a connection cut before the
        // declared length (CURLE_PARTIAL_FILE): the world may differ next time.
        return fail(ec::source_failed, why);
    }
  }

  caf::expected<size_t> finish_curl() {
    if (result != CURLE_OK) {
      if (callback_error)
        return *callback_error;
      return curl_error(result);
    }
    if (!started)  // a response without a body
      if (auto err = begin_response())
        return err;
    return verify();
  }

  caf::expected<size_t> read_curl(char* buf, size_t cap) {
    if (spill_pos < spill.size()) {
      auto n = std::min(cap, spill.size() - spill_pos);
      std::memcpy(buf, spill.data() + spill_pos, n);
      spill_pos += n;
      if (spill_pos == spill.size()) {
        spill.clear();
        spill_pos = 0;
      }
      return n;
    }
    if (transfer_done)
      return finish_curl();
    out = buf;
    out_cap = cap;
    out_len = 0;
    struct reset_out {
      impl* d;
      ~reset_out() { d->out = nullptr; d->out_cap = d->out_len = 0; }
    } guard{this};
    for (;;) {
      if (opts.cancel && opts.cancel->load())
        return fail(ec::shutting_down, "download given up after "
                                         + std::to_string(pos) + " bytes");
      int running = 0;
      auto mc = curl_multi_perform(multi, &running);
      if (mc != CURLM_OK)
        return fail(ec::source_failed, std::string{"curl_multi_perform: "} + curl_multi_strerror(mc));
      int left = 0;
      while (CURLMsg* m = curl_multi_info_read(multi, &left))
        if (m->msg == CURLMSG_DONE && m->easy_handle == easy) {
          transfer_done = true;
          result = m->data.result;
        }
      // Bytes first: an error that follows them comes with the next read().
      if (out_len > 0)
        return out_len;
      if (transfer_done)
        return finish_curl();
      // Waits on the transfer's sockets, at most until libcurl's next timer
      // (connect timeout, deadline, low-speed check) or 1 s.
      // With a cancel flag the wait is short, so that the flag is seen: a
      // flag costs nothing per byte, unlike a lock around curl_multi_wakeup
      // on a handle the reading thread may be freeing.
      mc = curl_multi_poll(multi, nullptr, 0, opts.cancel ? 100 : 1000, nullptr);
      if (mc != CURLM_OK)
        return fail(ec::source_failed, std::string{"curl_multi_poll: "} + curl_multi_strerror(mc));
    }
  }

  template <class T>
  caf::error setopt(CURLoption opt, T value, const char* name) {
    if (auto rc = curl_easy_setopt(easy, opt, value); rc != CURLE_OK)
      return fail(ec::invalid_argument, std::string{"libcurl refused "} + name + ": "
                                          + curl_easy_strerror(rc));
    return {};
  }

  caf::error setup_curl() {
    multi = curl_multi_init();
    easy = curl_easy_init();
    if (!multi || !easy)
      return fail(ec::source_failed, "libcurl could not allocate a handle");
    std::string range = std::to_string(opts.offset) + "-";
    caf::error err;
    auto set = [&](auto opt, auto value, const char* name) {
      if (!err)
        err = setopt(opt, value, name);
    };
    set(CURLOPT_URL, opts.url.c_str(), "CURLOPT_URL");
    // Only http(s) here (file:// never reaches libcurl); a redirect may not
    // lead anywhere else either, file:// least of all.
    set(CURLOPT_PROTOCOLS_STR, "http,https", "CURLOPT_PROTOCOLS_STR");
    set(CURLOPT_REDIR_PROTOCOLS_STR, "http,https", "CURLOPT_REDIR_PROTOCOLS_STR");
    set(CURLOPT_FOLLOWLOCATION, 1L, "CURLOPT_FOLLOWLOCATION");
    set(CURLOPT_MAXREDIRS, 5L, "CURLOPT_MAXREDIRS");
    // No signals: we run on a thread among many (and a timeout must not
    // longjmp through it).
    set(CURLOPT_NOSIGNAL, 1L, "CURLOPT_NOSIGNAL");
    set(CURLOPT_SSL_VERIFYPEER, 1L, "CURLOPT_SSL_VERIFYPEER");
    set(CURLOPT_SSL_VERIFYHOST, 2L, "CURLOPT_SSL_VERIFYHOST");
    if (!opts.ca_file.empty())
      set(CURLOPT_CAINFO, opts.ca_file.c_str(), "CURLOPT_CAINFO");
    set(CURLOPT_TIMEOUT_MS, static_cast<long>(opts.deadline.count()), "CURLOPT_TIMEOUT_MS");
    set(CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(opts.connect_timeout.count()),
        "CURLOPT_CONNECTTIMEOUT_MS");
    if (opts.low_speed_limit > 0 && opts.low_speed_time.count() > 0) {
      set(CURLOPT_LOW_SPEED_LIMIT, opts.low_speed_limit, "CURLOPT_LOW_SPEED_LIMIT");
      set(CURLOPT_LOW_SPEED_TIME, static_cast<long>(opts.low_speed_time.count()),
          "CURLOPT_LOW_SPEED_TIME");
    }
    set(CURLOPT_ERRORBUFFER, errbuf, "CURLOPT_ERRORBUFFER");
    set(CURLOPT_HEADERFUNCTION, &impl::on_header, "CURLOPT_HEADERFUNCTION");
    set(CURLOPT_HEADERDATA, static_cast<void*>(this), "CURLOPT_HEADERDATA");
    set(CURLOPT_WRITEFUNCTION, &impl::on_write, "CURLOPT_WRITEFUNCTION");
    set(CURLOPT_WRITEDATA, static_cast<void*>(this), "CURLOPT_WRITEDATA");
    set(CURLOPT_USERAGENT, "egress-engine", "CURLOPT_USERAGENT");
    // No Accept-Encoding: the bytes hashed must be the image's own bytes.
    if (opts.offset > 0)
      set(CURLOPT_RANGE, range.c_str(), "CURLOPT_RANGE");  // libcurl copies it
    if (err)
      return err;
    if (auto mc = curl_multi_add_handle(multi, easy); mc != CURLM_OK)
      return fail(ec::source_failed, std::string{"curl_multi_add_handle: "}
                                       + curl_multi_strerror(mc));
    added = true;
    return {};
  }
};

caf::expected<std::unique_ptr<download>> download::open(fetch_options opts,
                                                        std::optional<sha256> seeded) {
  global_init();
  auto where = redact_url(opts.url);
  auto bad = [&](const std::string& why) {
    return make_error(ec::invalid_argument, (where.empty() ? "image URL" : where) + ": " + why);
  };
  curlu_ptr u{curl_url()};
  if (!u)
    return bad("libcurl could not allocate a URL handle");
  if (auto rc = curl_url_set(u.get(), CURLUPART_URL, opts.url.c_str(), 0); rc != CURLUE_OK)
    return bad(std::string{"not a valid URL: "} + curl_url_strerror(rc));
  curl_string scheme;
  if (curl_url_get(u.get(), CURLUPART_SCHEME, &scheme.p, 0) != CURLUE_OK)
    return bad("no scheme");
  std::string s = scheme.p;
  if (s != "http" && s != "https" && s != "file")
    return bad("unsupported scheme \"" + s + "\" (http, https or file)");
  if (opts.deadline.count() <= 0)
    return bad("the deadline must be positive");
  if (opts.connect_timeout.count() < 0 || opts.low_speed_limit < 0
      || opts.low_speed_time.count() < 0)
    return bad("timeouts and the low-speed limit must not be negative");
  if (opts.expected_length && opts.offset > *opts.expected_length)
    return bad("resume offset " + std::to_string(opts.offset) + " is beyond the expected length "
               + std::to_string(*opts.expected_length));
  if (opts.expected_sha256) {
    auto& h = *opts.expected_sha256;
    std::transform(h.begin(), h.end(), h.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (h.size() != 64 || h.find_first_not_of("0123456789abcdef") != std::string::npos)
      return bad("expected sha256 \"" + h + "\" is not 64 hex digits");
  }
  if (seeded && seeded->size() != opts.offset)
    return bad("the seeded hasher holds " + bytes(seeded->size()) + ", the resume offset is "
               + std::to_string(opts.offset));
  if (opts.expected_sha256 && opts.offset > 0 && !seeded)
    return bad("cannot verify sha256 when resuming at " + std::to_string(opts.offset)
               + " without a hasher seeded with the bytes before it");

  auto d = std::make_unique<impl>(std::move(opts));
  d->where = std::move(where);
  d->whole_digest = d->opts.offset == 0 || seeded.has_value();
  if (seeded)
    d->hasher = std::move(*seeded);
  if (d->opts.expected_length)
    d->total = d->opts.expected_length;
  if (s == "file") {
    curl_string host;
    auto rc = curl_url_get(u.get(), CURLUPART_HOST, &host.p, 0);
    if (rc == CURLUE_OK && host.p && *host.p && std::string_view{host.p} != "localhost")
      return bad("a file URL must name a local path (no host)");
    curl_string path;
    if (auto prc = curl_url_get(u.get(), CURLUPART_PATH, &path.p, CURLU_URLDECODE);
        prc != CURLUE_OK)
      return bad(std::string{"bad path: "} + curl_url_strerror(prc));
    d->is_file = true;
    d->file_path = path.p;
  }
  if (d->opts.expected_length && d->opts.offset == *d->opts.expected_length) {
    // Everything is stored already: nothing to ask any server for.
    d->nothing_left = true;
    d->started = true;
    d->pos = d->opts.offset;
    d->resumed = d->opts.offset > 0;
  } else if (!d->is_file) {
    if (auto err = d->setup_curl())
      return err;
  }
  return std::unique_ptr<download>{new download(std::move(d))};
}

download::download(std::unique_ptr<impl> p) : p_(std::move(p)) {}

download::~download() = default;

caf::expected<size_t> download::read(char* buf, size_t cap) {
  auto& d = *p_;
  if (d.failed)
    return *d.failed;
  if (d.complete)
    return size_t{0};
  if (!buf || cap == 0)
    return make_error(ec::invalid_argument, d.where + ": read() with an empty buffer");
  caf::expected<size_t> r = size_t{0};
  if (d.nothing_left)
    r = d.verify();
  else if (d.is_file)
    r = d.read_file(buf, cap);
  else
    r = d.read_curl(buf, cap);
  if (!r)
    d.failed = r.error();
  return r;
}

caf::expected<size_t> download::read_full(char* buf, size_t cap) {
  size_t have = 0;
  while (have < cap) {
    auto n = read(buf + have, cap - have);
    if (!n)
      return n.error();
    if (*n == 0)
      break;
    have += *n;
  }
  return have;
}

uint64_t download::received() const {
  return p_->received;
}

std::optional<uint64_t> download::total() const {
  return p_->total;
}

bool download::resumed() const {
  return p_->resumed;
}

std::string download::digest() const {
  return p_->complete ? p_->digest : std::string{};
}

} // namespace egress::mirror
