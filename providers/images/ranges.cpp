#include "providers/images/ranges.hpp"

#include <algorithm>
#include <sstream>

namespace egress::images {

namespace {

constexpr uint64_t mib = uint64_t{1} << 20;
// More would be a partial mark nobody wrote: the config allows 8 streams.
constexpr size_t max_recorded_ranges = 64;

} // namespace

range_plan plan_ranges(uint64_t total, uint32_t streams, uint64_t min_range) {
  min_range = std::max(min_range, mib);
  uint64_t n = std::max<uint64_t>(1, std::min<uint64_t>(streams, total / min_range));
  range_plan plan;
  uint64_t step = ((total + n - 1) / n + mib - 1) / mib * mib;
  for (uint64_t begin = 0; begin < total; begin += step)
    plan.push_back({begin, std::min(total, begin + step)});
  if (plan.empty())
    plan.push_back({0, total});
  return plan;
}

std::string plan_line(const range_plan& plan) {
  std::string out = "ranges";
  for (auto& r : plan)
    out += " " + std::to_string(r.begin);
  out += " " + std::to_string(plan.empty() ? 0 : plan.back().end) + "\n";
  return out;
}

std::optional<range_plan> recorded_plan(const std::string& partial_mark, uint64_t total) {
  static const std::string key = "\nranges ";
  auto at = partial_mark.find(key);
  if (at == std::string::npos)
    return std::nullopt;
  auto line_end = partial_mark.find('\n', at + key.size());
  if (line_end == std::string::npos)
    return std::nullopt;
  std::istringstream in{partial_mark.substr(at + key.size(), line_end - at - key.size())};
  std::vector<uint64_t> cuts;
  uint64_t x = 0;
  while (cuts.size() <= max_recorded_ranges + 1 && in >> x)
    cuts.push_back(x);
  if (!in.eof() || cuts.size() < 2 || cuts.size() > max_recorded_ranges + 1
      || cuts.front() != 0 || cuts.back() != total)
    return std::nullopt;
  range_plan plan;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    if (cuts[i] >= cuts[i + 1])
      return std::nullopt;
    plan.push_back({cuts[i], cuts[i + 1]});
  }
  return plan;
}

} // namespace egress::images
