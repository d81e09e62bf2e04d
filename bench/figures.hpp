// A benchmark's figures as CSV, beside the table it prints: scripts/bench
// sets EGRESS_BENCH_CSV to a file per benchmark and draws it with the
// gnuplot script of the same name (bench/plots/). Unset, nothing is written.
// Rows are appended, so several runs of one benchmark (bench/scale at
// several proxy counts) make one file; the header is written only into an
// empty file.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <string>

namespace egress::test {

class figures {
public:
  figures(std::initializer_list<const char*> columns) {
    const char* path = std::getenv("EGRESS_BENCH_CSV");
    if (path == nullptr || *path == '\0')
      return;
    file_ = std::fopen(path, "a");
    if (file_ == nullptr) {
      std::fprintf(stderr, "figures: cannot append to %s\n", path);
      return;
    }
    std::fseek(file_, 0, SEEK_END);
    if (std::ftell(file_) == 0)
      write(columns);
  }
  figures(const figures&) = delete;
  figures& operator=(const figures&) = delete;
  ~figures() {
    if (file_ != nullptr)
      std::fclose(file_);
  }

  // One row; numbers go through cell() so every benchmark writes them alike.
  void row(std::initializer_list<std::string> cells) {
    if (file_ != nullptr)
      write(cells);
  }

  static std::string cell(double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", x);
    return buf;
  }
  // Labels become one word (gnuplot iterates over them split at blanks).
  static std::string cell(std::string label) {
    for (auto& c : label)
      if (c == ' ' || c == ',' || c == '"')
        c = '_';
    return label;
  }

private:
  template <class List>
  void write(const List& cells) {
    bool first = true;
    for (const auto& c : cells) {
      std::fprintf(file_, "%s%s", first ? "" : ",", std::string{c}.c_str());
      first = false;
    }
    std::fprintf(file_, "\n");
    std::fflush(file_);
  }

  std::FILE* file_ = nullptr;
};

} // namespace egress::test
