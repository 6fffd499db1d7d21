// Shared state behind session, election and leadership_scope (internal).
#pragma once

#include <tenure/election.hpp>
#include <tenure/leadership_scope.hpp>
#include <tenure/session.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <memory>
#include <string>
#include <vector>

namespace tenure::detail {

namespace asio = boost::asio;
using clock = std::chrono::steady_clock;

// A level-triggered event several coroutines can await: a timer that never
// expires and is cancelled to wake everyone.
class event {
public:
    explicit event(asio::any_io_executor ex) : timer_(ex, clock::time_point::max()) {}
    void set() {
        set_ = true;
        timer_.cancel();
    }
    bool is_set() const noexcept { return set_; }
    // Completes once set(); throws operation_aborted if the awaiting
    // coroutine is cancelled first.
    asio::awaitable<void> wait();

private:
    asio::steady_timer timer_;
    bool set_ = false;
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

inline asio::awaitable<void> wait_until(clock::time_point deadline) {
    asio::steady_timer timer(co_await asio::this_coro::executor, deadline);
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

struct scope_state;

struct session_impl : std::enable_shared_from_this<session_impl> {
    session_impl(consul::client& c, session_options o, std::string id, clock::time_point created_sent_at)
        : client(c), options(std::move(o)), id(std::move(id)), fsm(options.ttl, created_sent_at),
          wake(c.get_executor()), lost_event(c.get_executor()) {}

    consul::client& client;
    session_options options;
    std::string id;
    std::string check_id;  // application health check, if any
    session_fsm fsm;
    asio::steady_timer wake;  // the renewal loop's timer
    event lost_event;
    bool closing = false;
    boost::system::error_code lost_reason;
    std::vector<std::function<void(session_state)>> callbacks;
    std::vector<std::weak_ptr<scope_state>> scopes;

    void start();
    asio::awaitable<void> renew_loop();
    asio::awaitable<void> heartbeat();
    void notify(session_state s);
    void mark_lost(boost::system::error_code why);
    asio::awaitable<void> close();
};

enum class scope_status { held, released, lost };

struct scope_state : std::enable_shared_from_this<scope_state> {
    scope_state(std::shared_ptr<session_impl> s, std::string k, std::string v)
        : session(std::move(s)), key(std::move(k)), value(std::move(v)), lost_event(session->client.get_executor()) {}

    std::shared_ptr<session_impl> session;
    std::string key;
    std::string value;
    std::uint64_t token = 0;
    std::uint64_t modify_index = 0;
    scope_status status = scope_status::held;
    boost::system::error_code reason;
    event lost_event;
    asio::cancellation_signal monitor_cancel;

    void start_monitor();
    asio::awaitable<void> monitor();
    void lose(boost::system::error_code why);
    // Marks the scope released and stops the monitor; the caller sends ?release=.
    bool begin_release();
    asio::awaitable<void> send_release();
};

struct scope_access {
    static leadership_scope make(std::shared_ptr<scope_state> s) { return leadership_scope(std::move(s)); }
};

}  // namespace tenure::detail
