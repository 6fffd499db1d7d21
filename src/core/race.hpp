// detail::race - the first of two coroutines to complete wins.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <exception>
#include <optional>
#include <type_traits>

namespace tenure::detail {

namespace asio = boost::asio;

// A race's cancellation, from the awaiting coroutine's: any type, passed on
// as terminal. A parallel group hands the type it is cancelled with to its
// branches, and a co_spawned branch lets terminal in only (Asio's default):
// a partial or total cancellation - which an operation that takes every type
// lets through to the race when it runs in its caller's coroutine - would
// stop neither branch, and the group, having counted it as its cancellation,
// would not pass on the terminal one its first completion asks for.
class terminal_forwarder {
public:
    explicit terminal_forwarder(asio::cancellation_slot from) : from_(from) {
        if (from_.is_connected())
            from_.assign([this](asio::cancellation_type t) {
                if (t != asio::cancellation_type::none) signal_.emit(asio::cancellation_type::terminal);
            });
    }
    ~terminal_forwarder() {
        if (from_.is_connected()) from_.clear();
    }
    terminal_forwarder(terminal_forwarder const&) = delete;
    terminal_forwarder& operator=(terminal_forwarder const&) = delete;
    // For the group's wait (bind_cancellation_slot).
    asio::cancellation_slot slot() { return from_.is_connected() ? signal_.slot() : asio::cancellation_slot(); }

private:
    asio::cancellation_slot from_;
    asio::cancellation_signal signal_;
};

// Runs `a` and `b` concurrently. The first to COMPLETE - with a result or
// with an exception - wins, and the other is cancelled and awaited. (Asio's
// operator|| waits for the first to *succeed*, so a failing branch would wait
// for the other one.) Returns a's result, or nullopt (false for void) when b
// completed first; rethrows the winner's exception.
template <class T>
asio::awaitable<std::conditional_t<std::is_void_v<T>, bool, std::optional<T>>> race(asio::awaitable<T> a,
                                                                                    asio::awaitable<void> b) {
    auto ex = co_await asio::this_coro::executor;
    asio::cancellation_state const state = co_await asio::this_coro::cancellation_state;
    terminal_forwarder cancel(state.slot());
    if constexpr (std::is_void_v<T>) {
        auto [order, ex0, ex1] = co_await asio::experimental::make_parallel_group(
                                     asio::co_spawn(ex, std::move(a), asio::deferred),
                                     asio::co_spawn(ex, std::move(b), asio::deferred))
                                     .async_wait(asio::experimental::wait_for_one(),
                                                 asio::bind_cancellation_slot(cancel.slot(), asio::use_awaitable));
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
                                         .async_wait(asio::experimental::wait_for_one(),
                                                     asio::bind_cancellation_slot(cancel.slot(), asio::use_awaitable));
        if (order[0] == 0) {
            if (ex0) std::rethrow_exception(ex0);
            co_return std::optional<T>(std::move(r0));
        }
        if (ex1) std::rethrow_exception(ex1);
        co_return std::optional<T>{};
    }
}

}  // namespace tenure::detail
