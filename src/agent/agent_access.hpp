// Internal: the agent library's way into a tenure::agent - its state machine
// and its timer loop - for the in-process connection and for tests. Not
// installed: the public tenure::agent shows none of it.
#pragma once

#include <tenure/agent.hpp>

#include <boost/asio/awaitable.hpp>

#include "agent/http_api.hpp"
#include "agent/state.hpp"

namespace tenure::detail {

struct agent_access {
    // The state machine (same thread only). Changes made here wake parked
    // blocking queries as HTTP writes do. After creating TTL sessions or checks
    // through it, call timers_changed() so the timer loop picks up an earlier
    // deadline. on_invalidate and on_lock_delay_reject are used by the agent
    // for logging; wrap rather than replace them.
    static agent::state_machine& state(tenure::agent& a) noexcept;
    // What tenure's own endpoints render with (calendar time, the UI switch).
    static agent::http_api::view_options const& views(tenure::agent& a) noexcept;
    // Re-arms the timer loop if the state machine's next deadline moved earlier.
    static void timers_changed(tenure::agent& a);
    // True when the agent has a data_dir and state changes not yet on disk:
    // an answer that shows them must wait_durable() first, as HTTP answers do.
    static bool pending_writes(tenure::agent& a) noexcept;
    // Completes once every change so far is on disk; false when the
    // write-ahead log failed (the agent is stopping).
    static boost::asio::awaitable<bool> wait_durable(tenure::agent& a);
    // A crash, for the simulation: the data directory is left as a killed
    // process leaves it (changes not yet committed are lost, the lock is
    // released) and the agent stops without a final commit. The object stays
    // valid until its handlers have unwound; another agent may then recover
    // the directory.
    static void crash(tenure::agent& a);
};

// The in-process transport (src/agent/inprocess_transport.cpp).
std::shared_ptr<consul::detail::transport> make_inprocess_transport(boost::asio::any_io_executor ex,
                                                                    tenure::agent& agent, std::string token);

}  // namespace tenure::detail
