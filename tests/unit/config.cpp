// load_engine_config and validate: every problem in the INI file is reported,
// one line each, with the file, the key path and what is wrong. The tests
// pin the exact text, because an operator reads it.
#define BOOST_TEST_MODULE config
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <caf/actor_system_config.hpp>

#include "messages/error.hpp"
#include "messages/names.hpp"
#include "runtime/config_file.hpp"

using namespace egress;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

constexpr const char* engine_keys =
  "entry, poll-interval, bulk-read-interval, address-grace, shutdown-timeout, redial-min, "
  "redial-max, gc, probe, inspect, metrics, gateway, node, peers, cluster, stage-dir, hosts, "
  "images, proxies, groups, host-grace, unedited";
constexpr const char* proxy_keys =
  "name, host, vcpus, memory-mib, network, tags, image, port, allow-from, kernel, initrd, cmdline";

// A minimal valid engine section; tests append keys or whole sections.
constexpr const char* minimal = "[engine]\n"
                                "entry = \"e1\"\n"
                                "hosts = [{name = \"hv1\", uri = \"test:///default\"}]\n";

struct fixture {
  fs::path dir;
  std::string file; // where load() writes the INI text

  fixture() {
    static int counter = 0;
    dir = fs::temp_directory_path()
          / ("egress-config-" + std::to_string(getpid()) + "-"
             + std::to_string(++counter));
    fs::create_directories(dir);
    // Fixed before any load(): a check may build its expected text first.
    file = (dir / "engine.ini").string();
  }

  ~fixture() {
    std::error_code ignored;
    fs::remove_all(dir, ignored);
  }

  std::string write(const std::string& name, const std::string& text) {
    auto path = dir / name;
    fs::create_directories(path.parent_path());
    std::ofstream{path} << text;
    return path.string();
  }

  /// A private key file, as ssh-keygen writes one (mode 0600).
  std::string write_key(const std::string& name) {
    auto path = write(name, "key");
    fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write);
    return path;
  }

  // Loads `ini` the way caf-run does: through CAF's own parser, naming the
  // file with --config-file.
  caf::expected<engine_config> load(const std::string& ini) {
    write("engine.ini", ini);
    caf::actor_system_config cfg;
    auto err = parse_command_line(cfg, {"--config-file=" + file});
    BOOST_REQUIRE_MESSAGE(!err, render(err));
    return load_engine_config(cfg);
  }

  // The problem text of a config that must not load.
  std::string problems(const std::string& ini) {
    auto result = load(ini);
    BOOST_REQUIRE_MESSAGE(!result, "config loaded but should not have");
    BOOST_CHECK(result.error() == ec::config_invalid);
    BOOST_CHECK(kind_of(result.error()) == error_kind::permanent);
    return detail(result.error());
  }

  // One expected line of the report.
  std::string line(const std::string& key, const std::string& text) const {
    return file + ": " + key + ": " + text;
  }

  // Expected line for a name the shared name check refuses: its text, minus
  // the key path it was given, which the line shows already.
  std::string bad_name(const std::string& key, const std::string& value) const {
    return file + ": " + detail(check_name(key, value));
  }
};

// Boost builds a check's message even when the check passes, and error() of
// an expected that holds a value is undefined: ask first.
std::string why(const caf::expected<engine_config>& x) {
  return x ? "" : render(x.error());
}

std::string with_proxy(const std::string& proxy) {
  return std::string{minimal} + "proxies = [" + proxy + "]\n";
}

host_config code_host(std::string name) {
  host_config h;
  h.name = std::move(name);
  h.uri = "test:///default";
  return h;
}

proxy_spec code_proxy(std::string name, std::string host) {
  proxy_spec p;
  p.name = std::move(name);
  p.host = std::move(host);
  return p;
}

} // namespace

BOOST_FIXTURE_TEST_SUITE(config_validation_suite, fixture)

// -- valid configs ------------------------------------------------------------

BOOST_AUTO_TEST_CASE(minimal_config_loads_with_defaults) {
  auto cfg = load(minimal);
  BOOST_REQUIRE_MESSAGE(cfg, why(cfg));
  BOOST_CHECK_EQUAL(cfg->config_file, file);
  BOOST_CHECK_EQUAL(cfg->entry, "e1");
  BOOST_CHECK(cfg->poll_interval == 2s);
  BOOST_CHECK(cfg->shutdown_timeout == 10s);
  BOOST_CHECK(cfg->redial_min == 500ms);
  BOOST_CHECK(cfg->redial_max == 30s);
  BOOST_REQUIRE_EQUAL(cfg->hosts.size(), 1u);
  auto& h = cfg->hosts[0];
  BOOST_CHECK_EQUAL(h.name, "hv1");
  BOOST_CHECK_EQUAL(h.uri, "test:///default");
  BOOST_CHECK_EQUAL(h.domain_type, "test");
  BOOST_CHECK_EQUAL(h.pool, "");
  BOOST_CHECK_EQUAL(h.network, "");
  BOOST_CHECK_EQUAL(h.max_calls, 5u);
  BOOST_CHECK(h.call_budget == 30s);
  BOOST_CHECK(h.connect_timeout == 10s);
  BOOST_CHECK((h.address_sources == std::vector<std::string>{"lease", "agent", "arp"}));
  BOOST_CHECK(cfg->proxies.empty());
}

BOOST_AUTO_TEST_CASE(full_config_resolves_test_node_and_defaults) {
  write("nodes/node.xml", "<node/>");
  auto cfg = load("; a full config\n"
                  "[engine]\n"
                  "entry = \"prod-1\"\n"
                  "poll-interval = 250ms\n"
                  "shutdown-timeout = 1min\n"
                  "redial-min = 1s\n"
                  "redial-max = 1s\n"
                  "hosts = [\n"
                  "  {name = \"hv1\", test-node = \"nodes/node.xml\", pool = \"default\",\n"
                  "   network = \"default\", max-calls = 64, call-budget = 5s,\n"
                  "   connect-timeout = 3s, address-sources = [\"arp\", \"lease\"]},\n"
                  "  {name = \"hv2\", uri = \"qemu+ssh://root@hv2/system\"},\n"
                  "  {name = \"hv3\", uri = \"qemu:///system\", domain-type = \"qemu\"},\n"
                  "]\n"
                  "proxies = [\n"
                  "  {name = \"px-1\", host = \"hv1\"},\n"
                  "  {name = \"px-2\", host = \"hv1\", vcpus = 2, memory-mib = 1024,\n"
                  "   network = \"other\", tags = [\"team:a\", \"eu west\"]},\n"
                  "  {name = \"px-3\", host = \"hv2\"},\n"
                  "]\n");
  BOOST_REQUIRE_MESSAGE(cfg, why(cfg));
  BOOST_CHECK_EQUAL(cfg->entry, "prod-1");
  BOOST_CHECK(cfg->poll_interval == 250ms);
  BOOST_CHECK(cfg->shutdown_timeout == 60s);
  BOOST_CHECK(cfg->redial_min == 1s);
  BOOST_CHECK(cfg->redial_max == 1s);
  BOOST_REQUIRE_EQUAL(cfg->hosts.size(), 3u);
  auto& hv1 = cfg->hosts[0];
  // test:// + an absolute path gives the three slashes libvirt expects.
  BOOST_CHECK_EQUAL(hv1.uri, "test://" + (dir / "nodes/node.xml").string());
  BOOST_CHECK(hv1.uri.starts_with("test:///"));
  BOOST_CHECK_EQUAL(hv1.domain_type, "test");
  BOOST_CHECK_EQUAL(hv1.pool, "default");
  BOOST_CHECK_EQUAL(hv1.network, "default");
  BOOST_CHECK_EQUAL(hv1.max_calls, 64u);
  BOOST_CHECK(hv1.call_budget == 5s);
  BOOST_CHECK(hv1.connect_timeout == 3s);
  BOOST_CHECK((hv1.address_sources == std::vector<std::string>{"arp", "lease"}));
  BOOST_CHECK_EQUAL(cfg->hosts[1].domain_type, "kvm");
  BOOST_CHECK_EQUAL(cfg->hosts[2].domain_type, "qemu");
  BOOST_REQUIRE_EQUAL(cfg->proxies.size(), 3u);
  auto& px1 = cfg->proxies[0];
  BOOST_CHECK_EQUAL(px1.host, "hv1");
  BOOST_CHECK_EQUAL(px1.vcpus, 1u);
  BOOST_CHECK_EQUAL(px1.memory_mib, 128u);
  BOOST_CHECK_EQUAL(px1.network, "default"); // from its host
  BOOST_CHECK(px1.tags.empty());
  auto& px2 = cfg->proxies[1];
  BOOST_CHECK_EQUAL(px2.vcpus, 2u);
  BOOST_CHECK_EQUAL(px2.memory_mib, 1024u);
  BOOST_CHECK_EQUAL(px2.network, "other");
  BOOST_CHECK((px2.tags == std::vector<std::string>{"team:a", "eu west"}));
  BOOST_CHECK_EQUAL(cfg->proxies[2].network, ""); // hv2 has none: no NIC
}

BOOST_AUTO_TEST_CASE(repository_testnode_resolves_by_absolute_path) {
  auto node = std::string{EGRESS_SOURCE_DIR} + "/config/testnode.xml";
  auto cfg = load("[engine]\nentry = \"e1\"\nhosts = [{name = \"hv1\", test-node = \""
                  + node + "\"}]\n");
  BOOST_REQUIRE_MESSAGE(cfg, why(cfg));
  BOOST_CHECK_EQUAL(cfg->hosts[0].uri,
                    "test://" + fs::absolute(node).lexically_normal().string());
}

BOOST_AUTO_TEST_CASE(caf_own_options_are_accepted) {
  auto cfg = load(std::string{"[scheduler]\nmax-threads = 2\npolicy = 'sharing'\n"}
                  + "[logger]\nconsole = 'none'\n" + minimal);
  BOOST_CHECK_MESSAGE(cfg, why(cfg));
}

BOOST_AUTO_TEST_CASE(validate_accepts_a_config_built_in_code) {
  engine_config cfg;
  cfg.entry = "e1";
  cfg.hosts.push_back(code_host("hv1"));
  cfg.proxies.push_back(code_proxy("px-1", "hv1"));
  auto err = validate(cfg);
  BOOST_CHECK_MESSAGE(!err, render(err));
}

// -- unknown keys -------------------------------------------------------------

BOOST_AUTO_TEST_CASE(unknown_key_in_engine) {
  BOOST_CHECK_EQUAL(problems(std::string{minimal} + "pol-interval = 2s\n"),
                    line("engine.pol-interval",
                         std::string{"unknown key (known keys: "} + engine_keys + ")"));
}

BOOST_AUTO_TEST_CASE(unknown_key_in_a_proxy) {
  auto text = problems(with_proxy("{name = \"px-0\", host = \"hv1\"}, "
                                  "{name = \"px-1\", host = \"hv1\", memroy-mib = 256}"));
  BOOST_CHECK_EQUAL(text, line("engine.proxies[1].memroy-mib",
                               std::string{"unknown key (known keys: "} + proxy_keys + ")"));
}

BOOST_AUTO_TEST_CASE(unknown_key_in_a_host) {
  auto text = problems("[engine]\nentry = \"e1\"\n"
                       "hosts = [{name = \"hv1\", uri = \"test:///default\", max-call = 2}]\n");
  BOOST_CHECK_EQUAL(text, line("engine.hosts[0].max-call",
                               "unknown key (known keys: name, uri, test-node, "
                               "domain-type, pool, network, console-log-dir, max-calls, call-budget, "
                               "connect-timeout, address-sources, transport, address, port, "
                         "user, key-file, known-hosts, remote-socket, remote-command, "
                         "socket, bridge-dir, keepalive-interval, keepalive-count, "
                         "ssh-keepalive, ssh-watchdog, tcp-user-timeout, max-proxies, "
                         "memory-reserve-mib, zone, max-creates, upload-streams)"));
}

BOOST_AUTO_TEST_CASE(upload_streams_out_of_range_is_refused) {
  auto text = problems("[engine]\nentry = \"e1\"\n"
                       "hosts = [{name = \"hv1\", uri = \"test:///default\", upload-streams = 9}]\n");
  BOOST_CHECK_MESSAGE(text.find("engine.hosts[0].upload-streams") != std::string::npos, text);
}

BOOST_AUTO_TEST_CASE(unknown_top_level_section) {
  BOOST_CHECK_EQUAL(problems(std::string{minimal} + "[engin]\nentry = \"e2\"\n"),
                    line("engin", "unknown section (known sections: engine, stream, "
                                  "scheduler, work-stealing, logger, middleman, "
                                  "opencl, openssl)"));
}

BOOST_AUTO_TEST_CASE(unknown_key_in_a_caf_section) {
  BOOST_CHECK_EQUAL(problems(std::string{"[scheduler]\npolcy = 'sharing'\n"} + minimal),
                    line("scheduler.polcy",
                         "unknown key (known keys: policy, max-threads, "
                         "max-throughput, enable-profiling, profiling-resolution, "
                         "profiling-output-file)"));
}

BOOST_AUTO_TEST_CASE(unknown_top_level_key) {
  BOOST_CHECK_EQUAL(problems(std::string{"verbose = true\n"} + minimal),
                    line("verbose", "unknown key (known keys: help, long-help, "
                                    "dump-config, config-file)"));
}

BOOST_AUTO_TEST_CASE(missing_engine_section) {
  BOOST_CHECK_EQUAL(problems("[scheduler]\nmax-threads = 2\n"),
                    line("engine", "required section is missing"));
}

// -- wrong types --------------------------------------------------------------

BOOST_AUTO_TEST_CASE(string_for_a_duration) {
  BOOST_CHECK_EQUAL(problems(std::string{minimal} + "poll-interval = \"2\"\n"),
                    line("engine.poll-interval",
                         "expected a duration like 2s or 250ms, got string \"2\""));
}

BOOST_AUTO_TEST_CASE(integer_for_a_duration) {
  BOOST_CHECK_EQUAL(problems(std::string{minimal} + "redial-min = 500\n"),
                    line("engine.redial-min",
                         "expected a duration like 2s or 250ms, got integer 500"));
}

BOOST_AUTO_TEST_CASE(string_for_an_integer) {
  BOOST_CHECK_EQUAL(problems(with_proxy("{name = \"px-1\", host = \"hv1\", vcpus = \"2\"}")),
                    line("engine.proxies[0].vcpus", "expected an integer, got string \"2\""));
}

BOOST_AUTO_TEST_CASE(integer_for_a_string) {
  BOOST_CHECK_EQUAL(problems("[engine]\nentry = 7\n"
                             "hosts = [{name = \"hv1\", uri = \"test:///default\"}]\n"),
                    line("engine.entry", "expected a string, got integer 7"));
}

// CAF drops a wrongly typed value of its own options from content(cfg)
// silently; the loader reads the file again to see it.
BOOST_AUTO_TEST_CASE(caf_option_with_the_wrong_type) {
  BOOST_CHECK_EQUAL(problems(std::string{"[scheduler]\nmax-threads = \"2\"\n"} + minimal),
                    line("scheduler.max-threads", "expected an integer, got string \"2\""));
}

BOOST_AUTO_TEST_CASE(ssh_host_resolves_files_and_defaults) {
  write_key("keys/id_ed25519");
  write("keys/known_hosts", "[10.0.0.1]:22 ssh-ed25519 AAAA");
  auto cfg = load("[engine]\nentry = \"e1\"\n"
                  "hosts = [{name = \"hv1\", transport = \"ssh\", address = \"192.0.2.7\", "
                  "key-file = \"keys/id_ed25519\", known-hosts = \"keys/known_hosts\"}]\n");
  BOOST_REQUIRE_MESSAGE(cfg, why(cfg));
  auto& h = cfg->hosts.at(0);
  BOOST_CHECK_EQUAL(h.transport, "ssh");
  BOOST_CHECK_EQUAL(h.uri, "qemu:///system");
  BOOST_CHECK_EQUAL(h.domain_type, "kvm");
  BOOST_CHECK_EQUAL(h.port, 22u);
  BOOST_CHECK_EQUAL(h.user, "root");
  BOOST_CHECK_EQUAL(h.key_file, (dir / "keys/id_ed25519").string());
  BOOST_CHECK_EQUAL(h.known_hosts, (dir / "keys/known_hosts").string());
  BOOST_CHECK_EQUAL(h.remote_socket, "/var/run/libvirt/libvirt-sock");
  BOOST_CHECK(h.keepalive_interval == std::chrono::seconds(1));
  BOOST_CHECK_EQUAL(h.keepalive_count, 3u);
  BOOST_CHECK(h.ssh_watchdog == std::chrono::seconds(3));
}

BOOST_AUTO_TEST_CASE(ssh_host_without_its_required_keys) {
  auto text = problems("[engine]\nentry = \"e1\"\n"
                       "hosts = [{name = \"hv1\", transport = \"ssh\", port = 70000, "
                       "keepalive-interval = 1500ms, known-hosts = \"nope\"}]\n");
  BOOST_CHECK_EQUAL(text,
                    line("engine.hosts[0].port", "must be between 1 and 65535, got 70000") + "\n"
                    + line("engine.hosts[0].known-hosts",
                           "no such file: \"" + (dir / "nope").string() + "\"") + "\n"
                    + line("engine.hosts[0].address",
                           "required key is missing (transport \"ssh\")") + "\n"
                    + line("engine.hosts[0].key-file",
                           "required key is missing (transport \"ssh\")") + "\n"
                    + line("engine.hosts[0].keepalive-interval",
                           "libvirt counts whole seconds: use 0s (off), 1s, 2s, ..."));
}

BOOST_AUTO_TEST_CASE(ssh_watchdog_needs_a_shorter_keepalive) {
  write_key("k");
  auto host = [](const std::string& extra) {
    return std::string{"[engine]\nentry = \"e1\"\n"}
           + "hosts = [{name = \"hv1\", transport = \"ssh\", address = \"192.0.2.7\", "
             "key-file = \"k\", known-hosts = \"k\", " + extra + "}]\n";
  };
  BOOST_CHECK_EQUAL(problems(host("ssh-keepalive = 3s, ssh-watchdog = 3s")),
                    line("engine.hosts[0].ssh-watchdog",
                         "needs an ssh-keepalive shorter than itself (0s turns the watchdog off)"));
  BOOST_CHECK_EQUAL(problems(host("ssh-keepalive = 500ms")),
                    line("engine.hosts[0].ssh-keepalive",
                         "libssh2 counts whole seconds: use 0s (off), 1s, 2s, ..."));
  auto off = load(host("ssh-keepalive = 0s, ssh-watchdog = 0s"));
  BOOST_CHECK_MESSAGE(off, why(off));
}

BOOST_AUTO_TEST_CASE(unknown_transport) {
  auto text = problems("[engine]\nentry = \"e1\"\n"
                       "hosts = [{name = \"hv1\", transport = \"telnet\"}]\n");
  BOOST_CHECK_EQUAL(text, line("engine.hosts[0].transport",
                               "expected one of direct, ssh, local-socket, got \"telnet\""));
}

BOOST_AUTO_TEST_CASE(command_line_only_options_are_refused_in_a_file) {
  // In a file, these would make caf-run print help or a dump and exit 0
  // without validating anything, or switch to another file.
  BOOST_CHECK_EQUAL(problems(std::string{"dump-config = true\n"} + minimal),
                    line("dump-config", "only valid on the command line"));
  BOOST_CHECK_EQUAL(problems(std::string{"long-help = true\n"} + minimal),
                    line("long-help", "only valid on the command line"));
}

BOOST_AUTO_TEST_CASE(caf_options_of_every_type_are_type_checked) {
  auto text = problems("help = \"yes\"\n"
                       "[scheduler]\npolicy = \"sharing\"\nmax-throughput = -1\n"
                       "enable-profiling = 1\n"
                       "[logger]\nfile-name = 'caflog'\n"
                       "component-blacklist = ['caf_flow', \"caf_stream\", 3]\n"
                       "[middleman]\nheartbeat-interval = 10\napp-identifiers = \"a\"\n"
                       + std::string{minimal});
  BOOST_CHECK_EQUAL(text,
                    line("help", "only valid on the command line") + "\n"
                      + line("logger.component-blacklist[1]",
                             "expected an atom, got string \"caf_stream\" "
                             "(atoms take single quotes)") + "\n"
                      + line("logger.component-blacklist[2]",
                             "expected an atom, got integer 3") + "\n"
                      + line("logger.file-name", "expected a string, got atom 'caflog' "
                                                 "(strings take double quotes)") + "\n"
                      + line("middleman.app-identifiers",
                             "expected a list of strings, got string \"a\"") + "\n"
                      + line("middleman.heartbeat-interval",
                             "expected a duration like 2s or 250ms, got integer 10") + "\n"
                      + line("scheduler.enable-profiling",
                             "expected true or false, got integer 1") + "\n"
                      + line("scheduler.max-throughput",
                             "expected a non-negative integer, got integer -1") + "\n"
                      + line("scheduler.policy", "expected an atom, got string \"sharing\" "
                                                 "(atoms take single quotes)"));
}

BOOST_AUTO_TEST_CASE(caf_options_of_every_type_are_accepted) {
  auto cfg = load("[scheduler]\nmax-threads = 2\npolicy = 'sharing'\n"
                  "enable-profiling = false\nprofiling-resolution = 100ms\n"
                  "[work-stealing]\nmoderate-sleep-duration = 50us\n"
                  "[logger]\nconsole = 'none'\nfile-name = \"caf.log\"\n"
                  "component-blacklist = ['caf_flow', 'caf_stream']\n"
                  "[middleman]\napp-identifiers = [\"a\", \"b\"]\nheartbeat-interval = 0s\n"
                  "[opencl]\ndevice-ids = [0, 1]\n"
                  + std::string{minimal});
  BOOST_CHECK_MESSAGE(cfg, why(cfg));
}

BOOST_AUTO_TEST_CASE(wrong_type_and_unknown_key_in_a_caf_section_together) {
  auto text = problems(std::string{"[scheduler]\nmax-threads = \"2\"\npolcy = 'sharing'\n"}
                       + minimal + "poll-interval = \"2\"\n");
  BOOST_CHECK_EQUAL(text,
                    line("scheduler.polcy",
                         "unknown key (known keys: policy, max-threads, "
                         "max-throughput, enable-profiling, profiling-resolution, "
                         "profiling-output-file)") + "\n"
                      + line("scheduler.max-threads", "expected an integer, got string \"2\"")
                      + "\n"
                      + line("engine.poll-interval",
                             "expected a duration like 2s or 250ms, got string \"2\""));
}

// A misspelt section is one problem, whatever its keys hold.
BOOST_AUTO_TEST_CASE(values_in_an_unknown_section_are_not_type_checked) {
  BOOST_CHECK_EQUAL(problems(std::string{"[schduler]\nmax-threads = \"2\"\n"} + minimal),
                    line("schduler", "unknown section (known sections: engine, stream, "
                                     "scheduler, work-stealing, logger, middleman, "
                                     "opencl, openssl)"));
}

BOOST_AUTO_TEST_CASE(atom_for_a_string_hints_at_quotes) {
  BOOST_CHECK_EQUAL(problems("[engine]\nentry = \"e1\"\n"
                             "hosts = [{name = \"hv1\", uri = 'test'}]\n"),
                    line("engine.hosts[0].uri", "expected a string, got atom 'test' "
                                                "(strings take double quotes)"));
}

BOOST_AUTO_TEST_CASE(string_for_a_list_of_strings) {
  BOOST_CHECK_EQUAL(problems(with_proxy("{name = \"px-1\", host = \"hv1\", tags = \"a\"}")),
                    line("engine.proxies[0].tags", "expected a list of strings, got string \"a\""));
}

BOOST_AUTO_TEST_CASE(wrong_element_in_a_list_of_strings) {
  BOOST_CHECK_EQUAL(problems(with_proxy("{name = \"px-1\", host = \"hv1\", tags = [\"a\", 5]}")),
                    line("engine.proxies[0].tags[1]", "expected a string, got integer 5"));
}

BOOST_AUTO_TEST_CASE(dict_for_a_list_of_dicts) {
  BOOST_CHECK_EQUAL(problems("[engine]\nentry = \"e1\"\n"
                             "hosts = {name = \"hv1\", uri = \"test:///default\"}\n"),
                    line("engine.hosts", "expected a list of dicts, got a dict"));
}

BOOST_AUTO_TEST_CASE(string_in_a_list_of_dicts) {
  BOOST_CHECK_EQUAL(problems(std::string{minimal} + "proxies = [\"px-1\"]\n"),
                    line("engine.proxies[0]",
                         "expected a dict like {name = \"...\"}, got string \"px-1\""));
}

// -- missing keys -------------------------------------------------------------

BOOST_AUTO_TEST_CASE(missing_entry) {
  BOOST_CHECK_EQUAL(problems("[engine]\nhosts = [{name = \"hv1\", uri = \"test:///default\"}]\n"),
                    line("engine.entry", "required key is missing"));
}

BOOST_AUTO_TEST_CASE(missing_proxy_host) {
  BOOST_CHECK_EQUAL(problems(with_proxy("{name = \"px-1\"}")),
                    line("engine.proxies[0].host", "required key is missing"));
}

BOOST_AUTO_TEST_CASE(missing_hosts) {
  BOOST_CHECK_EQUAL(problems("[engine]\nentry = \"e1\"\n"),
                    line("engine.hosts", "required key is missing"));
}

BOOST_AUTO_TEST_CASE(empty_hosts) {
  BOOST_CHECK_EQUAL(problems("[engine]\nentry = \"e1\"\nhosts = []\n"),
                    line("engine.hosts", "at least one host is required"));
}

BOOST_AUTO_TEST_CASE(host_without_uri_or_test_node) {
  BOOST_CHECK_EQUAL(problems("[engine]\nentry = \"e1\"\nhosts = [{name = \"hv1\"}]\n"),
                    line("engine.hosts[0].uri", "required key is missing (or set test-node)"));
}

BOOST_AUTO_TEST_CASE(host_with_uri_and_test_node) {
  write("node.xml", "<node/>");
  BOOST_CHECK_EQUAL(problems("[engine]\nentry = \"e1\"\nhosts = [{name = \"hv1\", "
                             "uri = \"test:///default\", test-node = \"node.xml\"}]\n"),
                    line("engine.hosts[0].test-node", "set either uri or test-node, not both"));
}

// -- names, duplicates, references --------------------------------------------

BOOST_AUTO_TEST_CASE(duplicate_proxy_name) {
  auto text = problems(with_proxy("{name = \"px-1\", host = \"hv1\"}, "
                                  "{name = \"px-2\", host = \"hv1\"}, "
                                  "{name = \"px-1\", host = \"hv1\"}"));
  BOOST_CHECK_EQUAL(text, line("engine.proxies[2].name",
                               "duplicate proxy name \"px-1\" (first declared at "
                               "engine.proxies[0])"));
}

BOOST_AUTO_TEST_CASE(duplicate_host_name) {
  auto text = problems("[engine]\nentry = \"e1\"\nhosts = ["
                       "{name = \"hv1\", uri = \"test:///default\"}, "
                       "{name = \"hv1\", uri = \"qemu:///system\"}]\n");
  BOOST_CHECK_EQUAL(text, line("engine.hosts[1].name",
                               "duplicate host name \"hv1\" (first declared at "
                               "engine.hosts[0])"));
}

BOOST_AUTO_TEST_CASE(name_failing_the_pattern_reads_well) {
  BOOST_CHECK_EQUAL(problems(with_proxy("{name = \"PX-1\", host = \"hv1\"}")),
                    line("engine.proxies[0].name",
                         "\"PX-1\" is not a valid name (must match "
                         "[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)"));
}

BOOST_AUTO_TEST_CASE(names_failing_the_pattern) {
  std::vector<std::string> names{"PX-1", "a/b", "../x", std::string(300, 'a'), "-px", ""};
  for (auto& name : names) {
    BOOST_TEST_CONTEXT("name " << name) {
      auto text = problems(with_proxy("{name = \"" + name + "\", host = \"hv1\"}"));
      BOOST_CHECK_EQUAL(text, bad_name("engine.proxies[0].name", name));
    }
  }
}

BOOST_AUTO_TEST_CASE(names_are_checked_everywhere) {
  auto text = problems("[engine]\nentry = \"E1\"\nhosts = [{name = \"hv_1\", "
                       "uri = \"test:///default\", pool = \"a b\", network = \"Net\"}]\n"
                       "proxies = [{name = \"px-1\", host = \"hv_1\", network = \"../n\"}]\n");
  BOOST_CHECK_EQUAL(text, bad_name("engine.entry", "E1") + "\n"
                            + bad_name("engine.hosts[0].name", "hv_1") + "\n"
                            + bad_name("engine.hosts[0].pool", "a b") + "\n"
                            + bad_name("engine.hosts[0].network", "Net") + "\n"
                            + bad_name("engine.proxies[0].network", "../n"));
}

BOOST_AUTO_TEST_CASE(bad_tag) {
  auto long_tag = std::string(65, 't');
  auto text = problems(with_proxy("{name = \"px-1\", host = \"hv1\", tags = [\"ok\", \""
                                  + long_tag + "\"]}"));
  BOOST_CHECK_EQUAL(text, file + ": " + detail(check_tag("engine.proxies[0].tags[1]",
                                                              long_tag)));
}

BOOST_AUTO_TEST_CASE(reference_to_an_undeclared_host) {
  BOOST_CHECK_EQUAL(problems(with_proxy("{name = \"px-1\", host = \"hv9\"}")),
                    line("engine.proxies[0].host",
                         "undeclared host \"hv9\" (declared hosts: hv1)"));
}

BOOST_AUTO_TEST_CASE(test_node_file_missing) {
  auto text = problems("[engine]\nentry = \"e1\"\n"
                       "hosts = [{name = \"hv1\", test-node = \"missing.xml\"}]\n");
  BOOST_CHECK_EQUAL(text, line("engine.hosts[0].test-node",
                               "no such file: \"" + (dir / "missing.xml").string() + "\""));
}

BOOST_AUTO_TEST_CASE(test_node_is_a_directory) {
  fs::create_directories(dir / "nodes");
  auto text = problems("[engine]\nentry = \"e1\"\n"
                       "hosts = [{name = \"hv1\", test-node = \"nodes\"}]\n");
  BOOST_CHECK_EQUAL(text, line("engine.hosts[0].test-node",
                               "not a regular file: \"" + (dir / "nodes").string() + "\""));
}

// -- ranges and values --------------------------------------------------------

BOOST_AUTO_TEST_CASE(values_out_of_range) {
  auto text = problems("[engine]\nentry = \"e1\"\npoll-interval = 0s\n"
                       "redial-min = 2s\nredial-max = 1s\n"
                       "hosts = [{name = \"hv1\", max-calls = 65,\n"
                       "  call-budget = -1s, domain-type = \"xen\", uri = \"hv1\"}]\n"
                       "proxies = [{name = \"px-1\", host = \"hv1\", vcpus = 0, memory-mib = 32}]\n");
  BOOST_CHECK_EQUAL(text,
                    line("engine.hosts[0].max-calls", "must be between 1 and 64, got 65") + "\n"
                      + line("engine.proxies[0].vcpus", "must be between 1 and 64, got 0") + "\n"
                      + line("engine.proxies[0].memory-mib",
                             "must be between 64 and 1048576, got 32") + "\n"
                      + line("engine.poll-interval", "must be longer than 0s, got 0s") + "\n"
                      + line("engine.redial-max",
                             "must be at least redial-min (2s), got 1s") + "\n"
                      + line("engine.hosts[0].uri",
                             "expected a libvirt URI like qemu:///system or "
                             "qemu+ssh://root@hv1/system, got \"hv1\"") + "\n"
                      + line("engine.hosts[0].domain-type",
                             "expected one of test, qemu, kvm, got \"xen\"") + "\n"
                      + line("engine.hosts[0].call-budget", "must be longer than 0s, got -1s"));
}

// -- images -------------------------------------------------------------------

constexpr const char* digest =
  "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

BOOST_AUTO_TEST_CASE(images_load_with_defaults_and_proxies_name_them) {
  auto cfg = load(std::string{"[engine]\nentry = \"e1\"\n"
                              "hosts = [{name = \"hv1\", uri = \"test:///default\","
                              " pool = \"images\"}]\n"
                              "images = [{name = \"base\", url = \"http://m/base.qcow2\","
                              " sha256 = \""}
                  + "9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08"
                  + "\"}, {name = \"k\", url = \"file:///srv/vmlinuz\", sha256 = \""
                  + digest + "\", size = 123, format = \"kernel\", transfer-budget = 5min}]\n"
                  + "proxies = [{name = \"px-1\", host = \"hv1\", image = \"base\"}]\n");
  BOOST_REQUIRE_MESSAGE(cfg, (cfg ? std::string{} : render(cfg.error())));
  BOOST_REQUIRE_EQUAL(cfg->images.size(), 2u);
  auto& a = cfg->images[0];
  BOOST_CHECK_EQUAL(a.name, "base");
  BOOST_CHECK_EQUAL(a.sha256, digest); // stored lowercase
  BOOST_CHECK_EQUAL(a.size, 0u);
  BOOST_CHECK_EQUAL(a.format, "qcow2");
  BOOST_CHECK(a.transfer_budget == std::chrono::minutes(30));
  auto& k = cfg->images[1];
  BOOST_CHECK_EQUAL(k.size, 123u);
  BOOST_CHECK_EQUAL(k.format, "kernel");
  BOOST_CHECK(k.transfer_budget == std::chrono::minutes(5));
  BOOST_CHECK_EQUAL(cfg->proxies[0].image, "base");
}

BOOST_AUTO_TEST_CASE(bad_images_are_reported_by_key) {
  auto text = problems(std::string{"[engine]\nentry = \"e1\"\n"
                                   "hosts = [{name = \"hv1\", uri = \"test:///default\"}]\n"
                                   "images = [{name = \"Base\", url = \"ftp://m/x\","
                                   " sha256 = \"abc\", format = \"vmdk\","
                                   " transfer-budget = 0s},\n"
                                   "  {name = \"b\", url = \"http://m/b\", sha256 = \""}
                       + digest + "\", size = -1}]\n"
                       + "proxies = [{name = \"px-1\", host = \"hv1\", image = \"nope\"},\n"
                       + "  {name = \"px-2\", host = \"hv1\", image = \"b\"}]\n");
  BOOST_CHECK_EQUAL(
    text,
    line("engine.images[1].size", "must be between 0 and 9223372036854775807, got -1") + "\n"
      + line("engine.images[0].name", "\"Base\" is not a valid name (must match "
                                      "[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)")
      + "\n"
      + line("engine.images[0].url",
             "expected an http://, https:// or file:// URL, got \"ftp://m/x\"")
      + "\n" + line("engine.images[0].sha256", "expected 64 lowercase hex digits, got \"abc\"")
      + "\n"
      + line("engine.images[0].format",
             "expected one of qcow2, raw, kernel, initrd, got \"vmdk\"")
      + "\n" + line("engine.images[0].transfer-budget", "must be longer than 0s, got 0s")
      + "\n"
      + line("engine.proxies[0].image", "undeclared image \"nope\" (declared images: Base, b)")
      + "\n"
      + line("engine.proxies[1].image",
             "host \"hv1\" has no pool to keep image \"b\" in (set its pool)"));
}

BOOST_AUTO_TEST_CASE(proxy_seed_settings_are_checked) {
  auto text = problems(std::string{"[engine]\nentry = \"e1\"\n"
                                   "hosts = [{name = \"hv1\", uri = \"test:///default\","
                                   " pool = \"p\"}]\n"
                                   "images = [{name = \"b\", url = \"http://m/b\", sha256 = \""}
                       + digest + "\"}]\n"
                       + "proxies = [{name = \"px-1\", host = \"hv1\", image = \"b\","
                       + " port = 0, allow-from = \"10.0.0.0\"}]\n");
  BOOST_CHECK_EQUAL(text,
                    line("engine.proxies[0].port", "must be between 1 and 65535, got 0") + "\n"
                      + line("engine.proxies[0].allow-from",
                             "\"10.0.0.0\" is not an address with a prefix length "
                             "(e.g. 10.0.0.0/8 or fd00::/64)"));
}

// docs/spec.md 24: a declared size may not pass the image's max-size.
BOOST_AUTO_TEST_CASE(spec_24_an_image_larger_than_its_max_size_is_refused) {
  auto text = problems(std::string{"[engine]\nentry = \"e1\"\n"
                                   "hosts = [{name = \"hv1\", uri = \"test:///default\","
                                   " pool = \"p\"}]\n"
                                   "images = [{name = \"b\", url = \"http://m/b\", sha256 = \""}
                       + digest + "\", size = 2048, max-size = 1024}]\n");
  BOOST_CHECK_EQUAL(text, line("engine.images[0].size",
                               "2048 bytes is more than max-size (1024)"));
}

BOOST_AUTO_TEST_CASE(kernel_boot_images_are_checked_by_role) {
  auto images = std::string{"images = [{name = \"k\", url = \"http://m/k\", format = \"kernel\","
                            " sha256 = \""} + digest + "\"},\n"
                + "  {name = \"i\", url = \"http://m/i\", format = \"initrd\", sha256 = \""
                + digest + "\"},\n"
                + "  {name = \"d\", url = \"http://m/d\", format = \"qcow2\", sha256 = \""
                + digest + "\"}]\n";
  auto head = std::string{"[engine]\nentry = \"e1\"\n"
                          "hosts = [{name = \"hv1\", uri = \"test:///default\", pool = \"p\"}]\n"}
              + images;
  auto ok = load(head + "proxies = [{name = \"px-1\", host = \"hv1\", kernel = \"k\","
                        " initrd = \"i\", cmdline = \"console=ttyS0\"}]\n");
  BOOST_REQUIRE(ok);
  BOOST_CHECK_EQUAL(ok->proxies[0].kernel, "k");
  BOOST_CHECK_EQUAL(ok->proxies[0].initrd, "i");
  BOOST_CHECK_EQUAL(ok->proxies[0].cmdline, "console=ttyS0");
  BOOST_CHECK_EQUAL(problems("[engine]\nentry = \"e1\"\nhosts = [{name = \"hv1\","
                             " uri = \"test:///default\", console-log-dir = \"logs/../x\"}]\n"),
                    line("engine.hosts[0].console-log-dir",
                         "expected an absolute path without spaces or '..', got \"logs/../x\""));
  BOOST_CHECK_EQUAL(problems(head + "proxies = [{name = \"px-1\", host = \"hv1\", image = \"k\","
                                    " kernel = \"d\", initrd = \"nope\"},\n"
                                    "  {name = \"px-2\", host = \"hv1\", initrd = \"i\","
                                    " cmdline = \"quiet\"}]\n"),
                    line("engine.proxies[0].image",
                         "image \"k\" has format \"kernel\"; image needs qcow2 or raw")
                      + "\n"
                      + line("engine.proxies[0].kernel",
                             "image \"d\" has format \"qcow2\"; kernel needs kernel")
                      + "\n"
                      + line("engine.proxies[0].initrd",
                             "undeclared image \"nope\" (declared images: d, i, k)")
                      + "\n" + line("engine.proxies[1].initrd", "needs a kernel (set kernel too)")
                      + "\n"
                      + line("engine.proxies[1].cmdline", "needs a kernel (set kernel too)"));
}

BOOST_AUTO_TEST_CASE(probe_settings_load_with_defaults_and_a_target_means_http) {
  auto plain = load(minimal);
  BOOST_REQUIRE(plain);
  BOOST_CHECK_EQUAL(plain->probe.mode, "tcp");
  BOOST_CHECK(plain->probe.interval == 5s);
  BOOST_CHECK_EQUAL(plain->probe.rise, 2u);
  BOOST_CHECK_EQUAL(plain->probe.fall, 3u);
  BOOST_CHECK(plain->gc);
  auto http = load(std::string{minimal}
                   + "gc = false\nprobe = { target = \"http://10.0.0.1/x\", rise = 1 }\n");
  BOOST_REQUIRE(http);
  BOOST_CHECK_EQUAL(http->probe.mode, "http");
  BOOST_CHECK_EQUAL(http->probe.target, "http://10.0.0.1/x");
  BOOST_CHECK_EQUAL(http->probe.rise, 1u);
  BOOST_CHECK(!http->gc);
}

BOOST_AUTO_TEST_CASE(bad_probe_settings_are_reported_by_key) {
  BOOST_CHECK_EQUAL(problems(std::string{minimal}
                             + "probe = { mode = \"icmp\", intervall = 5s, rise = 0,"
                               " timeout = 9s, target = \"10.0.0.1\" }\n"),
                    line("engine.probe.rise", "must be between 1 and 100, got 0") + "\n"
                      + line("engine.probe.intervall",
                             "unknown key (known keys: mode, target, interval, timeout, "
                             "rise, fall)")
                      + "\n"
                      + line("engine.probe.mode", "expected one of http, tcp, off, got \"icmp\"")
                      + "\n"
                      + line("engine.probe.target", "only used with mode \"http\" (mode is "
                                                    "\"icmp\")")
                      + "\n"
                      + line("engine.probe.timeout", "must not exceed interval (5s), got 9s"));
  BOOST_CHECK_EQUAL(problems(std::string{minimal} + "probe = { mode = \"http\" }\n"),
                    line("engine.probe.target", "required with mode \"http\" (an http:// URL "
                                                "the proxy must fetch)"));
  BOOST_CHECK_EQUAL(problems(std::string{minimal} + "gc = \"yes\"\n"),
                    line("engine.gc", "expected true or false, got string \"yes\""));
}

BOOST_AUTO_TEST_CASE(node_defaults_to_the_entry_and_peers_load) {
  auto plain = load(minimal);
  BOOST_REQUIRE_MESSAGE(plain, why(plain));
  BOOST_CHECK_EQUAL(plain->node, "e1");
  BOOST_CHECK(plain->peers.empty());
  auto cfg = load(std::string{minimal}
                  + "node = \"n1\"\npeers = [\"127.0.0.1:4041\", \"[::1]:4042\", "
                    "\"node-b.example:4040\"]\n");
  BOOST_REQUIRE_MESSAGE(cfg, why(cfg));
  BOOST_CHECK_EQUAL(cfg->node, "n1");
  BOOST_CHECK_EQUAL(cfg->peers.size(), 3u);
  auto v6 = split_host_port("[::1]:4042");
  BOOST_REQUIRE(v6);
  BOOST_CHECK_EQUAL(v6->first, "::1");
  BOOST_CHECK_EQUAL(v6->second, 4042);
}

BOOST_AUTO_TEST_CASE(bad_node_and_peers_are_reported_by_key) {
  BOOST_CHECK_EQUAL(
    problems(std::string{minimal}
             + "node = \"Node_A\"\ninspect = { port = 4040 }\npeers = [\"nohost\", "
               "\"127.0.0.1:0\", \"127.0.0.1:4040\", \"h:1\", \"h:1\", \":80\"]\n"),
    bad_name("engine.node", "Node_A") + "\n"
      + line("engine.peers[0]", "expected HOST:PORT with a port in 1..65535 (another node's "
                                "engine.inspect), got \"nohost\"")
      + "\n"
      + line("engine.peers[1]", "expected HOST:PORT with a port in 1..65535 (another node's "
                                "engine.inspect), got \"127.0.0.1:0\"")
      + "\n"
      + line("engine.peers[2]", "\"127.0.0.1:4040\" is this node's own inspector "
                                "(engine.inspect)")
      + "\n" + line("engine.peers[4]", "duplicate peer \"h:1\"") + "\n"
      + line("engine.peers[5]", "expected HOST:PORT with a port in 1..65535 (another node's "
                                "engine.inspect), got \":80\""));
  BOOST_CHECK_EQUAL(problems(std::string{minimal}
                             + "inspect = { enabled = false }\npeers = [\"127.0.0.1:4041\"]\n"),
                    line("engine.peers", "peers reach this node through its inspector: set "
                                         "engine.inspect = { enabled = true } or remove "
                                         "engine.peers"));
}

BOOST_AUTO_TEST_CASE(address_sources) {
  auto hosts = [](const std::string& sources) {
    return "[engine]\nentry = \"e1\"\nhosts = [{name = \"hv1\", uri = \"test:///default\", "
           "address-sources = " + sources + "}]\n";
  };
  BOOST_CHECK_EQUAL(problems(hosts("[]")),
                    line("engine.hosts[0].address-sources",
                         "must not be empty (choose from lease, agent, arp)"));
  BOOST_CHECK_EQUAL(problems(hosts("[\"lease\", \"dhcp\", \"lease\"]")),
                    line("engine.hosts[0].address-sources[1]",
                         "unknown address source \"dhcp\" (known: lease, agent, arp)") + "\n"
                      + line("engine.hosts[0].address-sources[2]",
                             "duplicate address source \"lease\""));
}

// -- several problems at once -------------------------------------------------

BOOST_AUTO_TEST_CASE(all_problems_are_reported_together) {
  auto text = problems("[schduler]\npolicy = 'sharing'\n"
                       "[engine]\npoll-interval = \"2\"\n"
                       "hosts = [{name = \"hv1\", uri = \"test:///default\"}]\n"
                       "proxies = [{name = \"px-1\", host = \"hv2\", memroy-mib = 256},\n"
                       "           {name = \"px-1\", host = \"hv1\"}]\n");
  BOOST_CHECK_EQUAL(text,
                    line("schduler", "unknown section (known sections: engine, stream, "
                                     "scheduler, work-stealing, logger, middleman, "
                                     "opencl, openssl)") + "\n"
                      + line("engine.entry", "required key is missing") + "\n"
                      + line("engine.poll-interval",
                             "expected a duration like 2s or 250ms, got string \"2\"") + "\n"
                      + line("engine.proxies[0].memroy-mib",
                             std::string{"unknown key (known keys: "} + proxy_keys + ")") + "\n"
                      + line("engine.proxies[0].host",
                             "undeclared host \"hv2\" (declared hosts: hv1)") + "\n"
                      + line("engine.proxies[1].name",
                             "duplicate proxy name \"px-1\" (first declared at "
                             "engine.proxies[0])"));
}

// -- validate() on configs built in code --------------------------------------

BOOST_AUTO_TEST_CASE(validate_reports_without_a_file_prefix) {
  engine_config cfg;
  cfg.entry = "e1";
  cfg.hosts.push_back(code_host("hv1"));
  cfg.hosts.push_back(code_host("hv1"));
  cfg.proxies.push_back(code_proxy("px-1", "hv1"));
  cfg.proxies.push_back(code_proxy("px-1", "hv2"));
  cfg.proxies[0].memory_mib = 0;
  auto err = validate(cfg);
  BOOST_REQUIRE(err);
  BOOST_CHECK(err == ec::config_invalid);
  BOOST_CHECK_EQUAL(detail(err),
                    "engine.hosts[1].name: duplicate host name \"hv1\" "
                    "(first declared at engine.hosts[0])\n"
                    "engine.proxies[0].memory-mib: must be between 64 and 1048576, got 0\n"
                    "engine.proxies[1].name: duplicate proxy name \"px-1\" "
                    "(first declared at engine.proxies[0])\n"
                    "engine.proxies[1].host: undeclared host \"hv2\" (declared hosts: hv1)");
}

BOOST_AUTO_TEST_CASE(validate_requires_names_and_hosts) {
  engine_config cfg;
  cfg.config_file = "app.ini";
  auto err = validate(cfg);
  BOOST_CHECK_EQUAL(detail(err), "app.ini: " + detail(check_name("engine.entry", ""))
                                   + "\napp.ini: engine.hosts: at least one host is required");
}

// docs/spec.md 25: what was checked only at connect time is checked at
// load: a key others may read (as the secret file already was), an SSH
// address that is a name, a bridge directory that is not there.
BOOST_AUTO_TEST_CASE(spec_25_keys_addresses_and_dirs_are_checked_at_load) {
  write("loose", "key"); // 0644
  write("keys/known_hosts", "");
  auto ssh = [&](const std::string& extra, const std::string& key = "k",
                 const std::string& address = "10.0.0.1") {
    return "[engine]\nentry = \"e\"\nhosts = [{name = \"hv1\", uri = \"qemu:///system\", "
           "transport = \"ssh\", address = \"" + address + "\", key-file = \"" + key
           + "\", known-hosts = \"keys/known_hosts\"" + extra + "}]\n";
  };
  write_key("k");
  auto ok = load(ssh(""));
  BOOST_CHECK_MESSAGE(ok, (ok ? std::string{} : render(ok.error())));
  auto loose = problems(ssh("", "loose"));
  BOOST_CHECK_MESSAGE(loose.find("engine.hosts[0].key-file: \"" + (dir / "loose").string()
                                 + "\" may be read by others than its owner: chmod 600 it")
                        != std::string::npos, loose);
  auto name = problems(ssh("", "k", "hv1.example.org"));
  BOOST_CHECK_MESSAGE(name.find("engine.hosts[0].address: expected a numeric IP address")
                        != std::string::npos, name);
  auto bridge = problems(ssh(", bridge-dir = \"/nonexistent/bridges\""));
  BOOST_CHECK_MESSAGE(bridge.find("engine.hosts[0].bridge-dir: no such directory") != std::string::npos,
                      bridge);
  auto relative = problems(ssh(", bridge-dir = \"bridges\""));
  BOOST_CHECK_MESSAGE(relative.find("engine.hosts[0].bridge-dir: expected an absolute path")
                        != std::string::npos, relative);
}

// engine.gateway: HAProxy's admin socket and the backends the engine fills,
// read as strictly as the rest; a path that exists must be a socket.
BOOST_AUTO_TEST_CASE(the_gateway_is_read_and_checked) {
  auto cfg = load(std::string{minimal}
                  + "gateway = { socket = \"run/admin.sock\", backends = [ { name = \"egress\" },"
                    " { name = \"egress_eu\", tag = \"eu\" } ], drain-grace = 5s }\n");
  BOOST_REQUIRE_MESSAGE(cfg, why(cfg));
  BOOST_CHECK(cfg->gateway.enabled);
  BOOST_CHECK_EQUAL(cfg->gateway.socket, (dir / "run/admin.sock").string()); // relative to the file
  BOOST_REQUIRE_EQUAL(cfg->gateway.backends.size(), 2u);
  BOOST_CHECK_EQUAL(cfg->gateway.backends[1].tag, "eu");
  BOOST_CHECK(cfg->gateway.drain_grace == 5s);
  BOOST_CHECK(cfg->gateway.call_budget == 2s);
  auto tcp = load(std::string{minimal} + "gateway = { socket = \"127.0.0.1:9999\" }\n");
  BOOST_REQUIRE_MESSAGE(tcp, why(tcp));
  BOOST_CHECK_EQUAL(tcp->gateway.socket, "127.0.0.1:9999");
  BOOST_REQUIRE_EQUAL(tcp->gateway.backends.size(), 1u);
  BOOST_CHECK_EQUAL(tcp->gateway.backends[0].name, "egress");
  auto off = load(std::string{minimal});
  BOOST_REQUIRE(off);
  BOOST_CHECK(!off->gateway.enabled);
}

// engine.stage-dir: relative to the file like every path; it reaches file://
// URLs, so only plain characters; off when absent.
BOOST_AUTO_TEST_CASE(the_stage_dir_is_read_relative_to_the_file_and_checked) {
  auto cfg = load(std::string{minimal} + "stage-dir = \"cache/images\"\n");
  BOOST_REQUIRE_MESSAGE(cfg, why(cfg));
  BOOST_CHECK_EQUAL(cfg->stage_dir, (dir / "cache/images").string());
  auto off = load(std::string{minimal});
  BOOST_REQUIRE(off);
  BOOST_CHECK(off->stage_dir.empty());
  auto spaced = problems(std::string{minimal} + "stage-dir = \"/var/cache/my images\"\n");
  BOOST_CHECK_MESSAGE(spaced.find("engine.stage-dir: expected an absolute path of letters")
                        != std::string::npos, spaced);
  auto coded = engine_config{*off};
  coded.stage_dir = "relative/dir";
  BOOST_CHECK(validate(coded) == ec::config_invalid);
}

BOOST_AUTO_TEST_CASE(groups_load_with_the_keys_of_a_proxy) {
  auto cfg = load("[engine]\nentry = \"e1\"\nhost-grace = 90s\n"
                  "hosts = [{name = \"hv1\", uri = \"test:///default\", network = \"n1\", "
                  "max-proxies = 4, zone = \"a\", memory-reserve-mib = 512},"
                  " {name = \"hv2\", uri = \"test:///default\"}]\n"
                  "proxies = [{name = \"eu-0\", host = \"hv1\"}, {name = \"eu-x\", host = \"hv1\"}]\n"
                  "groups = [{name = \"eu\", count = 3, hosts = [\"hv1\", \"hv2\"], "
                  "vcpus = 2, memory-mib = 256, tags = [\"eu\"], max-surge = 2}]\n");
  BOOST_REQUIRE_MESSAGE(cfg, why(cfg));
  BOOST_CHECK(cfg->host_grace == 90s);
  BOOST_CHECK_EQUAL(cfg->hosts[0].max_proxies, 4u);
  BOOST_CHECK_EQUAL(cfg->hosts[0].zone, "a");
  BOOST_CHECK_EQUAL(cfg->hosts[0].memory_reserve_mib, 512u);
  BOOST_CHECK_EQUAL(cfg->hosts[1].memory_reserve_mib, 1024u);
  BOOST_REQUIRE_EQUAL(cfg->groups.size(), 1u);
  auto& g = cfg->groups[0];
  BOOST_CHECK_EQUAL(g.count, 3u);
  BOOST_CHECK(g.hosts == (std::vector<std::string>{"hv1", "hv2"}));
  BOOST_CHECK_EQUAL(g.member.vcpus, 2u);
  BOOST_CHECK_EQUAL(g.member.memory_mib, 256u);
  BOOST_CHECK_EQUAL(g.member.network, ""); // each member's host's
  BOOST_CHECK_EQUAL(g.max_surge, 2u);
  // A count no host can hold is accepted: status says who is left out.
  auto big = load(std::string{minimal} + "groups = [{name = \"g\", count = 100000, "
                                         "hosts = [\"hv1\"], memory-mib = 1048576}]\n");
  BOOST_REQUIRE_MESSAGE(big, why(big));
}

BOOST_AUTO_TEST_CASE(bad_groups_are_reported_by_key) {
  auto text = problems(std::string{minimal}
                       + "groups = [{name = \"eu\", hosts = [\"hv1\", \"hv9\", \"hv1\"], "
                         "colour = 1, max-surge = 0},"
                         " {name = \"eu\", count = 100001, hosts = []},"
                         " {name = \"" + std::string(60, 'a') + "\", count = 1000, hosts = [\"hv1\"]},"
                         " {name = \"k\", count = 1, hosts = [\"hv1\"], image = \"nope\"}]\n");
  BOOST_TEST_MESSAGE(text);
  for (auto key : {"engine.groups[0].count: required key is missing",
                   "engine.groups[0].hosts[1]: undeclared host \"hv9\" (declared hosts: hv1)",
                   "engine.groups[0].hosts[2]: host \"hv1\" is named twice",
                   "engine.groups[0].colour: unknown key",
                   "engine.groups[0].max-surge: ",
                   "engine.groups[1].name: duplicate group name \"eu\"",
                   "engine.groups[1].count: ",
                   "engine.groups[1].hosts: must name at least one host",
                   "engine.groups[2].name: ",
                   "engine.groups[3].image: undeclared image \"nope\""})
    BOOST_CHECK_MESSAGE(text.find(key) != std::string::npos, key);
}

BOOST_AUTO_TEST_CASE(a_member_named_like_a_hand_declared_proxy_is_refused_naming_both) {
  auto text = problems(std::string{minimal}
                       + "proxies = [{name = \"eu-2\", host = \"hv1\"}, {name = \"eu-7\", "
                         "host = \"hv1\"}, {name = \"eu-02\", host = \"hv1\"}]\n"
                         "groups = [{name = \"eu\", count = 3, hosts = [\"hv1\"]}]\n");
  BOOST_CHECK_EQUAL(text, line("engine.groups[0].count",
                               "member \"eu-2\" of group \"eu\" has the name of "
                               "engine.proxies[0] (rename that proxy, or the group)"));
}

BOOST_AUTO_TEST_CASE(a_bad_gateway_is_refused_naming_the_key) {
  auto text = problems(std::string{minimal} + "gateway = { socket = \"10.0.0.1:9999\", "
                                              "backends = [ { name = \"a b\" }, { name = \"x\", "
                                              "tag = 7 } ], drain-grace = 0s, colour = 1 }\n");
  BOOST_TEST_MESSAGE(text);
  for (auto key : {"engine.gateway.socket: \"10.0.0.1:9999\" is not on a loopback address",
                   "engine.gateway.backends[0].name: expected an HAProxy backend name",
                   "engine.gateway.backends[1].tag: expected a string, got integer 7",
                   "engine.gateway.drain-grace: must be longer than 0s",
                   "engine.gateway.colour: unknown key"})
    BOOST_CHECK_MESSAGE(text.find(key) != std::string::npos, key);
  BOOST_CHECK(problems(std::string{minimal} + "gateway = { backends = [] }\n")
                .find("engine.gateway.socket: required key is missing")
              != std::string::npos);
  BOOST_CHECK(problems(std::string{minimal} + "gateway = \"haproxy\"\n")
                .find("engine.gateway: expected a dict") != std::string::npos);
}

// A file where the socket should be: exit 2 naming it, before anything
// starts (a path that does not exist yet is fine: HAProxy may start later).
BOOST_AUTO_TEST_CASE(a_gateway_socket_that_is_not_a_socket_is_refused) {
  auto file = write("haproxy.cfg", "global\n");
  auto text = problems(std::string{minimal} + "gateway = { socket = \"" + file + "\" }\n");
  BOOST_CHECK_MESSAGE(text.find(line("engine.gateway.socket", "\"" + file + "\" is not a socket"))
                        != std::string::npos,
                      text);
  auto dir_text = problems(std::string{minimal} + "gateway = { socket = \"" + dir.string()
                           + "\" }\n");
  BOOST_CHECK(dir_text.find("is not a socket") != std::string::npos);
}

// -- engine.cluster -------------------------------------------------------------

BOOST_AUTO_TEST_CASE(a_cluster_loads_with_its_defaults_and_its_files) {
  auto pw = write("etcd.password", "s3cret\n");
  fs::permissions(pw, fs::perms::owner_read | fs::perms::owner_write);
  write("ca.pem", "ca");
  auto cfg = load(std::string{minimal}
                  + "node = \"a\"\n"
                    "cluster = {etcd = [\"http://127.0.0.1:2379\", \"https://10.0.0.2:2379/\"], "
                    "user = \"engine\", password-file = \"etcd.password\", ca-file = \"ca.pem\"}\n");
  BOOST_REQUIRE_MESSAGE(cfg, why(cfg));
  auto& c = cfg->cluster;
  BOOST_CHECK(c.enabled);
  BOOST_CHECK_EQUAL(c.etcd.size(), 2u);
  BOOST_CHECK(c.lease_ttl == 10s);
  BOOST_CHECK(c.request_timeout == 2s);
  BOOST_CHECK(c.unreachable_release == 60s);
  BOOST_CHECK_EQUAL(c.prefix, "/egress-engine");
  BOOST_CHECK_EQUAL(c.password, "s3cret");
  BOOST_CHECK_EQUAL(c.ca_file, (dir / "ca.pem").string());
}

BOOST_AUTO_TEST_CASE(a_config_without_a_cluster_has_none) {
  auto cfg = load(minimal);
  BOOST_REQUIRE_MESSAGE(cfg, why(cfg));
  BOOST_CHECK(!cfg->cluster.enabled);
}

BOOST_AUTO_TEST_CASE(a_bad_cluster_is_refused_with_every_reason) {
  auto text = problems(std::string{minimal}
                       + "cluster = {etcd = [\"127.0.0.1:2379\"], lease-ttl = 1s, "
                         "request-timeout = 2s, prefix = \"egress/\", user = \"engine\", "
                         "colour = \"red\"}\n");
  for (auto expected :
       {line("engine.cluster.etcd[0]",
             "expected http://HOST:PORT or https://HOST:PORT, got \"127.0.0.1:2379\""),
        line("engine.node", "required with engine.cluster: every node of a cluster needs a name "
                            "of its own (it owns hosts under it)"),
        line("engine.cluster.lease-ttl", "must be between 3s and 10min, got 1s"),
        line("engine.cluster.request-timeout", "must be at most a third of lease-ttl (1s), got 2s"),
        line("engine.cluster.password-file", "required with user (etcd's password for \"engine\")")})
    BOOST_CHECK_MESSAGE(text.find(expected) != std::string::npos, expected << "\nin:\n" << text);
  BOOST_CHECK(text.find("engine.cluster.prefix") != std::string::npos);
  BOOST_CHECK(text.find("colour") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_cluster_with_groups_is_refused) {
  auto text = problems(std::string{minimal}
                       + "node = \"a\"\ncluster = {etcd = [\"http://127.0.0.1:2379\"]}\n"
                         "groups = [{name = \"eu\", count = 1, hosts = [\"hv1\"]}]\n");
  BOOST_CHECK(text.find("engine.groups: not supported with engine.cluster yet") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
