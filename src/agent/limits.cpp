// Limits against abuse of the embedded agent (include/tenure/detail/agent/limits.hpp).
#include "agent/limits.hpp"
#include "agent/reply.hpp"
#include "agent/router.hpp"

#include <boost/beast/http/field.hpp>
#include <boost/json.hpp>

#include <algorithm>
#include <set>

namespace tenure::detail::agent {

namespace http = boost::beast::http;
namespace json = boost::json;

namespace {

std::string quoted(std::string_view s) {
    std::string out = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') out += '\\';
        out += c;
    }
    return out + "\"";
}

response kv_full(std::size_t count, std::size_t limit, std::string_view key) {
    return text(http::status::internal_server_error,
                "KV store is full: " + std::to_string(count) + " keys (limit " + std::to_string(limit) +
                    ", -max-kv-keys); key " + quoted(key) + " was not created");
}

}  // namespace

std::optional<response> check_txn_limits(api_limits const& limits, state_machine const& sm,
                                         std::vector<txn_kv_op> const& ops) {
    if (limits.max_kv_keys == 0) return std::nullopt;
    // The keys this transaction would create: refuse it whole if they do not fit.
    std::set<std::string_view> fresh;
    for (auto const& op : ops) {
        if (op.verb != "set" && op.verb != "cas" && op.verb != "lock") continue;
        if (!sm.kv_get(op.key)) fresh.insert(op.key);
    }
    if (!fresh.empty() && sm.kv_count() + fresh.size() > limits.max_kv_keys)
        return kv_full(sm.kv_count(), limits.max_kv_keys, *fresh.begin());
    return std::nullopt;
}

std::optional<response> check_limits(api_limits const& limits, state_machine const& sm,
                                     http::request<http::string_body> const& req, route const& r,
                                     boost::urls::params_view params) {
    if (req.method() != http::verb::put) return std::nullopt;

    if (r.endpoint == api_endpoint::session_create && limits.max_sessions_per_node > 0) {
        std::string node = sm.config().node_name;
        boost::system::error_code ec;
        if (!req.body().empty()) {
            json::value v = json::parse(req.body(), ec);
            if (!ec && v.is_object())
                if (auto const* n = member(v.as_object(), "Node"); n && n->is_string()) node = n->as_string();
        }
        std::size_t const have = sm.session_list_node(node).size();
        if (have >= limits.max_sessions_per_node)
            return text(http::status::internal_server_error,
                        "Too many sessions for node " + quoted(node) + ": " + std::to_string(have) + " (limit " +
                            std::to_string(limits.max_sessions_per_node) +
                            ", -max-sessions-per-node); destroy unused sessions first");
        return std::nullopt;
    }

    if (limits.max_kv_keys == 0) return std::nullopt;
    if (r.endpoint == api_endpoint::kv) {  // /v1/kv itself: no key, nothing to create
        std::string_view const key = r.rest;
        if (sm.kv_count() < limits.max_kv_keys) return std::nullopt;
        if (params.contains("release") || key.empty() || sm.kv_get(key)) return std::nullopt;
        return kv_full(sm.kv_count(), limits.max_kv_keys, key);
    }
    return std::nullopt;
}

response rate_limited() {
    response res = text(http::status::too_many_requests, "rate limit exceeded, try again later");
    res.set(http::field::retry_after, "1");
    return res;
}

response too_many_blocking_queries(std::size_t limit) {
    response res = text(http::status::too_many_requests,
                        "too many blocking queries in flight (limit " + std::to_string(limit) +
                            ", -max-blocking-queries), try again later");
    res.set(http::field::retry_after, "1");
    return res;
}

}  // namespace tenure::detail::agent
