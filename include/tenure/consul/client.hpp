/// @file
/// tenure::consul::client — Consul's HTTP API (sessions, KV, txn, agent checks)
/// as Asio asynchronous operations on the caller's executor.
///
/// Every operation takes an Asio completion token, as the primitives built on
/// top (session, election, leadership_scope, semaphore) do, and completes with
/// void(error_code, T) or void(error_code). With the default token,
/// boost::asio::use_awaitable, a coroutine writes `co_await client.kv_get("k")`
/// and a failure rethrows the api_error itself; callbacks, use_future,
/// as_tuple and deferred work as with any Asio operation. See
/// tenure::consul::client for what every operation has in common (errors,
/// cancellation, lifetimes, threads).
///
/// Two transports: HTTP/1.1 over a keep-alive connection pool (Boost.Beast),
/// or one made by a transport_factory - the embedded agent's in-process
/// connection (tenure::agent::in_process(), in the tenure::agent library) is
/// one. This header, and the tenure::client library, know nothing of the agent.
#pragma once

#include <tenure/detail/async_bridge.hpp>
#include <tenure/detail/clock.hpp>
#include <tenure/diagnostics.hpp>
#include <tenure/error.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
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
    /// a request waits for a connection to come free (within its deadline;
    /// waiters are served in the order they asked), so
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

/// What a failed operation failed with. With the default token,
/// use_awaitable, it is rethrown as it is; on the error-code path the handler
/// gets its code, and tenure::with_diagnostics(diag, token) its HTTP status
/// and message (tenure/diagnostics.hpp).
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
// Internal: which entries of a prefix read a reader already holds (by key and
// ModifyIndex), so that decoding leaves them out (src/consul/watch_hub.cpp).
using kv_list_skip = std::function<bool(std::string_view key, std::uint64_t modify_index)>;
}

/// Makes the transport of a client that does not talk HTTP to its server. The
/// embedded agent's tenure::agent::in_process() returns one; a client calls it
/// once, from its constructor, with its executor and its configuration (the
/// token already taken from CONSUL_HTTP_TOKEN when empty).
using transport_factory =
    std::function<std::shared_ptr<detail::transport>(boost::asio::any_io_executor, client_config const&)>;

/// A Consul client. Its operations are Asio asynchronous operations (see the
/// file comment); what they have in common:
///
/// - **Errors**: an operation completes with the code of the api_error its
///   request failed with: `error::http_status` when the server answers an error
///   status (except where an operation says what a status means, e.g. 404 for
///   a key that does not exist), `error::unexpected_response` for an answer
///   this client cannot parse, `error::agent_stopped` in-process when the agent
///   has stopped, or an Asio code for a transport failure (`connection_refused`,
///   `timed_out` past the request's deadline, `operation_aborted` when cancelled
///   or after close(), ...). The HTTP status and the server's message: on the
///   api_error the default token rethrows, or through
///   tenure::with_diagnostics(diag, token) on the error-code path.
/// - **Cancellation**: per-operation, terminal only (partial and total requests
///   are ignored). The request is abandoned, the client closes its connection
///   (there is none in-process) and the operation completes with
///   `operation_aborted`; the client stays usable. A read changes nothing; a
///   write that was already sent may still be applied by the server.
/// - **Lifetimes**: the client must outlive every operation it started.
///   Arguments are taken by value.
/// - **Threads**: starting an operation only reads the client's executor, so a
///   thread that does not run the executor may start one (with use_future, say);
///   the request itself runs on the executor, and the rest of the client
///   (close(), its destruction) belongs to the thread that runs it.
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

    /// Creates a session (`PUT /v1/session/create`).
    ///
    /// @async_completion{void(boost::system::error_code, std::string session_id)}
    /// @async_cancellation
    /// Terminal (see the class): the session may still have been created; with
    /// a TTL it lapses, without one it stays until destroyed.
    /// @async_errors
    /// The api_error's code (see the class); `error::http_status` e.g. for a TTL
    /// the server refuses.
    /// @async_lifetimes
    /// The client must outlive the operation.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto session_create(session_request req, CompletionToken&& token = {}) {
        return tenure::detail::async_run(get_executor(), co_.session_create(std::move(req)),
                                         std::forward<CompletionToken>(token));
    }

    /// Renews a session (`PUT /v1/session/renew/<id>`): the renewed session, or
    /// nullopt when the server no longer knows it (404).
    ///
    /// @async_completion{void(boost::system::error_code, std::optional<session_info>)}
    /// @async_cancellation
    /// Terminal (see the class): the renewal may still have been applied.
    /// @async_errors
    /// The api_error's code (see the class); a 404 is not an error.
    /// @async_lifetimes
    /// The client must outlive the operation.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto session_renew(std::string id, CompletionToken&& token = {}) {
        return tenure::detail::async_run(get_executor(), co_.session_renew(std::move(id)),
                                         std::forward<CompletionToken>(token));
    }

    /// Destroys a session (`PUT /v1/session/destroy/<id>`); the keys it holds are
    /// released or deleted as its behavior says.
    ///
    /// @async_completion{void(boost::system::error_code)}
    /// @async_cancellation
    /// Terminal (see the class): the session may still have been destroyed.
    /// @async_errors
    /// The api_error's code (see the class).
    /// @async_lifetimes
    /// The client must outlive the operation.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto session_destroy(std::string id, CompletionToken&& token = {}) {
        return tenure::detail::async_run(get_executor(), co_.session_destroy(std::move(id)),
                                         std::forward<CompletionToken>(token));
    }

    /// Reads a session (`GET /v1/session/info/<id>`): nullopt when it does not
    /// exist. With opts.index, a blocking query.
    ///
    /// @async_completion{void(boost::system::error_code, read_result<std::optional<session_info>>)}
    /// @async_cancellation
    /// Terminal (see the class): a read, nothing changes.
    /// @async_errors
    /// The api_error's code (see the class).
    /// @async_lifetimes
    /// The client must outlive the operation.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto session_info_get(std::string id, read_options opts = {}, CompletionToken&& token = {}) {
        return tenure::detail::async_run(get_executor(), co_.session_info_get(std::move(id), opts),
                                         std::forward<CompletionToken>(token));
    }

    /// Every session of the datacenter (`GET /v1/session/list`). With opts.index,
    /// a blocking query.
    ///
    /// @async_completion{void(boost::system::error_code, read_result<std::vector<session_info>>)}
    /// @async_cancellation
    /// Terminal (see the class): a read, nothing changes.
    /// @async_errors
    /// The api_error's code (see the class).
    /// @async_lifetimes
    /// The client must outlive the operation.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto session_list(read_options opts = {}, CompletionToken&& token = {}) {
        return tenure::detail::async_run(get_executor(), co_.session_list(opts), std::forward<CompletionToken>(token));
    }

    // ---- KV ----

    /// Reads one key (`GET /v1/kv/<key>`): nullopt when it does not exist (404).
    /// With opts.index, a blocking query: answered once the key's index passes
    /// it, or after opts.wait.
    ///
    /// @async_completion{void(boost::system::error_code, read_result<std::optional<kv_pair>>)}
    /// @async_cancellation
    /// Terminal (see the class): a read, nothing changes. A cancelled blocking
    /// query completes at once.
    /// @async_errors
    /// The api_error's code (see the class); a 404 is not an error.
    /// @async_lifetimes
    /// The client must outlive the operation.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto kv_get(std::string key, read_options opts = {}, CompletionToken&& token = {}) {
        return tenure::detail::async_run(get_executor(), co_.kv_get(std::move(key), opts),
                                         std::forward<CompletionToken>(token));
    }

    /// Every pair under a prefix (`GET /v1/kv/<prefix>?recurse`): empty when there
    /// is none. With opts.index, a blocking query.
    ///
    /// @async_completion{void(boost::system::error_code, read_result<std::vector<kv_pair>>)}
    /// @async_cancellation
    /// Terminal (see the class): a read, nothing changes.
    /// @async_errors
    /// The api_error's code (see the class); a 404 is not an error.
    /// @async_lifetimes
    /// The client must outlive the operation.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto kv_list(std::string prefix, read_options opts = {}, CompletionToken&& token = {}) {
        return tenure::detail::async_run(get_executor(), co_.kv_list(std::move(prefix), opts),
                                         std::forward<CompletionToken>(token));
    }

    /// The keys under a prefix (`GET /v1/kv/<prefix>?keys`), up to the next
    /// `separator` when one is given. With opts.index, a blocking query.
    ///
    /// @async_completion{void(boost::system::error_code, read_result<std::vector<std::string>>)}
    /// @async_cancellation
    /// Terminal (see the class): a read, nothing changes.
    /// @async_errors
    /// The api_error's code (see the class); a 404 is not an error.
    /// @async_lifetimes
    /// The client must outlive the operation.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto kv_keys(std::string prefix, std::string separator = {}, read_options opts = {},
                 CompletionToken&& token = {}) {
        return tenure::detail::async_run(get_executor(), co_.kv_keys(std::move(prefix), std::move(separator), opts),
                                         std::forward<CompletionToken>(token));
    }

    /// Writes a key (`PUT /v1/kv/<key>`): true for a plain set, the CAS result
    /// with opts.cas.
    ///
    /// @async_completion{void(boost::system::error_code, bool written)}
    /// @async_cancellation
    /// Terminal (see the class): the write may still have been applied.
    /// @async_errors
    /// The api_error's code (see the class).
    /// @async_lifetimes
    /// The client must outlive the operation.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto kv_put(std::string key, std::optional<std::string> value, put_options opts = {},
                CompletionToken&& token = {}) {
        return tenure::detail::async_run(get_executor(), co_.kv_put(std::move(key), std::move(value), opts),
                                         std::forward<CompletionToken>(token));
    }

    /// Takes a key for a session (`PUT /v1/kv/<key>?acquire=`): true when the
    /// session holds it now.
    ///
    /// @async_completion{void(boost::system::error_code, bool acquired)}
    /// @async_cancellation
    /// Terminal (see the class): the key may still have been acquired.
    /// @async_errors
    /// The api_error's code (see the class); `error::http_status` e.g. for an
    /// unknown session.
    /// @async_lifetimes
    /// The client must outlive the operation.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto kv_acquire(std::string key, std::string session, std::optional<std::string> value, std::uint64_t flags = 0,
                    CompletionToken&& token = {}) {
        return tenure::detail::async_run(
            get_executor(), co_.kv_acquire(std::move(key), std::move(session), std::move(value), flags),
            std::forward<CompletionToken>(token));
    }

    /// Releases a key a session holds (`PUT /v1/kv/<key>?release=`): true when
    /// released.
    ///
    /// @async_completion{void(boost::system::error_code, bool released)}
    /// @async_cancellation
    /// Terminal (see the class): the key may still have been released.
    /// @async_errors
    /// The api_error's code (see the class).
    /// @async_lifetimes
    /// The client must outlive the operation.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto kv_release(std::string key, std::string session, std::optional<std::string> value, std::uint64_t flags = 0,
                    CompletionToken&& token = {}) {
        return tenure::detail::async_run(
            get_executor(), co_.kv_release(std::move(key), std::move(session), std::move(value), flags),
            std::forward<CompletionToken>(token));
    }

    /// Deletes a key (`DELETE /v1/kv/<key>`): true, or the CAS result with `cas`.
    ///
    /// @async_completion{void(boost::system::error_code, bool deleted)}
    /// @async_cancellation
    /// Terminal (see the class): the key may still have been deleted.
    /// @async_errors
    /// The api_error's code (see the class).
    /// @async_lifetimes
    /// The client must outlive the operation.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto kv_delete(std::string key, std::optional<std::uint64_t> cas = {}, CompletionToken&& token = {}) {
        return tenure::detail::async_run(get_executor(), co_.kv_delete(std::move(key), cas),
                                         std::forward<CompletionToken>(token));
    }

    /// Deletes every key under a prefix (`DELETE /v1/kv/<prefix>?recurse`).
    ///
    /// @async_completion{void(boost::system::error_code)}
    /// @async_cancellation
    /// Terminal (see the class): the keys may still have been deleted.
    /// @async_errors
    /// The api_error's code (see the class).
    /// @async_lifetimes
    /// The client must outlive the operation.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto kv_delete_tree(std::string prefix, CompletionToken&& token = {}) {
        return tenure::detail::async_run(get_executor(), co_.kv_delete_tree(std::move(prefix)),
                                         std::forward<CompletionToken>(token));
    }

    /// Runs a transaction (`PUT /v1/txn`): committed with its results, or (a 409)
    /// rolled back with the errors of the operations that failed.
    ///
    /// @async_completion{void(boost::system::error_code, txn_result)}
    /// @async_cancellation
    /// Terminal (see the class): the transaction may still have been committed.
    /// @async_errors
    /// The api_error's code (see the class); a rolled-back transaction (409) is
    /// not an error.
    /// @async_lifetimes
    /// The client must outlive the operation.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto txn(std::vector<txn_op> ops, CompletionToken&& token = {}) {
        return tenure::detail::async_run(get_executor(), co_.txn(std::move(ops)), std::forward<CompletionToken>(token));
    }

    // ---- agent ----

    /// The agent's node name and datacenter (`GET /v1/agent/self`).
    ///
    /// @async_completion{void(boost::system::error_code, agent_info)}
    /// @async_cancellation
    /// Terminal (see the class): a read, nothing changes.
    /// @async_errors
    /// The api_error's code (see the class).
    /// @async_lifetimes
    /// The client must outlive the operation.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto agent_self(CompletionToken&& token = {}) {
        return tenure::detail::async_run(get_executor(), co_.agent_self(), std::forward<CompletionToken>(token));
    }

    /// Registers a check with the agent (`PUT /v1/agent/check/register`).
    ///
    /// @async_completion{void(boost::system::error_code)}
    /// @async_cancellation
    /// Terminal (see the class): the check may still have been registered.
    /// @async_errors
    /// The api_error's code (see the class).
    /// @async_lifetimes
    /// The client must outlive the operation.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto check_register(check_registration reg, CompletionToken&& token = {}) {
        return tenure::detail::async_run(get_executor(), co_.check_register(std::move(reg)),
                                         std::forward<CompletionToken>(token));
    }

    /// Sets a TTL check passing (`PUT /v1/agent/check/pass/<id>`), with a note.
    ///
    /// @async_completion{void(boost::system::error_code)}
    /// @async_cancellation
    /// Terminal (see the class): the status may still have been set.
    /// @async_errors
    /// The api_error's code (see the class); `error::http_status` for an unknown
    /// check.
    /// @async_lifetimes
    /// The client must outlive the operation.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto check_pass(std::string id, std::string note = {}, CompletionToken&& token = {}) {
        return tenure::detail::async_run(get_executor(), co_.check_pass(std::move(id), std::move(note)),
                                         std::forward<CompletionToken>(token));
    }

    /// Sets a TTL check warning (`PUT /v1/agent/check/warn/<id>`), with a note.
    ///
    /// @async_completion{void(boost::system::error_code)}
    /// @async_cancellation
    /// Terminal (see the class): the status may still have been set.
    /// @async_errors
    /// The api_error's code (see the class); `error::http_status` for an unknown
    /// check.
    /// @async_lifetimes
    /// The client must outlive the operation.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto check_warn(std::string id, std::string note = {}, CompletionToken&& token = {}) {
        return tenure::detail::async_run(get_executor(), co_.check_warn(std::move(id), std::move(note)),
                                         std::forward<CompletionToken>(token));
    }

    /// Sets a TTL check critical (`PUT /v1/agent/check/fail/<id>`), with a note:
    /// sessions bound to it are invalidated.
    ///
    /// @async_completion{void(boost::system::error_code)}
    /// @async_cancellation
    /// Terminal (see the class): the status may still have been set.
    /// @async_errors
    /// The api_error's code (see the class); `error::http_status` for an unknown
    /// check.
    /// @async_lifetimes
    /// The client must outlive the operation.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto check_fail(std::string id, std::string note = {}, CompletionToken&& token = {}) {
        return tenure::detail::async_run(get_executor(), co_.check_fail(std::move(id), std::move(note)),
                                         std::forward<CompletionToken>(token));
    }

    /// Deregisters a check (`PUT /v1/agent/check/deregister/<id>`).
    ///
    /// @async_completion{void(boost::system::error_code)}
    /// @async_cancellation
    /// Terminal (see the class): the check may still have been deregistered.
    /// @async_errors
    /// The api_error's code (see the class).
    /// @async_lifetimes
    /// The client must outlive the operation.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto check_deregister(std::string id, CompletionToken&& token = {}) {
        return tenure::detail::async_run(get_executor(), co_.check_deregister(std::move(id)),
                                         std::forward<CompletionToken>(token));
    }

    struct impl;

private:
    friend struct tenure::detail::client_access;

    // The operations as coroutines that throw api_error: what the operations
    // above run, and what the library's own code awaits directly (through
    // tenure::detail::client_access, without a co_spawn per request).
    struct coroutines {
        std::shared_ptr<impl> state;

        boost::asio::awaitable<std::string> session_create(session_request req) const;
        boost::asio::awaitable<std::optional<session_info>> session_renew(std::string id) const;
        boost::asio::awaitable<void> session_destroy(std::string id) const;
        boost::asio::awaitable<read_result<std::optional<session_info>>> session_info_get(std::string id,
                                                                                          read_options opts = {}) const;
        boost::asio::awaitable<read_result<std::vector<session_info>>> session_list(read_options opts = {}) const;

        boost::asio::awaitable<read_result<std::optional<kv_pair>>> kv_get(std::string key,
                                                                           read_options opts = {}) const;
        boost::asio::awaitable<read_result<std::vector<kv_pair>>> kv_list(std::string prefix,
                                                                          read_options opts = {},
                                                                          detail::kv_list_skip skip = {},
                                                                          tenure::detail::clock::time_point* received = nullptr) const;
        boost::asio::awaitable<read_result<std::vector<std::string>>> kv_keys(std::string prefix,
                                                                             std::string separator = {},
                                                                             read_options opts = {}) const;
        boost::asio::awaitable<bool> kv_put(std::string key, std::optional<std::string> value,
                                            put_options opts = {}) const;
        boost::asio::awaitable<bool> kv_acquire(std::string key, std::string session, std::optional<std::string> value,
                                                std::uint64_t flags = 0) const;
        boost::asio::awaitable<bool> kv_release(std::string key, std::string session, std::optional<std::string> value,
                                                std::uint64_t flags = 0) const;
        boost::asio::awaitable<bool> kv_delete(std::string key, std::optional<std::uint64_t> cas = {}) const;
        boost::asio::awaitable<void> kv_delete_tree(std::string prefix) const;
        boost::asio::awaitable<txn_result> txn(std::vector<txn_op> ops) const;

        boost::asio::awaitable<agent_info> agent_self() const;
        boost::asio::awaitable<void> check_register(check_registration reg) const;
        boost::asio::awaitable<void> check_pass(std::string id, std::string note = {}) const;
        boost::asio::awaitable<void> check_warn(std::string id, std::string note = {}) const;
        boost::asio::awaitable<void> check_fail(std::string id, std::string note = {}) const;
        boost::asio::awaitable<void> check_deregister(std::string id) const;
    };
    coroutines co_;
};

/// Consul's documented index rules for blocking loops: an index that goes
/// backwards resets to 0; an index below 1 is treated as 1.
std::uint64_t next_wait_index(std::uint64_t previous, std::uint64_t returned) noexcept;

}  // namespace tenure::consul
