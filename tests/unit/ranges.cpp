#define BOOST_TEST_MODULE ranges
// The plan of an upload in ranges (providers/images/ranges.hpp): how an image
// is split, and the plan a partial mark records read back (docs/spec.md 42).
#include <boost/test/unit_test.hpp>

#include <string>

#include "providers/images/ranges.hpp"

using namespace egress::images;

namespace {
constexpr uint64_t mib = uint64_t{1} << 20;
}

BOOST_AUTO_TEST_CASE(spec_42_a_plan_covers_the_image_in_mib_aligned_ranges) {
  for (uint64_t total : {128 * mib, 1024 * mib + 12345, 300 * mib + 1, 129 * mib - 7})
    for (uint32_t streams : {2u, 3u, 4u, 8u}) {
      auto plan = plan_ranges(total, streams, 64 * mib);
      BOOST_REQUIRE(!plan.empty());
      BOOST_CHECK_LE(plan.size(), streams);
      BOOST_CHECK_EQUAL(plan.front().begin, 0u);
      BOOST_CHECK_EQUAL(plan.back().end, total);
      for (size_t i = 0; i < plan.size(); ++i) {
        BOOST_CHECK_EQUAL(plan[i].begin % mib, 0u);
        BOOST_CHECK_LT(plan[i].begin, plan[i].end);
        if (i > 0)
          BOOST_CHECK_EQUAL(plan[i].begin, plan[i - 1].end);
      }
    }
}

BOOST_AUTO_TEST_CASE(spec_42_a_small_image_or_one_stream_is_one_range) {
  BOOST_CHECK_EQUAL(plan_ranges(127 * mib, 4, 64 * mib).size(), 1u);
  BOOST_CHECK_EQUAL(plan_ranges(1024 * mib, 1, 64 * mib).size(), 1u);
  BOOST_CHECK_EQUAL(plan_ranges(1024 * mib, 4, 64 * mib).size(), 4u);
  BOOST_CHECK_EQUAL(plan_ranges(200 * mib, 4, 64 * mib).size(), 3u);
}

BOOST_AUTO_TEST_CASE(spec_42_the_partial_mark_s_plan_reads_back_as_written) {
  auto plan = plan_ranges(1024 * mib + 5, 4, 64 * mib);
  auto mark = "partial; being written: egress image marker 1\nimage base\n" + plan_line(plan);
  auto back = recorded_plan(mark, 1024 * mib + 5);
  BOOST_REQUIRE(back);
  BOOST_CHECK(*back == plan);
  // Another length: the volume is not the one the plan was made for.
  BOOST_CHECK(!recorded_plan(mark, 1024 * mib));
}

BOOST_AUTO_TEST_CASE(a_mark_without_a_plan_or_with_a_broken_one_records_none) {
  const uint64_t total = 100;
  BOOST_CHECK(!recorded_plan("partial; being written: x\n", total));
  for (std::string bad : {"\nranges 0 100", "\nranges 0 50 50 100\n", "\nranges 10 100\n",
                          "\nranges 0 60 40 100\n", "\nranges 0 x 100\n", "\nranges 0\n",
                          "\nranges 0 99\n", "\nranges -1 100\n"})
    BOOST_CHECK_MESSAGE(!recorded_plan("partial" + bad, total), bad);
  std::string many = "\nranges";
  for (int i = 0; i < 100; ++i)
    many += " " + std::to_string(i);
  many += " 100\n";
  BOOST_CHECK(!recorded_plan("partial" + many, total));
  BOOST_CHECK(recorded_plan("partial\nranges 0 40 100\n", total));
}
