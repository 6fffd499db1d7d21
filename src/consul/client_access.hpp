// Internal: what the layers above tenure::consul::client reach inside it.
#pragma once

#include <tenure/consul/client.hpp>

#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tenure::detail {

struct client_access {
    // Watch hubs by prefix (src/consul/watch_hub.cpp), alive while in use.
    static std::unordered_map<std::string, std::weak_ptr<void>>& watch_hubs(consul::client& c);
    // The client's operations as coroutines (asio::awaitable<T>, throwing
    // consul::api_error with its HTTP status and message): what the public
    // operations run through a co_spawn, awaited here without one.
    static auto const& coroutines(consul::client& c) noexcept { return c.co_; }
};

// The library's own code awaits the client through this, never through the
// completion-token operations (each of those costs a co_spawn):
//
//     auto r = co_await coro(client).kv_get(key, consistent_read());
inline auto const& coro(consul::client& c) noexcept { return client_access::coroutines(c); }

// A transaction's operations, moved in when given as rvalues: a braced
// std::vector{a, b} copies every string of every op out of its
// initializer_list.
template <class... Ops>
std::vector<consul::txn_op> txn_ops(Ops&&... ops) {
    std::vector<consul::txn_op> v;
    v.reserve(sizeof...(Ops));
    (v.push_back(std::forward<Ops>(ops)), ...);
    return v;
}

}  // namespace tenure::detail
