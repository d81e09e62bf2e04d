#include "messages/config.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <string_view>
#include <tuple>
#include <utility>

#include "base/time_text.hpp"
#include "messages/config_check.hpp"
#include "messages/error.hpp"
#include "messages/names.hpp"

namespace egress::config_check {

problems::problems(const std::string& file) : prefix_(file.empty() ? "" : file + ": ") {
}

void problems::add(const std::string& path, const std::string& text) {
  if (silent(path))
    return;
  reported_.push_back(path);
  lines_.push_back(prefix_ + path + ": " + text);
}

void problems::silence(const std::string& path) {
  reported_.push_back(path);
}

caf::error problems::to_error() const {
  std::string text;
  for (auto& line : lines_)
    text += (text.empty() ? "" : "\n") + line;
  return make_error(ec::config_invalid, std::move(text));
}

bool problems::silent(const std::string& path) const {
  return std::any_of(reported_.begin(), reported_.end(), [&](auto& p) {
    return path == p || (path.starts_with(p) && (path[p.size()] == '.'
                                                 || path[p.size()] == '['));
  });
}

bool check_range(problems& out, const std::string& path, int64_t x, range r) {
  if (x >= r.lo && x <= r.hi)
    return true;
  out.add(path, "must be between " + std::to_string(r.lo) + " and "
                  + std::to_string(r.hi) + ", got " + std::to_string(x));
  return false;
}

std::string at(const std::string& path, std::string_view key) {
  return path.empty() ? std::string{key} : path + "." + std::string{key};
}

std::string at(const std::string& path, size_t index) {
  return path + "[" + std::to_string(index) + "]";
}

std::string join(const std::vector<std::string>& xs) {
  std::string out;
  for (auto& x : xs)
    out += (out.empty() ? "" : ", ") + x;
  return out;
}

bool contains(const std::vector<std::string>& xs, const std::string& x) {
  return std::find(xs.begin(), xs.end(), x) != xs.end();
}

namespace {

const std::vector<std::string> known_transports{"direct", "ssh", "local-socket"};
const std::vector<std::string> known_address_sources{"lease", "agent", "arp"};
const std::vector<std::string> known_domain_types{"test", "qemu", "kvm"};
const std::vector<std::string> known_image_formats{"qcow2", "raw", "kernel", "initrd"};

void check_positive(problems& out, const std::string& path, caf::timespan x) {
  if (x.count() <= 0)
    out.add(path, "must be longer than 0s, got " + duration_text(x));
}

// check_name and check_tag (messages/names.hpp) word the problem as "<what>: <problem>";
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
  add_if(out, path, egress::check_name(path, value));
}

void check_optional_name(problems& out, const std::string& path,
                         const std::string& value) {
  if (!value.empty())
    check_name(out, path, value);
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

// Reports duplicates in a list of names: the second occurrence, pointing at
// the first. `first` maps each name to the path that declared it.
void check_unique(problems& out, const std::string& path, const std::string& what,
                  const std::string& name, const std::string& declared_at,
                  std::map<std::string, std::string>& first) {
  if (name.empty())
    return;
  auto [i, added] = first.emplace(name, declared_at);
  if (!added)
    out.add(path, "duplicate " + what + " " + quote(name)
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
                                      + quote(h.transport));
    return;
  }
  if (h.transport == "ssh") {
    require(out, at(path, "address"), h.address, h.transport);
    unsigned char ip[16];
    if (!h.address.empty() && inet_pton(AF_INET, h.address.c_str(), ip) != 1
        && inet_pton(AF_INET6, h.address.c_str(), ip) != 1)
      out.add(at(path, "address"), "expected a numeric IP address (the engine resolves no "
                                   "names: a DNS answer must not choose a host), got "
                                     + quote(h.address));
    require(out, at(path, "key-file"), h.key_file, h.transport);
    require(out, at(path, "known-hosts"), h.known_hosts, h.transport);
    check_range(out, at(path, "port"), h.port, port_range);
    if (!h.user.empty())
      add_if(out, at(path, "user"), egress::check_name(at(path, "user"), h.user));
  } else if (h.transport == "local-socket") {
    require(out, at(path, "socket"), h.socket, h.transport);
  }
  if (h.transport != "direct"
      && (h.bridge_dir.empty() || h.bridge_dir.front() != '/'
          || h.bridge_dir.find("/../") != std::string::npos
          || h.bridge_dir.find(' ') != std::string::npos))
    out.add(at(path, "bridge-dir"), "expected an absolute path without spaces or '..', got "
                                      + quote(h.bridge_dir));
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
            "qemu+ssh://root@hv1/system, got " + quote(h.uri));
  // Empty means "derive from the URI" for configs built in code.
  if (!h.domain_type.empty() && !contains(known_domain_types, h.domain_type))
    out.add(at(path, "domain-type"), "expected one of test, qemu, kvm, got "
                                       + quote(h.domain_type));
  check_optional_name(out, at(path, "pool"), h.pool);
  check_optional_name(out, at(path, "network"), h.network);
  // A path on the host that reaches domain XML: absolute, printable, no '..'.
  if (auto& d = h.console_log_dir;
      !d.empty()
      && (d.front() != '/' || (d + "/").find("/../") != std::string::npos
          || !std::all_of(d.begin(), d.end(), [](unsigned char c) { return c > 0x20 && c < 0x7f; })))
    out.add(at(path, "console-log-dir"),
            "expected an absolute path without spaces or '..', got " + quote(d));
  check_range(out, at(path, "max-calls"), h.max_calls, max_calls_range);
  check_range(out, at(path, "max-proxies"), h.max_proxies, max_proxies_range);
  check_range(out, at(path, "max-creates"), h.max_creates, max_creates_range);
  check_range(out, at(path, "upload-streams"), h.upload_streams, upload_streams_range);
  if (!h.zone.empty())
    add_if(out, at(path, "zone"), egress::check_tag(at(path, "zone"), h.zone));
  check_positive(out, at(path, "call-budget"), h.call_budget);
  check_positive(out, at(path, "connect-timeout"), h.connect_timeout);
  check_transport(out, path, h);
  auto sources = at(path, "address-sources");
  if (h.address_sources.empty())
    out.add(sources, "must not be empty (choose from lease, agent, arp)");
  for (size_t j = 0; j < h.address_sources.size(); ++j) {
    auto& x = h.address_sources[j];
    if (!contains(known_address_sources, x))
      out.add(at(sources, j), "unknown address source " + quote(x)
                                + " (known: lease, agent, arp)");
    else if (auto seen = h.address_sources.begin() + j;
             std::find(h.address_sources.begin(), seen, x) != seen)
      out.add(at(sources, j), "duplicate address source " + quote(x));
  }
}

void undeclared_host(problems& out, const std::string& key, const std::string& host,
                     const std::map<std::string, std::string>& hosts) {
  std::vector<std::string> declared;
  for (auto& entry : hosts)
    declared.push_back(entry.first);
  out.add(key, "undeclared host " + quote(host) + " (declared hosts: " + join(declared) + ")");
}

// The VM's size, network and tags: a proxy's, or a group's members'.
void check_resources(problems& out, const std::string& path, const proxy_spec& p) {
  check_range(out, at(path, "vcpus"), p.vcpus, vcpus_range);
  check_range(out, at(path, "memory-mib"), p.memory_mib, memory_mib_range);
  check_optional_name(out, at(path, "network"), p.network);
  for (size_t j = 0; j < p.tags.size(); ++j) {
    auto tag = at(at(path, "tags"), j);
    add_if(out, tag, egress::check_tag(tag, p.tags[j]));
  }
}

void check_proxy(problems& out, const std::string& path, const proxy_spec& p,
                 const std::map<std::string, std::string>& hosts,
                 std::map<std::string, std::string>& names) {
  check_name(out, at(path, "name"), p.name);
  check_unique(out, at(path, "name"), "proxy name", p.name, path, names);
  if (!hosts.contains(p.host))
    undeclared_host(out, at(path, "host"), p.host, hosts);
  check_resources(out, path, p);
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
                               + quote(img.url));
  bool hex = img.sha256.size() == 64
             && std::all_of(img.sha256.begin(), img.sha256.end(), [](char c) {
                  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
                });
  if (!hex)
    out.add(at(path, "sha256"), "expected 64 lowercase hex digits, got "
                                  + quote(img.sha256));
  if (!contains(known_image_formats, img.format))
    out.add(at(path, "format"), "expected one of qcow2, raw, kernel, initrd, got "
                                  + quote(img.format));
  check_positive(out, at(path, "transfer-budget"), img.transfer_budget);
  if (img.max_size == 0)
    out.add(at(path, "max-size"), "must be at least 1 byte");
  else if (img.size > img.max_size)
    out.add(at(path, "size"), std::to_string(img.size) + " bytes is more than max-size ("
                                + std::to_string(img.max_size) + ")");
}

void check_probe(problems& out, const probe_config& p) {
  if (p.mode != "http" && p.mode != "tcp" && p.mode != "off")
    out.add("engine.probe.mode", "expected one of http, tcp, off, got " + quote(p.mode));
  if (p.mode == "http" && !p.target.starts_with("http://"))
    out.add("engine.probe.target",
            p.target.empty() ? std::string{"required with mode \"http\" (an http:// URL the "
                                           "proxy must fetch)"}
                             : "expected an http:// URL, got " + quote(p.target));
  if (p.mode != "http" && !p.target.empty())
    out.add("engine.probe.target", "only used with mode \"http\" (mode is "
                                     + quote(p.mode) + ")");
  bool printable = std::all_of(p.target.begin(), p.target.end(), [](unsigned char c) {
    return c > 0x20 && c < 0x7f;
  });
  if (!printable)
    out.add("engine.probe.target", "must not contain spaces or control characters");
  check_positive(out, "engine.probe.interval", p.interval);
  check_positive(out, "engine.probe.timeout", p.timeout);
  if (p.timeout > p.interval)
    out.add("engine.probe.timeout", "must not exceed interval (" + duration_text(p.interval)
                                      + "), got " + duration_text(p.timeout));
  check_range(out, "engine.probe.rise", p.rise, probe_count_range);
  check_range(out, "engine.probe.fall", p.fall, probe_count_range);
}

// Whether a numeric IP address is a loopback one; nullopt if it is not a
// numeric address.
std::optional<bool> loopback_ip(const std::string& address) {
  in6_addr a6{};
  in_addr a4{};
  bool v4 = ::inet_pton(AF_INET, address.c_str(), &a4) == 1;
  bool v6 = !v4 && ::inet_pton(AF_INET6, address.c_str(), &a6) == 1;
  if (!v4 && !v6)
    return std::nullopt;
  return v4 ? (ntohl(a4.s_addr) >> 24) == 127 : IN6_IS_ADDR_LOOPBACK(&a6);
}

// The numeric address of a listener; nullopt (reported) if it is not one.
std::optional<bool> is_loopback(problems& out, const std::string& key, const listen_config& l) {
  auto lo = loopback_ip(l.address);
  if (!lo)
    out.add(key + ".address", "expected a numeric IP address, got " + quote(l.address));
  return lo;
}

// The metrics endpoint authenticates no one: loopback only.
void check_metrics(problems& out, const listen_config& l) {
  if (!l.enabled)
    return;
  check_range(out, "engine.metrics.port", l.port, range{0, 65'535});
  if (auto lo = is_loopback(out, "engine.metrics", l); lo && !*lo)
    out.add("engine.metrics.address",
            quote(l.address) + " is not a loopback address: the metrics endpoint has no "
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
            quote(l.address) + " is not a loopback address: plain CAF (BASP) "
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
                    "engine.inspect), got " + quote(cfg.peers[i]));
      continue;
    }
    if (std::find(cfg.peers.begin(), cfg.peers.begin() + static_cast<long>(i), cfg.peers[i])
        != cfg.peers.begin() + static_cast<long>(i))
      out.add(path, "duplicate peer " + quote(cfg.peers[i]));
    if (cfg.inspect.enabled && hp->second == cfg.inspect.port && hp->first == cfg.inspect.address)
      out.add(path, quote(cfg.peers[i]) + " is this node's own inspector (engine.inspect)");
  }
}

// An etcd client URL as the cluster dials it: http(s)://HOST:PORT and
// nothing after (the client adds the gateway's paths itself).
bool etcd_url(const std::string& url) {
  for (std::string scheme : {"http://", "https://"})
    if (url.starts_with(scheme)) {
      auto rest = url.substr(scheme.size());
      if (!rest.empty() && rest.back() == '/')
        rest.pop_back();
      return rest.find('/') == std::string::npos && split_host_port(rest).has_value();
    }
  return false;
}

// engine.cluster: where etcd is and how this node's lease behaves. A
// cluster needs names the nodes tell apart (engine.node set), and a lease
// long enough for a keepalive every third of it to leave room for a
// request's timeout.
void check_cluster(problems& out, const engine_config& cfg) {
  auto& c = cfg.cluster;
  if (!c.enabled)
    return;
  const std::string key = "engine.cluster";
  if (c.etcd.empty())
    out.add(at(key, "etcd"), "required key is missing (etcd's client URLs, like "
                             "[\"http://127.0.0.1:2379\"])");
  for (size_t i = 0; i < c.etcd.size(); ++i)
    if (!etcd_url(c.etcd[i]))
      out.add(at(at(key, "etcd"), i), "expected http://HOST:PORT or https://HOST:PORT, got "
                                        + quote(c.etcd[i]));
  if (cfg.node.empty())
    out.add("engine.node", "required with engine.cluster: every node of a cluster needs a "
                           "name of its own (it owns hosts under it)");
  if (c.lease_ttl < std::chrono::seconds(3) || c.lease_ttl > std::chrono::minutes(10))
    out.add(at(key, "lease-ttl"), "must be between 3s and 10min, got " + duration_text(c.lease_ttl));
  check_positive(out, at(key, "request-timeout"), c.request_timeout);
  if (c.request_timeout * 3 > c.lease_ttl)
    out.add(at(key, "request-timeout"), "must be at most a third of lease-ttl ("
                                          + duration_text(c.lease_ttl) + "), got "
                                          + duration_text(c.request_timeout));
  if (c.unreachable_release.count() < 0)
    out.add(at(key, "unreachable-release"), "must not be negative");
  bool prefix_ok = c.prefix.size() >= 2 && c.prefix.size() <= 128 && c.prefix.front() == '/'
                   && c.prefix.back() != '/'
                   && std::all_of(c.prefix.begin(), c.prefix.end(), [](char ch) {
                        return std::isalnum(static_cast<unsigned char>(ch)) || ch == '/'
                               || ch == '-' || ch == '_' || ch == '.';
                      });
  if (!prefix_ok)
    out.add(at(key, "prefix"), "expected a key prefix like \"/egress-engine\" (a leading '/', "
                               "letters, digits, '/-_.', no trailing '/'), got " + quote(c.prefix));
  if (!c.user.empty() && c.password.empty())
    out.add(at(key, "password-file"), "required with user (etcd's password for "
                                      + quote(c.user) + ")");
  if (c.cert_file.empty() != c.key_file.empty())
    out.add(at(key, c.cert_file.empty() ? "cert-file" : "key-file"),
            "cert-file and key-file go together (a client certificate and its key)");
  // Group members are placed by one fleet over every host of the group,
  // which a cluster splits between nodes.
  if (!cfg.groups.empty())
    out.add("engine.groups", "not supported with engine.cluster yet: declare the proxies "
                             "(engine.proxies), or run the groups on a node of their own");
}

// engine.gateway: HAProxy's admin socket, and backends whose names can be
// sent on its command line as they are (no space, no ';': the runtime API
// splits commands there).
void check_gateway(problems& out, const gateway_config& g) {
  if (!g.enabled)
    return;
  const std::string key = "engine.gateway";
  if (g.socket.empty()) {
    out.add(at(key, "socket"), "required key is missing (HAProxy's admin socket: `stats "
                               "socket PATH level admin` in haproxy.cfg, or IP:PORT on "
                               "loopback)");
  } else if (g.socket.front() == '/') {
    bool printable = std::all_of(g.socket.begin(), g.socket.end(),
                                 [](unsigned char c) { return c > 0x20 && c < 0x7f; });
    if (!printable || g.socket.size() > 107)
      out.add(at(key, "socket"), "a socket path must be printable, without spaces, at most "
                                 "107 bytes, got " + quote(g.socket));
  } else if (auto hp = split_host_port(g.socket); !hp) {
    out.add(at(key, "socket"), "expected an absolute path or IP:PORT, got " + quote(g.socket));
  } else if (auto lo = loopback_ip(hp->first); !lo || !*lo) {
    out.add(at(key, "socket"), quote(g.socket) + (lo ? " is not on a loopback address" :
                                                       " does not name a numeric IP address")
                                 + ": HAProxy's runtime API authenticates no one (use its "
                                   "unix socket, or 127.0.0.1:PORT)");
  }
  if (g.backends.empty())
    out.add(at(key, "backends"), "at least one backend is required");
  std::vector<std::string> seen;
  for (size_t i = 0; i < g.backends.size(); ++i) {
    auto path = at(at(key, "backends"), i);
    auto& b = g.backends[i];
    bool ok = !b.name.empty() && b.name.size() <= 64
              && std::all_of(b.name.begin(), b.name.end(), [](unsigned char c) {
                   return std::isalnum(c) || c == '_' || c == '-' || c == '.' || c == ':';
                 });
    if (!ok)
      out.add(at(path, "name"), "expected an HAProxy backend name ([A-Za-z0-9_.:-], 1 to 64 "
                                "characters), got " + quote(b.name));
    else if (contains(seen, b.name))
      out.add(at(path, "name"), "backend " + quote(b.name) + " is named twice");
    seen.push_back(b.name);
    if (!b.tag.empty())
      add_if(out, at(path, "tag"), egress::check_tag(at(path, "tag"), b.tag));
  }
  check_positive(out, at(key, "drain-grace"), g.drain_grace);
  check_positive(out, at(key, "call-budget"), g.call_budget);
  if (g.resync_interval < std::chrono::milliseconds(100))
    out.add(at(key, "resync-interval"), "must be at least 100ms, got "
                                          + duration_text(g.resync_interval));
}


// What a proxy or a group's members run: kernel options, the declared
// images in the formats their roles need, what goes into the seed, and a
// pool on each host that keeps an image (`hosts`: the proxy's, or every one
// of the group's).
void check_vm(problems& out, const std::string& path, const proxy_spec& p,
              const std::vector<std::string>& on, const engine_config& cfg,
              const std::map<std::string, std::string>& images) {
  if (p.kernel.empty() && !p.initrd.empty())
    out.add(at(path, "initrd"), "needs a kernel (set kernel too)");
  if (p.kernel.empty() && !p.cmdline.empty())
    out.add(at(path, "cmdline"), "needs a kernel (set kernel too)");
  bool printable = std::all_of(p.cmdline.begin(), p.cmdline.end(),
                               [](unsigned char c) { return c >= 0x20 && c < 0x7f; });
  if (!printable || p.cmdline.size() > 2048)
    out.add(at(path, "cmdline"), "must be printable ASCII, at most 2048 bytes");
  if (p.image.empty() && p.kernel.empty())
    return;
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
      out.add(at(path, key), "undeclared image " + quote(*name) + " (declared images: "
                               + (declared.empty() ? std::string{"none"} : join(declared))
                               + ")");
      all_declared = false;
      continue;
    }
    for (auto& img : cfg.images)
      if (img.name == *name
          && std::string_view{formats}.find(" " + img.format + " ") == std::string_view::npos)
        out.add(at(path, key), "image " + quote(*name) + " has format " + quote(img.format)
                                 + "; " + key + " needs " + wanted);
  }
  if (!all_declared)
    return;
  // What goes into the VM's seed, checked by the rule the seed uses.
  add_if(out, at(path, "allow-from"), egress::check_cidr(at(path, "allow-from"), p.allow_from));
  for (auto& h : cfg.hosts)
    if (contains(on, h.name) && h.pool.empty()) {
      auto key = p.image.empty() ? "kernel" : "image";
      out.add(at(path, key), "host " + quote(h.name) + " has no pool to keep image "
                               + quote(p.image.empty() ? p.kernel : p.image)
                               + " in (set its pool)");
    }
}

void check_group(problems& out, const std::string& path, const group_config& g,
                 const std::map<std::string, std::string>& hosts,
                 std::map<std::string, std::string>& names) {
  check_name(out, at(path, "name"), g.name);
  check_unique(out, at(path, "name"), "group name", g.name, path, names);
  // The longest member's name must be a name too (a domain is named by it).
  if (!g.name.empty() && g.count > 0)
    check_name(out, at(path, "name"), g.name + "-" + std::to_string(g.count));
  check_range(out, at(path, "count"), g.count, group_count_range);
  check_range(out, at(path, "max-surge"), g.max_surge, max_surge_range);
  if (g.hosts.empty())
    out.add(at(path, "hosts"), "must name at least one host");
  for (size_t j = 0; j < g.hosts.size(); ++j) {
    auto key = at(at(path, "hosts"), j);
    if (!hosts.contains(g.hosts[j])) {
      undeclared_host(out, key, g.hosts[j], hosts);
    } else if (std::find(g.hosts.begin(), g.hosts.begin() + j, g.hosts[j])
               != g.hosts.begin() + j) {
      out.add(key, "host " + quote(g.hosts[j]) + " is named twice");
    }
  }
  check_resources(out, path, g.member);
}

// A hand-declared proxy must not have a member's name: "eu-3" while group
// eu counts 3 or more. Checked from the proxies' side, so a group of
// 100,000 costs nothing here.
void check_members_unique(problems& out, const std::string& path, const group_config& g,
                          const std::map<std::string, std::string>& proxies) {
  auto prefix = g.name + "-";
  for (auto i = proxies.lower_bound(prefix);
       i != proxies.end() && i->first.starts_with(prefix); ++i) {
    auto n = std::string_view{i->first}.substr(prefix.size());
    if (n.empty() || n.size() > 6 || n.front() == '0'
        || !std::all_of(n.begin(), n.end(), [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    if (std::stoul(std::string{n}) <= g.count)
      out.add(at(path, "count"), "member " + quote(i->first) + " of group " + quote(g.name)
                                   + " has the name of " + i->second
                                   + " (rename that proxy, or the group)");
  }
}

} // namespace

std::string default_domain_type(const std::string& uri) {
  return uri_driver(uri) == "test" ? "test" : "kvm";
}

// The node's copies go in as file:// URLs: an absolute path of plain
// characters needs no escaping in one.
void check_stage_dir(problems& out, const std::string& d) {
  auto plain = [](unsigned char c) {
    return std::isalnum(c) || c == '/' || c == '.' || c == '_' || c == '-';
  };
  if (!d.empty()
      && (d.front() != '/' || (d + "/").find("/../") != std::string::npos
          || !std::all_of(d.begin(), d.end(), plain)))
    out.add("engine.stage-dir", "expected an absolute path of letters, digits and . _ - / "
                                "without '..', got " + quote(d));
}

void check_config(problems& out, const engine_config& cfg) {
  if (cfg.unedited) {
    out.add("engine.unedited", "this is the packaged example configuration: declare your "
                               "hosts, images and proxies (see egress-engine.ini(5) and "
                               "/usr/share/egress-engine/hosts-example.ini), then remove this "
                               "line");
    return;
  }
  check_probe(out, cfg.probe);
  check_nodes(out, cfg);
  check_cluster(out, cfg);
  check_inspect(out, cfg);
  check_metrics(out, cfg.metrics);
  check_gateway(out, cfg.gateway);
  check_stage_dir(out, cfg.stage_dir);
  check_name(out, "engine.entry", cfg.entry);
  check_positive(out, "engine.poll-interval", cfg.poll_interval);
  check_positive(out, "engine.bulk-read-interval", cfg.bulk_read_interval);
  check_positive(out, "engine.shutdown-timeout", cfg.shutdown_timeout);
  check_positive(out, "engine.redial-min", cfg.redial_min);
  if (cfg.redial_max < cfg.redial_min)
    out.add("engine.redial-max", "must be at least redial-min ("
                                   + duration_text(cfg.redial_min) + "), got "
                                   + duration_text(cfg.redial_max));
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
    check_proxy(out, path, cfg.proxies[i], hosts, proxies);
    check_vm(out, path, cfg.proxies[i], {cfg.proxies[i].host}, cfg, images);
  }
  check_positive(out, "engine.host-grace", cfg.host_grace);
  std::map<std::string, std::string> groups;
  for (size_t i = 0; i < cfg.groups.size(); ++i) {
    auto path = at("engine.groups", i);
    check_group(out, path, cfg.groups[i], hosts, groups);
    check_vm(out, path, cfg.groups[i].member, cfg.groups[i].hosts, cfg, images);
    check_members_unique(out, path, cfg.groups[i], proxies);
  }
}

} // namespace egress::config_check

namespace egress {

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
  config_check::problems out{cfg.config_file};
  config_check::check_config(out, cfg);
  if (!out.empty())
    return out.to_error();
  return caf::none;
}

} // namespace egress