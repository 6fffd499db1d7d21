// Internal: HTTP/1.1 to etcd's gateway over Beast, with endpoint failover.
//
// Unary requests (every POST but /v3/watch) go through post(): a keep-alive
// pool per endpoint (net/http_pool.hpp), one deadline per attempt, and failover to the next
// endpoint on a transport failure or an HTTP 503. Watches take a connection
// of their own with connect() and manage it themselves (watch.cpp).
#pragma once

#include <tenure/detail/clock.hpp>
#include <tenure/etcd/client.hpp>

#include "net/http_pool.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tenure::etcd::detail {

namespace asio = boost::asio;
namespace beast = boost::beast;
using clock = tenure::detail::clock;

inline constexpr std::string_view user_agent = "tenure/0.1";

struct endpoint {
    std::string host;  // name or address literal (IPv6 without brackets)
    std::uint16_t port = 2379;
    std::string host_header;  // "host:port" as sent in Host
    std::string url;          // normalized: http://host:port
};

// "http://h:p", "h:p" or "h" (port 2379). Throws system_error(invalid_argument)
// for anything else (https, paths, user info).
endpoint parse_endpoint(std::string const& text);

// A connection of a pool (or a watch's own): stream, read buffer, aborted flag.
using connection = tenure::detail::http_connection;

struct http_answer {
    unsigned status = 0;
    std::string body;
    std::size_t endpoint = 0;  // index of the endpoint that answered
};

// The failure every part of the client reports for an interrupted operation.
[[noreturn]] void throw_aborted(std::string const& what);
// A transport failure (never an HTTP status) as api_error.
[[noreturn]] void throw_transport(boost::system::error_code const& ec, bool aborted, std::string const& what);
// True when `e` is worth trying on another endpoint: a transport failure
// (not an abort) or gRPC Unavailable.
bool fail_over_on(api_error const& e) noexcept;

class transport : public std::enable_shared_from_this<transport> {
public:
    transport(asio::any_io_executor ex, std::vector<endpoint> endpoints, std::size_t max_idle_per_endpoint);
    ~transport();
    transport(transport const&) = delete;
    transport& operator=(transport const&) = delete;

    // POSTs `body` to `target`, first on current(), then on the others in
    // turn. Returns the first answer that is not a 503 (a 503 from the last
    // endpoint tried is returned too); throws api_error when every endpoint
    // failed at the transport level, and at once when aborted (cancellation
    // of the awaiting coroutine, close()).
    asio::awaitable<http_answer> post(std::string target, std::string body, std::chrono::milliseconds per_attempt);

    // A fresh connection to endpoint `i` with its deadline set (the caller
    // owns it; close() does not touch it). Throws api_error.
    asio::awaitable<std::unique_ptr<connection>> connect(std::size_t i, clock::time_point deadline,
                                                         std::string const& what);

    std::size_t size() const noexcept { return endpoints_.size(); }
    endpoint const& at(std::size_t i) const { return endpoints_.at(i); }
    std::size_t current() const noexcept { return current_; }
    // Records that endpoint `i` answered (it becomes current).
    void good(std::size_t i) noexcept { current_ = i; }
    // Records that endpoint `i` failed: if it was current, the next one is.
    void bad(std::size_t i) noexcept {
        if (current_ == i) current_ = (i + 1) % endpoints_.size();
    }

    // Closes idle connections and aborts every unary request in flight.
    void close();
    std::size_t idle_connections() const noexcept;

private:
    std::vector<endpoint> endpoints_;
    std::vector<std::unique_ptr<tenure::detail::http_pool>> pools_;  // one per endpoint
    std::size_t current_ = 0;
};

}  // namespace tenure::etcd::detail
