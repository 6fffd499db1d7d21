// Internal: the waiting primitives every layer above core builds on - a
// level-triggered event, races against it and against deadlines, sleeps.
#pragma once

#include "core/race.hpp"

#include <tenure/detail/clock.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <chrono>
#include <exception>
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
    struct state;

public:
    explicit event(asio::any_io_executor ex) : ex_(std::move(ex)), state_(std::make_shared<state>()) {}
    void set() {
        auto st = state_;  // a race that ends here may drop the last other owner
        if (st->set) return;
        st->set = true;
        for (auto* t : st->waiters) t->cancel();
        // A cancellation handler may end a race (and unlink it) before
        // emit() returns: the cursor moves on before each link fires, and a
        // link that goes while it is the cursor moves it on itself.
        st->cursor = st->races;
        while (race_link* l = st->cursor) {
            st->cursor = l->next_;
            l->fire();
        }
    }
    bool is_set() const noexcept { return state_->set; }
    // Completes once set(); throws operation_aborted if the awaiting
    // coroutine is cancelled first.
    asio::awaitable<void> wait();

    // One operation raced against the event: its cancellation slot is
    // emitted (terminal) by set(), and by the awaiting coroutine's own
    // cancellation of any type (a co_spawned coroutine lets in terminal
    // only). Listed in the event's state while it lives, in O(1).
    class race_link {
    public:
        race_link(event const& e, asio::cancellation_slot from) : state_(e.state_), from_(from) {
            next_ = state_->races;
            if (next_) next_->prev_ = this;
            state_->races = this;
            if (from_.is_connected())
                from_.assign([this](asio::cancellation_type t) {
                    if (t != asio::cancellation_type::none) signal_.emit(asio::cancellation_type::terminal);
                });
        }
        ~race_link() {
            if (from_.is_connected()) from_.clear();
            if (state_->cursor == this) state_->cursor = next_;
            (prev_ ? prev_->next_ : state_->races) = next_;
            if (next_) next_->prev_ = prev_;
        }
        race_link(race_link const&) = delete;
        race_link& operator=(race_link const&) = delete;
        asio::cancellation_slot slot() { return signal_.slot(); }
        // Whether the event was set while the operation ran.
        bool fired() const noexcept { return fired_; }

    private:
        friend class event;
        void fire() {
            fired_ = true;
            signal_.emit(asio::cancellation_type::terminal);
        }
        std::shared_ptr<state> state_;
        asio::cancellation_slot from_;
        asio::cancellation_signal signal_;
        race_link* prev_ = nullptr;
        race_link* next_ = nullptr;
        bool fired_ = false;
    };

private:
    struct state {
        bool set = false;
        std::list<tenure::detail::timer*> waiters;
        race_link* races = nullptr;   // the races in progress, most recent first
        race_link* cursor = nullptr;  // the next race set() fires
    };
    asio::any_io_executor ex_;
    std::shared_ptr<state> state_;  // shared with waiters, which may outlive the event
};

// Runs `op` until it completes or `e` is set, whichever comes first: like
// race(op, e.wait()), which it replaces on the hot paths (every acquire()
// and run()). The event side is no second coroutine, timer or group: the
// event's set() cancels `op` through the slot `op` runs under, and `op`
// ending is the race's end. Returns op's result, or nullopt (false for
// void) when the event came first (whatever op then ended with); rethrows
// op's exception; throws operation_aborted when the caller is cancelled.
template <class T>
asio::awaitable<std::conditional_t<std::is_void_v<T>, bool, std::optional<T>>> race(asio::awaitable<T> op, event& e) {
    using result = std::conditional_t<std::is_void_v<T>, bool, std::optional<T>>;
    if (e.is_set()) co_return result{};
    auto ex = co_await asio::this_coro::executor;
    asio::cancellation_state const state = co_await asio::this_coro::cancellation_state;
    event::race_link link(e, state.slot());
    auto token = asio::bind_cancellation_slot(link.slot(), asio::use_awaitable);
    std::exception_ptr failed;
    result r{};
    try {
        if constexpr (std::is_void_v<T>) {
            co_await asio::co_spawn(ex, std::move(op), token);
            r = true;
        } else {
            r.emplace(co_await asio::co_spawn(ex, std::move(op), token));
        }
    } catch (...) {
        failed = std::current_exception();
    }
    if (link.fired()) co_return result{};
    if (failed) std::rethrow_exception(failed);
    co_return r;
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
