#define BOOST_TEST_MODULE domain_xml
#include <boost/test/unit_test.hpp>

#include <string>
#include <vector>

#include <pugixml.hpp>

#include "messages/error.hpp"
#include "messages/names.hpp"
#include "providers/libvirt/domain_xml.hpp"

using namespace egress;

namespace {

const std::string tricky_tag = "<&\"'";

domain_spec valid_spec() {
  domain_spec s;
  s.name = "px-1";
  s.domain_type = "test";
  s.vcpus = 2;
  s.memory_mib = 256;
  s.network = "default";
  s.console_log = "/var/log/egress/px-1.log";
  s.disk = "/var/lib/libvirt/images/egress.lab.proxy.px-1.disk";
  s.disk_format = "qcow2";
  s.seed = "/var/lib/libvirt/images/egress.lab.proxy.px-1.seed";
  s.mark.uid = "0123456789abcdef0123456789abcdef";
  s.mark.created_at = "2024-05-01T12:00:00Z";
  s.mark.entry = "lab";
  s.mark.spec_hash = "ab12cd34";
  s.mark.tags = {"eu-west", tricky_tag};
  return s;
}

// Strings, so that Boost.Test can print what it compares.
std::string code_of(const caf::error& err) {
  return to_string(static_cast<ec>(err.code()));
}

std::string kind(const caf::error& err) {
  return to_string(kind_of(err));
}

bool same(const domain_mark& a, const domain_mark& b) {
  return a.uid == b.uid && a.created_at == b.created_at && a.entry == b.entry
         && a.spec_hash == b.spec_hash && a.tags == b.tags;
}

} // namespace


BOOST_AUTO_TEST_CASE(spec_14_build_domain_xml_rejects_each_unsafe_field) {
  struct field_case {
    std::string field;
    void (*spoil)(domain_spec&);
  };
  std::vector<field_case> cases = {
    {"domain.name", [](domain_spec& s) { s.name = "../px"; }},
    {"domain.name", [](domain_spec& s) { s.name = "px<1>"; }},
    {"domain.name", [](domain_spec& s) { s.name = std::string(300, 'p'); }},
    {"domain.name", [](domain_spec& s) { s.name = ""; }},
    {"domain.type", [](domain_spec& s) { s.domain_type = "kvm' x='y"; }},
    {"domain.network", [](domain_spec& s) { s.network = "net&work"; }},
    {"domain.network", [](domain_spec& s) { s.network = "Default"; }},
    {"domain.console_log", [](domain_spec& s) { s.console_log = "relative.log"; }},
    {"domain.console_log", [](domain_spec& s) { s.console_log = "/var/../etc/passwd"; }},
    {"domain.console_log", [](domain_spec& s) { s.console_log = "/tmp/a\nb"; }},
    {"domain.disk", [](domain_spec& s) { s.disk = "images/x.qcow2"; }},
    {"domain.disk", [](domain_spec& s) { s.disk = "/pool/../etc/shadow"; }},
    {"domain.disk_format", [](domain_spec& s) { s.disk_format = "vmdk"; }},
    {"domain.seed", [](domain_spec& s) { s.seed = "/pool/seed\x01"; }},
    {"domain.kernel", [](domain_spec& s) { s.kernel = "vmlinuz"; }},
    {"domain.initrd", [](domain_spec& s) { s.kernel = "/k"; s.initrd = "/pool/../i"; }},
    {"domain.kernel", [](domain_spec& s) { s.initrd = "/pool/initrd"; }},
    {"domain.kernel", [](domain_spec& s) { s.cmdline = "quiet"; }},
    {"domain.cmdline", [](domain_spec& s) { s.kernel = "/k"; s.cmdline = "a\nb"; }},
    {"domain.mark.host", [](domain_spec& s) { s.mark.host = "Host!"; }},
    {"domain.mark.uid", [](domain_spec& s) { s.mark.uid = "uid\"/>"; }},
    {"domain.mark.uid", [](domain_spec& s) { s.mark.uid = ""; }},
    {"domain.mark.entry", [](domain_spec& s) { s.mark.entry = "-lab"; }},
    {"domain.mark.created_at", [](domain_spec& s) { s.mark.created_at = "<now>"; }},
    {"domain.mark.spec_hash", [](domain_spec& s) { s.mark.spec_hash = "XYZ"; }},
    {"domain.mark.tags[1]", [](domain_spec& s) { s.mark.tags[1] = "a\x01"; }},
    {"domain.mark.tags[0]", [](domain_spec& s) { s.mark.tags[0] = ""; }},
    {"domain.vcpus", [](domain_spec& s) { s.vcpus = 0; }},
    {"domain.memory_mib", [](domain_spec& s) { s.memory_mib = 0; }},
    {"domain.mac", [](domain_spec& s) { s.mac = "52:54:00:AB:CD:EF"; }},
    {"domain.mac", [](domain_spec& s) { s.mac = "52:54:00:ab:cd"; }},
    {"domain.mac", [](domain_spec& s) { s.mac = "52:54:00:ab:cd:e'"; }},
  };
  for (auto& c : cases) {
    auto spec = valid_spec();
    c.spoil(spec);
    auto xml = lv::build_domain_xml(spec);
    BOOST_TEST_CONTEXT(c.field) {
      BOOST_REQUIRE(!xml);
      BOOST_TEST(kind(xml.error()) == "permanent");
      BOOST_TEST(detail(xml.error()).find(c.field + ": ") == 0u, detail(xml.error()));
    }
  }
}

BOOST_AUTO_TEST_CASE(build_domain_xml_has_the_expected_shape) {
  auto xml = lv::build_domain_xml(valid_spec());
  BOOST_REQUIRE(xml);
  pugi::xml_document doc;
  BOOST_REQUIRE(doc.load_string(xml->c_str()));
  auto dom = doc.child("domain");
  BOOST_TEST(dom.attribute("type").value() == std::string{"test"});
  BOOST_TEST(dom.child("name").text().get() == std::string{"px-1"});
  BOOST_TEST(dom.child("memory").attribute("unit").value() == std::string{"MiB"});
  BOOST_TEST(dom.child("memory").text().as_uint() == 256u);
  BOOST_TEST(dom.child("vcpu").text().as_uint() == 2u);
  BOOST_TEST(dom.child("os").child("type").text().get() == std::string{"hvm"});
  auto nic = dom.child("devices").child("interface");
  BOOST_TEST(nic.attribute("type").value() == std::string{"network"});
  BOOST_TEST(nic.child("source").attribute("network").value() == std::string{"default"});
  BOOST_TEST(nic.child("model").attribute("type").value() == std::string{"virtio"});
  auto serial = dom.child("devices").child("serial");
  BOOST_TEST(serial.attribute("type").value() == std::string{"file"});
  BOOST_TEST(serial.child("source").attribute("path").value()
             == std::string{"/var/log/egress/px-1.log"});
  BOOST_TEST(dom.child("devices").child("console").child("target").attribute("type").value()
             == std::string{"serial"});
  auto disk = dom.child("devices").find_child_by_attribute("disk", "device", "disk");
  BOOST_TEST(disk.child("driver").attribute("type").value() == std::string{"qcow2"});
  BOOST_TEST(disk.child("source").attribute("file").value()
             == std::string{"/var/lib/libvirt/images/egress.lab.proxy.px-1.disk"});
  BOOST_TEST(disk.child("target").attribute("bus").value() == std::string{"virtio"});
  auto cd = dom.child("devices").find_child_by_attribute("disk", "device", "cdrom");
  BOOST_TEST(cd.child("source").attribute("file").value()
             == std::string{"/var/lib/libvirt/images/egress.lab.proxy.px-1.seed"});
  BOOST_TEST(static_cast<bool>(cd.child("readonly")));
  auto mark = dom.child("metadata").child("egress:mark");
  BOOST_TEST(mark.attribute("xmlns:egress").value() == std::string{lv::mark_namespace});
}

BOOST_AUTO_TEST_CASE(build_domain_xml_omits_optional_devices) {
  auto spec = valid_spec();
  spec.network.clear();
  spec.console_log.clear();
  spec.disk.clear();
  spec.seed.clear();
  auto xml = lv::build_domain_xml(spec);
  BOOST_REQUIRE(xml);
  pugi::xml_document doc;
  BOOST_REQUIRE(doc.load_string(xml->c_str()));
  auto devices = doc.child("domain").child("devices");
  BOOST_TEST(!devices.child("interface"));
  BOOST_TEST(!devices.child("serial"));
  BOOST_TEST(!devices.child("console"));
  BOOST_TEST(!devices.child("disk"));
}

BOOST_AUTO_TEST_CASE(spec_14_tags_with_markup_are_escaped) {
  auto spec = valid_spec();
  spec.mark.tags = {tricky_tag, "</egress:tag><x/>", "a]]>b", "&amp;"};
  auto xml = lv::build_domain_xml(spec);
  BOOST_REQUIRE(xml);
  BOOST_TEST(xml->find("<x/>") == std::string::npos);
  BOOST_TEST(xml->find("&lt;&amp;") != std::string::npos);
  pugi::xml_document doc;
  auto res = doc.load_string(xml->c_str());
  BOOST_REQUIRE_MESSAGE(res, res.description());
  std::vector<std::string> read;
  auto tags = doc.child("domain").child("metadata").child("egress:mark").child("egress:tags");
  for (auto t : tags.children("egress:tag"))
    read.emplace_back(t.text().get());
  BOOST_TEST(read == spec.mark.tags, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(mark_round_trips_through_domain_xml) {
  auto spec = valid_spec();
  auto xml = lv::build_domain_xml(spec);
  BOOST_REQUIRE(xml);
  auto mark = lv::parse_mark(*xml);
  BOOST_REQUIRE(mark);
  BOOST_REQUIRE(mark->has_value());
  BOOST_TEST(same(**mark, spec.mark));
}

BOOST_AUTO_TEST_CASE(mark_round_trips_through_mark_xml) {
  auto spec = valid_spec();
  spec.mark.tags.clear();
  auto xml = lv::build_mark_xml(spec.mark);
  BOOST_REQUIRE(xml);
  auto mark = lv::parse_mark(*xml);
  BOOST_REQUIRE(mark);
  BOOST_REQUIRE(mark->has_value());
  BOOST_TEST(same(**mark, spec.mark));
}

BOOST_AUTO_TEST_CASE(spec_14_build_mark_xml_validates_too) {
  auto m = valid_spec().mark;
  m.entry = "a/b";
  auto xml = lv::build_mark_xml(m);
  BOOST_REQUIRE(!xml);
  BOOST_TEST(detail(xml.error()).find("mark.entry: ") == 0u);
}

BOOST_AUTO_TEST_CASE(parse_mark_without_a_mark_is_nullopt) {
  for (auto xml : {
         "<domain type='test'><name>x</name></domain>",
         "<domain><metadata/></domain>",
         "<domain><metadata><other:mark xmlns:other='urn:someone-else'>"
         "<other:uid>u</other:uid></other:mark></metadata></domain>",
         "<domain><metadata><mark><uid>u</uid></mark></metadata></domain>",
         "<mark xmlns='urn:someone-else'><uid>u</uid></mark>",
         "<something-else/>",
       }) {
    auto mark = lv::parse_mark(xml);
    BOOST_REQUIRE_MESSAGE(mark, xml);
    BOOST_TEST(!mark->has_value(), xml);
  }
}

BOOST_AUTO_TEST_CASE(parse_mark_accepts_any_prefix_for_the_namespace) {
  // libvirt writes the prefix it was given (virDomainSetMetadata's key), so
  // the namespace URI is what identifies the mark.
  std::string ns = lv::mark_namespace;
  for (std::string xml : {
         "<domain><metadata><other xmlns='urn:x'/><foo:mark xmlns:foo='" + ns
           + "'><foo:uid>u1</foo:uid><foo:entry>lab</foo:entry><foo:tags>"
             "<foo:tag>t&amp;1</foo:tag></foo:tags></foo:mark></metadata></domain>",
         "<domain xmlns:bar='" + ns + "'><metadata><bar:mark><bar:uid>u1</bar:uid>"
           "<bar:entry>lab</bar:entry><bar:tags><bar:tag>t&amp;1</bar:tag></bar:tags>"
           "</bar:mark></metadata></domain>",
         "<domain><metadata><mark xmlns='" + ns + "'><uid>u1</uid><entry>lab</entry>"
           "<tags><tag>t&amp;1</tag></tags></mark></metadata></domain>",
         // virDomainGetMetadata strips the namespace from what it returns.
         std::string{"<mark>\n  <uid>u1</uid>\n  <entry>lab</entry>\n"
                     "  <tags>\n    <tag>t&amp;1</tag>\n  </tags>\n</mark>"},
       }) {
    auto mark = lv::parse_mark(xml);
    BOOST_REQUIRE_MESSAGE(mark, xml);
    BOOST_REQUIRE_MESSAGE(mark->has_value(), xml);
    BOOST_TEST((*mark)->uid == "u1");
    BOOST_TEST((*mark)->entry == "lab");
    BOOST_TEST((*mark)->tags == std::vector<std::string>{"t&1"}, boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_CASE(parse_mark_on_broken_xml_is_an_xml_error) {
  auto mark = lv::parse_mark("<domain><metadata>");
  BOOST_REQUIRE(!mark);
  BOOST_TEST(code_of(mark.error()) == "xml_error");
}

// The proxy's lease is found by its NIC's MAC (docs/spec.md 28): the engine
// writes the MAC it chose into the domain, and reads a domain's MACs back
// from its XML as libvirt formats it.
BOOST_AUTO_TEST_CASE(spec_28_the_chosen_mac_is_written_and_read_back) {
  std::minstd_rand rng{7};
  auto spec = valid_spec();
  spec.mac = lv::random_mac(rng);
  BOOST_TEST(spec.mac.rfind("52:54:00:", 0) == 0u, spec.mac);
  BOOST_TEST(spec.mac.size() == 17u);
  BOOST_TEST(lv::random_mac(rng) != spec.mac);
  auto xml = lv::build_domain_xml(spec);
  BOOST_REQUIRE(xml);
  auto macs = lv::parse_macs(*xml);
  BOOST_REQUIRE(macs);
  BOOST_TEST(*macs == std::vector<std::string>{spec.mac}, boost::test_tools::per_element());
  // No MAC in the spec: libvirt picks one, and none is written.
  spec.mac.clear();
  xml = lv::build_domain_xml(spec);
  BOOST_REQUIRE(xml);
  BOOST_TEST(xml->find("<mac") == std::string::npos);
}

BOOST_AUTO_TEST_CASE(parse_macs_reads_every_interface_lowercased) {
  // As virDomainGetXMLDesc writes it: two NICs (one in capitals, as an
  // operator may have defined it), a hostdev without a MAC, an unrelated
  // <mac> outside any interface.
  std::string xml = "<domain type='kvm'><name>x</name><devices>"
                    "<interface type='network'><mac address='52:54:00:0a:0b:0c'/>"
                    "<source network='default'/></interface>"
                    "<interface type='bridge'><mac address='52:54:00:AA:BB:CC'/>"
                    "<source bridge='br0'/></interface>"
                    "<interface type='user'/>"
                    "<hostdev mode='subsystem'><mac address='11:22:33:44:55:66'/></hostdev>"
                    "</devices></domain>";
  auto macs = lv::parse_macs(xml);
  BOOST_REQUIRE(macs);
  BOOST_TEST(*macs == (std::vector<std::string>{"52:54:00:0a:0b:0c", "52:54:00:aa:bb:cc"}),
             boost::test_tools::per_element());
  auto broken = lv::parse_macs("<domain><devices>");
  BOOST_REQUIRE(!broken);
  BOOST_TEST(code_of(broken.error()) == "xml_error");
}
