// Shared state behind session, election and leadership_scope (internal).
#pragma once

#include <tenure/election.hpp>
#include <tenure/leadership_scope.hpp>
#include <tenure/semaphore.hpp>
#include <tenure/session.hpp>
#include <tenure/detail/race.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <deque>
#include <list>
#include <memory>
#include <optional>
#include <type_traits>
#include <string>
#include <vector>

namespace tenure::detail {

namespace asio = boost::asio;
using clock = std::chrono::steady_clock;

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
        std::list<asio::steady_timer*> waiters;
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
    asio::steady_timer parked(ex, clock::time_point::max());
    auto it = st->waiters.insert(st->waiters.end(), &parked);
    struct unlink {
        decltype(st) const& owner;  // (decltype: the state type is private to event)
        decltype(it) pos;
        ~unlink() { owner->waiters.erase(pos); }
    } guard{st, it};
    auto group = asio::experimental::make_parallel_group(asio::co_spawn(ex, std::move(op), asio::deferred),
                                                         parked.async_wait(asio::deferred));
    if constexpr (std::is_void_v<T>) {
        auto [order, ex0, ec1] = co_await std::move(group).async_wait(asio::experimental::wait_for_one(),
                                                                      asio::deferred);
        (void)ec1;
        if (order[0] == 0) {
            if (ex0) std::rethrow_exception(ex0);
            co_return true;
        }
        if (!st->set) throw boost::system::system_error(asio::error::operation_aborted);
        co_return false;
    } else {
        auto [order, ex0, r0, ec1] = co_await std::move(group).async_wait(asio::experimental::wait_for_one(),
                                                                          asio::deferred);
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

// The backend-agnostic half of a session: the renewal loop driven by
// session_fsm, loss propagation to scopes, close. A backend (Consul here;
// etcd's lease later) supplies the remote operations.
struct session_impl : std::enable_shared_from_this<session_impl> {
    session_impl(asio::any_io_executor ex, session_options o, std::string id, clock::time_point created_sent_at)
        : executor(ex), options(std::move(o)), id(std::move(id)), fsm(options.ttl, created_sent_at), wake(ex),
          lost_event(ex), monitor_timer(ex) {}
    virtual ~session_impl() = default;

    asio::any_io_executor executor;
    session_options options;
    std::string id;
    session_fsm fsm;
    asio::steady_timer wake;  // the renewal loop's timer
    event lost_event;
    bool closing = false;
    boost::system::error_code lost_reason;
    std::vector<std::function<void(session_state)>> callbacks;
    std::vector<std::weak_ptr<scope_state>> scopes;
    std::size_t scopes_pruned_at = 0;  // live scopes after the last pruning (see adopt())
    // Scopes whose monitor starts late (election_options::monitor_delay),
    // soonest first, under one timer: a term shorter than its delay costs a
    // push here, not a timer or a coroutine of its own.
    struct deferred_monitor {
        std::weak_ptr<scope_state> scope;
        clock::time_point due;         // acquired + monitor_delay
        clock::time_point start_from;  // acquired + 3/4 of it (see defer_monitor)
    };
    std::deque<deferred_monitor> deferred_monitors;
    asio::steady_timer monitor_timer;
    bool monitor_timer_armed = false;
    std::size_t deferred_pruned_at = 0;  // entries left after the last pruning

    // ---- backend operations ----
    // One renewal: true when acknowledged, false when the server no longer
    // knows the session (it was invalidated). Throws on transport errors.
    virtual asio::awaitable<bool> renew_once() = 0;
    // After a successful renewal (application health heartbeat).
    virtual asio::awaitable<void> after_renewal() { co_return; }
    // Destroys the session on the server (after its keys were released).
    virtual asio::awaitable<void> destroy_remote() = 0;
    // Last step of close(), errors ignored (deregister a health check).
    virtual asio::awaitable<void> cleanup() { co_return; }
    // Campaigns for `key` until held (or one attempt when `once`); nullptr
    // when `once` and not acquired. The scope is registered and monitored.
    virtual asio::awaitable<std::shared_ptr<scope_state>> acquire(std::string key, std::string value, bool once) = 0;
    // The same, with the election's options where the backend has a use for
    // them (Consul: shared_watch, quick_retake); by default they are ignored.
    virtual asio::awaitable<std::shared_ptr<scope_state>> acquire_shared(std::string key, std::string value, bool once,
                                                                         election_options const& /*options*/) {
        return acquire(std::move(key), std::move(value), once);
    }
    virtual asio::awaitable<std::optional<leader_info>> read_leader(std::string key) = 0;
    // Semaphore permits (src/consul/semaphore.cpp): campaigns for one of
    // `limit` slots under `prefix` until admitted (or one attempt when
    // `once`); nullptr when `once` and full. The permit scope is registered
    // and monitored. Default: error::operation_not_supported.
    virtual asio::awaitable<std::shared_ptr<scope_state>> acquire_permit(std::string prefix, int limit,
                                                                         std::string value, bool once);
    // The semaphore's coordination state (for tools).
    virtual asio::awaitable<semaphore_state> read_semaphore(std::string prefix, int limit);

    void start();
    asio::awaitable<void> renew_loop();
    void notify(session_state s);
    void mark_lost(boost::system::error_code why);
    asio::awaitable<void> close();
    // Registers a freshly acquired scope and starts its monitor (now, or
    // after the scope's monitor_delay).
    void adopt(std::shared_ptr<scope_state> const& s);
    void defer_monitor(std::shared_ptr<scope_state> const& s);
    void start_due_monitors();
    void arm_monitor_timer();
    void stop_deferred_monitors();
};

enum class scope_status { held, released, lost };

// The backend-agnostic half of a held key (or permit).
struct scope_state : std::enable_shared_from_this<scope_state> {
    scope_state(std::shared_ptr<session_impl> s, std::string k, std::string v)
        : session(std::move(s)), key(std::move(k)), value(std::move(v)), lost_event(session->executor) {}
    virtual ~scope_state() = default;

    std::shared_ptr<session_impl> session;
    std::string key;
    std::string value;
    std::uint64_t token = 0;
    scope_status status = scope_status::held;
    boost::system::error_code reason;
    event lost_event;
    asio::cancellation_signal monitor_cancel;
    clock::duration monitor_delay{};  // how long after the acquire the monitor starts

    // ---- backend operations ----
    // Watches the key until loss (calling lose()) or cancellation.
    virtual asio::awaitable<void> monitor() = 0;
    // Gives the key up on the server.
    virtual asio::awaitable<void> send_release() = 0;
    // Checks with a consistent read that the key is still ours: {} if so,
    // else why not.
    virtual asio::awaitable<boost::system::error_code> check_held() = 0;

    // True when the monitor should see the release through instead of being
    // cancelled: cancelling an HTTP blocking query closes its keep-alive
    // connection, while the release itself wakes the query at once.
    virtual bool monitor_outlives_release() const noexcept { return false; }

    void start_monitor();
    void lose(boost::system::error_code why);
    // Marks the scope released and stops the monitor (or lets it end with the
    // release); true when the caller should send the release to the server.
    bool begin_release();
    // send_release(), stopping the monitor if the release fails.
    asio::awaitable<void> release_remote();
};

struct scope_access {
    static leadership_scope make(std::shared_ptr<scope_state> s) { return leadership_scope(std::move(s)); }
};

// Sleeps `delay`, then doubles it (at most 1 s): the pause before retrying
// after a transient error. `delay` lives in the caller's frame.
asio::awaitable<void> pause_and_grow(clock::duration& delay);
asio::awaitable<void> sleep_until(clock::time_point t);
inline bool is_abort(boost::system::system_error const& e) { return e.code() == asio::error::operation_aborted; }

// Consul's session and lock algorithm (src/consul/lock.cpp).
asio::awaitable<std::shared_ptr<session_impl>> create_consul_session(consul::client& client, session_options options);

}  // namespace tenure::detail
