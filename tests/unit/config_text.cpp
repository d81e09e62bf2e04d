#define BOOST_TEST_MODULE config_text
// The configuration file as bytes, before CAF's parser sees it
// (runtime/config_text.hpp, docs/spec.md 25): every input CAF 0.17 would
// crash on, hang on, or take silently is refused with its line and column.
#include <boost/test/unit_test.hpp>

#include <string>

#include <sys/stat.h>
#include <unistd.h>

#include "messages/error.hpp"
#include "runtime/config_text.hpp"
#include "testbed/testbed.hpp"

using namespace egress;
using namespace std::string_literals;

namespace {

const std::string good = "[engine]\n"
                         "entry = \"lab\" ; a comment with = and [ and {\n"
                         "poll-interval = 2s\n"
                         "probe = { mode = \"tcp\", interval = 5s }\n"
                         "hosts = [ { name = \"hv1\", test-node = \"a.xml\" },\n"
                         "          { name = \"hv2\", test-node = \"b.xml\" } ]\n"
                         "[scheduler]\n"
                         "max-threads = 2\n";

std::string problems(const std::string& text) {
  auto err = check_config_text("engine.ini", text);
  return err ? detail(err) : std::string{};
}

} // namespace

BOOST_AUTO_TEST_CASE(a_plain_config_passes) {
  BOOST_CHECK_EQUAL(problems(good), "");
  // The same key in two dicts of one list, or in two sections, is no
  // duplicate.
  BOOST_CHECK_EQUAL(problems("[a]\nx = 1\n[b]\nx = 2\n"), "");
}

BOOST_AUTO_TEST_CASE(spec_25_deep_nesting_is_refused_before_caf_recurses) {
  auto text = "[engine]\nx = " + std::string(50'000, '[') + "\n";
  auto p = problems(text);
  BOOST_TEST_MESSAGE(p);
  BOOST_CHECK(p.find("engine.ini:2:") == 0);
  BOOST_CHECK(p.find("nested more than 32 levels deep") != std::string::npos);
  BOOST_CHECK_LT(p.size(), 400u); // one line, not 50,000
  BOOST_CHECK_EQUAL(problems("[e]\nx = " + std::string(32, '[') + std::string(32, ']')), "");
}

BOOST_AUTO_TEST_CASE(spec_25_a_nul_or_control_byte_is_refused_with_line_and_column) {
  auto p = problems("[engine]\nentry = \"lab\"\nx = 1\0hidden = 2\n"s);
  BOOST_CHECK(p.find("engine.ini:3:6: a NUL byte") == 0);
  auto q = problems("[engine]\nentry = \"l\x1b[2Jab\"\n");
  BOOST_CHECK(q.find("engine.ini:2:11: control byte \"\\x1b\"") == 0);
}

BOOST_AUTO_TEST_CASE(spec_25_a_duration_that_wraps_is_refused) {
  auto p = problems("[engine]\npoll-interval = 5124096h\n");
  BOOST_CHECK(p.find("engine.ini:2:17: duration \"5124096h\" does not fit") == 0);
  BOOST_CHECK(!problems("[e]\nx = 99999999999999999999999ms\n").empty());
  BOOST_CHECK_EQUAL(problems("[e]\nx = 2562047h\ny = 9223372036854775807ns\n"), "");
}

BOOST_AUTO_TEST_CASE(spec_25_a_duplicate_key_is_refused_naming_both_lines) {
  auto p = problems("[engine]\nentry = \"a\"\ngc = true\nentry = \"b\"\n");
  BOOST_CHECK_EQUAL(p, "engine.ini:4:1: duplicate key \"entry\" (first at line 2; CAF would "
                       "keep the first and drop this one)");
  auto q = problems("[engine]\nprobe = { mode = \"tcp\",\n  mode = \"http\" }\n");
  BOOST_CHECK(q.find("engine.ini:3:3: duplicate key \"mode\" (first at line 2") == 0);
  // A section given twice merges in CAF: a key in both is a duplicate too.
  BOOST_CHECK(!problems("[engine]\ngc = true\n[x]\n[engine]\ngc = false\n").empty());
}

BOOST_AUTO_TEST_CASE(spec_25_only_a_bounded_regular_file_is_read) {
  testbed::temp_dir dir{"cfgtext"};
  auto fifo = dir / "fifo.ini";
  BOOST_REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  auto r = read_config_file(fifo); // returns at once: no writer needed
  BOOST_REQUIRE(!r);
  BOOST_CHECK(detail(r.error()).find("is a FIFO, not a regular file") != std::string::npos);
  auto d = read_config_file(dir.path());
  BOOST_REQUIRE(!d);
  BOOST_CHECK(detail(d.error()).find("is a directory") != std::string::npos);
  auto big = dir / "big.ini";
  testbed::write_file(big, std::string(max_config_bytes + 1, ';'));
  auto b = read_config_file(big);
  BOOST_REQUIRE(!b);
  BOOST_CHECK(detail(b.error()).find("at most 1048576") != std::string::npos);
  auto ok = dir / "ok.ini";
  testbed::write_file(ok, good);
  auto o = load_config_text(ok);
  BOOST_REQUIRE_MESSAGE(o, (o ? std::string{} : render(o.error())));
  BOOST_CHECK_EQUAL(*o, good);
  BOOST_CHECK(!read_config_file(dir / "missing.ini"));
}
