// What the benchmarks read from /proc, in one place: every live process's
// parent and CPU seconds, the CPU of process trees, and the load average.
// On two cores the stages of a path compete, so the CPU every process on a
// path spends is the steadier figure next to time.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include <dirent.h>
#include <unistd.h>

#include "testbed/testbed.hpp"

namespace egress::procfs {

/// A live process: its parent and its CPU seconds (user + system, its
/// reaped children's included: cutime, cstime).
struct process_cpu {
  pid_t ppid = 0;
  double cpu = 0;
};
using process_table = std::map<pid_t, process_cpu>;

/// One pass over /proc. A process gone meanwhile is left out.
inline process_table scan_processes() {
  static const double tick = static_cast<double>(::sysconf(_SC_CLK_TCK));
  process_table procs;
  DIR* d = ::opendir("/proc");
  if (d == nullptr)
    return procs;
  while (auto* e = ::readdir(d)) {
    char* end = nullptr;
    auto pid = static_cast<pid_t>(std::strtol(e->d_name, &end, 10));
    if (pid <= 0 || *end != '\0')
      continue;
    std::string stat;
    try {
      stat = testbed::read_file(std::string{"/proc/"} + e->d_name + "/stat");
    } catch (const std::exception&) {
      continue; // gone meanwhile
    }
    // After the command's closing parenthesis: state ppid ...; utime,
    // stime, cutime, cstime are fields 11-14 from there (14-17 of the line).
    auto at = stat.rfind(')');
    if (at == std::string::npos || at + 2 >= stat.size())
      continue;
    std::vector<double> f;
    for (char* q = stat.data() + at + 2; *q != '\0' && f.size() < 16;) {
      f.push_back(std::strtod(q, &end));
      if (end == q) { // the state letter
        ++q;
        f.back() = 0;
      } else {
        q = end;
      }
      while (*q == ' ')
        ++q;
    }
    if (f.size() == 16)
      procs[pid] = process_cpu{static_cast<pid_t>(f[1]), (f[11] + f[12] + f[13] + f[14]) / tick};
  }
  ::closedir(d);
  return procs;
}

/// CPU seconds of the process trees under `roots` in `procs`.
inline double tree_cpu_seconds(const process_table& procs, const std::vector<pid_t>& roots) {
  double sum = 0;
  for (auto& [pid, p] : procs) {
    for (pid_t q = pid; q > 1;) {
      if (std::find(roots.begin(), roots.end(), q) != roots.end()) {
        sum += p.cpu;
        break;
      }
      auto it = procs.find(q);
      if (it == procs.end())
        break;
      q = it->second.ppid;
    }
  }
  return sum;
}

/// CPU seconds of the process trees under `roots`, now.
inline double tree_cpu_seconds(const std::vector<pid_t>& roots) {
  return tree_cpu_seconds(scan_processes(), roots);
}

/// The 1, 5 and 15 minute load averages, as /proc/loadavg says them.
inline std::string load_average() {
  auto text = testbed::read_file("/proc/loadavg");
  auto end = text.find(' ', text.find(' ', text.find(' ') + 1) + 1);
  return text.substr(0, end);
}

} // namespace egress::procfs
