// The awaitable helpers the integration tests share: a pause, a bound on an
// operation, a flag several coroutines can await, and the error an operation
// must throw.
#pragma once

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <exception>
#include <functional>
#include <optional>
#include <stdexcept>
#include <utility>

namespace tenure::itest {

// Suspends the calling coroutine for `d`.
inline boost::asio::awaitable<void> pause(std::chrono::steady_clock::duration d) {
    boost::asio::steady_timer t(co_await boost::asio::this_coro::executor, d);
    co_await t.async_wait(boost::asio::use_awaitable);
}

// `op`, or nullopt when `limit` passes first (op is then cancelled). The
// first to complete wins, success or failure (Asio 1.81's operator|| would
// wait for the first *success*).
template <class T>
boost::asio::awaitable<std::optional<T>> within(boost::asio::awaitable<T> op, std::chrono::milliseconds limit) {
    namespace asio = boost::asio;
    auto ex = co_await asio::this_coro::executor;
    auto [order, ex0, r0, ex1] = co_await asio::experimental::make_parallel_group(
                                     asio::co_spawn(ex, std::move(op), asio::deferred),
                                     asio::co_spawn(ex, pause(limit), asio::deferred))
                                     .async_wait(asio::experimental::wait_for_one(), asio::deferred);
    if (order[0] == 0) {
        if (ex0) std::rethrow_exception(ex0);
        co_return std::optional<T>(std::move(r0));
    }
    co_return std::optional<T>{};
}

// Awaits `op` and returns the `Error` it must throw; the test fails if it
// succeeds.
template <class Error, class T>
boost::asio::awaitable<Error> expect_error(boost::asio::awaitable<T> op, char const* what = "the operation") {
    try {
        co_await std::move(op);
    } catch (Error const& e) {
        co_return e;
    }
    BOOST_FAIL(what << ": expected an error, the operation succeeded");
    throw std::logic_error("unreachable");
}

// A level-triggered flag several coroutines can await.
struct signal_flag {
    explicit signal_flag(boost::asio::any_io_executor ex) : timer(ex, std::chrono::steady_clock::time_point::max()) {}
    boost::asio::steady_timer timer;
    void notify() { timer.cancel(); }
    // Waits until pred() holds; false when `limit` passes first.
    boost::asio::awaitable<bool> until(std::function<bool()> pred, std::chrono::milliseconds limit) {
        auto const deadline = std::chrono::steady_clock::now() + limit;
        while (!pred() && std::chrono::steady_clock::now() < deadline) {
            timer.expires_at(deadline);
            co_await timer.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
        }
        co_return pred();
    }
};

// A duration in (fractional) milliseconds, for messages.
inline double ms(std::chrono::steady_clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

}  // namespace tenure::itest
