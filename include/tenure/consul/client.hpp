/// @file
/// tenure::consul::client — Consul's HTTP API (sessions, KV, txn, agent checks)
/// as C++20 coroutines on the caller's executor.
///
/// Operations return asio::awaitable<T> and throw tenure::consul::api_error (a
/// boost::system::system_error) on failure: the error_code is in tenure's
/// categories, and the HTTP status and the server's message are carried along.
/// The primitives built on top (session, election, leadership_scope) expose
/// Asio's universal completion-token model; tenure::launch (launch.hpp) runs
/// any of these operations with a completion token too.
///
/// Two transports: HTTP/1.1 over a keep-alive connection pool (Boost.Beast),
/// or one made by a transport_factory - the embedded agent's in-process
/// connection (tenure::agent::in_process(), in the tenure::agent library) is
/// one. This header, and the tenure::client library, know nothing of the agent.
#pragma once

#include <tenure/diagnostics.hpp>
#include <tenure/error.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tenure::detail {
struct client_access;
}

namespace tenure::consul {

/// Consul's magic flag values (api/lock.go, api/semaphore.go): a key taken by a
/// Lock carries lock_flag_value; Lock and Semaphore detect each other by them.
inline constexpr std::uint64_t lock_flag_value = 0x2ddccbc058a50c18ull;       // 3304740253564472344
inline constexpr std::uint64_t semaphore_flag_value = 0xe0f69a2baa414de0ull;  // 16210313421097356768

enum class consistency { default_mode, consistent, stale };

struct client_config {
    /// "http://127.0.0.1:8500", "127.0.0.1:8500", "localhost:8500",
    /// "https://localhost:8501" (TLS, see below) or "unix:///run/consul.sock"
    /// (plain HTTP over a Unix domain socket, as Consul's `addresses.http`
    /// spells it; the file's permissions decide who may connect). Empty:
    /// CONSUL_HTTP_ADDR, else http://127.0.0.1:8500.
    std::string address;
    /// ACL token sent as X-Consul-Token. Empty: CONSUL_HTTP_TOKEN.
    std::string token;
    /// ?dc= on every request; empty: the agent's own.
    std::string datacenter;
    /// Default for reads that do not say otherwise.
    consistency read_consistency = consistency::default_mode;
    /// Deadline of every non-blocking request (connect + write + read).
    std::chrono::milliseconds request_timeout{10'000};
    /// Blocking reads: the read deadline is wait + wait/16 + this margin.
    std::chrono::milliseconds blocking_margin{5'000};
    /// Idle keep-alive connections kept per client.
    std::size_t max_idle_connections = 16;
    /// Connections open at once, idle or in flight; 0: no limit. At the limit
    /// a request waits for a connection to come free (within its deadline), so
    /// a cap must leave room beside long blocking queries: share them through
    /// election_options::shared_watch (one blocking query per prefix).
    std::size_t max_connections = 0;

    // ---- TLS, for an https:// address (default port 443) ----
    // PEM CAs the server's certificate must chain to. Empty: CONSUL_CACERT,
    // else the system's CAs.
    std::string ca_file;
    /// PEM certificate and key presented to a server that asks for one
    /// (tenure agent -verify-incoming). Empty: CONSUL_CLIENT_CERT / CONSUL_CLIENT_KEY.
    std::string cert_file;
    std::string key_file;
    /// The name the server's certificate must carry, also sent as SNI. Empty:
    /// CONSUL_TLS_SERVER_NAME, else the address's host (a name or an IP).
    std::string tls_server_name;
};

/// The error thrown by every client operation that fails.
/// http_status(): 0 when the failure was not an HTTP answer (connect,
/// timeout, parse). server_message(): the server's text body for an error
/// status (may contain user input); when http_status() is 0, what failed,
/// e.g. "GET /v1/kv/a on 127.0.0.1:8500".
class api_error : public tenure::server_error {
public:
    api_error(boost::system::error_code ec, unsigned http_status, std::string server_message);
};

/// X-Consul-Index / -KnownLeader / -LastContact of a read.
struct query_meta {
    std::uint64_t index = 0;  // never 0 after the index-reset rules below
    bool known_leader = false;
    std::uint64_t last_contact_ms = 0;
};

struct read_options {
    /// Blocking query: answer once the index passes this one (0: answer now).
    std::uint64_t index = 0;
    /// How long the server may hold the query (0: the server's default, 5 min).
    std::chrono::nanoseconds wait{0};
    std::optional<consistency> mode;  // default: client_config::read_consistency
};

struct kv_pair {
    std::string key;
    std::optional<std::string> value;  // nullopt: the key has no value (JSON null)
    std::uint64_t flags = 0;
    std::uint64_t lock_index = 0;
    std::string session;  // empty: not held
    std::uint64_t create_index = 0;
    std::uint64_t modify_index = 0;
};

template <class T>
struct read_result {
    T value;
    query_meta meta;
};

enum class session_behavior { release, delete_keys };

struct session_request {
    std::string name;
    std::string node;                      // empty: the agent's node
    std::chrono::nanoseconds ttl{0};       // 0: no TTL
    std::chrono::nanoseconds lock_delay{15'000'000'000};  // 0 is sent (the Go api cannot)
    session_behavior behavior = session_behavior::release;
    /// nullopt: the server's default (serfHealth). Empty: no node checks.
    std::optional<std::vector<std::string>> node_checks;
    std::vector<std::string> service_checks;
};

struct session_info {
    std::string id;
    std::string name;
    std::string node;
    std::chrono::nanoseconds lock_delay{0};
    session_behavior behavior = session_behavior::release;
    std::chrono::nanoseconds ttl{0};
    std::vector<std::string> node_checks;
    std::vector<std::string> service_checks;
    std::uint64_t create_index = 0;
    std::uint64_t modify_index = 0;
};

struct put_options {
    std::uint64_t flags = 0;
    std::optional<std::uint64_t> cas;  // ?cas=N
};

/// One KV operation of a transaction (Consul's KVTxnOp).
struct txn_op {
    std::string verb;  // "set", "cas", "lock", "unlock", "get", "check-session", "check-index", "delete", ...
    std::string key;
    std::optional<std::string> value;
    std::uint64_t flags = 0;
    std::uint64_t index = 0;
    std::string session;
};

struct txn_error {
    std::size_t op_index = 0;
    std::string what;
};

struct txn_result {
    bool committed = false;
    std::vector<kv_pair> results;    // when committed
    std::vector<txn_error> errors;   // when not (HTTP 409)
};

struct agent_info {
    std::string node_name;
    std::string datacenter;
};

struct check_registration {
    std::string id;
    std::string name;
    std::chrono::nanoseconds ttl{0};
    std::string status;  // initial: "passing", "warning" or "critical" (default critical)
    std::string notes;
};

namespace detail {
class transport;  // the library's own (src/consul/transport.hpp): opaque to users
}

/// Makes the transport of a client that does not talk HTTP to its server. The
/// embedded agent's tenure::agent::in_process() returns one; a client calls it
/// once, from its constructor, with its executor and its configuration (the
/// token already taken from CONSUL_HTTP_TOKEN when empty).
using transport_factory =
    std::function<std::shared_ptr<detail::transport>(boost::asio::any_io_executor, client_config const&)>;

class client {
public:
    /// HTTP transport.
    explicit client(boost::asio::any_io_executor ex, client_config config = {});
    /// Another transport, e.g. the embedded agent's (no sockets):
    ///
    ///     tenure::consul::client consul{ex, agent.in_process()};
    ///
    /// Only config.token is used (sent as X-Consul-Token; empty:
    /// CONSUL_HTTP_TOKEN); the address and the HTTP settings are not.
    client(boost::asio::any_io_executor ex, transport_factory make_transport, client_config config = {});
    ~client();
    client(client const&) = delete;
    client& operator=(client const&) = delete;

    boost::asio::any_io_executor get_executor() const noexcept;
    client_config const& config() const noexcept;

    /// Closes idle connections and cancels requests in flight.
    void close();

    /// HTTP connections open now, idle or in flight (0 in-process).
    std::size_t open_connections() const noexcept;

    // ---- sessions ----
    boost::asio::awaitable<std::string> session_create(session_request req);
    /// The renewed session, or nullopt when the server no longer knows it (404).
    boost::asio::awaitable<std::optional<session_info>> session_renew(std::string id);
    boost::asio::awaitable<void> session_destroy(std::string id);
    boost::asio::awaitable<read_result<std::optional<session_info>>> session_info_get(std::string id, read_options opts = {});
    boost::asio::awaitable<read_result<std::vector<session_info>>> session_list(read_options opts = {});

    // ---- KV ----
    boost::asio::awaitable<read_result<std::optional<kv_pair>>> kv_get(std::string key, read_options opts = {});
    boost::asio::awaitable<read_result<std::vector<kv_pair>>> kv_list(std::string prefix, read_options opts = {});
    boost::asio::awaitable<read_result<std::vector<std::string>>> kv_keys(std::string prefix, std::string separator = {},
                                                                         read_options opts = {});
    /// Plain set (true) or CAS (the CAS result).
    boost::asio::awaitable<bool> kv_put(std::string key, std::optional<std::string> value, put_options opts = {});
    boost::asio::awaitable<bool> kv_acquire(std::string key, std::string session, std::optional<std::string> value,
                                            std::uint64_t flags = 0);
    boost::asio::awaitable<bool> kv_release(std::string key, std::string session, std::optional<std::string> value,
                                            std::uint64_t flags = 0);
    boost::asio::awaitable<bool> kv_delete(std::string key, std::optional<std::uint64_t> cas = {});
    boost::asio::awaitable<void> kv_delete_tree(std::string prefix);
    boost::asio::awaitable<txn_result> txn(std::vector<txn_op> ops);

    // ---- agent ----
    boost::asio::awaitable<agent_info> agent_self();
    boost::asio::awaitable<void> check_register(check_registration reg);
    boost::asio::awaitable<void> check_pass(std::string id, std::string note = {});
    boost::asio::awaitable<void> check_warn(std::string id, std::string note = {});
    boost::asio::awaitable<void> check_fail(std::string id, std::string note = {});
    boost::asio::awaitable<void> check_deregister(std::string id);

    struct impl;

private:
    friend struct tenure::detail::client_access;
    std::shared_ptr<impl> impl_;
};

/// Consul's documented index rules for blocking loops: an index that goes
/// backwards resets to 0; an index below 1 is treated as 1.
std::uint64_t next_wait_index(std::uint64_t previous, std::uint64_t returned) noexcept;

}  // namespace tenure::consul
