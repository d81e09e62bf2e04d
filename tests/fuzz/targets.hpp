#pragma once
// The fuzz targets' bodies: what the engine reads from parties it does not
// trust, fed any bytes. libFuzzer drives them (tests/fuzz/*.cpp, built and
// run by scripts/fuzz); tests/unit/fuzz_corpus.cpp replays the corpus kept
// beside them (tests/fuzz/corpus/<target>/) in every test run, so an input
// that once crashed stays a regression test. Each returns normally for any
// input; a crash, a hang or a sanitizer report is the finding.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "actors/parts/admission.hpp"
#include "actors/parts/metrics_request.hpp"
#include "runtime/config_text.hpp"

namespace egress::fuzz {

/// The configuration file's bytes (runtime/config_text.hpp).
inline void config_text(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  if (auto err = check_config_text("fuzz.ini", text))
    (void) err;
}

/// A metrics client's request (actors/parts/metrics_request.hpp): every split of
/// the bytes into a prefix that arrived so far must give a sane verdict.
inline void scrape_request(const uint8_t* data, size_t size) {
  std::string_view all(reinterpret_cast<const char*>(data), size);
  for (size_t n : {size / 3, size / 2, size}) {
    auto r = parse_scrape_request(all.substr(0, n));
    if (r.state == egress::scrape_request::verdict::complete
        && (r.method.size() > max_request_bytes || r.path.size() > max_request_bytes
            || r.query.size() > max_request_bytes))
      __builtin_trap();
    // The query's `after` (GET /rotation?after=G) from whatever came.
    (void) parse_after(r.query);
  }
}

/// A hello's fields (actors/parts/admission.hpp), split from the bytes at NULs:
/// a party nonce, then a node nonce, a party nonce and a proof, then a token.
inline void hello(const uint8_t* data, size_t size) {
  static admission gate{"correct horse battery staple"};
  std::string_view all(reinterpret_cast<const char*>(data), size);
  std::string f[5];
  for (auto& x : f) {
    auto nul = all.find('\0');
    x = std::string{all.substr(0, nul)};
    all = nul == std::string_view::npos ? std::string_view{} : all.substr(nul + 1);
  }
  auto [nonce, proof] = gate.challenge(f[0]);
  (void) proof;
  if (!gate.admit(f[1], f[2], f[3]).empty())
    __builtin_trap(); // no proof of ours can be guessed
  if (!gate.admit(nonce, f[0], f[3]).empty() && f[3].size() != 64)
    __builtin_trap();
  (void) gate.valid(f[4]);
  (void) gate.valid_for_events(f[4]);
}

} // namespace egress::fuzz
