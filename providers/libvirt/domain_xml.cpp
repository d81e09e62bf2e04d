#include "providers/libvirt/domain_xml.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <sstream>

#include <pugixml.hpp>

#include "messages/error.hpp"
#include "messages/names.hpp"

namespace egress::lv {

namespace {

// -- validation ---------------------------------------------------------------

caf::error bad(const std::string& what, std::string_view value, const char* rule) {
  return make_error(ec::invalid_argument,
                    what + ": " + quote(value) + " is not valid (" + rule + ")");
}

bool all_of(std::string_view s, bool (*pred)(char)) {
  for (auto c : s)
    if (!pred(c))
      return false;
  return true;
}

bool lower_hex(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

// "52:54:00:ab:cd:ef": six lowercase hex pairs, as libvirt writes a MAC
// (and as a lease list names it, so the two compare as strings).
bool mac_text(std::string_view s) {
  if (s.size() != 17)
    return false;
  for (size_t i = 0; i < s.size(); ++i)
    if (i % 3 == 2 ? s[i] != ':' : !lower_hex(s[i]))
      return false;
  return true;
}

bool timestamp_char(char c) {
  return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z')
         || c == ':' || c == '.' || c == '+' || c == '-';
}

bool path_char(char c) {
  return c >= 0x20 && c <= 0x7e;
}

caf::error check_mark(const std::string& at, const domain_mark& m) {
  if (auto err = check_name(at + ".uid", m.uid))
    return err;
  if (auto err = check_name(at + ".entry", m.entry))
    return err;
  if (!m.host.empty())
    if (auto err = check_name(at + ".host", m.host))
      return err;
  if (!m.owner.empty())
    if (auto err = check_name(at + ".owner", m.owner))
      return err;
  if (m.token < 0)
    return bad(at + ".token", std::to_string(m.token), "must not be negative");
  if (m.created_at.empty() || m.created_at.size() > 64 || !all_of(m.created_at, timestamp_char))
    return bad(at + ".created_at", m.created_at, "must be an RFC 3339 timestamp");
  if (m.spec_hash.empty() || m.spec_hash.size() > 128 || !all_of(m.spec_hash, lower_hex))
    return bad(at + ".spec_hash", m.spec_hash, "must be lowercase hex");
  for (size_t i = 0; i < m.tags.size(); ++i)
    if (auto err = check_tag(at + ".tags[" + std::to_string(i) + "]", m.tags[i]))
      return err;
  return {};
}

caf::error check_spec(const domain_spec& s) {
  if (auto err = check_name("domain.name", s.name))
    return err;
  if (auto err = check_name("domain.type", s.domain_type))
    return err;
  if (s.vcpus == 0)
    return make_error(ec::invalid_argument, "domain.vcpus: must be at least 1");
  if (s.memory_mib == 0)
    return make_error(ec::invalid_argument, "domain.memory_mib: must be at least 1");
  if (!s.network.empty())
    if (auto err = check_name("domain.network", s.network))
      return err;
  if (!s.mac.empty() && !mac_text(s.mac))
    return bad("domain.mac", s.mac, "must be six lowercase hex pairs joined by ':'");
  auto check_path = [](const char* what, const std::string& p) -> caf::error {
    if (p.empty())
      return {};
    if (p.front() != '/' || p.size() > 4096 || !all_of(p, path_char)
        || (p + "/").find("/../") != std::string::npos)
      return bad(what, p, "must be an absolute path of printable ASCII without '..'");
    return {};
  };
  if (auto err = check_path("domain.console_log", s.console_log))
    return err;
  if (auto err = check_path("domain.disk", s.disk))
    return err;
  if (auto err = check_path("domain.seed", s.seed))
    return err;
  if (auto err = check_path("domain.kernel", s.kernel))
    return err;
  if (auto err = check_path("domain.initrd", s.initrd))
    return err;
  if (s.kernel.empty() && (!s.initrd.empty() || !s.cmdline.empty()))
    return bad("domain.kernel", s.kernel, "is required with an initrd or a cmdline");
  // Text in XML, escaped by pugixml; printable so that logs show what boots.
  if (s.cmdline.size() > 2048 || !all_of(s.cmdline, path_char))
    return bad("domain.cmdline", s.cmdline, "must be printable ASCII, at most 2048 bytes");
  if (!s.disk.empty() && s.disk_format != "qcow2" && s.disk_format != "raw")
    return bad("domain.disk_format", s.disk_format, "must be qcow2 or raw");
  return check_mark("domain.mark", s.mark);
}

// -- building -----------------------------------------------------------------

std::string qualified(const char* local) {
  return std::string{mark_prefix} + ":" + local;
}

// The mark under `parent`. Prefixed (with its namespace declared) inside a
// domain's <metadata>; bare for virDomainSetMetadata, which declares the
// namespace itself and refuses an element that already declares it
// ("failed to create a new XML namespace").
void append_mark(pugi::xml_node parent, const domain_mark& m, bool prefixed = true) {
  auto name = [prefixed](const char* local) {
    return prefixed ? qualified(local) : std::string{local};
  };
  auto text = [&](pugi::xml_node at, const char* local, const std::string& value) {
    at.append_child(name(local).c_str()).text().set(value.c_str());
  };
  auto mark = parent.append_child(name("mark").c_str());
  if (prefixed)
    mark.append_attribute((std::string{"xmlns:"} + mark_prefix).c_str()) = mark_namespace;
  text(mark, "uid", m.uid);
  text(mark, "created-at", m.created_at);
  text(mark, "entry", m.entry);
  text(mark, "spec-hash", m.spec_hash);
  if (!m.host.empty())
    text(mark, "host", m.host);
  if (!m.owner.empty()) {
    text(mark, "owner", m.owner);
    text(mark, "token", std::to_string(m.token));
  }
  auto tags = mark.append_child(name("tags").c_str());
  for (auto& t : m.tags)
    text(tags, "tag", t);
}

void add_file_source(pugi::xml_node dev, const std::string& path) {
  dev.append_attribute("type") = "file";
  dev.append_child("source").append_attribute("path") = path.c_str();
}

std::string render(const pugi::xml_document& doc) {
  std::ostringstream out;
  doc.save(out, "  ", pugi::format_default | pugi::format_no_declaration);
  return out.str();
}

// -- parsing ------------------------------------------------------------------

std::string_view local_name(pugi::xml_node n) {
  std::string_view name = n.name();
  auto colon = name.find(':');
  return colon == std::string_view::npos ? name : name.substr(colon + 1);
}

// pugixml does not resolve namespaces: look up the declaration of the
// element's prefix on the element itself or its ancestors.
std::string_view namespace_of(pugi::xml_node n) {
  std::string_view name = n.name();
  auto colon = name.find(':');
  std::string decl = colon == std::string_view::npos
                       ? std::string{"xmlns"}
                       : "xmlns:" + std::string{name.substr(0, colon)};
  for (auto p = n; p.type() == pugi::node_element; p = p.parent())
    if (auto a = p.attribute(decl.c_str()))
      return a.value();
  return {};
}

// A token is decimal digits; anything else (a mark edited by hand) reads as
// 0, the oldest token, which no node takes for a newer claim than its own.
int64_t read_token(std::string_view text) {
  if (text.empty() || text.size() > 18
      || !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return 0;
  return std::stoll(std::string{text});
}

domain_mark read_mark(pugi::xml_node node) {
  domain_mark m;
  for (auto child : node.children()) {
    auto name = local_name(child);
    if (name == "uid")
      m.uid = child.text().get();
    else if (name == "created-at")
      m.created_at = child.text().get();
    else if (name == "entry")
      m.entry = child.text().get();
    else if (name == "spec-hash")
      m.spec_hash = child.text().get();
    else if (name == "host")
      m.host = child.text().get();
    else if (name == "owner")
      m.owner = child.text().get();
    else if (name == "token")
      m.token = read_token(child.text().get());
    else if (name == "tags")
      for (auto tag : child.children())
        if (local_name(tag) == "tag")
          m.tags.emplace_back(tag.text().get());
  }
  return m;
}

} // namespace

caf::expected<std::string> build_domain_xml(const domain_spec& spec) {
  if (auto err = check_spec(spec))
    return err;
  pugi::xml_document doc;
  auto dom = doc.append_child("domain");
  dom.append_attribute("type") = spec.domain_type.c_str();
  dom.append_child("name").text().set(spec.name.c_str());
  auto mem = dom.append_child("memory");
  mem.append_attribute("unit") = "MiB";
  mem.text().set(spec.memory_mib);
  dom.append_child("vcpu").text().set(spec.vcpus);
  auto os = dom.append_child("os");
  auto type = os.append_child("type");
  type.append_attribute("arch") = "x86_64";
  type.text().set("hvm");
  if (!spec.kernel.empty()) {
    os.append_child("kernel").text().set(spec.kernel.c_str());
    if (!spec.initrd.empty())
      os.append_child("initrd").text().set(spec.initrd.c_str());
    if (!spec.cmdline.empty())
      os.append_child("cmdline").text().set(spec.cmdline.c_str());
  }
  append_mark(dom.append_child("metadata"), spec.mark);
  auto devices = dom.append_child("devices");
  if (!spec.disk.empty()) {
    auto disk = devices.append_child("disk");
    disk.append_attribute("type") = "file";
    disk.append_attribute("device") = "disk";
    auto driver = disk.append_child("driver");
    driver.append_attribute("name") = "qemu";
    driver.append_attribute("type") = spec.disk_format.c_str();
    disk.append_child("source").append_attribute("file") = spec.disk.c_str();
    auto target = disk.append_child("target");
    target.append_attribute("dev") = "vda";
    target.append_attribute("bus") = "virtio";
  }
  if (!spec.seed.empty()) {
    // NoCloud finds its seed by the ISO's label (cidata) on any block device:
    // a read-only CD-ROM is the conventional place.
    auto cd = devices.append_child("disk");
    cd.append_attribute("type") = "file";
    cd.append_attribute("device") = "cdrom";
    auto driver = cd.append_child("driver");
    driver.append_attribute("name") = "qemu";
    driver.append_attribute("type") = "raw";
    cd.append_child("source").append_attribute("file") = spec.seed.c_str();
    auto target = cd.append_child("target");
    target.append_attribute("dev") = "sda";
    target.append_attribute("bus") = "sata";
    cd.append_child("readonly");
  }
  if (!spec.network.empty()) {
    auto nic = devices.append_child("interface");
    nic.append_attribute("type") = "network";
    if (!spec.mac.empty())
      nic.append_child("mac").append_attribute("address") = spec.mac.c_str();
    nic.append_child("source").append_attribute("network") = spec.network.c_str();
    nic.append_child("model").append_attribute("type") = "virtio";
  }
  if (!spec.console_log.empty()) {
    auto serial = devices.append_child("serial");
    add_file_source(serial, spec.console_log);
    serial.append_child("target").append_attribute("port") = 0;
    // The console aliases the first serial port, so it names the same file.
    auto console = devices.append_child("console");
    add_file_source(console, spec.console_log);
    auto target = console.append_child("target");
    target.append_attribute("type") = "serial";
    target.append_attribute("port") = 0;
  }
  return render(doc);
}

caf::expected<std::string> build_mark_xml(const domain_mark& mark) {
  if (auto err = check_mark("mark", mark))
    return err;
  pugi::xml_document doc;
  append_mark(doc, mark, false);
  return render(doc);
}

caf::expected<std::optional<domain_mark>> parse_mark(std::string_view xml) {
  pugi::xml_document doc;
  auto res = doc.load_buffer(xml.data(), xml.size());
  if (!res)
    return make_error(ec::xml_error, std::string{"parse mark: "} + res.description()
                                       + " at offset " + std::to_string(res.offset));
  auto root = doc.document_element();
  // A full domain: the mark is the <metadata> child in our namespace, under
  // whatever prefix libvirt chose to write.
  if (local_name(root) == "domain") {
    for (auto child : root.child("metadata").children())
      if (local_name(child) == "mark" && namespace_of(child) == mark_namespace)
        return std::optional{read_mark(child)};
    return std::optional<domain_mark>{};
  }
  // A bare element: virDomainGetMetadata returns it with the namespace
  // stripped, so no namespace at all is ours too.
  auto ns = namespace_of(root);
  if (local_name(root) == "mark" && (ns.empty() || ns == mark_namespace))
    return std::optional{read_mark(root)};
  return std::optional<domain_mark>{};
}

caf::expected<std::vector<std::string>> parse_macs(std::string_view xml) {
  pugi::xml_document doc;
  auto res = doc.load_buffer(xml.data(), xml.size());
  if (!res)
    return make_error(ec::xml_error, std::string{"parse MACs: "} + res.description()
                                       + " at offset " + std::to_string(res.offset));
  std::vector<std::string> out;
  for (auto nic : doc.document_element().child("devices").children("interface")) {
    std::string mac = nic.child("mac").attribute("address").value();
    for (auto& c : mac)
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (mac_text(mac))
      out.push_back(std::move(mac));
  }
  return out;
}

std::string random_mac(std::minstd_rand& rng) {
  // 52:54:00 is the prefix libvirt and QEMU give their own MACs: locally
  // administered, unicast. The other three bytes are random, as libvirt's.
  std::uniform_int_distribution<int> byte{0, 255};
  char buf[18];
  std::snprintf(buf, sizeof buf, "52:54:00:%02x:%02x:%02x", byte(rng), byte(rng), byte(rng));
  return buf;
}

} // namespace egress::lv
