// The shared watch per prefix (src/consul/watch_hub.cpp) and elections that
// use it (election_options::shared_watch), against the real `tenure agent`
// binary over HTTP: fan-out to many waiters, the index rule (a snapshot older
// than what a waiter knows never answers it), waiters joining and leaving,
// leader monitors on the hub, and a capped connection pool.

// g++ 12 false positive on Asio's coroutine frame allocator (fixed in g++ 13).
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include "agent_process.hpp"
#include "http_client.hpp"
#include "run_on.hpp"

#include "consul/watch_hub.hpp"

#include <tenure/consul/client.hpp>
#include <tenure/election.hpp>

#include <boost/asio.hpp>
#include <boost/test/unit_test.hpp>

#include <functional>
#include <iostream>

namespace asio = boost::asio;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;
namespace consul = tenure::consul;
using tenure::detail::kv_watch_hub;

namespace {

struct hub_fixture {
    tenure::itest::agent_process agent{[] {
        tenure::itest::agent_options o;
        o.session_ttl_min = "100ms";
        return o;
    }()};
    asio::io_context io;

    std::unique_ptr<consul::client> make_client(std::size_t max_connections = 0) {
        consul::client_config c;
        c.address = "http://127.0.0.1:" + std::to_string(agent.port());
        c.request_timeout = 5000ms;
        c.max_connections = max_connections;
        return std::make_unique<consul::client>(io.get_executor(), c);
    }

    void run(std::function<asio::awaitable<void>()> body, steady::duration limit = 60s) {
        tenure::itest::run_on(io, std::move(body), limit);
    }
};

tenure::session_options opts(std::string name) {
    tenure::session_options o;
    o.name = std::move(name);
    o.ttl = 10s;
    o.lock_delay = 0ms;
    return o;
}

// Yields to the io_context until `pred` holds (bounded by the test's limit).
// UNTIL(cond) names the predicate first: g++ 12 destroys a lambda converted to
// std::function inside a co_await expression twice.
#define UNTIL(cond)                                  \
    do {                                             \
        std::function<bool()> until_pred_ = [&] { return (cond); }; \
        co_await until(until_pred_);                 \
    } while (0)

asio::awaitable<void> until(std::function<bool()> const& pred) {
    asio::steady_timer t(co_await asio::this_coro::executor);
    while (!pred()) {
        t.expires_after(1ms);
        co_await t.async_wait(asio::use_awaitable);
    }
}

// `session` leads `<prefix>job0` .. `<prefix>job<n-1>`, one after another,
// each on the prefix's shared watch.
asio::awaitable<std::vector<tenure::leadership_scope>> lead_each(tenure::session& session, std::string prefix,
                                                                 int n, std::string name) {
    tenure::election_options eo;
    eo.shared_watch = prefix;
    std::vector<tenure::leadership_scope> scopes(n);
    for (int i = 0; i < n; ++i) {
        tenure::election e(session, prefix + "job" + std::to_string(i), name, eo);
        scopes[i] = co_await e.acquire();
        BOOST_REQUIRE(scopes[i].held());
    }
    co_return scopes;
}

}  // namespace

BOOST_FIXTURE_TEST_SUITE(watch_hub, hub_fixture)

// One change wakes exactly the waiters of the changed key, however many wait.
BOOST_AUTO_TEST_CASE(fan_out_wakes_only_the_changed_keys_waiters) {
    run([&]() -> asio::awaitable<void> {
        auto c = make_client();
        for (int i = 0; i < 20; ++i) co_await c->kv_put("fan/k" + std::to_string(i), std::string("v0"));
        auto hub = kv_watch_hub::get(*c, "fan/");
        BOOST_CHECK(kv_watch_hub::get(*c, "fan/") == hub);  // one hub per prefix and client

        // The first answer comes from the first snapshot.
        auto first = (co_await hub->changed("fan/k0", 0, std::nullopt)).value();
        BOOST_REQUIRE(first.pair);
        BOOST_CHECK_EQUAL(first.pair->value.value_or(""), "v0");

        // 5 waiters on each of k0..k3 (20 in all), each knowing the current state.
        int woken[4] = {0, 0, 0, 0};
        std::uint64_t woken_index[4] = {0, 0, 0, 0};
        for (int k = 0; k < 4; ++k) {
            auto s = *hub->current("fan/k" + std::to_string(k));
            for (int n = 0; n < 5; ++n) {
                auto key = "fan/k" + std::to_string(k);
                auto known = kv_watch_hub::known_state{true, s.pair->modify_index};
                asio::co_spawn(
                    io,
                    [&, hub, key, known, k, idx = s.index]() -> asio::awaitable<void> {
                        auto r = (co_await hub->changed(key, idx, known)).value();
                        ++woken[k];
                        woken_index[k] = r.pair ? r.pair->modify_index : 0;
                    },
                    asio::detached);
            }
        }
        UNTIL(hub->waiters() == 20);

        // A change to an unwatched key: a new snapshot, nobody woken.
        auto const snaps = hub->snapshots();
        co_await c->kv_put("fan/k10", std::string("v1"));
        UNTIL(hub->snapshots() > snaps);
        BOOST_CHECK_EQUAL(woken[0] + woken[1] + woken[2] + woken[3], 0);
        BOOST_CHECK_EQUAL(hub->waiters(), 20u);

        // k1 changes: its five waiters wake with the new state, the others wait.
        co_await c->kv_put("fan/k1", std::string("v1"));
        UNTIL(woken[1] == 5);
        auto now = co_await c->kv_get("fan/k1");
        BOOST_CHECK_EQUAL(woken_index[1], now.value->modify_index);
        BOOST_CHECK_EQUAL(woken[0] + woken[2] + woken[3], 0);
        BOOST_CHECK_EQUAL(hub->waiters(), 15u);

        // k2 deleted: its waiters wake with "absent".
        co_await c->kv_delete("fan/k2");
        UNTIL(woken[2] == 5);
        BOOST_CHECK_EQUAL(woken_index[2], 0u);
        BOOST_CHECK_EQUAL(woken[0] + woken[3], 0);
        // Later snapshots leave the keys they did not change undecoded: the
        // hub still holds them whole, and nothing of a deleted key.
        auto const kept = hub->current("fan/k5");
        BOOST_REQUIRE(kept && kept->pair);
        BOOST_CHECK_EQUAL(kept->pair->value.value_or(""), "v0");
        BOOST_CHECK_EQUAL(kept->pair->modify_index, (co_await c->kv_get("fan/k5")).value->modify_index);
        BOOST_CHECK_EQUAL(hub->current("fan/k1")->pair->value.value_or(""), "v1");
        BOOST_CHECK(!hub->current("fan/k2")->pair);

        // One blocking query served them all: the client never needed more
        // than the hub's connection and one for the writes.
        BOOST_CHECK_LE(c->open_connections(), 3u);
        co_await c->kv_put("fan/k0", std::string("v2"));
        co_await c->kv_put("fan/k3", std::string("v2"));
        UNTIL(woken[0] == 5 && woken[3] == 5);
        BOOST_CHECK_EQUAL(hub->waiters(), 0u);
    });
}

// A waiter that knows a newer state than the hub's snapshot (it just wrote
// the key itself) is never answered by the older snapshot.
BOOST_AUTO_TEST_CASE(index_rule_no_answer_from_an_older_snapshot) {
    run([&]() -> asio::awaitable<void> {
        auto c = make_client();
        co_await c->kv_put("idx/a", std::string("1"));
        auto hub = kv_watch_hub::get(*c, "idx/");
        auto s1 = (co_await hub->changed("idx/a", 0, std::nullopt)).value();
        BOOST_REQUIRE(s1.pair);
        BOOST_CHECK_GE(s1.index, s1.pair->modify_index);

        // Keep the hub's query parked with a waiter on another key.
        bool other_woken = false;
        asio::co_spawn(
            io,
            [&, hub]() -> asio::awaitable<void> {
                auto const absent = kv_watch_hub::known_state{false, 0};
                co_await hub->changed("idx/other", 0, absent);
                other_woken = true;
            },
            asio::detached);
        UNTIL(hub->waiters() == 1);

        // Write the key, then wait knowing that write: the hub's snapshot at
        // s1.index shows the older ModifyIndex, which differs from what we
        // know; it must not answer (its index is below ours).
        co_await c->kv_put("idx/a", std::string("2"));
        auto mine = co_await c->kv_get("idx/a");
        auto const m2 = mine.value->modify_index;
        BOOST_REQUIRE_GT(m2, s1.index);
        std::optional<kv_watch_hub::key_state> answer;
        asio::co_spawn(
            io,
            [&, hub]() -> asio::awaitable<void> {
                auto const known_m2 = kv_watch_hub::known_state{true, m2};
                answer = co_await hub->changed("idx/a", m2, known_m2);
            },
            asio::detached);
        // The hub catches up to m2 (our own write woke its query) and still
        // does not answer: the state equals what we know.
        UNTIL(hub->index() >= m2);
        UNTIL(hub->waiters() == 2);
        BOOST_CHECK(!answer);

        // The next write answers, with a snapshot at least as new as it.
        co_await c->kv_put("idx/a", std::string("3"));
        UNTIL(answer.has_value());
        BOOST_REQUIRE(answer->pair);
        BOOST_CHECK_EQUAL(answer->pair->value.value_or(""), "3");
        BOOST_CHECK_GT(answer->pair->modify_index, m2);
        BOOST_CHECK_GE(answer->index, answer->pair->modify_index);
        BOOST_CHECK(!other_woken);

        // A key created under the prefix answers a waiter that knew it absent.
        co_await c->kv_put("idx/other", std::string("x"));
        UNTIL(other_woken);
    });
}

// A waiter whose min_index is past the hub's snapshot is looked at again by
// the first snapshot that reaches it, even when its own key did not move in
// that snapshot: here it knows the key absent (stale knowledge) with the
// index of a write outside the prefix, and a write to another key of the
// prefix brings the snapshot that answers it.
BOOST_AUTO_TEST_CASE(a_late_enough_snapshot_answers_though_the_key_did_not_move) {
    run([&]() -> asio::awaitable<void> {
        auto c = make_client();
        co_await c->kv_put("pend/b", std::string("1"));
        auto hub = kv_watch_hub::get(*c, "pend/");
        auto s = (co_await hub->changed("pend/b", 0, std::nullopt)).value();
        BOOST_REQUIRE(s.pair);

        bool other_woken = false;  // keeps the hub's query parked
        asio::co_spawn(
            io,
            [&, hub]() -> asio::awaitable<void> {
                auto const absent = kv_watch_hub::known_state{false, 0};
                co_await hub->changed("pend/other", 0, absent);
                other_woken = true;
            },
            asio::detached);
        UNTIL(hub->waiters() == 1);

        co_await c->kv_put("elsewhere/x", std::string("1"));
        auto w = co_await c->kv_get("elsewhere/x");
        auto const beyond = w.value->modify_index;
        BOOST_REQUIRE_GT(beyond, hub->index());

        std::optional<kv_watch_hub::key_state> answer;
        asio::co_spawn(
            io,
            [&, hub]() -> asio::awaitable<void> {
                auto const absent = kv_watch_hub::known_state{false, 0};
                answer = co_await hub->changed("pend/b", beyond, absent);
            },
            asio::detached);
        UNTIL(hub->waiters() == 2);
        BOOST_CHECK(!answer);  // the snapshot is older than what it knows

        auto const snaps = hub->snapshots();
        co_await c->kv_put("pend/c", std::string("1"));
        UNTIL(answer.has_value());
        BOOST_CHECK_GT(hub->snapshots(), snaps);
        BOOST_REQUIRE(answer->pair);
        BOOST_CHECK_EQUAL(answer->pair->modify_index, s.pair->modify_index);  // unchanged
        BOOST_CHECK_GE(answer->index, beyond);
        BOOST_CHECK(!other_woken);
        co_await c->kv_put("pend/other", std::string("x"));
        UNTIL(other_woken);
    });
}

// Waiters come and go: a cancelled waiter leaves the hub at once, the hub's
// query ends when nobody waits, and a later waiter starts it again with a
// fresh snapshot (never the stale one).
BOOST_AUTO_TEST_CASE(waiters_join_and_leave) {
    run([&]() -> asio::awaitable<void> {
        auto c = make_client();
        co_await c->kv_put("jl/a", std::string("1"));
        auto hub = kv_watch_hub::get(*c, "jl/");
        auto s = (co_await hub->changed("jl/a", 0, std::nullopt)).value();
        auto known = kv_watch_hub::known_state{true, s.pair->modify_index};

        // Cancelled, the wait ends with no answer and no exception (every
        // released leader's monitor ends this way).
        asio::cancellation_signal stop;
        bool ended = false, answered = true;
        asio::co_spawn(
            io,
            [&, hub]() -> asio::awaitable<void> {
                answered = (co_await hub->changed("jl/a", s.index, known)).has_value();
            },
            asio::bind_cancellation_slot(stop.slot(), [&](std::exception_ptr e) {
                ended = true;
                BOOST_CHECK(e == nullptr);
            }));
        UNTIL(hub->waiters() == 1);
        stop.emit(asio::cancellation_type::terminal);
        UNTIL(ended);
        BOOST_CHECK(!answered);
        BOOST_CHECK_EQUAL(hub->waiters(), 0u);

        // Nobody waits: the next change ends the hub's query and drops the
        // snapshot; the change after that must still be seen by a newcomer.
        auto const snaps = hub->snapshots();
        co_await c->kv_put("jl/a", std::string("2"));
        UNTIL(hub->snapshots() > snaps || !hub->current("jl/a"));
        UNTIL(!hub->current("jl/a"));
        co_await c->kv_put("jl/a", std::string("3"));
        auto fresh = (co_await hub->changed("jl/a", 0, std::nullopt)).value();
        BOOST_REQUIRE(fresh.pair);
        BOOST_CHECK_EQUAL(fresh.pair->value.value_or(""), "3");

        // The hub is shared while in use and forgotten afterwards.
        std::weak_ptr<kv_watch_hub> weak = hub;
        hub.reset();
        UNTIL(weak.expired());
        BOOST_CHECK(kv_watch_hub::get(*c, "jl/") != nullptr);
    });
}

// A watch (how a leader's monitor parks on the hub): no coroutine, a notice
// posted when the key changes, the answer taken with end_watch(); one ended
// before any change is never told.
BOOST_AUTO_TEST_CASE(a_watch_is_told_of_its_key_and_nothing_else) {
    run([&]() -> asio::awaitable<void> {
        auto c = make_client();
        co_await c->kv_put("w/a", std::string("1"));
        co_await c->kv_put("w/b", std::string("1"));
        auto hub = kv_watch_hub::get(*c, "w/");
        auto s = (co_await hub->changed("w/a", 0, std::nullopt)).value();
        auto const known = kv_watch_hub::known_state{true, s.pair->modify_index};

        int told = 0;
        auto w = hub->watch("w/a", s.index, known, [&] { ++told; });
        BOOST_CHECK_EQUAL(hub->waiters(), 1u);
        auto const snaps = hub->snapshots();
        co_await c->kv_put("w/b", std::string("2"));  // another key: a snapshot, no notice
        UNTIL(hub->snapshots() > snaps);
        BOOST_CHECK_EQUAL(told, 0);

        co_await c->kv_put("w/a", std::string("2"));
        UNTIL(told == 1);
        auto answer = hub->end_watch(std::move(w));
        BOOST_REQUIRE(answer && answer->pair);
        BOOST_CHECK_EQUAL(answer->pair->value.value_or(""), "2");
        BOOST_CHECK_EQUAL(hub->waiters(), 0u);

        // Known out of date at registration: told at once (posted, not inline).
        int stale_told = 0;
        auto stale = hub->watch("w/a", s.index, known, [&] { ++stale_told; });
        BOOST_CHECK_EQUAL(stale_told, 0);
        UNTIL(stale_told == 1);
        BOOST_CHECK_EQUAL(hub->end_watch(std::move(stale))->pair->value.value_or(""), "2");

        // Ended before any change: no answer, and never told.
        auto const now = *hub->current("w/a");
        int ended_told = 0;
        auto ended = hub->watch("w/a", now.index, kv_watch_hub::known_state{true, now.pair->modify_index},
                                [&] { ++ended_told; });
        BOOST_CHECK(!hub->end_watch(std::move(ended)));
        BOOST_CHECK_EQUAL(hub->waiters(), 0u);
        auto keep = hub->watch("w/b", 0, std::nullopt, [] {});  // keeps the hub's query going
        auto const before = hub->snapshots();
        co_await c->kv_put("w/a", std::string("3"));
        UNTIL(hub->snapshots() > before);
        BOOST_CHECK_EQUAL(ended_told, 0);
        hub->end_watch(std::move(keep));
    });
}

// Elections on a shared watch: 30 keys, two candidates each. A takes all,
// B's 30 followers share one query; A's releases hand every key to B, and
// forced changes reach the leaders' monitors through the hub.
BOOST_AUTO_TEST_CASE(elections_share_one_query_per_prefix) {
    run([&]() -> asio::awaitable<void> {
        // Four connections per client: if followers or monitors held a
        // blocking query each, the 30 of them would starve the pool.
        auto ca = make_client(4);
        auto cb = make_client(4);
        auto sa = co_await tenure::session::create(*ca, opts("a"));
        auto sb = co_await tenure::session::create(*cb, opts("b"));
        constexpr int n = 30;
        tenure::election_options eo;
        eo.shared_watch = "many/";
        auto a_scopes = co_await lead_each(sa, "many/", n, "a");
        std::vector<tenure::leadership_scope> b_scopes(n);
        int b_led = 0;
        std::vector<std::unique_ptr<tenure::election>> b_elections;
        for (int i = 0; i < n; ++i) {
            b_elections.push_back(std::make_unique<tenure::election>(sb, "many/job" + std::to_string(i), "b", eo));
            asio::co_spawn(
                io,
                [&, i]() -> asio::awaitable<void> {
                    b_scopes[i] = co_await b_elections[i]->acquire();
                    ++b_led;
                },
                asio::detached);
        }
        // B's followers and A's monitors: one hub each, one query each.
        auto hub_b = kv_watch_hub::get(*cb, "many/");
        UNTIL(hub_b->waiters() == n);
        BOOST_CHECK_EQUAL(b_led, 0);

        // Half released cleanly: exactly those move to B, with larger tokens.
        for (int i = 0; i < n / 2; ++i) co_await a_scopes[i].release();
        UNTIL(b_led == n / 2);
        for (int i = 0; i < n / 2; ++i) {
            BOOST_CHECK(b_scopes[i].held());
            BOOST_CHECK_GT(b_scopes[i].token(), a_scopes[i].token());
        }
        for (int i = n / 2; i < n; ++i) BOOST_CHECK(a_scopes[i].held());

        // A force release of one of A's keys by someone else: A's monitor
        // (a hub waiter) reports the loss, B takes the key.
        auto const victim = n - 1;
        auto const key = "many/job" + std::to_string(victim);
        co_await ca->kv_release(key, sa.id(), std::string("a"), consul::lock_flag_value);  // as a foreign tool would
        UNTIL(a_scopes[victim].lost());
        BOOST_CHECK(a_scopes[victim].loss_reason() == make_error_code(tenure::error::released_by_other));
        UNTIL(b_led == n / 2 + 1);

        // The rest go when A's session closes.
        co_await sa.close();
        UNTIL(b_led == n);
        co_await sb.close();
    });
}

// 100 followers that start at once and find their keys held by one session
// learn its LockDelay with one read of that session: those that ask while
// the read is in flight wait for its answer (they used to send one each).
BOOST_AUTO_TEST_CASE(followers_of_one_holder_read_its_session_once) {
    tenure::itest::http_client http("127.0.0.1", agent.port());
    auto session_reads = [&] {
        auto const text = http.get("/v1/agent/metrics?format=prometheus").body;
        std::string const sample = "tenure_http_requests_total{method=\"GET\",endpoint=\"session\",code=\"200\"} ";
        auto const at = text.find(sample);
        return at == std::string::npos ? 0.0 : std::stod(text.substr(at + sample.size()));
    };
    run([&]() -> asio::awaitable<void> {
        auto ca = make_client();
        auto cb = make_client(4);
        auto sa = co_await tenure::session::create(*ca, opts("holder"));
        auto sb = co_await tenure::session::create(*cb, opts("followers"));
        constexpr int n = 100;
        tenure::election_options eo;
        eo.shared_watch = "one-holder/";
        auto const a_scopes = co_await lead_each(sa, "one-holder/", n, "a");
        double const before = session_reads();
        std::vector<std::unique_ptr<tenure::election>> b_elections;
        for (int i = 0; i < n; ++i) {
            b_elections.push_back(
                std::make_unique<tenure::election>(sb, "one-holder/job" + std::to_string(i), "b", eo));
            asio::co_spawn(io, b_elections[i]->acquire(asio::use_awaitable), asio::detached);
        }
        // Registered (in the shared watch's snapshot) and parked on it: each
        // has asked the holder's LockDelay by then. (Waiters alone are not
        // enough: a follower's first read waits on the hub too.)
        auto hub_b = kv_watch_hub::get(*cb, "one-holder/");
        auto const parked = [&] {
            if (hub_b->waiters() != n) return false;
            for (int i = 0; i < n; ++i) {
                auto entry = hub_b->current("one-holder/job" + std::to_string(i) + ".candidates/" + sb.id());
                if (!entry || !entry->pair) return false;
            }
            return true;
        };
        UNTIL(parked());
        BOOST_CHECK_EQUAL(session_reads() - before, 1.0);
        co_await sb.close();
        co_await sa.close();
    });
}

// A capped pool: 200 elections on one client with max_connections 4 all lead,
// and the pool never opens a fifth connection.
BOOST_AUTO_TEST_CASE(capped_pool_serves_many_elections) {
    run([&]() -> asio::awaitable<void> {
        auto c = make_client(4);
        auto s = co_await tenure::session::create(*c, opts("capped"));
        constexpr int n = 200;
        tenure::election_options eo;
        eo.shared_watch = "capped/";
        std::vector<std::unique_ptr<tenure::election>> elections;
        std::vector<tenure::leadership_scope> scopes(n);
        int led = 0;
        std::size_t most = 0;
        for (int i = 0; i < n; ++i) {
            elections.push_back(std::make_unique<tenure::election>(s, "capped/e" + std::to_string(i), "x", eo));
            asio::co_spawn(
                io,
                [&, i]() -> asio::awaitable<void> {
                    scopes[i] = co_await elections[i]->acquire();
                    ++led;
                },
                asio::detached);
        }
        std::function<bool()> all_led = [&] {
            most = std::max(most, c->open_connections());
            return led == n;
        };
        co_await until(all_led);
        std::cout << "capped pool: " << n << " elections led, at most " << most << " connections open\n";
        BOOST_CHECK_LE(most, 4u);
        for (auto& sc : scopes) BOOST_CHECK(sc.held());
        co_await s.close();
    });
}

BOOST_AUTO_TEST_SUITE_END()
