/// @file
/// tenure::leadership_scope — proof of holding a lock key, RAII.
///
/// While the scope holds the key, a monitor (a consistent blocking query on the
/// key, started election_options::monitor_delay after the acquire) and the
/// session's local deadline watch for loss. Loss cancels the work
/// started with run() through Asio per-operation cancellation (terminal) and
/// records why: released_by_other, key_deleted, session_invalidated,
/// lease_expired_locally, transferred (transfer_to, an operator request) or
/// yielded (election_options::yield_to_higher). Transient errors (a 500, a dropped connection) are
/// retried within the lease and are not a loss.
///
/// The key is released when the scope is destroyed (in the background) or by
/// release(). run() returns only after the work has finished, so a scope that
/// leaves its block releases the key after its work.
#pragma once

#include <tenure/detail/async_bridge.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <cstdint>
#include <memory>
#include <string>

namespace tenure {

namespace detail {
struct scope_state;
struct scope_access;
}

/// The fencing token of a lock: the key's LockIndex, which only grows while the
/// key exists. A protected resource rejects writes stamped with an older one.
struct fencing_token {
    std::string key;
    std::uint64_t value = 0;
    friend bool operator==(fencing_token const&, fencing_token const&) = default;
};

class leadership_scope {
public:
    leadership_scope() = default;
    leadership_scope(leadership_scope&&) noexcept = default;
    leadership_scope& operator=(leadership_scope&&) noexcept;
    ~leadership_scope();

    /// True while the key is held: acquired, not released, not lost.
    bool held() const noexcept;
    explicit operator bool() const noexcept { return held(); }
    bool lost() const noexcept;
    /// Why leadership ended (empty while held or after a clean release).
    boost::system::error_code loss_reason() const noexcept;

    /// The LockIndex at acquisition: the fencing token.
    std::uint64_t token() const noexcept;
    fencing_token fencing() const;
    std::string const& key() const noexcept;
    std::string const& session_id() const noexcept;
    std::string const& value() const noexcept;

    /// Runs `work` while leading. Completes with `true` when the work finished while
    /// leading, or with `false` when leadership was lost (or released), after the
    /// work has been cancelled and has finished; loss_reason() then says why.
    ///
    /// @async_completion{void(boost::system::error_code, bool finished)}
    /// @async_cancellation
    /// Terminal: forwarded to the work, which is cancelled; the operation completes
    /// once the work has finished (with its error, typically `operation_aborted`).
    /// Leadership itself is unaffected.
    /// @async_errors
    /// A `boost::system::system_error` thrown by the work completes the operation
    /// with its code; any other exception with `error::unexpected_response`;
    /// `error::not_held` for an empty scope (the work is not started).
    /// @async_lifetimes
    /// The operation keeps the scope's state alive; what the work refers to
    /// (usually the scope itself) must outlive the operation.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto run(boost::asio::awaitable<void> work, CompletionToken&& token = {}) {
        return detail::async_run(get_executor(), run_impl(state_, std::move(work)),
                                 std::forward<CompletionToken>(token));
    }

    /// Completes when leadership is lost, with the reason; with `error::not_held`
    /// right away if the scope does not hold the key, or once it is released.
    ///
    /// @async_completion{void(boost::system::error_code reason)}
    /// @async_cancellation
    /// Terminal, partial and total: completes with `operation_aborted`; nothing
    /// changes.
    /// @async_errors
    /// The loss reason: `error::released_by_other`, `error::key_deleted`,
    /// `error::session_invalidated`, `error::lease_expired_locally`, `error::transferred`,
    /// `error::yielded`;
    /// `error::not_held`.
    /// @async_lifetimes
    /// The operation keeps the scope's state alive; the scope object may go away
    /// meanwhile (which releases the key).
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto wait_lost(CompletionToken&& token = {}) {
        return detail::async_run(get_executor(), wait_lost_impl(state_), std::forward<CompletionToken>(token),
                                 detail::cancel_on::any);
    }

    /// Releases the key (`?release=` on Consul, a delete on etcd): no lock-delay
    /// for the next holder. Does nothing for an empty or already released scope
    /// (a release that failed or was cancelled is sent again).
    /// On Consul a release answered 429 or 503 (a rate limit: come back later)
    /// is sent again, after 50 ms doubling up to 1 s, until the session's local
    /// deadline: given up, the key would stay held until the session ended.
    ///
    /// @async_completion{void(boost::system::error_code)}
    /// @async_cancellation
    /// Terminal: completes with `operation_aborted`; the key may stay held until
    /// it is released again (release(), the session's close() or the scope's
    /// destructor send it again) or the session ends.
    /// @async_errors
    /// Transport and HTTP errors of the release (a 429 or 503 only once the
    /// session's local deadline is near).
    /// @async_lifetimes
    /// The operation keeps the scope's state alive; the session's client must
    /// outlive it.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto release(CompletionToken&& token = {}) {
        return detail::async_run(get_executor(), release_impl(state_), std::forward<CompletionToken>(token));
    }

    /// Hands the key to a waiting candidate, named by its session id or its
    /// session name (the best-ranked one of that name), in one step: on Consul
    /// one `/v1/txn` that unlocks the key for this session and locks it for
    /// the target's, at one index, without lock-delay; LockIndex (the fencing
    /// token) grows by one. The target's pending acquire() completes with the
    /// new token. This scope then ends with `error::transferred` and the work
    /// started with run() is cancelled. Completes with the target's token.
    ///
    /// @async_completion{void(boost::system::error_code, std::uint64_t token)}
    /// @async_cancellation
    /// Terminal: before the transaction is sent (while the registry is read),
    /// completes with `operation_aborted` and nothing changes; once it is sent
    /// it is not withdrawn (it could commit all the same), and the operation
    /// completes with its outcome.
    /// @async_errors
    /// `error::no_such_candidate` when no waiting candidate has that id or
    /// name (nothing changes); `error::not_held` when this scope does not hold
    /// the key; `error::operation_not_supported` on etcd (its election order is
    /// the create revision, which `etcdctl elect` candidates rely on); transport
    /// and HTTP errors.
    /// @async_lifetimes
    /// The operation keeps the scope's state alive; the session's client must
    /// outlive it.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto transfer_to(std::string candidate, CompletionToken&& token = {}) {
        return detail::async_run(get_executor(), transfer_impl(state_, std::move(candidate)),
                                 std::forward<CompletionToken>(token));
    }

    /// Re-checks with a consistent read that this session still holds the key, for
    /// jobs that verify leadership right before each side effect. A `false` answer
    /// also marks the scope lost (which cancels the work started with run()).
    ///
    /// @async_completion{void(boost::system::error_code, bool held)}
    /// @async_cancellation
    /// Terminal, partial and total: completes with `operation_aborted`; nothing
    /// changes.
    /// @async_errors
    /// Transport and HTTP errors of the read.
    /// @async_lifetimes
    /// The operation keeps the scope's state alive; the session's client must
    /// outlive it.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto confirm(CompletionToken&& token = {}) {
        return detail::async_run(get_executor(), confirm_impl(state_), std::forward<CompletionToken>(token),
                                 detail::cancel_on::any);
    }

    /// The session's executor; a null one for an empty scope (default-constructed
    /// or moved from), whose operations then complete through their handlers on
    /// the handler's associated executor.
    boost::asio::any_io_executor get_executor() const;

private:
    friend struct detail::scope_access;
    explicit leadership_scope(std::shared_ptr<detail::scope_state> s) : state_(std::move(s)) {}

    static boost::asio::awaitable<bool> run_impl(std::shared_ptr<detail::scope_state> s,
                                                                      boost::asio::awaitable<void> work);
    static boost::asio::awaitable<void> wait_lost_impl(std::shared_ptr<detail::scope_state> s);
    static boost::asio::awaitable<void> release_impl(std::shared_ptr<detail::scope_state> s);
    static boost::asio::awaitable<bool> confirm_impl(std::shared_ptr<detail::scope_state> s);
    static boost::asio::awaitable<std::uint64_t> transfer_impl(std::shared_ptr<detail::scope_state> s,
                                                               std::string candidate);

    std::shared_ptr<detail::scope_state> state_;
};

}  // namespace tenure
