// The test bed itself: real libvirtd and sshd start, answer, pause, crash,
// restart; a namespace can be partitioned and healed; and once the fixtures
// are gone nothing of them is left on the machine.
#define BOOST_TEST_MODULE testbed
#include <boost/test/unit_test.hpp>

#include <filesystem>
#include <thread>
#include <unistd.h>

#include "testbed/testbed.hpp"

namespace tb = egress::testbed;
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

namespace {

struct root_only {
  root_only() { tb::require_root_or_skip(); }
};

/// What the test bed must never change: the machine's own libvirt and sshd
/// directories. (Namespaces, links and rules are checked by PID in
/// expect_nothing_left: other suites may run in parallel.)
std::string host_state() {
  std::string out;
  for (auto dir : {"/etc/libvirt", "/run/libvirt", "/var/lib/libvirt", "/var/log/libvirt",
                   "/var/cache/libvirt", "/run/sshd"}) {
    out += std::string(dir) + (fs::exists(dir) ? ":\n" : ": absent\n");
    std::error_code ec;
    for (auto& e : fs::recursive_directory_iterator(dir, ec)) {
      auto t = e.last_write_time(ec).time_since_epoch().count();
      out += "  " + e.path().string() + " " + std::to_string(t) + "\n";
    }
  }
  return out;
}

/// Leftovers that carry this process's PID in their names or tags.
void expect_nothing_left(const std::vector<pid_t>& pids) {
  auto me = std::to_string(::getpid());
  BOOST_TEST(tb::run_checked({"ip", "netns", "list"}).find("egt-" + me + "-") == std::string::npos);
  BOOST_TEST(tb::run_checked({"ip", "-o", "link", "show"}).find("egt" + me) == std::string::npos);
  BOOST_TEST(tb::run_checked({"iptables", "-w", "-S"}).find(tb::netns::rule_tag())
             == std::string::npos);
  for (auto& e : fs::directory_iterator("/tmp"))
    BOOST_TEST(e.path().filename().string().rfind("egress-testbed-" + me + "-", 0)
               == std::string::npos, e.path());
  for (pid_t pid : pids)
    BOOST_TEST(!fs::exists("/proc/" + std::to_string(pid)), "pid " << pid << " still exists");
  BOOST_TEST(tb::read_file("/proc/self/mountinfo").find("egress-testbed-") == std::string::npos);
}

template <class Pred>
bool wait_for(Pred pred, std::chrono::milliseconds max = 5s) {
  for (auto deadline = clock_type::now() + max; !pred();) {
    if (clock_type::now() > deadline)
      return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

bool ssh_ok(const tb::sshd& s, std::string key = "", std::string known_hosts = "",
            int connect_timeout = 5) {
  return tb::run(s.ssh_argv("true", key, known_hosts, connect_timeout), 30s).ok();
}

} // namespace

BOOST_TEST_GLOBAL_FIXTURE(root_only);

BOOST_AUTO_TEST_CASE(process_stop_signal_and_run) {
  pid_t pid;
  {
    tb::temp_dir dir("selftest");
    tb::process p({{"sh", "-c", "echo $TB_GREETING; exec sleep 30"}, {"TB_GREETING=hello"},
                   dir / "log"});
    pid = p.pid();
    BOOST_TEST(p.alive());
    BOOST_TEST(wait_for([&] { return tb::read_file(dir / "log") == "hello\n"; }));
    p.signal(SIGSTOP);
    BOOST_TEST(p.alive());  // stopped is alive
    int status = p.stop(2s);  // SIGTERM reaches a stopped process (SIGCONT)
    BOOST_TEST(WIFSIGNALED(status));
    BOOST_TEST(WTERMSIG(status) == SIGTERM);
    BOOST_TEST(!p.alive());

    tb::process stubborn({{"sh", "-c", "trap '' TERM; echo armed; while :; do sleep 0.1; done"},
                          {}, dir / "stubborn"});
    BOOST_TEST(wait_for([&] { return tb::read_file(dir / "stubborn") == "armed\n"; }));
    auto t0 = clock_type::now();
    BOOST_TEST(WTERMSIG(stubborn.stop(300ms)) == SIGKILL);
    BOOST_TEST(seconds_since(t0) < 2.0);
  }
  BOOST_TEST(!fs::exists("/proc/" + std::to_string(pid)));

  auto r = tb::run({"sh", "-c", "echo out; echo err >&2; exit 3"});
  BOOST_TEST(r.exit_code == 3);
  BOOST_TEST(r.output == "out\nerr\n");
  auto t0 = clock_type::now();
  auto slow = tb::run({"sleep", "10"}, 200ms);
  BOOST_TEST(slow.timed_out);
  BOOST_TEST(seconds_since(t0) < 2.0);
  BOOST_CHECK_THROW(tb::run_checked({"false"}), std::runtime_error);
}

BOOST_AUTO_TEST_CASE(libvirtd_start_pool_pause_crash_restart) {
  auto before = host_state();
  std::vector<pid_t> pids;
  {
    tb::libvirtd lv;
    auto t0 = clock_type::now();
    lv.start();
    BOOST_TEST_MESSAGE("libvirtd first start (with QEMU probe): " << seconds_since(t0) << " s");
    pids.push_back(lv.pid());
    // The PID we hold is libvirtd itself, in a mount namespace of its own.
    BOOST_TEST(fs::read_symlink("/proc/" + std::to_string(lv.pid()) + "/exe")
               == "/usr/sbin/libvirtd");
    BOOST_TEST(fs::read_symlink("/proc/self/ns/mnt")
               != fs::read_symlink("/proc/" + std::to_string(lv.pid()) + "/ns/mnt"));
    BOOST_TEST(lv.uri() == "qemu+unix:///system?socket=" + lv.socket_path());

    auto list = lv.virsh({"list", "--all"});
    BOOST_TEST(list.ok(), list.output);
    BOOST_TEST(tb::run({"virsh", "-c", lv.uri("test"), "list", "--all"}).ok());

    auto target = lv.define_dir_pool("tbpool");
    BOOST_TEST(fs::is_directory(target));
    BOOST_TEST(lv.virsh({"pool-list", "--name"}).output.find("tbpool") != std::string::npos);

    lv.pause();
    auto hung = tb::run({"timeout", "2", "virsh", "-c", lv.uri(), "list"}, 10s);
    BOOST_TEST(hung.exit_code == 124, "virsh on a stopped daemon: " << hung.output);
    lv.resume();
    BOOST_TEST(lv.virsh({"list"}, 10s).ok());

    auto old_pid = lv.pid();
    lv.crash();
    BOOST_TEST(!lv.alive());
    BOOST_TEST(!fs::exists("/proc/" + std::to_string(old_pid)));
    BOOST_TEST(!lv.virsh({"list"}, 10s).ok());
    t0 = clock_type::now();
    lv.restart();
    BOOST_TEST_MESSAGE("libvirtd restart (cached caps): " << seconds_since(t0) << " s");
    pids.push_back(lv.pid());
    BOOST_TEST(lv.pid() != old_pid);
    auto pools = lv.virsh({"pool-list", "--name"});  // same dirs: the pool survived
    BOOST_TEST(pools.output.find("tbpool") != std::string::npos, pools.output);
    BOOST_TEST(lv.log_text().find("libvirt version") != std::string::npos);

    lv.stop();
    BOOST_TEST(!lv.alive());
    BOOST_TEST(!lv.virsh({"list"}, 10s).ok());
  }
  BOOST_TEST(host_state() == before);
  expect_nothing_left(pids);
}

// A restarted libvirtd sees the files its surviving children (dnsmasq, QEMU)
// go on writing under /run and /var: every start enters the one mount
// namespace the test bed holds for it. Before, each start mounted its
// overlays anew over the same upper directories, and the new daemon read a
// stale copy of a file rewritten through the first mount (the VM soak,
// --bed vms --seed 5: a restarted libvirtd never saw its dnsmasq's new
// leases, and proxies booted after it never got an address).
BOOST_AUTO_TEST_CASE(a_restarted_libvirtd_sees_what_its_survivors_write) {
  tb::libvirtd_options o;
  o.warm_qemu_caps = false;
  tb::libvirtd lv{o};
  lv.start();
  auto read_in = [](pid_t pid) {
    auto r = tb::run({"nsenter", "--target", std::to_string(pid), "--mount", "cat",
                      "/var/lib/libvirt/survivor"});
    return r.ok() ? std::atoi(r.output.c_str()) : -1;
  };
  // As libvirt's leases helper rewrites its status file: a new file renamed
  // over the old one, from a process in the daemon's namespace.
  tb::temp_dir logs{"survivor"};
  tb::process writer{{{"nsenter", "--target", std::to_string(lv.pid()), "--mount", "sh", "-c",
                       "i=0; while :; do i=$((i+1)); echo $i > /var/lib/libvirt/survivor.new;"
                       " mv /var/lib/libvirt/survivor.new /var/lib/libvirt/survivor;"
                       " sleep 0.05; done"},
                      {},
                      logs / "writer.log"}};
  auto until = [](auto pred, std::chrono::milliseconds max) {
    for (auto end = clock_type::now() + max; clock_type::now() < end;
         std::this_thread::sleep_for(50ms))
      if (pred())
        return true;
    return pred();
  };
  BOOST_REQUIRE(until([&] { return read_in(lv.pid()) > 0; }, 10s));
  lv.crash();
  lv.restart();
  auto first = read_in(lv.pid());
  BOOST_REQUIRE_GT(first, 0);
  BOOST_TEST(until([&] { return read_in(lv.pid()) > first + 2; }, 5s),
             "the restarted daemon still reads " << read_in(lv.pid()) << " (first " << first
                                                << ")");
  writer.stop();

  // adduser (a package's postinst) renames a new /etc/passwd over the old
  // one, which takes a file bound over it out of every other namespace: the
  // test bed binds its own passwd (with libvirt-qemu, where the host has
  // none) at each start, not once. Same bytes, same mode: nothing changes.
  BOOST_REQUIRE(tb::run({"cp", "-p", "/etc/passwd", "/etc/passwd.egress-testbed"}).ok());
  BOOST_REQUIRE(tb::run({"mv", "/etc/passwd.egress-testbed", "/etc/passwd"}).ok());
  lv.crash();
  lv.restart();
  BOOST_TEST(lv.virsh({"list"}, 10s).ok(), lv.log_text());
  lv.stop();
}

BOOST_AUTO_TEST_CASE(sshd_on_loopback) {
  auto before = host_state();
  std::vector<pid_t> pids;
  {
    tb::sshd s;
    auto t0 = clock_type::now();
    s.start();
    BOOST_TEST_MESSAGE("sshd start: " << seconds_since(t0) << " s");
    pids.push_back(s.pid());
    BOOST_TEST(fs::read_symlink("/proc/" + std::to_string(s.pid()) + "/exe") == "/usr/sbin/sshd");
    BOOST_TEST(s.address() == "127.0.0.1");
    BOOST_TEST(tb::read_file(s.known_hosts()).rfind("[127.0.0.1]:" + std::to_string(s.port())
                                                    + " ssh-ed25519 AAAA", 0) == 0);

    auto argv = s.ssh_argv("true");
    auto r = tb::run(argv);
    BOOST_TEST(r.ok(), r.output << "\n" << s.log_text());
    BOOST_TEST(ssh_ok(s, s.rsa_key()));  // OpenSSH may use it (rsa-sha2); libssh2 1.10 may not
    BOOST_TEST(!ssh_ok(s, s.unauthorized_key()));
    BOOST_TEST(!ssh_ok(s, "", s.wrong_known_hosts()));
    BOOST_TEST(!ssh_ok(s, "", s.empty_known_hosts()));

    s.pause();
    BOOST_TEST(!tb::run(s.ssh_argv("true"), 2s).ok());
    s.resume();
    BOOST_TEST(ssh_ok(s));

    s.crash();
    BOOST_TEST(!ssh_ok(s));
    s.start();  // same port, keys and known_hosts
    pids.push_back(s.pid());
    BOOST_TEST(ssh_ok(s));
  }
  BOOST_TEST(host_state() == before);
  expect_nothing_left(pids);
}

BOOST_AUTO_TEST_CASE(sshd_in_netns_partition_and_heal) {
  auto before = host_state();
  std::vector<pid_t> pids;
  std::string ns_name, host_if;
  {
    tb::netns net;
    ns_name = net.name();
    host_if = net.host_if();
    BOOST_TEST_MESSAGE("netns " << net.name() << ": " << net.host_addr() << " <-> "
                                << net.peer_addr());
    BOOST_TEST(tb::run_checked({"ip", "netns", "list"}).find(net.name()) != std::string::npos);
    BOOST_TEST(net.exec({"ip", "-o", "addr", "show", "dev", net.peer_if()}).output.find(
                 net.peer_addr() + "/30") != std::string::npos);

    tb::sshd s(tb::sshd_options::in(net));
    auto t0 = clock_type::now();
    s.start();
    BOOST_TEST_MESSAGE("sshd start in netns: " << seconds_since(t0) << " s");
    pids.push_back(s.pid());
    BOOST_TEST(fs::read_symlink("/proc/" + std::to_string(s.pid()) + "/ns/net")
               != fs::read_symlink("/proc/self/ns/net"));
    BOOST_TEST(ssh_ok(s), s.log_text());

    net.partition();
    BOOST_TEST(tb::run_checked({"ip", "netns", "exec", net.name(), "iptables", "-S"})
                 .find(tb::netns::rule_tag()) != std::string::npos);
    t0 = clock_type::now();
    BOOST_TEST(!ssh_ok(s, "", "", 2));
    BOOST_TEST(seconds_since(t0) >= 1.5);  // timed out: dropped, not refused
    net.heal();
    BOOST_TEST(ssh_ok(s));

    net.link_down();
    BOOST_TEST(!ssh_ok(s, "", "", 2));
    net.link_up();
    BOOST_TEST(ssh_ok(s));

    net.partition();  // left partitioned on purpose: the destructor heals
  }
  BOOST_TEST(tb::run_checked({"ip", "netns", "list"}).find(ns_name) == std::string::npos);
  BOOST_TEST(!fs::exists("/sys/class/net/" + host_if));
  BOOST_TEST(host_state() == before);
  expect_nothing_left(pids);
}

BOOST_AUTO_TEST_CASE(libvirtd_inside_netns) {
  std::vector<pid_t> pids;
  {
    tb::netns net;
    tb::libvirtd lv({net.name()});
    lv.start();
    pids.push_back(lv.pid());
    BOOST_TEST(fs::read_symlink("/proc/" + std::to_string(lv.pid()) + "/ns/net")
               != fs::read_symlink("/proc/self/ns/net"));
    BOOST_TEST(lv.virsh({"list", "--all"}).ok());
  }
  expect_nothing_left(pids);
}

// A libvirt host as the engine sees it: sshd in a namespace, the private
// libvirtd's socket at the default /run/libvirt/libvirt-sock for sessions,
// and libvirt's own libssh2 transport (virt-ssh-helper on the far side).
BOOST_AUTO_TEST_CASE(libvirt_over_libssh2_into_netns) {
  std::vector<pid_t> pids;
  {
    tb::netns net;
    tb::libvirtd lv;
    lv.start();
    auto opts = tb::sshd_options::in(net);
    opts.libvirt_socket_dir = lv.socket_dir();
    tb::sshd s(opts);
    s.start();
    pids = {s.pid(), lv.pid()};
    auto uri = [&](const std::string& key, const std::string& known_hosts) {
      return "qemu+libssh2://root@" + s.address() + ":" + std::to_string(s.port())
             + "/system?keyfile=" + key + "&known_hosts=" + known_hosts + "&sshauth=privkey";
    };
    auto virsh = [&](const std::string& u) {
      return tb::run({"virsh", "-c", u, "uri"}, 20s);
    };
    auto good = virsh(uri(s.client_key(), s.known_hosts()));
    BOOST_TEST(good.ok(), good.output);
    BOOST_TEST(good.output.find("qemu+libssh2://") == 0, good.output);
    auto stream = tb::run(s.ssh_argv("test -S /run/libvirt/libvirt-sock"));
    BOOST_TEST(stream.ok(), stream.output);
    auto wrong = virsh(uri(s.client_key(), s.wrong_known_hosts()));
    BOOST_TEST(!wrong.ok());
    BOOST_TEST(wrong.output.find("VERIFICATION FAILED") != std::string::npos, wrong.output);
    BOOST_TEST(!virsh(uri(s.client_key(), s.empty_known_hosts())).ok());
    BOOST_TEST(!virsh(uri(s.rsa_key(), s.known_hosts())).ok());  // libssh2 1.10 signs ssh-rsa
    BOOST_TEST(!virsh(uri(s.unauthorized_key(), s.known_hosts())).ok());

    net.partition();  // the engine's view of a vanished host
    auto t0 = clock_type::now();
    auto cut = tb::run({"virsh", "-c", uri(s.client_key(), s.known_hosts()), "uri"}, 3s);
    BOOST_TEST(!cut.ok());
    BOOST_TEST(seconds_since(t0) >= 2.5);  // hangs: dropped, not refused
  }
  expect_nothing_left(pids);
}
