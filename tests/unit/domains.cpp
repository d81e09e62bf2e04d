#define BOOST_TEST_MODULE domains
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>

#include "messages/error.hpp"
#include "providers/libvirt/connection.hpp"
#include "providers/libvirt/domain_xml.hpp"
#include "providers/libvirt/domains.hpp"
#include "providers/libvirt/watch.hpp"

using namespace egress;
namespace fs = std::filesystem;

namespace {

std::string code_of(const caf::error& err) {
  return to_string(static_cast<ec>(err.code()));
}

std::string kind(const caf::error& err) {
  return to_string(kind_of(err));
}

// A node XML of our own, used until config/testnode.xml exists.
const char* fallback_node = R"(<node>
  <network>
    <name>lab-net</name>
    <bridge name="virbr9"/>
    <forward/>
    <ip address="192.168.124.1" netmask="255.255.255.0">
      <dhcp><range start="192.168.124.2" end="192.168.124.254"/></dhcp>
    </ip>
  </network>
  <domain type="test">
    <name>fixture</name>
    <memory>65536</memory>
    <os><type>hvm</type></os>
  </domain>
</node>
)";

struct temp_dir {
  fs::path path;
  temp_dir() {
    std::string tmpl = (fs::temp_directory_path() / "egress-lv-XXXXXX").string();
    path = mkdtemp(tmpl.data());
  }
  ~temp_dir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
};

// test:///default, and a node XML: the project's if present, else ours.
std::vector<std::string> uris() {
  fs::path node = fs::path{EGRESS_SOURCE_DIR} / "config" / "testnode.xml";
  if (!fs::exists(node)) {
    static temp_dir dir;
    node = dir.path / "testnode.xml";
    std::ofstream{node} << fallback_node;
  }
  return {"test:///default", "test://" + node.string()};
}

// Boost.Test builds assertion messages eagerly: never touch .error() of a
// value.
template <class T>
std::string why(const caf::expected<T>& x) {
  return x ? std::string{} : render(x.error());
}

lv::connection_ptr open(const std::string& uri) {
  auto c = lv::connection::open(uri);
  BOOST_REQUIRE_MESSAGE(c, why(c));
  return *c;
}

// The first active network of the node, or "" (then domains get no NIC).
std::string some_network(lv::connection& c) {
  virNetworkPtr* nets = nullptr;
  int n = virConnectListAllNetworks(c.get(), &nets, VIR_CONNECT_LIST_NETWORKS_ACTIVE);
  std::string name;
  for (int i = 0; i < n; ++i) {
    if (name.empty())
      name = virNetworkGetName(nets[i]);
    virNetworkFree(nets[i]);
  }
  std::free(nets);
  return name;
}

domain_spec spec_for(lv::connection& c, const std::string& name, const std::string& entry) {
  domain_spec s;
  s.name = name;
  s.domain_type = "test";
  s.network = some_network(c);
  s.mark.uid = "0123456789abcdef0123456789abcdef";
  s.mark.created_at = "2024-05-01T12:00:00Z";
  s.mark.entry = entry;
  s.mark.spec_hash = "00ff00ff";
  s.mark.tags = {"eu", "<&\"'"};
  s.mark.host = "hv1";
  return s;
}

void expect_mark(const domain_reading& r, const domain_mark& m) {
  BOOST_TEST(r.has_mark);
  BOOST_TEST(r.mark.uid == m.uid);
  BOOST_TEST(r.mark.created_at == m.created_at);
  BOOST_TEST(r.mark.entry == m.entry);
  BOOST_TEST(r.mark.spec_hash == m.spec_hash);
  BOOST_TEST(r.mark.host == m.host);
  BOOST_TEST(r.mark.tags == m.tags, boost::test_tools::per_element());
}

const std::vector<lv::address_source> all_sources = {
  lv::address_source::lease, lv::address_source::agent, lv::address_source::arp};

bool defined(lv::connection& c, const std::string& name) {
  lv::domain_ptr d{virDomainLookupByName(c.get(), name.c_str())};
  virResetLastError();
  return d != nullptr;
}

} // namespace

BOOST_AUTO_TEST_CASE(define_start_and_read_back) {
  for (auto& uri : uris()) {
    BOOST_TEST_CONTEXT(uri) {
      auto c = open(uri);
      auto spec = spec_for(*c, "dom-read", "lab");
      auto created = lv::define_and_start(*c, spec, all_sources);
      BOOST_REQUIRE_MESSAGE(created, why(created));
      BOOST_TEST(created->exists);
      BOOST_TEST(to_string(created->state) == std::string{"running"});
      expect_mark(*created, spec.mark);
      // The create reads the addresses too: no extra poll to learn them.
      BOOST_TEST(!created->addresses.empty());

      auto r = lv::read_domain(*c, "dom-read", all_sources);
      BOOST_REQUIRE_MESSAGE(r, why(r));
      BOOST_TEST(r->exists);
      BOOST_TEST(to_string(r->state) == std::string{"running"});
      expect_mark(*r, spec.mark);
      BOOST_TEST(r->notes.empty());
      for (auto& a : r->addresses)
        BOOST_TEST_MESSAGE(uri << ": network " << spec.network << ", address " << a);
      if (spec.network.empty()) {
        BOOST_TEST(r->addresses.empty());
      } else {
        // The test driver's fake lease, without its prefix length.
        BOOST_REQUIRE(!r->addresses.empty());
        for (auto& a : r->addresses)
          BOOST_TEST(a.find('/') == std::string::npos, a);
      }
      BOOST_TEST(!lv::delete_domain(*c, "dom-read"));
    }
  }
}

BOOST_AUTO_TEST_CASE(stopped_domain_reads_back_without_addresses) {
  for (auto& uri : uris()) {
    BOOST_TEST_CONTEXT(uri) {
      auto c = open(uri);
      auto spec = spec_for(*c, "dom-stopped", "lab");
      BOOST_REQUIRE(lv::define_and_start(*c, spec));
      lv::domain_ptr d{virDomainLookupByName(c->get(), "dom-stopped")};
      BOOST_REQUIRE(virDomainDestroy(d.get()) == 0);
      auto r = lv::read_domain(*c, "dom-stopped", all_sources);
      BOOST_REQUIRE(r);
      BOOST_TEST(r->exists);
      BOOST_TEST(to_string(r->state) == std::string{"shutoff"});
      BOOST_TEST(r->addresses.empty());
      expect_mark(*r, spec.mark);
      // start_domain brings it back, and is idempotent.
      BOOST_TEST(!lv::start_domain(*c, "dom-stopped"));
      BOOST_TEST(!lv::start_domain(*c, "dom-stopped"));
      r = lv::read_domain(*c, "dom-stopped", {});
      BOOST_REQUIRE(r);
      BOOST_TEST(to_string(r->state) == std::string{"running"});
      BOOST_TEST(code_of(lv::start_domain(*c, "dom-never")) == "no_domain");
      BOOST_TEST(!lv::delete_domain(*c, "dom-stopped"));
    }
  }
}

BOOST_AUTO_TEST_CASE(list_marked_filters_by_entry) {
  for (auto& uri : uris()) {
    BOOST_TEST_CONTEXT(uri) {
      auto c = open(uri);
      BOOST_REQUIRE(lv::define_and_start(*c, spec_for(*c, "dom-ours", "lab")));
      BOOST_REQUIRE(lv::define_and_start(*c, spec_for(*c, "dom-theirs", "other")));
      // An unmarked domain, as someone else would define it.
      lv::domain_ptr plain{virDomainDefineXML(
        c->get(), "<domain type='test'><name>dom-plain</name><memory>65536</memory>"
                  "<os><type>hvm</type></os></domain>")};
      BOOST_REQUIRE(plain);

      auto listed = lv::list_marked(*c, "lab");
      BOOST_REQUIRE_MESSAGE(listed, why(listed));
      std::vector<std::string> names;
      for (auto& r : *listed) {
        names.push_back(r.name);
        BOOST_TEST(r.mark.entry == "lab");
        BOOST_TEST(r.exists);
        BOOST_TEST(r.addresses.empty());
      }
      BOOST_TEST(std::count(names.begin(), names.end(), "dom-ours") == 1);
      BOOST_TEST(std::count(names.begin(), names.end(), "dom-theirs") == 0);
      BOOST_TEST(std::count(names.begin(), names.end(), "dom-plain") == 0);
      auto ours = std::find_if(listed->begin(), listed->end(),
                               [](auto& r) { return r.name == "dom-ours"; });
      BOOST_REQUIRE(ours != listed->end());
      BOOST_TEST(to_string(ours->state) == std::string{"running"});

      for (auto name : {"dom-ours", "dom-theirs", "dom-plain"})
        BOOST_TEST(!lv::delete_domain(*c, name), name);
    }
  }
}

BOOST_AUTO_TEST_CASE(delete_then_read_is_missing_and_delete_is_idempotent) {
  for (auto& uri : uris()) {
    BOOST_TEST_CONTEXT(uri) {
      auto c = open(uri);
      BOOST_REQUIRE(lv::define_and_start(*c, spec_for(*c, "dom-gone", "lab")));
      auto err = lv::delete_domain(*c, "dom-gone");
      BOOST_TEST(!err, render(err));
      auto r = lv::read_domain(*c, "dom-gone", all_sources);
      BOOST_REQUIRE(r);
      BOOST_TEST(!r->exists);
      BOOST_TEST(r->name == "dom-gone");
      BOOST_TEST(!defined(*c, "dom-gone"));
      BOOST_TEST(!lv::delete_domain(*c, "dom-gone"));
      BOOST_TEST(!lv::delete_domain(*c, "dom-never-existed"));
    }
  }
}

BOOST_AUTO_TEST_CASE(spec_14_invalid_name_defines_nothing) {
  for (auto& uri : uris()) {
    BOOST_TEST_CONTEXT(uri) {
      auto c = open(uri);
      int before = virConnectNumOfDomains(c->get()) + virConnectNumOfDefinedDomains(c->get());
      for (auto& bad : std::vector<std::string>{"Dom-Bad", "dom/../x", "dom<x>", std::string(300, 'd')}) {
        auto r = lv::define_and_start(*c, spec_for(*c, bad, "lab"));
        BOOST_REQUIRE(!r);
        BOOST_TEST(code_of(r.error()) == "invalid_name");
        BOOST_TEST(kind(r.error()) == "permanent");
        BOOST_TEST(detail(r.error()).find("domain.name: ") == 0u);
      }
      int after = virConnectNumOfDomains(c->get()) + virConnectNumOfDefinedDomains(c->get());
      BOOST_TEST(before == after);
    }
  }
}

BOOST_AUTO_TEST_CASE(define_never_replaces_an_existing_domain) {
  for (auto& uri : uris()) {
    BOOST_TEST_CONTEXT(uri) {
      auto c = open(uri);
      auto first = spec_for(*c, "dom-twice", "other");
      BOOST_REQUIRE(lv::define_and_start(*c, first));
      auto second = spec_for(*c, "dom-twice", "lab");
      second.mark.uid = "ffffffffffffffffffffffffffffffff";
      auto r = lv::define_and_start(*c, second);
      BOOST_REQUIRE(!r);
      BOOST_TEST(kind(r.error()) == "permanent", why(r));
      auto back = lv::read_domain(*c, "dom-twice", {});
      BOOST_REQUIRE(back);
      expect_mark(*back, first.mark);
      BOOST_TEST(!lv::delete_domain(*c, "dom-twice"));
    }
  }
}

BOOST_AUTO_TEST_CASE(mark_set_under_another_prefix_is_still_found) {
  // virDomainSetMetadata stores the mark under the key it is given; the
  // engine must find it by namespace whatever the prefix.
  for (auto& uri : uris()) {
    BOOST_TEST_CONTEXT(uri) {
      auto c = open(uri);
      lv::domain_ptr d{virDomainDefineXML(
        c->get(), "<domain type='test'><name>dom-prefix</name><memory>65536</memory>"
                  "<os><type>hvm</type></os></domain>")};
      BOOST_REQUIRE(d);
      auto mark = spec_for(*c, "dom-prefix", "lab").mark;
      auto xml = lv::build_mark_xml(mark);
      BOOST_REQUIRE(xml);
      BOOST_REQUIRE(virDomainSetMetadata(d.get(), VIR_DOMAIN_METADATA_ELEMENT, xml->c_str(),
                                         "zz", lv::mark_namespace, 0)
                    == 0);
      auto r = lv::read_domain(*c, "dom-prefix", all_sources);
      BOOST_REQUIRE(r);
      expect_mark(*r, mark);
      BOOST_TEST(!lv::delete_domain(*c, "dom-prefix"));
    }
  }
}

BOOST_AUTO_TEST_CASE(parse_address_source_names) {
  BOOST_TEST((lv::parse_address_source("lease") == lv::address_source::lease));
  BOOST_TEST((lv::parse_address_source("agent") == lv::address_source::agent));
  BOOST_TEST((lv::parse_address_source("arp") == lv::address_source::arp));
  auto bad = lv::parse_address_source("dhcp");
  BOOST_REQUIRE(!bad);
  BOOST_TEST(kind(bad.error()) == "permanent");
}

// An event registration holds a reference on its connection: unless the
// connection deregisters it, closing leaves the connection open and the
// sink alive, one of each per dial (docs/spec.md 27).
BOOST_AUTO_TEST_CASE(spec_27_a_watched_connection_closes_and_frees_its_sink) {
  auto token = std::make_shared<int>(0);
  std::weak_ptr<int> held = token;
  {
    auto c = lv::connection::open("test:///default");
    BOOST_REQUIRE(c);
    auto err = lv::watch_domains(**c, [token](const std::string&, domain_change) {});
    BOOST_REQUIRE_MESSAGE(!err, render(err));
    token.reset();
    BOOST_CHECK(!held.expired()); // libvirt holds the sink
  }
  for (int i = 0; i < 200 && !held.expired(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  BOOST_CHECK(held.expired());
}
