/// @file
/// tenure::semaphore — up to N holders of a KV prefix, with Consul's semaphore
/// protocol byte for byte (the Go api.Semaphore and `consul lock -n N`), so
/// tenure, Go programs and `consul lock` can share one semaphore:
///
///   - each contender takes `prefix/<session id>` for its session
///     (`?acquire=<sid>&flags=16210313421097356768`, body = value);
///   - `prefix/.lock` holds Go's compact json.Marshal of
///     `{"Limit":N,"Holders":{"<sid>":true,...}}` (keys sorted), written only by
///     CAS (`?cas=<ModifyIndex>`, cas=0 when absent) with the same flags;
///   - a holder whose session no longer holds any key under the prefix is
///     pruned by the next writer, so a crashed holder frees its slot once its
///     session ends.
///
///     tenure::session s = co_await tenure::session::create(consul, opts);  // behavior = delete_keys
///     tenure::semaphore sem{s, "service/batch", 3, "worker-7"};
///     tenure::leadership_scope permit = co_await sem.acquire();
///     co_await permit.run(job());  // cancelled the moment the permit is lost
///
/// The permit is a tenure::leadership_scope: run(), release(), wait_lost(),
/// confirm() and loss cancellation behave as for a lock. Its key() is the
/// contender key `prefix/<session id>`; its token() is the ModifyIndex of the
/// `.lock` write that admitted it, read back right after the CAS (if other
/// contenders wrote `.lock` in between, a later ModifyIndex of `.lock`, never
/// an earlier one); tokens grow with each admission on a prefix. Loss reasons:
/// released_by_other (someone rewrote `.lock` without us, or released our
/// contender key), key_deleted (our contender key was deleted),
/// session_invalidated, lease_expired_locally.
///
/// Sessions: create them with session_options::behavior =
/// consul::session_behavior::delete_keys, as the Go api and `consul lock` do,
/// so the server deletes a dead holder's contender key and leaves no litter
/// under the prefix. A release-behaviour session works too: its contender key
/// then stays (unheld) after the session ends, and is still pruned.
///
/// Backends: Consul and the embedded agent (the protocol above), and etcd. On
/// a session created on an etcd::client the layout is etcd's election scheme
/// with N winners (docs/guide/backends.md, "etcd semaphore keys"):
///
///   - each contender writes `prefix/<lease id in lowercase hex>` (a trailing
///     '/' of the prefix is dropped) on its session's lease, value = `value`,
///     by a txn that creates it only if absent (create_revision == 0) and
///     otherwise reuses it, as etcd's Campaign does; there is no `.lock` key;
///   - the holders are the first `limit` keys under `prefix/` by create
///     revision (every key there takes a place in that order);
///   - a waiter reads the `limit` keys just ahead of it and watches the prefix
///     until one of them (or its own key) is deleted, then ranks again: a
///     delete wakes at most `limit` waiters, not all of them;
///   - the permit's key() is the contender key, its token() the key's create
///     revision (a contender becomes admissible only once every older one is
///     admitted or gone, so tokens grow along the queue); release() deletes
///     the key, and the key goes with the lease, so a lost session frees its
///     slot at once;
///   - loss reasons: key_deleted, session_invalidated (the lease went with
///     the key), released_by_other (the key re-created on another lease),
///     lease_expired_locally;
///   - state(): holders and contenders are lease ids in hex, limit is this
///     semaphore's own limit, index the revision of the read.
///
/// etcd has no place to agree on the limit: every contender must use the same
/// one (a mismatch is not detected, and no semaphore_limit_conflict is raised).
/// Session options behavior, node checks and lock-delay do not apply there.
#pragma once

#include <tenure/leadership_scope.hpp>
#include <tenure/session.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tenure {

/// What a semaphore's coordination key says, for tools.
struct semaphore_state {
    /// The `.lock` Limit (this semaphore's own limit while `.lock` is absent).
    int limit = 0;
    /// Session ids of the live holders (dead ones pruned as the protocol does), sorted.
    std::vector<std::string> holders;
    /// Session ids holding a contender key under the prefix (holders and waiters), sorted.
    std::vector<std::string> contenders;
    /// ModifyIndex of `prefix/.lock`; 0 when it does not exist yet.
    std::uint64_t index = 0;
};

class semaphore {
public:
    /// `limit` must be positive and agreed on by every contender; `value` is
    /// written into this contender's key (its identity, an address...). The
    /// session must outlive the semaphore.
    semaphore(session& s, std::string prefix, int limit, std::string value = {});

    std::string const& prefix() const noexcept { return prefix_; }
    int limit() const noexcept { return limit_; }

    /// Waits for a permit (blocking queries on the prefix; never polls).
    ///
    /// @async_completion{void(boost::system::error_code, tenure::leadership_scope)}
    /// @async_cancellation
    /// Terminal, partial and total: completes with `operation_aborted`; the
    /// contender key is deleted again when the acquisition does not succeed.
    /// @async_errors
    /// `error::lock_conflict` (`prefix/.lock` is used with other flags, e.g. by a
    /// lock; on etcd: the contender key is on another lease);
    /// `error::semaphore_limit_conflict` (`.lock` says another Limit); the
    /// session's loss reason if it is lost meanwhile; transport errors that persist
    /// beyond the session's lease; `error::no_session` when the session is empty
    /// (moved from since the semaphore was made).
    /// @async_lifetimes
    /// The semaphore, its session and the session's client must outlive the
    /// operation.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto acquire(CompletionToken&& token = {}) {
        return detail::async_run(session_->get_executor(), acquire_impl(false), std::forward<CompletionToken>(token),
                                 detail::cancel_on::any);
    }

    /// One attempt: completes with an empty scope when all `limit` permits are
    /// taken.
    ///
    /// @async_completion{void(boost::system::error_code, tenure::leadership_scope)}
    /// @async_cancellation
    /// Terminal, partial and total: completes with `operation_aborted`; the
    /// contender key is deleted again.
    /// @async_errors
    /// As acquire().
    /// @async_lifetimes
    /// The semaphore, its session and the session's client must outlive the
    /// operation.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto try_acquire(CompletionToken&& token = {}) {
        return detail::async_run(session_->get_executor(), acquire_impl(true), std::forward<CompletionToken>(token),
                                 detail::cancel_on::any);
    }

    /// The current holders (session ids) and limit, for tools (a consistent read).
    ///
    /// @async_completion{void(boost::system::error_code, tenure::semaphore_state)}
    /// @async_cancellation
    /// Terminal, partial and total: completes with `operation_aborted`; nothing
    /// changes.
    /// @async_errors
    /// `error::lock_conflict` when `.lock` is not a semaphore's; transport and HTTP
    /// errors; `error::no_session` when the session is empty (moved from).
    /// @async_lifetimes
    /// The semaphore, its session and the session's client must outlive the
    /// operation.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto state(CompletionToken&& token = {}) {
        return detail::async_run(session_->get_executor(), state_impl(), std::forward<CompletionToken>(token),
                                 detail::cancel_on::any);
    }

private:
    boost::asio::awaitable<leadership_scope> acquire_impl(bool once);
    boost::asio::awaitable<semaphore_state> state_impl();

    session* session_;
    std::string prefix_;
    int limit_;
    std::string value_;
};

}  // namespace tenure
