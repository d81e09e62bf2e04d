// A private etcd and a cluster of them (see etcd.hpp).

#include "testbed/etcd.hpp"

#include <set>
#include <stdexcept>
#include <thread>

#include <curl/curl.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

namespace egress::test {

namespace {

using namespace std::chrono_literals;

size_t append(char* p, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(p, size * n);
  return size * n;
}

/// POST `body` to `url` with a short timeout: the answer, "" when none.
std::string post(const std::string& url, const std::string& body) {
  CURL* c = curl_easy_init();
  if (!c)
    return {};
  std::string out;
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.c_str());
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 500L);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, append);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &out);
  bool ok = curl_easy_perform(c) == CURLE_OK;
  curl_easy_cleanup(c);
  return ok ? out : std::string{};
}

/// The member's /v3/maintenance/status, "" when it does not answer. Inside
/// a namespace through curl run there: its address may be one only the
/// namespace reaches (its own loopback).
std::string status_of(const std::string& endpoint, const std::string& netns) {
  auto path = endpoint + "/v3/maintenance/status";
  if (netns.empty())
    return post(path, "{}");
  auto r = testbed::run({"ip", "netns", "exec", netns, "curl", "-s", "-m", "0.5", "-X", "POST",
                         path, "-d", "{}"},
                        2s);
  return r.ok() ? r.output : std::string{};
}

/// True if the member answers its status and names a leader (a member
/// without quorum answers too, with "errors":["etcdserver: no leader"]).
bool has_leader(const std::string& endpoint, const std::string& netns) {
  auto j = nlohmann::json::parse(status_of(endpoint, netns), nullptr, false);
  if (!j.is_object() || j.contains("errors"))
    return false;
  auto leader = j.find("leader");
  return leader != j.end() && leader->is_string() && *leader != "0";
}

/// A free port on `address` that is none of `taken`; added to it.
int fresh_port(const etcd_options& opts, std::set<int>& taken) {
  for (int i = 0; i < 100; ++i) {
    int p = testbed::free_port(opts.address, opts.netns);
    if (taken.insert(p).second)
      return p;
  }
  throw std::runtime_error("testbed: no fresh port on " + opts.address);
}

std::string url(const std::string& address, int port) {
  return "http://" + address + ":" + std::to_string(port);
}

} // namespace

etcd_server::etcd_server(etcd_options opts) : opts_(std::move(opts)) {
  if (::access("/usr/bin/etcd", X_OK) != 0)
    throw std::runtime_error("/usr/bin/etcd is missing (scripts/install-deps)");
  std::set<int> taken{opts_.client_port, opts_.peer_port, opts_.tls_port};
  if (opts_.client_port == 0)
    opts_.client_port = fresh_port(opts_, taken);
  if (opts_.peer_port == 0)
    opts_.peer_port = fresh_port(opts_, taken);
  if (!opts_.cert_file.empty() && opts_.tls_port == 0)
    opts_.tls_port = fresh_port(opts_, taken);
  initial_cluster_ = opts_.name + "=" + peer_url();
}

etcd_server::~etcd_server() {
  stop();
}

std::string etcd_server::endpoint() const {
  return url(opts_.address, opts_.client_port);
}

std::string etcd_server::tls_endpoint() const {
  if (opts_.cert_file.empty())
    return {};
  return "https://" + opts_.address + ":" + std::to_string(opts_.tls_port);
}

std::string etcd_server::peer_url() const {
  return url(opts_.address, opts_.peer_port);
}

std::string etcd_server::log_text() const {
  return testbed::read_file(dir_ / "etcd.out") + testbed::read_file(log_path());
}

void etcd_server::join(std::string initial_cluster, std::string token) {
  initial_cluster_ = std::move(initial_cluster);
  token_ = std::move(token);
}

/// The client URLs, and the TLS flags that go with them.
std::vector<std::string> etcd_server::client_args() const {
  if (opts_.cert_file.empty())
    return {"--listen-client-urls=" + endpoint(), "--advertise-client-urls=" + endpoint()};
  auto urls = endpoint() + "," + tls_endpoint();
  std::vector<std::string> a{"--listen-client-urls=" + urls, "--advertise-client-urls=" + urls,
                             "--cert-file=" + opts_.cert_file, "--key-file=" + opts_.key_file};
  if (!opts_.client_ca_file.empty()) {
    a.push_back("--trusted-ca-file=" + opts_.client_ca_file);
    a.push_back("--client-cert-auth");
  }
  return a;
}

std::vector<std::string> etcd_server::argv() const {
  auto interval = std::to_string(opts_.progress_interval.count()) + "ms";
  std::vector<std::string> a{"/usr/bin/etcd",
                             "--name=" + opts_.name,
                             "--data-dir=" + (dir_ / "data"),
                             "--listen-peer-urls=" + peer_url(),
                             "--initial-advertise-peer-urls=" + peer_url(),
                             "--initial-cluster=" + initial_cluster_,
                             "--initial-cluster-token=" + token_,
                             "--initial-cluster-state=new",
                             "--logger=zap",
                             "--log-outputs=" + log_path(),
                             "--experimental-watch-progress-notify-interval=" + interval};
  auto clients = client_args();
  a.insert(a.end(), clients.begin(), clients.end());
  a.insert(a.end(), opts_.extra_args.begin(), opts_.extra_args.end());
  if (opts_.netns.empty())
    return a;
  // ip netns exec execs etcd: the PID stays etcd's own.
  std::vector<std::string> in{"ip", "netns", "exec", opts_.netns};
  in.insert(in.end(), a.begin(), a.end());
  return in;
}

void etcd_server::launch() {
  proc_ = testbed::process({argv(), {}, dir_ / "etcd.out"});
}

void etcd_server::wait_ready() {
  auto deadline = std::chrono::steady_clock::now() + opts_.ready_timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (!proc_.alive())
      throw std::runtime_error("etcd " + opts_.name + " exited during start:\n"
                               + testbed::detail::tail(log_text(), 20));
    if (has_leader(endpoint(), opts_.netns))
      return;
    std::this_thread::sleep_for(50ms);
  }
  throw std::runtime_error("etcd " + opts_.name + " has no leader after "
                           + std::to_string(opts_.ready_timeout.count()) + " ms:\n"
                           + testbed::detail::tail(log_text(), 20));
}

void etcd_server::start() {
  launch();
  wait_ready();
}

void etcd_server::stop() {
  proc_.stop(5s);
}

void etcd_server::kill() {
  proc_.signal(SIGKILL);
  proc_.stop();
}

void etcd_server::pause() {
  proc_.signal(SIGSTOP);
}

void etcd_server::resume() {
  proc_.signal(SIGCONT);
}

void etcd_server::restart() {
  stop();
  start();
}

// -- a cluster ------------------------------------------------------------------

etcd_cluster::etcd_cluster(size_t members, etcd_options base) {
  std::set<int> taken;
  std::string initial;
  for (size_t i = 0; i < members; ++i) {
    auto o = base;
    o.name = "etcd" + std::to_string(i);
    o.client_port = fresh_port(o, taken);
    o.peer_port = fresh_port(o, taken);
    members_.push_back(std::make_unique<etcd_server>(o));
    initial += (initial.empty() ? "" : ",") + o.name + "=" + members_.back()->peer_url();
  }
  // One token per cluster: members of another test's cluster never join it.
  auto token = "egress-test-" + std::to_string(::getpid()) + "-"
               + members_.front()->dir().substr(members_.front()->dir().rfind('-') + 1);
  for (auto& m : members_)
    m->join(initial, token);
}

etcd_cluster::~etcd_cluster() {
  // Every member told at once: a member whose peers are gone takes seconds
  // to stop, and they need not wait for one another.
  for (auto& m : members_)
    if (m->alive()) {
      ::kill(m->pid(), SIGTERM);
      ::kill(m->pid(), SIGCONT); // a paused member never sees the SIGTERM
    }
  for (auto& m : members_)
    m->stop();
}

void etcd_cluster::start() {
  for (auto& m : members_)
    m->launch();
  for (auto& m : members_)
    m->wait_ready();
}

std::vector<std::string> etcd_cluster::endpoints() const {
  std::vector<std::string> out;
  for (auto& m : members_)
    out.push_back(m->endpoint());
  return out;
}

} // namespace egress::test
