// tenure::semaphore: N holders under a prefix, on the backend of its session.
#include "core/backend.hpp"
#include "net/go_path.hpp"

#include <stdexcept>

namespace tenure {

namespace asio = boost::asio;
using boost::system::system_error;

semaphore::semaphore(session& s, std::string prefix, int limit, std::string value)
    : session_(&s), prefix_(std::move(prefix)), limit_(limit), value_(std::move(value)) {
    if (!s.valid()) throw std::invalid_argument("tenure::semaphore needs a created session");
    // As `consul lock` does: the prefix is relative to the KV root.
    prefix_.erase(0, prefix_.find_first_not_of('/'));
    if (prefix_.empty()) throw std::invalid_argument("tenure::semaphore needs a prefix");
    if (limit_ <= 0) throw std::invalid_argument("tenure::semaphore limit must be positive");
    // The keys are path.Join(prefix, ...) and must lie under the listed prefix.
    if (!detail::go_path_join(prefix_, ".lock").starts_with(prefix_) ||
        !detail::go_path_join(prefix_, "0").starts_with(prefix_))
        throw std::invalid_argument("tenure::semaphore prefix must be a clean path: " + prefix_);
}

asio::awaitable<leadership_scope> semaphore::acquire_impl(bool once) {
    auto sess = session_->impl();
    if (!sess) throw boost::system::system_error(make_error_code(error::no_session));
    if (sess->lost_event.is_set()) throw system_error(sess->lost_reason);
    // A contender whose session dies while it waits stops with that reason.
    detail::claim c{.kind = detail::claim_kind::slot, .key = prefix_, .value = value_, .limit = limit_, .once = once};
    auto r = co_await detail::race(sess->acquire(std::move(c)), sess->lost_event);
    if (!r) throw system_error(sess->lost_reason);
    if (!*r) co_return leadership_scope{};  // one attempt, full
    co_return detail::scope_access::make(std::move(*r));
}

asio::awaitable<semaphore_state> semaphore::state_impl() {
    auto sess = session_->impl();
    if (!sess) throw boost::system::system_error(make_error_code(error::no_session));
    auto held = co_await sess->read(detail::claim_kind::slot, prefix_, limit_);
    semaphore_state st;
    st.limit = held.limit;
    for (auto& h : held.holders) st.holders.push_back(std::move(h.session));
    st.contenders = std::move(held.contenders);
    st.index = held.index;
    co_return st;
}

}  // namespace tenure
