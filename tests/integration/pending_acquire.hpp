// An election's acquire() running in the background, its outcome observable:
// for tests that start several candidates and look at who got there.
#pragma once

#include <tenure/election.hpp>
#include <tenure/leadership_scope.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>

namespace tenure::itest {

struct pending_acquire {
    using steady = std::chrono::steady_clock;

    explicit pending_acquire(boost::asio::any_io_executor ex) : wake(ex, steady::time_point::max()) {}
    boost::asio::steady_timer wake;
    bool done = false;
    tenure::leadership_scope scope;
    boost::system::error_code ec;
    steady::time_point at;  // when it completed

    void start(tenure::election& e) {
        e.acquire([this](boost::system::error_code c, tenure::leadership_scope s) {
            ec = c;
            scope = std::move(s);
            done = true;
            at = steady::now();
            wake.cancel();
        });
    }
    // True once done, false when `limit` passed first.
    boost::asio::awaitable<bool> wait(std::chrono::milliseconds limit) {
        auto const deadline = steady::now() + limit;
        while (!done && steady::now() < deadline) {
            wake.expires_at(deadline);
            co_await wake.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
        }
        co_return done;
    }
};

}  // namespace tenure::itest
