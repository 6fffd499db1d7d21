#include "fault_proxy.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <exception>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

namespace tenure::test {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using steady = std::chrono::steady_clock;

namespace {

constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

// Completion of every coroutine the proxy spawns. I/O errors never throw
// (they are error_codes), so an exception here is a bug: let it escape from
// io_context::run() and fail the test loudly instead of hiding it.
void rethrow_if(std::exception_ptr e) {
    if (e) std::rethrow_exception(e);
}

// RST: SO_LINGER {on, 0} makes close() discard unsent data and send a reset.
void abort_socket(tcp::socket& s) {
    if (!s.is_open()) return;
    error_code ignored;
    s.set_option(asio::socket_base::linger(true, 0), ignored);
    s.close(ignored);
}

// FIN to the peer; pending operations complete with operation_aborted.
void close_socket(tcp::socket& s) {
    if (!s.is_open()) return;
    error_code ignored;
    s.shutdown(tcp::socket::shutdown_both, ignored);
    s.close(ignored);
}

}  // namespace

struct connection;

struct fault_proxy::impl : std::enable_shared_from_this<impl> {
    impl(asio::any_io_executor executor, tcp::endpoint target_endpoint)
        : ex(std::move(executor)), target(target_endpoint), acceptor(ex), accept_backoff(ex) {
        tcp::endpoint const listen_on(asio::ip::address_v4::loopback(), 0);
        acceptor.open(listen_on.protocol());
        acceptor.bind(listen_on);
        acceptor.listen(asio::socket_base::max_listen_connections);
        local = acceptor.local_endpoint();
    }

    // Runs f(*this) on the executor: inline when already there, posted otherwise.
    template <class F>
    void on_executor(F f) {
        asio::dispatch(ex, [self = shared_from_this(), f = std::move(f)]() mutable { f(*self); });
    }

    // Executor only: every connection whose pumps may be waiting re-evaluates
    // the fault settings now.
    void wake_all();
    // Executor only: a snapshot of the open connections (closing one never
    // destroys it synchronously, but a snapshot keeps the loops obviously safe).
    std::vector<connection*> snapshot() const;

    static asio::awaitable<void> accept_loop(std::shared_ptr<impl> self);
    static asio::awaitable<void> run_connection(std::shared_ptr<connection> c);
    static asio::awaitable<void> pump(std::shared_ptr<connection> c, tcp::socket& from, tcp::socket& to,
                                      asio::steady_timer& gate);
    // Waits while the proxy is paused or, for a chunk read at *read_at, until
    // its delay has passed. False when the connection was closed meanwhile.
    asio::awaitable<bool> hold(connection& c, asio::steady_timer& gate, std::optional<steady::time_point> read_at);

    asio::any_io_executor ex;
    tcp::endpoint const target;
    tcp::acceptor acceptor;
    tcp::endpoint local;
    asio::steady_timer accept_backoff;

    // Settings and counters: any thread.
    std::atomic<bool> started{false};
    std::atomic<bool> stopped{false};
    std::atomic<bool> paused{false};
    std::atomic<bool> dropping{false};
    std::atomic<bool> blackholed{false};
    std::atomic<std::int64_t> delay_ms{0};
    std::atomic<std::uint64_t> reset_epoch{0};
    std::atomic<std::size_t> open{0};
    std::atomic<std::uint64_t> forwarded{0};
    std::atomic<std::uint64_t> accepted{0};

    // Executor only.
    std::uint64_t next_id = 0;
    std::unordered_map<std::uint64_t, connection*> connections;
};

// One proxied connection: the accepted client socket and the upstream socket.
// Owned by its coroutines (run_connection, then the two pumps); the last one
// to finish destroys it, which closes both sockets and unregisters it.
struct connection {
    connection(std::shared_ptr<fault_proxy::impl> proxy, tcp::socket accepted)
        : owner(std::move(proxy)),
          id(owner->next_id++),
          epoch(owner->reset_epoch.load()),
          client(std::move(accepted)),
          server(owner->ex),
          c2s_gate(owner->ex),
          s2c_gate(owner->ex) {
        owner->connections.emplace(id, this);
        ++owner->open;
    }
    ~connection() {
        owner->connections.erase(id);
        --owner->open;
    }
    connection(connection const&) = delete;
    connection& operator=(connection const&) = delete;

    // RST to both peers.
    void abort() {
        if (closed) return;
        closed = true;
        abort_socket(client);
        abort_socket(server);
        wake();
    }
    // FIN to both peers.
    void close() {
        if (closed) return;
        closed = true;
        close_socket(client);
        close_socket(server);
        wake();
    }
    // Cancels whatever the gates are waiting for; the waiter re-evaluates.
    void wake() {
        c2s_gate.cancel();
        s2c_gate.cancel();
    }

    std::shared_ptr<fault_proxy::impl> const owner;
    std::uint64_t const id;
    std::uint64_t const epoch;  // reset_all() calls made before this connection was accepted
    tcp::socket client;
    tcp::socket server;
    asio::steady_timer c2s_gate;  // also the pre-connect gate
    asio::steady_timer s2c_gate;
    bool closed = false;
};

void fault_proxy::impl::wake_all() {
    for (connection* c : snapshot()) c->wake();
}

std::vector<connection*> fault_proxy::impl::snapshot() const {
    std::vector<connection*> out;
    out.reserve(connections.size());
    for (auto const& [id, c] : connections) out.push_back(c);
    return out;
}

asio::awaitable<bool> fault_proxy::impl::hold(connection& c, asio::steady_timer& gate,
                                             std::optional<steady::time_point> read_at) {
    for (;;) {
        if (c.closed || stopped.load()) co_return false;
        if (paused.load()) {
            // An event rather than a poll: resume() (or a reset/stop) cancels the wait.
            gate.expires_at(steady::time_point::max());
            co_await gate.async_wait(use_tuple);
            continue;
        }
        if (read_at) {
            auto const due = *read_at + std::chrono::milliseconds(delay_ms.load());
            if (steady::now() < due) {
                // set_delay() cancels the wait, so a shorter delay applies at once.
                gate.expires_at(due);
                co_await gate.async_wait(use_tuple);
                continue;
            }
        }
        co_return true;
    }
}

asio::awaitable<void> fault_proxy::impl::accept_loop(std::shared_ptr<impl> self) {
    for (;;) {
        auto [ec, socket] = co_await self->acceptor.async_accept(use_tuple);
        if (self->stopped.load() || !self->acceptor.is_open()) co_return;
        if (ec) {
            if (ec == asio::error::operation_aborted) co_return;
            // A connection that died in the backlog is routine; anything else
            // (EMFILE, ENOBUFS) gets a short back-off so the loop cannot spin.
            if (ec != asio::error::connection_aborted) {
                self->accept_backoff.expires_after(std::chrono::milliseconds(10));
                co_await self->accept_backoff.async_wait(use_tuple);
            }
            continue;
        }
        ++self->accepted;
        if (self->dropping.load()) {
            close_socket(socket);
            continue;
        }
        auto c = std::make_shared<connection>(self, std::move(socket));
        asio::co_spawn(self->ex, run_connection(std::move(c)), rethrow_if);
    }
}

asio::awaitable<void> fault_proxy::impl::run_connection(std::shared_ptr<connection> c) {
    impl& self = *c->owner;
    // While paused the connection is accepted but not connected upstream.
    if (!co_await self.hold(*c, c->c2s_gate, std::nullopt)) {
        c->close();
        co_return;
    }
    auto [ec] = co_await c->server.async_connect(self.target, use_tuple);
    if (c->closed) co_return;
    if (ec) {
        // Nothing to forward to: the client sees its connection reset.
        c->abort();
        co_return;
    }
    error_code ignored;
    c->client.set_option(tcp::no_delay(true), ignored);
    c->server.set_option(tcp::no_delay(true), ignored);
    asio::co_spawn(self.ex, pump(c, c->client, c->server, c->c2s_gate), rethrow_if);
    asio::co_spawn(self.ex, pump(c, c->server, c->client, c->s2c_gate), rethrow_if);
}

asio::awaitable<void> fault_proxy::impl::pump(std::shared_ptr<connection> c, tcp::socket& from, tcp::socket& to,
                                              asio::steady_timer& gate) {
    impl& self = *c->owner;
    std::array<char, 16 * 1024> buf;
    for (;;) {
        // Not even read while paused: the bytes wait in the kernel.
        if (!co_await self.hold(*c, gate, std::nullopt)) co_return;
        auto [rec, n] = co_await from.async_read_some(asio::buffer(buf), use_tuple);
        if (c->closed) co_return;
        if (rec == asio::error::eof) {
            // Half-close: pass the FIN on and let the other direction finish.
            error_code ignored;
            to.shutdown(tcp::socket::shutdown_send, ignored);
            co_return;
        }
        if (rec) {
            c->abort();  // a reset (or any error) on one side resets the other
            co_return;
        }
        auto const read_at = steady::now();
        // A chunk read before pause() is held here, not lost.
        if (!co_await self.hold(*c, gate, read_at)) co_return;
        if (self.blackholed.load()) continue;
        auto [wec, written] = co_await asio::async_write(to, asio::buffer(buf.data(), n), use_tuple);
        if (c->closed) co_return;
        if (wec) {
            c->abort();
            co_return;
        }
        self.forwarded += written;
    }
}

// ---- fault_proxy -------------------------------------------------------------

fault_proxy::fault_proxy(asio::any_io_executor ex, tcp::endpoint target)
    : impl_(std::make_shared<impl>(std::move(ex), target)) {}

fault_proxy::~fault_proxy() { stop(); }

tcp::endpoint fault_proxy::endpoint() const { return impl_->local; }

std::string fault_proxy::address() const { return "http://127.0.0.1:" + std::to_string(impl_->local.port()); }

tcp::endpoint fault_proxy::target() const { return impl_->target; }

void fault_proxy::start() {
    if (impl_->stopped.load() || impl_->started.exchange(true)) return;
    impl_->on_executor([](impl& self) {
        if (self.stopped.load()) return;
        asio::co_spawn(self.ex, impl::accept_loop(self.shared_from_this()), rethrow_if);
    });
}

void fault_proxy::stop() {
    if (impl_->stopped.exchange(true)) return;
    impl_->on_executor([](impl& self) {
        error_code ignored;
        self.acceptor.close(ignored);
        self.accept_backoff.cancel();
        for (connection* c : self.snapshot()) c->close();
    });
}

void fault_proxy::pause() {
    // Nothing to wake: every pump checks the flag before its next read and
    // before writing the chunk it holds.
    impl_->paused.store(true);
}

void fault_proxy::resume() {
    impl_->paused.store(false);
    impl_->on_executor([](impl& self) { self.wake_all(); });
}

void fault_proxy::set_delay(std::chrono::milliseconds d) {
    impl_->delay_ms.store(std::max<std::int64_t>(0, d.count()));
    impl_->on_executor([](impl& self) { self.wake_all(); });
}

void fault_proxy::reset_all() {
    // Only what was accepted before this call: a connection accepted later
    // carries an epoch >= the new value.
    std::uint64_t const epoch = ++impl_->reset_epoch;
    impl_->on_executor([epoch](impl& self) {
        for (connection* c : self.snapshot())
            if (c->epoch < epoch) c->abort();
    });
}

void fault_proxy::drop_new(bool on) { impl_->dropping.store(on); }

void fault_proxy::blackhole(bool on) {
    // A held chunk checks the flag when it is released, so no wake-up is needed.
    impl_->blackholed.store(on);
}

bool fault_proxy::paused() const { return impl_->paused.load(); }

std::chrono::milliseconds fault_proxy::delay() const { return std::chrono::milliseconds(impl_->delay_ms.load()); }

std::size_t fault_proxy::connection_count() const { return impl_->open.load(); }

std::uint64_t fault_proxy::bytes_forwarded() const { return impl_->forwarded.load(); }

std::uint64_t fault_proxy::connections_accepted() const { return impl_->accepted.load(); }

}  // namespace tenure::test
