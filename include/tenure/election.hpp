/// @file
/// tenure::election — leader election on one Consul key, compatible with the Go
/// api.Lock and `consul lock` (same flag value, same key rules).
///
///     tenure::leadership_scope lead = co_await election.acquire();
///     auto why = co_await lead.run(run_report(lead.token()));
///
/// Followers block on the key with consistent blocking queries and race when
/// its Session clears; they never poll. An acquire refused on a free key (a
/// lock-delay is running) is retried when the previous holder's LockDelay ends,
/// then with a short backoff.
///
/// With a session created on an etcd::client the same API runs etcd's own
/// election scheme (concurrency.Election, shared with `etcdctl elect`): the
/// key is the election name, each candidate writes `<key>/<lease hex>`, the
/// oldest create revision leads, the fencing token is that create revision,
/// and leader() answers the oldest key. Followers watch only their
/// predecessor. Lock-delay on etcd: see session::create(etcd::client&, ...).
#pragma once

#include <tenure/leadership_scope.hpp>
#include <tenure/session.hpp>

#include <chrono>
#include <functional>
#include <optional>
#include <vector>

namespace tenure {

namespace detail {
struct observer_backend;
}

struct leader_info {
    std::string value;
    std::string session;
    std::uint64_t lock_index = 0;
    std::uint64_t modify_index = 0;
};

/// A candidate waiting for an election's key, as its registry entry shows it
/// (docs/guide/priorities-and-transfer.md): each waiting acquire() registers one beside
/// the key, bound to its session, and removes it when the acquire ends.
struct candidate_info {
    std::string session;      // its session id
    std::string name;         // its session's name (session_options::name)
    std::string value;        // what it writes into the key when it leads
    int priority = 0;         // election_options::priority
    std::uint64_t since = 0;  // the entry's CreateIndex: lower has waited longer
};

struct election_options {
    /// A KV prefix of the key ("jobs/" for "jobs/report") watched through one
    /// blocking query shared by every election of the same client under it:
    /// followers and the leader's monitor wait on that query instead of
    /// holding one blocking query (and one connection) each, so thousands of
    /// elections need a handful of connections. Empty: the key's own blocking
    /// queries, the lowest handover latency for a few keys. Consul only
    /// (ignored on etcd, whose watches are streams already). Each change
    /// under the prefix rereads all of it: on a big prefix that changes all
    /// the time, rereads are spaced by twice the work of the last one (at
    /// most 100 ms), and while only leaders' monitors wait and a reread told
    /// none of them anything, by up to 100 ms: a monitor may see its key
    /// move that much later (its session's renewals are not delayed).
    std::string shared_watch;

    /// An acquire() retakes the key without reading it first when this
    /// session was the last to release it and nobody has written it since (a
    /// check-index + lock transaction): one request fewer per term for a
    /// process that takes the same lock again and again. Without this option
    /// that happens only after a release that found no candidate waiting (see
    /// handoff_on_release), so a release that had someone to hand the key to
    /// always does. With it, every release is a plain unlock that reports the
    /// key's index, waiting candidates or not. The cost: a candidate that calls
    /// acquire() right after release() usually beats the followers the
    /// release woke (they need a round trip to try), so the key does not go
    /// round. Consul only.
    bool quick_retake = false;

    /// How long after acquiring the key the leader's monitor (its blocking
    /// query on the key, or its wait on the shared_watch query) starts: from
    /// three quarters of this delay to all of it, as one timer per session
    /// batches them. The monitor starts from the state the acquire saw, so
    /// nothing that happens meanwhile is missed: a loss in those first
    /// moments is noticed up to this much later. A term shorter than the delay
    /// costs no blocking query at all: a short critical section needs two
    /// requests instead of three (see bench/RESULTS.md, `throughput`). Zero
    /// or less: watch at once. The session's local deadline (a whole TTL
    /// without a renewal) is not delayed. Consul only.
    std::chrono::nanoseconds monitor_delay = std::chrono::milliseconds{1};

    /// This candidate's priority (higher leads first). A clean release hands
    /// the key straight to the highest-priority waiting candidate, among
    /// equals the one that waited longest (see handoff_on_release). A key
    /// freed otherwise (the holder's session invalidated, a `consul lock`
    /// holder's release) is left to the best live candidate, by the same
    /// order, for priority_grace (after the old holder's lock-delay), then
    /// to anyone, so a stuck candidate cannot block the election. Consul only
    /// (ignored on etcd).
    int priority = 0;
    /// How long a candidate defers to a better live one on a freed key. Zero:
    /// no deferral (and neither a guard on the priority marker nor a read of it).
    std::chrono::nanoseconds priority_grace = std::chrono::seconds{2};

    /// While leading, watch the candidates and hand over (by transfer) when one
    /// with a higher priority than ours has been waiting for yield_settle; the
    /// scope ends with `error::yielded`. The settle time keeps a flapping
    /// candidate (one that comes and goes) from bouncing leadership: it must
    /// wait that long without a break. Consul only.
    bool yield_to_higher = false;
    std::chrono::nanoseconds yield_settle = std::chrono::seconds{5};

    /// While leading, honour operator transfer requests (`tenure transfer`,
    /// the key `<key>.transfer`): hand over to the named candidate, or to the
    /// best one; the scope ends with `error::transferred`. Costs one more
    /// blocking query per leader (shared with yield_to_higher). Consul only.
    bool accept_transfer_requests = false;

    /// A clean release (release(), the scope's destructor) hands the key to
    /// the best waiting candidate in one transaction (unlock for us, lock for
    /// it) instead of freeing it: no race, and priority is respected. The
    /// same transaction takes the candidate's registry entry out, so the new
    /// holder sends nothing more. It reads the registry first, except with
    /// shared_watch (the snapshot shows the candidate to hand to, guarded by
    /// the registry's `.seen` key), when this session last saw it empty and
    /// nobody has registered since (the release is then one unlock
    /// transaction guarded by that), or when it knows whom to hand to: a
    /// holder learns that from its own lock transaction, or, given the key by
    /// a handover, from one registry read in the background while it holds
    /// it. That handover is guarded by `.seen` as that read saw it (a
    /// registration or removal since voids it, and the release reads after
    /// all). False, or with quick_retake (made for one
    /// process taking the key again and again): a plain unlock. Consul only.
    bool handoff_on_release = true;
};

class election {
public:
    /// `value` is what this candidate writes into the key when it leads (its
    /// identity, an address...). The session must outlive the election.
    election(session& s, std::string key, std::string value = {});
    election(session& s, std::string key, std::string value, election_options options);

    std::string const& key() const noexcept { return key_; }

    /// Waits until this candidate holds the key, and returns the proof.
    ///
    /// Followers block on the key (consistent blocking queries on Consul, a watch
    /// of the predecessor on etcd) and never poll; an acquire refused during a
    /// lock-delay is retried when the holder's lock-delay ends.
    ///
    /// @async_completion{void(boost::system::error_code, tenure::leadership_scope)}
    /// @async_cancellation
    /// Terminal, partial and total: completes with `operation_aborted`. While
    /// waiting nothing has been written; a key taken just before the cancellation
    /// took effect is released again.
    /// @async_errors
    /// `error::lock_conflict` (the key is used with other flags, e.g. by a
    /// semaphore); the session's loss reason if it is lost meanwhile
    /// (`error::session_invalidated`, `error::lease_expired_locally`); transport
    /// errors that persist beyond the session's lease; `error::no_session` when
    /// the session is empty (moved from since the election was made).
    /// @async_lifetimes
    /// The election, its session and the session's client must outlive the
    /// operation.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto acquire(CompletionToken&& token = {}) {
        return detail::async_run(session_->get_executor(), acquire_impl(false), std::forward<CompletionToken>(token),
                                 detail::cancel_on::any);
    }

    /// One attempt: completes with an empty scope (`!scope`) when the key is held by
    /// someone else or a lock-delay is running.
    ///
    /// @async_completion{void(boost::system::error_code, tenure::leadership_scope)}
    /// @async_cancellation
    /// Terminal, partial and total: completes with `operation_aborted`; a key
    /// taken just before the cancellation took effect is released again.
    /// @async_errors
    /// As acquire(): `error::lock_conflict`, the session's loss reason, transport
    /// errors; `error::no_session` when the session is empty (moved from).
    /// @async_lifetimes
    /// The election, its session and the session's client must outlive the
    /// operation.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto try_acquire(CompletionToken&& token = {}) {
        return detail::async_run(session_->get_executor(), acquire_impl(true), std::forward<CompletionToken>(token),
                                 detail::cancel_on::any);
    }

    /// The current holder, or `std::nullopt` when nobody holds the key (a
    /// consistent read).
    ///
    /// @async_completion{void(boost::system::error_code, std::optional<tenure::leader_info>)}
    /// @async_cancellation
    /// Terminal, partial and total: completes with `operation_aborted`; nothing
    /// changes.
    /// @async_errors
    /// Transport and HTTP errors (etcd errors on etcd); `error::no_session` when
    /// the session is empty (moved from).
    /// @async_lifetimes
    /// The election, its session and the session's client must outlive the
    /// operation.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto leader(CompletionToken&& token = {}) {
        return detail::async_run(session_->get_executor(), leader_impl(), std::forward<CompletionToken>(token),
                                 detail::cancel_on::any);
    }

    /// The candidates waiting for the key, best first (priority, then the
    /// longest waiting); candidates whose session has ended are left out.
    ///
    /// @async_completion{void(boost::system::error_code, std::vector<tenure::candidate_info>)}
    /// @async_cancellation
    /// Terminal, partial and total: completes with `operation_aborted`; nothing
    /// changes.
    /// @async_errors
    /// Transport and HTTP errors; `error::operation_not_supported` on etcd
    /// (its candidates are the keys under the election name, see leader());
    /// `error::no_session` when the session is empty (moved from).
    /// @async_lifetimes
    /// The election, its session and the session's client must outlive the
    /// operation.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto candidates(CompletionToken&& token = {}) {
        return detail::async_run(session_->get_executor(), candidates_impl(), std::forward<CompletionToken>(token),
                                 detail::cancel_on::any);
    }

private:
    boost::asio::awaitable<leadership_scope> acquire_impl(bool once);
    boost::asio::awaitable<std::optional<leader_info>> leader_impl();
    boost::asio::awaitable<std::vector<candidate_info>> candidates_impl();

    session* session_;
    std::string key_;
    std::string value_;
    election_options options_;
};

/// A stream of leader changes on a key, for followers, dashboards and the
/// `tenure leader -watch` command. The first next() answers at once with the
/// current holder; each later one completes when the holder changes.
class leader_observer {
public:
    leader_observer(consul::client& client, std::string key);
#if TENURE_HAS_ETCD
    /// On etcd `key` is the election name: the leader is the key under
    /// `<name>/` with the oldest create revision (etcd's scheme, so
    /// `etcdctl elect` candidates count too); leader_info carries its value,
    /// its lease in hex (session), create revision (lock_index, the fencing
    /// token) and mod revision. Changes come from one watch on the prefix,
    /// re-read after a compaction. An error ends that next() (the watch is
    /// reopened by the following one).
    leader_observer(etcd::client& client, std::string key);
#endif

    /// The first call answers at once with the current holder; each later call
    /// completes when the holder changes (`std::nullopt`: nobody holds the key).
    ///
    /// @async_completion{void(boost::system::error_code, std::optional<tenure::leader_info>)}
    /// @async_cancellation
    /// Terminal, partial and total: completes with `operation_aborted`. The
    /// observer stays usable: the next call picks up from the last holder it
    /// reported.
    /// @async_errors
    /// Transport and HTTP errors; on etcd the watch's errors (the watch is reopened
    /// by the following call); `error::no_session` for a moved-from observer.
    /// @async_lifetimes
    /// The observer and its client must outlive the operation. One next() at a time
    /// per observer.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto next(CompletionToken&& token = {}) {
        return detail::async_run(executor_, next_impl(), std::forward<CompletionToken>(token),
                                 detail::cancel_on::any);
    }

private:
    boost::asio::awaitable<std::optional<leader_info>> next_impl();

    boost::asio::any_io_executor executor_;
    std::shared_ptr<detail::observer_backend> backend_;  // the backend's watch state
};

struct campaign_options {
    session_options session;
    std::string key;
    std::string value;
    /// Pause after a loss or an error before campaigning again.
    std::chrono::nanoseconds retry_backoff = std::chrono::milliseconds{100};
    // Elections and losses are events of the campaign's sessions: set
    // session.on_event (`acquired` with the key and token; `lost`, `released`).
    // The body gets each new scope as it is elected.
};

/// The campaign loop: create a session, acquire, run `body` under the scope,
/// release, campaign again after a loss (with a new session if the old one was
/// lost) until cancelled; on cancellation it releases the key and closes the
/// session cleanly, so the next leader takes over without lock-delay.
/// Completion signature: void(error_code) — operation_aborted when cancelled.
/// Cancellation: terminal.
namespace detail {
boost::asio::awaitable<void> campaign_op(consul::client& client, campaign_options options,
                                         std::function<boost::asio::awaitable<void>(leadership_scope&)> body);
#if TENURE_HAS_ETCD
boost::asio::awaitable<void> campaign_op(etcd::client& client, campaign_options options,
                                         std::function<boost::asio::awaitable<void>(leadership_scope&)> body);
#endif
}  // namespace detail

/// The campaign loop: create a session, acquire `options.key`, run `body` under
/// the scope, release, and campaign again after a loss (with a new session if
/// the old one was lost) until cancelled. Each election and loss is an event
/// on `options.session.on_event`.
///
/// @async_completion{void(boost::system::error_code)}
/// @async_cancellation
/// Terminal: the loop stops, releases the key if it leads, closes the session
/// (so the next leader takes over without a lock-delay), then completes with
/// `operation_aborted`.
/// @async_errors
/// `operation_aborted` after a cancellation; `error::lock_conflict` (the key is
/// used with other flags); an error thrown by `body` (as a
/// `boost::system::system_error`). Losses, transport errors and session
/// failures are not errors: the loop campaigns again after `retry_backoff`
/// (after a release that failed, with a new session: the old one is closed,
/// which frees the key).
/// @async_lifetimes
/// The client must outlive the operation. `options` and `body` are taken by
/// value; what `body` refers to must outlive the operation.
template <class CompletionToken = boost::asio::use_awaitable_t<>>
auto campaign(consul::client& client, campaign_options options,
              std::function<boost::asio::awaitable<void>(leadership_scope&)> body, CompletionToken&& token = {}) {
    return detail::async_run(client.get_executor(), detail::campaign_op(client, std::move(options), std::move(body)),
                             std::forward<CompletionToken>(token));
}

#if TENURE_HAS_ETCD
/// The campaign loop on etcd: the session is a lease, `options.key` the
/// election name (keys `<key>/<lease hex>`); cancellation resigns, then revokes
/// the lease.
///
/// @async_completion{void(boost::system::error_code)}
/// @async_cancellation
/// Terminal: the loop stops, releases the key if it leads, closes the session
/// (so the next leader takes over without a lock-delay), then completes with
/// `operation_aborted`.
/// @async_errors
/// `operation_aborted` after a cancellation; `error::lock_conflict` (the key is
/// used with other flags); an error thrown by `body` (as a
/// `boost::system::system_error`). Losses, transport errors and session
/// failures are not errors: the loop campaigns again after `retry_backoff`
/// (after a release that failed, with a new session: the old one is closed,
/// which frees the key).
/// @async_lifetimes
/// The client must outlive the operation. `options` and `body` are taken by
/// value; what `body` refers to must outlive the operation.
template <class CompletionToken = boost::asio::use_awaitable_t<>>
auto campaign(etcd::client& client, campaign_options options,
              std::function<boost::asio::awaitable<void>(leadership_scope&)> body, CompletionToken&& token = {}) {
    return detail::async_run(client.get_executor(), detail::campaign_op(client, std::move(options), std::move(body)),
                             std::forward<CompletionToken>(token));
}
#endif

}  // namespace tenure
