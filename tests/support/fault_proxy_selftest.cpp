// Self-test of tenure::test::fault_proxy against a tiny echo server on the
// same io_context, over real loopback sockets.
//
// Each case runs one coroutine on a fresh io_context. The echo server and the
// proxy live inside that coroutine, so when it ends they are destroyed, and
// the io_context must then run out of work by itself: a pump, timer or accept
// that stop() failed to cancel would keep it busy, and run() reports that.
//
// Nothing waits on a timer to let things "settle". The only timer is in
// receive_within(), used to assert that bytes do NOT arrive (a pause, a
// blackhole, a large delay): absence can only be observed for some window.
// Everything else is ordered by the data itself (a reply proves its request
// went through) or by the io_context's own ordering (a handler the proxy ran
// before a client's socket became readable).
#define BOOST_TEST_MODULE tenure_fault_proxy_selftest
#include <boost/test/unit_test.hpp>

#include "fault_proxy.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <variant>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;
using namespace std::chrono_literals;
using namespace asio::experimental::awaitable_operators;
using tenure::test::fault_proxy;

constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);
// How long an "it does not arrive" assertion watches. Long enough that a
// loopback hop on a loaded machine has certainly happened, short enough to
// keep the suite quick.
constexpr auto absence_window = 150ms;

// ---- echo server ---------------------------------------------------------------

// Echoes every byte back. Its state is shared with its coroutines so that
// destroying the server while sessions are suspended is safe.
class echo_server {
public:
    explicit echo_server(asio::any_io_executor ex) : st_(std::make_shared<state>(ex)) {
        asio::co_spawn(ex, accept_loop(st_), [](std::exception_ptr e) {
            if (e) std::rethrow_exception(e);
        });
    }
    ~echo_server() { stop(); }
    echo_server(echo_server const&) = delete;
    echo_server& operator=(echo_server const&) = delete;

    tcp::endpoint endpoint() const { return st_->local; }
    std::size_t accepted() const { return st_->accepted.load(); }
    std::uint64_t bytes_received() const { return st_->received.load(); }
    // Sessions that ended with a connection reset.
    std::size_t resets() const { return st_->resets.load(); }

    void stop() {
        asio::dispatch(st_->acceptor.get_executor(), [st = st_] {
            st->stopped = true;
            error_code ignored;
            st->acceptor.close(ignored);
            for (auto& [id, s] : st->sessions) s->close(ignored);
        });
    }

private:
    struct state {
        explicit state(asio::any_io_executor ex)
            : acceptor(ex, tcp::endpoint(asio::ip::address_v4::loopback(), 0)), local(acceptor.local_endpoint()) {}
        tcp::acceptor acceptor;
        tcp::endpoint local;
        bool stopped = false;
        int next_id = 0;
        std::map<int, tcp::socket*> sessions;
        std::atomic<std::size_t> accepted{0};
        std::atomic<std::uint64_t> received{0};
        std::atomic<std::size_t> resets{0};
    };

    static asio::awaitable<void> accept_loop(std::shared_ptr<state> st) {
        for (;;) {
            auto [ec, s] = co_await st->acceptor.async_accept(use_tuple);
            if (ec || st->stopped) co_return;
            ++st->accepted;
            asio::co_spawn(st->acceptor.get_executor(), session(st, std::move(s)), [](std::exception_ptr e) {
                if (e) std::rethrow_exception(e);
            });
        }
    }

    static asio::awaitable<void> session(std::shared_ptr<state> st, tcp::socket s) {
        int const id = st->next_id++;
        st->sessions.emplace(id, &s);
        std::array<char, 16 * 1024> buf;
        for (;;) {
            auto [ec, n] = co_await s.async_read_some(asio::buffer(buf), use_tuple);
            if (ec) {
                if (ec == asio::error::connection_reset) ++st->resets;
                break;
            }
            st->received += n;
            auto [wec, written] = co_await asio::async_write(s, asio::buffer(buf.data(), n), use_tuple);
            if (wec) {
                if (wec == asio::error::connection_reset) ++st->resets;
                break;
            }
        }
        st->sessions.erase(id);
    }

    std::shared_ptr<state> st_;
};

// ---- client helpers ------------------------------------------------------------

asio::awaitable<tcp::socket> connect_to(tcp::endpoint ep) {
    tcp::socket s(co_await asio::this_coro::executor);
    co_await s.async_connect(ep, asio::use_awaitable);
    s.set_option(tcp::no_delay(true));
    co_return s;
}

asio::awaitable<void> send(tcp::socket& s, std::string_view data) {
    co_await asio::async_write(s, asio::buffer(data), asio::use_awaitable);
}

// Exactly n bytes (throws on EOF or an error).
asio::awaitable<std::string> receive(tcp::socket& s, std::size_t n) {
    std::string out(n, '\0');
    co_await asio::async_read(s, asio::buffer(out), asio::use_awaitable);
    co_return out;
}

asio::awaitable<std::string> round_trip(tcp::socket& s, std::string_view msg) {
    co_await send(s, msg);
    co_return co_await receive(s, msg.size());
}

// Reads (and discards) until the connection fails; returns how it failed.
asio::awaitable<error_code> read_until_failure(tcp::socket& s) {
    std::array<char, 16 * 1024> buf;
    for (;;) {
        auto [ec, n] = co_await s.async_read_some(asio::buffer(buf), use_tuple);
        if (ec) co_return ec;
    }
}

bool is_reset_or_eof(error_code ec) {
    return ec == asio::error::connection_reset || ec == asio::error::eof;
}

// The one timer: whatever arrives within `window`, or nullopt when nothing
// did. Losing the race cancels the read before it consumed anything, so the
// socket stays usable for the bytes that arrive later.
asio::awaitable<std::optional<std::string>> receive_within(tcp::socket& s, std::chrono::milliseconds window) {
    std::array<char, 16 * 1024> buf;
    asio::steady_timer timer(co_await asio::this_coro::executor, window);
    auto first = co_await (s.async_read_some(asio::buffer(buf), use_tuple) || timer.async_wait(asio::use_awaitable));
    if (first.index() == 1) co_return std::nullopt;
    auto [ec, n] = std::get<0>(first);
    if (ec) co_return "<" + ec.message() + ">";
    co_return std::string(buf.data(), n);
}

// BOOST_TEST on the result of a co_await. The value is held in a local
// first: Boost.Test's expression templates around a co_await are asking for
// GCC 12 coroutine bugs.
#define CO_TEST_EQ(awaited, expected)                  \
    do {                                               \
        auto const co_test_value = co_await (awaited); \
        BOOST_TEST(co_test_value == (expected));       \
    } while (false)
#define CO_TEST_RESET_OR_EOF(awaited)                                          \
    do {                                                                       \
        auto const co_test_ec = co_await (awaited);                            \
        BOOST_TEST(is_reset_or_eof(co_test_ec), "ended with " << co_test_ec.message()); \
    } while (false)

// ---- harness -------------------------------------------------------------------

// Runs one test coroutine on a fresh io_context and requires that, once it
// has finished (and destroyed its proxy and echo server), nothing is left
// running. run_for only bounds a hang; it never paces the test.
template <class Body>
void run(Body body) {
    asio::io_context ioc;
    std::exception_ptr failure;
    bool finished = false;
    asio::co_spawn(ioc, body(ioc.get_executor()), [&](std::exception_ptr e) {
        failure = e;
        finished = true;
    });
    ioc.run_for(60s);
    BOOST_REQUIRE_MESSAGE(finished, "the test coroutine did not finish");
    if (failure) std::rethrow_exception(failure);
    BOOST_CHECK_MESSAGE(ioc.stopped(), "work was left on the io_context after the proxy was destroyed");
}

struct rig {
    explicit rig(asio::any_io_executor ex) : echo(ex), proxy(ex, echo.endpoint()) { proxy.start(); }
    echo_server echo;
    fault_proxy proxy;
};

}  // namespace

// ---- tests ---------------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(fault_proxy_selftest)

BOOST_AUTO_TEST_CASE(listens_on_loopback_ephemeral_port) {
    asio::io_context ioc;
    fault_proxy proxy(ioc.get_executor(), tcp::endpoint(asio::ip::address_v4::loopback(), 9));
    BOOST_TEST(proxy.endpoint().address().to_string() == "127.0.0.1");
    BOOST_TEST(proxy.endpoint().port() != 0);
    BOOST_TEST(proxy.address() == "http://127.0.0.1:" + std::to_string(proxy.endpoint().port()));
    BOOST_TEST(proxy.target().port() == 9);
    BOOST_TEST(proxy.connection_count() == 0u);
    BOOST_TEST(proxy.bytes_forwarded() == 0u);
}

BOOST_AUTO_TEST_CASE(forwards_bytes_both_ways) {
    run([](asio::any_io_executor ex) -> asio::awaitable<void> {
        rig r(ex);
        auto client = co_await connect_to(r.proxy.endpoint());
        CO_TEST_EQ(round_trip(client, "hello"), "hello");
        CO_TEST_EQ(round_trip(client, "world!"), "world!");
        BOOST_TEST(r.proxy.connection_count() == 1u);
        BOOST_TEST(r.echo.accepted() == 1u);
        // The second reply proves the first exchange was counted both ways.
        BOOST_TEST(r.proxy.bytes_forwarded() >= 10u);
        BOOST_TEST(r.proxy.bytes_forwarded() <= 22u);

        // A payload far larger than one chunk, written while it is read back.
        std::string big(1 << 20, '\0');
        for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>('a' + i % 23);
        std::string back(big.size(), '\0');
        co_await (asio::async_write(client, asio::buffer(big), asio::use_awaitable) &&
                  asio::async_read(client, asio::buffer(back), asio::use_awaitable));
        BOOST_TEST((back == big));
        BOOST_TEST(r.echo.bytes_received() == 11u + big.size());

        // A client's FIN reaches the server, whose close comes back as a FIN;
        // by then the proxy has let go of the connection.
        client.shutdown(tcp::socket::shutdown_send);
        CO_TEST_EQ(read_until_failure(client), asio::error::eof);
        BOOST_TEST(r.proxy.connection_count() == 0u);
    });
}

BOOST_AUTO_TEST_CASE(pause_holds_bytes_and_resume_delivers_them) {
    run([](asio::any_io_executor ex) -> asio::awaitable<void> {
        rig r(ex);
        auto client = co_await connect_to(r.proxy.endpoint());
        CO_TEST_EQ(round_trip(client, "before"), "before");

        r.proxy.pause();
        BOOST_TEST(r.proxy.paused());
        co_await send(client, "ping");
        auto const during = co_await receive_within(client, absence_window);
        BOOST_TEST(!during.has_value(), "an echo came back while paused: " << during.value_or(""));
        BOOST_TEST(r.echo.bytes_received() == 6u);  // held by the proxy, not just the reply
        BOOST_TEST(r.proxy.connection_count() == 1u);  // TCP stays up

        r.proxy.resume();
        BOOST_TEST(!r.proxy.paused());
        CO_TEST_EQ(receive(client, 4), "ping");
        BOOST_TEST(r.echo.bytes_received() == 10u);
        CO_TEST_EQ(round_trip(client, "after"), "after");
    });
}

BOOST_AUTO_TEST_CASE(pause_holds_both_directions_mid_exchange) {
    run([](asio::any_io_executor ex) -> asio::awaitable<void> {
        rig r(ex);
        auto client = co_await connect_to(r.proxy.endpoint());
        CO_TEST_EQ(round_trip(client, "x"), "x");
        // Several chunks queued in both directions while paused arrive intact
        // and in order after resume.
        r.proxy.pause();
        std::string expected;
        for (int i = 0; i < 5; ++i) {
            std::string const part = "chunk-" + std::to_string(i) + ";";
            co_await send(client, part);
            expected += part;
        }
        auto const during = co_await receive_within(client, absence_window);
        BOOST_TEST(!during.has_value(), "bytes came back while paused: " << during.value_or(""));
        r.proxy.resume();
        CO_TEST_EQ(receive(client, expected.size()), expected);
    });
}

BOOST_AUTO_TEST_CASE(paused_proxy_accepts_but_does_not_connect_upstream) {
    run([](asio::any_io_executor ex) -> asio::awaitable<void> {
        rig r(ex);
        r.proxy.pause();
        auto client = co_await connect_to(r.proxy.endpoint());
        co_await send(client, "early");
        auto const during = co_await receive_within(client, absence_window);
        BOOST_TEST(!during.has_value(), "an echo came back while paused: " << during.value_or(""));
        BOOST_TEST(r.proxy.connections_accepted() == 1u);
        BOOST_TEST(r.proxy.connection_count() == 1u);
        BOOST_TEST(r.echo.accepted() == 0u);

        r.proxy.resume();
        CO_TEST_EQ(receive(client, 5), "early");
        BOOST_TEST(r.echo.accepted() == 1u);
    });
}

BOOST_AUTO_TEST_CASE(delay_adds_at_least_the_delay_each_way) {
    run([](asio::any_io_executor ex) -> asio::awaitable<void> {
        rig r(ex);
        auto client = co_await connect_to(r.proxy.endpoint());
        CO_TEST_EQ(round_trip(client, "warm"), "warm");

        auto const d = 120ms;
        r.proxy.set_delay(d);
        BOOST_TEST(r.proxy.delay() == d);
        auto const t0 = std::chrono::steady_clock::now();
        CO_TEST_EQ(round_trip(client, "slow"), "slow");
        auto const elapsed = std::chrono::steady_clock::now() - t0;
        BOOST_TEST(elapsed >= 2 * d, "round trip took "
                                         << std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count()
                                         << "ms, expected >= " << (2 * d).count() << "ms");

        // A change applies to a chunk already waiting: an hour-long delay
        // holds it, dropping the delay to zero releases it at once.
        r.proxy.set_delay(std::chrono::hours(1));
        co_await send(client, "held");
        auto const during = co_await receive_within(client, absence_window);
        BOOST_TEST(!during.has_value(), "a chunk skipped its delay: " << during.value_or(""));
        r.proxy.set_delay(0ms);
        CO_TEST_EQ(receive(client, 4), "held");
    });
}

BOOST_AUTO_TEST_CASE(reset_all_resets_both_sides) {
    run([](asio::any_io_executor ex) -> asio::awaitable<void> {
        rig r(ex);
        auto client = co_await connect_to(r.proxy.endpoint());
        CO_TEST_EQ(round_trip(client, "hi"), "hi");

        r.proxy.reset_all();
        auto const ec = co_await read_until_failure(client);
        BOOST_TEST(is_reset_or_eof(ec), "client read ended with " << ec.message());
        BOOST_TEST(r.proxy.connection_count() == 0u);

        // Connections made after the reset are unaffected, and the exchange on
        // one proves the echo server has seen its side's reset by now.
        auto again = co_await connect_to(r.proxy.endpoint());
        CO_TEST_EQ(round_trip(again, "again"), "again");
        BOOST_TEST(r.echo.resets() == 1u);
        BOOST_TEST(r.proxy.connection_count() == 1u);
    });
}

BOOST_AUTO_TEST_CASE(reset_all_aborts_connections_held_by_a_pause) {
    run([](asio::any_io_executor ex) -> asio::awaitable<void> {
        rig r(ex);
        auto established = co_await connect_to(r.proxy.endpoint());
        CO_TEST_EQ(round_trip(established, "a"), "a");
        r.proxy.pause();
        auto waiting = co_await connect_to(r.proxy.endpoint());  // not connected upstream
        co_await send(established, "b");                         // held mid-pump
        auto const during = co_await receive_within(established, absence_window);
        BOOST_TEST(!during.has_value());

        r.proxy.reset_all();
        auto const ec1 = co_await read_until_failure(established);
        auto const ec2 = co_await read_until_failure(waiting);
        BOOST_TEST(ec1 == asio::error::connection_reset, ec1.message());
        BOOST_TEST(ec2 == asio::error::connection_reset, ec2.message());
        BOOST_TEST(r.proxy.connection_count() == 0u);
        r.proxy.resume();
    });
}

BOOST_AUTO_TEST_CASE(drop_new_closes_new_connections_only) {
    run([](asio::any_io_executor ex) -> asio::awaitable<void> {
        rig r(ex);
        auto existing = co_await connect_to(r.proxy.endpoint());
        CO_TEST_EQ(round_trip(existing, "one"), "one");

        r.proxy.drop_new(true);
        auto refused = co_await connect_to(r.proxy.endpoint());  // TCP accepts...
        auto const ec = co_await read_until_failure(refused);     // ...then the proxy closes it
        BOOST_TEST(is_reset_or_eof(ec), "dropped connection read ended with " << ec.message());
        BOOST_TEST(r.proxy.connections_accepted() == 2u);
        CO_TEST_EQ(round_trip(existing, "two"), "two");  // existing ones keep working
        BOOST_TEST(r.echo.accepted() == 1u);
        BOOST_TEST(r.proxy.connection_count() == 1u);

        r.proxy.drop_new(false);
        auto later = co_await connect_to(r.proxy.endpoint());
        CO_TEST_EQ(round_trip(later, "three"), "three");
        BOOST_TEST(r.echo.accepted() == 2u);
    });
}

BOOST_AUTO_TEST_CASE(blackhole_discards_bytes_on_existing_and_new_connections) {
    run([](asio::any_io_executor ex) -> asio::awaitable<void> {
        rig r(ex);
        auto existing = co_await connect_to(r.proxy.endpoint());
        CO_TEST_EQ(round_trip(existing, "seen"), "seen");
        auto const forwarded_before = r.proxy.bytes_forwarded();

        r.proxy.blackhole(true);
        co_await send(existing, "lost");
        auto const during = co_await receive_within(existing, absence_window);
        BOOST_TEST(!during.has_value(), "bytes crossed a blackhole: " << during.value_or(""));

        auto fresh = co_await connect_to(r.proxy.endpoint());  // accepted, then silence
        co_await send(fresh, "void");
        auto const fresh_during = co_await receive_within(fresh, absence_window);
        BOOST_TEST(!fresh_during.has_value(), "bytes crossed a blackhole: " << fresh_during.value_or(""));
        BOOST_TEST(r.echo.bytes_received() == 4u);
        BOOST_TEST(r.proxy.connection_count() == 2u);

        // Discarded, not held: the next reply carries only the new bytes.
        r.proxy.blackhole(false);
        CO_TEST_EQ(round_trip(existing, "kept"), "kept");
        CO_TEST_EQ(round_trip(fresh, "also"), "also");
        BOOST_TEST(r.echo.bytes_received() == 12u);
        BOOST_TEST(r.proxy.bytes_forwarded() >= forwarded_before + 8u);
        BOOST_TEST(r.proxy.bytes_forwarded() <= forwarded_before + 16u);
    });
}

BOOST_AUTO_TEST_CASE(unreachable_target_resets_the_client) {
    run([](asio::any_io_executor ex) -> asio::awaitable<void> {
        tcp::endpoint dead;
        {
            tcp::acceptor probe(ex, tcp::endpoint(asio::ip::address_v4::loopback(), 0));
            dead = probe.local_endpoint();
        }  // closed: nothing listens there now
        fault_proxy proxy(ex, dead);
        proxy.start();
        auto client = co_await connect_to(proxy.endpoint());
        auto const ec = co_await read_until_failure(client);
        BOOST_TEST(ec == asio::error::connection_reset, ec.message());
        BOOST_TEST(proxy.connection_count() == 0u);
    });
}

BOOST_AUTO_TEST_CASE(stop_while_pumping_is_safe) {
    run([](asio::any_io_executor ex) -> asio::awaitable<void> {
        rig r(ex);
        auto client = co_await connect_to(r.proxy.endpoint());
        std::string const chunk(64 << 10, 'z');
        std::size_t read_total = 0;

        // Writes until the connection fails (kernel buffers on loopback can
        // swallow megabytes, so a fixed amount might complete before stop()).
        auto writer = [&]() -> asio::awaitable<error_code> {
            for (;;) {
                auto [ec, n] = co_await asio::async_write(client, asio::buffer(chunk), use_tuple);
                if (ec) co_return ec;
            }
        };
        auto reader = [&]() -> asio::awaitable<error_code> {
            std::array<char, 16 * 1024> buf;
            bool stopped = false;
            for (;;) {
                auto [ec, n] = co_await client.async_read_some(asio::buffer(buf), use_tuple);
                if (ec) co_return ec;
                read_total += n;
                if (!stopped && read_total >= (256u << 10)) {
                    stopped = true;
                    r.proxy.stop();  // mid-stream, with pumps reading and writing
                }
            }
        };
        auto [write_ec, read_ec] = co_await (writer() && reader());
        BOOST_TEST(is_reset_or_eof(read_ec), "read ended with " << read_ec.message());
        BOOST_TEST(read_total >= (256u << 10));
        BOOST_TEST((write_ec == asio::error::broken_pipe || write_ec == asio::error::connection_reset),
                   "write ended with " << write_ec.message());
        BOOST_TEST(r.proxy.connection_count() == 0u);

        // Stopped for good: new connections are refused by the kernel.
        tcp::socket late(ex);
        auto [cec] = co_await late.async_connect(r.proxy.endpoint(), use_tuple);
        BOOST_TEST(cec == asio::error::connection_refused, cec.message());
        r.proxy.start();  // no-op after stop
        r.proxy.stop();   // idempotent
    });
}

BOOST_AUTO_TEST_CASE(destroying_a_paused_proxy_closes_its_connections) {
    run([](asio::any_io_executor ex) -> asio::awaitable<void> {
        echo_server echo(ex);
        tcp::socket established(ex), waiting(ex);
        {
            fault_proxy proxy(ex, echo.endpoint());
            proxy.start();
            established = co_await connect_to(proxy.endpoint());
            CO_TEST_EQ(round_trip(established, "a"), "a");
            proxy.pause();
            proxy.set_delay(std::chrono::hours(1));
            waiting = co_await connect_to(proxy.endpoint());
            co_await send(established, "held");
            auto const during = co_await receive_within(established, absence_window);
            BOOST_TEST(!during.has_value());
        }  // ~fault_proxy while bytes are held and a connection waits for resume
        CO_TEST_RESET_OR_EOF(read_until_failure(established));
        CO_TEST_RESET_OR_EOF(read_until_failure(waiting));
        BOOST_TEST(echo.accepted() == 1u);
    });
}

// The integration tests drive sockets synchronously from the test thread, so
// the proxy's io_context runs on a thread of its own and the controls are
// called from outside it.
BOOST_AUTO_TEST_CASE(controls_work_from_another_thread) {
    asio::io_context ioc;
    auto guard = asio::make_work_guard(ioc);
    std::thread io([&] { ioc.run(); });
    {
        echo_server echo(ioc.get_executor());
        fault_proxy proxy(ioc.get_executor(), echo.endpoint());
        proxy.start();

        asio::io_context sync_ctx;  // blocking client calls only, never run
        tcp::socket client(sync_ctx);
        client.connect(proxy.endpoint());
        auto exchange = [&](std::string const& msg) {
            asio::write(client, asio::buffer(msg));
            std::string back(msg.size(), '\0');
            asio::read(client, asio::buffer(back));
            return back;
        };
        BOOST_TEST(exchange("one") == "one");

        proxy.pause();
        asio::write(client, asio::buffer(std::string("two")));
        proxy.set_delay(5ms);
        proxy.resume();
        std::string back(3, '\0');
        asio::read(client, asio::buffer(back));
        BOOST_TEST(back == "two");
        proxy.set_delay(0ms);
        BOOST_TEST(exchange("three") == "three");
        BOOST_TEST(proxy.connection_count() == 1u);

        proxy.reset_all();
        error_code ec;
        std::array<char, 16> buf;
        client.read_some(asio::buffer(buf), ec);
        BOOST_TEST(is_reset_or_eof(ec), ec.message());

        tcp::socket second(sync_ctx);
        second.connect(proxy.endpoint());
        asio::write(second, asio::buffer(std::string("four")));
        std::string four(4, '\0');
        asio::read(second, asio::buffer(four));
        BOOST_TEST(four == "four");
    }  // both destroyed from this thread while the io thread runs
    guard.reset();
    io.join();  // returns only once every coroutine has unwound
    BOOST_TEST(ioc.stopped());
}

BOOST_AUTO_TEST_SUITE_END()
