/// @file
/// Fencing helpers.
///
/// A leader can be deposed without knowing it yet (a GC pause, a partition):
/// its writes must then be refused by what it writes to. Two tools:
///
/// - tenure::fence, for a protected resource of your own: remember the highest
///   fencing token seen per lock key and refuse writes stamped with an older one.
///
///       tenure::fence gate;
///       if (!gate.admit(request.fencing)) return reject("stale leader");
///
/// - tenure::consul::fenced_put, for writes into Consul KV itself: one
///   /v1/txn that first checks, on the server, that the scope's session still
///   holds the scope's key, then applies the writes; a stale leader's
///   transaction is refused as a whole and writes nothing.
#pragma once

#include <tenure/consul/client.hpp>
#include <tenure/detail/async_bridge.hpp>
#include <tenure/leadership_scope.hpp>

#include <boost/asio/deferred.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace tenure {

/// A monotonic gate per lock key. admit() accepts a token at least as high as
/// the highest admitted so far for its key (equal: the same term) and records
/// it; a lower one is refused and changes nothing. Keys are independent.
/// Plain single-threaded C++: no I/O, no locking.
class fence {
public:
    bool admit(fencing_token const& token) { return admit(token.key, token.value); }
    bool admit(std::string key, std::uint64_t token);
    /// Would admit() accept this token? (Records nothing.)
    bool would_admit(std::string const& key, std::uint64_t token) const noexcept;
    /// The highest token admitted for `key`; 0 when none.
    std::uint64_t highest(std::string const& key) const noexcept;
    /// Forgets every key.
    void clear() noexcept { highest_.clear(); }

private:
    std::map<std::string, std::uint64_t, std::less<>> highest_;
};

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
/// - `(transport or HTTP error, false)`.
/// @async_cancellation
/// Terminal: completes with `operation_aborted`; the transaction may still have
/// been applied.
/// @async_errors
/// `error::not_held`; transport and HTTP errors.
/// @async_lifetimes
/// The client must outlive the operation. The scope's key and session id are
/// copied when the operation starts; `writes` is taken by value.
template <class CompletionToken = boost::asio::deferred_t>
auto fenced_put(leadership_scope const& scope, client& c, std::vector<txn_op> writes, CompletionToken&& token = {}) {
    return detail::async_run(c.get_executor(), fenced_put_impl(scope.key(), scope.session_id(), c, std::move(writes)),
                             std::forward<CompletionToken>(token));
}

}  // namespace consul

}  // namespace tenure
