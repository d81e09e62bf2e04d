// The test-support library must not be empty; it also holds the one place
// where the harness decides how loud the engine is during tests.
#include "runtime/log.hpp"

namespace egress::test {

void quiet_engine_logs() { log::set_level(log::level::error); }

} // namespace egress::test
