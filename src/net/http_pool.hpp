// Internal: a pool of HTTP/1.1 keep-alive connections to one destination
// (TCP host:port, the same under TLS, or a Unix domain socket), shared by the
// Consul and the etcd transports.
//
// A request takes the most recently used idle connection (after a
// non-blocking check that the server has not closed it, when it has been
// idle for a second or more) or connects a new one; the connection goes back
// to the pool only after a complete exchange whose response allows
// keep-alive, and only if close() has not run since.
// Any error, timeout or cancellation closes the connection. With
// max_connections set, a request that finds every connection busy waits for
// one to be given back or closed (first come, first served) within its
// deadline. A connection given back while requests wait goes straight to the
// longest waiter, and a request that comes along while others wait queues
// behind them: nobody is overtaken. Resolve, connect, handshake, write and
// read share one deadline.
// Connecting enforces it with basic_stream::expires_at; the write and the
// read, with the pool's one watchdog timer (see watchdog), not with a timer
// armed and cancelled per operation.
//
// The pool knows no backend's error type: every failure goes to the
// fail_handler the owner gives, which throws its own (see net_failure).
#pragma once

#include "net/http_answer.hpp"
#include "net/net_stream.hpp"

#include <tenure/detail/clock.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/system/error_code.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tenure::detail {

struct http_destination {
    std::string host;  // name or address literal (IPv6 without brackets)
    std::uint16_t port = 0;
    std::string host_header;  // "host:port" as sent in Host; names the destination in errors
    std::string unix_path;    // non-empty: a Unix domain socket (host and port unused)
    // TLS: the client context, and the name the server's certificate must
    // carry (and SNI); empty: host. Null: plain bytes.
    std::shared_ptr<boost::asio::ssl::context> tls;
    std::string tls_server_name;
};

struct http_pool_options {
    http_destination destination;
    std::size_t max_idle = 16;        // idle connections kept (0: none)
    std::size_t max_connections = 0;  // open at once, idle + in flight; 0: no limit
    // The response header fields the owner reads: those whose names start
    // with this (case-insensitive; "X-Consul-"). The others are not stored:
    // each stored field is a heap allocation. Empty: none.
    std::string kept_fields_prefix;
};

// A failure, for the owner to turn into its own exception.
struct net_failure {
    // operation_aborted (close(), cancellation), timed_out (the deadline),
    // or the transport's own error.
    boost::system::error_code code;
    // The caller's description plus where it failed: "GET /v1/kv/a on
    // 127.0.0.1:8500: resolving localhost", "... (TLS handshake)". An abort
    // carries the caller's description alone.
    std::string what;
    // A short reason when code's own message says less ("no address"); else empty.
    std::string_view reason;
};
// Must throw; the pool never continues after calling it.
using fail_handler = std::function<void(net_failure const&)>;

// What a request is, for its error messages ("PUT /v1/txn on 127.0.0.1:8500"):
// the pool renders it only when the request fails, so that one that succeeds
// builds no string. Views into the request's wire form.
struct request_label {
    std::string_view method;
    std::string_view target;
    // The method and target of a request line ("PUT /v1/txn HTTP/1.1\r\n...").
    static request_label of(std::string_view wire) noexcept {
        auto const m = wire.find(' ');
        if (m == std::string_view::npos) return {wire, {}};
        auto const t = wire.find(' ', m + 1);
        return {wire.substr(0, m), wire.substr(m + 1, t == std::string_view::npos ? t : t - m - 1)};
    }
};

// Counts open connections so that a capped pool knows when one closes.
struct connection_count {
    std::size_t open = 0;
    std::function<void()> on_close;  // wakes the next waiter
};

struct http_connection {
    // The read buffer's room: one recvmsg takes most answers whole, and a
    // large body (a KV prefix) comes in 16 KiB steps.
    static constexpr std::size_t read_buffer_bytes = 16 * 1024;

    http_connection(boost::asio::any_io_executor const& ex, std::shared_ptr<connection_count> n,
                    std::shared_ptr<boost::asio::ssl::context> tls_context);
    ~http_connection();
    http_connection(http_connection const&) = delete;
    http_connection& operator=(http_connection const&) = delete;

    std::shared_ptr<boost::asio::ssl::context> tls;  // kept alive for the stream
    net_stream stream;
    std::shared_ptr<connection_count> count;
    boost::beast::flat_buffer buffer;
    bool aborted = false;  // closed under a pending operation (the pool's close(), or its owner's)
    // The exchange in flight's deadline, for the pool's watchdog (max: none),
    // and whether the watchdog closed the connection for passing it.
    tenure::detail::clock::time_point deadline = tenure::detail::clock::time_point::max();
    bool timed_out = false;
    tenure::detail::clock::time_point idle_since{};  // when it was last given back to the pool
    std::size_t active_slot = 0;  // its place in the pool's active list while in it
};

class http_pool {
public:
    using clock = tenure::detail::clock;
    using response = http_answer;

    http_pool(boost::asio::any_io_executor ex, http_pool_options opts, fail_handler on_fail);
    ~http_pool();
    http_pool(http_pool const&) = delete;
    http_pool& operator=(http_pool const&) = delete;

    // Writes `wire` (a complete request) on a pooled or new connection and
    // reads one response, all by `deadline`: its status, body and the
    // header fields of kept_fields_prefix. A kept-alive connection the
    // server closed meanwhile is retried once on a fresh connection. Never
    // fails for an HTTP status; a failure's message names the request by
    // its request line. The pool must outlive the call (its owner's
    // caller keeps the owner alive).
    boost::asio::awaitable<response> exchange(std::string wire, clock::time_point deadline);

    // A new connection of the caller's own, deadline set: counted as open
    // but never pooled, and close() does not touch it.
    boost::asio::awaitable<std::unique_ptr<http_connection>> connect(clock::time_point deadline,
                                                                     std::string const& what);

    // Closes idle connections and aborts every exchange in flight; the pool
    // stays usable.
    void close();

    std::size_t idle_connections() const noexcept { return idle_.size(); }
    std::size_t open_connections() const noexcept { return count_->open; }
    http_destination const& destination() const noexcept { return opts_.destination; }
    // The destination in error messages: host:port, or unix://path.
    std::string where() const;
    // "<method> <target> on <where()>".
    std::string describe(request_label label) const;

private:
    using endpoint = net_stream::protocol::endpoint;  // TCP or Unix
    class active_guard;
    struct watchdog;
    struct waiter;

    [[noreturn]] void fail(boost::system::error_code ec, std::string what, std::string_view reason = {}) const;
    [[noreturn]] void fail_io(boost::system::error_code const& ec, bool aborted, std::string what) const;

    // An idle connection given back less than this long ago is taken
    // without the probe of the server having closed it.
    static constexpr std::chrono::milliseconds trusted_idle{1000};
    std::unique_ptr<http_connection> take_idle();
    void give_back(std::unique_ptr<http_connection> c, std::uint64_t generation);
    bool at_limit() const noexcept;
    // The longest-waiting request still waiting (its wait not abandoned), out
    // of the queue; null when none.
    std::shared_ptr<waiter> next_waiter();
    // Whether any request still waits (forgets abandoned waits at the front).
    bool others_waiting();
    // A connection closed: the longest waiter may open one in its place.
    void wake_one();
    // The write and read on `c` (in the active list) must end by `deadline`.
    void watch(http_connection& c, clock::time_point deadline);
    // Its exchange ended; the watchdog stops when no other is in flight.
    void unwatch(http_connection& c);
    // The watchdog went off: closes the exchanges past their deadline, and
    // sets it for the earliest of the others.
    void on_watchdog();
    void arm_watchdog(clock::time_point at);
    // (The label is rendered only for a failure: a request that waits for a
    // connection and gets one builds no string.)
    // `generation`: the pool's when the exchange began (close() since aborts it).
    boost::asio::awaitable<std::unique_ptr<http_connection>> obtain(clock::time_point deadline,
                                                                    std::uint64_t generation, request_label label);
    boost::asio::awaitable<std::vector<endpoint>> resolve(clock::time_point deadline, std::string const& what);
    boost::asio::awaitable<std::unique_ptr<http_connection>> open(clock::time_point deadline,
                                                                  std::string const& what, bool tracked);
    // exchange()'s write and read, on `c` (null: a new connection), with
    // the retry on a fresh connection; `generation`: the pool's when the
    // exchange began.
    boost::asio::awaitable<response> round_trip(std::unique_ptr<http_connection> c, std::uint64_t generation,
                                                std::string_view wire, clock::time_point deadline,
                                                request_label label);

    boost::asio::any_io_executor ex_;
    http_pool_options opts_;
    fail_handler on_fail_;
    std::vector<endpoint> endpoints_;                     // resolved once, then cached
    std::vector<std::unique_ptr<http_connection>> idle_;  // most recently used last
    // In flight, for close() to abort. A list with each connection's place
    // in it (swap-remove): no allocation per request once it has grown.
    std::vector<http_connection*> active_;
    std::shared_ptr<connection_count> count_;
    // Requests waiting for a connection, longest first. A waiter that gives
    // up (deadline, cancellation) leaves its entry to expire.
    std::deque<std::weak_ptr<waiter>> waiters_;
    // One timer for the deadlines of every exchange in flight, set for the
    // earliest of them when it was armed. Requests with the same timeout
    // have deadlines in the order they start, so a request finds it already
    // set for an earlier time and arms nothing: no timer wait, cancellation,
    // completion or timerfd_settime per request while others are in flight.
    // It stops when the last exchange ends, so that it never keeps the
    // caller's io_context running. Shared with its pending wait, which
    // holds it weakly.
    std::shared_ptr<watchdog> watchdog_;
    std::size_t watched_ = 0;  // exchanges in flight with a deadline
    std::uint64_t generation_ = 0;  // bumped by close(): connections of older generations are not pooled
};

}  // namespace tenure::detail
