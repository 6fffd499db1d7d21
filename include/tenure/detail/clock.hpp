/// @file
/// Internal: the one place tenure reads time and makes timers (the client
/// library and the agent alike). Nothing else in src/ names
/// std::chrono::steady_clock, system_clock or asio::steady_timer
/// (tests/architecture/check_time_seam.cmake fails the build's tests if it does).
///
/// A build of the library for the deterministic simulation (tests/sim)
/// defines TENURE_SIMULATED_TIME: the same code then reads a virtual clock
/// that jumps to the next timer whenever the io_context has nothing ready
/// (tenure/detail/simulated_time.hpp). Users never define it.
#pragma once

#include <boost/asio/basic_waitable_timer.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>

#if defined(TENURE_SIMULATED_TIME)
#include <tenure/detail/simulated_time.hpp>
#endif

namespace tenure::detail {

#if defined(TENURE_SIMULATED_TIME)
/// Monotonic time as the current simulated process sees it.
using clock = sim::process_clock;
/// A timer on that clock.
using timer = sim::process_timer;
/// Calendar time (log lines only): the virtual clock from a fixed epoch.
using wall_clock = sim::wall_clock;
#else
/// Monotonic time: every deadline, TTL and measurement.
using clock = std::chrono::steady_clock;
/// A timer on that clock.
using timer = boost::asio::steady_timer;
/// Calendar time (log lines only).
using wall_clock = std::chrono::system_clock;
#endif

}  // namespace tenure::detail
