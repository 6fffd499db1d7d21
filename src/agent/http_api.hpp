// The Consul HTTP API of the embedded agent, socket-free.
//
// handle() maps one parsed HTTP request onto the state machine and returns
// either the response or, for a blocking query whose index has not moved, what
// to wait on and until when. The I/O shell (server.cpp) parks the request, is
// woken by the state machine's watch callback or its deadline, and calls
// handle() again with the same blocking_state. Nothing here touches a socket
// or a clock, so the unit tests and the fuzzers drive it directly.
#pragma once

#include "agent/limits.hpp"
#include "agent/state.hpp"
#include "agent/views.hpp"

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include <optional>
#include <vector>

namespace tenure::detail::agent {

namespace http = boost::beast::http;
using request = http::request<http::string_body>;
using response = http::response<http::string_body>;

inline constexpr nanoseconds default_query_time = std::chrono::minutes{5};
inline constexpr nanoseconds max_query_time = std::chrono::minutes{10};

// Carried across re-evaluations of one blocking query.
struct blocking_state {
    std::optional<time_point> deadline;  // set on first evaluation: now + wait + jitter
    std::uint64_t min_index = 0;         // may be raised for a missing key (Consul's rule)
    int not_found_seen = 0;
};

struct wait_request {
    std::vector<watch_target> targets;
    time_point deadline;
};

struct api_outcome {
    std::optional<response> res;   // set: write it
    std::optional<wait_request> wait;  // set: park until a target changes or the deadline
};

class acl_store;  // acl.hpp
class agent_metrics;  // metrics.hpp

class http_api {
public:
    explicit http_api(state_machine& sm) : sm_(sm) {}

    // Called once the header is read, before the body: a response when the
    // request must be refused without reading its body (e.g. 413 for a KV
    // value over kv_max_value_size). The connection is closed after it.
    std::optional<response> check_header(http::request_header<> const& header) const;

    api_outcome handle(request const& req, time_point now, blocking_state& bs);

    // Largest body any endpoint accepts (the parser's body limit).
    std::size_t max_body_size() const noexcept { return sm_.config().kv_max_value_size + 64 * 1024; }

    // ACLs (acl.hpp; nullptr: none, the default) and abuse limits, checked
    // before each request is handled. The store must outlive the API.
    void set_acl(acl_store* acl) noexcept { acl_ = acl; }
    void set_limits(api_limits const& limits) noexcept { limits_ = limits; }
    // Serves /v1/agent/metrics from these (nullptr: 404). Must outlive the API.
    void set_metrics(agent_metrics const* m) noexcept { metrics_ = m; }

    // tenure's own endpoints: the calendar time their answers use, and
    // whether /ui/ serves the page (agent_options::ui; off: 404).
    struct view_options {
        wall_anchor wall;
        bool ui = false;
    };
    void set_views(view_options const& v) noexcept { views_ = v; }

private:
    state_machine& sm_;
    acl_store* acl_ = nullptr;
    api_limits limits_;
    agent_metrics const* metrics_ = nullptr;
    view_options views_;
};

}  // namespace tenure::detail::agent
