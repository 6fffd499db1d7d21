// tenure::etcd::client: the unary operations (lease, KV, txn, maintenance)
// over detail::transport, with the JSON of codec.cpp. The watch is in
// watch.cpp.
#include <tenure/etcd/client.hpp>

#include "etcd/client_impl.hpp"
#include "etcd/codec.hpp"

// g++ 12 false positive on Asio's coroutine frame allocator (fixed in g++ 13).
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include <boost/asio/use_awaitable.hpp>
#include <boost/json/serialize.hpp>

#include <cstdlib>
#include <string_view>
#include <utility>

namespace tenure::etcd {

namespace asio = boost::asio;
namespace json = boost::json;
using detail::http_answer;

// ---- api_error ------------------------------------------------------------------------

namespace {

constexpr std::size_t max_message_in_what = 512;

std::string api_error_what(unsigned status, int grpc_code, std::string_view message) {
    while (!message.empty() && (message.back() == '\n' || message.back() == '\r')) message.remove_suffix(1);
    bool const cut = message.size() > max_message_in_what;
    if (cut) message = message.substr(0, max_message_in_what);
    std::string s;
    if (status != 0 || grpc_code != 0) {
        s = "etcd answered";
        if (status != 0) s += " " + std::to_string(status);
        if (grpc_code != 0) s += " (gRPC code " + std::to_string(grpc_code) + ")";
        if (!message.empty()) {
            s += " \"";
            s += message;
            if (cut) s += "...";
            s += '"';
        }
    } else {
        s = message.empty() ? std::string("etcd request failed") : std::string(message);
        if (cut) s += "...";
    }
    return s;
}

}  // namespace

api_error::api_error(boost::system::error_code ec, unsigned http_status, int grpc_code, std::string server_message,
                     std::int64_t compact_revision)
    // The code without its source location: what() stays readable.
    : tenure::server_error(boost::system::error_code(ec.value(), ec.category()),
                           api_error_what(http_status, grpc_code, server_message), http_status, server_message),
      grpc_code_(grpc_code),
      compact_revision_(compact_revision) {}

// ---- small helpers ----------------------------------------------------------------------

std::string prefix_end(std::string_view prefix) {
    std::string end(prefix);
    for (std::size_t i = end.size(); i-- > 0;) {
        auto const b = static_cast<unsigned char>(end[i]);
        if (b < 0xff) {
            end[i] = static_cast<char>(b + 1);
            end.resize(i + 1);
            return end;
        }
    }
    return std::string(1, '\0');
}

compare compare::create_revision(std::string key, compare_result r, std::int64_t revision) {
    compare c;
    c.key = std::move(key);
    c.target = compare_target::create;
    c.result = r;
    c.number = revision;
    return c;
}

compare compare::mod_revision(std::string key, compare_result r, std::int64_t revision) {
    compare c;
    c.key = std::move(key);
    c.target = compare_target::mod;
    c.result = r;
    c.number = revision;
    return c;
}

compare compare::version(std::string key, compare_result r, std::int64_t version) {
    compare c;
    c.key = std::move(key);
    c.target = compare_target::version;
    c.result = r;
    c.number = version;
    return c;
}

compare compare::value_of(std::string key, compare_result r, std::string value) {
    compare c;
    c.key = std::move(key);
    c.target = compare_target::value;
    c.result = r;
    c.value = std::move(value);
    return c;
}

compare compare::lease(std::string key, compare_result r, std::int64_t lease) {
    compare c;
    c.key = std::move(key);
    c.target = compare_target::lease;
    c.result = r;
    c.number = lease;
    return c;
}

namespace {

std::vector<std::string> env_endpoints() {
    std::vector<std::string> out;
    char const* e = std::getenv("ETCDCTL_ENDPOINTS");
    if (!e) return out;
    std::string_view s(e);
    while (!s.empty()) {
        auto const comma = s.find(',');
        auto part = s.substr(0, comma);
        while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
        while (!part.empty() && part.back() == ' ') part.remove_suffix(1);
        if (!part.empty()) out.emplace_back(part);
        if (comma == std::string_view::npos) break;
        s.remove_prefix(comma + 1);
    }
    return out;
}

// Runs `f`, turning decode failures into api_error (unexpected_response).
template <class F>
auto decode(http_answer const& a, std::string_view target, F&& f) -> decltype(f()) {
    try {
        return f();
    } catch (detail::decode_failure const& e) {
        std::string body(a.body.substr(0, 200));
        throw api_error(tenure::error::unexpected_response, 0, 0,
                        "POST " + std::string(target) + ": unexpected answer (" + e.what + "): " + body);
    }
}

// The JSON of a 200 answer; api_error for anything else.
json::value ok_json(http_answer const& a, std::string_view target) {
    if (a.status != 200) throw detail::error_from_answer(a.status, a.body);
    return decode(a, target, [&] { return detail::parse_json(a.body); });
}

asio::awaitable<http_answer> post(std::shared_ptr<client::impl> self, std::string target, std::string body) {
    auto const timeout = self->config.request_timeout;
    auto const transport = self->transport;
    http_answer a = co_await transport->post(std::move(target), std::move(body), timeout);
    co_return a;
}

}  // namespace

// ---- client -----------------------------------------------------------------------------

client::client(asio::any_io_executor ex, client_config config) : co_{std::make_shared<impl>()} {
    if (config.endpoints.empty()) config.endpoints = env_endpoints();
    if (config.endpoints.empty()) config.endpoints.emplace_back("http://127.0.0.1:2379");
    std::vector<detail::endpoint> eps;
    for (auto& text : config.endpoints) {
        eps.push_back(detail::parse_endpoint(text));
        text = eps.back().url;
    }
    if (config.request_timeout.count() <= 0) config.request_timeout = std::chrono::milliseconds(5'000);
    co_.state->ex = ex;
    co_.state->transport = std::make_shared<detail::transport>(ex, std::move(eps), config.max_idle_connections);
    co_.state->config = std::move(config);
}

client::~client() {
    if (co_.state && co_.state->transport) co_.state->transport->close();
}

asio::any_io_executor client::get_executor() const noexcept { return co_.state->ex; }

client_config const& client::config() const noexcept { return co_.state->config; }

std::string const& client::current_endpoint() const noexcept {
    return co_.state->config.endpoints[co_.state->transport->current()];
}

void client::close() { co_.state->transport->close(); }

// ---- lease ----

asio::awaitable<lease_grant_response> client::coroutines::lease_grant(std::int64_t ttl_seconds, std::int64_t id) const {
    auto const self = state;
    std::string const target = "/v3/lease/grant";
    std::string body = detail::encode_lease_grant(ttl_seconds, id);
    http_answer const a = co_await post(self, target, std::move(body));
    json::value const v = ok_json(a, target);
    co_return decode(a, target, [&] { return detail::decode_lease_grant(v); });
}

asio::awaitable<std::int64_t> client::coroutines::lease_keepalive(std::int64_t id) const {
    auto const self = state;
    std::string const target = "/v3/lease/keepalive";
    std::string body = detail::encode_lease_id(id);
    http_answer const a = co_await post(self, target, std::move(body));
    // A streaming RPC: 200 with {"result":{...}}\n, or a stream error message
    // (with 200, or 503 when it is the first message).
    if (a.status != 200) throw detail::error_from_answer(a.status, a.body);
    co_return decode(a, target, [&] { return detail::decode_keepalive(a.body); });
}

asio::awaitable<void> client::coroutines::lease_revoke(std::int64_t id) const {
    auto const self = state;
    std::string const target = "/v3/lease/revoke";
    std::string body = detail::encode_lease_id(id);
    http_answer const a = co_await post(self, target, std::move(body));
    ok_json(a, target);
}

asio::awaitable<std::int64_t> client::coroutines::lease_time_to_live(std::int64_t id) const {
    auto const self = state;
    std::string const target = "/v3/lease/timetolive";
    std::string body = detail::encode_lease_id(id);
    http_answer const a = co_await post(self, target, std::move(body));
    json::value const v = ok_json(a, target);
    co_return decode(a, target, [&] { return detail::decode_time_to_live(v); });
}

// ---- KV ----

asio::awaitable<range_response> client::coroutines::range(
    std::string key, std::string range_end, range_options opts) const {
    auto const self = state;
    std::string const target = "/v3/kv/range";
    std::string body = json::serialize(detail::range_request_json(key, range_end, opts));
    http_answer const a = co_await post(self, target, std::move(body));
    json::value const v = ok_json(a, target);
    co_return decode(a, target, [&] { return detail::decode_range(detail::as_object(v, "range answer")); });
}

asio::awaitable<put_response> client::coroutines::put(std::string key, std::string value, put_options opts) const {
    auto const self = state;
    std::string const target = "/v3/kv/put";
    std::string body = json::serialize(detail::put_request_json(key, value, opts));
    http_answer const a = co_await post(self, target, std::move(body));
    json::value const v = ok_json(a, target);
    co_return decode(a, target, [&] { return detail::decode_put(detail::as_object(v, "put answer")); });
}

asio::awaitable<delete_response> client::coroutines::delete_range(
    std::string key, std::string range_end, bool prev_kv) const {
    auto const self = state;
    std::string const target = "/v3/kv/deleterange";
    std::string body = json::serialize(detail::delete_request_json(key, range_end, prev_kv));
    http_answer const a = co_await post(self, target, std::move(body));
    json::value const v = ok_json(a, target);
    co_return decode(a, target, [&] { return detail::decode_delete(detail::as_object(v, "deleterange answer")); });
}

asio::awaitable<txn_response> client::coroutines::txn(
    std::vector<compare> compares, std::vector<request_op> success, std::vector<request_op> failure) const {
    auto const self = state;
    std::string const target = "/v3/kv/txn";
    std::string body = detail::encode_txn(compares, success, failure);
    http_answer const a = co_await post(self, target, std::move(body));
    json::value const v = ok_json(a, target);
    co_return decode(a, target, [&] { return detail::decode_txn(v); });
}

asio::awaitable<response_header> client::coroutines::compact(std::int64_t revision, bool physical) const {
    auto const self = state;
    std::string const target = "/v3/kv/compaction";
    std::string body = detail::encode_compaction(revision, physical);
    http_answer const a = co_await post(self, target, std::move(body));
    json::value const v = ok_json(a, target);
    co_return decode(a, target, [&] { return detail::decode_header(detail::as_object(v, "compaction answer")); });
}

// ---- maintenance ----

asio::awaitable<member_status> client::coroutines::status() const {
    auto const self = state;
    std::string const target = "/v3/maintenance/status";
    std::string body = "{}";
    http_answer const a = co_await post(self, target, std::move(body));
    json::value const v = ok_json(a, target);
    co_return decode(a, target, [&] { return detail::decode_status(v); });
}

}  // namespace tenure::etcd
