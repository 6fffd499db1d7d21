// Limits against abuse of the embedded agent, socket-free: the checks the
// HTTP API makes before handling a request (sessions per node, live KV keys)
// and the per-connection token bucket and refusals the server uses (request
// rate, blocking queries in flight). Each refusal is a clear HTTP answer;
// nothing is changed and the agent keeps serving everyone else.
#pragma once

#include "agent/state.hpp"

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/url/params_view.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace tenure::detail::agent {

struct api_limits {
    // 0 in any field: no limit.
    std::size_t max_sessions_per_node = 10'000;
    std::size_t max_kv_keys = 1'000'000;
};

struct route;  // router.hpp

// A refusal (500, Consul's text for a state-store refusal, or 413) for a
// request (routed as `r`, with query `params`) that would pass a limit, or nothing.
std::optional<boost::beast::http::response<boost::beast::http::string_body>> check_limits(
    api_limits const& limits, state_machine const& sm,
    boost::beast::http::request<boost::beast::http::string_body> const& req, route const& r,
    boost::urls::params_view params);

// The same refusal for a /v1/txn whose operations (already decoded by the
// API) would create more keys than fit; checked before it runs.
std::optional<boost::beast::http::response<boost::beast::http::string_body>> check_txn_limits(
    api_limits const& limits, state_machine const& sm, std::vector<txn_kv_op> const& ops);

// 429 "rate limit exceeded, try again later" (Consul's text for its own
// request rate limiter), with Retry-After.
boost::beast::http::response<boost::beast::http::string_body> rate_limited();
// 429 for a blocking query beyond the number that may be parked at once.
boost::beast::http::response<boost::beast::http::string_body> too_many_blocking_queries(std::size_t limit);

// Requests per second with bursts: `rate` tokens a second, at most `burst`
// kept. rate 0: unlimited.
class token_bucket {
public:
    token_bucket() = default;
    token_bucket(double rate, double burst, time_point now)
        : rate_(rate), burst_(burst < 1 ? 1 : burst), tokens_(burst_), last_(now) {}

    bool try_take(time_point now) {
        if (rate_ <= 0) return true;
        if (now > last_) {
            double const elapsed = std::chrono::duration<double>(now - last_).count();
            tokens_ = std::min(burst_, tokens_ + elapsed * rate_);
            last_ = now;
        }
        if (tokens_ < 1) return false;
        tokens_ -= 1;
        return true;
    }

private:
    double rate_ = 0;
    double burst_ = 1;
    double tokens_ = 1;
    time_point last_{};
};

}  // namespace tenure::detail::agent
