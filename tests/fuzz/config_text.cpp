// libFuzzer entry for egress::fuzz::config_text (tests/fuzz/targets.hpp).
#include "fuzz/targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  egress::fuzz::config_text(data, size);
  return 0;
}
