/// @file
/// The embedded Consul-compatible agent: an HTTP server speaking Consul's
/// session, KV, check and catalog API, backed by one in-process state machine.
///
///     boost::asio::io_context ioc{1};
///     tenure::agent agent{ioc.get_executor(), {.http_addr = "127.0.0.1:0"}};
///     agent.start();
///     std::cout << agent.http_address() << '\n';   // http://127.0.0.1:40123
///     ioc.run();                                   // until agent.stop()
///
/// Threading: everything runs on the executor given to the constructor; the
/// agent creates no threads. Call every member from that executor's thread (or
/// before the io_context runs). The executor must be single-threaded (an
/// io_context run by one thread, or a strand).
///
/// Lifetime: the agent's sockets and timers belong to the executor's execution
/// context, so destroy the agent before that context. Destroying the agent
/// stops it; coroutines still suspended in the io_context keep the internals
/// alive until they have unwound (they do so as soon as the io_context runs
/// again, or when it is destroyed).
#pragma once

#include <tenure/consul/client.hpp>
#include <tenure/log_level.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <chrono>
#include <cstddef>
#include <iostream>
#include <memory>
#include <string>

namespace tenure {
namespace detail {
struct agent_access;  // the agent library's own way in (src/agent/agent_access.hpp)
}

struct agent_options {
    /// host:port to listen on; port 0 picks an ephemeral port (see local_endpoint()).
    /// The host is an IPv4 or IPv6 literal ("[::1]:8500"), "localhost", or empty
    /// (":8500", every IPv4 interface). A leading "http://" is ignored.
    /// "unix:///run/tenure.sock" listens on a Unix domain socket instead, as
    /// Consul's addresses.http does: a socket file left there by an earlier
    /// run is replaced (any other file is an error), and stop() removes it.
    std::string http_addr = "127.0.0.1:0";
    /// The Unix socket file's permission bits (e.g. 0660; Consul's
    /// unix_sockets.mode); 0 leaves them to the umask. Only with a unix:// http_addr.
    unsigned unix_socket_mode = 0;
    std::string node_name = "tenure";
    std::string datacenter = "dc1";
    /// Shortest session TTL accepted by /v1/session/create (Consul: 10s). Tests lower it.
    std::chrono::nanoseconds session_ttl_min = std::chrono::seconds{10};
    /// Connections beyond this many are accepted and closed at once.
    std::size_t max_connections = 16384;
    /// Largest request header (request line and fields); larger ones get 431.
    std::size_t max_header_bytes = 64 * 1024;
    log_level level = log_level::info;
    std::ostream* log_stream = &std::clog;  // nullptr: no logging
    bool log_json = false;  // one JSON object per line (log_format::json)
    /// Non-empty: KV entries, sessions, checks and indexes are kept in a
    /// write-ahead log with snapshots in this directory (created if needed),
    /// fsynced before a write is acknowledged, and recovered at startup. Only
    /// one agent may use a directory at a time (the constructor throws).
    std::string data_dir;

    // ---- ACLs (docs/agent.md, "ACLs") ----
    // Off by default. On: every request is checked against its token
    // (X-Consul-Token, Authorization: Bearer or ?token=).
    bool acl_enabled = false;
    /// What names no rule matches get: false = deny (the default), true = allow.
    bool acl_default_allow = false;
    /// Secret of the management token; empty: none.
    std::string acl_bootstrap_token;
    /// JSON file of policies and tokens, read by the constructor; empty: none.
    std::string acl_file;

    // ---- limits against abuse (docs/agent.md, "Limits"); 0: no limit ----
    std::size_t max_sessions_per_node = 10'000;
    std::size_t max_kv_keys = 1'000'000;
    /// Largest KV value (Consul's limits.kv_max_value_size); request bodies
    /// may be 64 KiB larger, transactions no larger.
    std::size_t kv_max_value_size = 512 * 1024;
    /// Blocking queries parked at once; one more is answered 429.
    std::size_t max_blocking_queries = 16'384;
    /// Requests per second per connection (token bucket of http_burst_per_conn).
    // The default sits above what one client waiting for each answer can
    // send over loopback: ~85k/s on one connection when both ends busy-poll
    // (bench/RESULTS.md, throughput), which 50k/s used to cut off with 429s.
    double http_rate_per_conn = 200'000;
    double http_burst_per_conn = 200'000;

    // ---- HTTPS (docs/agent.md, "TLS") ----
    // host:port of an HTTPS listener beside the HTTP one; empty: none.
    std::string https_addr;
    std::string cert_file;  // PEM certificate chain of the server
    std::string key_file;   // PEM private key of that certificate
    std::string ca_file;    // PEM CAs that sign client certificates
    /// Require a client certificate signed by a CA of ca_file.
    bool verify_incoming = false;

    // ---- the web UI and the lock history (docs/agent.md, "Web UI") ----
    /// Serve a live view of locks, sessions and checks at /ui/ (Consul's
    /// -ui). Off by default. The page follows the ACLs: with them on, it asks
    /// for a token.
    bool ui = false;
    /// Lock terms the agent remembers across all keys (who held each key,
    /// with which fencing token, how the term ended), served at
    /// /v1/tenure/history; the oldest go first. 0 keeps none.
    std::size_t history_capacity = 4096;
};

class agent {
public:
    /// Binds and listens at once. Throws boost::system::system_error when the
    /// address cannot be parsed (code() == invalid_argument; what(): `invalid
    /// HTTP address "x" (expected host:port, e.g. 127.0.0.1:8500)`) or cannot
    /// be bound (e.g. address_in_use; what(): `cannot listen on
    /// 127.0.0.1:8500: Address already in use`).
    agent(boost::asio::any_io_executor ex, agent_options opts);
    agent(agent const&) = delete;
    agent& operator=(agent const&) = delete;
    /// A moved-from agent may only be destroyed or assigned to.
    agent(agent&&) noexcept;
    agent& operator=(agent&&) noexcept;
    ~agent();  // calls stop()

    /// The TCP listener (default-constructed when listening on a Unix socket).
    boost::asio::ip::tcp::endpoint local_endpoint() const;
    /// "http://127.0.0.1:PORT" ("http://[::1]:PORT" for IPv6), or
    /// "unix:///path" - either one a client_config::address.
    std::string http_address() const;
    /// The HTTPS listener (port 0 and "" when there is none), "https://127.0.0.1:PORT".
    boost::asio::ip::tcp::endpoint https_endpoint() const;
    std::string https_address() const;

    /// Spawns the accept loop and the timer loop on the executor. Idempotent;
    /// does nothing after stop().
    void start();
    /// Closes the listener and every connection, cancels the timer loop and
    /// every parked blocking query. Idempotent. Once the coroutines have
    /// unwound, the agent leaves no work in the io_context.
    void stop();
    bool stopped() const noexcept;

    /// Number of open HTTP connections.
    std::size_t connection_count() const noexcept;

    /// The in-process connection: a consul::client made with it has its
    /// requests handled by this agent directly, with no sockets, and sees
    /// exactly what an HTTP client would (blocking queries, ACLs, errors):
    ///
    ///     tenure::consul::client consul{ex, agent.in_process()};
    ///
    /// The agent must outlive every client made with it, must not be moved
    /// while they exist, and must run on the clients' thread.
    consul::transport_factory in_process();

private:
    friend struct detail::agent_access;
    struct impl;
    std::shared_ptr<impl> impl_;
};

}  // namespace tenure
