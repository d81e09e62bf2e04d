// What bench/inspect and bench/scale share to list a node's actors the way
// caf-shell does: a TLS identity of the bench's own (the inspector speaks
// TLS only, docs/spec.md 24), an actor system that presents it, the node
// actor's `ls` through CAF's middleman from a second actor system, and the
// caf-shell binary beside the bench, run as a process.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/io/middleman.hpp>
#include <caf/openssl/manager.hpp>
#include <caf/openssl/remote_actor.hpp>
#include <caf/scoped_actor.hpp>

#include "messages/actors.hpp"
#include "messages/error.hpp"
#include "providers/crypto/identity.hpp"
#include "runtime/engine.hpp"

extern char** environ;

namespace egress::test {

/// caf-shell lives in the same build directory as the bench.
inline std::string shell_path() {
  std::string self(4096, '\0');
  auto len = ::readlink("/proc/self/exe", self.data(), self.size());
  if (len <= 0)
    return "caf-shell";
  self.resize(static_cast<size_t>(len));
  return self.substr(0, self.rfind('/') + 1) + "caf-shell";
}

/// The bench's identity, presented by its actor systems and by caf-shell.
inline std::string identity_dir() {
  static const std::string dir = "/tmp/egress-bench-identity-" + std::to_string(::getpid());
  return dir;
}

/// The engine's message types, the middleman with CAF's OpenSSL module
/// presenting the bench's identity, and CAF's logger quiet.
inline caf::actor_system_config& with_tls(caf::actor_system_config& cfg) {
  egress::configure(cfg);
  cfg.load<caf::io::middleman>();
  auto id = egress::crypto::ensure_identity(identity_dir());
  if (!id) {
    std::fprintf(stderr, "identity: %s\n", egress::render(id.error()).c_str());
    std::exit(1);
  }
  cfg.load<caf::openssl::manager>();
  cfg.openssl_certificate = id->certificate;
  cfg.openssl_key = id->key;
  cfg.openssl_cafile = id->ca;
  cfg.set("logger.file-verbosity", caf::atom("quiet"));
  cfg.set("logger.console-verbosity", caf::atom("quiet"));
  return cfg;
}

/// Runs argv with stdout on /dev/null; returns the exit code (-1: no start).
inline int run_quiet(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0)
    return -1;
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid)
    return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/// "ok 0.4 ms" -> 0.4; -1 for anything else ("no reply ...", "ended ...").
inline double probe_ms(const std::string& liveness) {
  if (liveness.rfind("ok ", 0) != 0)
    return -1;
  return std::atof(liveness.c_str() + 3);
}

/// One `ls` as caf-shell sends it to a node actor, and what came back.
struct ls_answer {
  std::vector<egress::actor_row> rows;
  caf::error failed;
  double ms = 0;
};

/// The node actor's `ls kind` from `client` (another actor system), with
/// caf-shell's own timeout (5 s): with the details as `ls --json` asks, or
/// without as the shell's table does. No secret is configured on the
/// bench's nodes: any token passes (the shell's hello costs two more round
/// trips, once per process).
inline ls_answer ls_through(caf::actor_system& client, const egress::node_actor& node,
                            const std::string& kind, bool details,
                            caf::timespan timeout = std::chrono::seconds(5)) {
  ls_answer out;
  auto t0 = std::chrono::steady_clock::now();
  {
    caf::scoped_actor self{client};
    self->request(node, timeout, egress::atom::ls_v, std::string{},
                  egress::ls_query{kind, "", details}, false)
      .receive([&](std::vector<egress::actor_row>& r) { out.rows = std::move(r); },
               [&](caf::error& err) { out.failed = std::move(err); });
  }
  out.ms = std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now() - t0)
             .count()
           / 1000.0;
  return out;
}

/// What `rows` weigh on the wire (CAF's binary serialization, as BASP
/// carries them). Not const: CAF 0.17's inspectors take what they read by
/// reference.
inline size_t serialized_bytes(caf::actor_system& sys, std::vector<egress::actor_row>& rows) {
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  return sink(rows) ? 0 : buf.size();
}

/// The rows whose liveness probe did not answer "ok".
inline size_t not_ok(const std::vector<egress::actor_row>& rows) {
  return static_cast<size_t>(std::count_if(
    rows.begin(), rows.end(), [](auto& e) { return probe_ms(e.liveness) < 0; }));
}

/// The node actor published by `sys` at 127.0.0.1:port, from `client`.
inline caf::expected<egress::node_actor> dial_node(caf::actor_system& client, uint16_t port) {
  return caf::openssl::remote_actor<egress::node_actor>(client, "127.0.0.1", port);
}

} // namespace egress::test
