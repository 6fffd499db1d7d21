// Internal: Consul's JSON wire format, socket-free - the bodies
// tenure::consul::client sends and the answers it reads, with the Go api's
// conventions (Value as base64, LockDelay in the Go api's ms, TTL as a Go
// duration, integers never through a double). A body that does not decode
// throws decode_failure. Unit-tested in tests/unit/consul_codec_test.cpp.
#pragma once

#include <tenure/consul/client.hpp>

#include "net/json.hpp"

#include <boost/beast/http/fields.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tenure::consul::detail {

using tenure::detail::as_array;
using tenure::detail::as_object;
using tenure::detail::decode_failure;
using tenure::detail::get_string;
using tenure::detail::get_string_array;
using tenure::detail::parse_json;

// Spaces, tabs and line ends off both ends.
std::string_view trim(std::string_view s);
// Integers only, never through a double (flags use all 64 bits); missing or null: 0.
std::uint64_t get_u64(boost::json::object const& o, std::string_view name);
std::int64_t get_i64(boost::json::object const& o, std::string_view name);
// A body of `true` or `false` (acquire, release, CAS answers).
bool parse_bool(std::string_view body);

kv_pair decode_kv(boost::json::value const& v);
// A KV read's answer (GET /v1/kv/<key>, ?recurse): an array of entries, or
// null for none; each checked as decode_kv checks one. Decoded while parsed,
// with no document built. Each entry for which `skip(key, modify_index)` is
// true is left out: a reader that already holds that version of the key (the
// watch hub) pays for neither its strings nor its Value's base64.
std::vector<kv_pair> decode_kv_list(std::string_view body, kv_list_skip const& skip = {});
session_info decode_session(boost::json::value const& v);
std::vector<session_info> decode_session_list(boost::json::value const& v);  // null: empty
// A /v1/txn answer: 200 (committed, Results) or 409 (Errors, at least one).
// Decoded while parsed, with no document built, each KV as decode_kv reads one.
// `ops`: how many operations the transaction had, at most one result each
// (room for the results is made once).
txn_result decode_txn_result(std::string_view body, bool committed, std::size_t ops = 0);
// X-Consul-Index (at least 1), -KnownLeader, -LastContact.
query_meta decode_meta(boost::beast::http::fields const& h);

std::string encode_session_request(session_request const& r);
std::string encode_txn(std::vector<txn_op> const& ops);
std::string encode_check(check_registration const& c);

}  // namespace tenure::consul::detail
