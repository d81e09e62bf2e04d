#include "runtime/config_dump.hpp"

#include <chrono>

#include "base/time_text.hpp"

namespace egress {

namespace {

// Strings reach this dump only after validation (names, tags, paths), but a
// path may still hold a quote or backslash: escape both.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    out += c;
  }
  return out + "\"";
}

std::string list(const std::vector<std::string>& xs) {
  std::string out = "[";
  for (size_t i = 0; i < xs.size(); ++i)
    out += (i ? ", " : "") + quoted(xs[i]);
  return out + "]";
}

std::string gateway_line(const gateway_config& g) {
  std::string out = "gateway = { socket = " + quoted(g.socket) + ", backends = [";
  for (size_t i = 0; i < g.backends.size(); ++i)
    out += std::string{i ? ", " : ""} + "{ name = " + quoted(g.backends[i].name)
           + (g.backends[i].tag.empty() ? std::string{} : ", tag = " + quoted(g.backends[i].tag))
           + " }";
  return out + "], drain-grace = " + duration_text(g.drain_grace)
         + ", call-budget = " + duration_text(g.call_budget)
         + ", resync-interval = " + duration_text(g.resync_interval) + " }\n";
}

// The cluster's keys; the password itself never (its file's path only).
std::string cluster_line(const cluster_config& c) {
  std::string out = "cluster = { etcd = " + list(c.etcd)
                    + ", lease-ttl = " + duration_text(c.lease_ttl)
                    + ", request-timeout = " + duration_text(c.request_timeout)
                    + ", unreachable-release = " + duration_text(c.unreachable_release)
                    + ", prefix = " + quoted(c.prefix);
  for (auto [key, value] : {std::pair{"ca-file", &c.ca_file}, std::pair{"cert-file", &c.cert_file},
                            std::pair{"key-file", &c.key_file}, std::pair{"user", &c.user},
                            std::pair{"password-file", &c.password_file}})
    if (!value->empty())
      out += std::string{", "} + key + " = " + quoted(*value);
  return out + " }\n";
}

// [engine]'s own keys, before its lists.
std::string engine_keys(const engine_config& cfg) {
  std::string out;
  out += "entry = " + quoted(cfg.entry) + "\n";
  out += "poll-interval = " + duration_text(cfg.poll_interval) + "\n";
  out += "bulk-read-interval = " + duration_text(cfg.bulk_read_interval) + "\n";
  out += "address-grace = " + std::to_string(cfg.address_grace) + "\n";
  out += "shutdown-timeout = " + duration_text(cfg.shutdown_timeout) + "\n";
  out += "redial-min = " + duration_text(cfg.redial_min) + "\n";
  out += "redial-max = " + duration_text(cfg.redial_max) + "\n";
  out += std::string{"gc = "} + (cfg.gc ? "true" : "false") + "\n";
  out += "host-grace = " + duration_text(cfg.host_grace) + "\n";
  out += "probe = { mode = " + quoted(cfg.probe.mode);
  if (!cfg.probe.target.empty())
    out += ", target = " + quoted(cfg.probe.target);
  out += ", interval = " + duration_text(cfg.probe.interval)
         + ", timeout = " + duration_text(cfg.probe.timeout)
         + ", rise = " + std::to_string(cfg.probe.rise)
         + ", fall = " + std::to_string(cfg.probe.fall) + " }\n";
  out += std::string{"inspect = { enabled = "} + (cfg.inspect.enabled ? "true" : "false")
         + ", address = " + quoted(cfg.inspect.address)
         + ", port = " + std::to_string(cfg.inspect.port)
         + ", tls = " + (cfg.inspect.tls ? "true" : "false")
         + (cfg.inspect.secret_file.empty() ? std::string{}
                                            : ", secret-file = " + quoted(cfg.inspect.secret_file))
         + (cfg.inspect.identity_dir.empty()
              ? std::string{}
              : ", identity-dir = " + quoted(cfg.inspect.identity_dir))
         + " }\n";
  out += std::string{"metrics = { enabled = "} + (cfg.metrics.enabled ? "true" : "false")
         + ", address = " + quoted(cfg.metrics.address)
         + ", port = " + std::to_string(cfg.metrics.port) + " }\n";
  if (cfg.gateway.enabled)
    out += gateway_line(cfg.gateway);
  out += "node = " + quoted(node_name(cfg)) + "\n";
  out += "peers = [";
  for (size_t i = 0; i < cfg.peers.size(); ++i)
    out += (i ? ", " : "") + quoted(cfg.peers[i]);
  out += "]\n";
  if (cfg.cluster.enabled)
    out += cluster_line(cfg.cluster);
  if (!cfg.stage_dir.empty())
    out += "stage-dir = " + quoted(cfg.stage_dir) + "\n";
  return out;
}

std::string host_line(const host_config& h) {
  std::string out;
  out += "  { name = " + quoted(h.name) + ", uri = " + quoted(h.uri)
         + ", domain-type = " + quoted(h.domain_type)
         + ", transport = " + quoted(h.transport);
  if (h.transport == "ssh")
    out += ", address = " + quoted(h.address) + ", port = " + std::to_string(h.port)
           + ", user = " + quoted(h.user) + ", key-file = " + quoted(h.key_file)
           + ", known-hosts = " + quoted(h.known_hosts)
           + ", remote-socket = " + quoted(h.remote_socket)
           + (h.remote_command.empty() ? std::string{}
                                       : ", remote-command = " + quoted(h.remote_command))
           + ", ssh-keepalive = " + duration_text(h.ssh_keepalive)
           + ", ssh-watchdog = " + duration_text(h.ssh_watchdog)
           + ", tcp-user-timeout = " + duration_text(h.tcp_user_timeout);
  if (h.transport == "local-socket")
    out += ", socket = " + quoted(h.socket);
  if (h.transport != "direct")
    out += ", bridge-dir = " + quoted(h.bridge_dir);
  out += ", keepalive-interval = " + duration_text(h.keepalive_interval)
         + ", keepalive-count = " + std::to_string(h.keepalive_count);
  if (!h.pool.empty())
    out += ", pool = " + quoted(h.pool);
  if (!h.network.empty())
    out += ", network = " + quoted(h.network);
  if (!h.console_log_dir.empty())
    out += ", console-log-dir = " + quoted(h.console_log_dir);
  out += ", max-calls = " + std::to_string(h.max_calls)
         + ", max-creates = " + std::to_string(h.max_creates)
         + ", upload-streams = " + std::to_string(h.upload_streams)
         + ", call-budget = " + duration_text(h.call_budget)
         + ", connect-timeout = " + duration_text(h.connect_timeout)
         + ", address-sources = " + list(h.address_sources)
         + ", max-proxies = " + std::to_string(h.max_proxies)
         + ", memory-reserve-mib = " + std::to_string(h.memory_reserve_mib)
         + (h.zone.empty() ? std::string{} : ", zone = " + quoted(h.zone)) + " },\n";
  return out;
}

// What a proxy or a group's members run.
std::string vm_keys(const proxy_spec& p) {
  std::string out;
  out += "vcpus = " + std::to_string(p.vcpus)
         + ", memory-mib = " + std::to_string(p.memory_mib);
  if (!p.network.empty())
    out += ", network = " + quoted(p.network);
  if (!p.image.empty())
    out += ", image = " + quoted(p.image);
  if (!p.kernel.empty())
    out += ", kernel = " + quoted(p.kernel)
           + (p.initrd.empty() ? std::string{} : ", initrd = " + quoted(p.initrd))
           + (p.cmdline.empty() ? std::string{} : ", cmdline = " + quoted(p.cmdline));
  if (!p.image.empty() || !p.kernel.empty())
    out += ", port = " + std::to_string(p.port) + ", allow-from = " + quoted(p.allow_from);
  return out + ", tags = " + list(p.tags);
}

std::string proxy_line(const proxy_spec& p) {
  return "  { name = " + quoted(p.name) + ", host = " + quoted(p.host) + ", " + vm_keys(p)
         + " },\n";
}

std::string group_line(const group_config& g) {
  return "  { name = " + quoted(g.name) + ", count = " + std::to_string(g.count)
         + ", hosts = " + list(g.hosts) + ", max-surge = " + std::to_string(g.max_surge) + ", "
         + vm_keys(g.member) + " },\n";
}

} // namespace

std::string dump_config(const engine_config& cfg) {
  std::string out = "; effective configuration";
  if (!cfg.config_file.empty())
    out += " of " + cfg.config_file;
  out += "\n[engine]\n" + engine_keys(cfg);
  out += "hosts = [\n";
  for (auto& h : cfg.hosts)
    out += host_line(h);
  out += "]\nimages = [\n";
  for (auto& img : cfg.images) {
    out += "  { name = " + quoted(img.name) + ", url = " + quoted(img.url)
           + ", sha256 = " + quoted(img.sha256) + ", size = " + std::to_string(img.size)
           + ", max-size = " + std::to_string(img.max_size)
           + ", format = " + quoted(img.format)
           + ", transfer-budget = " + duration_text(img.transfer_budget) + " },\n";
  }
  out += "]\nproxies = [\n";
  for (auto& p : cfg.proxies)
    out += proxy_line(p);
  out += "]\ngroups = [\n";
  for (auto& g : cfg.groups)
    out += group_line(g);
  out += "]\n";
  return out;
}

} // namespace egress
