#define BOOST_TEST_MODULE fuzz_corpus
// Every input kept in the fuzz corpus (tests/fuzz/corpus/<target>/), run
// through its target (tests/fuzz/targets.hpp) in every test run: an input
// that once crashed a target stays fixed. The fuzzing itself is
// scripts/fuzz (libFuzzer, clang), which CI runs for a bounded time.
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <string>

#include "fuzz/targets.hpp"
#include "testbed/testbed.hpp"

namespace fs = std::filesystem;

namespace {

size_t replay(const std::string& target, void (*f)(const uint8_t*, size_t)) {
  size_t n = 0;
  for (auto& e : fs::directory_iterator(std::string{EGRESS_SOURCE_DIR} + "/tests/fuzz/corpus/"
                                        + target)) {
    auto bytes = egress::testbed::read_file(e.path().string());
    BOOST_TEST_CONTEXT(e.path().string()) {
      f(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    }
    ++n;
  }
  return n;
}

} // namespace

BOOST_AUTO_TEST_CASE(spec_24_25_the_fuzz_corpus_replays_cleanly) {
  BOOST_CHECK_GT(replay("config_text", egress::fuzz::config_text), 0u);
  BOOST_CHECK_GT(replay("scrape_request", egress::fuzz::scrape_request), 0u);
  BOOST_CHECK_GT(replay("hello", egress::fuzz::hello), 0u);
}
