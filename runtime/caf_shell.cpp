// caf-shell: inspect a running engine through CAF's middleman.
//
//   caf-shell [HOST:PORT] [-c COMMAND]... [--json] [--timeout=MS]
//             [--secret-file=FILE] [--tls-cert=FILE --tls-key=FILE --tls-ca=FILE]
//
// Without -c it is a line REPL (libedit: history, completion of commands,
// kinds and the names it has seen). Commands:
//   ls [links|images|proxies|health|gateway|calls|nodes|cluster]  actors with state, start time, liveness
//                                      (every node's: see engine.peers)
//   show <kind> <name>                 one actor with every detail
//   status                             the fleet's status (use --json for all of it)
//   watch [filter]                     live events until Ctrl-C
//   kill-link <host>                   declare a host's link dead now
//   reconcile <proxy>                  read a proxy's VM back now
//   drain <proxy>, undrain <proxy>     keep a proxy out of the rotation / let it back
//   reload                             the engine re-reads its config file, applies the change
//   help, quit
// Exit codes: 0 ok, 1 a command failed (unknown name, engine unreachable),
// 2 usage.
#include <algorithm>
#include <chrono>
#include <cctype>
#include <iterator>
#include <fstream>
#include <cstdio>
#include <cstring>
#include <csignal>
#include <future>
#include <thread>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include <editline/readline.h>
#include <nlohmann/json.hpp>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>
#include <caf/openssl/manager.hpp>
#include <caf/openssl/remote_actor.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/parts/admission.hpp"
#include "messages/actors.hpp"
#include "messages/error.hpp"
#include "providers/crypto/identity.hpp"
#include "providers/crypto/secret.hpp"
#include "runtime/engine.hpp"

using namespace egress;
using json = nlohmann::json;

namespace {

volatile sig_atomic_t interrupted = 0;

void on_interrupt(int) {
  interrupted = 1;
}

constexpr int exit_ok = 0;
constexpr int exit_failed = 1;
constexpr int exit_usage = 2;

const char* usage_text =
  "usage: caf-shell [HOST:PORT] [-c COMMAND]... [--json] [--timeout=MS]\n"
  "                 [--secret-file=FILE] [--identity=DIR]\n"
  "                 [--tls-cert=FILE --tls-key=FILE --tls-ca=FILE]\n"
  "\n"
  "Attaches to a running engine's inspector (caf-run logs \"inspector\n"
  "listening: caf-shell HOST:PORT\"; default 127.0.0.1:4040). The inspector\n"
  "speaks TLS only: the shell presents the identity caf-run generated on this\n"
  "machine, which only its user (and root) may read.\n"
  "\n"
  "Commands:\n"
  "  ls [links|hosts|images|proxies|health|gateway|calls|nodes|cluster]\n"
  "                                    actors with state, start time, liveness, on\n"
  "                                    every node this one reaches (engine.peers)\n"
  "  show <kind> <name>                one actor with every detail\n"
  "  status                            this node's fleet (--json: all of it)\n"
  "  watch [filter]                    live events (links, images, proxies, rotation,\n"
  "                                    gateway) whose line contains filter (watch\n"
  "                                    rotation: every join and leave with its\n"
  "                                    generation); Ctrl-C ends it\n"
  "  kill-link <host>                  declare a host's link dead now (it redials)\n"
  "  reconcile <proxy>                 read the proxy's VM back now and act on it\n"
  "  drain <proxy>, undrain <proxy>    keep a proxy out of the rotation / let it back\n"
  "                                    (these three go to the node that owns the name)\n"
  "  drain-host <host>                 cordon the host and hand each of its group\n"
  "                                    members over to another host, the replacement\n"
  "                                    in the rotation before the original goes\n"
  "  undrain-host <host>               lift the cordon (nobody is moved back)\n"
  "  reload                            this node re-reads its config file and applies\n"
  "                                    only the change (a bad file changes nothing)\n"
  "  names [kind]                      the names only, one per line (for completion)\n"
  "  help, quit\n"
  "\n"
  "  -c COMMAND     run COMMAND and exit (repeatable); no REPL\n"
  "  --json         print results as JSON (for scripts)\n"
  "  --timeout=MS   how long one answer may take (default 5000)\n"
  "  --for=SECONDS  end a watch after this long (default: at Ctrl-C)\n"
  "  --secret-file=FILE  the node's shared secret (engine.inspect.secret-file)\n"
  "  --identity=DIR the engine's generated identity (engine.inspect.identity-dir;\n"
  "                 default: $EGRESS_INSPECT_IDENTITY, then the engine's default\n"
  "                 for this user, then /var/lib/egress/inspect)\n"
  "  --tls-cert=FILE, --tls-key=FILE, --tls-ca=FILE\n"
  "                 a node with engine.inspect.tls: this shell's certificate and\n"
  "                 key, and the CA that signed the node's\n";

std::vector<std::string> words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string w; in >> w;)
    out.push_back(w);
  return out;
}

/// The kinds `ls` lists: the fleet's actors, their calls and the nodes.
constexpr actor_kind listed_kinds[] = {actor_kind::link,    actor_kind::image, actor_kind::proxy,
                                       actor_kind::health,  actor_kind::gateway,
                                       actor_kind::call,    actor_kind::node,
                                       actor_kind::cluster};

/// The kind a word names ("proxies" and "proxy" both name proxy); "all" is
/// every kind (empty).
std::optional<std::string> kind_of(const std::string& w) {
  if (w == "all")
    return std::string{};
  // A host is shown by its link, with its cordon and drain.
  if (w == "hosts" || w == "host")
    return std::string{to_string(actor_kind::link)};
  auto k = actor_kind_from(w);
  if (!k || std::find(std::begin(listed_kinds), std::end(listed_kinds), *k)
              == std::end(listed_kinds))
    return std::nullopt;
  return std::string{to_string(*k)};
}

json to_json(const actor_row& e) {
  json details = json::object();
  for (auto& d : e.details)
    if (auto at = d.find(": "); at != std::string::npos)
      details[d.substr(0, at)] = d.substr(at + 2);
  return {{"node", e.node}, {"kind", to_string(e.kind)}, {"name", e.name}, {"state", e.state},
          {"started_at", e.started_at}, {"liveness", e.liveness}, {"details", details}};
}

json to_json(const link_status& l) {
  return {{"host", l.host}, {"state", to_string(l.state)}, {"reason", l.reason},
          {"in_flight", l.in_flight}, {"queued", l.queued}, {"limit", l.limit},
          {"connections", l.connections}, {"dials", l.dials}, {"deaths", l.deaths}, {"overruns", l.overruns},
          {"abandoned_calls", l.abandoned_calls}, {"events", l.events},
          {"bulk_reads", l.bulk_reads}, {"lease_reads", l.lease_reads},
          {"leases", to_string(l.leases)}};
}

json to_json(const fleet_status& st) {
  json out = {{"node", st.node}, {"entry", st.entry}, {"rotation", st.rotation},
              {"reloads", st.reloads},
              {"last_reload", st.last_reload}};
  out["links"] = json::array();
  for (auto& l : st.links)
    out["links"].push_back(to_json(l));
  out["images"] = json::array();
  for (auto& i : st.images)
    out["images"].push_back({{"image", i.image}, {"host", i.host},
                             {"state", to_string(i.state)}, {"volume", i.volume},
                             {"bytes", i.bytes}, {"total", i.total},
                             {"rate_bps", i.rate_bps}, {"eta_s", i.eta_s},
                             {"last_error", i.last_error}});
  out["proxies"] = json::array();
  for (auto& p : st.proxies)
    out["proxies"].push_back({{"name", p.name}, {"host", p.host},
                              {"phase", to_string(p.phase)}, {"address", p.address},
                              {"uid", p.uid}, {"adopted", p.adopted},
                              {"in_rotation", p.in_rotation}, {"probes_ok", p.probes_ok},
                              {"probes_failed", p.probes_failed},
                              {"last_probe", p.last_probe}, {"last_error", p.last_error}});
  out["groups"] = json::array();
  for (auto& g : st.groups)
    out["groups"].push_back({{"name", g.name}, {"count", g.count}, {"placed", g.placed},
                             {"replacing", g.replacing}, {"held", g.held},
                             {"per_host", g.per_host}, {"waiting", g.waiting}});
  out["replacements"] = st.replacements;
  out["drains"] = json::array();
  for (auto& d : st.drains)
    out["drains"].push_back({{"host", d.host}, {"members", d.members}, {"moving", d.moving},
                             {"moved", d.moved}, {"waiting", d.waiting}});
  return out;
}

std::string pad(std::string s, size_t n) {
  if (s.size() < n)
    s.append(n - s.size(), ' ');
  return s;
}

class shell {
public:
  shell(caf::actor_system& sys, std::string host, uint16_t port, bool as_json,
        std::chrono::milliseconds timeout)
    : sys_(sys), host_(std::move(host)), port_(port), json_(as_json), timeout_(timeout) {}

  bool connect(bool quiet = false) {
    // remote_actor has no timeout of its own: a port that accepts but never
    // speaks BASP would hold the shell forever. The connect runs aside; past
    // the timeout the shell gives up, and exits at once, since the stuck
    // connect would also hold the actor system's destructor.
    auto pending = std::async(std::launch::async, [this] {
      return caf::openssl::remote_actor<node_actor>(sys_, host_, port_);
    });
    if (pending.wait_for(timeout_) != std::future_status::ready) {
      std::cerr << "caf-shell: no answer from " << where() << " within "
                << std::chrono::duration_cast<std::chrono::milliseconds>(timeout_).count()
                << " ms (is a caf-run inspector listening there?)\n";
      std::fflush(nullptr);
      std::_Exit(exit_failed);
    }
    auto h = pending.get();
    if (!h) {
      if (!quiet)
        std::cerr << "caf-shell: cannot reach the engine at " << where() << ": "
                  << sys_.render(h.error()) << "\n";
      return false;
    }
    // The handshake (actors/parts/admission.hpp): the node proves the secret
    // first, so this shell proves nothing to something that does not know
    // it; then this shell proves it and gets the token every later request
    // carries. Without a secret on either side both prove the empty one.
    caf::error refused;
    {
      caf::scoped_actor self{sys_};
      auto mine = crypto::random_hex(16);
      std::string theirs, their_proof;
      self->request(*h, timeout_, atom::hello_v, mine)
        .receive(
          [&](std::string& n, std::string& p) {
            theirs = std::move(n);
            their_proof = std::move(p);
          },
          [&](caf::error& err) { refused = std::move(err); });
      if (!refused
          && !crypto::equal_constant_time(their_proof,
                                          admission::proof(secret_, "node", mine, theirs)))
        refused = make_error(ec::access_denied,
                             secret_.empty()
                               ? "the node requires the shared secret: --secret-file=FILE"
                               : "the node does not prove this secret (is --secret-file the "
                                 "node's engine.inspect.secret-file?)");
      if (!refused)
        self->request(*h, timeout_, atom::hello_v, theirs, mine,
                      admission::proof(secret_, "party", theirs, mine))
          .receive(
            [&](std::string& name, std::string& token) {
              node_ = std::move(name);
              token_ = std::move(token);
            },
            [&](caf::error& err) { refused = std::move(err); });
    }
    if (refused) {
      std::cerr << "caf-shell: the engine at " << where() << " refused this shell: "
                << render(refused) << "\n";
      std::fflush(nullptr);
      std::_Exit(exit_failed); // retrying will not change the secret
    }
    inspector_ = *h;
    return true;
  }

  /// Prove this secret in the hello.
  std::string secret_;
  std::string node_;  // the attached node's name (hello)
  std::string token_; // what every request carries (hello)

  std::string where() const { return host_ + ":" + std::to_string(port_); }
  const std::string& node() const { return node_; }
  const std::set<std::string>& names() const { return names_; }

  /// Runs one command line; false when it failed (the reason is printed).
  bool run(const std::string& line) {
    using command = bool (shell::*)(const std::vector<std::string>&);
    static const std::map<std::string, command> commands{
      {"help", &shell::help_command},         {"names", &shell::names_command},
      {"ls", &shell::ls_command},             {"show", &shell::show_command},
      {"status", &shell::status_command},     {"watch", &shell::watch_command},
      {"drain", &shell::drain_command},       {"undrain", &shell::drain_command},
      {"reconcile", &shell::reconcile_command}, {"reload", &shell::reload_command},
      {"kill-link", &shell::kill_link_command},
      {"drain-host", &shell::cordon_command}, {"undrain-host", &shell::cordon_command},
    };
    auto w = words(line);
    if (w.empty())
      return true;
    auto c = commands.find(w[0]);
    if (c == commands.end())
      return fail("unknown command \"" + w[0] + "\" (help lists them)");
    return (this->*(c->second))(w);
  }

  bool help_command(const std::vector<std::string>&) {
    std::cout << usage_text;
    return true;
  }

  // The rows `ls` and `names` show: of the kind `w` names (every kind
  // without one); nullopt when the usage is wrong or the engine failed (said).
  std::optional<std::vector<actor_row>> listing(const std::vector<std::string>& w) {
    auto kind = kind_of(w.size() > 1 ? w[1] : "all");
    if (!kind || w.size() > 2) {
      fail("usage: " + w[0] + " [links|hosts|images|proxies|health|gateway|calls|nodes]");
      return std::nullopt;
    }
    // Only `ls --json` prints the details: the rest leave them on the node.
    bool details = w[0] == "ls" && json_;
    return ask_ls({*kind, "", details});
  }

  // For shell completion (dist/bash-completion/caf-shell): one name per
  // line, nothing else.
  bool names_command(const std::vector<std::string>& w) {
    auto xs = listing(w);
    if (!xs)
      return false;
    std::set<std::string> names;
    for (auto& e : *xs)
      names.insert(e.name);
    for (auto& n : names)
      std::cout << n << "\n";
    return true;
  }

  bool ls_command(const std::vector<std::string>& w) {
    auto xs = listing(w);
    if (!xs)
      return false;
    print_ls(*xs);
    return true;
  }

  bool show_command(const std::vector<std::string>& w) {
    if (w.size() != 3 || !kind_of(w[1]) || kind_of(w[1])->empty())
      return fail("usage: show <link|image|proxy|health|gateway|call|node> <name>");
    auto kind = *kind_of(w[1]);
    auto xs = ask_ls({kind, w[2], true});
    if (!xs)
      return false;
    for (auto& e : *xs)
      if (e.name == w[2] && to_string(e.kind) == kind) {
        print_show(e);
        return true;
      }
    return fail("no " + kind + " named \"" + w[2] + "\" (ls " + kind + " lists them)");
  }

  bool status_command(const std::vector<std::string>&) {
    auto out = ask<fleet_status>([&](caf::scoped_actor& self) {
      return self->request(inspector_, timeout_, atom::status_v, token_);
    });
    if (!out)
      return false;
    if (json_)
      std::cout << to_json(*out).dump(2) << "\n";
    else
      std::cout << "node " << out->node << ", entry " << out->entry << ": "
                << out->links.size() << " link(s), " << out->images.size() << " image(s), "
                << out->proxies.size() << " proxy(ies), rotation " << out->rotation.size()
                << "\n";
    return true;
  }

  bool watch_command(const std::vector<std::string>& w) {
    std::string filter;
    for (size_t i = 1; i < w.size(); ++i)
      filter += (i > 1 ? " " : "") + w[i];
    return watch(filter);
  }

  bool drain_command(const std::vector<std::string>& w) {
    if (w.size() != 2)
      return fail("usage: " + w[0] + " <proxy>");
    bool drained = w[0] == "drain";
    auto out = ask<proxy_health>([&](caf::scoped_actor& self) {
      return self->request(inspector_, timeout_, atom::drain_v, token_, w[1], drained, false);
    });
    if (!out)
      return false;
    if (json_)
      std::cout << json{{"name", out->name}, {"drained", out->drained},
                        {"in_rotation", out->in_rotation}}
                     .dump(2)
                << "\n";
    else
      std::cout << "proxy " << out->name << ": " << (out->drained ? "drained" : "undrained")
                << ", " << (out->in_rotation ? "in" : "out of") << " the rotation\n";
    return true;
  }

  bool cordon_command(const std::vector<std::string>& w) {
    if (w.size() != 2)
      return fail("usage: " + w[0] + " <host>");
    bool on = w[0] == "drain-host";
    auto out = ask<host_drain>([&](caf::scoped_actor& self) {
      return self->request(inspector_, timeout_, atom::cordon_v, token_, w[1], on, false);
    });
    if (!out)
      return false;
    if (json_)
      std::cout << json{{"host", out->host},       {"cordoned", out->cordoned},
                        {"draining", out->draining}, {"members", out->members},
                        {"moving", out->moving},     {"moved", out->moved},
                        {"waiting", out->waiting}}
                     .dump(2)
                << "\n";
    else
      std::cout << "host " << out->host << ": " << describe(*out) << "\n";
    return true;
  }

  bool reconcile_command(const std::vector<std::string>& w) {
    if (w.size() != 2)
      return fail("usage: reconcile <proxy>");
    auto out = ask<proxy_status>([&](caf::scoped_actor& self) {
      return self->request(inspector_, timeout_, atom::reconcile_v, token_, w[1], false);
    });
    if (!out)
      return false;
    if (json_)
      std::cout << json{{"name", out->name}, {"phase", to_string(out->phase)},
                        {"address", out->address}, {"polls", out->polls}}
                     .dump(2)
                << "\n";
    else
      std::cout << "proxy " << out->name << ": reconciling now (was " << to_string(out->phase)
                << (out->address.empty() ? "" : " at " + out->address)
                << "; watch shows what it finds)\n";
    return true;
  }

  bool reload_command(const std::vector<std::string>& w) {
    if (w.size() != 1)
      return fail("usage: reload (the engine re-reads its own configuration file)");
    auto out = ask<std::string>([&](caf::scoped_actor& self) {
      return self->request(inspector_, timeout_, atom::reload_v, token_);
    });
    if (!out)
      return false;
    if (json_)
      std::cout << json{{"applied", *out}}.dump(2) << "\n";
    else
      std::cout << "reload applied: " << *out << "\n";
    return true;
  }

  bool kill_link_command(const std::vector<std::string>& w) {
    if (w.size() != 2)
      return fail("usage: kill-link <host>");
    auto out = ask<link_status>([&](caf::scoped_actor& self) {
      return self->request(inspector_, timeout_, atom::kill_v, token_, w[1], false);
    });
    if (!out)
      return false;
    if (json_)
      std::cout << to_json(*out).dump(2) << "\n";
    else
      std::cout << "link " << out->host << ": " << to_string(out->state)
                << (out->reason.empty() ? "" : " (" + out->reason + ")") << "\n";
    return true;
  }

  /// How long `watch` runs (0: until Ctrl-C or SIGTERM).
  std::chrono::seconds watch_for{0};

private:
  /// Prints every engine_event whose "kind name what" contains `filter`
  /// until interrupted (or watch_for passed). A lost connection is reported
  /// and the watch resumes on a new one.
  bool watch(const std::string& filter) {
    if (!inspector_ && !connect())
      return false;
    bool as_json = json_;
    auto printer = sys_.spawn([filter, as_json]() -> engine_events_actor::behavior_type {
      return {[filter, as_json](engine_event& e) {
        auto line = e.node + " " + e.kind + " " + e.name + " " + e.what;
        if (!filter.empty() && line.find(filter) == std::string::npos)
          return;
        if (as_json)
          std::cout << json{{"at", e.at}, {"node", e.node}, {"kind", e.kind}, {"name", e.name},
                            {"what", e.what}}
                         .dump()
                    << std::endl;
        else
          std::cout << e.at << "  " << line << std::endl;
      }};
    });
    interrupted = 0;
    auto deadline = std::chrono::steady_clock::now() + watch_for;
    bool ok = true;
    {
      caf::scoped_actor self{sys_};
      self->monitor(inspector_);
      self->send(inspector_, atom::subscribe_v, token_, printer);
      if (!json_)
        std::cerr << "caf-shell: watching " << (filter.empty() ? "everything" : filter)
                  << " (Ctrl-C ends it)\n";
      bool done = false;
      while (!done) {
        self->receive(
          [&](caf::down_msg&) {
            std::cerr << "caf-shell: connection to " << where() << " lost; reconnecting\n";
            inspector_ = nullptr;
            for (int i = 0; i < 10 && !interrupted && !connect(true); ++i)
              std::this_thread::sleep_for(std::chrono::seconds(1));
            if (!inspector_) {
              fail("the engine at " + where() + " is gone");
              ok = false;
              done = true;
              return;
            }
            self->monitor(inspector_);
            self->send(inspector_, atom::subscribe_v, token_, printer);
          },
          caf::after(std::chrono::milliseconds(200)) >> [&] {
            done = interrupted
                   || (watch_for.count() > 0 && std::chrono::steady_clock::now() >= deadline);
          });
      }
    }
    caf::anon_send_exit(printer, caf::exit_reason::user_shutdown);
    return ok;
  }

  bool fail(const std::string& why) {
    std::cerr << "caf-shell: " << why << "\n";
    return false;
  }

  /// One request with one reconnect: a lost connection is reported and
  /// retried once before the command fails.
  template <class T, class Send>
  std::optional<T> ask(Send send) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      if (!inspector_ && !connect())
        return std::nullopt;
      caf::error failed;
      std::optional<T> out;
      {
        caf::scoped_actor self{sys_};
        send(self).receive([&](T& x) { out = std::move(x); },
                           [&](caf::error& err) { failed = std::move(err); });
      }
      if (out)
        return out;
      // access_denied: the node no longer knows our token (it restarted,
      // or let the idlest tokens go); a new hello gets a new one.
      bool lost = failed == caf::sec::request_receiver_down
                  || failed == caf::sec::remote_linking_failed
                  || failed == caf::sec::no_route_to_receiving_node
                  || is(failed, ec::access_denied);
      if (!lost || attempt == 1) {
        fail("the engine at " + where() + " answered: " + render(failed));
        return std::nullopt;
      }
      std::cerr << "caf-shell: connection to " << where() << " lost; reconnecting\n";
      inspector_ = nullptr;
    }
    return std::nullopt;
  }

  std::optional<std::vector<actor_row>> ask_ls(const ls_query& query) {
    auto out = ask<std::vector<actor_row>>([&](caf::scoped_actor& self) {
      return self->request(inspector_, timeout_, atom::ls_v, token_, query, false);
    });
    if (!out)
      return std::nullopt;
    for (auto& e : *out)
      names_.insert(e.name);
    return out;
  }

  void print_ls(const std::vector<actor_row>& xs) {
    if (json_) {
      // The same text as one array's dump(2), an entry at a time: a tree of
      // 10,000 entries (a std::map per object) took twice as long to build
      // and print (bench/inspect).
      if (xs.empty()) {
        std::cout << "[]\n";
        return;
      }
      std::string out = "[\n";
      for (size_t i = 0; i < xs.size(); ++i) {
        auto one = to_json(xs[i]).dump(2);
        out += "  ";
        for (size_t at = 0, nl; at < one.size(); at = nl + 1) {
          nl = one.find('\n', at);
          if (nl == std::string::npos) {
            out.append(one, at);
            break;
          }
          out.append(one, at, nl + 1 - at).append("  ");
        }
        out += i + 1 < xs.size() ? ",\n" : "\n";
      }
      out += "]\n";
      std::cout << out;
      return;
    }
    // The NODE column only where there is more than one node to tell apart.
    size_t wk = 5, wn = 4, ws = 5, wnode = 4;
    std::set<std::string> nodes;
    for (auto& e : xs) {
      wk = std::max(wk, std::strlen(to_string(e.kind)) + 2);
      wn = std::max(wn, e.name.size());
      ws = std::max(ws, e.state.size());
      wnode = std::max(wnode, e.node.size());
      nodes.insert(e.node);
    }
    bool by_node = nodes.size() > 1;
    std::cout << (by_node ? pad("NODE", wnode + 2) : "") << pad("KIND", wk) << pad("NAME", wn + 2)
              << pad("STATE", ws + 2) << pad("STARTED", 22) << "LIVENESS\n";
    for (auto& e : xs)
      std::cout << (by_node ? pad(e.node, wnode + 2) : "") << pad(to_string(e.kind), wk)
                << pad(e.name, wn + 2) << pad(e.state, ws + 2) << pad(e.started_at, 22)
                << e.liveness << "\n";
  }

  void print_show(const actor_row& e) {
    if (json_) {
      std::cout << to_json(e).dump(2) << "\n";
      return;
    }
    std::cout << to_string(e.kind) << " " << e.name << "\n  node: " << e.node << "\n  state: " << e.state
              << "\n  started at: " << e.started_at << "\n  liveness: " << e.liveness << "\n";
    for (auto& d : e.details)
      std::cout << "  " << d << "\n";
  }

  caf::actor_system& sys_;
  std::string host_;
  uint16_t port_;
  bool json_;
  caf::timespan timeout_;
  node_actor inspector_;
  std::set<std::string> names_;
};

// -- libedit completion -------------------------------------------------------------

shell* completing = nullptr;
std::vector<std::string> candidates;

char* next_candidate(const char* text, int state) {
  static size_t i;
  if (state == 0)
    i = 0;
  while (i < candidates.size()) {
    auto& c = candidates[i++];
    if (c.rfind(text, 0) == 0)
      return ::strdup(c.c_str());
  }
  return nullptr;
}

char** complete(const char* text, int start, int) {
  candidates.clear();
  if (start == 0) {
    candidates = {"ls",     "show",    "status", "watch", "kill-link", "reconcile",
                  "drain",  "undrain", "drain-host", "undrain-host", "reload", "help", "quit"};
  } else {
    candidates = {"links", "hosts", "images", "proxies", "health", "gateway", "calls", "nodes",
                  "cluster", "link", "image", "proxy", "call", "node"};
    if (completing)
      for (auto& n : completing->names())
        candidates.push_back(n);
  }
  return rl_completion_matches(text, next_candidate);
}

int repl(shell& sh) {
  completing = &sh;
  rl_attempted_completion_function = complete;
  std::cout << "caf-shell: attached to " << sh.where() << " (help lists the commands)\n";
  sh.run("ls");
  std::string prompt = sh.node() + "@" + sh.where() + "> ";
  while (char* raw = readline(prompt.c_str())) {
    std::string line = raw;
    std::free(raw);
    auto w = words(line);
    if (w.empty())
      continue;
    add_history(line.c_str());
    if (w[0] == "quit" || w[0] == "exit")
      break;
    sh.run(line);
  }
  return exit_ok;
}

} // namespace

// The identity caf-run generated (providers/crypto/identity.hpp): the one
// named, else $EGRESS_INSPECT_IDENTITY, else the engine's default for this
// user, else the system service's.
caf::expected<crypto::identity_files> find_identity(const std::string& named) {
  std::vector<std::string> tried;
  auto dirs = named.empty() ? std::vector<std::string>{} : std::vector<std::string>{named};
  if (named.empty()) {
    if (auto env = std::getenv("EGRESS_INSPECT_IDENTITY"); env && *env)
      dirs.push_back(env);
    dirs.push_back(crypto::default_identity_dir());
    dirs.push_back("/var/lib/egress/inspect");
  }
  caf::error last;
  for (auto& d : dirs) {
    auto id = crypto::load_identity(d);
    if (id || !named.empty())
      return id;
    tried.push_back(d);
    last = id.error();
  }
  std::string list;
  for (auto& d : tried)
    list += (list.empty() ? "" : ", ") + d;
  return make_error(ec::invalid_argument,
                    "no inspector identity readable here (tried " + list + "; last: "
                      + detail(last) + "). caf-run makes it on its first start: run the "
                      "shell as the engine's user, or pass --identity=DIR");
}

// What the command line asked for.
struct shell_options {
  std::string target = "127.0.0.1:4040";
  std::string host;
  uint16_t port = 0;
  std::vector<std::string> commands;
  bool as_json = false;
  long timeout_ms = 5000;
  long watch_s = 0;
  std::string secret_file, tls_cert, tls_key, tls_ca, identity_dir;
  bool help = false;
};

// The options, or a usage error's message.
std::variant<shell_options, std::string> read_options(int argc, char** argv) {
  shell_options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      o.help = true;
      return o;
    } else if (a == "-c" && i + 1 < argc) {
      o.commands.push_back(argv[++i]);
    } else if (a == "--json") {
      o.as_json = true;
    } else if (a.rfind("--timeout=", 0) == 0) {
      o.timeout_ms = std::atol(a.c_str() + 10);
      if (o.timeout_ms <= 0)
        return "--timeout: expected milliseconds > 0, got \"" + a.substr(10) + "\"";
    } else if (a.rfind("--for=", 0) == 0) {
      o.watch_s = std::atol(a.c_str() + 6);
      if (o.watch_s <= 0)
        return "--for: expected seconds > 0, got \"" + a.substr(6) + "\"";
    } else if (a.rfind("--secret-file=", 0) == 0) {
      o.secret_file = a.substr(14);
    } else if (a.rfind("--identity=", 0) == 0) {
      o.identity_dir = a.substr(11);
    } else if (a.rfind("--tls-cert=", 0) == 0) {
      o.tls_cert = a.substr(11);
    } else if (a.rfind("--tls-key=", 0) == 0) {
      o.tls_key = a.substr(10);
    } else if (a.rfind("--tls-ca=", 0) == 0) {
      o.tls_ca = a.substr(9);
    } else if (a[0] != '-' && a.find(':') != std::string::npos) {
      o.target = a;
    } else {
      return "unexpected argument \"" + a + "\"\n" + usage_text;
    }
  }
  auto colon = o.target.rfind(':');
  auto port = std::atol(o.target.c_str() + colon + 1);
  if (colon == 0 || port <= 0 || port > 65535)
    return "expected HOST:PORT, got \"" + o.target + "\"";
  o.host = o.target.substr(0, colon);
  o.port = static_cast<uint16_t>(port);
  return o;
}

// The certificates and the secret the shell presents: the operator's
// (--tls-*), or the identity caf-run generated; "" when all is well, else
// the usage error.
std::string find_credentials(shell_options& o, std::string& secret) {
  bool tls = !o.tls_cert.empty() || !o.tls_key.empty() || !o.tls_ca.empty();
  if (tls && (o.tls_cert.empty() || o.tls_key.empty() || o.tls_ca.empty()))
    return "TLS needs all of --tls-cert, --tls-key and --tls-ca";
  for (auto& [flag, file] :
       {std::pair{"--tls-cert", o.tls_cert}, std::pair{"--tls-key", o.tls_key},
        std::pair{"--tls-ca", o.tls_ca}, std::pair{"--secret-file", o.secret_file}})
    if (!file.empty() && !std::ifstream{file})
      return std::string{flag} + ": cannot read \"" + file + "\"";
  if (!o.secret_file.empty()) {
    std::ifstream in{o.secret_file};
    secret.assign(std::istreambuf_iterator<char>{in}, {});
    while (!secret.empty() && std::isspace(static_cast<unsigned char>(secret.back())))
      secret.pop_back();
  }
  if (tls)
    return {};
  auto id = find_identity(o.identity_dir);
  if (!id)
    return detail(id.error());
  o.tls_cert = id->certificate;
  o.tls_key = id->key;
  o.tls_ca = id->ca;
  return {};
}

// Connects and runs the commands, or the REPL without any.
int run_shell(const shell_options& o, const std::string& secret) {
  caf::actor_system_config cfg;
  configure(cfg);
  cfg.load<caf::io::middleman>();
  cfg.load<caf::openssl::manager>();
  cfg.openssl_certificate = o.tls_cert;
  cfg.openssl_key = o.tls_key;
  cfg.openssl_cafile = o.tls_ca;
  cfg.set("logger.file-verbosity", caf::atom("quiet"));
  cfg.set("logger.console-verbosity", caf::atom("quiet"));
  caf::actor_system sys{cfg};
  shell sh{sys, o.host, o.port, o.as_json, std::chrono::milliseconds(o.timeout_ms)};
  sh.watch_for = std::chrono::seconds(o.watch_s);
  sh.secret_ = secret;
  // Ctrl-C ends a watch (in the REPL, libedit has the terminal otherwise);
  // SIGTERM ends a scripted one.
  struct sigaction sa{};
  sa.sa_handler = on_interrupt;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  if (!sh.connect())
    return exit_failed;
  if (o.commands.empty())
    return repl(sh);
  int rc = exit_ok;
  for (auto& c : o.commands)
    if (!sh.run(c))
      rc = exit_failed;
  return rc;
}

int main(int argc, char** argv) {
  auto read = read_options(argc, argv);
  if (auto* why = std::get_if<std::string>(&read)) {
    std::cerr << "caf-shell: " << *why << "\n";
    return exit_usage;
  }
  auto& o = std::get<shell_options>(read);
  if (o.help) {
    std::cout << usage_text;
    return exit_ok;
  }
  std::string secret;
  if (auto why = find_credentials(o, secret); !why.empty()) {
    std::cerr << "caf-shell: " << why << "\n";
    return exit_usage;
  }
  return run_shell(o, secret);
}
