// Consul's fenced writes: a /v1/txn whose op 0 is a check-session of the
// scope's key, for tenure::fenced_write (the scopes of lock.cpp and
// semaphore.cpp) and tenure::consul::fenced_put.
#include <tenure/consul/fenced_put.hpp>

#include "consul/lock.hpp"

#include <boost/system/errc.hpp>

namespace tenure {

namespace detail {

namespace {

// Consul's limit on a transaction's operations (the agent's too).
constexpr std::size_t max_txn_ops = 64;

}  // namespace

asio::awaitable<consul::txn_result> consul_guarded_txn(consul::client& c, std::string key, std::string session,
                                                       std::vector<consul::txn_op> writes) {
    if (key.empty() || session.empty()) throw boost::system::system_error(make_error_code(error::not_held));
    if (writes.size() >= max_txn_ops)
        throw boost::system::system_error(make_error_code(boost::system::errc::invalid_argument),
                                          "fenced write: more than 63 writes in one transaction");
    std::vector<consul::txn_op> ops;
    ops.reserve(writes.size() + 1);
    consul::txn_op guard;
    guard.verb = "check-session";
    guard.key = std::move(key);
    guard.session = std::move(session);
    ops.push_back(std::move(guard));
    for (auto& w : writes) ops.push_back(std::move(w));
    consul::txn_result r = co_await coro(c).txn(std::move(ops));
    if (!r.committed)
        for (auto const& e : r.errors)
            if (e.op_index == 0) throw boost::system::system_error(make_error_code(error::not_held));
    co_return r;
}

asio::awaitable<bool> consul_fenced_write(consul::client& c, scope_state const& s, std::vector<write_op> writes) {
    std::vector<consul::txn_op> ops;
    ops.reserve(writes.size());
    for (auto& w : writes) {
        consul::txn_op op;
        op.key = std::move(w.key);
        if (w.op == write_op::kind::put) {
            op.verb = "set";
            op.value = std::move(w.value);
        } else {
            op.verb = "delete";
        }
        ops.push_back(std::move(op));
    }
    try {
        auto r = co_await consul_guarded_txn(c, s.key, s.session->id, std::move(ops));
        // Plain sets and deletes cannot fail on their own: a refusal that
        // names another op is an answer this client does not understand.
        if (!r.committed) {
            std::string what = r.errors.empty() ? "no errors listed" : r.errors.front().what;
            throw boost::system::system_error(make_error_code(error::unexpected_response),
                                              "fenced write: transaction refused: " + what);
        }
        co_return true;
    } catch (boost::system::system_error const& e) {
        if (e.code() != make_error_code(error::not_held)) throw;
    }
    co_return false;
}

}  // namespace detail

namespace consul {

boost::asio::awaitable<bool> fenced_put_impl(std::string key, std::string session, client& c,
                                             std::vector<txn_op> writes) {
    auto r = co_await tenure::detail::consul_guarded_txn(c, std::move(key), std::move(session), std::move(writes));
    co_return r.committed;
}

}  // namespace consul

}  // namespace tenure
