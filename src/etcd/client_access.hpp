// Internal: the coroutine operations of tenure::etcd::client and
// watch_stream, for the layers above them.
#pragma once

#include <tenure/etcd/client.hpp>

#include <boost/asio/awaitable.hpp>

namespace tenure::detail {

struct etcd_client_access {
    // The client's operations as coroutines (asio::awaitable<T>, throwing
    // etcd::api_error with its gRPC code, message and compaction revision):
    // what the public operations run through a co_spawn, awaited here without one.
    static auto const& coroutines(etcd::client& c) noexcept { return c.co_; }
    static boost::asio::awaitable<etcd::watch_response> next(etcd::watch_stream& w) {
        return etcd::watch_stream::next_impl(w.impl_);
    }
};

// The library's own code awaits the client and its watches through these,
// never through the completion-token operations (each of those costs a co_spawn):
//
//     auto r = co_await coro(client).range(key, end, opts);
//     auto events = co_await watch_next(stream);
inline auto const& coro(etcd::client& c) noexcept { return etcd_client_access::coroutines(c); }
inline boost::asio::awaitable<etcd::watch_response> watch_next(etcd::watch_stream& w) {
    return etcd_client_access::next(w);
}

}  // namespace tenure::detail
