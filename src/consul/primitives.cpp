// The public primitives' Consul entry points: session::create, a
// leader_observer over blocking queries, and campaign.
#include "consul/lock.hpp"

#include "core/campaign.hpp"

#include <stdexcept>

namespace tenure {

namespace asio = boost::asio;

namespace detail {
namespace {

// How long a follower's blocking query may be held by the server.
constexpr auto follower_wait = std::chrono::seconds{30};

bool same_leader(std::optional<leader_info> const& a, std::optional<leader_info> const& b) {
    if (a.has_value() != b.has_value()) return false;
    return !a || (a->session == b->session && a->lock_index == b->lock_index && a->value == b->value);
}

// One blocking query per next() after the first, from the index last seen.
struct consul_observer final : observer_backend {
    consul_observer(consul::client& c, std::string k) : client(c), key(std::move(k)) {}

    asio::awaitable<std::optional<leader_info>> next() override {
        for (;;) {
            consul::read_options ro;
            if (!first) {
                ro.index = index;
                ro.wait = follower_wait;
            }
            auto r = co_await coro(client).kv_get(key, ro);
            index = consul::next_wait_index(index, r.meta.index);
            std::optional<leader_info> info;
            if (r.value && !r.value->session.empty())
                info = leader_info{r.value->value.value_or(""), r.value->session, r.value->lock_index,
                                   r.value->modify_index};
            if (first || !same_leader(info, last)) {
                first = false;
                last = info;
                co_return info;
            }
        }
    }

    consul::client& client;
    std::string key;
    std::uint64_t index = 0;
    bool first = true;
    std::optional<leader_info> last;
};

}  // namespace
}  // namespace detail

asio::awaitable<session> session::create_impl(consul::client& client, session_options options) {
    co_return session(co_await detail::create_consul_session(client, std::move(options)));
}

leader_observer::leader_observer(consul::client& client, std::string key)
    : executor_(client.get_executor()), backend_(std::make_shared<detail::consul_observer>(client, std::move(key))) {}

boost::asio::awaitable<void> detail::campaign_op(consul::client& client, campaign_options options,
                                    std::function<boost::asio::awaitable<void>(leadership_scope&)> body) {
    auto create = [&client](session_options const& o) { return session::create(client, o, boost::asio::use_awaitable); };
    return detail::campaign_loop(create, std::move(options), std::move(body));
}

}  // namespace tenure
