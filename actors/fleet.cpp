#include "actors/fleet.hpp"

#include "actors/host_link.hpp"
#include "actors/image.hpp"
#include "actors/proxy.hpp"
#include "actors/transport_choice.hpp"
#include "messages/error.hpp"
#include "runtime/log.hpp"

namespace egress {

caf::timespan caller_timeout(const host_config& host) {
  return host.connect_timeout + 2 * host.call_budget + std::chrono::seconds(1);
}

fleet_actor::behavior_type make_fleet(fleet_pointer self, engine_config cfg,
                                      fleet_hooks hooks) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  st.name = "fleet/" + st.cfg.entry;
  if (!hooks.make_transport)
    hooks.make_transport = transport_for;
  status_sink_actor sink = self;
  link_events_actor events = self;
  std::map<std::string, const host_config*> host_by_name;
  for (auto& h : st.cfg.hosts) {
    host_link_options o;
    o.host = h.name;
    o.max_calls = h.max_calls;
    o.call_budget = h.call_budget;
    o.connect_timeout = h.connect_timeout;
    o.redial_min = st.cfg.redial_min;
    o.redial_max = st.cfg.redial_max;
    o.keepalive_interval_s = static_cast<int>(
      std::chrono::duration_cast<std::chrono::seconds>(h.keepalive_interval).count());
    o.keepalive_count = h.keepalive_count;
    o.make_transport = hooks.make_transport(h);
    o.sink = sink;
    auto link = self->spawn(make_host_link, std::move(o));
    self->send(link, atom::subscribe_v, events);
    self->monitor(link);
    st.links.emplace(h.name, link);
    host_by_name.emplace(h.name, &h);
  }
  // One image actor per (image, host) that a proxy needs: the provider
  // entry is the fleet's own, so every cache entry is (entry, image) on a host.
  auto image_for = [&](const proxy_spec& p) -> image_actor {
    if (p.image.empty())
      return {};
    auto key = p.image + "@" + p.host;
    if (auto i = st.images.find(key); i != st.images.end())
      return i->second;
    auto cfg_of = std::find_if(st.cfg.images.begin(), st.cfg.images.end(),
                               [&](const image_config& x) { return x.name == p.image; });
    image_options o; // validated: the image is declared, the host has a pool
    o.entry = st.cfg.entry;
    o.host = *host_by_name.at(p.host);
    o.image = images::image_source{cfg_of->name, cfg_of->url, cfg_of->sha256, cfg_of->size,
                                   cfg_of->format};
    o.transfer_budget = cfg_of->transfer_budget;
    o.make_transport = hooks.make_transport(o.host);
    o.sink = sink;
    auto img = spawn_image(self->system(), std::move(o));
    self->monitor(img);
    st.images.emplace(key, img);
    return img;
  };
  for (auto& p : st.cfg.proxies) {
    auto& h = *host_by_name.at(p.host); // validated: every proxy names a host
    proxy_options o;
    o.spec = p;
    o.entry = st.cfg.entry;
    o.domain_type = h.domain_type;
    o.address_sources = h.address_sources;
    o.poll_interval = st.cfg.poll_interval;
    o.address_grace = st.cfg.address_grace;
    o.call_timeout = caller_timeout(h);
    o.link = st.links.at(p.host);
    o.image = image_for(p);
    o.pool = h.pool;
    for (auto& img : st.cfg.images)
      if (img.name == p.image) { // a waiter outlasts the image's own budget
        o.image_timeout = img.transfer_budget + std::chrono::minutes(1);
        o.image_format = img.format == "qcow2" ? "qcow2" : "raw";
      }
    o.sink = sink;
    auto proxy = self->spawn(make_proxy, std::move(o));
    self->monitor(proxy);
    st.proxies.emplace(p.name, proxy);
  }
  log::info("fleet", st.cfg.entry + ": " + std::to_string(st.links.size())
                       + " host(s), " + std::to_string(st.proxies.size())
                       + " proxy(ies)");
  self->set_down_handler([self](const caf::down_msg& msg) {
    if (self->state.stopping || !msg.reason)
      return;
    log::error("fleet", "a child actor ended unexpectedly: " + caf::to_string(msg.reason));
  });
  return {
    [self](atom::status) {
      fleet_status out;
      out.entry = self->state.cfg.entry;
      for (auto& [_, s] : self->state.link_view)
        out.links.push_back(s);
      for (auto& [_, s] : self->state.proxy_view)
        out.proxies.push_back(s);
      for (auto& [_, s] : self->state.image_view)
        out.images.push_back(s);
      return out;
    },
    [self](atom::link, const std::string& host) -> caf::result<host_link_actor> {
      auto i = self->state.links.find(host);
      if (i == self->state.links.end())
        return make_error(ec::invalid_argument, "no host named \"" + host + "\"");
      return i->second;
    },
    [self](atom::kill, const std::string& host) -> caf::result<link_status> {
      auto i = self->state.links.find(host);
      if (i == self->state.links.end())
        return make_error(ec::invalid_argument, "no host named \"" + host + "\"");
      return self->delegate(i->second, atom::kill_v, std::string{"by operator"});
    },
    [self](atom::erase, const std::string& name) -> caf::result<proxy_status> {
      auto i = self->state.proxies.find(name);
      if (i == self->state.proxies.end())
        return make_error(ec::invalid_argument, "no proxy named \"" + name + "\"");
      auto proxy = i->second;
      // The proxy quits once its VM is gone; forget it now so that status
      // and shutdown no longer wait for it.
      self->state.proxies.erase(i);
      return self->delegate(proxy, atom::erase_v);
    },
    [self](atom::shutdown) {
      auto& st = self->state;
      st.stopping = true;
      log::info("fleet", "shutting down: killing " + std::to_string(st.links.size())
                           + " link(s) first");
      // Kill first, so that no detached call stays blocked on a dead host and
      // the actor system's final join cannot hang (invariant 15).
      for (auto& [_, l] : st.links)
        self->send(l, atom::kill_v, std::string{"engine shutdown"});
      // An image's exit gives its fill up (transports killed, download
      // cancelled), so a 20-minute upload does not hold the shutdown.
      for (auto& [_, i] : st.images)
        self->send_exit(i, caf::exit_reason::user_shutdown);
      for (auto& [_, p] : st.proxies)
        self->send_exit(p, caf::exit_reason::user_shutdown);
      for (auto& [_, l] : st.links)
        self->send_exit(l, caf::exit_reason::user_shutdown);
      self->quit();
      return true;
    },
    [self](link_down& ev) {
      log::warn("fleet", "link_down " + ev.host + ": " + ev.reason);
    },
    [self](link_status& s) { self->state.link_view[s.host] = std::move(s); },
    [self](proxy_status& s) { self->state.proxy_view[s.name] = std::move(s); },
    [self](image_status& s) {
      auto key = s.image + "@" + s.host;
      self->state.image_view[key] = std::move(s);
    },
  };
}

} // namespace egress
