#include "runtime/config_file.hpp"

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

#include "base/time_text.hpp"
#include "messages/config_check.hpp"
#include "messages/error.hpp"
#include "messages/names.hpp"
#include "runtime/config_caf_options.hpp"
#include "runtime/config_text.hpp"

namespace egress {

namespace {

using caf::config_value;
using dict = config_value::dictionary;
using list = config_value::list;

// Values are quoted by quote() (escaped, cut short); paths are escaped the
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
    return "duration " + duration_text(*v);
  if (auto v = caf::get_if<std::string>(&x))
    return "string " + quote(*v);
  if (caf::holds_alternative<list>(x))
    return "a list";
  if (caf::holds_alternative<dict>(x))
    return "a dict";
  return caf::to_string(x); // a URI literal such as <qemu:///system>
}

} // namespace config_detail

namespace {

using config_check::at;
using config_check::check_range;
using config_check::contains;
using config_check::join;
using config_check::problems;
using config_check::range;
using config_detail::describe;
using namespace config_check; // the ranges

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

// A key or a secret: refused (reported at `key`) when its group or others
// may read it, as OpenSSH refuses such a key.
bool check_private(problems& out, const std::string& key, const std::string& file) {
  auto perms = fs::status(file).permissions();
  if ((perms & (fs::perms::group_all | fs::perms::others_all)) == fs::perms::none)
    return true;
  out.add(key, quoted_path(file) + " may be read by others than its owner: chmod 600 it");
  return false;
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
                 "ssh-watchdog", "tcp-user-timeout", "max-proxies", "memory-reserve-mib", "zone", "max-creates", "upload-streams"}};
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
  if (r.has("key-file") && (r.read("key-file", file), !file.empty())) {
    h.key_file = resolve_file(out, r.path("key-file"), file, base);
    if (!h.key_file.empty())
      check_private(out, r.path("key-file"), h.key_file);
  }
  if (r.has("known-hosts") && (r.read("known-hosts", file), !file.empty()))
    h.known_hosts = resolve_file(out, r.path("known-hosts"), file, base);
  r.read("remote-socket", h.remote_socket);
  r.read("remote-command", h.remote_command);
  r.read("socket", h.socket);
  r.read("bridge-dir", h.bridge_dir);
  if (r.has("bridge-dir") && !h.bridge_dir.empty() && h.bridge_dir.front() == '/'
      && !fs::is_directory(h.bridge_dir))
    out.add(r.path("bridge-dir"), "no such directory: " + quoted_path(h.bridge_dir));
  r.read("keepalive-interval", h.keepalive_interval);
  r.read("keepalive-count", h.keepalive_count, keepalive_count_range);
  r.read("ssh-keepalive", h.ssh_keepalive);
  r.read("ssh-watchdog", h.ssh_watchdog);
  r.read("tcp-user-timeout", h.tcp_user_timeout);
  r.read("max-proxies", h.max_proxies, max_proxies_range);
  r.read("memory-reserve-mib", h.memory_reserve_mib);
  r.read("zone", h.zone);
  r.read("max-creates", h.max_creates, max_creates_range);
  r.read("upload-streams", h.upload_streams, upload_streams_range);
  r.finish();
  return h;
}

// The keys a proxy and a group's members share: what the VM is.
const std::vector<std::string> vm_keys{"vcpus",      "memory-mib", "network", "tags",
                                       "image",      "port",       "allow-from", "kernel",
                                       "initrd",     "cmdline"};

void read_vm_keys(dict_reader& r, proxy_spec& p) {
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
}

std::vector<std::string> with_vm_keys(std::vector<std::string> keys) {
  keys.insert(keys.end(), vm_keys.begin(), vm_keys.end());
  return keys;
}

proxy_spec read_proxy(problems& out, const std::string& path, const dict& d) {
  proxy_spec p;
  dict_reader r{out, d, path, with_vm_keys({"name", "host"})};
  r.read("name", p.name, true);
  r.read("host", p.host, true);
  read_vm_keys(r, p);
  r.finish();
  return p;
}

group_config read_group(problems& out, const std::string& path, const dict& d) {
  group_config g;
  dict_reader r{out, d, path, with_vm_keys({"name", "count", "hosts", "max-surge"})};
  r.read("name", g.name, true);
  if (!r.has("count"))
    out.add(r.path("count"), "required key is missing");
  r.read("count", g.count, group_count_range);
  if (!r.has("hosts"))
    out.add(r.path("hosts"), "required key is missing");
  r.read("hosts", g.hosts);
  r.read("max-surge", g.max_surge, max_surge_range);
  read_vm_keys(r, g.member);
  r.finish();
  return g;
}

image_config read_image(problems& out, const std::string& path, const dict& d) {
  image_config img;
  dict_reader r{out, d, path,
                {"name", "url", "sha256", "size", "max-size", "format", "transfer-budget"}};
  r.read("name", img.name, true);
  r.read("url", img.url, true);
  r.read("sha256", img.sha256, true);
  // Digests are compared as text: one case, whatever the file used.
  std::transform(img.sha256.begin(), img.sha256.end(), img.sha256.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  r.read("size", img.size);
  r.read("max-size", img.max_size);
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
    known.insert(known.end(), {"tls", "secret-file", "identity-dir"});
  dict_reader r{out, d, key, known};
  r.read("enabled", l.enabled);
  r.read("address", l.address);
  r.read("port", l.port, range{0, 65'535});
  if (inspect) {
    r.read("tls", l.tls);
    r.read("secret-file", l.secret_file);
    r.read("identity-dir", l.identity_dir);
  }
  r.finish();
  return l;
}

gateway_backend read_backend(problems& out, const std::string& path, const dict& d) {
  gateway_backend b;
  dict_reader r{out, d, path, {"name", "tag"}};
  r.read("name", b.name, true);
  r.read("tag", b.tag);
  r.finish();
  return b;
}

// A socket path, relative to the config file like every path in it; an
// IP:PORT stays as it is. A path that exists must be a socket (HAProxy not
// running yet is fine: the gateway retries until it answers).
std::string resolve_socket(problems& out, const std::string& key, const std::string& socket,
                           const fs::path& base) {
  if (socket.empty() || (socket.front() != '/' && split_host_port(socket)
                         && socket.find('/') == std::string::npos))
    return socket;
  auto path = fs::absolute(base / socket).lexically_normal().string();
  std::error_code err;
  auto status = fs::status(path, err);
  if (fs::exists(status) && !fs::is_socket(status))
    out.add(key, quoted_path(path) + " is not a socket (HAProxy's `stats socket` path: is "
                                     "this the right file?)");
  return path;
}

gateway_config read_gateway(problems& out, const dict& d, const fs::path& base) {
  gateway_config g;
  g.enabled = true;
  dict_reader r{out, d, "engine.gateway",
                {"enabled", "socket", "backends", "drain-grace", "call-budget",
                 "resync-interval"}};
  r.read("enabled", g.enabled);
  r.read("socket", g.socket, g.enabled);
  g.socket = resolve_socket(out, r.path("socket"), g.socket, base);
  if (auto xs = r.get<list>("backends", false, "a list of dicts like {name = \"egress\"}")) {
    g.backends.clear();
    for_each_dict(out, r.path("backends"), *xs, [&](auto path, auto& x) {
      g.backends.push_back(read_backend(out, path, x));
    });
  }
  r.read("drain-grace", g.drain_grace);
  r.read("call-budget", g.call_budget);
  r.read("resync-interval", g.resync_interval);
  r.finish();
  return g;
}

// A private file's content (like an SSH key: refused if others may read
// it) without its trailing newline.
std::string read_private_text(problems& out, const std::string& key, const std::string& path) {
  if (path.empty() || !check_private(out, key, path))
    return {};
  std::ifstream in{path};
  std::string secret{std::istreambuf_iterator<char>{in}, {}};
  while (!secret.empty() && std::isspace(static_cast<unsigned char>(secret.back())))
    secret.pop_back();
  if (secret.empty())
    out.add(key, quoted_path(path) + " is empty");
  return secret;
}

// The inspector's shared secret.
std::string read_secret(problems& out, const std::string& file, const fs::path& base) {
  const std::string key = "engine.inspect.secret-file";
  return read_private_text(out, key, resolve_file(out, key, file, base));
}

// engine.cluster: etcd's URLs, the lease, and TLS and auth for a real etcd
// (files relative to the config file; the password file private like the
// inspector's secret).
cluster_config read_cluster(problems& out, const dict& d, const fs::path& base) {
  cluster_config c;
  c.enabled = true;
  dict_reader r{out, d, "engine.cluster",
                {"enabled", "etcd", "lease-ttl", "request-timeout", "unreachable-release",
                 "prefix", "ca-file", "cert-file", "key-file", "user", "password-file"}};
  r.read("enabled", c.enabled);
  r.read("etcd", c.etcd);
  r.read("lease-ttl", c.lease_ttl);
  r.read("request-timeout", c.request_timeout);
  r.read("unreachable-release", c.unreachable_release);
  r.read("prefix", c.prefix);
  r.read("user", c.user);
  std::string ca, cert, key, password;
  r.read("ca-file", ca);
  r.read("cert-file", cert);
  r.read("key-file", key);
  r.read("password-file", password);
  r.finish();
  if (!ca.empty())
    c.ca_file = resolve_file(out, r.path("ca-file"), ca, base);
  if (!cert.empty())
    c.cert_file = resolve_file(out, r.path("cert-file"), cert, base);
  if (!key.empty()) {
    c.key_file = resolve_file(out, r.path("key-file"), key, base);
    if (!c.key_file.empty())
      check_private(out, r.path("key-file"), c.key_file);
  }
  if (!password.empty()) {
    c.password_file = resolve_file(out, r.path("password-file"), password, base);
    c.password = read_private_text(out, r.path("password-file"), c.password_file);
    if (c.password.empty())
      out.silence(r.path("password-file"));
  }
  return c;
}

void read_engine(problems& out, const dict& d, const fs::path& base,
                 engine_config& cfg) {
  dict_reader r{out, d, "engine",
                {"entry", "poll-interval", "bulk-read-interval", "address-grace", "shutdown-timeout", "redial-min",
                 "redial-max", "gc", "probe", "inspect", "metrics", "gateway", "node", "peers",
                 "cluster", "stage-dir", "hosts", "images", "proxies", "groups", "host-grace",
                 "unedited"}};
  r.read("unedited", cfg.unedited);
  r.read("entry", cfg.entry, true);
  r.read("poll-interval", cfg.poll_interval);
  r.read("bulk-read-interval", cfg.bulk_read_interval);
  r.read("address-grace", cfg.address_grace, range{0, 1000});
  r.read("shutdown-timeout", cfg.shutdown_timeout);
  r.read("redial-min", cfg.redial_min);
  r.read("redial-max", cfg.redial_max);
  r.read("gc", cfg.gc);
  r.read("host-grace", cfg.host_grace);
  // Relative to the config file, like every path in it.
  if (r.read("stage-dir", cfg.stage_dir); !cfg.stage_dir.empty()) {
    cfg.stage_dir = (base / cfg.stage_dir).lexically_normal().string();
    while (cfg.stage_dir.size() > 1 && cfg.stage_dir.back() == '/')
      cfg.stage_dir.pop_back();
  }
  if (auto x = r.get<dict>("probe", false, "a dict like {mode = \"tcp\"}"))
    cfg.probe = read_probe(out, *x);
  if (auto x = r.get<dict>("inspect", false, "a dict like {address = \"127.0.0.1\", port = 4040}"))
    cfg.inspect = read_listen(out, *x, "engine.inspect", cfg.inspect, true);
  // Relative to the config file, like every path in it.
  if (!cfg.inspect.identity_dir.empty())
    cfg.inspect.identity_dir = (base / cfg.inspect.identity_dir).lexically_normal().string();
  if (!cfg.inspect.secret_file.empty()) {
    cfg.inspect_secret = read_secret(out, cfg.inspect.secret_file, base);
    if (cfg.inspect_secret.empty())
      out.silence("engine.inspect.secret-file");
  }
  if (auto x = r.get<dict>("metrics", false, "a dict like {address = \"127.0.0.1\", port = 9464}"))
    cfg.metrics = read_listen(out, *x, "engine.metrics", cfg.metrics, false);
  if (auto x = r.get<dict>("gateway", false, "a dict like {socket = \"/run/haproxy/admin.sock\"}"))
    cfg.gateway = read_gateway(out, *x, base);
  r.read("node", cfg.node);
  r.read("peers", cfg.peers);
  if (auto x = r.get<dict>("cluster", false, "a dict like {etcd = [\"http://127.0.0.1:2379\"]}"))
    cfg.cluster = read_cluster(out, *x, base);
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
  // A member's network, where its group names none, is its host's: set
  // when it is placed (actors/parts/group_book.hpp).
  if (auto xs = r.get<list>("groups", false, "a list of dicts"))
    for_each_dict(out, "engine.groups", *xs, [&](auto path, auto& x) {
      cfg.groups.push_back(read_group(out, path, x));
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
  if (!result.tls.key.empty() && fs::exists(result.tls.key))
    check_private(out, "openssl.key", result.tls.key);
  auto i = root.find("engine");
  if (i == root.end())
    out.add("engine", "required section is missing");
  else if (auto d = caf::get_if<dict>(&i->second))
    read_engine(out, *d, base, result);
  else
    out.add("engine", "expected a section, got " + describe(i->second));
  // Runs even after reading problems: keys that already have one stay silent.
  config_check::check_config(out, result);
  if (!out.empty())
    return out.to_error();
  result.node = node_name(result);
  return result;
}

caf::error parse_command_line(caf::actor_system_config& cfg, std::vector<std::string> args) {
  static const std::string flag = "--config-file=";
  std::string path;
  for (auto i = args.begin(); i != args.end();) {
    if (i->rfind(flag, 0) == 0) {
      path = i->substr(flag.size());
      i = args.erase(i);
    } else {
      ++i;
    }
  }
  std::istringstream text;
  if (!path.empty()) {
    auto checked = load_config_text(path);
    if (!checked)
      return std::move(checked.error());
    text.str(std::move(*checked));
  }
  auto err = cfg.parse(std::move(args), text);
  cfg.config_file_path = path;
  if (err)
    return make_error(ec::config_invalid, (path.empty() ? "" : path + ": ")
                                            + "cannot parse: " + cfg.render(err));
  return {};
}

} // namespace egress
