/// @file
/// tenure::fenced_write — writes into the coordination store itself (Consul
/// KV, etcd) that only a current holder can make, on every backend.
///
/// A leader can be deposed without knowing it yet (a GC pause, a partition).
/// fenced_write() sends its writes as one server-side transaction guarded by
/// the scope's lock: the server applies all of them only if, at commit time,
/// the scope's session still holds the scope's key, and refuses them all
/// otherwise, however late the writer learns of its loss:
///
///     tenure::leadership_scope lead = co_await election.acquire();
///     tenure::fencing_token used = co_await tenure::fenced_write(lead, {
///         tenure::write_op::put("jobs/report/cursor", "4711"),
///         tenure::write_op::remove("jobs/report/claim"),
///     });
///
/// The guard, per backend:
/// - Consul and the embedded agent: `/v1/txn` whose op 0 is a `check-session`
///   of the scope's key for the scope's session. For a semaphore permit the
///   key is the contender key: the guard proves the session still holds it,
///   not that the session is still among `.lock`'s Holders.
/// - etcd: a txn comparing the scope's key's `create_revision` with the token
///   and its `lease` with the session's lease. A key that is ours proves the
///   election (or permit) is still held: nobody older can appear ahead of it.
///   Write nothing under the election's or semaphore's own prefix: every key
///   there takes a place in the queue.
///
/// The writes are plain puts and deletes (no lease, no flags). For Consul
/// writes that need more (a cas, a check of yours, a get), see
/// tenure::consul::fenced_put, which uses the same guard.
#pragma once

#include <tenure/detail/async_bridge.hpp>
#include <tenure/leadership_scope.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <string>
#include <utility>
#include <vector>

namespace tenure {

/// One write of a fenced batch: a put of `value` at `key`, or a removal of `key`.
struct write_op {
    enum class kind { put, remove };
    kind op = kind::put;
    std::string key;
    std::string value;  // for put

    static write_op put(std::string key, std::string value) {
        return write_op{kind::put, std::move(key), std::move(value)};
    }
    static write_op remove(std::string key) { return write_op{kind::remove, std::move(key), {}}; }
    friend bool operator==(write_op const&, write_op const&) = default;
};

namespace detail {
// Copies what the operation needs from `scope` (it may go away meanwhile).
boost::asio::awaitable<fencing_token> fenced_write_op(leadership_scope const& scope, std::vector<write_op> writes);
}  // namespace detail

/// Applies `writes` in one transaction that the server commits only while the
/// scope's session holds the scope's key; answers the fencing token the guard
/// checked (scope.fencing()). The server decides, not the scope's local view:
/// a scope lost only locally (lease_expired_locally) whose session the server
/// still knows may still write; a released or deposed one is refused. An
/// empty batch is a server-side check of the lock alone.
///
/// A refusal also marks the scope lost (with the reason a consistent read
/// gives, as confirm() does), which cancels the work started with run().
///
/// @async_completion{void(boost::system::error_code, fencing_token)}
/// - `({}, token)`: the guard held and every write was applied, atomically;
/// - `(error::not_held, {})`: refused because the scope's session no longer
///   holds its key; nothing was written;
/// - `(std::errc::invalid_argument, {})`: a write with an empty key, or (on
///   Consul) more than 63 writes, as a transaction takes 64 ops with the
///   guard; nothing was sent;
/// - `(error::etcd_error, {})` and the like: the server refused the request
///   itself (etcd: more ops than its `--max-txn-ops`, 128 by default);
/// - `(transport or HTTP error, {})`.
/// @async_cancellation
/// Terminal: completes with `operation_aborted`; the transaction may still
/// have been applied.
/// @async_errors
/// `error::not_held` (also for an empty scope: default-constructed or moved
/// from); `std::errc::invalid_argument`; transport and HTTP errors.
/// @async_lifetimes
/// The operation keeps the scope's state alive; the session's client must
/// outlive it. `writes` is taken by value.
template <class CompletionToken = boost::asio::use_awaitable_t<>>
auto fenced_write(leadership_scope const& scope, std::vector<write_op> writes, CompletionToken&& token = {}) {
    return detail::async_run(scope.get_executor(), detail::fenced_write_op(scope, std::move(writes)),
                             std::forward<CompletionToken>(token));
}

}  // namespace tenure
