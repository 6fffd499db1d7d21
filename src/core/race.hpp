// detail::race - the first of two coroutines to complete wins.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/this_coro.hpp>

#include <exception>
#include <optional>
#include <type_traits>

namespace tenure::detail {

namespace asio = boost::asio;

// Runs `a` and `b` concurrently. The first to COMPLETE - with a result or
// with an exception - wins, and the other is cancelled and awaited. (Asio's
// operator|| waits for the first to *succeed*, so a failing branch would wait
// for the other one.) Returns a's result, or nullopt (false for void) when b
// completed first; rethrows the winner's exception.
template <class T>
asio::awaitable<std::conditional_t<std::is_void_v<T>, bool, std::optional<T>>> race(asio::awaitable<T> a,
                                                                                    asio::awaitable<void> b) {
    auto ex = co_await asio::this_coro::executor;
    if constexpr (std::is_void_v<T>) {
        auto [order, ex0, ex1] = co_await asio::experimental::make_parallel_group(
                                     asio::co_spawn(ex, std::move(a), asio::deferred),
                                     asio::co_spawn(ex, std::move(b), asio::deferred))
                                     .async_wait(asio::experimental::wait_for_one(), asio::deferred);
        if (order[0] == 0) {
            if (ex0) std::rethrow_exception(ex0);
            co_return true;
        }
        if (ex1) std::rethrow_exception(ex1);
        co_return false;
    } else {
        auto [order, ex0, r0, ex1] = co_await asio::experimental::make_parallel_group(
                                         asio::co_spawn(ex, std::move(a), asio::deferred),
                                         asio::co_spawn(ex, std::move(b), asio::deferred))
                                         .async_wait(asio::experimental::wait_for_one(), asio::deferred);
        if (order[0] == 0) {
            if (ex0) std::rethrow_exception(ex0);
            co_return std::optional<T>(std::move(r0));
        }
        if (ex1) std::rethrow_exception(ex1);
        co_return std::optional<T>{};
    }
}

}  // namespace tenure::detail
