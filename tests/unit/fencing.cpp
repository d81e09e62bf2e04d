// The fence on the host (docs/spec.md 39): in a cluster every mark carries
// the owner's node and fencing token; a node rewrites an older token with
// its own when it reads a domain, never a newer one, and refuses a domain
// whose mark is newer than its claim. Against libvirt's in-process test
// driver, with a real host link and proxy actor (no fleet, no etcd).
#define BOOST_TEST_MODULE fencing
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <mutex>

#include <caf/scoped_actor.hpp>

#include "actors/host_link.hpp"
#include "actors/parts/transport_choice.hpp"
#include "actors/proxy.hpp"
#include "messages/error.hpp"
#include "providers/libvirt/domains.hpp"
#include "testbed/engine_fixture.hpp"

using namespace egress;
using namespace std::chrono_literals;

namespace {

// What a proxy told its sink: its statuses and the tokens it found newer.
struct sink_log {
  std::mutex mtx;
  std::vector<proxy_status> statuses;
  std::vector<std::pair<std::string, int64_t>> superseded;

  std::optional<proxy_status> last() {
    std::lock_guard<std::mutex> guard{mtx};
    if (statuses.empty())
      return std::nullopt;
    return statuses.back();
  }
};

status_sink_actor::behavior_type sink_of(status_sink_actor::pointer,
                                         std::shared_ptr<sink_log> log) {
  return {
    [](link_status&) {},
    [log](proxy_status& s) {
      std::lock_guard<std::mutex> guard{log->mtx};
      log->statuses.push_back(std::move(s));
    },
    [](image_status&) {},
    [](proxy_health&) {},
    [](gateway_status&) {},
    [log](atom::superseded, const std::string& host, int64_t token) {
      std::lock_guard<std::mutex> guard{log->mtx};
      log->superseded.emplace_back(host, token);
    },
  };
}

domain_spec marked(const std::string& name, const std::string& owner, int64_t token) {
  domain_spec ds;
  ds.name = name;
  ds.domain_type = "test";
  ds.vcpus = 1;
  ds.memory_mib = 64;
  ds.mark.uid = "u" + std::to_string(token);
  ds.mark.created_at = "2026-12-07T00:00:00Z";
  ds.mark.entry = "fencing";
  ds.mark.spec_hash = std::string(64, '0');
  ds.mark.host = "hv1";
  ds.mark.owner = owner;
  ds.mark.token = token;
  return ds;
}

struct fixture : test::engine_fixture {
  lv::connection_ptr w = test::witness();
  std::shared_ptr<sink_log> log = std::make_shared<sink_log>();
  host_link_actor link;
  proxy_actor proxy;

  fixture() {
    host_config h;
    h.name = "hv1";
    h.uri = "test:///default";
    h.domain_type = "test";
    auto o = link_options_of(h, engine_config{});
    o.make_transport = transport_for(h);
    link = sys->spawn(make_host_link, std::move(o));
  }

  ~fixture() {
    caf::anon_send_exit(proxy, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(link, caf::exit_reason::user_shutdown);
    lv::delete_domain(*w, "px");
  }

  // The spec hash a proxy of this spec computes is not what marked() wrote,
  // so the tests read what they need before the hash would matter.
  void spawn_proxy(const std::string& owner, int64_t token) {
    proxy_options o;
    o.spec.name = "px";
    o.spec.host = "hv1";
    o.spec.network = "default";
    o.address_sources = {"lease"};
    o.entry = "fencing";
    o.domain_type = "test";
    o.poll_interval = 200ms;
    o.link = link;
    o.owner = owner;
    o.token = token;
    o.sink = sys->spawn(sink_of, log);
    proxy = sys->spawn(make_proxy, std::move(o));
  }

  domain_mark mark_now() {
    auto r = lv::read_domain(*w, "px", {});
    BOOST_REQUIRE(r && r->exists && r->has_mark);
    return r->mark;
  }
};

} // namespace

BOOST_FIXTURE_TEST_SUITE(fencing_suite, fixture)

BOOST_AUTO_TEST_CASE(spec_39_a_read_stamps_an_older_token_and_leaves_a_newer_one) {
  auto spec = marked("px", "b", 7);
  auto made = lv::define_and_start(*w, spec, {});
  BOOST_REQUIRE_MESSAGE(made, (made ? "" : render(made.error())));
  // An older claim reads and leaves it as it is.
  auto older = lv::read_and_stamp(*w, "px", {}, false, "fencing", "a", 5);
  BOOST_REQUIRE(older);
  BOOST_CHECK_EQUAL(older->mark.token, 7);
  BOOST_CHECK_EQUAL(mark_now().owner, "b");
  // A newer claim stamps it: the node whose claim is older sees it next.
  auto newer = lv::read_and_stamp(*w, "px", {}, false, "fencing", "c", 9);
  BOOST_REQUIRE_MESSAGE(newer, (newer ? std::string{} : render(newer.error())));
  BOOST_CHECK_EQUAL(newer->mark.token, 9);
  auto m = mark_now();
  BOOST_CHECK_EQUAL(m.owner, "c");
  BOOST_CHECK_EQUAL(m.token, 9);
  BOOST_CHECK_EQUAL(m.uid, "u7"); // the rest of the mark is kept
  // Another entry's domain is never stamped.
  auto other = lv::read_and_stamp(*w, "px", {}, false, "other-entry", "d", 11);
  BOOST_REQUIRE(other);
  BOOST_CHECK_EQUAL(mark_now().token, 9);
}

BOOST_AUTO_TEST_CASE(spec_39_a_proxy_refuses_a_domain_of_a_newer_claim) {
  auto made = lv::define_and_start(*w, marked("px", "b", 7), {});
  BOOST_REQUIRE(made);
  spawn_proxy("a", 5);
  BOOST_REQUIRE(test::eventually([&] {
    auto s = log->last();
    return s && s->phase == proxy_phase::failed;
  }, 10s));
  auto s = *log->last();
  BOOST_CHECK_MESSAGE(s.last_error.find("superseded") != std::string::npos, s.last_error);
  {
    std::lock_guard<std::mutex> guard{log->mtx};
    BOOST_REQUIRE_EQUAL(log->superseded.size(), 1u);
    BOOST_CHECK_EQUAL(log->superseded[0].first, "hv1");
    BOOST_CHECK_EQUAL(log->superseded[0].second, 7);
  }
  // Untouched: the same domain, still running, still the newer owner's.
  auto r = lv::read_domain(*w, "px", {});
  BOOST_REQUIRE(r && r->exists);
  BOOST_CHECK(r->state == domain_state::running);
  BOOST_CHECK_EQUAL(r->mark.uid, "u7");
  BOOST_CHECK_EQUAL(r->mark.token, 7);
}

BOOST_AUTO_TEST_CASE(spec_39_a_newer_owner_s_stamp_reaches_the_older_one_at_once) {
  // The older node made it and runs it.
  spawn_proxy("a", 5);
  BOOST_REQUIRE(test::eventually([&] {
    auto s = log->last();
    return s && !s->uid.empty() && s->phase == proxy_phase::running;
  }, 10s));
  BOOST_CHECK_EQUAL(mark_now().token, 5);
  BOOST_CHECK_EQUAL(mark_now().owner, "a");
  // A newer owner stamps it: libvirt's metadata event makes the older
  // proxy read back (its poll timer is off while it is settled).
  auto m = mark_now();
  m.owner = "b";
  m.token = 8;
  BOOST_REQUIRE(!lv::write_mark(*w, "px", m));
  BOOST_CHECK(test::eventually([&] {
    std::lock_guard<std::mutex> guard{log->mtx};
    return !log->superseded.empty();
  }, 5s));
  BOOST_CHECK_EQUAL(mark_now().token, 8);
}

BOOST_AUTO_TEST_SUITE_END()
