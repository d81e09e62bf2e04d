#pragma once
// A private etcd (Debian's etcd-server 3.4) for the store's tests: each
// member has its own data dir, log and ports in a temp dir of the test bed
// (so testbed::sweep_stale reaps what a killed test left), and runs in the
// foreground, so its PID is etcd's own and it is stopped by that PID; it
// dies with the test (the test bed's spawn sets PR_SET_PDEATHSIG).
// Optionally inside a network namespace. Nothing of the machine's
// /var/lib/etcd, /etc/default/etcd or its service is used or touched.
//
//   test::etcd_server one;                 // a single member on 127.0.0.1
//   one.start();                           // until it answers with a leader
//   auto c = etcd::client::make({.endpoints = {one.endpoint()}});
//
//   test::etcd_cluster three;              // three members, one machine
//   three.start();
//   three.member(1).stop(); three.member(2).stop();   // no quorum
//   three.member(1).restart();                        // quorum again
//
// etcd logs through zap into log_path(), not into the test's output.

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "testbed/testbed.hpp"

namespace egress::test {

struct etcd_options {
  std::string address = "127.0.0.1"; // where the client and peer ports listen
  std::string netns;                 // run inside this network namespace ("" = here)
  std::string name = "etcd0";        // the member's name
  int client_port = 0;               // 0: a free port on address
  int peer_port = 0;                 // 0: a free port on address
  int tls_port = 0;                  // with cert_file: 0 = a free port on address
  /// How often etcd tells a quiet watch that asked for progress notices
  /// where the store is (--experimental-watch-progress-notify-interval;
  /// etcd's own default is 10 minutes).
  std::chrono::milliseconds progress_interval = std::chrono::seconds(1);
  /// Bounds start(): until the member answers and knows a leader.
  std::chrono::milliseconds ready_timeout = std::chrono::seconds(20);
  std::vector<std::string> extra_args; // appended to etcd's command line
  /// TLS: with cert_file set, the member also serves clients on an https
  /// port of its own (tls_endpoint()) with this certificate and key, and
  /// with client_ca_file set it asks clients for a certificate signed by
  /// that CA (--client-cert-auth). endpoint() stays plain http, for the
  /// test bed's own checks.
  std::string cert_file;
  std::string key_file;
  std::string client_ca_file;
};

/// One etcd member. The constructor picks the ports and makes the temp dir;
/// start() runs it.
class etcd_server {
public:
  explicit etcd_server(etcd_options opts = {});
  ~etcd_server();
  etcd_server(const etcd_server&) = delete;
  etcd_server& operator=(const etcd_server&) = delete;

  /// launch() and wait_ready(). Throws with the log's tail.
  void start();
  /// Spawns etcd without waiting (a member of a cluster cannot have a
  /// leader before the others run too).
  void launch();
  /// Until the member answers /v3/maintenance/status naming a leader, at
  /// most ready_timeout. Throws with the log's tail.
  void wait_ready();
  void stop();    // SIGTERM, SIGKILL after 5 s, by PID
  void kill();    // SIGKILL, by PID
  void pause();   // SIGSTOP: connections are accepted (the backlog), nothing answers
  void resume();  // SIGCONT
  void restart(); // stop() if alive, then start(): same data dir, ports and name
  bool alive() { return proc_.alive(); }
  pid_t pid() const { return proc_.pid(); }

  /// "http://address:client_port": what a client is given.
  std::string endpoint() const;
  /// "https://address:tls_port" when cert_file is set, "" otherwise.
  std::string tls_endpoint() const;
  /// "http://address:peer_port": what the other members are given.
  std::string peer_url() const;
  const std::string& name() const { return opts_.name; }
  const std::string& dir() const { return dir_.path(); }
  std::string log_path() const { return dir_ / "etcd.log"; }
  std::string log_text() const; // zap's log and whatever etcd printed before it

  /// Before the first launch: the members of a cluster of more than one
  /// ("name=peer_url,...") and the cluster's token.
  void join(std::string initial_cluster, std::string token);

private:
  std::vector<std::string> client_args() const;
  std::vector<std::string> argv() const;
  etcd_options opts_;
  testbed::temp_dir dir_{"etcd"};
  std::string initial_cluster_;
  std::string token_ = "egress-test";
  testbed::process proc_;
};

/// Members on one machine (three unless told), started together with
/// --initial-cluster naming them all; each can be stopped and restarted by
/// its index.
class etcd_cluster {
public:
  explicit etcd_cluster(size_t members = 3, etcd_options base = {});
  ~etcd_cluster();
  etcd_cluster(const etcd_cluster&) = delete;
  etcd_cluster& operator=(const etcd_cluster&) = delete;

  /// Launches every member, then waits until each knows a leader.
  void start();
  etcd_server& member(size_t i) { return *members_.at(i); }
  size_t size() const { return members_.size(); }
  /// Every member's endpoint, in index order.
  std::vector<std::string> endpoints() const;

private:
  std::vector<std::unique_ptr<etcd_server>> members_;
};

} // namespace egress::test
