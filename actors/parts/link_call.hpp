#pragma once
// The typed side of a host-link call: wraps a provider function as a call_job,
// sends it to the link, and hands the typed result (or the error) back to the
// requesting actor's continuation. Always with an error handler: a .then
// without one kills the requester when its timeout fires (docs/notes/caf-0.17.md#request-without-an-error-handler).

#include <any>
#include <string>
#include <type_traits>
#include <utility>

#include "messages/actors.hpp"
#include "messages/error.hpp"

namespace egress {

/// Runs `fn(lv::connection&)` on `link`. `T` is the value type of the
/// caf::expected<T> that `fn` returns, or void when `fn` returns caf::error.
/// `timeout` bounds the wait for the link's answer; the link itself enforces
/// the call's budget and answers transient when it is exceeded.
/// `create`: the call creates a VM (at most max-creates run at once on a
/// link, actors/parts/call_pool.hpp).
template <class T, class Self, class Fn, class OnOk, class OnErr>
void link_call(Self* self, const host_link_actor& link, caf::timespan timeout,
               std::string what, Fn fn, OnOk on_ok, OnErr on_err, bool create = false) {
  call_job job;
  job.what = std::move(what);
  job.create = create;
  job.fn = [fn = std::move(fn)](lv::connection& c) -> caf::expected<std::any> {
    if constexpr (std::is_void_v<T>) {
      if (auto err = fn(c))
        return err;
      return std::any{};
    } else {
      auto r = fn(c);
      if (!r)
        return std::move(r.error());
      return std::any{std::move(*r)};
    }
  };
  self->request(link, timeout, atom::call_v, std::move(job))
    .then(
      [on_ok](call_result& r) mutable {
        if constexpr (std::is_void_v<T>)
          on_ok();
        else
          on_ok(std::any_cast<T&>(r.value));
      },
      [on_err](caf::error& err) mutable { on_err(err); });
}

} // namespace egress
