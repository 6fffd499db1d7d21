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

}  // namespace tenure::itest
