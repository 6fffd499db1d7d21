// tenure::consul::fenced_put: a txn guarded by check-session.
#include <tenure/consul/fenced_put.hpp>

namespace tenure {

namespace consul {

boost::asio::awaitable<bool> fenced_put_impl(std::string key, std::string session, client& c,
                                             std::vector<txn_op> writes) {
    if (key.empty() || session.empty()) throw boost::system::system_error(make_error_code(error::not_held));
    std::vector<txn_op> ops;
    ops.reserve(writes.size() + 1);
    txn_op guard;
    guard.verb = "check-session";
    guard.key = std::move(key);
    guard.session = std::move(session);
    ops.push_back(std::move(guard));
    for (auto& w : writes) ops.push_back(std::move(w));
    txn_result r = co_await c.txn(std::move(ops));
    if (r.committed) co_return true;
    for (auto const& e : r.errors)
        if (e.op_index == 0) throw boost::system::system_error(make_error_code(error::not_held));
    co_return false;
}

}  // namespace consul

}  // namespace tenure
