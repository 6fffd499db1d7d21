// Integration tests of the clients' completion tokens (issue #19): operations
// of tenure::consul::client and tenure::etcd::client completed through a plain
// callback, through use_future while another thread runs the io_context (the
// library has no threads; a test may), through as_tuple (and with_diagnostics)
// for an error code, and a parked Consul blocking query cancelled through a
// cancellation slot.
//
// Consul: the real `tenure agent` process (agent_process), and for the
// cancellation the embedded agent over loopback HTTP on the test's io_context,
// whose state says when the query is parked. etcd: one real member
// (etcd_member). The tests await events (completions, the agent's state), never
// a fixed sleep.

// Designated initializers that leave members to their defaults are the point.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
// g++ 12 false positive on Asio's coroutine frame allocator (fixed in g++ 13).
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include "agent_process.hpp"
#include "etcd_member.hpp"
#include "etcd_process.hpp"
#include "run_on.hpp"

#include "agent/agent_access.hpp"

#include <tenure/agent.hpp>
#include <tenure/consul/client.hpp>
#include <tenure/diagnostics.hpp>
#include <tenure/error.hpp>
#include <tenure/etcd/client.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace asio = boost::asio;
namespace consul = tenure::consul;
namespace etcd = tenure::etcd;
using boost::system::error_code;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;
using tenure::itest::run_on;

namespace {

// Lets the io_context run whatever is ready (the agent's side of a request),
// then resumes: a loop of these awaits a state change without a timer.
asio::awaitable<void> yield() {
    co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
}

// The io_context runs on a thread of its own while the test's thread starts
// operations with use_future and waits on their futures. Whatever the client
// owns is destroyed on the io_context's thread, before that thread ends.
class runner_thread {
public:
    explicit runner_thread(asio::io_context& io) : io_(io), work_(io.get_executor()), thread_([&io] { io.run(); }) {}
    ~runner_thread() {
        work_.reset();
        io_.stop();
        thread_.join();
    }
    runner_thread(runner_thread const&) = delete;
    runner_thread& operator=(runner_thread const&) = delete;

    // Runs `f` on the io_context's thread and waits for it.
    template <class F>
    void run_there(F f) {
        std::promise<void> done;
        asio::post(io_, [&] {
            f();
            done.set_value();
        });
        done.get_future().wait();
    }

private:
    asio::io_context& io_;
    asio::executor_work_guard<asio::io_context::executor_type> work_;
    std::thread thread_;
};

// The value of a future, bounded so that a bug fails the test instead of hanging it.
template <class T>
T await_future(std::future<T>& f) {
    BOOST_REQUIRE_MESSAGE(f.wait_for(30s) == std::future_status::ready, "the operation did not complete in time");
    return f.get();
}

std::string closed_loopback_address() {
    return "127.0.0.1:" + std::to_string(tenure::itest::free_loopback_port());
}

// The real `tenure agent` and a client of it on a single-threaded io_context.
struct consul_agent {
    asio::io_context io{1};
    tenure::itest::agent_process agent;
    std::unique_ptr<consul::client> client = std::make_unique<consul::client>(
        io.get_executor(), consul::client_config{.address = "127.0.0.1:" + std::to_string(agent.port())});
};

}  // namespace

BOOST_AUTO_TEST_SUITE(client_tokens_consul)

BOOST_FIXTURE_TEST_CASE(plain_callbacks, consul_agent) {
    std::optional<std::string> value = "v";
    bool put = false, read = false, deleted = false;
    std::optional<error_code> acquire_ec;
    int pending = 2;  // the chain below and the refused acquire
    auto finished = [&] {
        if (--pending == 0) io.stop();
    };
    // A chain of callbacks: no coroutine on the caller's side.
    client->kv_put("tokens/k", value, {}, [&](error_code ec, bool ok) {
        BOOST_TEST(!ec, ec.message());
        put = ok;
        client->kv_get("tokens/k", {}, [&](error_code ec2, consul::read_result<std::optional<consul::kv_pair>> r) {
            BOOST_TEST(!ec2, ec2.message());
            read = r.value && r.value->value == "v" && r.meta.index > 0;
            // void(error_code)
            client->kv_delete_tree("tokens/", [&](error_code ec3) {
                BOOST_TEST(!ec3, ec3.message());
                deleted = true;
                finished();
            });
        });
    });
    // An error status of the server is the error_code (500: no such session).
    client->kv_acquire("tokens/other", "7a3f0c4e-5b1d-4c2a-9e8f-0123456789ab", value, 0,
                       [&](error_code ec, bool acquired) {
                           acquire_ec = ec;
                           BOOST_TEST(!acquired);
                           finished();
                       });
    io.run_for(30s);
    BOOST_TEST(put);
    BOOST_TEST(read);
    BOOST_TEST(deleted);
    BOOST_REQUIRE(acquire_ec);
    BOOST_TEST((*acquire_ec == tenure::error::http_status), acquire_ec->message());
}

BOOST_FIXTURE_TEST_CASE(use_future_from_another_thread, consul_agent) {
    runner_thread runner(io);
    std::optional<std::string> value = "from a future";
    auto put = client->kv_put("tokens/f", value, {}, asio::use_future);
    BOOST_TEST(await_future(put));
    auto got = client->kv_get("tokens/f", {}, asio::use_future);
    auto const r = await_future(got);
    BOOST_REQUIRE(r.value);
    BOOST_TEST(r.value->value.value_or("") == "from a future");

    consul::session_request req;
    req.name = "tokens";
    req.ttl = 10s;
    auto created = client->session_create(req, asio::use_future);
    std::string const id = await_future(created);
    BOOST_TEST(!id.empty());
    auto listed = client->session_list({}, asio::use_future);
    auto const sessions = await_future(listed);
    BOOST_TEST(sessions.value.size() == 1u);
    auto destroyed = client->session_destroy(id, asio::use_future);  // void(error_code): future<void>
    await_future(destroyed);

    // An error: the future throws system_error with the code.
    auto refused = client->kv_acquire("tokens/g", id, value, 0, asio::use_future);
    BOOST_REQUIRE(refused.wait_for(30s) == std::future_status::ready);
    BOOST_CHECK_EXCEPTION(refused.get(), boost::system::system_error,
                          [](boost::system::system_error const& e) { return e.code() == tenure::error::http_status; });

    runner.run_there([&] { client.reset(); });
}

BOOST_FIXTURE_TEST_CASE(as_tuple_for_an_error_status, consul_agent) {
    run_on(io, [&]() -> asio::awaitable<void> {
        std::optional<std::string> none;
        std::string const unknown = "7a3f0c4e-5b1d-4c2a-9e8f-0123456789ab";
        // as_tuple(deferred), as the reference suggests: the code, no exception.
        auto [ec, acquired] = co_await client->kv_acquire("tokens/t", unknown, none, 0, asio::as_tuple(asio::deferred));
        BOOST_TEST((ec == tenure::error::http_status), ec.message());
        BOOST_TEST(!acquired);
        // with_diagnostics keeps the server's words on the error-code path.
        tenure::diagnostics diag;
        auto [ec2, acquired2] = co_await client->kv_acquire(
            "tokens/t", unknown, none, 0, tenure::with_diagnostics(diag, asio::as_tuple(asio::deferred)));
        BOOST_TEST((ec2 == tenure::error::http_status), ec2.message());
        BOOST_TEST(!acquired2);
        BOOST_TEST(diag.http_status() == 500u);
        BOOST_TEST(diag.server_message().find("invalid session") != std::string::npos, diag.server_message());
        // The default token, use_awaitable, rethrows the api_error itself.
        std::optional<consul::api_error> thrown;
        try {
            co_await client->kv_acquire("tokens/t", unknown, none);
        } catch (consul::api_error const& e) {
            thrown = e;
        }
        BOOST_REQUIRE(thrown);
        BOOST_TEST((thrown->code() == tenure::error::http_status), thrown->what());
        BOOST_TEST(thrown->http_status() == 500u);
    });
}

BOOST_AUTO_TEST_CASE(as_tuple_on_a_closed_port) {
    asio::io_context io{1};
    consul::client c(io.get_executor(), {.address = closed_loopback_address()});
    run_on(io, [&]() -> asio::awaitable<void> {
        auto [ec, r] = co_await c.kv_get("k", {}, asio::as_tuple(asio::use_awaitable));
        BOOST_TEST((ec == asio::error::connection_refused), ec.message());
        BOOST_TEST(!r.value);
    });
}

// A blocking query parked on the agent, cancelled through its cancellation
// slot: it completes at once with operation_aborted, its connection is
// closed, and the client keeps working.
BOOST_AUTO_TEST_CASE(cancel_a_parked_blocking_query) {
    asio::io_context io{1};
    tenure::agent agent(io.get_executor(), tenure::agent_options{.http_addr = "127.0.0.1:0", .log_stream = nullptr});
    agent.start();
    auto const& state = tenure::detail::agent_access::state(agent);
    consul::client c(io.get_executor(), {.address = agent.http_address()});
    run_on(io, [&]() -> asio::awaitable<void> {
        std::optional<std::string> before = "before";
        bool const written = co_await c.kv_put("tokens/parked", before);
        BOOST_TEST(written);
        auto const first = co_await c.kv_get("tokens/parked");

        asio::cancellation_signal signal;
        std::optional<error_code> outcome;
        consul::read_options const blocking{.index = first.meta.index, .wait = 60s};
        c.kv_get("tokens/parked", blocking,
                 asio::bind_cancellation_slot(signal.slot(), [&](error_code ec, auto) { outcome = ec; }));
        // Parked: the agent holds it.
        while (state.watcher_count() == 0 && !outcome) co_await yield();
        BOOST_REQUIRE(!outcome);
        BOOST_TEST(c.open_connections() == 1u);

        auto const cancelled_at = steady::now();
        signal.emit(asio::cancellation_type::terminal);
        while (!outcome) co_await yield();
        double const took_ms = std::chrono::duration<double, std::milli>(steady::now() - cancelled_at).count();
        BOOST_TEST((*outcome == asio::error::operation_aborted), outcome->message());
        BOOST_TEST(took_ms < 1000.0, took_ms << " ms");
        BOOST_TEST(c.open_connections() == 0u);  // the request's connection was closed
        // The agent sees the connection go and drops the query.
        while (state.watcher_count() != 0 || agent.connection_count() != 0) co_await yield();

        // The client still works (a new connection).
        std::optional<std::string> after = "after";
        bool const rewritten = co_await c.kv_put("tokens/parked", after);
        BOOST_TEST(rewritten);
        auto const now = co_await c.kv_get("tokens/parked");
        BOOST_REQUIRE(now.value);
        BOOST_TEST(now.value->value.value_or("") == "after");
        c.close();
    });
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(client_tokens_etcd)

BOOST_FIXTURE_TEST_CASE(plain_callbacks, tenure::itest::etcd_member) {
    bool granted = false, put = false, read = false, revoked = false;
    std::optional<error_code> revoke_again;
    client->lease_grant(30, 0, [&](error_code ec, etcd::lease_grant_response g) {
        BOOST_TEST(!ec, ec.message());
        granted = g.id != 0;
        etcd::put_options po;
        po.lease = g.id;
        client->put("tokens/k", "v", po, [&, id = g.id](error_code ec2, etcd::put_response) {
            BOOST_TEST(!ec2, ec2.message());
            put = true;
            client->range("tokens/k", {}, {}, [&, id](error_code ec3, etcd::range_response r) {
                BOOST_TEST(!ec3, ec3.message());
                read = r.kvs.size() == 1u && r.kvs[0].value == "v" && r.kvs[0].lease == id;
                // void(error_code)
                client->lease_revoke(id, [&, id](error_code ec4) {
                    BOOST_TEST(!ec4, ec4.message());
                    revoked = true;
                    // An error of etcd is the error_code: the lease is gone now.
                    client->lease_revoke(id, [&](error_code ec5) {
                        revoke_again = ec5;
                        ioc.stop();
                    });
                });
            });
        });
    });
    ioc.run_for(30s);
    BOOST_TEST(granted);
    BOOST_TEST(put);
    BOOST_TEST(read);
    BOOST_TEST(revoked);
    BOOST_REQUIRE(revoke_again);
    BOOST_TEST((*revoke_again == tenure::error::lease_not_found), revoke_again->message());
}

BOOST_FIXTURE_TEST_CASE(use_future_from_another_thread, tenure::itest::etcd_member) {
    runner_thread runner(ioc);
    auto put = client->put("tokens/f", "from a future", {}, asio::use_future);
    auto const written = await_future(put);
    BOOST_TEST(written.header.revision > 0);
    auto got = client->range("tokens/f", {}, {}, asio::use_future);
    auto const r = await_future(got);
    BOOST_REQUIRE(r.kvs.size() == 1u);
    BOOST_TEST(r.kvs[0].value == "from a future");
    auto status = client->status(asio::use_future);
    BOOST_TEST(!await_future(status).version.empty());

    // A watch opened and read through futures.
    auto opened = client->watch("tokens/w", {}, {}, asio::use_future);
    auto w = await_future(opened);
    auto next = w.next(asio::use_future);
    auto second = client->put("tokens/w", "seen", {}, asio::use_future);
    await_future(second);
    auto const events = await_future(next);
    BOOST_REQUIRE(events.events.size() == 1u);
    BOOST_TEST(events.events[0].kv.value == "seen");

    runner.run_there([&] {
        auto done = std::move(w);
        done.close();
        client.reset();
    });
}

BOOST_FIXTURE_TEST_CASE(as_tuple_on_a_stopped_server, tenure::itest::etcd_member) {
    run_on(ioc, [&]() -> asio::awaitable<void> {
        server.kill();  // before the client opened any connection
        auto [ec, r] = co_await client->range("tokens/k", {}, {}, asio::as_tuple(asio::use_awaitable));
        BOOST_TEST((ec == asio::error::connection_refused), ec.message());
        BOOST_TEST(r.kvs.empty());
    });
}

// A watch's next() parked on the member, cancelled through its slot: the
// stream is closed, the client keeps working.
BOOST_FIXTURE_TEST_CASE(cancel_a_parked_watch, tenure::itest::etcd_member) {
    run_on(ioc, [&]() -> asio::awaitable<void> {
        auto w = co_await client->watch("tokens/quiet");
        asio::cancellation_signal signal;
        std::optional<error_code> outcome;
        w.next(asio::bind_cancellation_slot(signal.slot(), [&](error_code ec, etcd::watch_response) { outcome = ec; }));
        co_await yield();
        BOOST_REQUIRE(!outcome);
        signal.emit(asio::cancellation_type::terminal);
        while (!outcome) co_await yield();
        BOOST_TEST((*outcome == asio::error::operation_aborted), outcome->message());
        BOOST_TEST(!w.is_open());
        auto [again, none] = co_await w.next(asio::as_tuple(asio::use_awaitable));
        BOOST_TEST((again == asio::error::not_connected), again.message());
        BOOST_TEST(none.events.empty());

        co_await client->put("tokens/quiet", "still works");
        auto const r = co_await client->range("tokens/quiet");
        BOOST_TEST(r.kvs.size() == 1u);

        // A default-constructed stream has no executor: next() completes on
        // the handler's (here the coroutine's), with not_connected.
        etcd::watch_stream empty;
        auto [never, nothing] = co_await empty.next(asio::as_tuple(asio::use_awaitable));
        BOOST_TEST((never == asio::error::not_connected), never.message());
        BOOST_TEST(nothing.events.empty());
    });
}

BOOST_AUTO_TEST_SUITE_END()
