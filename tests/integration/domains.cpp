#define BOOST_TEST_MODULE domains
// Address discovery against a real private libvirtd (qemu driver, a real
// QEMU without a guest OS, NIC or agent): the guest agent source fails
// ("not configured"), the lease source answers empty. docs/notes/failures.md#unreadable-address-taken-for-missing: an
// unreadable address must never be mistaken for a missing one.
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <string>

#include "messages/error.hpp"
#include "providers/libvirt/connection.hpp"
#include "providers/libvirt/domains.hpp"
#include "testbed/engine_fixture.hpp"
#include "testbed/testbed.hpp"

using namespace egress;
using namespace std::chrono_literals;
using test::stop_on_exit;

namespace {

struct root_required {
  root_required() { testbed::require_root_or_skip(); }
};

struct fixture : test::engine_fixture {
  root_required root;
  testbed::libvirtd lv; // warm QEMU capabilities: the domain really starts
  lv::connection_ptr conn;

  fixture() {
    lv.start();
    auto c = lv::connection::open(lv.uri());
    if (!c)
      BOOST_FAIL(render(c.error()));
    conn = *c;
  }
  ~fixture() {
    sys.reset();
    for (auto n : {"h3-direct", "h3-proxy"})
      lv::delete_domain(*conn, n);
  }

  void start_domain(const std::string& name) {
    domain_spec s;
    s.name = name;
    s.domain_type = "qemu";
    s.mark.uid = "0123456789abcdef0123456789abcdef";
    s.mark.created_at = "2026-12-02T12:00:00Z";
    s.mark.entry = "h3";
    s.mark.spec_hash = "ab12";
    auto r = lv::define_and_start(*conn, s);
    if (!r)
      BOOST_FAIL(render(r.error()));
  }
};

} // namespace

BOOST_FIXTURE_TEST_SUITE(address_sources_suite, fixture)

// One source failing while another answers (empty) is "no address yet": the
// read succeeds, the failure is kept as a note.
BOOST_AUTO_TEST_CASE(spec_10_one_source_failing_while_another_answers_is_no_address_yet) {
  start_domain("h3-direct");
  auto r = lv::read_domain(*conn, "h3-direct",
                           {lv::address_source::agent, lv::address_source::lease});
  BOOST_REQUIRE_MESSAGE(r, (r ? std::string{} : render(r.error())));
  BOOST_CHECK(r->exists);
  BOOST_CHECK(r->state == domain_state::running);
  BOOST_CHECK(r->addresses.empty());
  BOOST_REQUIRE_EQUAL(r->notes.size(), 1u);
  BOOST_TEST_MESSAGE("agent's failure, kept as a note: " << r->notes.front());
  BOOST_CHECK(r->notes.front().find("agent") != std::string::npos);
}

// Every source failing is a transient error naming each failure, never an
// empty address.
BOOST_AUTO_TEST_CASE(spec_10_every_source_failing_is_transient) {
  start_domain("h3-direct");
  auto r = lv::read_domain(*conn, "h3-direct", {lv::address_source::agent});
  BOOST_REQUIRE(!r);
  BOOST_TEST_MESSAGE("every source failed: " << render(r.error()));
  BOOST_CHECK(r.error() == ec::no_address_source);
  BOOST_CHECK(kind_of(r.error()) == error_kind::transient);
  BOOST_CHECK(detail(r.error()).find("agent") != std::string::npos);
}

// Through the engine: a proxy whose every address source fails, and whose
// link is then killed under it, records transient errors and is never
// latched as failed; it stays provisioning-or-earlier without an address.
BOOST_AUTO_TEST_CASE(spec_10_a_transient_read_error_never_latches_a_proxy) {
  start_domain("h3-proxy"); // adopted by its mark: entry "h3"
  auto cfg = test::test_config("h3");
  auto h = test::test_host("hv1", lv.uri());
  h.domain_type = "qemu";
  h.network.clear();
  h.address_sources = {"agent"};
  cfg.hosts.push_back(h);
  auto p = test::test_proxy("h3-proxy", "hv1");
  p.network.clear();
  cfg.proxies.push_back(p);
  auto eng = engine::start(*sys, cfg);
  BOOST_REQUIRE(eng);
  stop_on_exit guard{eng};
  // (Status is pushed on change, so it is the error text that moves.)
  proxy_status last;
  auto seen = [&](const std::string& code) {
    return wait_status(*eng, [&](const fleet_status& st) {
      if (st.proxies.empty())
        return false;
      last = st.proxies.front();
      BOOST_CHECK(last.phase != proxy_phase::failed);
      return last.last_error_kind == "transient"
             && last.last_error.find(code) != std::string::npos;
    }, 10s);
  };
  BOOST_REQUIRE(seen("no_address_source"));
  {
    caf::scoped_actor self{*sys};
    self->request(eng->fleet(), 5s, atom::kill_v, std::string{"hv1"})
      .receive([](link_status&) {}, [](caf::error& e) { BOOST_ERROR(render(e)); });
  }
  // For 1.5 s after the kill (the dead link, its redial, more failing reads;
  // a read that hits the dead link shows link_down, but the next poll may
  // replace it before a sample sees it): never failed, every error transient.
  auto until = std::chrono::steady_clock::now() + 1500ms;
  size_t samples = 0;
  wait_status(*eng, [&](const fleet_status& st) {
    if (!st.proxies.empty()) {
      auto& p = st.proxies.front();
      ++samples;
      BOOST_CHECK(p.phase != proxy_phase::failed);
      BOOST_CHECK(p.last_error.empty() || p.last_error_kind == "transient");
      if (p.last_error.find("link_down") != std::string::npos)
        BOOST_TEST_MESSAGE("a read on the dead link: " << p.last_error);
    }
    return std::chrono::steady_clock::now() > until;
  }, 5s);
  BOOST_CHECK(samples > 10);
  BOOST_CHECK(wait_status(*eng, [](const fleet_status& st) {
    return !st.links.empty() && st.links.front().deaths >= 1; // the kill happened
  }));
  BOOST_CHECK(seen("no_address_source")); // redialled, the sources fail again
  BOOST_TEST_MESSAGE("proxy: " << to_string(last.phase) << " (" << last.last_error_kind
                               << ") " << last.last_error);
  BOOST_CHECK(last.phase != proxy_phase::failed);
  BOOST_CHECK(last.address.empty());
  BOOST_CHECK(!eng->stop());
}

BOOST_AUTO_TEST_SUITE_END()
