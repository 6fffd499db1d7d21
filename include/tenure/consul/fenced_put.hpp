/// @file
/// tenure::consul::fenced_put - any Consul transaction that only a current
/// holder can make: one /v1/txn that first checks, on the server, that the
/// scope's session still holds the scope's key, then applies the ops; a stale
/// leader's transaction is refused as a whole and writes nothing.
///
/// For plain puts and removals use tenure::fenced_write (fenced_write.hpp):
/// the same guard, no client argument, and it runs unchanged on etcd. This is
/// the Consul-only form for ops it has no word for (a cas, a check-index, a get).
#pragma once

#include <tenure/consul/client.hpp>
#include <tenure/detail/async_bridge.hpp>
#include <tenure/leadership_scope.hpp>

#include <boost/asio/deferred.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <string>
#include <vector>

namespace tenure {

namespace consul {

boost::asio::awaitable<bool> fenced_put_impl(std::string key, std::string session, client& c,
                                             std::vector<txn_op> writes);

/// Applies `writes` in one transaction guarded by a `check-session` of the
/// scope's key for the scope's session (op 0), so the server refuses the writes
/// of a leader whose key has moved, however late it learns of it.
///
/// The guard is the server's word at commit time, whatever the scope knows
/// locally. For a semaphore permit the key is the contender key: the guard
/// proves the session still holds it (is alive and contending), not that the
/// session is still in `.lock`'s Holders. A relock of the same key by the same
/// session passes the guard (Consul's txn has no LockIndex check).
///
/// @async_completion{void(boost::system::error_code, bool committed)}
/// - `({}, true)`: the guard held and every write was applied;
/// - `(error::not_held, false)`: refused because the scope's session no longer
///   holds its key (or the scope is empty); nothing was written;
/// - `({}, false)`: the guard held but one of `writes` failed (a stale cas, a
///   check of yours...); nothing was written;
/// - `(std::errc::invalid_argument, false)`: more than 63 ops (Consul takes 64
///   in a transaction, the guard included); nothing was sent;
/// - `(transport or HTTP error, false)`.
/// @async_cancellation
/// Terminal: completes with `operation_aborted`; the transaction may still have
/// been applied.
/// @async_errors
/// `error::not_held`; `std::errc::invalid_argument`; transport and HTTP errors.
/// @async_lifetimes
/// The client must outlive the operation. The scope's key and session id are
/// copied when the operation starts; `writes` is taken by value.
template <class CompletionToken = boost::asio::use_awaitable_t<>>
auto fenced_put(leadership_scope const& scope, client& c, std::vector<txn_op> writes, CompletionToken&& token = {}) {
    return tenure::detail::async_run(c.get_executor(), fenced_put_impl(scope.key(), scope.session_id(), c, std::move(writes)),
                             std::forward<CompletionToken>(token));
}

}  // namespace consul

}  // namespace tenure
