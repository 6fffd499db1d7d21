// The async contract of the primitives, as their @async_cancellation and
// @async_errors paragraphs state it, against a tenure::agent on the test's
// io_context (in-process: no sockets, the agent's state is at hand).
//
// - cancellation_table: every operation that waits is parked (the agent
//   holds its blocking query, the operation waits on an event, or - for
//   reads, over HTTP - the agent process is stopped), then
//   cancelled with each of terminal, partial and total: it completes with
//   operation_aborted, and what it waited on is as it was (the holder still
//   holds, no key or contender entry of ours is left, the scope and session
//   are unaffected).
// - background_work: after close(), nothing of the session is left on the
//   io_context.
// - server_diagnostics: a refused request's HTTP status and message reach
//   the caller on the exception path and on the error-code path.
// - empty_objects: every operation of an empty scope, session, and of an
//   election or semaphore whose session was moved from, completes through
//   its handler with the documented outcome; none throws from the
//   initiating call.

// g++ 12 false positive on Asio's coroutine frame allocator (fixed in g++ 13).
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include "agent_process.hpp"
#include "run_on.hpp"

#include <tenure/agent.hpp>
#include <tenure/consul/client.hpp>
#include <tenure/diagnostics.hpp>
#include <tenure/election.hpp>
#include <tenure/error.hpp>
#include <tenure/fenced_write.hpp>
#include <tenure/semaphore.hpp>
#include <tenure/session.hpp>

#include "agent/agent_access.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/test/data/monomorphic.hpp>
#include <boost/test/data/test_case.hpp>
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <csignal>

namespace asio = boost::asio;
namespace consul = tenure::consul;
using namespace std::chrono_literals;
using boost::system::error_code;
using steady = std::chrono::steady_clock;

namespace boost::asio {
// For BOOST_DATA_TEST_CASE's messages.
inline std::ostream& operator<<(std::ostream& os, cancellation_type t) {
    switch (t) {
    case cancellation_type::terminal: return os << "terminal";
    case cancellation_type::partial: return os << "partial";
    case cancellation_type::total: return os << "total";
    default: return os << static_cast<unsigned>(t);
    }
}
}  // namespace boost::asio

// A named namespace, not an anonymous one: the coroutine frames of the
// BOOST_DATA_TEST_CASEs below use these types (g++ -Wsubobject-linkage).
namespace contract_test {

struct inprocess_agent {
    asio::io_context ioc{1};
    std::unique_ptr<tenure::agent> agent;
    std::unique_ptr<consul::client> client;

    inprocess_agent() {
        tenure::agent_options o;
        o.http_addr = "127.0.0.1:0";
        o.session_ttl_min = 100ms;
        o.log_stream = nullptr;
        agent = std::make_unique<tenure::agent>(ioc.get_executor(), std::move(o));
        agent->start();
        client = std::make_unique<consul::client>(ioc.get_executor(), agent->in_process());
    }
    ~inprocess_agent() {
        client.reset();
        agent.reset();
    }
    std::size_t watchers() { return tenure::detail::agent_access::state(*agent).watcher_count(); }

    tenure::session_options opts(std::string name) const {
        tenure::session_options o;
        o.name = std::move(name);
        o.ttl = 2s;
        o.lock_delay = 0ms;
        o.behavior = consul::session_behavior::delete_keys;
        return o;
    }
};

// Lets the io_context run until `pred` holds (each step one post: the agent
// and the clients make progress in between); false after `limit`.
asio::awaitable<bool> until(std::function<bool()> pred, steady::duration limit = 5s) {
    auto const deadline = steady::now() + limit;
    while (!pred()) {
        if (steady::now() > deadline) co_return false;
        co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
    }
    co_return true;
}

// An operation started with a cancellation slot; its completion recorded.
struct started {
    asio::cancellation_signal signal;
    bool done = false;
    error_code ec;

    // The handler for an operation completing with (ec, T).
    template <class T>
    auto handler() {
        return asio::bind_cancellation_slot(signal.slot(), [this](error_code e, T) {
            ec = e;
            done = true;
        });
    }
    auto handler0() {
        return asio::bind_cancellation_slot(signal.slot(), [this](error_code e) {
            ec = e;
            done = true;
        });
    }
    // For co_spawn: the coroutine's exception's code (none when it returned).
    auto spawned() {
        return asio::bind_cancellation_slot(signal.slot(), [this](std::exception_ptr e) {
            try {
                if (e) std::rethrow_exception(e);
            } catch (boost::system::system_error const& se) {
                ec = se.code();
            }
            done = true;
        });
    }
};

// Cancels `op` once parked with `type`; checks it completes with
// operation_aborted soon after, and that it had not completed before.
asio::awaitable<void> cancel_parked(started& op, asio::cancellation_type type, std::string const& what) {
    BOOST_TEST_REQUIRE(!op.done, what << " completed before it was cancelled: " << op.ec.message());
    op.signal.emit(type);
    std::function<bool()> is_done = [&] { return op.done; };
    bool const finished = co_await until(is_done);
    BOOST_TEST_REQUIRE(finished, what << " ignored a " << type << " cancellation");
    BOOST_TEST((op.ec == asio::error::operation_aborted), what << ": " << op.ec.message());
}

std::vector<asio::cancellation_type> const all_types{asio::cancellation_type::terminal,
                                                     asio::cancellation_type::partial,
                                                     asio::cancellation_type::total};

}  // namespace contract_test

using namespace contract_test;

BOOST_FIXTURE_TEST_SUITE(cancellation_table, inprocess_agent)

// How the acquire is started: with a handler (its slot cancels it), or
// awaited with use_awaitable in a coroutine of its own on the session's
// executor, where it runs in that coroutine (no co_spawn of its own) and the
// coroutine's cancellation must reach it with each type the coroutine lets in.
enum class started_by { handler, coroutine };
std::ostream& operator<<(std::ostream& os, started_by s) {
    return os << (s == started_by::handler ? "handler" : "coroutine");
}

BOOST_DATA_TEST_CASE(a_parked_acquire_stops_and_takes_nothing,
                     boost::unit_test::data::make(all_types) *
                         boost::unit_test::data::make({started_by::handler, started_by::coroutine}),
                     type, how) {
    tenure::itest::run_scenario(ioc, [&]() -> asio::awaitable<void> {
        auto holder = co_await tenure::session::create(*client, opts("holder"));
        auto waiter = co_await tenure::session::create(*client, opts("waiter"));
        tenure::election eh(holder, "contract/acquire", "h"), ew(waiter, "contract/acquire", "w");
        auto lead = co_await eh.acquire();
        std::size_t const before = watchers();
        started op;
        if (how == started_by::handler) {
            ew.acquire(op.handler<tenure::leadership_scope>());
        } else {
            asio::co_spawn(
                co_await asio::this_coro::executor,
                [&]() -> asio::awaitable<void> {
                    // Lets terminal, partial and total in (the default is terminal only).
                    co_await asio::this_coro::reset_cancellation_state(asio::enable_total_cancellation());
                    co_await ew.acquire();
                },
                op.spawned());
        }
        std::function<bool()> parked = [&] { return watchers() > before; };
        BOOST_TEST_REQUIRE(co_await until(parked));
        co_await cancel_parked(op, type, "election.acquire");
        BOOST_TEST(lead.held());
        auto const now = co_await ew.leader();
        BOOST_TEST_REQUIRE(now.has_value());
        BOOST_TEST(now->session == holder.id());
        // The waiter can campaign again, and gets the key when it is freed.
        co_await lead.release();
        auto again = co_await ew.acquire();
        BOOST_TEST(again.held());
        co_await again.release();
        co_await holder.close();
        co_await waiter.close();
    });
}

BOOST_DATA_TEST_CASE(a_parked_semaphore_acquire_withdraws_its_contender_key, boost::unit_test::data::make(all_types),
                     type) {
    tenure::itest::run_scenario(ioc, [&]() -> asio::awaitable<void> {
        auto holder = co_await tenure::session::create(*client, opts("holder"));
        auto waiter = co_await tenure::session::create(*client, opts("waiter"));
        tenure::semaphore sh(holder, "contract/sem", 1, "h"), sw(waiter, "contract/sem", 1, "w");
        auto permit = co_await sh.acquire();
        std::size_t const before = watchers();
        started op;
        sw.acquire(op.handler<tenure::leadership_scope>());
        std::function<bool()> parked = [&] { return watchers() > before; };
        BOOST_TEST_REQUIRE(co_await until(parked));
        co_await cancel_parked(op, type, "semaphore.acquire");
        // The acquire completes after the withdrawal: only the holder is there.
        auto st = co_await sh.state();
        BOOST_TEST(st.holders == std::vector<std::string>{holder.id()});
        auto keys = co_await client->kv_keys("contract/sem/");
        bool waiter_left = false;
        for (auto const& k : keys.value) waiter_left |= k == "contract/sem/" + waiter.id();
        BOOST_TEST(!waiter_left, "the cancelled contender's key is still there");
        BOOST_TEST(permit.held());
        co_await permit.release();
        co_await holder.close();
        co_await waiter.close();
    });
}

BOOST_DATA_TEST_CASE(waits_for_loss_stop_and_change_nothing, boost::unit_test::data::make(all_types), type) {
    tenure::itest::run_scenario(ioc, [&]() -> asio::awaitable<void> {
        auto s = co_await tenure::session::create(*client, opts("s"));
        tenure::election e(s, "contract/wait", "v");
        auto lead = co_await e.acquire();

        started scope_wait;
        lead.wait_lost(scope_wait.handler0());
        started session_wait;
        s.wait_lost(session_wait.handler0());
        std::function<bool()> one_step = [] { return true; };
        co_await until(one_step);
        co_await cancel_parked(scope_wait, type, "leadership_scope.wait_lost");
        co_await cancel_parked(session_wait, type, "session.wait_lost");
        BOOST_TEST(lead.held());
        BOOST_TEST((s.state() == tenure::session_state::healthy));
        co_await lead.release();
        co_await s.close();
    });
}

BOOST_DATA_TEST_CASE(a_parked_observer_stops_and_stays_usable, boost::unit_test::data::make(all_types), type) {
    tenure::itest::run_scenario(ioc, [&]() -> asio::awaitable<void> {
        auto s = co_await tenure::session::create(*client, opts("s"));
        tenure::election e(s, "contract/observed", "v");
        tenure::leader_observer observer(*client, "contract/observed");
        auto first = co_await observer.next();  // at once: nobody
        BOOST_TEST(!first.has_value());
        std::size_t const before = watchers();
        started op;
        observer.next(op.handler<std::optional<tenure::leader_info>>());
        std::function<bool()> parked = [&] { return watchers() > before; };
        BOOST_TEST_REQUIRE(co_await until(parked));
        co_await cancel_parked(op, type, "leader_observer.next");
        auto lead = co_await e.acquire();
        auto seen = co_await observer.next();  // picks up from "nobody"
        BOOST_TEST_REQUIRE(seen.has_value());
        BOOST_TEST(seen->session == s.id());
        co_await lead.release();
        co_await s.close();
    });
}

BOOST_AUTO_TEST_SUITE_END()

// The `tenure agent` process over HTTP. Reads are parked by stopping it
// (SIGSTOP): the request is written, and no answer can come until SIGCONT.
struct http_agent {
    tenure::itest::agent_process agent{[] {
        tenure::itest::agent_options o;
        o.session_ttl_min = "100ms";
        return o;
    }()};
    asio::io_context ioc{1};
    std::unique_ptr<consul::client> client;
    http_agent() {
        consul::client_config c;
        c.address = "http://127.0.0.1:" + std::to_string(agent.port());
        c.request_timeout = 5000ms;
        client = std::make_unique<consul::client>(ioc.get_executor(), c);
    }
    ~http_agent() { ::kill(agent.pid(), SIGCONT); }
};

BOOST_FIXTURE_TEST_SUITE(cancellation_table_reads, http_agent)

BOOST_DATA_TEST_CASE(reads_parked_on_the_server_stop_and_change_nothing, boost::unit_test::data::make(all_types),
                     type) {
    tenure::itest::run_scenario(ioc, [&]() -> asio::awaitable<void> {
        tenure::session_options o;
        o.name = "reads";
        o.ttl = 10s;  // outlives the pause
        o.lock_delay = 0ms;
        auto s = co_await tenure::session::create(*client, o);
        tenure::election e(s, "contract/reads", "v");
        tenure::semaphore sem(s, "contract/reads-sem", 2);
        auto lead = co_await e.acquire();

        BOOST_TEST_REQUIRE(::kill(agent.pid(), SIGSTOP) == 0);
        started confirm, leader, state;
        lead.confirm(confirm.handler<bool>());
        e.leader(leader.handler<std::optional<tenure::leader_info>>());
        sem.state(state.handler<tenure::semaphore_state>());
        for (int i = 0; i < 50; ++i)  // the requests go out; no answer can come
            co_await asio::post(co_await asio::this_coro::executor, asio::use_awaitable);
        co_await cancel_parked(confirm, type, "leadership_scope.confirm");
        co_await cancel_parked(leader, type, "election.leader");
        co_await cancel_parked(state, type, "semaphore.state");
        BOOST_TEST_REQUIRE(::kill(agent.pid(), SIGCONT) == 0);

        BOOST_TEST(lead.held());  // a cancelled confirm is not a loss
        bool const still = co_await lead.confirm();
        BOOST_TEST(still);
        auto const who = co_await e.leader();
        BOOST_TEST_REQUIRE(who.has_value());
        BOOST_TEST(who->session == s.id());
        co_await lead.release();
        co_await s.close();
    });
}

BOOST_AUTO_TEST_SUITE_END()

// The session owns its background work (renewal loop, monitors, releases
// started by scope destructors): once close() has completed, an io_context
// with nothing else to do returns from run().
BOOST_FIXTURE_TEST_SUITE(background_work, http_agent)

BOOST_AUTO_TEST_CASE(run_returns_after_close_with_no_work_left) {
    bool closed = false;
    asio::co_spawn(
        ioc,
        [&]() -> asio::awaitable<void> {
            tenure::session_options o;
            o.name = "owner";
            o.ttl = 10s;  // a renewal loop that would keep run() busy for long
            o.lock_delay = 0ms;
            auto s = co_await tenure::session::create(*client, o);
            tenure::election kept(s, "contract/bg/kept", "v"), dropped(s, "contract/bg/dropped", "v");
            auto lead = co_await kept.acquire();  // its monitor watches the key
            {
                auto gone = co_await dropped.acquire();
            }  // released in the background by the scope's destructor
            co_await s.close();
            closed = true;
        },
        [](std::exception_ptr e) {
            if (e) std::rethrow_exception(e);
        });
    ioc.run_for(30s);
    BOOST_TEST_REQUIRE(closed);
    BOOST_TEST(ioc.stopped(), "work was left on the io_context after close()");
    // Nothing is held any more: the background release went through.
    asio::io_context check{1};
    consul::client_config c;
    c.address = "http://127.0.0.1:" + std::to_string(agent.port());
    consul::client reader(check.get_executor(), c);
    std::optional<consul::kv_pair> kept_key, dropped_key;
    asio::co_spawn(
        check,
        [&]() -> asio::awaitable<void> {
            kept_key = (co_await reader.kv_get("contract/bg/kept")).value;
            dropped_key = (co_await reader.kv_get("contract/bg/dropped")).value;
        },
        asio::detached);
    check.run_for(10s);
    BOOST_TEST_REQUIRE(kept_key.has_value());
    BOOST_TEST(kept_key->session.empty());
    BOOST_TEST_REQUIRE(dropped_key.has_value());
    BOOST_TEST(dropped_key->session.empty());
}

BOOST_AUTO_TEST_SUITE_END()

// A refused request keeps the server's words on both paths: the exception
// (awaited with the default token) and the error code (with_diagnostics).
BOOST_FIXTURE_TEST_SUITE(server_diagnostics, http_agent)

BOOST_AUTO_TEST_CASE(a_refused_session_create_says_why_on_both_paths) {
    tenure::itest::run_scenario(ioc, [&]() -> asio::awaitable<void> {
        tenure::session_options o;
        o.name = "too long";
        o.ttl = 25h;  // beyond the 24 h Consul allows
        // The exception path: the client's api_error itself.
        bool thrown = false;
        try {
            co_await tenure::session::create(*client, o);
        } catch (tenure::server_error const& e) {
            thrown = true;
            BOOST_TEST(e.http_status() == 500u);  // Consul's answer to a bad TTL, and the agent's
            BOOST_TEST(e.server_message().find("TTL") != std::string::npos, e.server_message());
            std::string const what = e.what();
            BOOST_TEST(what.find("500") != std::string::npos, what);
            BOOST_TEST(what.find("TTL") != std::string::npos, what);
        }
        BOOST_TEST(thrown, "no tenure::server_error was thrown");
        // The error-code path.
        tenure::diagnostics diag;
        auto [ec, s] =
            co_await tenure::session::create(*client, o, tenure::with_diagnostics(diag, asio::as_tuple(asio::use_awaitable)));
        BOOST_TEST((ec == tenure::error::http_status), ec.message());
        BOOST_TEST(!s.valid());
        BOOST_TEST(diag.http_status() == 500u);
        BOOST_TEST(diag.server_message().find("TTL") != std::string::npos, diag.server_message());
        BOOST_TEST(diag.what().find("500") != std::string::npos, diag.what());
        // A success clears it.
        o.ttl = 10s;
        auto [ec2, s2] =
            co_await tenure::session::create(*client, o, tenure::with_diagnostics(diag, asio::as_tuple(asio::use_awaitable)));
        BOOST_TEST(!ec2, ec2.message());
        BOOST_TEST(diag.empty());
        co_await s2.close();
    });
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_FIXTURE_TEST_SUITE(empty_objects, inprocess_agent)

// With a handler that has an associated executor (the coroutine's): the
// completion comes back on it.
BOOST_AUTO_TEST_CASE(operations_of_empty_objects_complete_through_their_handlers) {
    tenure::itest::run_scenario(ioc, [&]() -> asio::awaitable<void> {
        auto tok = asio::as_tuple(asio::use_awaitable);
        tenure::leadership_scope scope;
        auto [e1, finished] = co_await scope.run([]() -> asio::awaitable<void> { co_return; }(), tok);
        BOOST_TEST((e1 == tenure::error::not_held), e1.message());
        BOOST_TEST(!finished);
        auto [e2] = co_await scope.wait_lost(tok);
        BOOST_TEST((e2 == tenure::error::not_held), e2.message());
        auto [e3] = co_await scope.release(tok);
        BOOST_TEST(!e3, e3.message());  // "does nothing"
        auto [e4, held] = co_await scope.confirm(tok);
        BOOST_TEST(!e4, e4.message());
        BOOST_TEST(!held);
        std::vector<tenure::write_op> writes;
        auto [e5, token] = co_await tenure::fenced_write(scope, std::move(writes), tok);
        BOOST_TEST((e5 == tenure::error::not_held), e5.message());
        auto [e5b, moved_to] = co_await scope.transfer_to("anyone", tok);
        BOOST_TEST((e5b == tenure::error::not_held), e5b.message());
        BOOST_TEST(moved_to == 0u);

        tenure::session none;
        auto [e6] = co_await none.wait_lost(tok);
        BOOST_TEST((e6 == tenure::error::no_session), e6.message());
        auto [e7] = co_await none.close(tok);
        BOOST_TEST(!e7, e7.message());  // nothing to close
        BOOST_TEST(none.id().empty());
        BOOST_TEST((none.state() == tenure::session_state::lost));

        // An election and a semaphore whose session was moved away.
        auto s = co_await tenure::session::create(*client, opts("moved"));
        tenure::election e(s, "contract/empty", "v");
        tenure::semaphore sem(s, "contract/empty-sem", 2);
        tenure::session taken = std::move(s);
        auto [e8, scope8] = co_await e.acquire(tok);
        BOOST_TEST((e8 == tenure::error::no_session), e8.message());
        auto [e9, scope9] = co_await e.try_acquire(tok);
        BOOST_TEST((e9 == tenure::error::no_session), e9.message());
        auto [e10, who] = co_await e.leader(tok);
        BOOST_TEST((e10 == tenure::error::no_session), e10.message());
        auto [e10b, waiting] = co_await e.candidates(tok);
        BOOST_TEST((e10b == tenure::error::no_session), e10b.message());
        BOOST_TEST(waiting.empty());
        auto [e11, permit] = co_await sem.acquire(tok);
        BOOST_TEST((e11 == tenure::error::no_session), e11.message());
        auto [e12, st] = co_await sem.state(tok);
        BOOST_TEST((e12 == tenure::error::no_session), e12.message());
        co_await taken.close();

        // A moved-from observer.
        tenure::leader_observer observer(*client, "contract/empty");
        tenure::leader_observer kept = std::move(observer);
        auto [e13, seen] = co_await observer.next(tok);  // NOLINT(bugprone-use-after-move): the point
        BOOST_TEST((e13 == tenure::error::no_session), e13.message());
        BOOST_TEST(!seen.has_value());
        auto [e14, now] = co_await kept.next(tok);  // the moved-to one works
        BOOST_TEST(!e14, e14.message());
        BOOST_TEST(!now.has_value());  // nobody holds the key
    });
}

// With a handler that has none (use_future): Asio's default, the system
// executor; the initiating call still does not throw.
BOOST_AUTO_TEST_CASE(a_handler_without_an_executor_is_completed_too) {
    tenure::leadership_scope scope;
    tenure::session none;
    std::future<void> lost;
    std::future<void> closed;
    BOOST_CHECK_NO_THROW(lost = scope.wait_lost(asio::use_future));
    BOOST_CHECK_NO_THROW(closed = none.close(asio::use_future));
    BOOST_TEST_REQUIRE((lost.wait_for(5s) == std::future_status::ready));
    BOOST_TEST_REQUIRE((closed.wait_for(5s) == std::future_status::ready));
    BOOST_CHECK_THROW(lost.get(), boost::system::system_error);
    BOOST_CHECK_NO_THROW(closed.get());
}

BOOST_AUTO_TEST_SUITE_END()
