#include "runtime/config.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <sstream>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include <caf/config_value.hpp>
#include <caf/settings.hpp>

#include "messages/error.hpp"
#include "providers/cloudinit/seed.hpp"
#include "providers/libvirt/names.hpp"
#include "runtime/config_caf_options.hpp"

namespace egress {

namespace {

using caf::config_value;
using dict = config_value::dictionary;
using list = config_value::list;

// -- rendering ----------------------------------------------------------------

// CAF's own printer gets hours, zero and negative durations wrong ("0d" for
// 2h in 0.17.6), so durations are printed here, in the INI's own units.
std::string pretty(caf::timespan x) {
  auto ns = x.count();
  if (ns == 0)
    return "0s";
  std::string sign = ns < 0 ? "-" : "";
  auto abs_ns = ns < 0 ? -ns : ns;
  static constexpr std::pair<int64_t, const char*> units[] = {
    {3'600'000'000'000, "h"}, {60'000'000'000, "min"}, {1'000'000'000, "s"},
    {1'000'000, "ms"},        {1'000, "us"},
  };
  for (auto [factor, suffix] : units)
    if (abs_ns % factor == 0)
      return sign + std::to_string(abs_ns / factor) + suffix;
  return sign + std::to_string(abs_ns) + "ns";
}

// Values are quoted by lv::quote (escaped, cut short); paths are escaped the
// same way by CAF but shown in full, since the end of a path matters most.
std::string quoted_path(const std::string& x) {
  return caf::to_string(config_value{x});
}

} // namespace

// -- shared with runtime/config_caf_options.cpp -------------------------------

namespace config_detail {

// "string \"2\"", "integer 5": what the file actually holds, for "got ...".
std::string describe(const config_value& x) {
  if (auto v = caf::get_if<config_value::integer>(&x))
    return "integer " + std::to_string(*v);
  if (auto v = caf::get_if<config_value::boolean>(&x))
    return std::string{"boolean "} + (*v ? "true" : "false");
  if (auto v = caf::get_if<config_value::real>(&x)) {
    std::ostringstream out;
    out << "number " << *v;
    return out.str();
  }
  if (caf::holds_alternative<config_value::atom>(x))
    return "atom " + caf::to_string(x);
  if (auto v = caf::get_if<caf::timespan>(&x))
    return "duration " + pretty(*v);
  if (auto v = caf::get_if<std::string>(&x))
    return "string " + lv::quote(*v);
  if (caf::holds_alternative<list>(x))
    return "a list";
  if (caf::holds_alternative<dict>(x))
    return "a dict";
  return caf::to_string(x); // a URI literal such as <qemu:///system>
}

std::string join(const std::vector<std::string>& xs) {
  std::string out;
  for (auto& x : xs)
    out += (out.empty() ? "" : ", ") + x;
  return out;
}

std::string at(const std::string& path, std::string_view key) {
  return path.empty() ? std::string{key} : path + "." + std::string{key};
}

std::string at(const std::string& path, size_t index) {
  return path + "[" + std::to_string(index) + "]";
}

} // namespace config_detail

namespace {

using config_detail::at;
using config_detail::describe;
using config_detail::join;

// -- collecting problems ------------------------------------------------------

// Collects one line per problem. The loader reads types first and checks
// meaning second; a key that already has a problem (or lies under one) gets
// no second line, so a missing name is not also reported as an invalid name.
class problems {
public:
  explicit problems(const std::string& file)
    : prefix_(file.empty() ? "" : file + ": ") {
  }

  void add(const std::string& path, const std::string& text) {
    if (silent(path))
      return;
    reported_.push_back(path);
    lines_.push_back(prefix_ + path + ": " + text);
  }

  /// Suppresses later problems at `path` whose cause is reported elsewhere.
  void silence(const std::string& path) {
    reported_.push_back(path);
  }

  bool empty() const {
    return lines_.empty();
  }

  caf::error to_error() const {
    std::string text;
    for (auto& line : lines_)
      text += (text.empty() ? "" : "\n") + line;
    return make_error(ec::config_invalid, std::move(text));
  }

private:
  bool silent(const std::string& path) const {
    return std::any_of(reported_.begin(), reported_.end(), [&](auto& p) {
      return path == p || (path.starts_with(p) && (path[p.size()] == '.'
                                                   || path[p.size()] == '['));
    });
  }

  std::string prefix_;
  std::vector<std::string> reported_;
  std::vector<std::string> lines_;
};

// -- semantic checks, shared by the file and the embedding API ---------------

struct range {
  int64_t lo;
  int64_t hi;
};

constexpr range max_calls_range{1, 64};
constexpr range vcpus_range{1, 64};
constexpr range memory_mib_range{64, 1'048'576};
constexpr range port_range{1, 65'535};
constexpr range keepalive_count_range{1, 100};
constexpr range probe_count_range{1, 100};
const std::vector<std::string> known_transports{"direct", "ssh", "local-socket"};
const std::vector<std::string> known_address_sources{"lease", "agent", "arp"};
const std::vector<std::string> known_domain_types{"test", "qemu", "kvm"};
const std::vector<std::string> known_image_formats{"qcow2", "raw", "kernel", "initrd"};

bool check_range(problems& out, const std::string& path, int64_t x, range r) {
  if (x >= r.lo && x <= r.hi)
    return true;
  out.add(path, "must be between " + std::to_string(r.lo) + " and "
                  + std::to_string(r.hi) + ", got " + std::to_string(x));
  return false;
}

void check_positive(problems& out, const std::string& path, caf::timespan x) {
  if (x.count() <= 0)
    out.add(path, "must be longer than 0s, got " + pretty(x));
}

// lv::check_name and lv::check_tag word the problem as "<what>: <problem>";
// given the key path as `what`, the prefix is dropped so the path is not
// repeated on the line.
void add_if(problems& out, const std::string& path, const caf::error& err) {
  if (!err)
    return;
  auto text = detail(err);
  if (text.empty())
    text = egress::render(err);
  if (text.starts_with(path + ": "))
    text.erase(0, path.size() + 2);
  out.add(path, text);
}

void check_name(problems& out, const std::string& path, const std::string& value) {
  add_if(out, path, lv::check_name(path, value));
}

void check_optional_name(problems& out, const std::string& path,
                         const std::string& value) {
  if (!value.empty())
    check_name(out, path, value);
}

bool contains(const std::vector<std::string>& xs, const std::string& x) {
  return std::find(xs.begin(), xs.end(), x) != xs.end();
}

// The part of a libvirt URI that names the driver: "qemu" in
// "qemu+ssh://root@hv1/system". Empty if `uri` has no "scheme://".
std::string uri_driver(const std::string& uri) {
  auto end = uri.find("://");
  if (end == std::string::npos || end == 0)
    return {};
  auto scheme = uri.substr(0, end);
  auto ok = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+'
           || c == '-' || c == '.';
  };
  if (scheme[0] < 'a' || scheme[0] > 'z'
      || !std::all_of(scheme.begin(), scheme.end(), ok))
    return {};
  return scheme.substr(0, scheme.find('+'));
}

std::string default_domain_type(const std::string& uri) {
  return uri_driver(uri) == "test" ? "test" : "kvm";
}

// Reports duplicates in a list of names: the second occurrence, pointing at
// the first. `first` maps each name to the path that declared it.
void check_unique(problems& out, const std::string& path, const std::string& what,
                  const std::string& name, const std::string& declared_at,
                  std::map<std::string, std::string>& first) {
  if (name.empty())
    return;
  auto [i, added] = first.emplace(name, declared_at);
  if (!added)
    out.add(path, "duplicate " + what + " " + lv::quote(name)
                    + " (first declared at " + i->second + ")");
}

void require(problems& out, const std::string& path, const std::string& value,
             const std::string& transport) {
  if (value.empty())
    out.add(path, "required key is missing (transport \"" + transport + "\")");
}

void check_transport(problems& out, const std::string& path, const host_config& h) {
  if (!contains(known_transports, h.transport)) {
    out.add(at(path, "transport"), "expected one of direct, ssh, local-socket, got "
                                      + lv::quote(h.transport));
    return;
  }
  if (h.transport == "ssh") {
    require(out, at(path, "address"), h.address, h.transport);
    require(out, at(path, "key-file"), h.key_file, h.transport);
    require(out, at(path, "known-hosts"), h.known_hosts, h.transport);
    check_range(out, at(path, "port"), h.port, port_range);
    if (!h.user.empty())
      add_if(out, at(path, "user"), lv::check_name(at(path, "user"), h.user));
  } else if (h.transport == "local-socket") {
    require(out, at(path, "socket"), h.socket, h.transport);
  }
  if (h.keepalive_interval.count() < 0)
    out.add(at(path, "keepalive-interval"), "must not be negative");
  else if (h.keepalive_interval.count() % 1'000'000'000 != 0)
    out.add(at(path, "keepalive-interval"),
            "libvirt counts whole seconds: use 0s (off), 1s, 2s, ...");
  check_range(out, at(path, "keepalive-count"), h.keepalive_count,
              keepalive_count_range);
  check_positive(out, at(path, "tcp-user-timeout"), h.tcp_user_timeout);
  // libssh2 counts keepalive seconds; the watchdog needs keepalives shorter
  // than itself, or an idle but healthy link would trip it.
  if (h.ssh_keepalive.count() < 0 || h.ssh_keepalive.count() % 1'000'000'000 != 0)
    out.add(at(path, "ssh-keepalive"),
            "libssh2 counts whole seconds: use 0s (off), 1s, 2s, ...");
  else if (h.ssh_watchdog.count() < 0)
    out.add(at(path, "ssh-watchdog"), "must not be negative");
  else if (h.ssh_watchdog.count() > 0
           && (h.ssh_keepalive.count() == 0 || h.ssh_keepalive >= h.ssh_watchdog))
    out.add(at(path, "ssh-watchdog"),
            "needs an ssh-keepalive shorter than itself (0s turns the watchdog off)");
}

void check_host(problems& out, const std::string& path, const host_config& h,
                std::map<std::string, std::string>& names) {
  check_name(out, at(path, "name"), h.name);
  check_unique(out, at(path, "name"), "host name", h.name, path, names);
  if (uri_driver(h.uri).empty())
    out.add(at(path, "uri"),
            "expected a libvirt URI like qemu:///system or "
            "qemu+ssh://root@hv1/system, got " + lv::quote(h.uri));
  // Empty means "derive from the URI" for configs built in code.
  if (!h.domain_type.empty() && !contains(known_domain_types, h.domain_type))
    out.add(at(path, "domain-type"), "expected one of test, qemu, kvm, got "
                                       + lv::quote(h.domain_type));
  check_optional_name(out, at(path, "pool"), h.pool);
  check_optional_name(out, at(path, "network"), h.network);
  // A path on the host that reaches domain XML: absolute, printable, no '..'.
  if (auto& d = h.console_log_dir;
      !d.empty()
      && (d.front() != '/' || (d + "/").find("/../") != std::string::npos
          || !std::all_of(d.begin(), d.end(), [](unsigned char c) { return c > 0x20 && c < 0x7f; })))
    out.add(at(path, "console-log-dir"),
            "expected an absolute path without spaces or '..', got " + lv::quote(d));
  check_range(out, at(path, "max-calls"), h.max_calls, max_calls_range);
  check_positive(out, at(path, "call-budget"), h.call_budget);
  check_positive(out, at(path, "connect-timeout"), h.connect_timeout);
  check_transport(out, path, h);
  auto sources = at(path, "address-sources");
  if (h.address_sources.empty())
    out.add(sources, "must not be empty (choose from lease, agent, arp)");
  for (size_t j = 0; j < h.address_sources.size(); ++j) {
    auto& x = h.address_sources[j];
    if (!contains(known_address_sources, x))
      out.add(at(sources, j), "unknown address source " + lv::quote(x)
                                + " (known: lease, agent, arp)");
    else if (auto seen = h.address_sources.begin() + j;
             std::find(h.address_sources.begin(), seen, x) != seen)
      out.add(at(sources, j), "duplicate address source " + lv::quote(x));
  }
}

void check_proxy(problems& out, const std::string& path, const proxy_spec& p,
                 const std::map<std::string, std::string>& hosts,
                 std::map<std::string, std::string>& names) {
  check_name(out, at(path, "name"), p.name);
  check_unique(out, at(path, "name"), "proxy name", p.name, path, names);
  if (!hosts.contains(p.host)) {
    std::vector<std::string> declared;
    for (auto& entry : hosts)
      declared.push_back(entry.first);
    out.add(at(path, "host"), "undeclared host " + lv::quote(p.host)
                                + " (declared hosts: " + join(declared) + ")");
  }
  check_range(out, at(path, "vcpus"), p.vcpus, vcpus_range);
  check_range(out, at(path, "memory-mib"), p.memory_mib, memory_mib_range);
  check_optional_name(out, at(path, "network"), p.network);
  for (size_t j = 0; j < p.tags.size(); ++j) {
    auto tag = at(at(path, "tags"), j);
    add_if(out, tag, lv::check_tag(tag, p.tags[j]));
  }
}

void check_image(problems& out, const std::string& path, const image_config& img,
                 std::map<std::string, std::string>& names) {
  check_name(out, at(path, "name"), img.name);
  check_unique(out, at(path, "name"), "image name", img.name, path, names);
  auto scheme = img.url.substr(0, img.url.find("://"));
  if (img.url.empty())
    out.add(at(path, "url"), "required key is missing");
  else if (img.url.find("://") == std::string::npos
           || (scheme != "http" && scheme != "https" && scheme != "file")
           || img.url.size() == scheme.size() + 3)
    out.add(at(path, "url"), "expected an http://, https:// or file:// URL, got "
                               + lv::quote(img.url));
  bool hex = img.sha256.size() == 64
             && std::all_of(img.sha256.begin(), img.sha256.end(), [](char c) {
                  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
                });
  if (!hex)
    out.add(at(path, "sha256"), "expected 64 lowercase hex digits, got "
                                  + lv::quote(img.sha256));
  if (!contains(known_image_formats, img.format))
    out.add(at(path, "format"), "expected one of qcow2, raw, kernel, initrd, got "
                                  + lv::quote(img.format));
  check_positive(out, at(path, "transfer-budget"), img.transfer_budget);
}

void check_probe(problems& out, const probe_config& p) {
  if (p.mode != "http" && p.mode != "tcp" && p.mode != "off")
    out.add("engine.probe.mode", "expected one of http, tcp, off, got " + lv::quote(p.mode));
  if (p.mode == "http" && !p.target.starts_with("http://"))
    out.add("engine.probe.target",
            p.target.empty() ? std::string{"required with mode \"http\" (an http:// URL the "
                                           "proxy must fetch)"}
                             : "expected an http:// URL, got " + lv::quote(p.target));
  if (p.mode != "http" && !p.target.empty())
    out.add("engine.probe.target", "only used with mode \"http\" (mode is "
                                     + lv::quote(p.mode) + ")");
  bool printable = std::all_of(p.target.begin(), p.target.end(), [](unsigned char c) {
    return c > 0x20 && c < 0x7f;
  });
  if (!printable)
    out.add("engine.probe.target", "must not contain spaces or control characters");
  check_positive(out, "engine.probe.interval", p.interval);
  check_positive(out, "engine.probe.timeout", p.timeout);
  if (p.timeout > p.interval)
    out.add("engine.probe.timeout", "must not exceed interval (" + pretty(p.interval)
                                      + "), got " + pretty(p.timeout));
  check_range(out, "engine.probe.rise", p.rise, probe_count_range);
  check_range(out, "engine.probe.fall", p.fall, probe_count_range);
}

// The numeric address of a listener; nullopt (reported) if it is not one.
std::optional<bool> is_loopback(problems& out, const std::string& key, const listen_config& l) {
  in6_addr a6{};
  in_addr a4{};
  bool v4 = ::inet_pton(AF_INET, l.address.c_str(), &a4) == 1;
  bool v6 = !v4 && ::inet_pton(AF_INET6, l.address.c_str(), &a6) == 1;
  if (!v4 && !v6) {
    out.add(key + ".address", "expected a numeric IP address, got " + lv::quote(l.address));
    return std::nullopt;
  }
  return v4 ? (ntohl(a4.s_addr) >> 24) == 127 : IN6_IS_ADDR_LOOPBACK(&a6);
}

// The metrics endpoint authenticates no one: loopback only.
void check_metrics(problems& out, const listen_config& l) {
  if (!l.enabled)
    return;
  check_range(out, "engine.metrics.port", l.port, range{0, 65'535});
  if (auto lo = is_loopback(out, "engine.metrics", l); lo && !*lo)
    out.add("engine.metrics.address",
            lv::quote(l.address) + " is not a loopback address: the metrics endpoint has no "
            "authentication; use 127.0.0.1 (a local Prometheus, or an SSH tunnel), or "
            "metrics = { enabled = false }");
}

// The inspector speaks BASP, which authenticates no one by itself: anywhere
// but loopback it needs TLS with checked certificates on both sides (so
// only holders of the CA's certificates connect at all) and the shared
// secret (so a connected party is answered only after presenting it).
void check_inspect(problems& out, const engine_config& cfg) {
  auto& l = cfg.inspect;
  if (!l.enabled)
    return;
  check_range(out, "engine.inspect.port", l.port, range{0, 65'535});
  auto lo = is_loopback(out, "engine.inspect", l);
  // A secret-file that is set but unusable has its own problem reported.
  bool secret = !cfg.inspect_secret.empty() || !l.secret_file.empty();
  if (lo && !*lo && !(l.tls && secret))
    out.add("engine.inspect.address",
            lv::quote(l.address) + " is not a loopback address: plain CAF (BASP) "
            "authenticates no one, so binding elsewhere requires tls = true (with CAF's "
            "openssl.certificate, openssl.key and openssl.cafile) and secret-file (the secret "
            "every shell and peer proves it knows); missing: "
            + std::string{!l.tls && !secret ? "tls = true, secret-file"
                          : !l.tls          ? "tls = true"
                                            : "secret-file"}
            + "; or use 127.0.0.1 and an SSH tunnel, or inspect = { enabled = false }");
  if (l.tls) {
    std::vector<std::string> missing;
    if (cfg.tls.certificate.empty())
      missing.push_back("openssl.certificate");
    if (cfg.tls.key.empty())
      missing.push_back("openssl.key");
    if (cfg.tls.cafile.empty() && cfg.tls.capath.empty())
      missing.push_back("openssl.cafile (or openssl.capath)");
    if (!missing.empty())
      out.add("engine.inspect.tls", "needs CAF's [openssl] section to name this node's "
                                    "certificate, its key and the CA that signs every shell's "
                                    "and peer's certificate; missing: " + join(missing));
  }
  if (!cfg.inspect_secret.empty() && cfg.inspect_secret.size() < 16)
    out.add("engine.inspect.secret-file", "the secret must be at least 16 characters, got "
                                            + std::to_string(cfg.inspect_secret.size()));
}

// engine.node and engine.peers: a name, and dialable inspectors that are
// not this node's own.
void check_nodes(problems& out, const engine_config& cfg) {
  check_optional_name(out, "engine.node", cfg.node);
  if (!cfg.peers.empty() && !cfg.inspect.enabled)
    out.add("engine.peers", "peers reach this node through its inspector: set "
                            "engine.inspect = { enabled = true } or remove engine.peers");
  for (size_t i = 0; i < cfg.peers.size(); ++i) {
    auto path = at("engine.peers", i);
    auto hp = split_host_port(cfg.peers[i]);
    if (!hp) {
      out.add(path, "expected HOST:PORT with a port in 1..65535 (another node's "
                    "engine.inspect), got " + lv::quote(cfg.peers[i]));
      continue;
    }
    if (std::find(cfg.peers.begin(), cfg.peers.begin() + static_cast<long>(i), cfg.peers[i])
        != cfg.peers.begin() + static_cast<long>(i))
      out.add(path, "duplicate peer " + lv::quote(cfg.peers[i]));
    if (cfg.inspect.enabled && hp->second == cfg.inspect.port && hp->first == cfg.inspect.address)
      out.add(path, lv::quote(cfg.peers[i]) + " is this node's own inspector (engine.inspect)");
  }
}

void check_engine(problems& out, const engine_config& cfg) {
  check_probe(out, cfg.probe);
  check_nodes(out, cfg);
  check_inspect(out, cfg);
  check_metrics(out, cfg.metrics);
  check_name(out, "engine.entry", cfg.entry);
  check_positive(out, "engine.poll-interval", cfg.poll_interval);
  check_positive(out, "engine.shutdown-timeout", cfg.shutdown_timeout);
  check_positive(out, "engine.redial-min", cfg.redial_min);
  if (cfg.redial_max < cfg.redial_min)
    out.add("engine.redial-max", "must be at least redial-min ("
                                   + pretty(cfg.redial_min) + "), got "
                                   + pretty(cfg.redial_max));
  if (cfg.hosts.empty())
    out.add("engine.hosts", "at least one host is required");
  std::map<std::string, std::string> hosts;
  for (size_t i = 0; i < cfg.hosts.size(); ++i)
    check_host(out, at("engine.hosts", i), cfg.hosts[i], hosts);
  std::map<std::string, std::string> images;
  for (size_t i = 0; i < cfg.images.size(); ++i)
    check_image(out, at("engine.images", i), cfg.images[i], images);
  std::map<std::string, std::string> proxies;
  for (size_t i = 0; i < cfg.proxies.size(); ++i) {
    auto path = at("engine.proxies", i);
    auto& p = cfg.proxies[i];
    check_proxy(out, path, p, hosts, proxies);
    if (p.kernel.empty() && !p.initrd.empty())
      out.add(at(path, "initrd"), "needs a kernel (set kernel too)");
    if (p.kernel.empty() && !p.cmdline.empty())
      out.add(at(path, "cmdline"), "needs a kernel (set kernel too)");
    bool printable = std::all_of(p.cmdline.begin(), p.cmdline.end(),
                                 [](unsigned char c) { return c >= 0x20 && c < 0x7f; });
    if (!printable || p.cmdline.size() > 2048)
      out.add(at(path, "cmdline"), "must be printable ASCII, at most 2048 bytes");
    if (p.image.empty() && p.kernel.empty())
      continue;
    // Each image a proxy names must be declared, and of the format its role
    // needs: a disk is qcow2 or raw, a kernel a kernel, an initrd an initrd.
    bool all_declared = true;
    for (auto [key, name, formats, wanted] :
         {std::tuple{"image", &p.image, " qcow2 raw ", "qcow2 or raw"},
          std::tuple{"kernel", &p.kernel, " kernel ", "kernel"},
          std::tuple{"initrd", &p.initrd, " initrd ", "initrd"}}) {
      if (name->empty())
        continue;
      if (!images.contains(*name)) {
        std::vector<std::string> declared;
        for (auto& entry : images)
          declared.push_back(entry.first);
        out.add(at(path, key), "undeclared image " + lv::quote(*name) + " (declared images: "
                                 + (declared.empty() ? std::string{"none"} : join(declared))
                                 + ")");
        all_declared = false;
        continue;
      }
      for (auto& img : cfg.images)
        if (img.name == *name
            && std::string_view{formats}.find(" " + img.format + " ") == std::string_view::npos)
          out.add(at(path, key), "image " + lv::quote(*name) + " has format "
                                   + lv::quote(img.format) + "; " + key + " needs "
                                   + wanted);
    }
    if (!all_declared)
      continue;
    // What goes into the VM's seed: checked the way the seed checks it.
    if (auto seed = cloudinit::render_seed({"check", p.name, static_cast<uint16_t>(p.port),
                                            p.allow_from});
        !seed && detail(seed.error()).starts_with("proxy_seed.allow_cidr: "))
      out.add(at(path, "allow-from"),
              detail(seed.error()).substr(std::string{"proxy_seed.allow_cidr: "}.size()));
    for (auto& h : cfg.hosts)
      if (h.name == p.host && h.pool.empty()) {
        auto key = p.image.empty() ? "kernel" : "image";
        out.add(at(path, key), "host " + lv::quote(h.name) + " has no pool to keep image "
                                 + lv::quote(p.image.empty() ? p.kernel : p.image)
                                 + " in (set its pool)");
      }
  }
}

// -- reading the settings tree ------------------------------------------------

// Reads one dict of the schema. The getters report wrong types and missing
// required keys and leave the target at its default; finish() reports every
// key the schema does not know, because CAF itself accepts them silently.
class dict_reader {
public:
  dict_reader(problems& out, const dict& d, std::string path,
              std::vector<std::string> known)
    : out_(out), d_(d), path_(std::move(path)), known_(std::move(known)) {
  }

  bool has(const std::string& key) const {
    return d_.contains(key);
  }

  std::string path(const std::string& key) const {
    return at(path_, key);
  }

  template <class T>
  const T* get(const std::string& key, bool required, const char* expected) {
    auto i = d_.find(key);
    if (i == d_.end()) {
      if (required)
        out_.add(path(key), "required key is missing");
      return nullptr;
    }
    if (auto x = caf::get_if<T>(&i->second))
      return x;
    auto text = std::string{"expected "} + expected + ", got " + describe(i->second);
    // Single quotes make an atom in CAF's INI dialect: a likely slip.
    if constexpr (std::is_same_v<T, std::string>)
      if (caf::holds_alternative<config_value::atom>(i->second))
        text += " (strings take double quotes)";
    out_.add(path(key), text);
    return nullptr;
  }

  void read(const std::string& key, std::string& dst, bool required = false) {
    if (auto x = get<std::string>(key, required, "a string"))
      dst = *x;
  }

  void read(const std::string& key, caf::timespan& dst) {
    if (auto x = get<caf::timespan>(key, false, "a duration like 2s or 250ms"))
      dst = *x;
  }

  void read(const std::string& key, uint32_t& dst, range r) {
    if (auto x = get<config_value::integer>(key, false, "an integer"))
      if (check_range(out_, path(key), *x, r))
        dst = static_cast<uint32_t>(*x);
  }

  void read(const std::string& key, bool& dst) {
    if (auto x = get<config_value::boolean>(key, false, "true or false"))
      dst = *x;
  }

  void read(const std::string& key, uint64_t& dst) {
    if (auto x = get<config_value::integer>(key, false, "an integer"))
      if (check_range(out_, path(key), *x, range{0, INT64_MAX}))
        dst = static_cast<uint64_t>(*x);
  }

  // Keeps the default unless every element is a string, so that positions
  // in later messages still match the file.
  void read(const std::string& key, std::vector<std::string>& dst) {
    auto xs = get<list>(key, false, "a list of strings");
    if (!xs)
      return;
    std::vector<std::string> result;
    for (size_t j = 0; j < xs->size(); ++j) {
      if (auto x = caf::get_if<std::string>(&(*xs)[j]))
        result.push_back(*x);
      else
        out_.add(at(path(key), j), "expected a string, got " + describe((*xs)[j]));
    }
    if (result.size() == xs->size())
      dst = std::move(result);
  }

  void finish() {
    for (auto& [key, value] : d_)
      if (!contains(known_, key))
        out_.add(path(key), "unknown key (known keys: " + join(known_) + ")");
  }

private:
  problems& out_;
  const dict& d_;
  std::string path_;
  std::vector<std::string> known_;
};

// Calls `f(path, dict)` for every element of a list of dicts; elements that
// are not dicts are reported and passed as an empty dict, so that indices
// stay aligned with the file.
template <class F>
void for_each_dict(problems& out, const std::string& path, const list& xs, F f) {
  static const dict empty;
  for (size_t i = 0; i < xs.size(); ++i) {
    auto d = caf::get_if<dict>(&xs[i]);
    if (!d)
      out.add(at(path, i), "expected a dict like {name = \"...\"}, got "
                             + describe(xs[i]));
    f(at(path, i), d ? *d : empty);
  }
}

namespace fs = std::filesystem;

// A path survives inside a test:// URI only if it has no characters that URI
// parsing would interpret (spaces, '?', '#', '%').
bool uri_safe(const std::string& path) {
  return std::all_of(path.begin(), path.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
           || std::string_view{"/._-+~@,="}.find(c) != std::string_view::npos;
  });
}

// A file the engine must read (a key, known_hosts), relative to the config
// file; the resolved absolute path, or "" after reporting why not.
std::string resolve_file(problems& out, const std::string& path,
                         const std::string& name, const fs::path& base) {
  auto file = fs::absolute(base / name).lexically_normal();
  std::error_code err;
  auto status = fs::status(file, err);
  std::string problem;
  if (!fs::exists(status))
    problem = "no such file: ";
  else if (!fs::is_regular_file(status))
    problem = "not a regular file: ";
  else if (!std::ifstream{file})
    problem = "cannot read ";
  if (!problem.empty()) {
    out.add(path, problem + quoted_path(file.string()));
    return {};
  }
  return file.string();
}

// Turns `test-node` into test:///abs/path, relative to the config file's
// directory so a config and its node XML can move together.
std::string resolve_test_node(problems& out, const std::string& path,
                              const std::string& node, const fs::path& base) {
  if (node.empty()) {
    out.add(path, "must not be empty");
    return {};
  }
  auto file = resolve_file(out, path, node, base);
  if (file.empty())
    return {};
  if (!uri_safe(file)) {
    out.add(path, "path cannot be used in a test:// URI (spaces, '?', '#' or '%'): "
                    + quoted_path(file));
    return {};
  }
  return "test://" + file;
}

host_config read_host(problems& out, const std::string& path, const dict& d,
                      const fs::path& base) {
  host_config h;
  dict_reader r{out, d, path,
                {"name", "uri", "test-node", "domain-type", "pool", "network", "console-log-dir",
                 "max-calls", "call-budget", "connect-timeout", "address-sources",
                 "transport", "address", "port", "user", "key-file", "known-hosts",
                 "remote-socket", "remote-command", "socket", "bridge-dir",
                 "keepalive-interval", "keepalive-count", "ssh-keepalive",
                 "ssh-watchdog", "tcp-user-timeout"}};
  r.read("name", h.name, true);
  r.read("uri", h.uri);
  std::string node;
  r.read("test-node", node);
  if (r.has("uri") && r.has("test-node"))
    out.add(r.path("test-node"), "set either uri or test-node, not both");
  else if (r.has("test-node"))
    h.uri = resolve_test_node(out, r.path("test-node"), node, base);
  else if (!r.has("uri") && d.contains("transport"))
    h.uri = "qemu:///system"; // the usual daemon behind ssh or local-socket
  else if (!r.has("uri"))
    out.add(r.path("uri"), "required key is missing (or set test-node)");
  if (h.uri.empty())
    out.silence(r.path("uri")); // the reason is reported already
  h.domain_type = default_domain_type(h.uri);
  r.read("domain-type", h.domain_type);
  r.read("pool", h.pool);
  r.read("network", h.network);
  r.read("console-log-dir", h.console_log_dir);
  r.read("max-calls", h.max_calls, max_calls_range);
  r.read("call-budget", h.call_budget);
  r.read("connect-timeout", h.connect_timeout);
  r.read("address-sources", h.address_sources);
  r.read("transport", h.transport);
  r.read("address", h.address);
  r.read("port", h.port, port_range);
  r.read("user", h.user);
  std::string file;
  if (r.has("key-file") && (r.read("key-file", file), !file.empty()))
    h.key_file = resolve_file(out, r.path("key-file"), file, base);
  if (r.has("known-hosts") && (r.read("known-hosts", file), !file.empty()))
    h.known_hosts = resolve_file(out, r.path("known-hosts"), file, base);
  r.read("remote-socket", h.remote_socket);
  r.read("remote-command", h.remote_command);
  r.read("socket", h.socket);
  r.read("bridge-dir", h.bridge_dir);
  r.read("keepalive-interval", h.keepalive_interval);
  r.read("keepalive-count", h.keepalive_count, keepalive_count_range);
  r.read("ssh-keepalive", h.ssh_keepalive);
  r.read("ssh-watchdog", h.ssh_watchdog);
  r.read("tcp-user-timeout", h.tcp_user_timeout);
  r.finish();
  return h;
}

proxy_spec read_proxy(problems& out, const std::string& path, const dict& d) {
  proxy_spec p;
  dict_reader r{out, d, path,
                {"name", "host", "vcpus", "memory-mib", "network", "tags", "image", "port",
                 "allow-from", "kernel", "initrd", "cmdline"}};
  r.read("name", p.name, true);
  r.read("host", p.host, true);
  r.read("vcpus", p.vcpus, vcpus_range);
  r.read("memory-mib", p.memory_mib, memory_mib_range);
  r.read("network", p.network);
  r.read("tags", p.tags);
  r.read("image", p.image);
  r.read("port", p.port, port_range);
  r.read("allow-from", p.allow_from);
  r.read("kernel", p.kernel);
  r.read("initrd", p.initrd);
  r.read("cmdline", p.cmdline);
  r.finish();
  return p;
}

image_config read_image(problems& out, const std::string& path, const dict& d) {
  image_config img;
  dict_reader r{out, d, path,
                {"name", "url", "sha256", "size", "format", "transfer-budget"}};
  r.read("name", img.name, true);
  r.read("url", img.url, true);
  r.read("sha256", img.sha256, true);
  // Digests are compared as text: one case, whatever the file used.
  std::transform(img.sha256.begin(), img.sha256.end(), img.sha256.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  r.read("size", img.size);
  r.read("format", img.format);
  r.read("transfer-budget", img.transfer_budget);
  r.finish();
  return img;
}

probe_config read_probe(problems& out, const dict& d) {
  probe_config p;
  dict_reader r{out, d, "engine.probe",
                {"mode", "target", "interval", "timeout", "rise", "fall"}};
  r.read("target", p.target);
  // A target alone says what is meant: probe through the proxy.
  if (!p.target.empty())
    p.mode = "http";
  r.read("mode", p.mode);
  r.read("interval", p.interval);
  r.read("timeout", p.timeout);
  r.read("rise", p.rise, probe_count_range);
  r.read("fall", p.fall, probe_count_range);
  r.finish();
  return p;
}

// engine.inspect and engine.metrics: the same three keys over the
// defaults in engine_config (ports 4040 and 9464); the inspector also has
// tls and secret-file.
listen_config read_listen(problems& out, const dict& d, const std::string& key,
                          listen_config l, bool inspect) {
  std::vector<std::string> known{"enabled", "address", "port"};
  if (inspect)
    known.insert(known.end(), {"tls", "secret-file"});
  dict_reader r{out, d, key, known};
  r.read("enabled", l.enabled);
  r.read("address", l.address);
  r.read("port", l.port, range{0, 65'535});
  if (inspect) {
    r.read("tls", l.tls);
    r.read("secret-file", l.secret_file);
  }
  r.finish();
  return l;
}

// The shared secret: a private file (like an SSH key, refused if others may
// read it), its content without the trailing newline.
std::string read_secret(problems& out, const std::string& file, const fs::path& base) {
  const std::string key = "engine.inspect.secret-file";
  auto path = resolve_file(out, key, file, base);
  if (path.empty())
    return {};
  auto perms = fs::status(path).permissions();
  if ((perms & (fs::perms::group_all | fs::perms::others_all)) != fs::perms::none) {
    out.add(key, quoted_path(path) + " may be read by others than its owner: chmod 600 it");
    return {};
  }
  std::ifstream in{path};
  std::string secret{std::istreambuf_iterator<char>{in}, {}};
  while (!secret.empty() && std::isspace(static_cast<unsigned char>(secret.back())))
    secret.pop_back();
  if (secret.empty())
    out.add(key, quoted_path(path) + " is empty");
  return secret;
}

void read_engine(problems& out, const dict& d, const fs::path& base,
                 engine_config& cfg) {
  dict_reader r{out, d, "engine",
                {"entry", "poll-interval", "address-grace", "shutdown-timeout", "redial-min",
                 "redial-max", "gc", "probe", "inspect", "metrics", "node", "peers", "hosts",
                 "images", "proxies"}};
  r.read("entry", cfg.entry, true);
  r.read("poll-interval", cfg.poll_interval);
  r.read("address-grace", cfg.address_grace, range{0, 1000});
  r.read("shutdown-timeout", cfg.shutdown_timeout);
  r.read("redial-min", cfg.redial_min);
  r.read("redial-max", cfg.redial_max);
  r.read("gc", cfg.gc);
  if (auto x = r.get<dict>("probe", false, "a dict like {mode = \"tcp\"}"))
    cfg.probe = read_probe(out, *x);
  if (auto x = r.get<dict>("inspect", false, "a dict like {address = \"127.0.0.1\", port = 4040}"))
    cfg.inspect = read_listen(out, *x, "engine.inspect", cfg.inspect, true);
  if (!cfg.inspect.secret_file.empty()) {
    cfg.inspect_secret = read_secret(out, cfg.inspect.secret_file, base);
    if (cfg.inspect_secret.empty())
      out.silence("engine.inspect.secret-file");
  }
  if (auto x = r.get<dict>("metrics", false, "a dict like {address = \"127.0.0.1\", port = 9464}"))
    cfg.metrics = read_listen(out, *x, "engine.metrics", cfg.metrics, false);
  r.read("node", cfg.node);
  r.read("peers", cfg.peers);
  if (auto xs = r.get<list>("hosts", true, "a list of dicts"))
    for_each_dict(out, "engine.hosts", *xs, [&](auto path, auto& x) {
      cfg.hosts.push_back(read_host(out, path, x, base));
    });
  if (auto xs = r.get<list>("images", false, "a list of dicts"))
    for_each_dict(out, "engine.images", *xs, [&](auto path, auto& x) {
      cfg.images.push_back(read_image(out, path, x));
    });
  if (auto xs = r.get<list>("proxies", false, "a list of dicts"))
    for_each_dict(out, "engine.proxies", *xs, [&](auto path, auto& x) {
      cfg.proxies.push_back(read_proxy(out, path, x));
      // A proxy without its own network uses its host's.
      if (!x.contains("network"))
        for (auto& h : cfg.hosts)
          if (h.name == cfg.proxies.back().host)
            cfg.proxies.back().network = h.network;
    });
  r.finish();
}

} // namespace

caf::expected<engine_config> load_engine_config(const caf::actor_system_config& cfg) {
  engine_config result;
  result.config_file = cfg.config_file_path;
  problems out{cfg.config_file_path};
  auto& root = caf::content(cfg);
  for (auto& problem : config_detail::check_caf_options(cfg))
    out.add(problem.path, problem.text);
  // Relative test-node paths are relative to the config file, not to the
  // working directory of whoever started the engine.
  auto base = fs::absolute(fs::path{cfg.config_file_path}).parent_path();
  // CAF's [openssl] paths, resolved like ours (caf-run gives them back to
  // CAF resolved); checked only when engine.inspect.tls needs them.
  auto tls_path = [&](const std::string& key, const std::string& value) -> std::string {
    if (value.empty())
      return {};
    auto file = fs::absolute(base / value).lexically_normal();
    if (!fs::exists(file))
      out.add(key, "no such file: " + quoted_path(file.string()));
    return file.string();
  };
  result.tls = {tls_path("openssl.certificate", cfg.openssl_certificate),
                tls_path("openssl.key", cfg.openssl_key),
                tls_path("openssl.cafile", cfg.openssl_cafile),
                tls_path("openssl.capath", cfg.openssl_capath)};
  auto i = root.find("engine");
  if (i == root.end())
    out.add("engine", "required section is missing");
  else if (auto d = caf::get_if<dict>(&i->second))
    read_engine(out, *d, base, result);
  else
    out.add("engine", "expected a section, got " + describe(i->second));
  // Runs even after reading problems: keys that already have one stay silent.
  check_engine(out, result);
  if (!out.empty())
    return out.to_error();
  result.node = node_name(result);
  return result;
}

std::string node_name(const engine_config& cfg) {
  return cfg.node.empty() ? cfg.entry : cfg.node;
}

std::optional<std::pair<std::string, uint16_t>> split_host_port(const std::string& s) {
  auto colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == s.size())
    return std::nullopt;
  auto digits = s.substr(colon + 1);
  if (digits.size() > 5
      || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  auto port = std::stoul(digits);
  if (port == 0 || port > 65'535)
    return std::nullopt;
  auto host = s.substr(0, colon);
  // [::1]:4040 names an IPv6 address.
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  return std::make_pair(host, static_cast<uint16_t>(port));
}

caf::error validate(const engine_config& cfg) {
  problems out{cfg.config_file};
  check_engine(out, cfg);
  if (!out.empty())
    return out.to_error();
  return caf::none;
}

} // namespace egress
