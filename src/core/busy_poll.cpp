// tenure::run_with_busy_poll: io_context::run that polls before it sleeps.
#include <tenure/detail/clock.hpp>
#include <tenure/busy_poll.hpp>

namespace tenure {

std::size_t run_with_busy_poll(boost::asio::io_context& ctx, std::chrono::nanoseconds spin) {
    if (spin <= std::chrono::nanoseconds::zero()) return ctx.run();
    using clock = tenure::detail::clock;
    std::size_t handlers = 0;
    auto last_work = clock::now();
    while (!ctx.stopped()) {
        // poll() runs what is ready, including a non-blocking turn of the
        // reactor, so sockets and timers are seen while spinning. It stops the
        // context when no work is left, as run() returns then.
        if (std::size_t const n = ctx.poll()) {
            handlers += n;
            last_work = clock::now();
            continue;
        }
        if (ctx.stopped()) break;
        if (clock::now() - last_work < spin) continue;
        // Idle for the whole budget: sleep in the kernel until something happens.
        handlers += ctx.run_one();
        last_work = clock::now();
    }
    return handlers;
}

}  // namespace tenure
