// HTTP/1.1 transport of tenure::consul::client: Beast over TCP (or a Unix
// domain socket, for unix:// addresses) with a small pool of idle keep-alive
// connections.
//
// A request takes the most recently used idle connection (after a
// non-blocking check that the server has not closed it) or connects a new
// one; the connection goes back to the pool only after a complete exchange
// whose response allows keep-alive. Any error, timeout or cancellation closes
// the connection. With max_connections set, a request that finds every
// connection busy waits for one to be given back or closed (first come, first
// served) within its deadline. The whole exchange (resolve, connect, write, read) shares
// one deadline, enforced by basic_stream::expires_at.
#include "consul/transport.hpp"

#include "net/net_stream.hpp"

// g++ 12 false positive on Asio's coroutine frame allocator (fixed in g++ 13).
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/cancellation_state.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <deque>
#include <functional>
#include <limits>
#include <unordered_set>
#include <utility>
#include <vector>

namespace tenure::consul::detail {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;
using endpoint = tenure::detail::net_stream::protocol::endpoint;  // TCP or Unix

constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);
constexpr std::string_view user_agent = "tenure/0.1";

// Counts open connections so that a capped pool knows when one closes.
struct connection_count {
    std::size_t open = 0;
    std::function<void()> on_close;  // wakes the next waiter
};

struct connection {
    connection(asio::any_io_executor const& ex, std::shared_ptr<connection_count> n, asio::ssl::context* tls)
        : stream(ex, tls), count(std::move(n)) {
        ++count->open;
    }
    ~connection() {
        --count->open;
        if (count->on_close) count->on_close();
    }
    connection(connection const&) = delete;
    connection& operator=(connection const&) = delete;
    tenure::detail::net_stream stream;  // TLS for https:// addresses
    std::shared_ptr<connection_count> count;
    beast::flat_buffer buffer;
    bool aborted = false;  // close() closed it under a pending operation
};

bool cancelled(asio::cancellation_state const& cs) { return cs.cancelled() != asio::cancellation_type::none; }

// Errors a kept-alive connection shows when the server closed it while idle.
bool stale_connection_error(beast::error_code const& ec) {
    return ec == beast::http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset ||
           ec == asio::error::broken_pipe || ec == asio::error::connection_aborted ||
           ec == asio::ssl::error::stream_truncated;  // TLS: closed without close_notify
}

// True when the server has already closed (or written unsolicited bytes to)
// an idle connection. Non-blocking peek; never waits.
// One recv(MSG_PEEK | MSG_DONTWAIT) syscall: Asio's socket::receive would
// need an ioctl to make the socket non-blocking first.
bool idle_connection_dead(connection& c) {
    auto& sock = c.stream.socket();
    if (!sock.is_open()) return true;
    char byte = 0;
    auto const n = ::recv(sock.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    return true;  // EOF, an error, or bytes nobody asked for
}

class http_transport final : public transport, public std::enable_shared_from_this<http_transport> {
public:
    http_transport(asio::any_io_executor ex, http_transport_options opts)
        : ex_(std::move(ex)), opts_(std::move(opts)), count_(std::make_shared<connection_count>()) {
        count_->on_close = [this] { wake_one(); };
        if (!opts_.unix_path.empty()) {
            endpoints_.emplace_back(asio::local::stream_protocol::endpoint(opts_.unix_path));
            return;
        }
        beast::error_code ec;
        auto const addr = asio::ip::make_address(opts_.host, ec);
        if (!ec) endpoints_.emplace_back(tcp::endpoint(addr, opts_.port));
    }

    ~http_transport() override {
        count_->on_close = nullptr;
        close();
    }

    asio::awaitable<http_response> send(http::verb method, std::string target, std::string body,
                                        steady_clock::time_point deadline) override;

    void close() override {
        ++generation_;
        idle_.clear();  // closes their sockets
        for (connection* c : active_) {
            c->aborted = true;
            c->stream.close();  // pending operations complete with operation_aborted
        }
    }

    std::size_t idle_connections() const noexcept override { return idle_.size(); }
    std::size_t open_connections() const noexcept override { return count_->open; }

private:
    // Registers a connection as in flight for the life of one attempt, so
    // that close() can abort it.
    class active_guard {
    public:
        active_guard(http_transport& t, connection& c) : t_(t), c_(c) { t_.active_.insert(&c_); }
        ~active_guard() { t_.active_.erase(&c_); }
        active_guard(active_guard const&) = delete;
        active_guard& operator=(active_guard const&) = delete;

    private:
        http_transport& t_;
        connection& c_;
    };

    std::unique_ptr<connection> take_idle() {
        while (!idle_.empty()) {
            auto c = std::move(idle_.back());
            idle_.pop_back();
            if (!idle_connection_dead(*c)) return c;
        }
        return nullptr;
    }

    void give_back(std::unique_ptr<connection> c, std::uint64_t generation) {
        if (generation != generation_ || c->aborted || c->buffer.size() != 0) return;
        if (idle_.size() >= std::max<std::size_t>(opts_.max_idle_connections, 1)) return;
        c->stream.expires_never();
        idle_.push_back(std::move(c));
        wake_one();
    }

    bool at_limit() const noexcept { return opts_.max_connections != 0 && count_->open >= opts_.max_connections; }

    // A connection came free (given back or closed): the longest waiter retries.
    void wake_one() {
        while (!waiters_.empty()) {
            auto w = waiters_.front().lock();
            waiters_.pop_front();
            if (w) {
                w->cancel();
                return;
            }
        }
    }

    // Waits for an idle connection or room for a new one, within `deadline`.
    asio::awaitable<std::unique_ptr<connection>> obtain(steady_clock::time_point deadline, std::string const& what) {
        for (;;) {
            if (auto c = take_idle()) co_return c;
            if (!at_limit()) co_return nullptr;  // the caller connects a new one
            auto timer = std::make_shared<asio::steady_timer>(ex_, deadline);
            waiters_.push_back(timer);
            auto [ec] = co_await timer->async_wait(tuple_awaitable);
            if (!ec) throw api_error(asio::error::timed_out, 0, what + ": no free connection (max_connections)");
            if (cancelled(co_await asio::this_coro::cancellation_state)) {
                wake_one();  // pass on a wake-up we may have consumed
                throw_aborted(what);
            }
        }
    }

    // The request as it goes on the wire, in one buffer: writing one
    // contiguous buffer costs far less than Beast's serializer walking a
    // concatenation of the start line, each field and the body.
    std::string render_request(http::verb method, std::string_view target, std::string_view body) const {
        std::string_view const verb = http::to_string(method);
        std::string_view const type = target.starts_with("/v1/kv/") ? "application/octet-stream" : "application/json";
        std::string w;
        w.reserve(verb.size() + target.size() + opts_.host_header.size() + opts_.token.size() + body.size() + 128);
        w.append(verb).append(" ").append(target).append(" HTTP/1.1\r\nHost: ").append(opts_.host_header);
        w.append("\r\nUser-Agent: ").append(user_agent);
        if (!opts_.token.empty()) w.append("\r\nX-Consul-Token: ").append(opts_.token);
        if (!body.empty()) w.append("\r\nContent-Type: ").append(type);
        // As Beast's prepare_payload: a length with a body, and 0 for the
        // methods that expect one.
        if (!body.empty() || method == http::verb::put || method == http::verb::post || method == http::verb::options)
            w.append("\r\nContent-Length: ").append(std::to_string(body.size()));
        w.append("\r\n\r\n").append(body);
        return w;
    }

    std::string describe(http::verb method, std::string_view target) const {
        std::string s(http::to_string(method));
        s += ' ';
        s += target;
        s += " on ";
        s += opts_.unix_path.empty() ? opts_.host_header : "unix://" + opts_.unix_path;
        return s;
    }

    [[noreturn]] static void fail(beast::error_code const& ec, bool aborted, std::string const& what) {
        if (aborted || ec == asio::error::operation_aborted) throw_aborted(what);
        if (ec == beast::error::timeout) throw api_error(asio::error::timed_out, 0, what);
        throw api_error(ec, 0, what);
    }

    asio::awaitable<std::vector<endpoint>> resolve(steady_clock::time_point deadline, std::string const& what);

    asio::any_io_executor ex_;
    http_transport_options opts_;
    std::vector<endpoint> endpoints_;  // resolved once, then cached
    std::vector<std::unique_ptr<connection>> idle_;  // most recently used last
    std::unordered_set<connection*> active_;
    std::shared_ptr<connection_count> count_;
    std::deque<std::weak_ptr<asio::steady_timer>> waiters_;  // requests waiting for a connection
    std::uint64_t generation_ = 0;  // bumped by close(): connections of older generations are not pooled
};

asio::awaitable<std::vector<endpoint>> http_transport::resolve(steady_clock::time_point deadline,
                                                               std::string const& what) {
    if (!endpoints_.empty()) co_return endpoints_;
    // getaddrinfo has no deadline of its own: a timer cancels the resolver.
    auto resolver = std::make_shared<tcp::resolver>(ex_);
    auto timed_out = std::make_shared<bool>(false);
    asio::steady_timer timer(ex_, deadline);
    timer.async_wait([w = std::weak_ptr<tcp::resolver>(resolver), timed_out](beast::error_code ec) {
        if (ec) return;
        *timed_out = true;
        if (auto r = w.lock()) r->cancel();
    });
    auto [ec, results] = co_await resolver->async_resolve(opts_.host, std::to_string(opts_.port), tuple_awaitable);
    timer.cancel();
    if (*timed_out) throw api_error(asio::error::timed_out, 0, what + ": resolving " + opts_.host);
    if (ec) {
        if (ec == asio::error::operation_aborted || cancelled(co_await asio::this_coro::cancellation_state))
            throw_aborted(what);
        throw api_error(ec, 0, what + ": resolving " + opts_.host);
    }
    std::vector<endpoint> eps;
    for (auto const& r : results) eps.emplace_back(r.endpoint());
    if (eps.empty()) throw api_error(asio::error::host_not_found, 0, what + ": resolving " + opts_.host);
    if (endpoints_.empty()) endpoints_ = eps;
    co_return eps;
}

asio::awaitable<http_response> http_transport::send(http::verb method, std::string target, std::string body,
                                                    steady_clock::time_point deadline) {
    auto const keep = shared_from_this();
    std::string const what = describe(method, target);

    std::string const wire = render_request(method, target, body);

    for (int attempt = 0;; ++attempt) {
        std::uint64_t const generation = generation_;
        // The retry always uses a fresh connection.
        // (Two statements: g++ 12 mishandles a co_await inside ?: .)
        std::unique_ptr<connection> c;
        if (attempt == 0) {
            auto pooled = co_await obtain(deadline, what);
            c = std::move(pooled);
        }
        bool const reused = c != nullptr;
        if (!c) {
            auto eps = co_await resolve(deadline, what);
            c = std::make_unique<connection>(ex_, count_, opts_.tls.get());
            active_guard guard{*this, *c};
            c->stream.expires_at(deadline);
            auto [ec, ep] = co_await c->stream.lowest().async_connect(eps, tuple_awaitable);
            if (ec) fail(ec, c->aborted || cancelled(co_await asio::this_coro::cancellation_state), what);
            beast::error_code ig;
            if (opts_.unix_path.empty()) c->stream.socket().set_option(tcp::no_delay(true), ig);
            if (c->stream.is_tls()) {
                // The server's certificate must name the host (or tls_server_name).
                std::string const& name = opts_.tls_server_name.empty() ? opts_.host : opts_.tls_server_name;
                asio::ip::make_address(name, ig);
                if (ig) SSL_set_tlsext_host_name(c->stream.native_handle(), name.c_str());  // SNI: names only
                c->stream.set_verify_callback(asio::ssl::host_name_verification(name));
                auto [hec] = co_await c->stream.async_handshake(asio::ssl::stream_base::client, tuple_awaitable);
                if (hec)
                    fail(hec, c->aborted || cancelled(co_await asio::this_coro::cancellation_state),
                         what + " (TLS handshake)");
            }
        }
        active_guard guard{*this, *c};
        c->stream.expires_at(deadline);

        // A kept-alive connection the server closed meanwhile fails on the
        // write or before the first byte of the answer: try once more on a
        // fresh connection.
        auto retry = [&](beast::error_code const& ec, bool got_some) {
            return reused && attempt == 0 && !got_some && !c->aborted && stale_connection_error(ec);
        };

        auto [wec, wn] = co_await asio::async_write(c->stream, asio::buffer(wire), tuple_awaitable);
        if (wec) {
            bool const aborted = c->aborted || cancelled(co_await asio::this_coro::cancellation_state);
            if (!aborted && retry(wec, false)) continue;
            fail(wec, aborted, what);
        }

        http::response_parser<http::string_body> parser;
        parser.body_limit(std::numeric_limits<std::uint64_t>::max());
        auto [rec, rn] = co_await http::async_read(c->stream, c->buffer, parser, tuple_awaitable);
        if (rec) {
            bool const aborted = c->aborted || cancelled(co_await asio::this_coro::cancellation_state);
            if (!aborted && retry(rec, parser.got_some() || c->buffer.size() != 0)) continue;
            fail(rec, aborted, what);
        }

        auto res = parser.release();
        http_response out;
        out.status = res.result_int();
        bool const keep_alive = res.keep_alive();
        out.body = std::move(res.body());
        out.headers = std::move(static_cast<http::fields&>(res));
        if (keep_alive) give_back(std::move(c), generation);
        co_return out;
    }
}

}  // namespace

std::shared_ptr<asio::ssl::context> make_client_tls_context(client_config const& config) {
    namespace ssl = asio::ssl;
    auto ctx = std::make_shared<ssl::context>(ssl::context::tls_client);
    ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                     ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
    ctx->set_verify_mode(ssl::verify_peer);
    beast::error_code ec;
    auto fail = [&](char const* field, std::string const& file) {
        throw boost::system::system_error(ec, std::string("Consul TLS: cannot load ") + field + " \"" + file + "\"");
    };
    if (!config.ca_file.empty()) {
        ctx->load_verify_file(config.ca_file, ec);
        if (ec) fail("ca_file", config.ca_file);
    } else {
        ctx->set_default_verify_paths(ec);
        if (ec) fail("the system's CAs", "");
    }
    if (config.cert_file.empty() != config.key_file.empty())
        throw boost::system::system_error(make_error_code(boost::system::errc::invalid_argument),
                                          "Consul TLS: a client certificate needs both cert_file and key_file");
    if (!config.cert_file.empty()) {
        ctx->use_certificate_chain_file(config.cert_file, ec);
        if (ec) fail("cert_file", config.cert_file);
        ctx->use_private_key_file(config.key_file, ssl::context::pem, ec);
        if (ec) fail("key_file", config.key_file);
    }
    return ctx;
}

std::shared_ptr<transport> make_http_transport(asio::any_io_executor ex, http_transport_options opts) {
    return std::make_shared<http_transport>(std::move(ex), std::move(opts));
}

}  // namespace tenure::consul::detail
