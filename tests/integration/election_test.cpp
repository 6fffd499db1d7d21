// The election core against the real `tenure agent` binary over HTTP.
//
// Every test runs one io_context (one thread; TENURE_TEST_THREADS=N runs
// election_core and release_retry on N, their objects on one strand:
// run_on.hpp) and awaits events: acquisitions, losses, blocking queries.
// Wall-clock figures are printed, and asserted only where they are the safety
// property itself (a holder must stop before the server could hand the key to
// anyone else).

// g++ 12 false positive on Asio's coroutine frame allocator (fixed in g++ 13).
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include "agent_process.hpp"
#include "awaiting.hpp"
#include "run_on.hpp"
#include "fault_proxy.hpp"
#include "http_client.hpp"

#include "core/backend.hpp"  // the session's scope list (memory of ended terms)
#include "consul/client_access.hpp"  // the client's coroutines, which throw api_error

#include <tenure/consul/client.hpp>
#include <tenure/election.hpp>

#include <boost/asio.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/test/unit_test.hpp>

#include <csignal>
#include <fstream>

#include <sys/stat.h>
#include <unistd.h>
#include <dirent.h>
#include <functional>
#include <iostream>

namespace asio = boost::asio;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;
using boost::system::error_code;
namespace consul = tenure::consul;

namespace {

using tenure::itest::ms;
using tenure::itest::pause;

using tenure::itest::run_on;

struct election_fixture {
    tenure::itest::agent_process agent{[] {
        tenure::itest::agent_options o;
        o.session_ttl_min = "100ms";
        return o;
    }()};
    asio::io_context io;
    // What the test's clients, timers, proxies and coroutines are made on
    // (a strand with TENURE_TEST_THREADS > 1; run_on.hpp).
    asio::any_io_executor ex = tenure::itest::test_executor(io);

    std::string url() const { return "http://127.0.0.1:" + std::to_string(agent.port()); }

    double metric(std::string const& prefix) { return agent.metric(prefix); }
    double kv_gets() { return metric("tenure_http_requests_total{method=\"GET\",endpoint=\"kv\""); }

    std::unique_ptr<consul::client> make_client(std::string address = {}) {
        consul::client_config c;
        c.address = address.empty() ? url() : address;
        c.request_timeout = 2000ms;
        return std::make_unique<consul::client>(ex, c);
    }

    // Runs `body` to completion (bounded, so a bug fails the test instead of hanging it).
    void run(std::function<asio::awaitable<void>()> body, steady::duration limit = 30s) {
        run_on(io, ex, std::move(body), limit);
    }
};

tenure::session_options opts(std::string name, std::chrono::milliseconds ttl, std::chrono::milliseconds lock_delay) {
    tenure::session_options o;
    o.name = std::move(name);
    o.ttl = ttl;
    o.lock_delay = lock_delay;
    return o;
}

// Work that runs until cancelled, recording when it started and stopped.
struct work_log {
    steady::time_point started{}, stopped{};
    bool running = false;
};
asio::awaitable<void> endless_work(work_log& log) {
    log.started = steady::now();
    log.running = true;
    struct on_exit {
        work_log& l;
        ~on_exit() {
            l.stopped = steady::now();
            l.running = false;
        }
    } guard{log};
    asio::steady_timer t(co_await asio::this_coro::executor, steady::time_point::max());
    co_await t.async_wait(asio::use_awaitable);
}

std::size_t thread_count() {
    std::size_t n = 0;
    if (DIR* d = opendir("/proc/self/task")) {
        while (auto* e = readdir(d))
            if (e->d_name[0] != '.') ++n;
        closedir(d);
    }
    return n;
}

}  // namespace

BOOST_FIXTURE_TEST_SUITE(election_core, election_fixture)

BOOST_AUTO_TEST_CASE(three_candidates_elect_exactly_one_and_tokens_grow) {
    auto client = make_client();
    run([&]() -> asio::awaitable<void> {
        std::vector<tenure::session> sessions;
        for (int i = 0; i < 3; ++i)
            sessions.push_back(co_await tenure::session::create(*client, opts("c" + std::to_string(i), 2s, 0ms)));
        std::vector<std::unique_ptr<tenure::election>> elections;
        for (int i = 0; i < 3; ++i)
            elections.push_back(std::make_unique<tenure::election>(sessions[i], "itest/leader", "c" + std::to_string(i)));

        // All three campaign at once; record each win.
        std::vector<std::optional<tenure::leadership_scope>> scopes(3);
        asio::steady_timer won(ex, steady::time_point::max());
        for (int i = 0; i < 3; ++i) {
            elections[i]->acquire([&, i](error_code ec, tenure::leadership_scope s) {
                BOOST_REQUIRE(!ec);
                scopes[i] = std::move(s);
                won.cancel();
            });
        }
        std::vector<std::uint64_t> tokens;
        std::vector<int> leaders;
        for (int round = 0; round < 3; ++round) {
            auto count = [&] {
                return std::count_if(scopes.begin(), scopes.end(), [](auto const& s) { return s && s->held(); });
            };
            while (count() == 0) co_await won.async_wait(asio::as_tuple(asio::use_awaitable));
            BOOST_TEST(count() == 1);  // exactly one leader
            int leader = static_cast<int>(std::find_if(scopes.begin(), scopes.end(),
                                                       [](auto const& s) { return s && s->held(); }) -
                                          scopes.begin());
            // The server agrees.
            auto who = co_await elections[0]->leader();
            BOOST_REQUIRE(who.has_value());
            BOOST_TEST(who->session == sessions[leader].id());
            BOOST_TEST(who->value == "c" + std::to_string(leader));
            BOOST_TEST(who->lock_index == scopes[leader]->token());
            tokens.push_back(scopes[leader]->token());
            leaders.push_back(leader);
            co_await scopes[leader]->release();  // clean release: the next one takes over at once
            BOOST_TEST(!scopes[leader]->held());
        }
        BOOST_TEST(tokens.size() == 3u);
        for (std::size_t i = 1; i < tokens.size(); ++i) BOOST_TEST(tokens[i] > tokens[i - 1]);
        std::sort(leaders.begin(), leaders.end());
        BOOST_TEST((leaders == std::vector<int>{0, 1, 2}));
        for (auto& s : sessions) co_await s.close();
    });
}

BOOST_AUTO_TEST_CASE(clean_release_hands_over_without_lock_delay) {
    auto client = make_client();
    run([&]() -> asio::awaitable<void> {
        auto a = co_await tenure::session::create(*client, opts("a", 2s, 5s));
        auto b = co_await tenure::session::create(*client, opts("b", 2s, 5s));
        tenure::election ea(a, "itest/clean", "a"), eb(b, "itest/clean", "b");
        auto sa = co_await ea.acquire();
        std::optional<tenure::leadership_scope> sb;
        steady::time_point acquired_b{};
        eb.acquire([&](error_code ec, tenure::leadership_scope s) {
            BOOST_REQUIRE(!ec);
            acquired_b = steady::now();
            sb = std::move(s);
        });
        co_await pause(50ms);  // b is now blocked on the key
        BOOST_TEST(!sb.has_value());
        auto released = steady::now();
        co_await sa.release();
        while (!sb) co_await pause(1ms);
        std::cout << "clean handover: " << ms(acquired_b - released) << " ms\n";
        BOOST_TEST(ms(acquired_b - released) < 1000.0);  // far below the 5 s lock-delay
        BOOST_TEST(sb->token() > sa.token());
        co_await a.close();
        co_await b.close();
    });
}

BOOST_AUTO_TEST_CASE(destroy_applies_lock_delay_then_hands_over_promptly) {
    auto client = make_client();
    run([&]() -> asio::awaitable<void> {
        auto a = co_await tenure::session::create(*client, opts("a", 2s, 700ms));
        auto b = co_await tenure::session::create(*client, opts("b", 2s, 700ms));
        tenure::election ea(a, "itest/destroy", "a"), eb(b, "itest/destroy", "b");
        auto sa = co_await ea.acquire();
        std::optional<tenure::leadership_scope> sb;
        steady::time_point acquired_b{};
        eb.acquire([&](error_code ec, tenure::leadership_scope s) {
            BOOST_REQUIRE(!ec);
            acquired_b = steady::now();
            sb = std::move(s);
        });
        co_await pause(50ms);
        // Destroy a's session on the server (no release first): an invalidation.
        auto destroyed = steady::now();
        co_await client->session_destroy(a.id());
        auto why = co_await sa.wait_lost(asio::as_tuple(asio::deferred));
        BOOST_TEST((std::get<0>(why) == tenure::error::session_invalidated ||
                    std::get<0>(why) == tenure::error::released_by_other));
        while (!sb) co_await pause(1ms);
        double waited = ms(acquired_b - destroyed);
        std::cout << "destroy handover: " << waited << " ms (lock-delay 700 ms)\n";
        BOOST_TEST(waited >= 700.0);  // nobody before the lock-delay ends
        BOOST_TEST(waited < 700.0 + 300.0);
        BOOST_TEST(sb->token() > sa.token());
        co_await b.close();
    });
}

// The retry at the end of a lock-delay goes without a read first, guarded by
// the index of the free key it saw. A key rewritten as plain data during the
// delay must fail that guard: the candidate reads, finds a conflict, and the
// data stays as written.
BOOST_AUTO_TEST_CASE(a_key_rewritten_during_lock_delay_is_a_conflict_not_overwritten) {
    auto client = make_client();
    tenure::itest::http_client http("127.0.0.1", agent.port());
    auto lock_delay_refusals = [&] {
        auto text = http.get("/v1/agent/metrics?format=prometheus").body;
        auto at = text.find("\ntenure_lock_delay_rejections_total ");
        BOOST_REQUIRE(at != std::string::npos);
        return std::stod(text.substr(at + 36));
    };
    run([&]() -> asio::awaitable<void> {
        auto a = co_await tenure::session::create(*client, opts("a", 2s, 800ms));
        auto b = co_await tenure::session::create(*client, opts("b", 2s, 800ms));
        tenure::election ea(a, "itest/rewritten", "a"), eb(b, "itest/rewritten", "b");
        auto sa = co_await ea.acquire();
        std::optional<error_code> b_result;
        eb.acquire([&](error_code ec, tenure::leadership_scope s) {
            b_result = ec;
            BOOST_TEST(!s.held());
        });
        double const before = lock_delay_refusals();
        co_await client->session_destroy(a.id());
        // b saw the key freed and was refused by the lock-delay: it now waits.
        while (lock_delay_refusals() == before) co_await pause(1ms);
        BOOST_TEST(!b_result.has_value());
        std::optional<std::string> data = "plain data";
        co_await client->kv_put("itest/rewritten", data);
        while (!b_result) co_await pause(1ms);
        BOOST_TEST((*b_result == tenure::error::lock_conflict));
        auto kept = co_await client->kv_get("itest/rewritten");
        BOOST_REQUIRE(kept.value);
        BOOST_TEST(kept.value->value.value_or("") == "plain data");
        BOOST_TEST(kept.value->session.empty());
        BOOST_TEST(kept.value->flags == 0u);
        co_await b.close();
    });
}

BOOST_AUTO_TEST_CASE(lock_delay_zero_hands_over_at_once_after_destroy) {
    auto client = make_client();
    run([&]() -> asio::awaitable<void> {
        auto a = co_await tenure::session::create(*client, opts("a", 2s, 0ms));
        auto b = co_await tenure::session::create(*client, opts("b", 2s, 0ms));
        auto info = co_await client->session_info_get(a.id());
        BOOST_REQUIRE(info.value.has_value());
        BOOST_TEST(info.value->lock_delay.count() == 0);  // 0 really reaches the server
        tenure::election ea(a, "itest/zero", "a"), eb(b, "itest/zero", "b");
        auto sa = co_await ea.acquire();
        std::optional<tenure::leadership_scope> sb;
        eb.acquire([&](error_code ec, tenure::leadership_scope s) {
            BOOST_REQUIRE(!ec);
            sb = std::move(s);
        });
        co_await pause(50ms);
        auto destroyed = steady::now();
        co_await client->session_destroy(a.id());
        while (!sb) co_await pause(1ms);
        std::cout << "LockDelay 0 handover after destroy: " << ms(steady::now() - destroyed) << " ms\n";
        BOOST_TEST(ms(steady::now() - destroyed) < 500.0);
        co_await b.close();
    });
}

BOOST_AUTO_TEST_CASE(ttl_lapse_frees_the_key_after_two_ttls_and_lock_delay) {
    auto client = make_client();
    run([&]() -> asio::awaitable<void> {
        // A raw session nobody renews holds the key (as a crashed process would).
        consul::session_request req;
        req.name = "crashed";
        req.ttl = 200ms;
        req.lock_delay = 300ms;
        auto created = steady::now();
        std::string raw = co_await client->session_create(req);
        std::optional<std::string> value = "crashed";
        BOOST_REQUIRE(co_await client->kv_acquire("itest/ttl", raw, value, consul::lock_flag_value));
        auto b = co_await tenure::session::create(*client, opts("b", 2s, 300ms));
        tenure::election eb(b, "itest/ttl", "b");
        auto sb = co_await eb.acquire();
        double waited = ms(steady::now() - created);
        std::cout << "TTL lapse takeover: " << waited << " ms (2 x TTL 400 ms + lock-delay 300 ms)\n";
        BOOST_TEST(waited >= 400.0 + 300.0);
        BOOST_TEST(sb.token() == 2u);
        co_await b.close();
    });
}

BOOST_AUTO_TEST_CASE(a_bound_check_going_critical_ends_leadership) {
    auto client = make_client();
    run([&]() -> asio::awaitable<void> {
        bool healthy = true;
        auto o = opts("checked", 400ms, 200ms);
        o.health_check_ttl = 2s;
        o.health_probe = [&] { return healthy; };
        auto a = co_await tenure::session::create(*client, o);
        tenure::election ea(a, "itest/check", "a");
        auto sa = co_await ea.acquire();
        work_log log;
        healthy = false;  // the next heartbeat reports the check critical
        bool finished = co_await sa.run(endless_work(log));
        BOOST_TEST(!finished);
        BOOST_TEST(!log.running);
        BOOST_TEST((sa.loss_reason() == tenure::error::session_invalidated));
        auto info = co_await client->session_info_get(a.id());
        BOOST_TEST(!info.value.has_value());  // the server invalidated it
        // The key was freed with lock-delay: an immediate acquire is refused.
        auto b = co_await tenure::session::create(*client, opts("b", 2s, 0ms));
        std::optional<std::string> value = "b";
        BOOST_TEST(!(co_await client->kv_acquire("itest/check", b.id(), value, consul::lock_flag_value)));
        co_await b.close();
    });
}

// A waiting acquire() ends in one of two ways besides winning: the caller
// cancels it (operation_aborted), or its session dies (the session's reason).
// Neither disturbs the holder, and the candidate that stays keeps waiting.
BOOST_AUTO_TEST_CASE(a_waiting_candidate_ends_on_cancellation_or_on_its_sessions_loss) {
    auto client = make_client();
    run([&]() -> asio::awaitable<void> {
        auto a = co_await tenure::session::create(*client, opts("a", 2s, 0s));
        auto b = co_await tenure::session::create(*client, opts("b", 300ms, 0s));
        auto c = co_await tenure::session::create(*client, opts("c", 2s, 0s));
        tenure::election ea(a, "itest/waiting", "a"), eb(b, "itest/waiting", "b"), ec(c, "itest/waiting", "c");
        auto sa = co_await ea.acquire();
        BOOST_REQUIRE(sa.held());

        // c waits; cancelling its wait ends it with operation_aborted.
        asio::cancellation_signal cancel_c;
        std::optional<error_code> c_result;
        asio::co_spawn(ex, ec.acquire(asio::as_tuple(asio::use_awaitable)),
                       asio::bind_cancellation_slot(cancel_c.slot(), [&](std::exception_ptr, auto r) {
                           c_result = std::get<0>(r);
                       }));
        // b waits too; destroying its session ends it with the session's reason.
        std::optional<error_code> b_result;
        asio::co_spawn(ex, eb.acquire(asio::as_tuple(asio::use_awaitable)),
                       [&](std::exception_ptr, auto r) { b_result = std::get<0>(r); });
        co_await pause(50ms);
        BOOST_TEST(!c_result.has_value());
        BOOST_TEST(!b_result.has_value());

        cancel_c.emit(asio::cancellation_type::terminal);
        for (int i = 0; i < 100 && !c_result; ++i) co_await pause(5ms);
        BOOST_REQUIRE(c_result.has_value());
        BOOST_TEST((*c_result == asio::error::operation_aborted));

        co_await client->session_destroy(b.id());
        for (int i = 0; i < 400 && !b_result; ++i) co_await pause(5ms);
        BOOST_REQUIRE(b_result.has_value());
        BOOST_TEST((b.state() == tenure::session_state::lost));
        BOOST_TEST((*b_result == tenure::error::session_invalidated));

        BOOST_TEST(sa.held());  // the holder saw none of it
        auto leader = co_await ea.leader();
        BOOST_REQUIRE(leader.has_value());
        BOOST_TEST(leader->session == a.id());
        co_await sa.release();
        co_await a.close();
        co_await c.close();
    });
}

BOOST_AUTO_TEST_CASE(force_release_by_someone_else_cancels_the_work) {
    auto client = make_client();
    run([&]() -> asio::awaitable<void> {
        auto a = co_await tenure::session::create(*client, opts("a", 2s, 1s));
        tenure::election ea(a, "itest/force", "a");
        auto sa = co_await ea.acquire();
        work_log log;
        asio::co_spawn(
            ex,
            [&]() -> asio::awaitable<void> {
                co_await pause(100ms);
                // An operator frees the key with the holder's session id.
                co_await client->kv_release("itest/force", a.id(), std::nullopt, consul::lock_flag_value);
            },
            asio::detached);
        bool finished = co_await sa.run(endless_work(log));
        BOOST_TEST(!finished);
        BOOST_TEST(!log.running);  // the work was cancelled and has finished
        BOOST_TEST((sa.loss_reason() == tenure::error::released_by_other));
        BOOST_TEST((a.state() != tenure::session_state::lost));  // the session itself lives on
        co_await a.close();
    });
}

BOOST_AUTO_TEST_CASE(agent_killed_leader_stops_by_local_deadline_before_ttl) {
    auto client = make_client();
    run([&]() -> asio::awaitable<void> {
        auto a = co_await tenure::session::create(*client, opts("a", 600ms, 1s));
        tenure::election ea(a, "itest/kill", "a");
        auto sa = co_await ea.acquire();
        work_log log;
        steady::time_point killed{};
        asio::co_spawn(
            ex,
            [&]() -> asio::awaitable<void> {
                co_await pause(200ms);
                killed = steady::now();
                agent.stop(SIGKILL, 5000ms);
            },
            asio::detached);
        bool finished = co_await sa.run(endless_work(log));
        BOOST_TEST(!finished);
        BOOST_TEST((sa.loss_reason() == tenure::error::lease_expired_locally));
        double after_kill = ms(log.stopped - killed);
        std::cout << "agent SIGKILL: work cancelled " << after_kill << " ms after the kill (TTL 600 ms)\n";
        // The work stopped no later than one TTL after the kill: the server
        // could not have handed the key to anyone before 2 x TTL.
        BOOST_TEST(after_kill <= 600.0 + 50.0);
    });
}

BOOST_AUTO_TEST_CASE(a_pause_shorter_than_the_lease_loses_nothing) {
    tenure::test::fault_proxy proxy(ex,
                                    asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), agent.port()));
    proxy.start();
    auto client = make_client(proxy.address());
    run([&]() -> asio::awaitable<void> {
        bool went_to_jeopardy = false;
        auto oa = opts("a", 1s, 1s);
        oa.on_event = [&](tenure::leadership_event const& e) {
            if (e.kind == tenure::leadership_event_kind::jeopardy) went_to_jeopardy = true;
        };
        auto a = co_await tenure::session::create(*client, oa);
        tenure::election ea(a, "itest/pause", "a");
        auto sa = co_await ea.acquire();
        work_log log;
        asio::co_spawn(
            ex,
            [&]() -> asio::awaitable<void> {
                co_await pause(100ms);
                proxy.pause();  // a partition with TCP up: bytes are held
                co_await pause(400ms);
                proxy.resume();
                // Wait for a renewal acknowledged after the pause.
                auto resumed = steady::now();
                while (a.local_deadline() < resumed + 900ms) co_await pause(10ms);
                BOOST_TEST(sa.held());
                BOOST_TEST(log.running);
                co_await sa.release();  // ends run() normally... as a release
            },
            asio::detached);
        bool finished = co_await sa.run(endless_work(log));
        BOOST_TEST(!finished);                 // run ended because we released
        BOOST_TEST(!sa.lost());                // never lost
        BOOST_TEST((a.state() != tenure::session_state::lost));
        std::cout << "pause of 400 ms with TTL 1 s: jeopardy entered: " << went_to_jeopardy << "\n";
        co_await a.close();
    });
}

BOOST_AUTO_TEST_CASE(leaving_the_scope_releases_only_after_the_work_finished) {
    auto client = make_client();
    run([&]() -> asio::awaitable<void> {
        auto a = co_await tenure::session::create(*client, opts("a", 2s, 5s));
        auto b = co_await tenure::session::create(*client, opts("b", 2s, 5s));
        tenure::election ea(a, "itest/scope", "a"), eb(b, "itest/scope", "b");
        steady::time_point work_done{}, b_acquired{};
        std::optional<tenure::leadership_scope> sb;
        {
            auto sa = co_await ea.acquire();
            eb.acquire([&](error_code ec, tenure::leadership_scope s) {
                BOOST_REQUIRE(!ec);
                b_acquired = steady::now();
                sb = std::move(s);
            });
            bool finished = co_await sa.run([&]() -> asio::awaitable<void> {
                co_await pause(150ms);
                work_done = steady::now();
            }());
            BOOST_TEST(finished);
            BOOST_TEST(!sb.has_value());  // still ours while the work ran
        }  // the scope ends here: the key is released in the background
        while (!sb) co_await pause(1ms);
        BOOST_TEST((b_acquired > work_done));
        std::cout << "scope end -> next holder: " << ms(b_acquired - work_done) << " ms (no lock-delay)\n";
        BOOST_TEST(ms(b_acquired - work_done) < 1000.0);
        co_await a.close();
        co_await b.close();
    });
}

BOOST_AUTO_TEST_CASE(the_library_creates_no_thread) {
    std::size_t before = thread_count();
    auto client = make_client();
    std::size_t at_start = 0, during = 0;
    run([&]() -> asio::awaitable<void> {
        at_start = thread_count();
        auto a = co_await tenure::session::create(*client, opts("a", 400ms, 0ms));
        tenure::election ea(a, "itest/threads", "a");
        auto sa = co_await ea.acquire();
        co_await sa.run([&]() -> asio::awaitable<void> {
            co_await pause(500ms);  // renewals and the monitor run meanwhile
            during = thread_count();
        }());
        co_await sa.release();
        co_await a.close();
    });
    if (tenure::itest::test_threads() > 1) {
        // The run's own threads (all started before the body) and a
        // sanitizer's helper thread are there from the body's first step.
        BOOST_TEST(during == at_start);
        return;
    }
    BOOST_TEST(during == before);
    BOOST_TEST(thread_count() == before);
}

BOOST_AUTO_TEST_CASE(observer_reports_each_leader_change) {
    auto client = make_client();
    run([&]() -> asio::awaitable<void> {
        tenure::leader_observer obs(*client, "itest/observe");
        auto first = co_await obs.next();
        BOOST_TEST(!first.has_value());
        auto a = co_await tenure::session::create(*client, opts("a", 2s, 0ms));
        tenure::election ea(a, "itest/observe", "alpha");
        auto sa = co_await ea.acquire();
        auto second = co_await obs.next();
        BOOST_REQUIRE(second.has_value());
        BOOST_TEST(second->value == "alpha");
        BOOST_TEST(second->lock_index == sa.token());
        co_await sa.release();
        auto third = co_await obs.next();
        BOOST_TEST(!third.has_value());
        co_await a.close();
    });
}

BOOST_AUTO_TEST_CASE(campaign_runs_the_body_and_hands_over_cleanly_when_cancelled) {
    auto client = make_client();
    run([&]() -> asio::awaitable<void> {
        std::vector<std::uint64_t> tokens;
        int elected = 0;
        asio::cancellation_signal stop_first;
        auto make = [&](std::string name) {
            tenure::campaign_options o;
            o.session = opts(name, 1s, 3s);
            o.key = "itest/campaign";
            o.value = name;
            o.session.on_event = [&](tenure::leadership_event const& e) {
                if (e.kind != tenure::leadership_event_kind::acquired) return;
                ++elected;
                tokens.push_back(e.token);
            };
            return o;
        };
        auto body = [](tenure::leadership_scope&) -> asio::awaitable<void> {
            asio::steady_timer t(co_await asio::this_coro::executor, steady::time_point::max());
            co_await t.async_wait(asio::use_awaitable);
        };
        bool first_done = false;
        tenure::campaign(*client, make("one"), body,
                         asio::bind_cancellation_slot(stop_first.slot(), [&](error_code) { first_done = true; }));
        while (elected < 1) co_await pause(1ms);
        asio::cancellation_signal stop_second;
        tenure::campaign(*client, make("two"), body,
                         asio::bind_cancellation_slot(stop_second.slot(), [](error_code) {}));
        co_await pause(50ms);
        BOOST_TEST(elected == 1);
        auto cancelled = steady::now();
        stop_first.emit(asio::cancellation_type::terminal);  // clean shutdown: release, then destroy
        while (elected < 2) co_await pause(1ms);
        std::cout << "campaign cancel -> next leader: " << ms(steady::now() - cancelled) << " ms (lock-delay 3 s)\n";
        BOOST_TEST(ms(steady::now() - cancelled) < 2000.0);  // no lock-delay was imposed
        BOOST_TEST(tokens[1] > tokens[0]);
        while (!first_done) co_await pause(1ms);
        stop_second.emit(asio::cancellation_type::terminal);
        co_await pause(100ms);
    });
}

BOOST_AUTO_TEST_CASE(a_key_used_with_other_flags_is_a_conflict) {
    auto client = make_client();
    run([&]() -> asio::awaitable<void> {
        std::optional<std::string> value = "not a lock";
        co_await client->kv_put("itest/plain", value);
        auto a = co_await tenure::session::create(*client, opts("a", 2s, 0ms));
        tenure::election ea(a, "itest/plain", "a");
        auto [ec, scope] = co_await ea.acquire(asio::as_tuple(asio::use_awaitable));
        BOOST_TEST((ec == tenure::error::lock_conflict));
        BOOST_TEST(!scope.held());
        co_await a.close();
    });
}

BOOST_AUTO_TEST_CASE(reacquiring_a_held_key_with_the_same_session_is_handled) {
    auto client = make_client();
    run([&]() -> asio::awaitable<void> {
        auto a = co_await tenure::session::create(*client, opts("a", 2s, 0ms));
        std::optional<std::string> value = "a";
        BOOST_REQUIRE(co_await client->kv_acquire("itest/again", a.id(), value, consul::lock_flag_value));
        tenure::election ea(a, "itest/again", "a");
        auto s = co_await ea.try_acquire();
        BOOST_TEST(s.held());
        BOOST_TEST(s.token() == 1u);  // the same term: LockIndex unchanged
        BOOST_TEST(co_await s.confirm());
        co_await a.close();
    });
}

// election_options::quick_retake: the retake of a key the session released
// itself skips the first read, guarded by check-index. Whatever happened to
// the key in between must still be honoured.
BOOST_AUTO_TEST_CASE(quick_retake_honours_whatever_happened_to_the_key_meanwhile) {
    auto client = make_client();
    run([&]() -> asio::awaitable<void> {
        auto a = co_await tenure::session::create(*client, opts("a", 5s, 0ms));
        auto b = co_await tenure::session::create(*client, opts("b", 5s, 0ms));
        tenure::election_options quick;
        quick.quick_retake = true;
        tenure::election ea(a, "itest/retake", "a", quick), eb(b, "itest/retake", "b");

        // Nobody in between: terms follow each other, tokens grow.
        std::uint64_t last = 0;
        for (int i = 0; i < 20; ++i) {
            auto s = co_await ea.acquire();
            BOOST_REQUIRE(s.held());
            BOOST_REQUIRE(s.token() > last);
            last = s.token();
            auto held = co_await client->kv_get("itest/retake");
            BOOST_REQUIRE(held.value);
            BOOST_TEST(held.value->session == a.id());
            BOOST_TEST(held.value->value.value_or("") == "a");
            co_await s.release();
        }

        // Another session took and released the key: the retake still works
        // and its token is above the other's.
        {
            auto sb = co_await eb.acquire();
            BOOST_TEST(sb.token() > last);
            last = sb.token();
            co_await sb.release();
            auto s = co_await ea.acquire();
            BOOST_TEST(s.held());
            BOOST_TEST(s.token() > last);
            last = s.token();
            co_await s.release();
        }

        // Another session holds the key: the retake waits for it.
        {
            auto sb = co_await eb.acquire();
            std::optional<tenure::leadership_scope> sa;
            ea.acquire([&](error_code ec, tenure::leadership_scope s) {
                BOOST_REQUIRE(!ec);
                sa = std::move(s);
            });
            co_await pause(50ms);
            BOOST_TEST(!sa.has_value());  // b still holds it
            co_await sb.release();
            while (!sa) co_await pause(1ms);
            BOOST_TEST(sa->token() > sb.token());
            co_await sa->release();
        }

        // Someone wrote the key as plain data: a conflict, and the data stays.
        {
            auto s = co_await ea.acquire();
            co_await s.release();
            std::optional<std::string> data = "not a lock";
            co_await client->kv_put("itest/retake", data);
            auto [ec, scope] = co_await ea.acquire(asio::as_tuple(asio::use_awaitable));
            BOOST_TEST((ec == tenure::error::lock_conflict));
            BOOST_TEST(!scope.held());
            auto kept = co_await client->kv_get("itest/retake");
            BOOST_REQUIRE(kept.value);
            BOOST_TEST(kept.value->value.value_or("") == "not a lock");
            BOOST_TEST(kept.value->session.empty());
            BOOST_TEST(kept.value->flags == 0u);
        }
        co_await a.close();
        co_await b.close();
    });
}

// The default options (handoff_on_release, no quick_retake): a candidate
// alone on its key releases with one unlock guarded by the empty registry,
// and retakes with one check-index + lock, so its terms send no read at all.
// A candidate that comes to wait breaks the guard: the next release reads
// the registry and hands the key over, and the one after that, with nobody
// left waiting, frees it again.
BOOST_AUTO_TEST_CASE(a_lone_candidate_retakes_with_no_read_and_still_hands_over_to_a_newcomer) {
    auto client = make_client();
    run([&]() -> asio::awaitable<void> {
        auto a = co_await tenure::session::create(*client, opts("a", 5s, 0ms));
        auto b = co_await tenure::session::create(*client, opts("b", 5s, 0ms));
        tenure::election_options no_monitor;  // terms shorter than the monitor's delay: no query of its own
        no_monitor.monitor_delay = 1h;
        tenure::election ea(a, "itest/lone", "a", no_monitor), eb(b, "itest/lone", "b", no_monitor);

        // n terms of a in a row, each with a higher fencing token.
        std::uint64_t last = 0;
        auto terms = [&](int n) -> asio::awaitable<void> {
            for (int i = 0; i < n; ++i) {
                auto s = co_await ea.acquire();
                BOOST_REQUIRE(s.held());
                BOOST_REQUIRE(s.token() > last);
                last = s.token();
                co_await s.release();
            }
        };

        // The first terms read the key and the registry: they learn both.
        co_await terms(2);
        double const gets_before = kv_gets();
        co_await terms(20);
        BOOST_TEST(kv_gets() - gets_before == 0.0);
        auto freed = co_await client->kv_get("itest/lone");
        BOOST_REQUIRE(freed.value);
        BOOST_TEST(freed.value->session.empty());

        // b comes to wait while a leads: a's release goes to b, not to the free key.
        auto sa = co_await ea.acquire();
        std::optional<tenure::leadership_scope> sb;
        eb.acquire([&](error_code ec, tenure::leadership_scope s) {
            BOOST_REQUIRE(!ec);
            sb = std::move(s);
        });
        for (;;) {
            auto waiting = co_await ea.candidates();
            if (!waiting.empty()) break;
            co_await pause(1ms);
        }
        co_await sa.release();
        while (!sb) co_await pause(1ms);
        BOOST_TEST(sb->token() > last);
        auto handed = co_await client->kv_get("itest/lone");
        BOOST_REQUIRE(handed.value);
        BOOST_TEST(handed.value->session == b.id());

        // a, who released last but did not free the key, reads before it
        // tries: it waits for b's term.
        std::optional<tenure::leadership_scope> again;
        ea.acquire([&](error_code ec, tenure::leadership_scope s) {
            BOOST_REQUIRE(!ec);
            again = std::move(s);
        });
        co_await pause(50ms);
        BOOST_TEST(!again.has_value());
        co_await sb->release();
        while (!again) co_await pause(1ms);
        BOOST_TEST(again->token() > sb->token());
        last = again->token();
        co_await again->release();

        // Alone again, with a registry that has been used (its `.seen` exists,
        // so the unlock's guard is a check-index): once a has seen it empty,
        // its terms send no read again. (Its entry's removal, in the
        // background, may move `.seen` under the first release's guard: one
        // more term to learn it.)
        co_await terms(4);
        double const gets_later = kv_gets();
        co_await terms(10);
        BOOST_TEST(kv_gets() - gets_later == 0.0);
        co_await a.close();
        co_await b.close();
    });
}

// election_options::monitor_delay: a term shorter than the delay costs no
// blocking query; a term that outlives it gets its monitor, which starts from
// the state the acquire saw and so misses nothing that happened meanwhile.
BOOST_AUTO_TEST_CASE(monitor_delay_spares_short_terms_their_query_and_misses_no_loss) {
    auto client = make_client();
    auto parked = [&] { return metric("tenure_blocking_queries "); };
    auto retaking = [](std::chrono::nanoseconds monitor_delay) {
        tenure::election_options o;
        o.quick_retake = true;
        o.monitor_delay = monitor_delay;
        return o;
    };
    run([&]() -> asio::awaitable<void> {
        auto a = co_await tenure::session::create(*client, opts("a", 5s, 0ms));

        // Long delay, short terms: the first acquire reads the key, the
        // retakes and the terms themselves send no GET at all.
        tenure::election el(a, "itest/monitor-delay", "a", retaking(1h));
        double const before_late = kv_gets();
        for (int i = 0; i < 20; ++i) {
            auto s = co_await el.acquire();
            BOOST_REQUIRE(s.held());
            co_await s.release();
        }
        BOOST_TEST(kv_gets() - before_late <= 1.0);
        BOOST_TEST(parked() == 0.0);

        // No delay: every term parks its monitor's query on the key.
        tenure::election en(a, "itest/monitor-delay", "a", retaking(0s));
        double const before_now = kv_gets();
        for (int i = 0; i < 5; ++i) {
            auto s = co_await en.acquire();
            BOOST_REQUIRE(s.held());
            while (parked() < 1.0) co_await pause(1ms);
            co_await s.release();
            while (parked() > 0.0) co_await pause(1ms);  // the release answered it
        }
        BOOST_TEST(kv_gets() - before_now >= 5.0);

        // The key deleted while the monitor waits out its delay: once the
        // monitor starts, it sees the deletion (its query starts from the
        // acquire's index) and the work is cancelled.
        tenure::election_options soon;
        soon.monitor_delay = 200ms;
        tenure::election es(a, "itest/monitor-delay", "a", soon);
        auto s = co_await es.acquire();
        BOOST_REQUIRE(s.held());
        BOOST_TEST(parked() == 0.0);
        BOOST_REQUIRE(co_await client->kv_delete("itest/monitor-delay"));
        BOOST_TEST(s.held());  // nothing watches the key yet
        work_log log;
        bool finished = co_await s.run(endless_work(log));
        BOOST_TEST(!finished);
        BOOST_TEST((s.loss_reason() == tenure::error::key_deleted));
        co_await a.close();
    });
}

// A session closed (or lost) while a term waits out its monitor_delay must not
// keep the io_context busy until the delay would have ended.
BOOST_AUTO_TEST_CASE(a_closed_session_leaves_no_deferred_monitor_behind) {
    auto client = make_client();
    std::optional<tenure::session> kept;  // outlives the coroutine, as a member of a server would
    run([&]() -> asio::awaitable<void> {
        kept = co_await tenure::session::create(*client, opts("a", 5s, 0ms));
        tenure::election_options late;
        late.monitor_delay = 1h;
        tenure::election e(*kept, "itest/closed-late", "a", late);
        auto s = co_await e.acquire();
        BOOST_REQUIRE(s.held());
        co_await kept->close();
        BOOST_TEST(!s.held());
    });
    io.restart();
    tenure::itest::run_for(io, 10s);
    BOOST_TEST(io.stopped(), "work was left on the io_context after the session closed");
}

// A session that takes and releases a key many times keeps no memory of its
// ended terms (it used to keep a weak_ptr, and so the scope's allocation, of
// every term for its whole life).
BOOST_AUTO_TEST_CASE(a_long_lived_session_forgets_ended_terms) {
    auto client = make_client();
    run([&]() -> asio::awaitable<void> {
        auto a = co_await tenure::session::create(*client, opts("a", 5s, 0ms));
        tenure::election ea(a, "itest/cycles", "a");
        std::uint64_t last = 0;
        for (int i = 0; i < 500; ++i) {
            auto s = co_await ea.acquire();
            BOOST_REQUIRE(s.held());
            BOOST_REQUIRE(s.token() > last);
            last = s.token();
            co_await s.release();
        }
        BOOST_TEST(tenure::detail::session_access::impl(a)->scopes.size() <= 64u, tenure::detail::session_access::impl(a)->scopes.size() << " scope records after 500 terms");
        co_await a.close();
    });
}

BOOST_AUTO_TEST_SUITE_END()

// ---- the agent and the client over a Unix domain socket (unix:///path) ----------

BOOST_AUTO_TEST_SUITE(unix_socket)

namespace {

std::string socket_path(std::string const& name) {
    return "/tmp/tenure-itest-" + std::to_string(::getpid()) + "-" + name + ".sock";
}

// Leaves a socket file behind, as an agent killed with SIGKILL would.
void leave_stale_socket(std::string const& path) {
    asio::io_context io;
    asio::local::stream_protocol::acceptor a(io, asio::local::stream_protocol::endpoint(path));
    a.close();  // closes without unlinking the file
}

}  // namespace

BOOST_AUTO_TEST_CASE(elections_run_over_a_unix_socket_with_its_mode_and_the_file_goes_with_the_agent) {
    auto const path = socket_path("election");
    leave_stale_socket(path);  // an earlier run's socket is replaced, not an error
    tenure::itest::agent_options ao;
    ao.http_addr = "unix://" + path;
    ao.extra_args = {"-unix-socket-mode", "0600"};
    tenure::itest::agent_process agent(ao);
    BOOST_TEST(agent.banner() == "tenure agent listening on unix://" + path);
    BOOST_TEST(agent.address() == "unix://" + path);
    struct stat st {};
    BOOST_REQUIRE(::stat(path.c_str(), &st) == 0);
    BOOST_TEST(S_ISSOCK(st.st_mode));
    BOOST_TEST((st.st_mode & 07777) == 0600u);

    asio::io_context io;
    consul::client_config cc;
    cc.address = agent.address();
    cc.request_timeout = 2000ms;
    consul::client ca(io.get_executor(), cc), cb(io.get_executor(), cc);
    BOOST_TEST(ca.config().address == "unix://" + path);
    run_on(io, [&]() -> asio::awaitable<void> {
        auto a = co_await tenure::session::create(ca, opts("a", 2s, 0s));
        auto b = co_await tenure::session::create(cb, opts("b", 2s, 0s));
        tenure::election ea(a, "itest/unix", "a"), eb(b, "itest/unix", "b");
        auto sa = co_await ea.acquire();
        BOOST_REQUIRE(sa.held());
        // b blocks on the key (a blocking query over the socket) until a releases.
        std::optional<tenure::leadership_scope> sb;
        asio::co_spawn(io, eb.acquire(asio::use_awaitable),
                       [&](std::exception_ptr e, tenure::leadership_scope s) {
                           if (!e) sb = std::move(s);
                       });
        co_await pause(50ms);
        BOOST_TEST(!sb.has_value());
        co_await sa.release();
        for (int i = 0; i < 400 && !sb; ++i) co_await pause(5ms);
        BOOST_REQUIRE(sb.has_value());
        BOOST_TEST(sb->held());
        BOOST_TEST(sb->token() > sa.token());
        co_await sb->release();
        co_await a.close();
        co_await b.close();
    });
    ca.close();
    cb.close();

    auto status = agent.stop(SIGTERM, 5000ms);
    BOOST_REQUIRE(status.has_value());
    BOOST_TEST((WIFEXITED(*status) && WEXITSTATUS(*status) == 0));
    BOOST_TEST(::access(path.c_str(), F_OK) != 0, "the agent left its socket file behind");
}

BOOST_AUTO_TEST_CASE(a_unix_address_on_a_file_that_is_not_a_socket_is_refused_and_the_file_kept) {
    auto const path = socket_path("not-a-socket");
    {
        std::ofstream f(path);
        f << "precious";
    }
    tenure::itest::agent_options ao;
    ao.http_addr = "unix://" + path;
    BOOST_CHECK_EXCEPTION(tenure::itest::agent_process{ao}, std::runtime_error, [](std::runtime_error const& e) {
        return std::string_view(e.what()).find("the path exists and is not a socket") != std::string_view::npos;
    });
    std::ifstream f(path);
    std::string content;
    f >> content;
    BOOST_TEST(content == "precious");
    ::unlink(path.c_str());

    // Neither the agent nor the client takes a relative path.
    asio::io_context io;
    auto client_for = [&](std::string address) {
        consul::client_config c;
        c.address = std::move(address);
        return consul::client(io.get_executor(), c);
    };
    BOOST_CHECK_THROW(client_for("unix://relative.sock"), boost::system::system_error);
    BOOST_CHECK_THROW(client_for("unix://"), boost::system::system_error);
    BOOST_CHECK_THROW(client_for("unix:///" + std::string(120, 'a')), boost::system::system_error);  // > sun_path
    BOOST_TEST(client_for("UNIX:///run/x.sock").config().address == "unix:///run/x.sock");

    // A socket nobody listens on: the request fails, and the error names the
    // socket (the api_error's message: the client's coroutine throws it).
    auto const nobody = socket_path("nobody");
    auto lonely = client_for("unix://" + nobody);
    std::string what;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
            try {
                co_await tenure::detail::coro(lonely).agent_self();
            } catch (std::exception const& e) {
                what = e.what();
            }
        },
        asio::detached);
    io.run_for(5s);
    BOOST_TEST(what.find("unix://" + nobody) != std::string::npos, what);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(release_retry)

BOOST_AUTO_TEST_CASE(a_release_answered_429_is_sent_again_and_frees_the_key) {
    // Two requests per second per connection, a burst of six: the session,
    // the read and the lock take three, then reads drain the connection's
    // bucket, so the release meets a 429 and must come back once a token has
    // refilled (500 ms). Given up, the key would stay held until the session
    // ended.
    tenure::itest::agent_options ao;
    ao.extra_args = {"-http-rate-per-conn", "2", "-http-burst-per-conn", "6"};
    tenure::itest::agent_process agent(ao);
    asio::io_context io;
    consul::client_config cc;
    cc.address = agent.address();
    cc.request_timeout = 2000ms;
    auto const ex = tenure::itest::test_executor(io);
    consul::client c(ex, cc), fresh(ex, cc);
    run_on(io, ex, [&]() -> asio::awaitable<void> {
        auto s = co_await tenure::session::create(c, opts("rate-limited", 10s, 0s));
        tenure::election_options eo;
        eo.monitor_delay = 1h;  // no monitor query on the limited connection meanwhile
        tenure::election e(s, "itest/rate-limited", "a", eo);
        auto scope = co_await e.acquire();
        BOOST_REQUIRE(scope.held());
        BOOST_TEST(c.open_connections() == 1u);  // one connection, one bucket
        bool refused = false;
        for (int i = 0; i < 20 && !refused; ++i) {
            try {
                co_await tenure::detail::coro(c).kv_get("itest/rate-limited");  // throws api_error (its status)
            } catch (consul::api_error const& x) {
                BOOST_REQUIRE(x.http_status() == 429u);
                refused = true;
            }
        }
        BOOST_REQUIRE(refused);
        co_await scope.release();  // refused first, then sent again
        BOOST_TEST(!scope.held());
        // Another client's connection has a bucket of its own.
        auto kv = co_await fresh.kv_get("itest/rate-limited");
        BOOST_REQUIRE(kv.value.has_value());
        BOOST_TEST(kv.value->session.empty(), "still held by " << kv.value->session);
    });
    c.close();
    fresh.close();
}

BOOST_AUTO_TEST_SUITE_END()

