// tenure::leadership_event — what a session and its held keys go through,
// reported to session_options::on_event (for logs, metrics, alerts). This is
// tenure's one notification stream; to await a loss in a coroutine, use
// session::wait_lost() or leadership_scope::wait_lost() instead (and
// leadership_scope::run() to cancel work on loss).
//
//     tenure::session_options o;
//     o.on_event = [](tenure::leadership_event const& e) {
//         std::clog << tenure::to_string(e.kind) << " key=" << e.key << " margin="
//                   << std::chrono::duration<double>(e.margin).count() << "s\n";
//     };
//
// Events, in the order they can happen:
//   acquired  a key (or semaphore permit) is now held: key, token (the fencing token)
//   renewed   a renewal was acknowledged, the session is healthy (again, after a
//             jeopardy): round_trip, margin = the new local deadline minus now
//             (how long leadership would last without another)
//   jeopardy  a renewal failed and the deadline has not passed: reason, margin left
//   released  a held key was given up by this process (release(), scope destroyed, close())
//   lost      a held key was lost (key set, token) or the session itself (key empty): reason
// The handler runs on the session's executor, inside the library's
// coroutines: keep it short and do not block. Exceptions it throws are ignored.
#pragma once

#include <tenure/detail/clock.hpp>

#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace tenure {

enum class leadership_event_kind { acquired, renewed, jeopardy, released, lost };

constexpr std::string_view to_string(leadership_event_kind k) noexcept {
    switch (k) {
    case leadership_event_kind::acquired: return "acquired";
    case leadership_event_kind::renewed: return "renewed";
    case leadership_event_kind::jeopardy: return "jeopardy";
    case leadership_event_kind::released: return "released";
    case leadership_event_kind::lost: return "lost";
    }
    return "unknown";
}

struct leadership_event {
    leadership_event_kind kind = leadership_event_kind::acquired;
    std::string session_id;
    std::string key;          // acquired, released, lost (empty: the session itself was lost)
    std::uint64_t token = 0;  // acquired, released, lost of a key
    std::chrono::nanoseconds round_trip{0};  // renewed
    std::chrono::nanoseconds margin{0};      // renewed, jeopardy: local deadline - now
    boost::system::error_code reason;        // jeopardy (the renewal error), lost
    tenure::detail::clock::time_point at{};
};

using leadership_event_handler = std::function<void(leadership_event const&)>;

}  // namespace tenure
