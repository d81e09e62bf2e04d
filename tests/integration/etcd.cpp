// The etcd client (providers/etcd/client) against a private etcd of the
// test bed (testbed/etcd): one member on 127.0.0.1, or three for the
// quorum cases. Leases, the claim and release transactions, ranges and
// watches, auth and TLS, and what the client says when etcd is stopped,
// paused, partitioned or without quorum. Needs /usr/bin/etcd (Debian's
// etcd-server) and openssl; root only for the partition (a network
// namespace) and to reap what killed runs left behind.
#define BOOST_TEST_MODULE etcd
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <chrono>
#include <mutex>
#include <ostream>
#include <thread>
#include <vector>

#include <unistd.h>

#include "messages/error.hpp"
#include "providers/etcd/client.hpp"
#include "testbed/etcd.hpp"
#include "testbed/testbed.hpp"

using namespace egress;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

// Boost prints what it compares; it finds these by ADL.
namespace egress {
std::ostream& operator<<(std::ostream& os, ec c) {
  return os << to_string(c);
}
std::ostream& operator<<(std::ostream& os, error_kind k) {
  return os << to_string(k);
}
} // namespace egress

namespace {

struct etcd_installed {
  etcd_installed() {
    if (::access("/usr/bin/etcd", X_OK) != 0)
      testbed::skip("/usr/bin/etcd is not installed (scripts/install-deps)");
    if (::geteuid() == 0)
      testbed::sweep_stale();
  }
};

template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds max = 10s) {
  for (auto deadline = clock_type::now() + max; clock_type::now() < deadline;) {
    if (pred())
      return true;
    std::this_thread::sleep_for(20ms);
  }
  return pred();
}

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

template <class T>
T value_of(caf::expected<T> e) {
  BOOST_REQUIRE_MESSAGE(e, (e ? std::string{} : render(e.error())));
  return std::move(*e);
}

etcd::client_ptr make_client(std::vector<std::string> endpoints,
                             std::chrono::milliseconds timeout = 1s) {
  etcd::client_options o;
  o.endpoints = std::move(endpoints);
  o.timeout = timeout;
  return value_of(etcd::client::make(o));
}


template <class T>
caf::error error_of(caf::expected<T> e) {
  return e ? caf::error{} : e.error();
}

/// The keys under a prefix, in order.
std::vector<std::string> keys_under(etcd::client& c, const std::string& prefix) {
  std::vector<std::string> out;
  for (auto& kv : value_of(c.range(prefix)).kvs)
    out.push_back(kv.key);
  return out;
}

/// A watch on its own thread, recording every event it delivers.
struct recorded_watch {
  struct seen {
    int64_t batch_revision;
    etcd::watch_event event;
  };
  std::mutex mtx;
  std::vector<seen> events;
  std::atomic<bool> cancel{false};
  std::optional<caf::error> result;
  clock_type::time_point ended;
  std::thread thread;

  recorded_watch(etcd::client_ptr c, std::string prefix, int64_t from,
                 std::chrono::milliseconds idle = 30s) {
    thread = std::thread([this, c, prefix, from, idle] {
      auto err = c->watch(prefix, from,
                          [this](int64_t rev, std::vector<etcd::watch_event> batch) {
                            std::lock_guard<std::mutex> guard{mtx};
                            for (auto& e : batch)
                              events.push_back({rev, std::move(e)});
                          },
                          cancel, idle);
      std::lock_guard<std::mutex> guard{mtx};
      ended = clock_type::now();
      result = std::move(err);
    });
  }
  ~recorded_watch() {
    cancel = true;
    thread.join();
  }
  std::vector<seen> snapshot() {
    std::lock_guard<std::mutex> guard{mtx};
    return events;
  }
  bool done() {
    std::lock_guard<std::mutex> guard{mtx};
    return result.has_value();
  }
  /// "+key" for a put, "-key" for a delete.
  std::vector<std::string> story() {
    std::vector<std::string> out;
    for (auto& s : snapshot())
      out.push_back((s.event.deleted ? "-" : "+") + s.event.kv.key);
    return out;
  }
};

struct one_etcd {
  test::etcd_server server;
  etcd::client_ptr client;
  one_etcd() {
    server.start();
    client = make_client({server.endpoint()});
  }
};

/// A CA, a server certificate for 127.0.0.1 and a client certificate it
/// signed, and a second CA that signed neither (openssl, EC P-256). The
/// server's certificate is a client's too: etcd's gateway dials the
/// member's own gRPC port with it, and --client-cert-auth refuses a
/// certificate for servers only (docs/notes/etcd.md#tls).
struct tls_files {
  testbed::temp_dir dir{"etcd-tls"};
  std::string ca = dir / "ca.pem", other_ca = dir / "other-ca.pem";
  std::string server = dir / "server.pem", server_key = dir / "server.key";
  std::string client = dir / "client.pem", client_key = dir / "client.key";

  tls_files() {
    make_ca("ca");
    make_ca("other-ca");
    sign("server", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n");
    sign("client", "extendedKeyUsage=clientAuth\n");
  }

  static std::vector<std::string> new_key(const std::string& key) {
    return {"-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
            key};
  }
  void make_ca(const std::string& name) {
    auto argv = std::vector<std::string>{"openssl", "req", "-x509", "-days", "1", "-subj",
                                         "/CN=egress-test-" + name, "-out", dir / (name + ".pem")};
    auto key = new_key(dir / (name + ".key"));
    argv.insert(argv.end(), key.begin(), key.end());
    testbed::run_checked(argv);
  }
  void sign(const std::string& name, const std::string& extensions) {
    auto argv = std::vector<std::string>{"openssl", "req", "-subj", "/CN=" + name, "-out",
                                         dir / (name + ".csr")};
    auto key = new_key(dir / (name + ".key"));
    argv.insert(argv.end(), key.begin(), key.end());
    testbed::run_checked(argv);
    testbed::write_file(dir / (name + ".ext"), extensions);
    testbed::run_checked({"openssl", "x509", "-req", "-days", "1", "-in", dir / (name + ".csr"),
                          "-CA", ca, "-CAkey", dir / "ca.key", "-CAcreateserial", "-out",
                          dir / (name + ".pem"), "-extfile", dir / (name + ".ext")});
  }
};

void check_unreachable(const caf::error& err) {
  BOOST_REQUIRE(err);
  BOOST_TEST(is(err, ec::store_unreachable), render(err));
  BOOST_TEST(kind_of(err) == error_kind::transient);
}

} // namespace

BOOST_TEST_GLOBAL_FIXTURE(etcd_installed);

BOOST_AUTO_TEST_CASE(prefix_end_increments_the_last_byte_it_can) {
  BOOST_TEST(etcd::prefix_end("/egress/") == "/egress0");
  BOOST_TEST(etcd::prefix_end("a\xff\xff") == "b");
  BOOST_TEST(etcd::prefix_end("\xff") == std::string(1, '\0'));
  BOOST_TEST(etcd::prefix_end("") == std::string(1, '\0'));
}

BOOST_AUTO_TEST_CASE(make_refuses_options_it_cannot_use) {
  auto refused = [](etcd::client_options o, const std::string& words) {
    auto c = etcd::client::make(std::move(o));
    BOOST_REQUIRE(!c);
    BOOST_TEST(is(c.error(), ec::invalid_argument));
    BOOST_TEST(detail(c.error()).find(words) != std::string::npos, render(c.error()));
  };
  refused({}, "no endpoint");
  refused({.endpoints = {"127.0.0.1:2379"}}, "127.0.0.1:2379");
  refused({.endpoints = {"ftp://127.0.0.1:2379"}}, "ftp://");
  refused({.endpoints = {"http://127.0.0.1"}}, "no port");
  refused({.endpoints = {"http://127.0.0.1:2379/v3"}}, "a path");
  refused({.endpoints = {"https://127.0.0.1:2379"}, .ca_file = "/nonexistent/ca.pem"},
          "/nonexistent/ca.pem");
  BOOST_TEST(bool(etcd::client::make({.endpoints = {"http://127.0.0.1:2379/"}})));
}

BOOST_FIXTURE_TEST_CASE(a_lease_is_kept_alive_and_expires_with_its_keys, one_etcd) {
  auto l = value_of(client->grant(2s));
  BOOST_TEST(l.id != 0);
  BOOST_TEST(l.ttl == 2);
  auto rev = value_of(client->put("/lease/a", "held", l.id));
  recorded_watch watch{client, "/lease/", rev};
  BOOST_TEST(value_of(client->keepalive(l.id)) == 2);
  auto held = value_of(client->range("/lease/")).kvs;
  BOOST_REQUIRE(held.size() == 1u);
  BOOST_TEST(held[0].lease == l.id);
  // No more keepalives: within its TTL (and etcd's expiry sweep) it is gone.
  auto t0 = clock_type::now();
  BOOST_TEST(eventually([&] { return keys_under(*client, "/lease/").empty(); }, 6s));
  BOOST_TEST_MESSAGE("the key of a 2 s lease went after " << seconds_since(t0) << " s");
  BOOST_TEST(value_of(client->keepalive(l.id)) == 0);
  BOOST_TEST(eventually([&] { return watch.story().size() == 2; }, 2s));
  BOOST_TEST((watch.story() == std::vector<std::string>{"+/lease/a", "-/lease/a"}));
  // Revoked: gone at once, keepalive says 0, a second revoke is no error.
  auto r = value_of(client->grant(30s));
  value_of(client->put("/lease/b", "held", r.id));
  BOOST_TEST(!client->revoke(r.id));
  BOOST_TEST(keys_under(*client, "/lease/").empty());
  BOOST_TEST(value_of(client->keepalive(r.id)) == 0);
  BOOST_TEST(!client->revoke(r.id));
  BOOST_TEST(eventually([&] { return watch.story().size() == 4; }, 2s));
}

BOOST_FIXTURE_TEST_CASE(a_claim_is_won_by_one_of_two_contenders, one_etcd) {
  auto other = make_client({server.endpoint()});
  auto la = value_of(client->grant(30s));
  auto lb = value_of(other->grant(30s));
  std::optional<caf::expected<etcd::claim_result>> a, b;
  std::atomic<bool> go{false};
  std::thread ta([&] {
    while (!go) {}
    a = client->claim("/hosts/hv1", "node-a", la.id);
  });
  std::thread tb([&] {
    while (!go) {}
    b = other->claim("/hosts/hv1", "node-b", lb.id);
  });
  go = true;
  ta.join();
  tb.join();
  auto ra = value_of(std::move(*a));
  auto rb = value_of(std::move(*b));
  BOOST_REQUIRE(ra.won != rb.won);
  auto& winner = ra.won ? ra : rb;
  auto& loser = ra.won ? rb : ra;
  auto kv = value_of(client->range("/hosts/hv1")).kvs.at(0);
  BOOST_TEST(kv.value == (ra.won ? "node-a" : "node-b"));
  BOOST_TEST(kv.lease == (ra.won ? la.id : lb.id));
  BOOST_TEST(winner.revision == kv.create_revision);
  BOOST_TEST(!winner.holder);
  BOOST_REQUIRE(loser.holder);
  BOOST_TEST(loser.holder->value == kv.value);
  BOOST_TEST(loser.holder->create_revision == kv.create_revision);
  BOOST_TEST(loser.revision >= winner.revision);
  // Once taken, every later claim loses too.
  BOOST_TEST(!value_of(client->claim("/hosts/hv1", "node-c", la.id)).won);
}

BOOST_FIXTURE_TEST_CASE(release_needs_the_key_unchanged_since_it_was_read, one_etcd) {
  auto l = value_of(client->grant(30s));
  auto won = value_of(client->claim("/hosts/hv2", "node-a", l.id));
  BOOST_REQUIRE(won.won);
  auto newer = value_of(client->put("/hosts/hv2", "node-a again", l.id));
  BOOST_TEST(!value_of(client->release("/hosts/hv2", won.revision)));
  BOOST_TEST(keys_under(*client, "/hosts/hv2").size() == 1u);
  BOOST_TEST(value_of(client->release("/hosts/hv2", newer)));
  BOOST_TEST(keys_under(*client, "/hosts/hv2").empty());
  BOOST_TEST(!value_of(client->release("/hosts/hv2", newer))); // gone: nothing to delete
}

BOOST_FIXTURE_TEST_CASE(a_range_holds_every_key_of_the_prefix_and_no_other, one_etcd) {
  std::string binary{"v\0\xff\n", 4};
  for (auto key : {"/p/b", "/p/a", "/p/c", "/pq", "/o", "/p0"})
    value_of(client->put(key, binary, 0));
  auto last = value_of(client->put(std::string{"/p/\xff\x01", 5}, "x", 0));
  auto r = value_of(client->range("/p/"));
  BOOST_TEST(r.revision == last);
  std::vector<std::string> keys;
  for (auto& kv : r.kvs)
    keys.push_back(kv.key);
  BOOST_TEST((keys == std::vector<std::string>{"/p/a", "/p/b", "/p/c", {"/p/\xff\x01", 5}}));
  BOOST_TEST(r.kvs.front().value == binary);
  BOOST_TEST(r.kvs.front().lease == 0);
  BOOST_TEST(value_of(client->range("/nothing/")).kvs.empty());
  BOOST_TEST(value_of(client->range("")).kvs.size() == 7u);
}

BOOST_FIXTURE_TEST_CASE(a_watch_from_a_revision_sees_puts_and_deletes_in_order, one_etcd) {
  auto l = value_of(client->grant(30s));
  auto first = value_of(client->put("/w/a", "1", l.id));
  auto b = value_of(client->put("/w/b", "2", 0));
  value_of(client->put("/elsewhere", "x", 0));
  BOOST_TEST(value_of(client->release("/w/a", first)));
  recorded_watch watch{client, "/w/", first};
  value_of(client->put("/w/c", "3", 0));
  value_of(client->put("/w/b", "4", 0));
  BOOST_TEST(value_of(client->release("/w/b", value_of(client->range("/w/b")).kvs.at(0).mod_revision)));
  BOOST_TEST(eventually([&] { return watch.story().size() == 6; }, 3s));
  BOOST_TEST((watch.story()
              == std::vector<std::string>{"+/w/a", "+/w/b", "-/w/a", "+/w/c", "+/w/b", "-/w/b"}));
  auto seen = watch.snapshot();
  BOOST_TEST(seen.at(0).event.kv.value == "1");
  BOOST_TEST(seen.at(0).event.kv.lease == l.id);
  BOOST_TEST(seen.at(1).event.kv.mod_revision == b);
  for (size_t i = 1; i < seen.size(); ++i)
    BOOST_TEST(seen[i].event.kv.mod_revision > seen[i - 1].event.kv.mod_revision);
  // Cancel: back within one poll (100 ms), well under a second.
  auto t0 = clock_type::now();
  watch.cancel = true;
  BOOST_TEST(eventually([&] { return watch.done(); }, 2s));
  BOOST_TEST(std::chrono::duration<double>(watch.ended - t0).count() < 1.0);
  BOOST_TEST(!*watch.result, render(*watch.result));
}

BOOST_FIXTURE_TEST_CASE(a_watch_from_a_compacted_revision_is_refused, one_etcd) {
  auto first = value_of(client->put("/c/a", "1", 0));
  value_of(client->put("/c/a", "2", 0));
  auto last = value_of(client->put("/c/a", "3", 0));
  testbed::run_checked({"etcdctl", "--endpoints=" + server.endpoint(), "compaction",
                        std::to_string(last)});
  std::atomic<bool> cancel{false};
  auto err = client->watch("/c/", first, [](int64_t, std::vector<etcd::watch_event>) {},
                           cancel);
  BOOST_REQUIRE(err);
  BOOST_TEST(is(err, ec::store_refused), render(err));
  BOOST_TEST(detail(err).find("compacted") != std::string::npos, render(err));
}

BOOST_FIXTURE_TEST_CASE(a_stopped_or_paused_etcd_is_unreachable_within_the_timeout, one_etcd) {
  auto c = make_client({server.endpoint()}, 500ms);
  value_of(c->put("/u/a", "1", 0));
  server.pause();
  auto t0 = clock_type::now();
  auto put = c->put("/u/a", "2", 0);
  auto paused_for = seconds_since(t0);
  BOOST_REQUIRE(!put);
  check_unreachable(put.error());
  BOOST_TEST(detail(put.error()).find(server.endpoint()) != std::string::npos,
             render(put.error()));
  BOOST_TEST(paused_for >= 0.45);
  BOOST_TEST(paused_for < 1.0);
  server.resume();
  value_of(c->put("/u/a", "3", 0));
  server.stop();
  t0 = clock_type::now();
  auto gone = c->keepalive(1);
  BOOST_REQUIRE(!gone);
  check_unreachable(gone.error());
  BOOST_TEST(seconds_since(t0) < 0.6);
  BOOST_TEST_MESSAGE("paused: " << render(put.error()) << " after " << paused_for << " s");
  BOOST_TEST_MESSAGE("stopped: " << render(gone.error()));
}

BOOST_FIXTURE_TEST_CASE(a_watch_on_a_paused_etcd_ends_after_idle, one_etcd) {
  recorded_watch watch{client, "/idle/", value_of(client->put("/idle/a", "1", 0)), 3s};
  BOOST_TEST(eventually([&] { return watch.story().size() == 1; }, 3s));
  // Progress notices (every second here) keep a quiet watch alive.
  std::this_thread::sleep_for(4s);
  BOOST_TEST(!watch.done());
  server.pause();
  auto t0 = clock_type::now();
  BOOST_TEST(eventually([&] { return watch.done(); }, 6s));
  auto after = std::chrono::duration<double>(watch.ended - t0).count();
  BOOST_TEST(after < 3.5);
  server.resume();
  BOOST_REQUIRE(watch.done());
  check_unreachable(*watch.result);
  BOOST_TEST(detail(*watch.result).find("silent") != std::string::npos, render(*watch.result));
}

BOOST_FIXTURE_TEST_CASE(a_dead_first_endpoint_does_not_stop_requests, one_etcd) {
  auto dead = "http://127.0.0.1:" + std::to_string(testbed::free_port("127.0.0.1"));
  auto c = make_client({dead, server.endpoint()});
  auto l = value_of(c->grant(10s));
  BOOST_TEST(value_of(c->claim("/d/a", "x", l.id)).won);
  BOOST_TEST(value_of(c->keepalive(l.id)) == 10);
  recorded_watch watch{c, "/d/", 1};
  BOOST_TEST(eventually([&] { return watch.story().size() == 1; }, 3s));
  // And when both are dead, the message names each.
  server.stop();
  auto err = c->put("/d/b", "y", 0);
  BOOST_REQUIRE(!err);
  check_unreachable(err.error());
  BOOST_TEST(detail(err.error()).find(dead) != std::string::npos, render(err.error()));
  BOOST_TEST(detail(err.error()).find(server.endpoint()) != std::string::npos,
             render(err.error()));
}

BOOST_FIXTURE_TEST_CASE(etcd_refusing_a_request_is_permanent, one_etcd) {
  auto put = client->put("", "x", 0);
  BOOST_REQUIRE(!put);
  BOOST_TEST(is(put.error(), ec::store_refused), render(put.error()));
  BOOST_TEST(kind_of(put.error()) == error_kind::permanent);
  BOOST_TEST(detail(put.error()).find("key is not provided") != std::string::npos);
  auto no_lease = client->put("/r/a", "x", 12345);
  BOOST_REQUIRE(!no_lease);
  BOOST_TEST(is(no_lease.error(), ec::store_refused), render(no_lease.error()));
  BOOST_TEST(detail(no_lease.error()).find("lease not found") != std::string::npos);
  BOOST_TEST(detail(no_lease.error()).find("/r/a") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_user_authenticates_and_a_stale_token_is_renewed) {
  test::etcd_options o;
  o.extra_args = {"--auth-token=simple", "--auth-token-ttl=1"};
  test::etcd_server server{o};
  server.start();
  // Everything before `auth enable` needs no credentials.
  auto ctl = [&](std::vector<std::string> args) {
    std::vector<std::string> argv{"etcdctl", "--endpoints=" + server.endpoint()};
    argv.insert(argv.end(), args.begin(), args.end());
    testbed::run_checked(argv);
  };
  ctl({"user", "add", "root:rootpw"});
  ctl({"role", "add", "root"});
  ctl({"user", "grant-role", "root", "root"});
  ctl({"user", "add", "engine:enginepw"});
  ctl({"role", "add", "egress"});
  ctl({"role", "grant-permission", "egress", "--prefix=true", "readwrite", "/egress/"});
  ctl({"user", "grant-role", "engine", "egress"});
  ctl({"auth", "enable"});

  etcd::client_options opts{.endpoints = {server.endpoint()}, .user = "engine",
                            .password = "enginepw"};
  auto c = value_of(etcd::client::make(opts));
  value_of(c->put("/egress/a", "1", 0));
  std::this_thread::sleep_for(2500ms); // the simple token's TTL is 1 s
  value_of(c->put("/egress/a", "2", 0));
  recorded_watch watch{c, "/egress/", 1};
  BOOST_TEST(eventually([&] { return watch.story().size() == 2; }, 3s));
  auto denied = c->put("/other", "x", 0);
  BOOST_REQUIRE(!denied);
  BOOST_TEST(is(denied.error(), ec::store_refused), render(denied.error()));
  BOOST_TEST(detail(denied.error()).find("permission denied") != std::string::npos);
  opts.password = "wrong";
  auto bad = value_of(etcd::client::make(opts))->put("/egress/a", "3", 0);
  BOOST_REQUIRE(!bad);
  BOOST_TEST(is(bad.error(), ec::store_refused), render(bad.error()));
  BOOST_TEST(detail(bad.error()).find("authentication failed") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(tls_with_a_client_certificate) {
  tls_files tls;
  test::etcd_options o;
  o.cert_file = tls.server;
  o.key_file = tls.server_key;
  o.client_ca_file = tls.ca;
  test::etcd_server server{o};
  server.start();
  etcd::client_options opts{.endpoints = {server.tls_endpoint()}, .ca_file = tls.ca,
                            .cert_file = tls.client, .key_file = tls.client_key};
  auto c = value_of(etcd::client::make(opts));
  auto rev = value_of(c->put("/tls/a", "1", 0));
  BOOST_TEST(value_of(c->range("/tls/")).revision == rev);
  recorded_watch watch{c, "/tls/", rev};
  BOOST_TEST(eventually([&] { return watch.story().size() == 1; }, 3s));
  // A server our CA did not sign: permanent, whichever endpoint it is.
  opts.ca_file = tls.other_ca;
  auto unverified = value_of(etcd::client::make(opts))->put("/tls/a", "2", 0);
  BOOST_REQUIRE(!unverified);
  BOOST_TEST(is(unverified.error(), ec::store_refused), render(unverified.error()));
  BOOST_TEST_MESSAGE("another CA: " << render(unverified.error()));
  // No client certificate: the server ends the handshake.
  opts.ca_file = tls.ca;
  opts.cert_file.clear();
  opts.key_file.clear();
  auto anonymous = value_of(etcd::client::make(opts))->put("/tls/a", "3", 0);
  BOOST_REQUIRE(!anonymous);
  BOOST_TEST_MESSAGE("no client certificate: " << render(anonymous.error()));
}

BOOST_AUTO_TEST_CASE(a_partitioned_member_is_unreachable_until_healed) {
  if (::geteuid() != 0) {
    BOOST_TEST_MESSAGE("not root: no network namespace, case skipped");
    return;
  }
  testbed::netns net;
  test::etcd_options o;
  o.netns = net.name();
  o.address = net.peer_addr();
  test::etcd_server server{o};
  server.start();
  auto c = make_client({server.endpoint()});
  value_of(c->put("/ns/a", "1", 0));
  net.partition(); // packets dropped: the request hangs until the timeout
  auto t0 = clock_type::now();
  auto err = error_of(c->put("/ns/a", "2", 0));
  auto took = seconds_since(t0);
  check_unreachable(err);
  BOOST_TEST(took < 1.5, "took " << took << " s");
  net.heal();
  BOOST_TEST(eventually([&] { return bool(c->put("/ns/a", "3", 0)); }, 5s));
}

BOOST_AUTO_TEST_CASE(a_cluster_without_quorum_fails_transient_and_recovers) {
  test::etcd_cluster cluster;
  cluster.start();
  auto c = make_client(cluster.endpoints(), 1s);
  auto l = value_of(c->grant(30s));
  value_of(c->put("/q/a", "1", l.id));
  cluster.member(1).stop();
  // Two of three: still a quorum (after an election, if 1 led).
  BOOST_TEST(eventually([&] { return bool(c->put("/q/a", "2", l.id)); }, 10s));
  cluster.member(2).stop();
  for (auto what : {"put", "range", "keepalive", "grant"}) {
    auto t0 = clock_type::now();
    caf::error err;
    if (what == std::string{"put"})
      err = error_of(c->put("/q/a", "3", 0));
    else if (what == std::string{"range"})
      err = error_of(c->range("/q/"));
    else if (what == std::string{"keepalive"})
      err = error_of(c->keepalive(l.id));
    else
      err = error_of(c->grant(10s));
    auto took = seconds_since(t0);
    check_unreachable(err);
    BOOST_TEST(took < 1.5, what << " took " << took << " s");
    BOOST_TEST_MESSAGE(what << " without quorum: " << took << " s: " << render(err));
  }
  auto t0 = clock_type::now();
  cluster.member(1).restart();
  BOOST_TEST(eventually([&] { return bool(c->put("/q/a", "4", 0)); }, 10s));
  BOOST_TEST_MESSAGE("quorum again after " << seconds_since(t0) << " s");
  cluster.member(2).restart();
  BOOST_TEST(value_of(c->range("/q/")).kvs.at(0).value == "4");
  BOOST_TEST(value_of(c->keepalive(l.id)) > 0);
}
