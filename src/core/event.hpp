// Internal: the waiting primitives every layer above core builds on - a
// level-triggered event, races against it and against deadlines, sleeps.
#pragma once

#include "core/race.hpp"

#include <tenure/detail/clock.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <chrono>
#include <list>
#include <memory>
#include <optional>
#include <type_traits>

namespace tenure::detail {

namespace asio = boost::asio;

// A level-triggered event several coroutines can await. Each waiter parks on
// a timer of its own, listed here: set() cancels them all, and a waiter that
// leaves (cancelled) unlinks in O(1). One timer shared by all waiters would
// make each departure a scan of every other waiter's operation (Asio's
// cancel_timer_by_key), quadratic with 10 000 elections on one session.
class event {
public:
    explicit event(asio::any_io_executor ex) : ex_(std::move(ex)), state_(std::make_shared<state>()) {}
    void set() {
        state_->set = true;
        for (auto* t : state_->waiters) t->cancel();
    }
    bool is_set() const noexcept { return state_->set; }
    // Completes once set(); throws operation_aborted if the awaiting
    // coroutine is cancelled first.
    asio::awaitable<void> wait();

    template <class T>
    friend asio::awaitable<std::conditional_t<std::is_void_v<T>, bool, std::optional<T>>> race(asio::awaitable<T> op,
                                                                                              event& e);

private:
    struct state {
        bool set = false;
        std::list<tenure::detail::timer*> waiters;
    };
    asio::any_io_executor ex_;
    std::shared_ptr<state> state_;  // shared with waiters, which may outlive the event
};

// Runs `op` until it completes or `e` is set, whichever comes first: like
// race(op, e.wait()), which it replaces on the hot paths (every acquire()
// and run()). The event side is a bare timer wait, not a second coroutine,
// and it ends with an error code rather than an exception, so the usual
// outcome - op finishes first - costs no throw. Returns op's result, or
// nullopt (false for void) when the event came first; rethrows op's
// exception; throws operation_aborted when the caller is cancelled.
template <class T>
asio::awaitable<std::conditional_t<std::is_void_v<T>, bool, std::optional<T>>> race(asio::awaitable<T> op, event& e) {
    using result = std::conditional_t<std::is_void_v<T>, bool, std::optional<T>>;
    auto st = e.state_;
    auto ex = co_await asio::this_coro::executor;
    if (st->set) co_return result{};
    tenure::detail::timer parked(ex, clock::time_point::max());
    auto it = st->waiters.insert(st->waiters.end(), &parked);
    struct unlink {
        decltype(st) const& owner;  // (decltype: the state type is private to event)
        decltype(it) pos;
        ~unlink() { owner->waiters.erase(pos); }
    } guard{st, it};
    asio::cancellation_state const state = co_await asio::this_coro::cancellation_state;
    terminal_forwarder cancel(state.slot());
    auto group = asio::experimental::make_parallel_group(asio::co_spawn(ex, std::move(op), asio::deferred),
                                                         parked.async_wait(asio::deferred));
    if constexpr (std::is_void_v<T>) {
        auto [order, ex0, ec1] = co_await std::move(group).async_wait(
            asio::experimental::wait_for_one(), asio::bind_cancellation_slot(cancel.slot(), asio::use_awaitable));
        (void)ec1;
        if (order[0] == 0) {
            if (ex0) std::rethrow_exception(ex0);
            co_return true;
        }
        if (!st->set) throw boost::system::system_error(asio::error::operation_aborted);
        co_return false;
    } else {
        auto [order, ex0, r0, ec1] = co_await std::move(group).async_wait(
            asio::experimental::wait_for_one(), asio::bind_cancellation_slot(cancel.slot(), asio::use_awaitable));
        (void)ec1;
        if (order[0] == 0) {
            if (ex0) std::rethrow_exception(ex0);
            co_return result(std::move(r0));
        }
        if (!st->set) throw boost::system::system_error(asio::error::operation_aborted);
        co_return result{};
    }
}

inline asio::awaitable<void> wait_until(clock::time_point deadline) {
    tenure::detail::timer timer(co_await asio::this_coro::executor, deadline);
    co_await timer.async_wait(asio::use_awaitable);
}

// Races `op` against a deadline: throws timed_out when the deadline wins
// (the operation is cancelled first).
template <class T>
asio::awaitable<T> with_deadline(asio::awaitable<T> op, clock::time_point deadline) {
    auto r = co_await race(std::move(op), wait_until(deadline));
    if (!r) throw boost::system::system_error(asio::error::timed_out);
    if constexpr (!std::is_void_v<T>) co_return std::move(*r);
}

// Sleeps `delay`, then doubles it (at most 1 s): the pause before retrying
// after a transient error. `delay` lives in the caller's frame.
asio::awaitable<void> pause_and_grow(clock::duration& delay);
asio::awaitable<void> sleep_until(clock::time_point t);
inline bool is_abort(boost::system::system_error const& e) { return e.code() == asio::error::operation_aborted; }

}  // namespace tenure::detail
