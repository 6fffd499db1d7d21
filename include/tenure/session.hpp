/// @file
/// tenure::session — a Consul session kept alive by a renewal coroutine on the
/// client's executor.
///
/// Renewal every TTL/2; after an error a retry at least every second until a
/// full TTL has passed since the send time of the last acknowledged renewal
/// (the local deadline). States healthy -> jeopardy (renewals failing, deadline
/// not reached) -> lost. A 404 on renew means the server invalidated the
/// session. Every leadership_scope taken with the session is lost with it.
/// Each change is an event on session_options::on_event: `jeopardy` (a
/// renewal failed), `renewed` (healthy, again after a jeopardy), `lost`.
#pragma once

#include <tenure/detail/clock.hpp>
#include <tenure/config.hpp>
#include <tenure/consul/client.hpp>
#include <tenure/events.hpp>
#if TENURE_HAS_ETCD
#include <tenure/etcd/client.hpp>
#endif
#include <tenure/detail/async_bridge.hpp>

#include <boost/asio/deferred.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tenure {

/// How sure the holder is of its lease: healthy (the last renewal is recent),
/// jeopardy (renewals are failing, the local deadline is not reached yet) or
/// lost (the deadline passed, or the server invalidated the session).
enum class session_state { healthy, jeopardy, lost };

struct session_options {
    std::string name = "tenure session";
    std::chrono::nanoseconds ttl = std::chrono::seconds{15};
    /// Applied by the server to every key the session holds when it is
    /// invalidated (not on a clean release). 0 disables it. On etcd it is
    /// applied only with lock_delay_on_etcd (see below).
    std::chrono::nanoseconds lock_delay = std::chrono::seconds{15};
    consul::session_behavior behavior = consul::session_behavior::release;
    /// nullopt: the server's default node checks (serfHealth).
    std::optional<std::vector<std::string>> node_checks;
    /// Application health: when set, the session registers a TTL check with
    /// this TTL, binds it to the session and heartbeats it with each renewal,
    /// so the session dies if the process stops heartbeating.
    std::optional<std::chrono::nanoseconds> health_check_ttl;
    /// Asked before each heartbeat of that check; false reports the check
    /// critical, which invalidates the session (and so ends leadership).
    std::function<bool()> health_probe;
    /// etcd has no server-side lock-delay; tenure emulates it in the waiting
    /// candidate (see session::create for etcd). Off by default, so that
    /// failover on etcd stays one lease TTL as with `etcdctl elect` and the
    /// 15 s Consul default above does not silently slow etcd users down.
    /// true: a candidate of this session applies lock_delay on etcd.
    bool lock_delay_on_etcd = false;
    /// The one stream of notifications: every event of this session and the
    /// keys it holds (acquired, renewed, jeopardy, released, lost), on the
    /// session's executor; see events.hpp. To await a loss instead, use
    /// session::wait_lost() or leadership_scope::wait_lost().
    leadership_event_handler on_event;
};

namespace detail {
struct session_impl;
struct session_access;
}

/// Threads: a session runs on its client's executor, as does everything made
/// from it; with an io_context run by several threads, put the client on a
/// strand and use the session only from it (docs/reference/index.md, "Threads").
class session {
public:
    using executor_type = boost::asio::any_io_executor;
    using clock = tenure::detail::clock;

    /// An empty session; assign one from create().
    session() = default;
    session(session&&) noexcept = default;
    session& operator=(session&&) noexcept;
    /// Closes the session in the background (release held keys, then destroy)
    /// if it was not closed explicitly.
    ~session();

    /// Creates a session on a Consul agent (or `tenure agent`) and starts its
    /// renewal coroutine on the client's executor: a renewal every TTL/2, retries at
    /// least every second after an error, lost at the local deadline. With
    /// `health_check_ttl` the application check is registered first and bound to
    /// the session.
    ///
    /// @async_completion{void(boost::system::error_code, tenure::session)}
    /// @async_cancellation
    /// Terminal: completes with `operation_aborted`. A session the server created
    /// just before the cancellation is not renewed and lapses after 2 x TTL.
    /// @async_errors
    /// Transport errors (`connection_refused`, `timed_out`, ...);
    /// `error::http_status` when the server refuses the request (for example a TTL
    /// below its `session_ttl_min`); `error::unexpected_response`.
    /// @async_lifetimes
    /// The client must outlive the operation and the session. `options` is taken by
    /// value.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    static auto create(consul::client& client, session_options options, CompletionToken&& token = {}) {
        return detail::async_run(client.get_executor(), create_impl(client, std::move(options)),
                                 std::forward<CompletionToken>(token));
    }

#if TENURE_HAS_ETCD
    /// Creates a session on etcd: a lease of `ttl` seconds (rounded up, at least 1;
    /// etcd may raise it to its minimum), kept alive every TTL/3. `id()` is the
    /// lease ID in lowercase hex (etcd's election key suffix). `close()` deletes the
    /// session's election keys before it revokes the lease (a clean handover); when
    /// a candidate was waiting behind a key it deleted, close() revokes only
    /// min(TTL/3, 500 ms) after that delete, the moment such a candidate needs to see
    /// the lease alive (see below). `behavior`, `node_checks` and `health_check_ttl`
    /// are Consul-only.
    ///
    /// Lock-delay on etcd (only with `options.lock_delay_on_etcd`): etcd keeps no
    /// lock-delay, so the waiting candidate applies its own `lock_delay`. When the
    /// predecessor it waits on disappears, it asks etcd whether that predecessor's
    /// lease still exists: yes means a clean resign, no wait; no means the lease
    /// expired or was revoked with the key still on it, and if this candidate is now
    /// first in line, `acquire()` completes only `lock_delay` after it saw the key
    /// go. Meanwhile its own key and lease are watched: losing either ends
    /// `acquire()` with the error. Limits: only a candidate already waiting sees a
    /// lease end (one that campaigns later, and `try_acquire()`, lead at once); a
    /// candidate that withdraws during its quiet period does not pass the rest on;
    /// a holder that resigns and revokes its lease before the candidate asked
    /// (another client than tenure, or a candidate slower than close()'s pause) is
    /// taken for a revoke (the error is on the safe side: a wait).
    ///
    /// @async_completion{void(boost::system::error_code, tenure::session)}
    /// @async_cancellation
    /// Terminal: completes with `operation_aborted`. A lease granted just before
    /// the cancellation is not kept alive and expires after its TTL.
    /// @async_errors
    /// `error::etcd_unavailable`, `error::etcd_error` (etcd answered a gRPC error),
    /// transport errors once every endpoint has failed.
    /// @async_lifetimes
    /// The etcd client must outlive the operation and the session. `options` is
    /// taken by value.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    static auto create(etcd::client& client, session_options options, CompletionToken&& token = {}) {
        return detail::async_run(client.get_executor(), create_impl(client, std::move(options)),
                                 std::forward<CompletionToken>(token));
    }
#endif

    bool valid() const noexcept { return impl_ != nullptr; }
    std::string const& id() const;
    session_options const& options() const;
    executor_type get_executor() const;

    session_state state() const;
    /// Why the session was lost (meaningful once state() == lost).
    boost::system::error_code lost_reason() const;
    /// Send time of the last acknowledged renewal + TTL.
    clock::time_point local_deadline() const;

    /// Completes when the session is lost, with the reason as the error.
    ///
    /// @async_completion{void(boost::system::error_code reason)}
    /// @async_cancellation
    /// Terminal, partial and total: completes with `operation_aborted`; nothing
    /// changes, the session is unaffected.
    /// @async_errors
    /// The loss reason: `error::session_invalidated` (the server invalidated it),
    /// `error::lease_expired_locally` (no renewal acknowledged before the local
    /// deadline), `error::lease_not_found` on etcd, `error::leadership_lost` after
    /// close(); `error::no_session` for an empty session.
    /// @async_lifetimes
    /// The session object must not be destroyed or moved from until the operation
    /// completes.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto wait_lost(CompletionToken&& token = {}) {
        return detail::async_run(get_executor(), wait_lost_impl(), std::forward<CompletionToken>(token),
                                 detail::cancel_on::any);
    }

    /// Releases every key held through this session, then destroys it on the server
    /// (release first, so a clean shutdown imposes no lock-delay on the next
    /// holder). On etcd: deletes the session's election keys, then revokes the
    /// lease.
    ///
    /// The session owns all the background work it and its scopes start: the
    /// renewal loop, each scope's monitor, and the release a scope's destructor
    /// sends. close() completes only once every one of them has finished, so
    /// nothing of the session is left on the io_context afterwards (an
    /// io_context with no other work returns from run()). A session destroyed
    /// without close() closes in the background, and that close (with what it
    /// waits for) is the io_context's: run() returns once it has finished.
    ///
    /// @async_completion{void(boost::system::error_code)}
    /// @async_cancellation
    /// Terminal: completes with `operation_aborted`; the session may then remain on
    /// the server until its TTL lapses, and keys it still holds are freed only then
    /// (with its lock-delay).
    /// @async_errors
    /// Transport and HTTP errors of the release or the destroy (the session is
    /// stopped locally either way). An empty session completes at once with
    /// success: there is nothing to close.
    /// @async_lifetimes
    /// The session object and its client must outlive the operation.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto close(CompletionToken&& token = {}) {
        return detail::async_run(get_executor(), close_impl(), std::forward<CompletionToken>(token));
    }

private:
    friend struct detail::session_access;
    explicit session(std::shared_ptr<detail::session_impl> impl) : impl_(std::move(impl)) {}
    static boost::asio::awaitable<session> create_impl(consul::client& client, session_options options);
#if TENURE_HAS_ETCD
    static boost::asio::awaitable<session> create_impl(etcd::client& client, session_options options);
#endif
    boost::asio::awaitable<void> wait_lost_impl();
    boost::asio::awaitable<void> close_impl();

    std::shared_ptr<detail::session_impl> impl_;
};

}  // namespace tenure
