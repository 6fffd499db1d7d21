/// @file
/// tenure::etcd::client — etcd v3 through its JSON gateway (grpc-gateway,
/// etcd 3.4: POST /v3/...) as Asio asynchronous operations on the caller's
/// executor.
///
/// Every operation takes an Asio completion token, as the primitives built on
/// top do, and completes with void(error_code, T) or void(error_code). With
/// the default token, boost::asio::use_awaitable, a coroutine writes
/// `co_await client.range("k")` and a failure rethrows the api_error itself;
/// callbacks, use_future, as_tuple and deferred work as with any Asio
/// operation. See tenure::etcd::client for what every operation has in common
/// (errors, cancellation, lifetimes, threads).
///
/// Wire conventions handled here so callers never see them: keys and values
/// are raw bytes (base64 on the wire), int64 fields travel as JSON strings,
/// and fields whose value is zero are omitted by the gateway (a missing field
/// reads as 0 / false / empty).
///
/// Endpoints and failover: requests go to the endpoint that last answered. On
/// a connection failure, a timeout, an I/O error before the answer, or an HTTP
/// 503 (gRPC Unavailable: no leader, request timed out) the same request is
/// sent to the next endpoint, each endpoint once. A mutation whose answer was
/// lost may therefore be applied twice (at-least-once), as with any retry.
///
/// Unary requests share a small keep-alive pool per endpoint; each watch has
/// its own connection. No threads: everything runs on the client's executor.
///
/// g++ 12 note: name structs and vectors before passing them to an operation
/// inside co_await (`auto cmp = ...; co_await c.txn(cmp, ...)`), never build a
/// braced temporary inside the co_await expression.
#pragma once

#include <tenure/detail/async_bridge.hpp>
#include <tenure/diagnostics.hpp>
#include <tenure/error.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace tenure::detail {
struct etcd_client_access;
}

namespace tenure::etcd {

struct client_config {
    /// "http://127.0.0.1:2379", "127.0.0.1:2379" or "localhost:2379". Empty:
    /// ETCDCTL_ENDPOINTS (comma-separated), else http://127.0.0.1:2379.
    std::vector<std::string> endpoints;
    /// Deadline of one attempt on one endpoint (connect + write + read). A
    /// request that fails over may take up to endpoints.size() times this.
    /// Opening a watch (up to its `created` answer) uses it too.
    std::chrono::milliseconds request_timeout{5'000};
    /// Idle keep-alive connections kept per endpoint.
    std::size_t max_idle_connections = 8;
};

/// What a failed operation failed with. With the default token,
/// use_awaitable, it is rethrown as it is; on the error-code path the handler
/// gets its code, and tenure::with_diagnostics(diag, token) its HTTP status
/// and message (tenure/diagnostics.hpp) - not grpc_code() nor
/// compact_revision(), which only the exception carries.
/// http_status(): 0 when the failure was not an HTTP answer (connect,
/// timeout, parse). server_message(): the gateway's message ("etcdserver:
/// requested lease not found"), or for transport failures what failed
/// ("POST /v3/kv/put on 127.0.0.1:2379: ...").
class api_error : public tenure::server_error {
public:
    api_error(boost::system::error_code ec, unsigned http_status, int grpc_code, std::string server_message,
              std::int64_t compact_revision = 0);
    /// The gRPC status code the gateway reported (5 NotFound, 11 OutOfRange,
    /// 14 Unavailable, ...); 0 when there was none.
    int grpc_code() const noexcept { return grpc_code_; }
    /// For error::etcd_compacted raised by a watch: the compaction revision
    /// (resume by reading at or after it). 0 otherwise.
    std::int64_t compact_revision() const noexcept { return compact_revision_; }

private:
    int grpc_code_;
    std::int64_t compact_revision_;
};

/// ResponseHeader. Nested txn responses carry only `revision`.
struct response_header {
    std::uint64_t cluster_id = 0;
    std::uint64_t member_id = 0;
    std::int64_t revision = 0;
    std::uint64_t raft_term = 0;
};

/// mvccpb.KeyValue.
struct key_value {
    std::string key;    // raw bytes
    std::string value;  // raw bytes; empty when keys_only or for a DELETE event
    std::int64_t create_revision = 0;
    std::int64_t mod_revision = 0;
    std::int64_t version = 0;
    std::int64_t lease = 0;  // 0: no lease
};

// ---- lease ----

struct lease_grant_response {
    response_header header;
    std::int64_t id = 0;
    std::int64_t ttl = 0;  // as granted (etcd raises small TTLs to its minimum)
};

// ---- KV ----

enum class sort_order { none, ascend, descend };
enum class sort_target { key, version, create, mod, value };

/// Everything of a RangeRequest but the key and range_end (kept trivially
/// destructible so it can be built inline).
struct range_options {
    std::int64_t limit = 0;     // 0: no limit
    std::int64_t revision = 0;  // 0: the current revision
    sort_order order = sort_order::none;
    sort_target target = sort_target::key;
    bool serializable = false;  // answer from the member's local state (no quorum needed)
    bool keys_only = false;
    bool count_only = false;
    std::int64_t min_mod_revision = 0;
    std::int64_t max_mod_revision = 0;
    std::int64_t min_create_revision = 0;
    std::int64_t max_create_revision = 0;
};

struct range_response {
    response_header header;
    std::vector<key_value> kvs;
    bool more = false;
    std::int64_t count = 0;
};

struct put_options {
    std::int64_t lease = 0;  // 0: no lease
    bool prev_kv = false;    // answer the previous key-value pair
    bool ignore_value = false;
    bool ignore_lease = false;
};

struct put_response {
    response_header header;
    std::optional<key_value> prev_kv;  // with put_options::prev_kv, when the key existed
};

struct delete_response {
    response_header header;
    std::int64_t deleted = 0;
    std::vector<key_value> prev_kvs;  // with prev_kv
};

// ---- txn ----

enum class compare_target { version, create, mod, value, lease };
enum class compare_result { equal, greater, less, not_equal };

/// One Compare of a txn: `target(key) result operand`.
struct compare {
    std::string key;
    compare_target target = compare_target::create;
    compare_result result = compare_result::equal;
    std::int64_t number = 0;  // version, create_revision, mod_revision or lease
    std::string value;        // for compare_target::value
    std::string range_end;    // optional: compare every key in [key, range_end)

    static compare create_revision(std::string key, compare_result r, std::int64_t revision);
    static compare mod_revision(std::string key, compare_result r, std::int64_t revision);
    static compare version(std::string key, compare_result r, std::int64_t version);
    static compare value_of(std::string key, compare_result r, std::string value);
    static compare lease(std::string key, compare_result r, std::int64_t lease);
};

struct put_op {
    std::string key;
    std::string value;
    put_options options;
};

struct range_op {
    std::string key;
    std::string range_end;
    range_options options;
};

struct delete_op {
    std::string key;
    std::string range_end;
    bool prev_kv = false;
};

using request_op = std::variant<put_op, range_op, delete_op>;
using response_op = std::variant<put_response, range_response, delete_response>;

struct txn_response {
    response_header header;
    bool succeeded = false;
    std::vector<response_op> responses;  // one per op of the branch that ran
};

// ---- watch ----

enum class event_type { put, del };

struct event {
    event_type type = event_type::put;
    key_value kv;  // for a DELETE: key and mod_revision (the deletion's revision)
    std::optional<key_value> prev_kv;  // with watch_options::prev_kv, when there was one
};

struct watch_options {
    std::int64_t start_revision = 0;  // 0: from the next change; else replay history from here
    bool prev_kv = false;
    bool progress_notify = false;  // periodic empty responses carrying the current revision
    bool no_put = false;           // filter out PUT events
    bool no_delete = false;        // filter out DELETE events
};

/// One WatchResponse as next() hands it out: a batch of events (in revision
/// order) or, with progress_notify, an empty batch carrying the revision.
struct watch_response {
    response_header header;
    std::int64_t watch_id = 0;
    std::vector<event> events;
};

/// One watch on its own HTTP connection (`POST /v3/watch`, a streaming answer).
/// Move-only; destroying or close()-ing it closes the connection, which is how
/// etcd's gateway ends a watch.
class watch_stream {
public:
    watch_stream() = default;
    ~watch_stream();
    watch_stream(watch_stream&&) noexcept;
    watch_stream& operator=(watch_stream&&) noexcept;
    watch_stream(watch_stream const&) = delete;
    watch_stream& operator=(watch_stream const&) = delete;

    /// The next response with events (or a progress notification). One next()
    /// at a time per stream.
    ///
    /// @async_completion{void(boost::system::error_code, watch_response)}
    /// @async_cancellation
    /// Terminal only: closes the stream (its connection), which ends the watch
    /// on the server; completes with `operation_aborted`.
    /// @async_errors
    /// After any error the stream is closed and the next next() completes with
    /// `not_connected`, as it does on a closed stream.
    ///   - `error::etcd_compacted`: the start revision was compacted; re-read,
    ///     then watch from the read's revision + 1 (api_error::compact_revision(),
    ///     on the exception the default token rethrows, says where history
    ///     begins).
    ///   - `error::watch_canceled`: etcd canceled the watch for another reason.
    ///   - `error::etcd_unavailable` etc.: an error message on the stream (e.g.
    ///     "etcdserver: no leader").
    ///   - an Asio code: the connection failed or ended (`eof`), or close()
    ///     was called meanwhile (`operation_aborted`).
    /// @async_lifetimes
    /// The operation keeps the stream's state alive: the stream object may be
    /// moved or destroyed meanwhile (destroying it closes the stream). The
    /// client need not outlive it. A default-constructed stream has no
    /// executor: its next() runs on the handler's associated executor and
    /// completes with `not_connected`.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto next(CompletionToken&& token = {}) {
        return tenure::detail::async_run(ex_, next_impl(impl_), std::forward<CompletionToken>(token));
    }

    /// The executor of the client that opened the watch (kept by a moved-from
    /// stream; none for a default-constructed one).
    boost::asio::any_io_executor get_executor() const noexcept { return ex_; }

    /// The `created` answer's header (its revision is the watch's start point
    /// when no start_revision was given).
    response_header const& created_header() const noexcept;
    std::int64_t watch_id() const noexcept;
    /// The endpoint the watch is connected to.
    std::string const& endpoint() const noexcept;
    bool is_open() const noexcept;
    void close() noexcept;

    struct impl;
    explicit watch_stream(std::shared_ptr<impl> p) noexcept;

private:
    friend struct tenure::detail::etcd_client_access;
    // What next() runs, and what the library's own code awaits directly
    // (through tenure::detail::etcd_client_access, without a co_spawn).
    static boost::asio::awaitable<watch_response> next_impl(std::shared_ptr<impl> self);

    boost::asio::any_io_executor ex_;
    std::shared_ptr<impl> impl_;
};

// ---- maintenance ----

struct member_status {
    response_header header;  // header.member_id: the member that answered
    std::string version;
    std::uint64_t leader = 0;  // member id of the raft leader (0: none known)
    std::int64_t db_size = 0;
    std::uint64_t raft_index = 0;
    std::uint64_t raft_term = 0;
};

/// The range end that selects every key starting with `prefix` (etcd's
/// GetPrefixRangeEnd): the prefix with its last byte below 0xff incremented
/// and what follows dropped; "\0" (all keys from the key on) when every byte
/// is 0xff or the prefix is empty.
std::string prefix_end(std::string_view prefix);

/// An etcd v3 client. Its operations are Asio asynchronous operations (see the
/// file comment); what they have in common:
///
/// - **Errors**: an operation completes with the code of the api_error its
///   request failed with, in tenure's category (`error::lease_not_found`,
///   `error::etcd_compacted`, `error::etcd_unavailable` once every endpoint
///   answered Unavailable, `error::etcd_error` for another gRPC error,
///   `error::http_status`, `error::unexpected_response`) or an Asio code for a
///   transport failure once every endpoint has failed (`connection_refused`,
///   `timed_out`, ...; `operation_aborted` when cancelled or after close()).
///   The HTTP status and the server's message: on the api_error the default
///   token rethrows (with the gRPC code and a watch's compaction revision), or
///   through tenure::with_diagnostics(diag, token) on the error-code path.
/// - **Cancellation**: per-operation, terminal only (partial and total requests
///   are ignored). The request is abandoned, the client closes its connection
///   and the operation completes with `operation_aborted`; the client stays
///   usable. A read changes nothing; a mutation that was already sent may
///   still be applied (and, with failover, possibly twice: see the file
///   comment).
/// - **Lifetimes**: the client must outlive every operation it started (a
///   watch_stream, once opened, does not need it). Arguments are taken by
///   value.
/// - **Threads**: starting an operation only reads the client's executor, so a
///   thread that does not run the executor may start one (with use_future, say);
///   the request itself runs on the executor, and the rest of the client
///   (close(), its destruction) belongs to the thread that runs it.
class client {
public:
    explicit client(boost::asio::any_io_executor ex, client_config config = {});
    ~client();
    client(client const&) = delete;
    client& operator=(client const&) = delete;

    boost::asio::any_io_executor get_executor() const noexcept;
    /// The configuration with its endpoints normalized ("http://host:port").
    client_config const& config() const noexcept;
    /// The endpoint the next request goes to first (the last one that answered).
    std::string const& current_endpoint() const noexcept;

    /// Closes idle connections and aborts requests in flight (not watches).
    void close();

    // ---- lease ----

    /// Grants a lease of `ttl_seconds` (`POST /v3/lease/grant`); `id` 0 lets etcd
    /// choose the ID.
    ///
    /// @async_completion{void(boost::system::error_code, lease_grant_response)}
    /// @async_cancellation
    /// Terminal (see the class): the lease may still have been granted; it
    /// expires after its TTL.
    /// @async_errors
    /// The api_error's code (see the class).
    /// @async_lifetimes
    /// The client must outlive the operation.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto lease_grant(std::int64_t ttl_seconds, std::int64_t id = 0, CompletionToken&& token = {}) {
        return tenure::detail::async_run(get_executor(), co_.lease_grant(ttl_seconds, id),
                                         std::forward<CompletionToken>(token));
    }

    /// One keep-alive (one `POST /v3/lease/keepalive`): the remaining TTL in
    /// seconds, or 0 when etcd no longer knows the lease.
    ///
    /// @async_completion{void(boost::system::error_code, std::int64_t ttl_seconds)}
    /// @async_cancellation
    /// Terminal (see the class): the keep-alive may still have been applied.
    /// @async_errors
    /// The api_error's code (see the class); an unknown lease is not an error.
    /// @async_lifetimes
    /// The client must outlive the operation.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto lease_keepalive(std::int64_t id, CompletionToken&& token = {}) {
        return tenure::detail::async_run(get_executor(), co_.lease_keepalive(id), std::forward<CompletionToken>(token));
    }

    /// Revokes a lease (`POST /v3/lease/revoke`), deleting the keys attached to it.
    ///
    /// @async_completion{void(boost::system::error_code)}
    /// @async_cancellation
    /// Terminal (see the class): the lease may still have been revoked.
    /// @async_errors
    /// The api_error's code (see the class); `error::lease_not_found` for an
    /// unknown lease.
    /// @async_lifetimes
    /// The client must outlive the operation.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto lease_revoke(std::int64_t id, CompletionToken&& token = {}) {
        return tenure::detail::async_run(get_executor(), co_.lease_revoke(id), std::forward<CompletionToken>(token));
    }

    /// The remaining TTL of a lease in seconds (`POST /v3/lease/timetolive`); -1
    /// when the lease is gone.
    ///
    /// @async_completion{void(boost::system::error_code, std::int64_t ttl_seconds)}
    /// @async_cancellation
    /// Terminal (see the class): a read, nothing changes.
    /// @async_errors
    /// The api_error's code (see the class).
    /// @async_lifetimes
    /// The client must outlive the operation.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto lease_time_to_live(std::int64_t id, CompletionToken&& token = {}) {
        return tenure::detail::async_run(get_executor(), co_.lease_time_to_live(id),
                                         std::forward<CompletionToken>(token));
    }

    // ---- KV ----
    // One key (range_end empty), [key, range_end), or with prefix_end(key)
    // every key under a prefix.

    /// Reads keys (`POST /v3/kv/range`).
    ///
    /// @async_completion{void(boost::system::error_code, range_response)}
    /// @async_cancellation
    /// Terminal (see the class): a read, nothing changes.
    /// @async_errors
    /// The api_error's code (see the class); `error::etcd_compacted` for a
    /// revision below the compaction point.
    /// @async_lifetimes
    /// The client must outlive the operation.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto range(std::string key, std::string range_end = {}, range_options opts = {}, CompletionToken&& token = {}) {
        return tenure::detail::async_run(get_executor(), co_.range(std::move(key), std::move(range_end), opts),
                                         std::forward<CompletionToken>(token));
    }

    /// Writes a key (`POST /v3/kv/put`).
    ///
    /// @async_completion{void(boost::system::error_code, put_response)}
    /// @async_cancellation
    /// Terminal (see the class): the write may still have been applied.
    /// @async_errors
    /// The api_error's code (see the class); `error::lease_not_found` for an
    /// unknown opts.lease.
    /// @async_lifetimes
    /// The client must outlive the operation.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto put(std::string key, std::string value, put_options opts = {}, CompletionToken&& token = {}) {
        return tenure::detail::async_run(get_executor(), co_.put(std::move(key), std::move(value), opts),
                                         std::forward<CompletionToken>(token));
    }

    /// Deletes keys (`POST /v3/kv/deleterange`).
    ///
    /// @async_completion{void(boost::system::error_code, delete_response)}
    /// @async_cancellation
    /// Terminal (see the class): the keys may still have been deleted.
    /// @async_errors
    /// The api_error's code (see the class).
    /// @async_lifetimes
    /// The client must outlive the operation.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto delete_range(std::string key, std::string range_end = {}, bool prev_kv = false,
                      CompletionToken&& token = {}) {
        return tenure::detail::async_run(get_executor(),
                                         co_.delete_range(std::move(key), std::move(range_end), prev_kv),
                                         std::forward<CompletionToken>(token));
    }

    /// A transaction (`POST /v3/kv/txn`): `success` runs when every compare holds,
    /// `failure` otherwise; txn_response::succeeded says which.
    ///
    /// @async_completion{void(boost::system::error_code, txn_response)}
    /// @async_cancellation
    /// Terminal (see the class): the transaction may still have been applied.
    /// @async_errors
    /// The api_error's code (see the class); compares that fail are not an
    /// error.
    /// @async_lifetimes
    /// The client must outlive the operation.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto txn(std::vector<compare> compares, std::vector<request_op> success, std::vector<request_op> failure,
             CompletionToken&& token = {}) {
        return tenure::detail::async_run(get_executor(),
                                         co_.txn(std::move(compares), std::move(success), std::move(failure)),
                                         std::forward<CompletionToken>(token));
    }

    /// Compacts history up to `revision` (`POST /v3/kv/compaction`).
    ///
    /// @async_completion{void(boost::system::error_code, response_header)}
    /// @async_cancellation
    /// Terminal (see the class): the compaction may still have been applied.
    /// @async_errors
    /// The api_error's code (see the class); `error::etcd_compacted` for a
    /// revision already compacted.
    /// @async_lifetimes
    /// The client must outlive the operation.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto compact(std::int64_t revision, bool physical = false, CompletionToken&& token = {}) {
        return tenure::detail::async_run(get_executor(), co_.compact(revision, physical),
                                         std::forward<CompletionToken>(token));
    }

    // ---- watch ----

    /// Opens a watch and completes once etcd confirmed it (`created`): every
    /// change after created_header().revision (or from start_revision) is
    /// delivered by watch_stream::next(). Sends `Grpc-Metadata-hasleader: true`,
    /// so that a member that loses its leader ends the stream with
    /// etcd_unavailable. Fails over like any request.
    ///
    /// @async_completion{void(boost::system::error_code, watch_stream)}
    /// @async_cancellation
    /// Terminal (see the class): the watch's connection is closed, which ends
    /// the watch on the server.
    /// @async_errors
    /// The api_error's code (see the class); `error::etcd_compacted` for a
    /// start_revision below the compaction point (often reported by the first
    /// next() instead).
    /// @async_lifetimes
    /// The client must outlive the operation (not the stream).
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto watch(std::string key, std::string range_end = {}, watch_options opts = {}, CompletionToken&& token = {}) {
        return tenure::detail::async_run(get_executor(), co_.watch(std::move(key), std::move(range_end), opts),
                                         std::forward<CompletionToken>(token));
    }

    // ---- maintenance ----

    /// The status of the current endpoint's member
    /// (`POST /v3/maintenance/status`, with failover).
    ///
    /// @async_completion{void(boost::system::error_code, member_status)}
    /// @async_cancellation
    /// Terminal (see the class): a read, nothing changes.
    /// @async_errors
    /// The api_error's code (see the class).
    /// @async_lifetimes
    /// The client must outlive the operation.
    template <class CompletionToken = boost::asio::use_awaitable_t<>>
    auto status(CompletionToken&& token = {}) {
        return tenure::detail::async_run(get_executor(), co_.status(), std::forward<CompletionToken>(token));
    }

    struct impl;

private:
    friend struct tenure::detail::etcd_client_access;

    // The operations as coroutines that throw api_error: what the operations
    // above run, and what the library's own code awaits directly (through
    // tenure::detail::etcd_client_access, without a co_spawn per request).
    struct coroutines {
        std::shared_ptr<impl> state;

        boost::asio::awaitable<lease_grant_response> lease_grant(std::int64_t ttl_seconds, std::int64_t id = 0) const;
        boost::asio::awaitable<std::int64_t> lease_keepalive(std::int64_t id) const;
        boost::asio::awaitable<void> lease_revoke(std::int64_t id) const;
        boost::asio::awaitable<std::int64_t> lease_time_to_live(std::int64_t id) const;

        boost::asio::awaitable<range_response> range(std::string key, std::string range_end = {},
                                                     range_options opts = {}) const;
        boost::asio::awaitable<put_response> put(std::string key, std::string value, put_options opts = {}) const;
        boost::asio::awaitable<delete_response> delete_range(std::string key, std::string range_end = {},
                                                             bool prev_kv = false) const;
        boost::asio::awaitable<txn_response> txn(std::vector<compare> compares, std::vector<request_op> success,
                                                 std::vector<request_op> failure) const;
        boost::asio::awaitable<response_header> compact(std::int64_t revision, bool physical = false) const;

        boost::asio::awaitable<watch_stream> watch(std::string key, std::string range_end = {},
                                                   watch_options opts = {}) const;

        boost::asio::awaitable<member_status> status() const;
    };
    coroutines co_;
};

}  // namespace tenure::etcd
