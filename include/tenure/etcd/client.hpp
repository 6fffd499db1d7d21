/// @file
/// tenure::etcd::client — etcd v3 through its JSON gateway (grpc-gateway,
/// etcd 3.4: POST /v3/...) as C++20 coroutines on the caller's executor.
///
/// Operations return asio::awaitable<T> and throw tenure::etcd::api_error (a
/// boost::system::system_error) on failure. The error_code is in tenure's
/// category (error::lease_not_found, error::etcd_compacted,
/// error::etcd_unavailable, error::etcd_error, ...) or an Asio code for
/// transport failures (connection_refused, timed_out, operation_aborted); the
/// gRPC code, the server's message and the HTTP status are carried along.
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
/// Per-operation (terminal) cancellation of the awaiting coroutine aborts the
/// request (api_error with boost::asio::error::operation_aborted).
///
/// g++ 12 note: name structs and vectors before passing them to an operation
/// inside co_await (`auto cmp = ...; co_await c.txn(cmp, ...)`), never build a
/// braced temporary inside the co_await expression.
#pragma once

#include <tenure/diagnostics.hpp>
#include <tenure/error.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

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

/// The error thrown by every client operation that fails.
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

/// One watch on its own HTTP connection (POST /v3/watch, a streaming answer).
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

    /// The next response with events (or a progress notification). Throws
    /// api_error with:
    ///   error::etcd_compacted   the start revision was compacted; compact_revision() says where
    ///                           history begins (re-read, then watch from the read's revision + 1)
    ///   error::watch_canceled   etcd canceled the watch for another reason
    ///   error::etcd_unavailable etc.  an error message on the stream (e.g. "etcdserver: no leader")
    ///   an Asio code            the connection failed or ended
    /// Cancelling the awaiting coroutine closes the stream (operation_aborted).
    /// After an exception the stream is closed; next() throws again
    /// (not_connected). One next() at a time per stream.
    boost::asio::awaitable<watch_response> next();

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
    // ttl in seconds; id 0 lets etcd choose the ID.
    boost::asio::awaitable<lease_grant_response> lease_grant(std::int64_t ttl_seconds, std::int64_t id = 0);
    /// One keep-alive (one POST on /v3/lease/keepalive). The remaining TTL in
    /// seconds, or 0 when etcd no longer knows the lease.
    boost::asio::awaitable<std::int64_t> lease_keepalive(std::int64_t id);
    /// Throws error::lease_not_found for an unknown lease.
    boost::asio::awaitable<void> lease_revoke(std::int64_t id);
    /// The remaining TTL in seconds; -1 when the lease is gone.
    boost::asio::awaitable<std::int64_t> lease_time_to_live(std::int64_t id);

    // ---- KV ----
    // One key (range_end empty), [key, range_end), or with prefix_end(key)
    // every key under a prefix.
    boost::asio::awaitable<range_response> range(std::string key, std::string range_end = {},
                                                 range_options opts = {});
    boost::asio::awaitable<put_response> put(std::string key, std::string value, put_options opts = {});
    boost::asio::awaitable<delete_response> delete_range(std::string key, std::string range_end = {},
                                                         bool prev_kv = false);
    boost::asio::awaitable<txn_response> txn(std::vector<compare> compares, std::vector<request_op> success,
                                             std::vector<request_op> failure);
    /// Compacts history up to `revision` (POST /v3/kv/compaction).
    boost::asio::awaitable<response_header> compact(std::int64_t revision, bool physical = false);

    // ---- watch ----
    // Opens a watch and returns once etcd confirmed it (`created`): every
    // change after created_header().revision (or from start_revision) is
    // delivered by next(). Sends `Grpc-Metadata-hasleader: true`, so that a
    // member that loses its leader ends the stream with etcd_unavailable.
    boost::asio::awaitable<watch_stream> watch(std::string key, std::string range_end = {},
                                               watch_options opts = {});

    // ---- maintenance ----
    // POST /v3/maintenance/status on the current endpoint (with failover).
    boost::asio::awaitable<member_status> status();

    struct impl;

private:
    std::shared_ptr<impl> impl_;
};

}  // namespace tenure::etcd
