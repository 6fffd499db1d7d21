// The keep-alive pool of http_pool.hpp.
#include "net/http_pool.hpp"
#include <tenure/detail/clock.hpp>

// g++ 12 false positive on Asio's coroutine frame allocator (fixed in g++ 13).
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/cancellation_state.hpp>
#include <boost/asio/cancellation_type.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <limits>
#include <optional>
#include <utility>

namespace tenure::detail {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);

bool cancelled(asio::cancellation_state const& cs) { return cs.cancelled() != asio::cancellation_type::none; }

// Errors a kept-alive connection shows when the server closed it while idle.
bool stale_connection_error(beast::error_code const& ec) {
    return ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset ||
           ec == asio::error::broken_pipe || ec == asio::error::connection_aborted ||
           ec == asio::ssl::error::stream_truncated;  // TLS: closed without close_notify
}

// True when the server has already closed (or written unsolicited bytes to)
// an idle connection. Non-blocking peek; never waits.
// One recv(MSG_PEEK | MSG_DONTWAIT) syscall: Asio's socket::receive would
// need an ioctl to make the socket non-blocking first.
bool idle_connection_dead(http_connection& c) {
    auto& sock = c.stream.socket();
    if (!sock.is_open()) return true;
    char byte = 0;
    auto const n = ::recv(sock.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    return true;  // EOF, an error, or bytes nobody asked for
}

// A response parser that stores the status, the body and only the header
// fields the owner reads (Beast's response_parser stores every field, one
// allocation each). Keep-alive is the parser's own reading of the header.
class response_reader final : public http::basic_parser<false> {
public:
    explicit response_reader(std::string_view kept_prefix) : kept_prefix_(kept_prefix) {}
    http_pool::response release() { return std::move(res_); }

private:
    void on_request_impl(http::verb, beast::string_view, beast::string_view, int, beast::error_code&) override {}
    void on_response_impl(int code, beast::string_view, int, beast::error_code&) override {
        res_.status = static_cast<unsigned>(code);
    }
    void on_field_impl(http::field, beast::string_view name, beast::string_view value, beast::error_code&) override {
        if (!kept_prefix_.empty() && name.size() >= kept_prefix_.size() &&
            beast::iequals(name.substr(0, kept_prefix_.size()), kept_prefix_))
            res_.headers.insert(name, value);
    }
    void on_header_impl(beast::error_code&) override {}
    void on_body_init_impl(boost::optional<std::uint64_t> const& length, beast::error_code&) override {
        // A declared length is a hint, not a promise: reserve at most 1 MiB.
        if (length) res_.body.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(*length, 1u << 20)));
    }
    std::size_t on_body_impl(beast::string_view body, beast::error_code&) override {
        res_.body.append(body.data(), body.size());
        return body.size();
    }
    void on_chunk_header_impl(std::uint64_t, beast::string_view, beast::error_code&) override {}
    std::size_t on_chunk_body_impl(std::uint64_t, beast::string_view body, beast::error_code&) override {
        res_.body.append(body.data(), body.size());
        return body.size();
    }
    void on_finish_impl(beast::error_code&) override {}

    std::string_view kept_prefix_;
    http_pool::response res_;
};

}  // namespace

http_connection::http_connection(asio::any_io_executor const& ex, std::shared_ptr<connection_count> n,
                                 std::shared_ptr<asio::ssl::context> tls_context)
    : tls(std::move(tls_context)), stream(ex, tls.get()), count(std::move(n)) {
    // Beast reads at most the buffer's free room (512 bytes when empty), and
    // the parser consumes what it reads, so an unreserved buffer never grows:
    // a 1.4 KB transaction answer took three recvmsg calls, a hub snapshot of
    // a few MB thousands. The room is kept for the connection's life.
    buffer.reserve(read_buffer_bytes);
    ++count->open;
}

http_connection::~http_connection() {
    --count->open;
    if (count->on_close) count->on_close();
}

// Registers a connection as in flight while it connects or exchanges, so
// that close() can abort it. The connection must outlive the guard (it is
// read when the guard ends): end the guard before giving the connection back.
class http_pool::active_guard {
public:
    active_guard(http_pool& p, http_connection& c) : p_(p), c_(c) {
        c_.active_slot = p_.active_.size();
        p_.active_.push_back(&c_);
    }
    ~active_guard() {
        if (c_.deadline != clock::time_point::max()) p_.unwatch(c_);
        auto& list = p_.active_;
        list[c_.active_slot] = list.back();
        list[c_.active_slot]->active_slot = c_.active_slot;
        list.pop_back();
    }
    active_guard(active_guard const&) = delete;
    active_guard& operator=(active_guard const&) = delete;

private:
    http_pool& p_;
    http_connection& c_;
};

struct http_pool::watchdog {
    explicit watchdog(asio::any_io_executor const& ex) : timer(ex) {}
    tenure::detail::timer timer;
    clock::time_point armed = clock::time_point::max();  // max: not waiting
    std::uint64_t wait = 0;  // the current wait's number: a superseded one's completion is ignored
};

// A request waiting for a connection: woken with one handed over (given
// back), or with room for a new one (one closed).
struct http_pool::waiter {
    waiter(asio::any_io_executor const& ex, clock::time_point deadline) : timer(ex, deadline) {}
    tenure::detail::timer timer;
    std::unique_ptr<http_connection> handed;
    std::uint64_t handed_generation = 0;  // the pool's generation when it was handed over
    bool room = false;                    // woken because a connection closed
};

http_pool::http_pool(asio::any_io_executor ex, http_pool_options opts, fail_handler on_fail)
    : ex_(std::move(ex)), opts_(std::move(opts)), on_fail_(std::move(on_fail)),
      count_(std::make_shared<connection_count>()), watchdog_(std::make_shared<watchdog>(ex_)) {
    count_->on_close = [this] { wake_one(); };
    auto const& d = opts_.destination;
    if (!d.unix_path.empty()) {
        endpoints_.emplace_back(asio::local::stream_protocol::endpoint(d.unix_path));
        return;
    }
    beast::error_code ec;
    auto const addr = asio::ip::make_address(d.host, ec);
    if (!ec) endpoints_.emplace_back(tcp::endpoint(addr, d.port));
}

http_pool::~http_pool() {
    count_->on_close = nullptr;  // connections handed out may outlive the pool
    close();
}

void http_pool::close() {
    ++generation_;
    idle_.clear();  // closes their sockets
    for (http_connection* c : active_) {
        c->aborted = true;
        c->stream.close();  // pending operations complete with operation_aborted
    }
}

std::string http_pool::where() const {
    auto const& d = opts_.destination;
    return d.unix_path.empty() ? d.host_header : "unix://" + d.unix_path;
}

std::string http_pool::describe(request_label label) const {
    std::string s;
    s.reserve(label.method.size() + label.target.size() + 32);
    s.append(label.method).append(" ").append(label.target).append(" on ").append(where());
    return s;
}

void http_pool::fail(boost::system::error_code ec, std::string what, std::string_view reason) const {
    on_fail_(net_failure{ec, std::move(what), reason});
    std::abort();  // the handler must throw
}

void http_pool::fail_io(boost::system::error_code const& ec, bool aborted, std::string what) const {
    if (aborted || ec == asio::error::operation_aborted) fail(asio::error::operation_aborted, std::move(what));
    if (ec == beast::error::timeout || ec == asio::error::timed_out) fail(asio::error::timed_out, std::move(what));
    fail(ec, std::move(what));
}

std::unique_ptr<http_connection> http_pool::take_idle() {
    auto const now = clock::now();
    while (!idle_.empty()) {
        auto c = std::move(idle_.back());
        idle_.pop_back();
        // Given back a moment ago: no server closes a keep-alive connection
        // right after answering on it, and if one did, the request's stale
        // retry covers it. The probe's syscall is paid by connections idle
        // long enough to have been reaped.
        if (now - c->idle_since < trusted_idle || !idle_connection_dead(*c)) return c;
    }
    return nullptr;
}

void http_pool::give_back(std::unique_ptr<http_connection> c, std::uint64_t generation) {
    if (generation != generation_ || c->aborted || c->timed_out || c->buffer.size() != 0) return;
    c->idle_since = clock::now();
    // Straight to the longest waiter: parked among the idle ones, it would
    // go to whichever request asked next, ahead of the waiter woken for it.
    if (auto w = next_waiter()) {
        w->handed = std::move(c);
        w->handed_generation = generation_;
        w->timer.cancel();
        return;
    }
    if (idle_.size() >= opts_.max_idle) return;
    idle_.push_back(std::move(c));
}

void http_pool::watch(http_connection& c, clock::time_point deadline) {
    if (c.deadline == clock::time_point::max()) ++watched_;
    c.deadline = deadline;
    if (deadline < watchdog_->armed) arm_watchdog(deadline);
}

// The last exchange ended: a pending wait would keep the caller's
// io_context::run() from returning (for up to the longest deadline).
void http_pool::unwatch(http_connection& c) {
    c.deadline = clock::time_point::max();
    if (--watched_ != 0) return;
    auto& w = *watchdog_;
    if (w.armed == clock::time_point::max()) return;
    w.armed = clock::time_point::max();
    ++w.wait;
    w.timer.cancel();
}

void http_pool::arm_watchdog(clock::time_point at) {
    auto& w = *watchdog_;
    w.armed = at;
    w.timer.expires_at(at);  // a wait for a later time completes as cancelled, and is ignored
    w.timer.async_wait([this, weak = std::weak_ptr<watchdog>(watchdog_), wait = ++w.wait](beast::error_code) {
        auto alive = weak.lock();  // the pool owns the watchdog: alive, so is the pool
        if (alive && alive->wait == wait) on_watchdog();
    });
}

void http_pool::on_watchdog() {
    watchdog_->armed = clock::time_point::max();
    auto const now = clock::now();
    auto next = clock::time_point::max();
    // Closing completes the connection's operations later, through the
    // executor: the active list does not change under this loop.
    for (http_connection* c : active_) {
        if (c->deadline <= now) {
            if (!c->timed_out) {
                c->timed_out = true;
                c->stream.close();
            }
        } else {
            next = std::min(next, c->deadline);
        }
    }
    if (next != clock::time_point::max()) arm_watchdog(next);
}

bool http_pool::at_limit() const noexcept {
    return opts_.max_connections != 0 && count_->open >= opts_.max_connections;
}

std::shared_ptr<http_pool::waiter> http_pool::next_waiter() {
    while (!waiters_.empty()) {
        auto w = waiters_.front().lock();
        waiters_.pop_front();
        if (w) return w;
    }
    return nullptr;
}

bool http_pool::others_waiting() {
    while (!waiters_.empty() && waiters_.front().expired()) waiters_.pop_front();
    return !waiters_.empty();
}

void http_pool::wake_one() {
    if (auto w = next_waiter()) {
        w->room = true;
        w->timer.cancel();
    }
}

// Waits for an idle connection or room for a new one, within `deadline`;
// null: the caller connects a new one. While others wait, a request queues
// behind them even if a connection is idle or there is room: that
// connection, or that room, is already theirs.
asio::awaitable<std::unique_ptr<http_connection>> http_pool::obtain(clock::time_point deadline,
                                                                    std::uint64_t generation, request_label label) {
    bool front = false;  // back in the queue after its room was taken: it keeps its place
    for (;;) {
        if (front || !others_waiting()) {
            if (auto c = take_idle()) co_return c;
            if (!at_limit()) co_return nullptr;
        }
        auto w = std::make_shared<waiter>(ex_, deadline);
        if (front) waiters_.push_front(w);
        else waiters_.push_back(w);
        auto [ec] = co_await w->timer.async_wait(tuple_awaitable);
        auto handed = std::move(w->handed);
        // close() since the exchange began aborts it, as it does those in flight.
        bool const aborted = generation != generation_ || cancelled(co_await asio::this_coro::cancellation_state);
        // Woken (give_back or wake_one cancelled the wait) and still wanted.
        if (ec && !aborted) {
            if (handed) co_return handed;
            if (w->room) {
                if (!at_limit()) co_return nullptr;
                front = true;  // the room went to a connection of the caller's own (connect())
                continue;
            }
        }
        // Past the deadline, or abandoned: what it was given goes on to the next.
        if (handed) give_back(std::move(handed), w->handed_generation);
        else if (w->room) wake_one();
        if (ec) fail(asio::error::operation_aborted, describe(label));
        fail(asio::error::timed_out, describe(label) + ": no free connection (max_connections)");
    }
}

asio::awaitable<std::vector<http_pool::endpoint>> http_pool::resolve(clock::time_point deadline,
                                                                     std::string const& what) {
    if (!endpoints_.empty()) co_return endpoints_;
    auto const& d = opts_.destination;
    std::string const resolving = what + ": resolving " + d.host;
    // getaddrinfo has no deadline of its own: a timer cancels the resolver.
    auto resolver = std::make_shared<tcp::resolver>(ex_);
    auto timed_out = std::make_shared<bool>(false);
    tenure::detail::timer timer(ex_, deadline);
    timer.async_wait([w = std::weak_ptr<tcp::resolver>(resolver), timed_out](beast::error_code ec) {
        if (ec) return;
        *timed_out = true;
        if (auto r = w.lock()) r->cancel();
    });
    auto [ec, results] = co_await resolver->async_resolve(d.host, std::to_string(d.port), tuple_awaitable);
    timer.cancel();
    if (*timed_out) fail(asio::error::timed_out, resolving);
    if (ec) {
        if (ec == asio::error::operation_aborted || cancelled(co_await asio::this_coro::cancellation_state))
            fail(asio::error::operation_aborted, what);
        fail(ec, resolving);
    }
    std::vector<endpoint> eps;
    for (auto const& r : results) eps.emplace_back(r.endpoint());
    if (eps.empty()) fail(asio::error::host_not_found, resolving, "no address");
    if (endpoints_.empty()) endpoints_ = eps;
    co_return eps;
}

// Resolves, connects and (for TLS) handshakes by `deadline`. `tracked`: in
// the active set meanwhile, so that close() aborts it.
asio::awaitable<std::unique_ptr<http_connection>> http_pool::open(clock::time_point deadline, std::string const& what,
                                                                  bool tracked) {
    auto eps = co_await resolve(deadline, what);
    auto const& d = opts_.destination;
    auto c = std::make_unique<http_connection>(ex_, count_, d.tls);
    std::optional<active_guard> guard;
    if (tracked) guard.emplace(*this, *c);
    c->stream.expires_at(deadline);
    auto [ec, ep] = co_await c->stream.lowest().async_connect(eps, tuple_awaitable);
    if (ec) fail_io(ec, c->aborted || cancelled(co_await asio::this_coro::cancellation_state), what);
    beast::error_code ig;
    if (d.unix_path.empty()) c->stream.socket().set_option(tcp::no_delay(true), ig);
    if (c->stream.is_tls()) {
        // The server's certificate must name the host (or tls_server_name).
        std::string const& name = d.tls_server_name.empty() ? d.host : d.tls_server_name;
        asio::ip::make_address(name, ig);
        if (ig) SSL_set_tlsext_host_name(c->stream.native_handle(), name.c_str());  // SNI: names only
        c->stream.set_verify_callback(asio::ssl::host_name_verification(name));
        auto [hec] = co_await c->stream.async_handshake(asio::ssl::stream_base::client, tuple_awaitable);
        if (hec)
            fail_io(hec, c->aborted || cancelled(co_await asio::this_coro::cancellation_state),
                    what + " (TLS handshake)");
    }
    // A pooled connection's exchanges are timed by the watchdog.
    if (tracked) c->stream.expires_never();
    co_return c;
}

asio::awaitable<std::unique_ptr<http_connection>> http_pool::connect(clock::time_point deadline,
                                                                     std::string const& what) {
    co_return co_await open(deadline, what, false);
}

asio::awaitable<http_pool::response> http_pool::exchange(std::string wire, clock::time_point deadline) {
    std::uint64_t const generation = generation_;
    auto const label = request_label::of(wire);
    // An idle connection, the usual case, is taken without awaiting
    // obtain() (no coroutine frame). (Two statements: g++ 12 mishandles a
    // co_await inside ?: .)
    // While others wait, it queues behind them (obtain()).
    std::unique_ptr<http_connection> c;
    bool const queue = others_waiting();
    if (!queue) c = take_idle();
    if (!c && (queue || at_limit())) {
        auto pooled = co_await obtain(deadline, generation, label);
        c = std::move(pooled);
    }
    // The write and the read run in a frame of their own, made once a
    // connection is in hand: with thousands of requests waiting for one of
    // a few connections, each waiter holds this small frame, not the
    // parser's (every local of a coroutine takes room in its frame).
    co_return co_await round_trip(std::move(c), generation, wire, deadline, label);
}

asio::awaitable<http_pool::response> http_pool::round_trip(std::unique_ptr<http_connection> c,
                                                           std::uint64_t generation, std::string_view wire,
                                                           clock::time_point deadline, request_label label) {
    for (int attempt = 0;; ++attempt) {
        // The retry always uses a fresh connection.
        if (attempt > 0) {
            c.reset();
            generation = generation_;
        }
        bool const reused = c != nullptr;
        if (!c) {
            auto fresh = co_await open(deadline, describe(label), true);
            c = std::move(fresh);
            if (generation != generation_) fail(asio::error::operation_aborted, describe(label));  // close() ran meanwhile
        }
        // Out of the active list before the connection goes back to the
        // pool (or is closed there): the guard reads the connection.
        std::optional<active_guard> guard;
        guard.emplace(*this, *c);
        watch(*c, deadline);

        // A kept-alive connection the server closed meanwhile fails on the
        // write or before the first byte of the answer: try once more on a
        // fresh connection.
        auto retry = [&](beast::error_code const& ec, bool got_some) {
            return reused && attempt == 0 && !got_some && !c->aborted && stale_connection_error(ec);
        };
        // The watchdog closed the connection at the deadline.
        auto check_deadline = [&] {
            if (c->timed_out) fail(asio::error::timed_out, describe(label));
        };

        // A request leaves in one non-blocking send when the socket takes it
        // whole, with no write operation and no completion through the
        // executor; the rest, if any (and all of it under TLS), is written
        // asynchronously, and meets any error of the first send again.
        std::size_t const sent = c->stream.send_now(asio::buffer(wire.data(), wire.size()), {});
        beast::error_code wec;
        if (sent < wire.size()) {
            auto [ec, wn] = co_await asio::async_write(c->stream, asio::buffer(wire.data() + sent, wire.size() - sent),
                                                       tuple_awaitable);
            wec = ec;
        }
        if (wec) {
            check_deadline();
            bool const aborted = c->aborted || cancelled(co_await asio::this_coro::cancellation_state);
            if (!aborted && retry(wec, false)) continue;
            fail_io(wec, aborted, describe(label));
        }

        response_reader parser(opts_.kept_fields_prefix);
        parser.body_limit(std::numeric_limits<std::uint64_t>::max());
        auto [rec, rn] = co_await http::async_read(c->stream, c->buffer, parser, tuple_awaitable);
        if (rec) {
            check_deadline();
            bool const aborted = c->aborted || cancelled(co_await asio::this_coro::cancellation_state);
            if (!aborted && retry(rec, parser.got_some() || c->buffer.size() != 0)) continue;
            fail_io(rec, aborted, describe(label));
        }

        // (No named response: every local of a coroutine takes room in its
        // frame, and a frame past 1 KiB misses malloc's fast bins.)
        bool const keep_alive = parser.keep_alive();
        guard.reset();
        if (keep_alive) give_back(std::move(c), generation);
        co_return parser.release();
    }
}

}  // namespace tenure::detail
