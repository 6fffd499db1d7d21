/// @file
/// tenure::run_with_busy_poll — run an io_context that keeps polling for a
/// while before it sleeps, for latency on machines where waking up is slow.
///
/// tenure never spins: its coroutines wait on the io_context you run. How you
/// run it is yours to choose. `ctx.run()` sleeps in the kernel (epoll_wait)
/// whenever nothing is ready, and the next packet then has to wake the thread
/// up. On most machines that costs a few microseconds. On a virtual machine
/// whose idle vCPUs halt at once (KVM guests with `guest_halt_poll_ns=0`, as
/// many clouds configure them) it costs tens: the sender's IPI, a VM exit and
/// a VM entry. A request/answer exchange with a server on another vCPU then
/// pays it twice per round trip.
///
///     asio::io_context ctx{1};
///     ... co_spawn the work ...
///     tenure::run_with_busy_poll(ctx, std::chrono::microseconds{50});  // instead of ctx.run()
///
/// After each burst of handlers it keeps polling the context (a non-blocking
/// epoll_wait) for up to `spin`, and only then blocks as run() would. An idle
/// program therefore sleeps as before; a busy one keeps its thread running
/// through the short gaps between a request and its answer, at the price of
/// a core kept busy while they last. `tenure agent -busy-poll=<duration>` is
/// the same loop for the agent (bench/RESULTS.md has the figures).
#pragma once

#include <boost/asio/io_context.hpp>

#include <chrono>
#include <cstddef>

namespace tenure {

/// Runs `ctx` as `ctx.run()` does: until it is stopped or runs out of work,
/// propagating a handler's exception, and returns the number of handlers run.
/// The difference: when nothing is ready it polls for up to `spin` before it
/// blocks. `spin` <= 0 is `ctx.run()`. Call it from as many threads as you
/// would call run() from.
std::size_t run_with_busy_poll(boost::asio::io_context& ctx, std::chrono::nanoseconds spin);

}  // namespace tenure
