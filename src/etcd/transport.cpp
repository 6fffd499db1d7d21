// HTTP/1.1 transport of tenure::etcd::client: Beast over tcp_stream, a pool
// of idle keep-alive connections per endpoint, and failover between
// endpoints.
//
// An attempt takes the most recently used idle connection of its endpoint
// (after a non-blocking check that the server has not closed it) or connects
// a new one; the connection goes back to the pool only after a complete
// exchange whose answer allows keep-alive. Any error, timeout or
// cancellation closes it. One attempt (resolve, connect, write, read) shares
// one deadline, enforced by tcp_stream::expires_at. The gateway answers
// errors chunked with an HTTP trailer; Beast's parser reads (and drops)
// trailers.
#include "etcd/transport.hpp"

// g++ 12 false positive on Asio's coroutine frame allocator (fixed in g++ 13).
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include "net/wire.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/cancellation_state.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/url/parse.hpp>

#include <algorithm>
#include <limits>
#include <optional>
#include <utility>

namespace tenure::etcd::detail {

namespace http = beast::http;

namespace {

constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);

bool cancelled(asio::cancellation_state const& cs) { return cs.cancelled() != asio::cancellation_type::none; }

// Errors a kept-alive connection shows when the server closed it while idle.
bool stale_connection_error(beast::error_code const& ec) {
    return ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset ||
           ec == asio::error::broken_pipe || ec == asio::error::connection_aborted;
}

// True when the server has already closed (or written unsolicited bytes to)
// an idle connection. Non-blocking peek; never waits.
bool idle_connection_dead(connection& c) {
    auto& sock = c.stream.socket();
    if (!sock.is_open()) return true;
    beast::error_code ec;
    sock.non_blocking(true, ec);
    if (ec) return true;
    char byte = 0;
    sock.receive(asio::buffer(&byte, 1), tcp::socket::message_peek, ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) return false;
    return true;  // EOF, an error, or bytes nobody asked for
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

// Registers a connection as in flight for the life of one attempt, so that
// close() can abort it.
class transport::active_guard {
public:
    active_guard(transport& t, connection& c) : t_(t), c_(c) { t_.active_.insert(&c_); }
    ~active_guard() { t_.active_.erase(&c_); }
    active_guard(active_guard const&) = delete;
    active_guard& operator=(active_guard const&) = delete;

private:
    transport& t_;
    connection& c_;
};

transport::transport(asio::any_io_executor ex, std::vector<endpoint> endpoints, std::size_t max_idle)
    : ex_(std::move(ex)), endpoints_(std::move(endpoints)), resolved_(endpoints_.size()), idle_(endpoints_.size()),
      max_idle_(max_idle) {
    for (std::size_t i = 0; i < endpoints_.size(); ++i) {
        beast::error_code ec;
        auto const addr = asio::ip::make_address(endpoints_[i].host, ec);
        if (!ec) resolved_[i].emplace_back(addr, endpoints_[i].port);
    }
}

transport::~transport() { close(); }

void transport::close() {
    ++generation_;
    for (auto& pool : idle_) pool.clear();  // closes their sockets
    for (connection* c : active_) {
        c->aborted = true;
        c->stream.close();  // pending operations complete with operation_aborted
    }
}

std::size_t transport::idle_connections() const noexcept {
    std::size_t n = 0;
    for (auto const& pool : idle_) n += pool.size();
    return n;
}

std::unique_ptr<connection> transport::take_idle(std::size_t i) {
    auto& pool = idle_[i];
    while (!pool.empty()) {
        auto c = std::move(pool.back());
        pool.pop_back();
        if (!idle_connection_dead(*c)) return c;
    }
    return nullptr;
}

void transport::give_back(std::size_t i, std::unique_ptr<connection> c, std::uint64_t generation) {
    if (generation != generation_ || c->aborted || c->buffer.size() != 0) return;
    if (idle_[i].size() >= max_idle_) return;
    c->stream.expires_never();
    idle_[i].push_back(std::move(c));
}

asio::awaitable<std::vector<tcp::endpoint>> transport::resolve(std::size_t i, steady_clock::time_point deadline,
                                                               std::string const& what) {
    if (!resolved_[i].empty()) co_return resolved_[i];
    endpoint const ep = endpoints_[i];
    // getaddrinfo has no deadline of its own: a timer cancels the resolver.
    auto resolver = std::make_shared<tcp::resolver>(ex_);
    auto timed_out = std::make_shared<bool>(false);
    asio::steady_timer timer(ex_, deadline);
    timer.async_wait([w = std::weak_ptr<tcp::resolver>(resolver), timed_out](beast::error_code ec) {
        if (ec) return;
        *timed_out = true;
        if (auto r = w.lock()) r->cancel();
    });
    std::string const port = std::to_string(ep.port);
    auto [ec, results] = co_await resolver->async_resolve(ep.host, port, tuple_awaitable);
    timer.cancel();
    if (*timed_out) throw api_error(asio::error::timed_out, 0, 0, what + ": resolving " + ep.host + ": timed out");
    if (ec) {
        if (ec == asio::error::operation_aborted || cancelled(co_await asio::this_coro::cancellation_state))
            throw_aborted(what);
        throw api_error(boost::system::error_code(ec.value(), ec.category()), 0, 0,
                        what + ": resolving " + ep.host + ": " + ec.message());
    }
    std::vector<tcp::endpoint> eps;
    for (auto const& r : results) eps.push_back(r.endpoint());
    if (eps.empty())
        throw api_error(asio::error::host_not_found, 0, 0, what + ": resolving " + ep.host + ": no address");
    if (resolved_[i].empty()) resolved_[i] = eps;
    co_return eps;
}

asio::awaitable<std::unique_ptr<connection>> transport::connect(std::size_t i, steady_clock::time_point deadline,
                                                                std::string const& what) {
    auto const keep = shared_from_this();
    auto eps = co_await resolve(i, deadline, what);
    auto c = std::make_unique<connection>(ex_);
    c->stream.expires_at(deadline);
    auto [ec, ep] = co_await c->stream.async_connect(eps, tuple_awaitable);
    if (ec) throw_transport(ec, cancelled(co_await asio::this_coro::cancellation_state), what);
    beast::error_code ig;
    c->stream.socket().set_option(tcp::no_delay(true), ig);
    co_return c;
}

asio::awaitable<http_answer> transport::attempt(std::size_t i, std::string const& target, std::string const& body,
                                                steady_clock::time_point deadline, std::string const& what) {
    http::request<http::string_body> req{http::verb::post, target, 11};
    req.set(http::field::host, endpoints_[i].host_header);
    req.set(http::field::user_agent, user_agent);
    req.set(http::field::content_type, "application/json");
    req.body() = body;
    req.keep_alive(true);
    req.prepare_payload();

    for (int round = 0;; ++round) {
        std::uint64_t const generation = generation_;
        // The retry after a stale kept-alive connection uses a fresh one.
        std::unique_ptr<connection> c = round == 0 ? take_idle(i) : nullptr;
        bool const reused = c != nullptr;
        if (!c) {
            c = co_await connect(i, deadline, what);
            if (generation != generation_) throw_aborted(what);  // close() ran meanwhile
        }
        active_guard guard{*this, *c};
        c->stream.expires_at(deadline);

        // A kept-alive connection the server closed meanwhile fails on the
        // write or before the first byte of the answer: try once more on a
        // fresh connection to the same endpoint.
        auto retry = [&](beast::error_code const& ec, bool got_some) {
            return reused && round == 0 && !got_some && !c->aborted && stale_connection_error(ec);
        };

        auto [wec, wn] = co_await http::async_write(c->stream, req, tuple_awaitable);
        if (wec) {
            bool const aborted = c->aborted || cancelled(co_await asio::this_coro::cancellation_state);
            if (!aborted && retry(wec, false)) continue;
            throw_transport(wec, aborted, what);
        }

        http::response_parser<http::string_body> parser;
        parser.body_limit(std::numeric_limits<std::uint64_t>::max());
        auto [rec, rn] = co_await http::async_read(c->stream, c->buffer, parser, tuple_awaitable);
        if (rec) {
            bool const aborted = c->aborted || cancelled(co_await asio::this_coro::cancellation_state);
            if (!aborted && retry(rec, parser.got_some() || c->buffer.size() != 0)) continue;
            throw_transport(rec, aborted, what);
        }

        auto res = parser.release();
        http_answer out;
        out.status = res.result_int();
        out.body = std::move(res.body());
        out.endpoint = i;
        if (res.keep_alive()) give_back(i, std::move(c), generation);
        co_return out;
    }
}

asio::awaitable<http_answer> transport::post(std::string target, std::string body,
                                             std::chrono::milliseconds per_attempt) {
    auto const keep = shared_from_this();
    std::optional<api_error> last_error;
    std::size_t const n = endpoints_.size();
    std::size_t const first = current_;
    for (std::size_t k = 0; k < n; ++k) {
        std::size_t const i = (first + k) % n;
        std::string const what = "POST " + target + " on " + endpoints_[i].host_header;
        auto const deadline = steady_clock::now() + per_attempt;
        try {
            http_answer a = co_await attempt(i, target, body, deadline, what);
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
