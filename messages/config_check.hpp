#pragma once
// The parts of the configuration's validation that the file loader
// (runtime/config_file.cpp) shares: the problem list it fills while it reads
// types, the ranges it checks while reading, and the semantic check it runs
// last. Not an interface for anyone else: an application calls validate().

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <caf/error.hpp>

#include "messages/config.hpp"

namespace egress::config_check {

/// Collects one line per problem. The loader reads types first and checks
/// meaning second; a key that already has a problem (or lies under one) gets
/// no second line, so a missing name is not also reported as an invalid name.
class problems {
public:
  explicit problems(const std::string& file);

  void add(const std::string& path, const std::string& text);

  /// Suppresses later problems at `path` whose cause is reported elsewhere.
  void silence(const std::string& path);

  bool empty() const { return lines_.empty(); }

  /// A permanent ec::config_invalid error with every line.
  caf::error to_error() const;

private:
  bool silent(const std::string& path) const;

  std::string prefix_;
  std::vector<std::string> reported_;
  std::vector<std::string> lines_;
};

struct range {
  int64_t lo;
  int64_t hi;
};

inline constexpr range max_calls_range{1, 64};
inline constexpr range max_creates_range{1, 64};
inline constexpr range upload_streams_range{1, 8};
inline constexpr range vcpus_range{1, 64};
inline constexpr range memory_mib_range{64, 1'048'576};
inline constexpr range port_range{1, 65'535};
inline constexpr range keepalive_count_range{1, 100};
inline constexpr range probe_count_range{1, 100};
inline constexpr range group_count_range{0, 100'000};
inline constexpr range max_proxies_range{0, 1'000'000};
inline constexpr range max_surge_range{1, 1'000};

/// Reports `x` outside `r` at `path`; true when it is inside.
bool check_range(problems& out, const std::string& path, int64_t x, range r);

/// "a.b" from ("a", "b"); "b" from ("", "b").
std::string at(const std::string& path, std::string_view key);

/// "a[2]" from ("a", 2).
std::string at(const std::string& path, size_t index);

/// "x, y, z".
std::string join(const std::vector<std::string>& xs);

bool contains(const std::vector<std::string>& xs, const std::string& x);

/// "test" for a test:// URI, else "kvm": a host's domain type when unset.
std::string default_domain_type(const std::string& uri);

/// Every semantic check of validate(), adding to `out`.
void check_config(problems& out, const engine_config& cfg);

} // namespace egress::config_check
