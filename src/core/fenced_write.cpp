// tenure::fenced_write: the backend-agnostic half (checks, loss on refusal);
// each backend's scope sends the guarded transaction.
#include <tenure/fenced_write.hpp>

#include "core/backend.hpp"

#include <boost/system/errc.hpp>

namespace tenure {

namespace asio = boost::asio;

namespace detail {

namespace {

asio::awaitable<fencing_token> fenced_write_impl(std::shared_ptr<scope_state> s, std::vector<write_op> writes) {
    if (!s) throw boost::system::system_error(make_error_code(error::not_held));
    for (auto const& w : writes)
        if (w.key.empty())
            throw boost::system::system_error(make_error_code(boost::system::errc::invalid_argument),
                                              "fenced_write: a write without a key");
    fencing_token used{s->key, s->token};
    if (co_await s->fenced_write(std::move(writes))) co_return used;
    // The server says the key is no longer ours: so does the scope, with
    // the reason a consistent read gives (as confirm() does).
    if (s->status == scope_status::held) {
        boost::system::error_code why;
        try {
            why = co_await s->check_held();
        } catch (boost::system::system_error const&) {
            // The refusal stands; the monitor finds the reason.
        }
        if (why && s->status == scope_status::held) s->lose(why);
    }
    throw boost::system::system_error(make_error_code(error::not_held));
}

}  // namespace

asio::awaitable<fencing_token> fenced_write_op(leadership_scope const& scope, std::vector<write_op> writes) {
    return fenced_write_impl(scope_access::state(scope), std::move(writes));
}

}  // namespace detail

}  // namespace tenure
