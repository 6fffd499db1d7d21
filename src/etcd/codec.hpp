// Internal: the JSON wire format of etcd's v3 gateway, socket-free.
//
// Encoders build request bodies; decoders read answers with the gateway's
// conventions (bytes as padded base64, int64 as strings or numbers, zero
// fields omitted). ndjson_decoder cuts a streamed answer into top-level JSON
// values independently of chunk and newline boundaries. Unit-tested in
// tests/unit/etcd_codec_test.cpp.
#pragma once

#include <tenure/etcd/client.hpp>

#include "net/json.hpp"

#include <boost/json/object.hpp>
#include <boost/json/stream_parser.hpp>
#include <boost/json/value.hpp>

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tenure::etcd::detail {

namespace json = boost::json;

// An answer this client cannot make sense of (becomes api_error with
// error::unexpected_response and the request's description).
using tenure::detail::decode_failure;

// Decimal int64, the whole string, optional leading '-'; nullopt otherwise.
std::optional<std::int64_t> parse_i64(std::string_view s) noexcept;

// ---- field access (missing or null: 0 / empty) ----
using tenure::detail::as_array;
using tenure::detail::as_object;
using tenure::detail::get_bool;
using tenure::detail::get_string;
// int64 as the gateway writes it: a decimal string, or a number.
std::int64_t get_i64(json::object const& o, std::string_view name);
std::uint64_t get_u64(json::object const& o, std::string_view name);
// A base64 `bytes` field, decoded.
std::string get_bytes(json::object const& o, std::string_view name);

// ---- errors ----

// etcd's message + gRPC code -> tenure's error code.
boost::system::error_code map_grpc_error(int grpc_code, std::string_view message);

// The api_error for an answer that is not a success: the unary shape
// {"error":"..","code":N,"message":".."}, the stream shape
// {"error":{"grpc_code":N,"http_code":..,"message":..}}, or anything else
// (error::http_status with the body as message).
api_error error_from_answer(unsigned http_status, std::string_view body);

// If `v` is a stream error message ({"error":{...}}), its api_error.
std::optional<api_error> stream_error(json::value const& v, unsigned http_status = 0);

// ---- encoders (request bodies) ----
std::string encode_lease_grant(std::int64_t ttl, std::int64_t id);
std::string encode_lease_id(std::int64_t id);  // {"ID":"N"}
json::object range_request_json(std::string_view key, std::string_view range_end, range_options const& o);
json::object put_request_json(std::string_view key, std::string_view value, put_options const& o);
json::object delete_request_json(std::string_view key, std::string_view range_end, bool prev_kv);
json::object compare_json(compare const& c);
std::string encode_txn(std::vector<compare> const& cmp, std::vector<request_op> const& success,
                       std::vector<request_op> const& failure);
std::string encode_watch_create(std::string_view key, std::string_view range_end, watch_options const& o);
std::string encode_compaction(std::int64_t revision, bool physical);

// ---- decoders (answer bodies / stream messages) ----
json::value parse_json(std::string_view body);
response_header decode_header(json::object const& o);  // o["header"]
key_value decode_kv(json::value const& v);
lease_grant_response decode_lease_grant(json::value const& v);
// A keep-alive answer (the first message of the streamed body): the TTL, 0
// when absent (lease unknown). Throws api_error for a stream error message.
std::int64_t decode_keepalive(std::string_view body);
std::int64_t decode_time_to_live(json::value const& v);
range_response decode_range(json::object const& o);
put_response decode_put(json::object const& o);
delete_response decode_delete(json::object const& o);
txn_response decode_txn(json::value const& v);
member_status decode_status(json::value const& v);

// One message of a watch stream ({"result":{...}}).
struct watch_message {
    response_header header;
    std::int64_t watch_id = 0;
    bool created = false;
    bool canceled = false;
    std::int64_t compact_revision = 0;
    std::string cancel_reason;
    std::vector<event> events;
};
// Throws api_error for a stream error message, decode_failure otherwise.
watch_message decode_watch_message(json::value const& v);

// Splits a byte stream into top-level JSON values, whatever the chunking:
// a value may span any number of feed() calls, and one call may complete
// several values. Whitespace (newlines included) between values is skipped.
class ndjson_decoder {
public:
    // Throws decode_failure on bytes that are not JSON; the decoder is then
    // unusable.
    void feed(std::string_view bytes);
    bool has_value() const noexcept { return !values_.empty(); }
    json::value pop();
    std::size_t queued() const noexcept { return values_.size(); }
    // True when a value has started but is not complete yet.
    bool mid_value() const noexcept { return started_; }

private:
    json::stream_parser parser_;
    std::deque<json::value> values_;
    bool started_ = false;
    bool failed_ = false;
};

}  // namespace tenure::etcd::detail
