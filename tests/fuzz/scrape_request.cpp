// libFuzzer entry for egress::fuzz::scrape_request (tests/fuzz/targets.hpp).
#include "fuzz/targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  egress::fuzz::scrape_request(data, size);
  return 0;
}
