// What the cluster keeps in etcd and how it reads it back
// (actors/parts/cluster_keys.hpp): keys parsed strictly, values written by
// another node read as untrusted.
#define BOOST_TEST_MODULE cluster_keys
#include <boost/test/unit_test.hpp>

#include "actors/parts/cluster_keys.hpp"

using namespace egress;

namespace {

rotation_member member(std::string name, std::string address) {
  rotation_member m;
  m.name = std::move(name);
  m.host = "hv1";
  m.address = std::move(address);
  m.port = 3128;
  m.tags = {"eu"};
  m.joined_at = "2026-12-07T00:00:00Z";
  return m;
}

} // namespace

BOOST_AUTO_TEST_CASE(keys_name_their_kind_and_nothing_else_parses) {
  cluster_keys k{"/egress-engine", "prod"};
  BOOST_CHECK_EQUAL(k.host("hv1"), "/egress-engine/prod/hosts/hv1");
  auto h = k.parse("/egress-engine/prod/hosts/hv1");
  BOOST_REQUIRE(h);
  BOOST_CHECK(h->kind == cluster_key_kind::host);
  BOOST_CHECK_EQUAL(h->name, "hv1");
  BOOST_CHECK(k.parse(k.node("n1"))->kind == cluster_key_kind::node);
  BOOST_CHECK(k.parse(k.rotation("n1"))->kind == cluster_key_kind::rotation);
  for (auto bad : {"/egress-engine/other/hosts/hv1", "/egress-engine/prod/hosts/",
                   "/egress-engine/prod/hosts/a/b", "/egress-engine/prod/groups/g",
                   "/egress-engine/prod/hosts/../x", "/egress-engine/prod"})
    BOOST_CHECK_MESSAGE(!k.parse(bad), bad);
}

BOOST_AUTO_TEST_CASE(members_round_trip) {
  std::vector<rotation_member> ms{member("px-1", "10.0.0.5"), member("px-2", "fd00::5")};
  auto back = decode_members(encode_members(ms));
  BOOST_REQUIRE(back);
  BOOST_REQUIRE_EQUAL(back->size(), 2u);
  BOOST_CHECK_EQUAL((*back)[1].address, "fd00::5");
  BOOST_CHECK_EQUAL((*back)[0].tags.front(), "eu");
  BOOST_CHECK(decode_avoid(encode_avoid({"hv1", "hv2"})) == (std::vector<std::string>{"hv1", "hv2"}));
}

BOOST_AUTO_TEST_CASE(spec_41_another_nodes_member_the_config_would_not_accept_is_refused) {
  // Another node's share reaches this node's HAProxy: a name with a space
  // or a ';' would be a second command on its runtime API.
  for (auto bad : {member("px 1", "10.0.0.5"), member("px;x", "10.0.0.5"),
                   member("px-1", "10.0.0.5; shutdown"), member("px-1", "example.com"),
                   member("px-1", "")})
    BOOST_CHECK_MESSAGE(!decode_members(encode_members({bad})), bad.name << " " << bad.address);
  auto no_port = member("px-1", "10.0.0.5");
  no_port.port = 0;
  BOOST_CHECK(!decode_members(encode_members({no_port})));
  for (auto garbage : {"", "{", "[1]", "{\"avoid\":3}", "[{\"name\":3}]", "null"}) {
    BOOST_CHECK(!decode_members(garbage));
    BOOST_CHECK(!decode_avoid(garbage));
  }
}

BOOST_AUTO_TEST_CASE(invalid_utf8_is_replaced_not_thrown) {
  auto m = member("px-1", "10.0.0.5");
  m.joined_at = "\xff\xfe";
  auto text = encode_members({m});
  BOOST_CHECK(!text.empty());
  BOOST_CHECK(decode_members(text));
}
