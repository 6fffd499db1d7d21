// tenure's own read endpoints beside Consul's API, which the agent's web UI
// (-ui) and scripts read: /v1/tenure/history (the lock history ring,
// history.hpp) and /v1/tenure/sessions (sessions with their last renewal and
// bound checks). docs/agent.md documents both. Their parameters and blocking
// are handled in http_api.cpp; this renders the answers.
#pragma once

#include "agent/state.hpp"

#include <boost/json/object.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace tenure::detail::agent {

// Maps the agent's monotonic clock onto calendar time for rendering: the
// server takes one reading of both clocks when it starts. Unset (the unit
// tests), an instant renders as its count of milliseconds since the
// monotonic epoch, which keeps answers deterministic.
struct wall_anchor {
    time_point at{};
    std::int64_t unix_ms = 0;
    std::int64_t to_unix_ms(time_point t) const {
        return unix_ms + std::chrono::duration_cast<std::chrono::milliseconds>(t - at).count();
    }
};

struct history_query {
    std::optional<std::string> key;  // exactly this key
    std::string prefix;              // else every key under this ("" all)
    std::size_t terms = 0;           // most recent terms per key; 0: all in the ring
};

boost::json::object render_history(state_machine const& sm, history_query const& q, wall_anchor const& wall,
                                   time_point now);
boost::json::object render_sessions_view(state_machine const& sm, wall_anchor const& wall, time_point now);

// The blocking index of /v1/tenure/sessions: a sum of counters that only
// grow, so it grows whenever a session, a check or a renewal changes.
std::uint64_t sessions_view_index(state_machine const& sm);

}  // namespace tenure::detail::agent
