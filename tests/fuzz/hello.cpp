// libFuzzer entry for egress::fuzz::hello (tests/fuzz/targets.hpp).
#include "fuzz/targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  egress::fuzz::hello(data, size);
  return 0;
}
