#include "runtime/config_text.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <string_view>
#include <vector>

#include "base/fd.hpp"
#include "messages/error.hpp"
#include "messages/names.hpp"

namespace egress {

namespace {

caf::error refuse(const std::string& path, const std::string& why) {
  return make_error(ec::config_invalid, path + ": " + why);
}

// Duration units of CAF's INI dialect, in nanoseconds.
struct unit {
  std::string_view name;
  uint64_t ns;
};
constexpr unit units[] = {{"ns", 1},
                          {"us", 1'000},
                          {"ms", 1'000'000},
                          {"s", 1'000'000'000},
                          {"min", 60'000'000'000},
                          {"h", 3'600'000'000'000}};

bool key_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-'
         || c == '_' || c == '.';
}

bool digit(char c) {
  return c >= '0' && c <= '9';
}

// Walks the text once, as CAF's INI parser would read it, and collects
// problems. It does not judge what CAF judges (syntax, types): it only
// finds what CAF would take silently or die of.
class scanner {
public:
  scanner(const std::string& file, const std::string& text) : file_(file), text_(text) {}

  std::vector<std::string> run() {
    scan_bytes();
    if (!problems_.empty())
      return problems_; // the structure of a file with a NUL is moot
    scan_structure();
    return problems_;
  }

private:
  struct frame {
    char kind;         // '{' dict, '[' list
    std::string scope; // a dict's keys live here
  };

  void add(size_t at, const std::string& why) {
    if (problems_.size() >= 20)
      return; // enough to act on
    auto [line, col] = position(at);
    problems_.push_back(file_ + ":" + std::to_string(line) + ":" + std::to_string(col) + ": "
                        + why);
  }

  std::pair<size_t, size_t> position(size_t at) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return {line, col};
  }

  void scan_bytes() {
    for (size_t i = 0; i < text_.size(); ++i) {
      auto c = static_cast<unsigned char>(text_[i]);
      if (c == 0)
        add(i, "a NUL byte (CAF's parser would end the file here silently)");
      else if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f)
        add(i, "control byte " + quote(text_.substr(i, 1)) + " (only tab and line breaks "
                 "are allowed outside strings and inside them)");
    }
  }

  std::string scope() const { return stack_.empty() ? "[" + section_ + "]" : stack_.back().scope; }

  void key(size_t at, const std::string& name) {
    auto where = scope();
    auto [line, _] = position(at);
    auto [i, added] = keys_[where].emplace(name, line);
    if (!added)
      add(at, "duplicate key " + quote(name) + " (first at line " + std::to_string(i->second)
                + "; CAF would keep the first and drop this one)");
  }

  void open(size_t at, char kind, const std::string& scope) {
    stack_.push_back({kind, scope});
    if (stack_.size() > max_config_depth && !too_deep_) {
      too_deep_ = true;
      add(at, "nested more than " + std::to_string(max_config_depth) + " levels deep");
    }
  }

  void close(size_t at, char kind) {
    if (stack_.empty() || stack_.back().kind != kind) {
      // A syntax error CAF reports itself; only the depth matters here.
      if (!stack_.empty())
        stack_.pop_back();
      (void) at;
      return;
    }
    stack_.pop_back();
  }

  // A number at `i`; returns the index after it (and its unit, if any).
  size_t number(size_t i) {
    size_t start = i;
    if (text_[i] == '-' || text_[i] == '+')
      ++i;
    size_t digits_at = i;
    while (i < text_.size() && digit(text_[i]))
      ++i;
    size_t digits_end = i;
    bool integral = true;
    if (i < text_.size() && (text_[i] == '.' || text_[i] == 'e' || text_[i] == 'E')) {
      integral = false;
      while (i < text_.size() && (digit(text_[i]) || text_[i] == '.' || text_[i] == 'e'
                                  || text_[i] == 'E' || text_[i] == '-' || text_[i] == '+'))
        ++i;
    }
    size_t unit_at = i;
    while (i < text_.size() && text_[i] >= 'a' && text_[i] <= 'z')
      ++i;
    auto suffix = std::string_view{text_}.substr(unit_at, i - unit_at);
    if (!integral || suffix.empty())
      return i;
    for (auto& u : units) {
      if (u.name != suffix)
        continue;
      uint64_t v = 0;
      bool overflow = false;
      for (size_t k = digits_at; k < digits_end && !overflow; ++k) {
        auto d = static_cast<uint64_t>(text_[k] - '0');
        overflow = v > (std::numeric_limits<uint64_t>::max() - d) / 10;
        v = v * 10 + d;
      }
      auto max = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
      if (overflow || v > max / u.ns)
        add(start, "duration " + quote(text_.substr(start, i - start))
                     + " does not fit (at most about 292 years in nanoseconds)");
    }
    return i;
  }

  // Skips a quoted string starting at `i`; returns the index after it.
  size_t string(size_t i) {
    char q = text_[i++];
    while (i < text_.size() && text_[i] != q && text_[i] != '\n') {
      if (text_[i] == '\\' && i + 1 < text_.size())
        ++i;
      ++i;
    }
    return i < text_.size() && text_[i] == q ? i + 1 : i;
  }

  // An opening bracket at `i`: a list, or a dict (the value of the pending
  // key, or, without one, the next anonymous dict of a list), each a scope
  // of its own. Returns the index after it.
  size_t open_bracket(size_t i, std::string& pending_key, size_t& anonymous) {
    if (text_[i] == '[') {
      open(i, '[', "");
    } else if (!pending_key.empty()) {
      open(i, '{', scope() + "." + pending_key);
    } else {
      open(i, '{', scope() + ".#" + std::to_string(++anonymous)); // a dict in a list
    }
    pending_key.clear();
    return i + 1;
  }

  // A bare word at `i`: a key when `=` or `{` follows it outside a list and
  // not as a value (it becomes the pending key), else a value. Returns the
  // index after it.
  size_t word(size_t i, bool after_equals, std::string& pending_key) {
    size_t start = i;
    while (i < text_.size() && key_char(text_[i]))
      ++i;
    auto w = text_.substr(start, i - start);
    size_t j = i;
    while (j < text_.size() && (text_[j] == ' ' || text_[j] == '\t'))
      ++j;
    bool in_list = !stack_.empty() && stack_.back().kind == '[';
    if (!after_equals && !in_list && j < text_.size() && (text_[j] == '=' || text_[j] == '{')) {
      key(start, w);
      pending_key = w;
    } else {
      pending_key.clear();
    }
    return i;
  }

  void scan_structure() {
    bool line_start = true;
    bool after_equals = false;
    size_t anonymous = 0;
    std::string pending_key;
    for (size_t i = 0; i < text_.size();) {
      char c = text_[i];
      if (c == '\n') {
        line_start = true;
        ++i;
        continue;
      }
      if (c == ' ' || c == '\t' || c == '\r' || c == ',') {
        ++i;
        continue;
      }
      if (c == ';') { // a comment to the end of the line
        while (i < text_.size() && text_[i] != '\n')
          ++i;
        continue;
      }
      bool at_line_start = line_start;
      line_start = false;
      if (c == '"' || c == '\'') {
        i = string(i);
        pending_key.clear();
        after_equals = false;
        continue;
      }
      if (c == '<') { // a URI literal
        while (i < text_.size() && text_[i] != '>' && text_[i] != '\n')
          ++i;
        ++i;
        pending_key.clear();
        after_equals = false;
        continue;
      }
      if (c == '[' && stack_.empty() && !after_equals && at_line_start) {
        auto end = text_.find(']', i);
        auto nl = text_.find('\n', i);
        if (end != std::string::npos && (nl == std::string::npos || end < nl)) {
          section_ = text_.substr(i + 1, end - i - 1);
          i = end + 1;
          continue;
        }
      }
      if (c == '[' || c == '{') {
        i = open_bracket(i, pending_key, anonymous);
        after_equals = false;
        continue;
      }
      if (c == ']' || c == '}') {
        pending_key.clear();
        close(i, c == ']' ? '[' : '{');
        after_equals = false;
        ++i;
        continue;
      }
      if (c == '=') {
        after_equals = true;
        ++i;
        continue;
      }
      if (digit(c) || ((c == '-' || c == '+') && i + 1 < text_.size() && digit(text_[i + 1]))) {
        i = number(i);
        pending_key.clear();
        after_equals = false;
        continue;
      }
      if (key_char(c)) {
        i = word(i, after_equals, pending_key);
        after_equals = false;
        continue;
      }
      ++i; // anything else is CAF's to judge
      pending_key.clear();
      after_equals = false;
    }
  }

  const std::string& file_;
  const std::string& text_;
  std::vector<std::string> problems_;
  std::vector<frame> stack_;
  std::string section_;
  bool too_deep_ = false;
  std::map<std::string, std::map<std::string, size_t>> keys_;
};

} // namespace

caf::expected<std::string> read_config_file(const std::string& path) {
  // O_NONBLOCK: opening a FIFO without a writer returns at once; fstat then
  // tells what it is, before anything is read.
  unique_fd f{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY)};
  if (!f)
    return refuse(path, std::string{"cannot open: "} + std::strerror(errno));
  struct stat st{};
  if (::fstat(f.get(), &st) != 0)
    return refuse(path, std::string{"cannot stat: "} + std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    return refuse(path, S_ISFIFO(st.st_mode)  ? "is a FIFO, not a regular file"
                        : S_ISDIR(st.st_mode) ? "is a directory, not a regular file"
                        : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)
                          ? "is a device, not a regular file"
                          : "is not a regular file");
  if (static_cast<uint64_t>(st.st_size) > max_config_bytes)
    return refuse(path, "is " + std::to_string(st.st_size) + " bytes; a configuration is at most "
                          + std::to_string(max_config_bytes));
  std::string out;
  char buf[65536];
  for (;;) {
    auto n = ::read(f.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return refuse(path, std::string{"cannot read: "} + std::strerror(errno));
    if (n == 0)
      break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > max_config_bytes) // it grew while we read
      return refuse(path, "grew past " + std::to_string(max_config_bytes) + " bytes while read");
  }
  return out;
}

caf::error check_config_text(const std::string& file, const std::string& text) {
  auto problems = scanner{file, text}.run();
  if (problems.empty())
    return {};
  std::string all;
  for (auto& p : problems)
    all += (all.empty() ? "" : "\n") + p;
  return make_error(ec::config_invalid, std::move(all));
}

caf::expected<std::string> load_config_text(const std::string& path) {
  auto text = read_config_file(path);
  if (!text)
    return text;
  if (auto err = check_config_text(path, *text))
    return err;
  return text;
}

} // namespace egress
