// tenure::election and tenure::leader_observer: what they share of every backend.
#include "core/backend.hpp"

#include <stdexcept>

namespace tenure {

namespace asio = boost::asio;

// ---- election ----------------------------------------------------------------------

election::election(session& s, std::string key, std::string value)
    : election(s, std::move(key), std::move(value), election_options{}) {}

election::election(session& s, std::string key, std::string value, election_options options)
    : session_(&s), key_(std::move(key)), value_(std::move(value)), options_(std::move(options)) {
    if (!s.valid()) throw std::invalid_argument("tenure::election needs a created session");
    if (key_.empty()) throw std::invalid_argument("tenure::election needs a key");
    if (!options_.shared_watch.empty() && !key_.starts_with(options_.shared_watch))
        throw std::invalid_argument("tenure::election: shared_watch \"" + options_.shared_watch +
                                    "\" is not a prefix of the key \"" + key_ + "\"");
}

asio::awaitable<leadership_scope> election::acquire_impl(bool once) {
    auto sess = detail::session_access::impl(*session_);
    if (!sess) throw boost::system::system_error(make_error_code(error::no_session));
    if (sess->lost_event.is_set()) throw boost::system::system_error(sess->lost_reason);
    // A candidate whose session dies while it waits stops with that reason.
    detail::claim c{.kind = detail::claim_kind::key, .key = key_, .value = value_, .once = once, .options = &options_};
    auto r = co_await detail::race(sess->acquire(std::move(c)), sess->lost_event);
    if (!r) throw boost::system::system_error(sess->lost_reason);
    if (!*r) co_return leadership_scope{};  // one attempt, not acquired
    co_return detail::scope_access::make(std::move(*r));
}

asio::awaitable<std::optional<leader_info>> election::leader_impl() {
    auto sess = detail::session_access::impl(*session_);
    if (!sess) throw boost::system::system_error(make_error_code(error::no_session));
    auto held = co_await sess->read(detail::claim_kind::key, key_, 1);
    if (held.holders.empty()) co_return std::nullopt;
    co_return std::move(held.holders.front());
}

asio::awaitable<std::vector<candidate_info>> election::candidates_impl() {
    auto sess = detail::session_access::impl(*session_);
    if (!sess) throw boost::system::system_error(make_error_code(error::no_session));
    co_return co_await sess->read_candidates(key_);
}

// ---- leader_observer ------------------------------------------------------------------
// The constructors live with their backend (src/consul/primitives.cpp,
// src/etcd/election.cpp).

asio::awaitable<std::optional<leader_info>> leader_observer::next_impl() {
    auto backend = backend_;  // alive while the operation runs
    if (!backend) throw boost::system::system_error(make_error_code(error::no_session));  // moved from
    co_return co_await backend->next();
}

}  // namespace tenure
