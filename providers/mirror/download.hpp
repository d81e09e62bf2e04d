#pragma once
// One image download as a pull source for lv::upload_volume: the caller asks
// for bytes (read), and the transfer advances only inside that call, on the
// caller's thread. Length and sha256 are checked while the bytes pass, so an
// image is never read twice and never reported complete unless verified.
//
//   auto d = mirror::download::open({.url = u, .expected_length = n,
//                                    .expected_sha256 = h, .deadline = 30min});
//   if (!d) return d.error();                     // invalid_argument, no I/O yet
//   lv::upload_volume(c, vol, 0, 0, [&](char* b, size_t cap) { return (*d)->read(b, cap); });
//
// http and https go through libcurl (multi interface, one easy handle,
// driven from read(): curl_multi_perform + curl_multi_poll, the pattern of
// curl's fopen.c example). No thread is started and nothing outlives the
// object: the handles are freed by the destructor, whatever state the
// transfer is in. file:// is read with POSIX calls instead of libcurl,
// because libcurl's file protocol pushes the whole file through the write
// callback inside one curl_multi_perform: a pull source would have to hold
// the entire image in memory.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "providers/mirror/sha256.hpp"

namespace egress::mirror {

struct fetch_options {
  /// http://, https:// or file:// (file:///path or file://localhost/path).
  std::string url;
  /// Deliver the image from this byte on (the bytes the volume already
  /// holds). HTTP asks with "Range: bytes=offset-"; see download::resumed().
  uint64_t offset = 0;
  /// The whole image's length, if configured: a server that declares or
  /// sends another length fails permanently (ec::length_mismatch), as early
  /// as it shows (the headers, or the first byte too many).
  std::optional<uint64_t> expected_length;
  /// The whole image's sha256 (hex; case is ignored), if configured. It can
  /// only be checked over the whole image: with offset > 0 the caller must
  /// pass a hasher seeded with the first `offset` bytes, or open() refuses
  /// (an unverifiable resume would otherwise pass silently).
  std::optional<std::string> expected_sha256;
  /// Total time for the transfer, redirects included (CURLOPT_TIMEOUT_MS).
  /// It runs on wall time from the first read(), including time the caller
  /// spends between reads. Must be > 0.
  std::chrono::milliseconds deadline{0};
  std::chrono::milliseconds connect_timeout{10000};
  /// Fewer than low_speed_limit bytes/s for low_speed_time ends the transfer
  /// (transient source_timeout): a stalled mirror ends through read(), not
  /// through a socket kill. 0 disables the check.
  long low_speed_limit = 1024;
  std::chrono::seconds low_speed_time{30};
  /// A CA bundle used instead of the system one (CURLOPT_CAINFO), e.g. a
  /// private mirror's CA. Verification of peer and host name stays on.
  std::string ca_file;
  /// Set by another thread to give the download up: read() returns
  /// transient ec::shutting_down within about 100 ms, also while libcurl
  /// waits on a stalled mirror (which no socket kill of ours reaches). The
  /// image actor sets it when it abandons a fill or exits.
  std::shared_ptr<const std::atomic<bool>> cancel;
};

class download {
public:
  /// Validates the options and prepares the transfer; does no I/O (the first
  /// read() connects). Every failure is ec::invalid_argument: a URL libcurl
  /// cannot parse, a scheme other than http/https/file, a file:// URL
  /// naming a remote host, deadline <= 0, offset beyond expected_length, a
  /// malformed expected_sha256, a digest that cannot be checked (offset > 0
  /// without `seeded`), or a seed whose size() is not `offset`.
  ///
  /// `seeded`: a hasher already fed with the image's first `offset` bytes
  /// (read back from where they are stored), so the digest covers the whole
  /// image although only the rest is downloaded.
  static caf::expected<std::unique_ptr<download>>
  open(fetch_options opts, std::optional<sha256> seeded = std::nullopt);

  ~download();
  download(const download&) = delete;
  download& operator=(const download&) = delete;

  /// Fills `buf` with up to `cap` bytes of the image (from the offset on)
  /// and returns how many; blocks until at least one byte, the end or an
  /// error. 0 means complete AND verified: the length matches every length
  /// known (expected_length, Content-Length, Content-Range), and the sha256
  /// matches expected_sha256 when one is given. Errors (the context names
  /// the URL, without userinfo, query or fragment, and what happened):
  /// - transient source_failed: HTTP 5xx, 408, 429; refused, reset, DNS,
  ///   TLS handshake failure; the connection ended before the declared
  ///   length (CURLE_PARTIAL_FILE: a cut transfer resumes, it is not a
  ///   property of the image); a file read error;
  /// - transient source_timeout: the deadline or the low-speed limit;
  /// - not_found source_not_found: HTTP 404/410, a missing file;
  /// - permanent access_denied: HTTP 401/403/407, an unreadable file;
  /// - permanent source_rejected: any other 4xx or unexpected status, TLS
  ///   verification failure, more than 5 redirects or a redirect to another
  ///   protocol, a 206 for another range than asked;
  /// - permanent length_mismatch / digest_mismatch, naming expected and got.
  /// Errors are sticky: every later read() returns the same error; after the
  /// end every later read() returns 0 again. cap 0 is invalid_argument.
  caf::expected<size_t> read(char* buf, size_t cap);

  /// read() until `cap` bytes or the end: fewer only where the image ends
  /// (whole buffers keep blocks aligned for whoever cuts them up).
  caf::expected<size_t> read_full(char* buf, size_t cap);

  /// Bytes delivered by read() so far (this transfer, from the offset on).
  uint64_t received() const;
  /// The whole image's length if known: configured, or declared by the
  /// server (Content-Length of a 200, the total of a 206's Content-Range),
  /// or the file's size. Known after the first read() at the latest.
  std::optional<uint64_t> total() const;
  /// The source honoured the offset: a 206 for the range asked, or a file.
  /// A server that ignores Range answers 200 with the whole image; the
  /// download then drops the first `offset` bytes itself (they are already
  /// stored, and a restart from 0 would upload them again), so read()
  /// delivers the same bytes either way and resumed() is false. The dropped
  /// bytes are not hashed: with a seed, the digest covers what is stored.
  bool resumed() const;
  /// The whole image's sha256 (lowercase hex) once read() returned 0 and
  /// the digest covers the whole image (offset 0, or a seed); else "".
  std::string digest() const;

private:
  struct impl;
  explicit download(std::unique_ptr<impl> p);
  std::unique_ptr<impl> p_;
};

/// `url` for messages: scheme, host, port and path only (userinfo, query and
/// fragment may carry secrets). A URL that does not parse is shown up to its
/// first '?' with any "user:pass@" removed.
std::string redact_url(const std::string& url);

} // namespace egress::mirror
