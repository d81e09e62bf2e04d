#define BOOST_TEST_MODULE haproxy
// HAProxy's runtime API as the gateway reads and drives it
// (providers/haproxy), without a HAProxy: its answers read strictly, the
// plan that brings a backend to the rotation, tabled; the runtime API client
// against sockets of this test that answer garbage, without end, or not at
// all; and the rotation as GET /rotation renders it.
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "actors/parts/metrics_request.hpp"
#include "testbed/engine_fixture.hpp"
#include "actors/parts/rotation_book.hpp"
#include "messages/error.hpp"
#include "providers/haproxy/runtime_api.hpp"
#include "providers/haproxy/servers.hpp"
#include "providers/haproxy/sync_plan.hpp"

using namespace egress;
using namespace egress::haproxy;
using namespace std::chrono_literals;

namespace {

// `show servers state egress` as HAProxy 2.6.12 prints it (Debian 12).
const std::string header
  = "1\n# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight "
    "srv_iweight srv_time_since_last_change srv_check_status srv_check_result "
    "srv_check_health srv_check_state srv_agent_state bk_f_forced_id srv_f_forced_id srv_fqdn "
    "srv_port srvrecord srv_use_ssl srv_check_port srv_check_addr srv_agent_addr "
    "srv_agent_port\n";

std::string row(int id, const std::string& name, const std::string& addr, int port,
                int admin = 0) {
  return "3 egress " + std::to_string(id) + " " + name + " " + addr + " 2 " + std::to_string(admin)
         + " 1 1 4 1 0 0 0 0 0 0 - " + std::to_string(port) + " - 0 0 - - 0\n";
}

std::vector<std::string> texts(const sync_plan& p) {
  std::vector<std::string> out;
  for (auto& c : p.commands)
    out.push_back(c.text);
  return out;
}

server_row listed(const std::string& name, const std::string& addr, uint32_t port,
                  uint32_t admin = 0) {
  server_row r;
  r.backend = "egress";
  r.name = name;
  r.address = addr;
  r.port = port;
  r.op_state = 2;
  r.admin_state = admin;
  return r;
}

// Boost builds a check's message even when the check passes, and error() of
// an expected that holds a value is undefined: ask first.
template <class T>
std::string why(const caf::expected<T>& x) {
  return x ? "" : render(x.error());
}

} // namespace

BOOST_AUTO_TEST_CASE(servers_state_is_read_by_its_header) {
  auto rows = parse_servers_state(header + row(1, "px-1", "10.0.0.5", 3128)
                                    + row(2, "px-2", "10.0.0.6", 3128, 1) + "\n",
                                  "egress");
  BOOST_REQUIRE_MESSAGE(rows, why(rows));
  BOOST_REQUIRE_EQUAL(rows->size(), 2u);
  BOOST_CHECK_EQUAL((*rows)[0].name, "px-1");
  BOOST_CHECK_EQUAL((*rows)[0].address, "10.0.0.5");
  BOOST_CHECK_EQUAL((*rows)[0].port, 3128u);
  BOOST_CHECK(!(*rows)[0].in_maint());
  BOOST_CHECK((*rows)[1].in_maint());
  auto empty = parse_servers_state(header + "\n", "egress");
  BOOST_REQUIRE(empty);
  BOOST_CHECK(empty->empty());
}

BOOST_AUTO_TEST_CASE(an_answer_that_is_not_haproxys_is_garbage_naming_what_was_wrong) {
  auto unknown = parse_servers_state("Can't find backend.\n\n", "egress");
  BOOST_REQUIRE(!unknown);
  BOOST_CHECK(is(unknown.error(), ec::gateway_refused));
  for (auto text : {std::string{""}, std::string{"HTTP/1.1 200 OK\r\n\r\n"},
                    std::string{"2\n# be_id\n"}, header + "3 egress 1 px-1\n",
                    header + row(1, "px-1", "10.0.0.5", 3128).replace(9, 1, "x"), // srv_id
                    std::string{"1\n# be_name srv_name\n"},
                    header.substr(0, header.find("srv_port")) + "\n"}) {
    auto r = parse_servers_state(text, "egress");
    BOOST_CHECK_MESSAGE(!r && is(r.error(), ec::gateway_garbage), text);
  }
  auto other = parse_servers_state(header + row(1, "px-1", "10.0.0.5", 3128), "egress_eu");
  BOOST_CHECK(!other && is(other.error(), ec::gateway_garbage));
}

BOOST_AUTO_TEST_CASE(sessions_come_from_show_stat) {
  auto text = "# pxname,svname,qcur,qmax,scur,smax,slim,stot,\n"
              "egress,px-1,0,0,2,5,,40,\n"
              "egress,px-2,0,0,0,1,,4,\n"
              "egress,BACKEND,0,0,2,5,,44,\n";
  auto s = parse_sessions(text, "egress");
  BOOST_REQUIRE_MESSAGE(s, why(s));
  BOOST_CHECK_EQUAL(s->size(), 2u);
  BOOST_CHECK_EQUAL(s->at("px-1"), 2u);
  BOOST_CHECK_EQUAL(s->at("px-2"), 0u);
  BOOST_CHECK(!parse_sessions("No such proxy.\n", "egress"));
  BOOST_CHECK(!parse_sessions("# pxname,svname\negress,px-1\n", "egress"));
  BOOST_CHECK(!parse_sessions("# pxname,svname,scur,\negress,px-1,many,\n", "egress"));
}

BOOST_AUTO_TEST_CASE(show_info_tells_who_answers) {
  auto info = parse_info("Name: HAProxy\nVersion: 2.6.12-1+deb12u4\nPid: 4242\nUptime_sec: 17\n");
  BOOST_REQUIRE_MESSAGE(info, why(info));
  BOOST_CHECK_EQUAL(info->pid, 4242u);
  BOOST_CHECK_EQUAL(info->uptime_s, 17u);
  BOOST_CHECK(!parse_info("Name: nginx\nPid: 1\n"));
  BOOST_CHECK(!parse_info("Name: HAProxy\nPid: many\n"));
  BOOST_CHECK(!parse_info("SSH-2.0-OpenSSH_9.2p1\r\n"));
}

BOOST_AUTO_TEST_CASE(a_command_counts_only_with_its_own_success_answer) {
  BOOST_CHECK(!check_answer(answer_kind::empty, "\n", "set server egress/a state maint"));
  BOOST_CHECK(!check_answer(answer_kind::added, "New server registered.\n\n", "add server"));
  BOOST_CHECK(!check_answer(answer_kind::deleted, "Server deleted.\n", "del server"));
  BOOST_CHECK(!check_answer(answer_kind::moved,
                            "no need to change the addr, port changed from '1' to '2' by "
                            "'stats socket command'\n",
                            "set server addr"));
  auto refused = check_answer(answer_kind::deleted,
                              "Only servers in maintenance mode can be deleted.\n",
                              "del server egress/a");
  BOOST_REQUIRE(refused);
  BOOST_CHECK(is(refused, ec::gateway_refused));
  BOOST_CHECK_MESSAGE(detail(refused).find("maintenance mode") != std::string::npos,
                      detail(refused));
  BOOST_CHECK(check_answer(answer_kind::empty, "No such server.\n", "set server egress/x"));
  BOOST_CHECK(check_answer(answer_kind::added, "Permission denied\n", "add server"));
}

// The plan, tabled: what HAProxy lists and what the rotation wants -> the
// commands, in order.
BOOST_AUTO_TEST_CASE(spec_29_the_plan_brings_a_backend_to_the_rotation) {
  auto t0 = clock::now();
  struct row_case {
    const char* what;
    std::vector<wanted_server> wanted;
    std::vector<server_row> listed;
    std::map<std::string, uint64_t> sessions;
    std::map<std::string, clock::time_point> since;
    std::vector<std::string> commands;
  };
  std::vector<row_case> cases{
    {"in sync: nothing", {{"a", "10.0.0.1", 3128}}, {listed("a", "10.0.0.1", 3128)}, {}, {}, {}},
    {"missing: added, then ready",
     {{"a", "10.0.0.1", 3128}},
     {},
     {},
     {},
     {"add server egress/a 10.0.0.1:3128", "set server egress/a state ready"}},
    {"an IPv6 address is bracketed",
     {{"a", "fd00::1", 3128}},
     {},
     {},
     {},
     {"add server egress/a [fd00::1]:3128", "set server egress/a state ready"}},
    {"moved: a new address",
     {{"a", "10.0.0.2", 3128}},
     {listed("a", "10.0.0.1", 3128)},
     {},
     {},
     {"set server egress/a addr 10.0.0.2 port 3128"}},
    {"rejoined from maintenance",
     {{"a", "10.0.0.1", 3128}},
     {listed("a", "10.0.0.1", 3128, admin_forced_maint)},
     {},
     {},
     {"set server egress/a state ready"}},
    {"rejoined from drain",
     {{"a", "10.0.0.1", 3128}},
     {listed("a", "10.0.0.1", 3128, admin_forced_drain)},
     {},
     {},
     {"set server egress/a state ready"}},
    {"left: maintenance at once", {}, {listed("a", "10.0.0.1", 3128)}, {}, {},
     {"set server egress/a state maint"}},
    {"left, sessions in flight: kept", {}, {listed("a", "10.0.0.1", 3128, admin_forced_maint)},
     {{"a", 2}}, {{"a", t0}}, {}},
    {"left, no session: deleted", {}, {listed("a", "10.0.0.1", 3128, admin_forced_maint)},
     {{"a", 0}}, {{"a", t0}}, {"del server egress/a"}},
    {"left, past the grace: sessions ended, deleted", {},
     {listed("a", "10.0.0.1", 3128, admin_forced_maint)}, {{"a", 2}}, {{"a", t0 - 31s}},
     {"shutdown sessions server egress/a", "del server egress/a"}},
    {"left, sessions unknown: kept until the grace", {},
     {listed("a", "10.0.0.1", 3128, admin_forced_maint)}, {}, {{"a", t0}}, {}},
  };
  for (auto& c : cases) {
    sync_input in;
    in.backend = "egress";
    in.wanted = c.wanted;
    in.listed = c.listed;
    in.sessions = c.sessions;
    in.draining_since = c.since;
    in.now = t0;
    in.grace = 30s;
    auto plan = plan_sync(in);
    BOOST_CHECK_MESSAGE(texts(plan) == c.commands, c.what);
  }
}

BOOST_AUTO_TEST_CASE(spec_30_a_drain_keeps_its_start_and_ends_with_the_server) {
  auto t0 = clock::now();
  sync_input in;
  in.backend = "egress";
  in.listed = {listed("a", "10.0.0.1", 3128)};
  in.now = t0;
  auto first = plan_sync(in);
  BOOST_CHECK(first.draining_since.at("a") == t0);
  BOOST_CHECK_EQUAL(first.draining, 1u);
  BOOST_CHECK(!needs_sessions(in)); // not in maintenance yet: it gets there first
  in.listed = {listed("a", "10.0.0.1", 3128, admin_forced_maint)};
  in.draining_since = first.draining_since;
  in.now = t0 + 10s;
  BOOST_CHECK(needs_sessions(in));
  in.sessions = {{"a", 1}};
  auto second = plan_sync(in);
  BOOST_CHECK(second.commands.empty());
  BOOST_CHECK(second.draining_since.at("a") == t0); // from the first time it left
  in.sessions = {{"a", 0}};
  auto third = plan_sync(in);
  BOOST_CHECK_EQUAL(third.removed, 1u);
  BOOST_CHECK(third.draining_since.empty());
}

// -- the runtime API client against sockets that misbehave ---------------------

namespace {

// A unix socket server of this test: answers every connection with
// `reply` (repeated without end when `endless`), or nothing (`silent`).
class fake_socket {
public:
  enum class mode { reply, endless, silent };

  fake_socket(mode m, std::string reply = {}) : mode_(m), reply_(std::move(reply)) {
    path_ = "/tmp/egress-haproxy-test-" + std::to_string(::getpid()) + "-"
            + std::to_string(counter_++) + ".sock";
    ::unlink(path_.c_str());
    fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::copy(path_.begin(), path_.end(), sa.sun_path);
    BOOST_REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
    BOOST_REQUIRE(::listen(fd_, 16) == 0);
    thread_ = std::thread([this] { serve(); });
  }

  ~fake_socket() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
    ::unlink(path_.c_str());
  }

  const std::string& path() const { return path_; }

private:
  void serve() {
    while (!stop_) {
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0)
        return;
      char buf[256];
      (void) ::recv(c, buf, sizeof buf, 0);
      if (mode_ == mode::reply) {
        (void) ::send(c, reply_.data(), reply_.size(), MSG_NOSIGNAL);
      } else if (mode_ == mode::endless) {
        std::string chunk(65536, 'x');
        while (!stop_ && ::send(c, chunk.data(), chunk.size(), MSG_NOSIGNAL) > 0) {
        }
      } else {
        pollfd p{c, POLLIN, 0};
        while (!stop_ && ::poll(&p, 1, 50) == 0) {
        }
      }
      ::close(c);
    }
  }

  static inline int counter_ = 0;
  mode mode_;
  std::string reply_;
  std::string path_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

} // namespace

BOOST_AUTO_TEST_CASE(spec_31_a_socket_that_is_gone_hung_or_endless_is_bounded_and_named) {
  runtime_api gone{endpoint::parse("/tmp/egress-haproxy-test-none.sock")};
  auto r = gone.run("show info", clock::now() + 1s);
  BOOST_REQUIRE(!r);
  BOOST_CHECK(is(r.error(), ec::gateway_unreachable));

  fake_socket endless{fake_socket::mode::endless};
  runtime_api api{endpoint::parse(endless.path())};
  auto t0 = clock::now();
  auto big = api.run("show servers state egress", clock::now() + 5s, 1 << 20);
  BOOST_REQUIRE(!big);
  BOOST_CHECK(is(big.error(), ec::gateway_garbage));
  BOOST_CHECK_MESSAGE(detail(big.error()).find("longer than 1048576 bytes") != std::string::npos,
                      detail(big.error()));
  BOOST_CHECK_LT(clock::now() - t0, 2s);

  fake_socket silent{fake_socket::mode::silent};
  runtime_api hung{endpoint::parse(silent.path())};
  t0 = clock::now();
  auto late = hung.run("show servers state egress", clock::now() + 300ms);
  BOOST_REQUIRE(!late);
  BOOST_CHECK(is(late.error(), ec::gateway_timeout));
  BOOST_CHECK_LT(clock::now() - t0, 1s);

  // A kill from another thread ends a blocked exchange at once.
  runtime_api killed{endpoint::parse(silent.path())};
  std::thread killer([&] {
    std::this_thread::sleep_for(100ms);
    killed.kill();
  });
  t0 = clock::now();
  auto k = killed.run("show servers state egress", clock::now() + 10s);
  killer.join();
  BOOST_REQUIRE(!k);
  BOOST_CHECK_LT(clock::now() - t0, 1s);
  BOOST_CHECK(!killed.run("show info", clock::now() + 1s)); // and every later one

  fake_socket garbage{fake_socket::mode::reply, "HTTP/1.1 400 Bad Request\r\n\r\n"};
  runtime_api g{endpoint::parse(garbage.path())};
  auto text = g.run("show servers state egress", clock::now() + 1s);
  BOOST_REQUIRE(text); // an answer: what it says is for the parser to judge
  BOOST_CHECK(!parse_servers_state(*text, "egress"));
}

// -- GET /rotation -------------------------------------------------------------

BOOST_AUTO_TEST_CASE(after_must_be_a_generation) {
  BOOST_CHECK(!parse_after("").given);
  auto a = parse_after("after=12");
  BOOST_CHECK(a.given && a.valid && a.generation == 12);
  auto b = parse_after("x=1&after=7");
  BOOST_CHECK(b.valid && b.generation == 7);
  for (auto bad : {"after=", "after=x", "after=-1", "after=+1", "after=1e3",
                   "after=99999999999999999999", "after=1 "})
    BOOST_CHECK_MESSAGE(!parse_after(bad).valid, bad);
  auto r = parse_scrape_request("GET /rotation?after=3 HTTP/1.1\r\n\r\n");
  BOOST_CHECK_EQUAL(r.path, "/rotation");
  BOOST_CHECK_EQUAL(r.query, "after=3");
}

BOOST_AUTO_TEST_CASE(the_rotation_renders_as_json) {
  rotation_book book;
  rotation_member m;
  m.name = "px-1";
  m.host = "hv1";
  m.address = "fd00::5";
  m.port = 3128;
  m.tags = {"eu", "a \"quoted\" tag"};
  m.probe_ms = 12;
  book.put(m);
  auto j = nlohmann::json::parse(rotation_json(*book.snapshot("node-a")));
  BOOST_CHECK_EQUAL(j["generation"], 1);
  BOOST_CHECK_EQUAL(j["node"], "node-a");
  BOOST_CHECK_EQUAL(j["size"], 1);
  auto& p = j["proxies"][0];
  BOOST_CHECK_EQUAL(p["endpoint"], "[fd00::5]:3128");
  BOOST_CHECK_EQUAL(p["tags"][1], "a \"quoted\" tag");
  BOOST_CHECK_EQUAL(p["probe_ms"], 12);
  BOOST_CHECK_EQUAL(p["joined_at"].get<std::string>().size(), 20u);
  // The same object until the next change.
  BOOST_CHECK(book.snapshot("node-a") == book.snapshot("node-a"));
  BOOST_CHECK(!book.put(m));        // nothing moved
  BOOST_CHECK(book.remove("px-1")); // a leave
  BOOST_CHECK(!book.remove("px-1"));
  BOOST_CHECK_EQUAL(book.generation(), 2u);
}

// -- the engine in front of a socket that misbehaves ---------------------------

// A socket that answers garbage, answers without end, or is not there: the
// gateway reports it (state, cause, reason) while the fleet goes on, its
// rotation unchanged and its status answered at once.
BOOST_FIXTURE_TEST_CASE(spec_31_a_gateway_socket_that_misbehaves_is_reported_and_costs_nothing,
                        test::engine_fixture) {
  struct socket_case {
    const char* what;
    std::unique_ptr<fake_socket> server;
    uint64_t gateway_status::*counter;
  };
  std::vector<socket_case> cases;
  cases.push_back({"garbage", std::make_unique<fake_socket>(fake_socket::mode::reply,
                                                            "HTTP/1.1 400 Bad Request\r\n\r\n"),
                   &gateway_status::errors_garbage});
  cases.push_back({"endless", std::make_unique<fake_socket>(fake_socket::mode::endless),
                   &gateway_status::errors_garbage});
  cases.push_back({"silent", std::make_unique<fake_socket>(fake_socket::mode::silent),
                   &gateway_status::errors_timeout});
  cases.push_back({"gone", nullptr, &gateway_status::errors_gone});
  for (auto& c : cases) {
    auto cfg = test::test_config("gw-unit");
    cfg.hosts.push_back(test::test_host("hv1"));
    for (auto n : {"px-1", "px-2"})
      cfg.proxies.push_back(test::test_proxy(n, "hv1"));
    cfg.gateway.enabled = true;
    cfg.gateway.socket = c.server ? c.server->path() : "/tmp/egress-haproxy-test-gone.sock";
    cfg.gateway.call_budget = 300ms;
    auto eng = engine::start(*sys, cfg);
    test::stop_on_exit guard{eng};
    BOOST_REQUIRE(eng);
    BOOST_CHECK_MESSAGE(wait_status(*eng, [](auto& st) { return st.rotation.size() == 2; }, 5s),
                        c.what);
    BOOST_CHECK_MESSAGE(wait_status(*eng, [&](auto& st) {
      return st.gateway.state == haproxy_state::unreachable && st.gateway.*(c.counter) > 0;
    }, 5s), c.what);
    auto t0 = clock::now();
    auto st = eng->status(1s);
    BOOST_REQUIRE(st);
    BOOST_CHECK_LT(clock::now() - t0, 200ms);
    BOOST_TEST_MESSAGE(c.what << ": " << st->gateway.reason);
    BOOST_CHECK(!st->gateway.reason.empty());
    BOOST_CHECK(!eng->stop());
  }
}
