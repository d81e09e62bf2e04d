#pragma once
// How the soak (soak/main.cpp) runs the engine: in its own process
// through the embedding API (runtime/engine.hpp), or as a caf-run process
// that it reloads with SIGHUP, stops with SIGTERM or SIGKILL, and reads
// through caf-shell --json, as an operator's tooling would.

#include <memory>
#include <string>

#include <sys/types.h>

#include <caf/actor_system.hpp>
#include <caf/error.hpp>
#include <caf/expected.hpp>

#include "messages/config.hpp"
#include "messages/types.hpp"

namespace egress::soak {

class engine_driver {
public:
  virtual ~engine_driver() = default;
  /// Throws std::runtime_error when the engine does not come up.
  virtual void start(const engine_config& cfg) = 0;
  /// As on SIGTERM: the engine stops its actors within its shutdown timeout.
  virtual caf::error stop() = 0;
  /// SIGKILL where the engine is a process; a stop otherwise (an engine in
  /// this process cannot die alone).
  virtual caf::error kill() = 0;
  /// SIGSTOP (on) or SIGCONT where the engine is a process; nothing
  /// otherwise (an engine in this process cannot stop alone).
  virtual void pause(bool on) = 0;
  virtual caf::expected<std::string> reload(const engine_config& cfg) = 0;
  virtual caf::expected<fleet_status> status() = 0;
  /// drain-host (on) or undrain-host.
  virtual caf::expected<host_drain> cordon(const std::string& host, bool on) = 0;
  /// "in-process" or "caf-run".
  virtual std::string kind() const = 0;
  /// The process whose threads, descriptors and memory are the engine's.
  virtual pid_t pid() const = 0;
};

std::unique_ptr<engine_driver> make_in_process_driver(caf::actor_system& sys);
/// caf-run's config, log and state go into `dir`. `metrics_port` 0: no
/// metrics listener; otherwise it listens there on 127.0.0.1 (a node of a
/// cluster, whose /rotation and /metrics the soak reads).
std::unique_ptr<engine_driver> make_process_driver(std::string dir, int metrics_port = 0);

} // namespace egress::soak
