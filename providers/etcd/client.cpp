// etcd v3 through its JSON gateway (see client.hpp). Every answer shape this
// file reads, and every error it maps, was measured on Debian 12's etcd
// 3.4.23: docs/notes/etcd.md.

#include "providers/etcd/client.hpp"

#include <algorithm>
#include <charconv>
#include <mutex>
#include <stdexcept>
#include <string_view>

#include <curl/curl.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "messages/error.hpp"
#include "providers/etcd/answers.hpp"

namespace egress::etcd {

namespace {

using namespace gateway;
using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;
using std::chrono::milliseconds;
using on_events_fn = std::function<void(int64_t, std::vector<watch_event>)>;

void global_init() {
  // Once per process, never cleaned up: other libcurl users in the process
  // (providers/mirror/download.cpp) may rely on it.
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct easy_deleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
using easy_ptr = std::unique_ptr<CURL, easy_deleter>;

struct multi_deleter {
  void operator()(CURLM* m) const { curl_multi_cleanup(m); }
};
using multi_ptr = std::unique_ptr<CURLM, multi_deleter>;

struct slist_deleter {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};
using slist_ptr = std::unique_ptr<curl_slist, slist_deleter>;

struct curlu_deleter {
  void operator()(CURLU* u) const { curl_url_cleanup(u); }
};

// -- options --------------------------------------------------------------------

/// "" or what is wrong with an endpoint: http(s)://host:port, nothing more.
std::string endpoint_problem(const std::string& endpoint) {
  std::unique_ptr<CURLU, curlu_deleter> u{curl_url()};
  if (!u || curl_url_set(u.get(), CURLUPART_URL, endpoint.c_str(), 0) != CURLUE_OK)
    return "not a URL";
  auto part = [&](CURLUPart p) {
    char* text = nullptr;
    std::string value;
    if (curl_url_get(u.get(), p, &text, 0) == CURLUE_OK && text)
      value = text;
    curl_free(text);
    return value;
  };
  auto scheme = part(CURLUPART_SCHEME);
  if (scheme != "http" && scheme != "https")
    return "the scheme is not http or https";
  if (part(CURLUPART_PORT).empty())
    return "no port";
  if (!part(CURLUPART_USER).empty() || !part(CURLUPART_QUERY).empty()
      || !part(CURLUPART_FRAGMENT).empty())
    return "more than http(s)://host:port";
  auto path = part(CURLUPART_PATH);
  if (!path.empty() && path != "/")
    return "a path (" + path + ")";
  return {};
}

caf::error check_file(const std::string& path, const char* what) {
  if (path.empty())
    return {};
  if (path.front() != '/')
    return make_error(ec::invalid_argument,
                      std::string{"etcd: the "} + what + " " + path + " is not an absolute path");
  if (::access(path.c_str(), R_OK) != 0)
    return make_error(ec::invalid_argument,
                      std::string{"etcd: the "} + what + " " + path + " is not readable");
  return {};
}

/// The endpoints without a trailing slash (paths are appended to them).
caf::error check_options(client_options& opts) {
  if (opts.endpoints.empty())
    return make_error(ec::invalid_argument, "etcd: no endpoint");
  for (auto& e : opts.endpoints) {
    if (auto why = endpoint_problem(e); !why.empty())
      return make_error(ec::invalid_argument,
                        "etcd: endpoint \"" + e + "\" is not http(s)://host:port: " + why);
    if (e.back() == '/')
      e.pop_back();
  }
  if (auto err = check_file(opts.ca_file, "CA file"))
    return err;
  if (auto err = check_file(opts.cert_file, "client certificate"))
    return err;
  if (auto err = check_file(opts.key_file, "client key"))
    return err;
  if (opts.timeout <= milliseconds{0})
    return make_error(ec::invalid_argument, "etcd: the timeout must be positive");
  return {};
}

// -- one HTTP exchange ----------------------------------------------------------

/// Where a transfer's body goes: at most `max` bytes.
struct sink {
  std::string data;
  size_t max = 0;
  bool too_big = false;
  clock_type::time_point last_bytes = clock_type::now();
};

size_t on_write(char* p, size_t size, size_t n, void* user) {
  auto* s = static_cast<sink*>(user);
  size_t len = size * n;
  if (s->data.size() + len > s->max) {
    s->too_big = true;
    return CURL_WRITEFUNC_ERROR;
  }
  s->data.append(p, len);
  s->last_bytes = clock_type::now();
  return len;
}

/// The request's headers: JSON, our token if any, no "Expect:
/// 100-continue" (a round trip for nothing on a body over 1 KiB), and
/// etcd's require-leader metadata (the gateway passes Grpc-Metadata-*
/// headers on as gRPC metadata): a member cut off from its leader fails a
/// request at once, and cancels a watch it had confirmed, instead of
/// leaving it silent while the others move on.
slist_ptr request_headers(const std::string& token) {
  curl_slist* l = curl_slist_append(nullptr, "Content-Type: application/json");
  l = curl_slist_append(l, "Expect:");
  l = curl_slist_append(l, "Grpc-Metadata-hasleader: true");
  if (!token.empty())
    l = curl_slist_append(l, ("Authorization: " + token).c_str());
  return slist_ptr{l};
}

/// Everything but the body's sink and the timeouts, for one POST.
void set_post(CURL* c, const client_options& opts, const std::string& url,
              const std::string& body, curl_slist* headers, char* errbuf) {
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L); // many threads: no SIGALRM for DNS
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.c_str());
  curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_write);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(opts.timeout.count()));
  if (!opts.ca_file.empty())
    curl_easy_setopt(c, CURLOPT_CAINFO, opts.ca_file.c_str());
  if (!opts.cert_file.empty())
    curl_easy_setopt(c, CURLOPT_SSLCERT, opts.cert_file.c_str());
  if (!opts.key_file.empty())
    curl_easy_setopt(c, CURLOPT_SSLKEY, opts.key_file.c_str());
}

/// libcurl's results that no other endpoint or later attempt can change:
/// our TLS files are unusable, or the server's certificate does not verify
/// against our CA. Everything else (refused, reset, timed out, cut short)
/// may be the network or the member.
bool tls_refusal(CURLcode rc) {
  return rc == CURLE_PEER_FAILED_VERIFICATION || rc == CURLE_SSL_CACERT_BADFILE
         || rc == CURLE_SSL_CERTPROBLEM || rc == CURLE_SSL_CIPHER;
}

outcome transfer_failed(const std::string& endpoint, CURLcode rc, const char* errbuf) {
  std::string why = errbuf[0] ? errbuf : curl_easy_strerror(rc);
  while (!why.empty() && (why.back() == '\n' || why.back() == '\r'))
    why.pop_back();
  return failed(tls_refusal(rc) ? verdict::refused : verdict::unavailable, endpoint, why);
}

/// The request body of a watch of every key under `prefix`.
std::string watch_body(const std::string& prefix, int64_t start_revision) {
  json create{{"key", base64_encode(prefix.empty() ? std::string(1, '\0') : prefix)},
              {"range_end", base64_encode(prefix_end(prefix))},
              {"progress_notify", true}};
  if (start_revision > 0)
    create["start_revision"] = std::to_string(start_revision);
  return json{{"create_request", create}}.dump();
}

std::string millis(milliseconds d) {
  return std::to_string(d.count()) + " ms";
}

/// One /v3/watch stream: newline-delimited JSON objects, each
/// {"result":{...}} (docs/notes/etcd.md#watch). Returns a final outcome
/// once a line ends the watch; nothing while it goes on.
struct watch_reader {
  const std::string& endpoint;
  const on_events_fn& on_events;
  bool created = false;

  std::optional<outcome> line(const std::string& text) {
    auto j = json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object())
      return failed(verdict::garbage, endpoint, "a watch message that is not a JSON object: \""
                                                  + excerpt(text) + "\"");
    try {
      if (j.contains("error")) {
        auto o = judge_error(endpoint, j, 200);
        o.established = created;
        return o;
      }
      return result(object_field(j, "result"));
    } catch (const std::exception& e) {
      return failed(verdict::garbage, endpoint, std::string{e.what()} + ": \"" + excerpt(text)
                                                  + "\"");
    }
  }

  /// A created confirmation, a cancellation, a batch of events or a
  /// progress notification (no events: nothing to deliver).
  std::optional<outcome> result(const json& r) {
    if (bool_field(r, "canceled"))
      return canceled(r);
    created = created || bool_field(r, "created");
    auto events = parse_events(r);
    if (!events.empty())
      on_events(header_revision(r), std::move(events));
    return std::nullopt;
  }

  outcome canceled(const json& r) {
    auto reason = string_field(r, "cancel_reason");
    auto compacted = int_field(r, "compact_revision");
    outcome o;
    if (compacted > 0)
      o = failed(verdict::refused, endpoint, "the start revision was compacted: the oldest "
                                             "revision left is "
                                               + std::to_string(compacted));
    else if (says_token_expired(0, reason))
      o = failed(verdict::token_expired, endpoint, "etcd canceled the watch: " + reason);
    else
      o = failed(verdict::refused, endpoint,
                 "etcd canceled the watch: " + (reason.empty() ? "no reason given" : reason));
    o.established = created;
    return o;
  }

  /// Every whole line in `buffer`, consumed.
  std::optional<outcome> drain(std::string& buffer) {
    size_t start = 0;
    for (size_t nl; (nl = buffer.find('\n', start)) != std::string::npos; start = nl + 1) {
      auto text = buffer.substr(start, nl - start);
      if (text.find_first_not_of(" \r\t") == std::string::npos)
        continue;
      if (auto o = line(text)) {
        buffer.clear();
        return o;
      }
    }
    buffer.erase(0, start);
    return std::nullopt;
  }
};

} // namespace

std::string prefix_end(const std::string& prefix) {
  // As etcd's own clients do: drop trailing 0xff bytes (they cannot be
  // incremented) and increment the last byte left; nothing left means
  // "to the end of the keyspace", which etcd spells "\0".
  std::string end = prefix;
  while (!end.empty() && static_cast<unsigned char>(end.back()) == 0xff)
    end.pop_back();
  if (end.empty())
    return std::string(1, '\0');
  end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
  return end;
}

// -- the client -----------------------------------------------------------------

struct client::impl {
  client_options opts;

  std::mutex mtx;              // guards everything below
  size_t preferred = 0;        // the endpoint that answered last
  std::string token;           // etcd's auth token, "" until fetched
  std::vector<easy_ptr> idle;  // handles between calls: they keep their connections

  explicit impl(client_options o) : opts(std::move(o)) {}

  // -- handles --------------------------------------------------------------

  easy_ptr take_handle() {
    {
      std::lock_guard<std::mutex> guard{mtx};
      if (!idle.empty()) {
        auto c = std::move(idle.back());
        idle.pop_back();
        curl_easy_reset(c.get()); // keeps its live connection
        return c;
      }
    }
    return easy_ptr{curl_easy_init()};
  }

  void give_back(easy_ptr c) {
    // A handle per concurrent caller is kept; more are not worth their sockets.
    constexpr size_t keep = 8;
    std::lock_guard<std::mutex> guard{mtx};
    if (idle.size() < keep)
      idle.push_back(std::move(c));
  }

  /// The endpoints' indexes in the order to try them: the last one that
  /// answered first, then the rest in their configured order.
  std::vector<size_t> order() {
    std::lock_guard<std::mutex> guard{mtx};
    std::vector<size_t> out{preferred};
    for (size_t i = 0; i < opts.endpoints.size(); ++i)
      if (i != preferred)
        out.push_back(i);
    return out;
  }

  void answered(size_t index) {
    std::lock_guard<std::mutex> guard{mtx};
    preferred = index;
  }

  std::string current_token() {
    std::lock_guard<std::mutex> guard{mtx};
    return token;
  }

  /// Drops `stale` unless another caller has replaced it already.
  void forget_token(const std::string& stale) {
    std::lock_guard<std::mutex> guard{mtx};
    if (token == stale)
      token.clear();
  }

  // -- unary calls ------------------------------------------------------------

  outcome post_one(const std::string& endpoint, const std::string& path,
                   const std::string& body, const std::string& tok) {
    auto c = take_handle();
    if (!c)
      return failed(verdict::unavailable, endpoint, "curl_easy_init failed");
    char errbuf[CURL_ERROR_SIZE] = {};
    auto headers = request_headers(tok);
    sink out;
    out.max = opts.max_answer;
    set_post(c.get(), opts, endpoint + path, body, headers.get(), errbuf);
    curl_easy_setopt(c.get(), CURLOPT_WRITEDATA, &out);
    curl_easy_setopt(c.get(), CURLOPT_TIMEOUT_MS, static_cast<long>(opts.timeout.count()));
    auto rc = curl_easy_perform(c.get());
    long status = 0;
    curl_easy_getinfo(c.get(), CURLINFO_RESPONSE_CODE, &status);
    give_back(std::move(c));
    if (out.too_big)
      return failed(verdict::garbage, endpoint, "an answer larger than "
                                                  + std::to_string(opts.max_answer) + " bytes");
    if (rc != CURLE_OK)
      return transfer_failed(endpoint, rc, errbuf);
    return judge(endpoint, status, out.data);
  }

  /// One endpoint's failure as it is; several as one, naming each.
  outcome every_endpoint_failed(outcome last, const std::string& failures) const {
    if (opts.endpoints.size() > 1) {
      last.endpoint.clear();
      last.what = "no endpoint answered: " + failures;
    }
    return last;
  }

  /// The endpoints in order() until one answers: what it answered, or every
  /// endpoint's failure.
  outcome post_any(const std::string& path, const std::string& body, const std::string& tok) {
    std::string failures;
    outcome last;
    for (auto i : order()) {
      last = post_one(opts.endpoints[i], path, body, tok);
      if (last.v != verdict::unavailable) {
        answered(i);
        return last;
      }
      failures += (failures.empty() ? "" : "; ") + last.endpoint + ": " + last.what;
    }
    return every_endpoint_failed(std::move(last), failures);
  }

  /// Our token, fetched first if there is none: "" without a user.
  caf::expected<std::string> ensure_token() {
    if (opts.user.empty())
      return std::string{};
    if (auto t = current_token(); !t.empty())
      return t;
    json creds{{"name", opts.user}, {"password", opts.password}};
    auto o = post_any("/v3/auth/authenticate", creds.dump(), {});
    if (o.v == verdict::ok) {
      try {
        auto t = string_field(o.body, "token");
        if (t.empty())
          throw garbage("no token");
        std::lock_guard<std::mutex> guard{mtx};
        return token = t;
      } catch (const std::exception& e) {
        o = failed(verdict::garbage, o.endpoint, e.what());
      }
    }
    return to_error(o, "/v3/auth/authenticate", "as user " + opts.user);
  }

  /// `attempt(token)` with our token, and once more with a new one if etcd
  /// says the token expired; `auth_err` when no token could be had.
  template <class Attempt>
  outcome with_token(Attempt attempt, caf::error& auth_err) {
    for (int n = 0;; ++n) {
      auto tok = ensure_token();
      if (!tok) {
        auth_err = tok.error();
        return {};
      }
      auto o = attempt(*tok);
      if (o.v != verdict::token_expired || opts.user.empty() || n > 0)
        return o;
      forget_token(*tok);
    }
  }

  outcome exchange(const std::string& path, const std::string& body, caf::error& auth_err) {
    return with_token([&](const std::string& tok) { return post_any(path, body, tok); },
                      auth_err);
  }

  static caf::error to_error(const outcome& o, const std::string& path,
                             const std::string& subject) {
    auto where = "etcd " + (o.endpoint.empty() ? "" : o.endpoint + " ") + path
                 + (subject.empty() ? "" : " (" + subject + ")") + ": ";
    switch (o.v) {
    case verdict::ok: return {};
    case verdict::unavailable: return make_error(ec::store_unreachable, where + o.what);
    case verdict::garbage: return make_error(ec::store_garbage, where + o.what);
    case verdict::token_expired:
    case verdict::refused: return make_error(ec::store_refused, where + o.what);
    }
    return make_error(ec::store_garbage, where + o.what);
  }

  /// A request whose answer `read` turns into T; a shape it does not expect
  /// is store_garbage naming the endpoint and the answer.
  template <class T, class Read>
  caf::expected<T> call(const std::string& path, const json& body, const std::string& subject,
                        Read read) {
    caf::error auth_err;
    auto o = exchange(path, body.dump(), auth_err);
    if (auth_err)
      return auth_err;
    if (o.v != verdict::ok)
      return to_error(o, path, subject);
    try {
      return read(o.body);
    } catch (const std::exception& e) {
      o.v = verdict::garbage;
      o.what = std::string{e.what()} + ": \"" + excerpt(o.body.dump()) + "\"";
      return to_error(o, path, subject);
    }
  }

  // -- watch ------------------------------------------------------------------

  caf::error watch_all(const std::string& prefix, const std::string& body,
                       const on_events_fn& on_events, const std::atomic<bool>& cancel,
                       milliseconds idle);
  outcome watch_any(const std::string& body, const std::string& tok,
                    const on_events_fn& on_events, const std::atomic<bool>& cancel,
                    milliseconds idle);
  outcome watch_one(const std::string& endpoint, const std::string& body, const std::string& tok,
                    const on_events_fn& on_events, const std::atomic<bool>& cancel,
                    milliseconds idle);
  std::optional<outcome> pump_watch(CURLM* multi, sink& in, watch_reader& reader,
                                    const std::atomic<bool>& cancel, milliseconds idle);
  outcome watch_ended(CURLM* multi, sink& in, watch_reader& reader, const char* errbuf);
};

// -- watch ----------------------------------------------------------------------

namespace {

/// An easy handle added to a multi handle, removed again before either is
/// cleaned up (declared after both, so destroyed before them).
struct attached {
  CURLM* multi;
  CURL* easy;
  attached(CURLM* m, CURL* e) : multi(m), easy(e) { curl_multi_add_handle(m, e); }
  ~attached() { curl_multi_remove_handle(multi, easy); }
  attached(const attached&) = delete;
  attached& operator=(const attached&) = delete;
};

} // namespace

caf::error client::impl::watch_all(const std::string& prefix, const std::string& body,
                                   const on_events_fn& on_events,
                                   const std::atomic<bool>& cancel, milliseconds idle) {
  caf::error auth_err;
  auto o = with_token(
    [&](const std::string& tok) { return watch_any(body, tok, on_events, cancel, idle); },
    auth_err);
  if (auth_err)
    return auth_err;
  return to_error(o, "/v3/watch", "prefix " + printable(prefix));
}

/// The endpoints in order() until one confirms the watch; once it has, the
/// watch stays on that endpoint until it ends (the caller watches again from
/// the revision it has seen).
outcome client::impl::watch_any(const std::string& body, const std::string& tok,
                                                const on_events_fn& on_events,
                                                const std::atomic<bool>& cancel,
                                                milliseconds idle) {
  std::string failures;
  outcome last;
  for (auto i : order()) {
    last = watch_one(opts.endpoints[i], body, tok, on_events, cancel, idle);
    if (last.v != verdict::unavailable || last.established) {
      answered(i);
      return last;
    }
    failures += (failures.empty() ? "" : "; ") + last.endpoint + ": " + last.what;
  }
  return every_endpoint_failed(std::move(last), failures);
}

outcome client::impl::watch_one(const std::string& endpoint,
                                                const std::string& body, const std::string& tok,
                                                const on_events_fn& on_events,
                                                const std::atomic<bool>& cancel,
                                                milliseconds idle) {
  multi_ptr multi{curl_multi_init()};
  easy_ptr easy{curl_easy_init()};
  if (!multi || !easy)
    return failed(verdict::unavailable, endpoint, "curl_multi_init or curl_easy_init failed");
  char errbuf[CURL_ERROR_SIZE] = {};
  auto headers = request_headers(tok);
  // The sink holds what is not yet a whole line: max_answer bounds one
  // message, not the stream.
  sink in;
  in.max = opts.max_answer;
  set_post(easy.get(), opts, endpoint + "/v3/watch", body, headers.get(), errbuf);
  curl_easy_setopt(easy.get(), CURLOPT_WRITEDATA, &in);
  attached guard{multi.get(), easy.get()};
  watch_reader reader{endpoint, on_events};
  if (auto o = pump_watch(multi.get(), in, reader, cancel, idle))
    return *o;
  return watch_ended(multi.get(), in, reader, errbuf);
}

/// Drives the transfer and reads its lines until the watch ends, `cancel`
/// is set (checked every 50 ms at most: libcurl's poll waits no longer), or
/// it is silent too long: before etcd confirms the watch that is `timeout`,
/// as for any request; after, `idle`. Nothing when the transfer itself
/// ended: watch_ended says how.
std::optional<outcome> client::impl::pump_watch(CURLM* multi, sink& in, watch_reader& reader,
                                                const std::atomic<bool>& cancel,
                                                milliseconds idle) {
  auto started = clock_type::now();
  for (;;) {
    if (cancel.load())
      return outcome{verdict::ok, reader.endpoint, {}, {}, reader.created};
    int running = 0;
    curl_multi_perform(multi, &running);
    if (auto o = reader.drain(in.data))
      return *o;
    if (running == 0)
      return std::nullopt;
    auto now = clock_type::now();
    if (!reader.created && now - started > opts.timeout)
      return failed(verdict::unavailable, reader.endpoint,
                    "no confirmation of the watch within " + millis(opts.timeout));
    if (reader.created && now - in.last_bytes > idle) {
      auto o = failed(verdict::unavailable, reader.endpoint,
                      "the watch stream was silent for " + millis(idle));
      o.established = true;
      return o;
    }
    curl_multi_poll(multi, nullptr, 0, 50, nullptr);
  }
}

/// The transfer ended: how (libcurl's result, and what etcd sent last
/// without a newline: an error answer).
outcome client::impl::watch_ended(CURLM* multi, sink& in, watch_reader& reader,
                                                  const char* errbuf) {
  CURLcode rc = CURLE_OK;
  int left = 0;
  while (CURLMsg* msg = curl_multi_info_read(multi, &left))
    if (msg->msg == CURLMSG_DONE)
      rc = msg->data.result;
  outcome o;
  if (in.too_big)
    o = failed(verdict::garbage, reader.endpoint, "a watch message larger than "
                                                    + std::to_string(opts.max_answer) + " bytes");
  else if (rc != CURLE_OK)
    o = transfer_failed(reader.endpoint, rc, errbuf);
  else if (auto last = in.data.find_first_not_of(" \r\n\t"); last != std::string::npos)
    o = reader.line(in.data).value_or(outcome{});
  if (o.v == verdict::ok)
    o = failed(verdict::unavailable, reader.endpoint, "etcd ended the watch stream");
  o.established = o.established || reader.created;
  return o;
}

// -- the API ----------------------------------------------------------------------

namespace {

json key_only(const std::string& key) {
  return json{{"key", base64_encode(key)}};
}

json put_request(const std::string& key, const std::string& value, int64_t lease_id) {
  auto r = key_only(key);
  r["value"] = base64_encode(value);
  if (lease_id != 0)
    r["lease"] = std::to_string(lease_id);
  return r;
}

/// A transaction of one comparison, one request on success and, if given,
/// one on failure.
json txn(json compare, const char* on_success, json success, const char* on_failure = nullptr,
         json failure = {}) {
  json t{{"compare", json::array({std::move(compare)})},
         {"success", json::array({json{{on_success, std::move(success)}}})}};
  if (on_failure)
    t["failure"] = json::array({json{{on_failure, std::move(failure)}}});
  return t;
}

json compare_revision(const std::string& key, const char* target, const char* field,
                      int64_t revision) {
  auto c = key_only(key);
  c["target"] = target;
  c["result"] = "EQUAL";
  c[field] = std::to_string(revision);
  return c;
}

} // namespace

caf::expected<std::shared_ptr<client>> client::make(client_options opts) {
  global_init();
  if (auto err = check_options(opts))
    return err;
  return std::shared_ptr<client>{new client(std::make_unique<impl>(std::move(opts)))};
}

client::client(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

client::~client() = default;

caf::expected<lease> client::grant(std::chrono::seconds ttl) {
  json body{{"TTL", std::to_string(ttl.count())}};
  return impl_->call<lease>("/v3/lease/grant", body, "TTL " + std::to_string(ttl.count()) + " s",
                            [](const json& a) {
                              lease l{int_field(a, "ID"), int_field(a, "TTL")};
                              if (l.id == 0)
                                throw garbage("no lease ID");
                              return l;
                            });
}

caf::expected<int64_t> client::keepalive(int64_t lease_id) {
  // A lease that is gone is answered like a live one, only without its TTL
  // (docs/notes/etcd.md#leases).
  json body{{"ID", std::to_string(lease_id)}};
  return impl_->call<int64_t>("/v3/lease/keepalive", body, "lease " + std::to_string(lease_id),
                              [](const json& a) { return std::max<int64_t>(0, int_field(a, "TTL")); });
}

caf::error client::revoke(int64_t lease_id) {
  const std::string path = "/v3/kv/lease/revoke";
  json body{{"ID", std::to_string(lease_id)}};
  caf::error auth_err;
  auto o = impl_->exchange(path, body.dump(), auth_err);
  if (auth_err)
    return auth_err;
  if (o.v == verdict::refused && o.what.find("requested lease not found") != std::string::npos)
    return {};
  return impl::to_error(o, path, "lease " + std::to_string(lease_id));
}

caf::expected<claim_result> client::claim(const std::string& key, const std::string& value,
                                          int64_t lease_id) {
  auto body = txn(compare_revision(key, "CREATE", "create_revision", 0), "request_put",
                  put_request(key, value, lease_id), "request_range", key_only(key));
  return impl_->call<claim_result>("/v3/kv/txn", body, "claim of " + printable(key),
                                   [](const json& a) {
                                     claim_result r;
                                     r.won = bool_field(a, "succeeded");
                                     r.revision = header_revision(a);
                                     if (r.won)
                                       return r;
                                     auto kvs = parse_kvs(txn_response(a, "response_range"));
                                     if (!kvs.empty())
                                       r.holder = std::move(kvs.front());
                                     return r;
                                   });
}

caf::expected<int64_t> client::put(const std::string& key, const std::string& value,
                                   int64_t lease_id) {
  return impl_->call<int64_t>("/v3/kv/put", put_request(key, value, lease_id),
                              "put of " + printable(key), header_revision);
}

caf::expected<bool> client::release(const std::string& key, int64_t mod_revision) {
  auto body = txn(compare_revision(key, "MOD", "mod_revision", mod_revision),
                  "request_delete_range", key_only(key));
  return impl_->call<bool>("/v3/kv/txn", body,
                           "release of " + printable(key) + " at mod_revision "
                             + std::to_string(mod_revision),
                           [](const json& a) {
                             return bool_field(a, "succeeded")
                                    && int_field(txn_response(a, "response_delete_range"),
                                                 "deleted")
                                         > 0;
                           });
}

caf::expected<range_result> client::range(const std::string& prefix) {
  // An empty key is refused ("key is not provided"): every key is "\0" to
  // prefix_end("").
  json body{{"key", base64_encode(prefix.empty() ? std::string(1, '\0') : prefix)},
            {"range_end", base64_encode(prefix_end(prefix))}};
  return impl_->call<range_result>("/v3/kv/range", body, "prefix " + printable(prefix),
                                   [](const json& a) {
                                     range_result r{header_revision(a), parse_kvs(a)};
                                     std::sort(r.kvs.begin(), r.kvs.end(),
                                               [](auto& x, auto& y) { return x.key < y.key; });
                                     return r;
                                   });
}

caf::error client::watch(const std::string& prefix, int64_t start_revision,
                         const on_events_fn& on_events, const std::atomic<bool>& cancel,
                         std::chrono::milliseconds idle) {
  return impl_->watch_all(prefix, watch_body(prefix, start_revision), on_events, cancel, idle);
}

} // namespace egress::etcd
