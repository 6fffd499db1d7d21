// HTTP/1.1 transport of tenure::etcd::client: a keep-alive pool per
// endpoint (net/http_pool.hpp) and failover between endpoints.
//
// One attempt (resolve, connect, write, read) shares one deadline. The
// gateway answers errors chunked with an HTTP trailer; Beast's parser reads
// (and drops) trailers.
#include "etcd/transport.hpp"

// g++ 12 false positive on Asio's coroutine frame allocator (fixed in g++ 13).
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include "net/wire.hpp"

#include <boost/asio/error.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/url/parse.hpp>

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

namespace tenure::etcd::detail {

namespace {

// The pool's failures as api_error, worded as throw_transport words them.
[[noreturn]] void throw_failure(tenure::detail::net_failure const& f) {
    if (!f.reason.empty() && f.code != asio::error::operation_aborted && f.code != asio::error::timed_out)
        throw api_error(boost::system::error_code(f.code.value(), f.code.category()), 0, 0,
                        f.what + ": " + std::string(f.reason));
    throw_transport(f.code, false, f.what);
}

// Rendered as Beast's serializer would a request with these fields and
// prepare_payload(): one contiguous buffer for the pool to write.
std::string render_post(std::string const& host_header, std::string const& target, std::string const& body) {
    std::string w;
    w.reserve(target.size() + host_header.size() + body.size() + 128);
    w.append("POST ").append(target).append(" HTTP/1.1\r\nHost: ").append(host_header);
    w.append("\r\nUser-Agent: ").append(user_agent);
    w.append("\r\nContent-Type: application/json\r\nContent-Length: ").append(std::to_string(body.size()));
    w.append("\r\n\r\n").append(body);
    return w;
}

[[noreturn]] void bad_endpoint(std::string const& text, std::string_view why) {
    throw boost::system::system_error(asio::error::invalid_argument,
                                      "invalid etcd endpoint \"" + text + "\": " + std::string(why));
}

}  // namespace

void throw_aborted(std::string const& what) {
    throw api_error(asio::error::operation_aborted, 0, 0, what + ": aborted");
}

void throw_transport(boost::system::error_code const& ec, bool aborted, std::string const& what) {
    if (aborted || ec == asio::error::operation_aborted) throw_aborted(what);
    if (ec == beast::error::timeout || ec == asio::error::timed_out)
        throw api_error(asio::error::timed_out, 0, 0, what + ": timed out");
    throw api_error(boost::system::error_code(ec.value(), ec.category()), 0, 0, what + ": " + ec.message());
}

bool fail_over_on(api_error const& e) noexcept {
    if (e.code() == asio::error::operation_aborted) return false;
    if (e.http_status() == 0) return e.code().category() != tenure::error_category() ||
                                     e.code() == tenure::error::etcd_unavailable;
    return e.http_status() == 503 || e.code() == tenure::error::etcd_unavailable;
}

endpoint parse_endpoint(std::string const& text) {
    std::string s = text;
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.pop_back();
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.erase(s.begin());
    if (s.find("://") == std::string::npos) s = "http://" + s;
    auto u = boost::urls::parse_uri(s);
    if (!u) bad_endpoint(text, u.error().message());
    std::string scheme(u->scheme());
    std::transform(scheme.begin(), scheme.end(), scheme.begin(), [](unsigned char c) { return std::tolower(c); });
    if (scheme == "https")
        throw boost::system::system_error(make_error_code(boost::system::errc::protocol_not_supported),
                                          "etcd endpoint \"" + text + "\": https is not supported yet");
    if (scheme != "http") bad_endpoint(text, "only http:// endpoints are supported");
    if (u->has_userinfo()) bad_endpoint(text, "user information is not supported");
    if (!u->path().empty() && u->path() != "/") bad_endpoint(text, "a path is not supported");
    if (u->has_query() || u->has_fragment()) bad_endpoint(text, "a query or fragment is not supported");

    endpoint e;
    switch (u->host_type()) {
    case boost::urls::host_type::ipv4:
    case boost::urls::host_type::ipv6: e.host = std::string(u->host_address()); break;
    case boost::urls::host_type::name: e.host = std::string(u->host_name()); break;
    default: bad_endpoint(text, "unsupported host");
    }
    if (e.host.empty()) bad_endpoint(text, "missing host");
    if (u->has_port()) {
        auto const p = tenure::detail::parse_u64(u->port());
        if (!p || *p == 0 || *p > 65535) bad_endpoint(text, "port must be a number from 1 to 65535");
        e.port = static_cast<std::uint16_t>(*p);
    }
    std::string const host_part = u->host_type() == boost::urls::host_type::ipv6 ? "[" + e.host + "]" : e.host;
    e.host_header = host_part + ":" + std::to_string(e.port);
    e.url = "http://" + e.host_header;
    return e;
}

// ---- transport --------------------------------------------------------------------------

transport::transport(asio::any_io_executor ex, std::vector<endpoint> endpoints, std::size_t max_idle)
    : endpoints_(std::move(endpoints)) {
    for (auto const& ep : endpoints_) {
        tenure::detail::http_pool_options o;
        o.destination.host = ep.host;
        o.destination.port = ep.port;
        o.destination.host_header = ep.host_header;
        o.max_idle = max_idle;
        pools_.push_back(std::make_unique<tenure::detail::http_pool>(ex, std::move(o), throw_failure));
    }
}

transport::~transport() { close(); }

void transport::close() {
    for (auto& pool : pools_) pool->close();
}

std::size_t transport::idle_connections() const noexcept {
    std::size_t n = 0;
    for (auto const& pool : pools_) n += pool->idle_connections();
    return n;
}

asio::awaitable<std::unique_ptr<connection>> transport::connect(std::size_t i, clock::time_point deadline,
                                                                std::string const& what) {
    auto const keep = shared_from_this();
    co_return co_await pools_.at(i)->connect(deadline, what);
}

asio::awaitable<http_answer> transport::post(std::string target, std::string body,
                                             std::chrono::milliseconds per_attempt) {
    auto const keep = shared_from_this();
    std::optional<api_error> last_error;
    std::size_t const n = endpoints_.size();
    std::size_t const first = current_;
    for (std::size_t k = 0; k < n; ++k) {
        std::size_t const i = (first + k) % n;
        auto const deadline = clock::now() + per_attempt;
        try {
            auto res = co_await pools_[i]->exchange(render_post(endpoints_[i].host_header, target, body), deadline);
            http_answer a{res.status, std::move(res.body), i};
            if (a.status == 503 && k + 1 < n) {
                bad(i);  // Unavailable (no leader, request timed out): another member may do better
                continue;
            }
            good(i);
            co_return a;
        } catch (api_error const& e) {
            if (!fail_over_on(e)) throw;
            last_error = e;
        }
        bad(i);
    }
    throw *last_error;
}

}  // namespace tenure::etcd::detail
