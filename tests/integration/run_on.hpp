// Runs a test's coroutine body to completion on an io_context.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <exception>
#include <functional>

namespace tenure::itest {

// Bounded by `limit`, so a bug fails the test instead of hanging it; the
// body's exception is rethrown here.
inline void run_on(boost::asio::io_context& io, std::function<boost::asio::awaitable<void>()> body,
                   std::chrono::steady_clock::duration limit = std::chrono::seconds{30}) {
    bool done = false;
    std::exception_ptr error;
    boost::asio::co_spawn(io, body(), [&](std::exception_ptr e) {
        done = true;
        error = e;
        io.stop();
    });
    io.run_for(limit);
    BOOST_REQUIRE_MESSAGE(done, "the test body did not finish in time");
    if (error) std::rethrow_exception(error);
}

// run_on from a fresh start, then 300 ms more for the background releases and
// closes the body left behind (a scope's destructor, a session's close).
inline void run_scenario(boost::asio::io_context& io, std::function<boost::asio::awaitable<void>()> const& body,
                         std::chrono::steady_clock::duration limit = std::chrono::seconds{60}) {
    io.restart();
    run_on(io, body, limit);
    io.restart();
    io.run_for(std::chrono::milliseconds{300});
}

}  // namespace tenure::itest
