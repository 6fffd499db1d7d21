// Internal: the backend interface. The backend-agnostic halves of a session
// and of a held key (renewal loop, loss propagation, release) live here and in
// src/core; each backend (src/consul, src/etcd) derives from them and supplies
// the remote operations. Nothing here knows which service is behind them.
#pragma once

#include <tenure/election.hpp>
#include <tenure/fenced_write.hpp>
#include <tenure/leadership_scope.hpp>
#include <tenure/semaphore.hpp>
#include <tenure/session.hpp>

#include "core/event.hpp"
#include "core/session_fsm.hpp"

#include <tenure/detail/clock.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
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

struct scope_state;

// What a scope claims: a key alone (an election's lock), or one of `limit`
// slots under a prefix (a semaphore's permit).
enum class claim_kind { key, slot };

struct claim {
    claim_kind kind = claim_kind::key;
    std::string key;  // the lock key, or the slots' prefix
    std::string value;
    int limit = 1;
    bool once = false;  // one attempt
    // The election's options where the backend has a use for them (Consul:
    // shared_watch, quick_retake); nullptr: the defaults. Outlives acquire().
    election_options const* options = nullptr;
};

// Calls the handler if set; a throwing handler must not break the renewal loop.
inline void emit_event(leadership_event_handler const& h, leadership_event e) noexcept {
    if (!h) return;
    if (e.at == tenure::detail::clock::time_point{}) e.at = tenure::detail::clock::now();
    try {
        h(e);
    } catch (...) {
    }
}

// Who holds a claim's key, in the order its backend ranks them.
struct claim_holders {
    std::vector<leader_info> holders;     // key: the leader, if any
    std::vector<std::string> contenders;  // slot: sessions holding or waiting, sorted
    int limit = 1;                        // slot: the limit the holders agreed on
    std::uint64_t index = 0;              // slot: the coordination key's modify index
};

// The backend-agnostic half of a session: the renewal loop driven by
// session_fsm, loss propagation to scopes, close. A backend (a Consul
// session, an etcd lease) supplies the remote operations.
struct session_impl : std::enable_shared_from_this<session_impl> {
    session_impl(asio::any_io_executor ex, session_options o, std::string id, clock::time_point created_sent_at)
        : executor(ex), options(std::move(o)), id(std::move(id)), fsm(options.ttl, created_sent_at), wake(ex),
          lost_event(ex), monitor_timer(ex), background_idle(ex, clock::time_point::max()) {}
    virtual ~session_impl() = default;

    asio::any_io_executor executor;
    session_options options;
    std::string id;
    session_fsm fsm;
    tenure::detail::timer wake;  // the renewal loop's timer
    event lost_event;
    bool closing = false;
    boost::system::error_code lost_reason;
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
    tenure::detail::timer monitor_timer;
    bool monitor_timer_armed = false;
    std::size_t deferred_pruned_at = 0;  // entries left after the last pruning

    // The background work this session owns: its renewal loop, its scopes'
    // monitors, the releases their destructors start. close() completes only
    // once all of it has finished, so the io_context has nothing of the
    // session's left afterwards.
    int background = 0;
    tenure::detail::timer background_idle;  // cancelled when `background` drops to 0
    void spawn_owned(std::function<asio::awaitable<void>()> work, asio::cancellation_slot slot = {});
    asio::awaitable<void> background_finished();

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
    // Campaigns for the claim until held (or one attempt when `once`);
    // nullptr when `once` and not taken. The scope is registered and
    // monitored. A kind the backend cannot give fails with
    // operation_not_supported (documented per backend on the primitive).
    virtual asio::awaitable<std::shared_ptr<scope_state>> acquire(claim c) = 0;
    // Who holds the claim `key` of `kind` now (for leader() and tools).
    virtual asio::awaitable<claim_holders> read(claim_kind kind, std::string key, int limit) = 0;
    // The candidates waiting for the election key `key`, best first
    // (election::candidates); operation_not_supported where the backend
    // keeps no registry.
    virtual asio::awaitable<std::vector<candidate_info>> read_candidates(std::string key);

    void start();
    asio::awaitable<void> renew_loop();
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

// What a leader_observer reads its changes from (one per backend).
struct observer_backend {
    virtual ~observer_backend() = default;
    // The first call answers at once with the current holder; each later one
    // completes when the holder changes (nullopt: nobody holds the key).
    virtual asio::awaitable<std::optional<leader_info>> next() = 0;
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
    // The last release sent did not go through (an error, a cancellation):
    // the key may still be held, and the next release(), close() or the
    // scope's destructor sends it again.
    bool release_failed = false;
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
    // Applies `writes` in one transaction the server commits only while this
    // scope's session holds its key (fenced_write.hpp): false when refused.
    // The writes' keys are not empty.
    virtual asio::awaitable<bool> fenced_write(std::vector<write_op> writes) = 0;
    // Hands the key to the waiting candidate `target` (a session id or name)
    // and ends the scope with `reason` (transferred, yielded): the target's
    // new token. operation_not_supported where the backend cannot.
    virtual asio::awaitable<std::uint64_t> transfer(std::string target, boost::system::error_code reason);
    // Called once when the scope stops being held (lost or released).
    virtual void on_end() noexcept {}

    // True when the monitor should see the release through instead of being
    // cancelled: cancelling an HTTP blocking query closes its keep-alive
    // connection, while the release itself wakes the query at once.
    virtual bool monitor_outlives_release() const noexcept { return false; }

    // Starts monitor() (owned by the session, stopped by monitor_cancel); a
    // backend may watch another way until there is something to look at.
    virtual void start_monitor();
    // Reports `kind` of this scope to the session's on_event, if it has one
    // (nothing is built without: the event copies the key and session id).
    void emit(leadership_event_kind kind, boost::system::error_code why = {}) const noexcept;
    void lose(boost::system::error_code why);
    // Marks the scope released and stops the monitor (or lets it end with the
    // release); true when the caller should send the release to the server
    // (also again after a release that failed).
    bool begin_release();
    // send_release(), stopping the monitor if the release fails.
    asio::awaitable<void> release_remote();
};

// The session behind a tenure::session (null for an empty one).
struct session_access {
    static std::shared_ptr<session_impl> const& impl(session const& s) noexcept { return s.impl_; }
};

struct scope_access {
    static leadership_scope make(std::shared_ptr<scope_state> s) { return leadership_scope(std::move(s)); }
    static std::shared_ptr<scope_state> const& state(leadership_scope const& s) noexcept { return s.state_; }
};

}  // namespace tenure::detail
