// Leadership events (include/tenure/events.hpp) from a session and election
// against an in-process tenure::agent: acquired, renewed (round trip and
// margin), released, lost (key and session) and jeopardy, in order. The test
// awaits the events themselves; nothing is timed.
#include <tenure/agent.hpp>
#include "agent/agent_access.hpp"
#include <tenure/consul/client.hpp>
#include <tenure/election.hpp>
#include <tenure/error.hpp>
#include <tenure/events.hpp>
#include <tenure/session.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/test/unit_test.hpp>

#include <functional>
#include <memory>
#include <vector>

namespace asio = boost::asio;
using namespace std::chrono_literals;
using tenure::leadership_event;
using kind = tenure::leadership_event_kind;

namespace {

struct events_env {
    asio::io_context ioc{1};
    std::unique_ptr<tenure::agent> agent;
    std::unique_ptr<tenure::consul::client> client;
    std::vector<leadership_event> events;
    asio::steady_timer signal{ioc, asio::steady_timer::time_point::max()};

    events_env() {
        tenure::agent_options o;
        o.http_addr = "127.0.0.1:0";
        o.session_ttl_min = 100ms;
        o.log_stream = nullptr;
        agent = std::make_unique<tenure::agent>(ioc.get_executor(), o);
        agent->start();
        client = std::make_unique<tenure::consul::client>(ioc.get_executor(), agent->in_process(), tenure::consul::client_config{});
    }
    ~events_env() {
        client.reset();
        agent.reset();
    }

    tenure::session_options options(std::chrono::milliseconds ttl) {
        tenure::session_options o;
        o.name = "events";
        o.ttl = ttl;
        o.lock_delay = 0s;
        o.on_event = [this](leadership_event const& e) {
            events.push_back(e);
            signal.cancel();  // wake until()
        };
        return o;
    }

    // Waits until `pred` holds for the events seen so far.
    asio::awaitable<void> until(std::function<bool()> const& pred) {
        while (!pred()) co_await signal.async_wait(asio::as_tuple(asio::use_awaitable));
    }

    std::size_t count(kind k) const {
        std::size_t n = 0;
        for (auto const& e : events) n += e.kind == k;
        return n;
    }

    void run(std::function<asio::awaitable<void>()> f) {
        std::exception_ptr ep;
        bool done = false;
        asio::co_spawn(ioc, f(), [&](std::exception_ptr e) {
            ep = e;
            done = true;
            ioc.stop();  // the agent keeps the io_context busy forever
        });
        ioc.restart();
        ioc.run_for(60s);
        BOOST_REQUIRE_MESSAGE(done, "scenario did not finish");
        if (ep) std::rethrow_exception(ep);
    }
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(leadership_events, events_env)

BOOST_AUTO_TEST_CASE(acquired_renewed_lost_in_order) {
    run([this]() -> asio::awaitable<void> {
        auto opts = options(400ms);
        auto s = co_await tenure::session::create(*client, std::move(opts));
        tenure::election e(s, "events/leader", "me");
        auto scope = co_await e.acquire();
        // Named, not temporaries in the co_await (g++ 12 destroys those twice).
        std::function<bool()> renewed_twice = [&] { return count(kind::renewed) >= 2; };
        co_await until(renewed_twice);

        // The server forgets the session: the key is freed and the next renewal gets 404.
        tenure::detail::agent_access::state(*agent).session_destroy(s.id(), std::chrono::steady_clock::now());
        tenure::detail::agent_access::timers_changed(*agent);
        std::function<bool()> session_lost = [&] {
            for (auto const& ev : events)
                if (ev.kind == kind::lost && ev.key.empty()) return true;
            return false;
        };
        co_await until(session_lost);

        BOOST_REQUIRE(events.size() >= 5u);
        BOOST_TEST((events[0].kind == kind::acquired));
        BOOST_TEST(events[0].key == "events/leader");
        BOOST_TEST(events[0].token == scope.token());
        BOOST_TEST(events[0].session_id == s.id());
        std::size_t i = 1;
        for (; i < events.size() && events[i].kind == kind::renewed; ++i) {
            BOOST_TEST(events[i].round_trip.count() >= 0);
            BOOST_TEST(events[i].margin.count() > 0);
            BOOST_TEST((events[i].margin <= std::chrono::nanoseconds(400ms)));
        }
        BOOST_TEST(i >= 3u);
        // Then the key, then the session itself.
        BOOST_REQUIRE(i + 1 < events.size());
        BOOST_TEST((events[i].kind == kind::lost));
        BOOST_TEST(events[i].key == "events/leader");
        BOOST_TEST(events[i].token == scope.token());
        BOOST_TEST(!!events[i].reason);
        BOOST_TEST((events.back().kind == kind::lost));
        BOOST_TEST(events.back().key.empty());
        BOOST_TEST((events.back().reason == tenure::make_error_code(tenure::error::session_invalidated)));
        BOOST_TEST(count(kind::released) == 0u);
    });
}

BOOST_AUTO_TEST_CASE(released_on_release_and_nothing_lost_on_close) {
    run([this]() -> asio::awaitable<void> {
        auto opts = options(10s);
        auto s = co_await tenure::session::create(*client, std::move(opts));
        tenure::election e(s, "events/clean", "me");
        auto scope = co_await e.acquire();
        auto token = scope.token();
        co_await scope.release();
        co_await s.close();
        BOOST_REQUIRE_EQUAL(events.size(), 2u);
        BOOST_TEST((events[0].kind == kind::acquired));
        BOOST_TEST((events[1].kind == kind::released));
        BOOST_TEST(events[1].key == "events/clean");
        BOOST_TEST(events[1].token == token);
    });
}

BOOST_AUTO_TEST_CASE(jeopardy_then_lost_when_the_agent_goes_away) {
    run([this]() -> asio::awaitable<void> {
        auto opts = options(400ms);
        auto s = co_await tenure::session::create(*client, std::move(opts));
        std::function<bool()> renewed = [&] { return count(kind::renewed) >= 1; };
        co_await until(renewed);
        agent->stop();  // every renewal now fails
        std::function<bool()> lost = [&] { return count(kind::lost) >= 1; };
        co_await until(lost);
        BOOST_TEST(count(kind::jeopardy) >= 1u);
        std::size_t first_j = 0;
        while (events[first_j].kind != kind::jeopardy) ++first_j;
        for (std::size_t i = first_j; i + 1 < events.size(); ++i) {
            BOOST_TEST((events[i].kind == kind::jeopardy));
            BOOST_TEST(!!events[i].reason);
            BOOST_TEST(events[i].margin.count() > 0);
        }
        BOOST_TEST((events.back().kind == kind::lost));
        BOOST_TEST((events.back().reason == tenure::make_error_code(tenure::error::lease_expired_locally)));
    });
}

BOOST_AUTO_TEST_SUITE_END()
