// tenure::semaphore and the fencing helpers against the real `tenure agent`
// binary over HTTP.
//
// The semaphore must speak the Go api.Semaphore protocol byte for byte, so
// the tests read the keys back raw: the contender keys, and `.lock` as Go's
// compact json.Marshal. Every test runs one io_context (one thread, or N with
// TENURE_TEST_THREADS=N, the objects on one strand: run_on.hpp) and awaits
// events; the fixed sleeps only assert that something does NOT happen.

// g++ 12 false positive on Asio's coroutine frame allocator (fixed in g++ 13).
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include "agent_process.hpp"
#include "awaiting.hpp"
#include "run_on.hpp"

#include <tenure/consul/client.hpp>
#include <tenure/election.hpp>
#include <tenure/consul/fenced_put.hpp>
#include <tenure/fence.hpp>
#include <tenure/semaphore.hpp>

#include <boost/asio.hpp>
#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <functional>
#include <iostream>
#include <set>

namespace asio = boost::asio;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;
using boost::system::error_code;
namespace consul = tenure::consul;

namespace {

using tenure::itest::pause;

struct semaphore_fixture {
    tenure::itest::agent_process agent{[] {
        tenure::itest::agent_options o;
        o.session_ttl_min = "100ms";
        return o;
    }()};
    asio::io_context io;
    // What the test's clients, timers and coroutines are made on (a strand
    // with TENURE_TEST_THREADS > 1; run_on.hpp).
    asio::any_io_executor ex = tenure::itest::test_executor(io);

    std::string url() const { return "http://127.0.0.1:" + std::to_string(agent.port()); }

    std::unique_ptr<consul::client> make_client() {
        consul::client_config c;
        c.address = url();
        c.request_timeout = 2000ms;
        return std::make_unique<consul::client>(ex, c);
    }

    // Runs `body` to completion on the io_context (bounded, so a bug fails the
    // test instead of hanging it).
    void run(std::function<asio::awaitable<void>()> body, steady::duration limit = 20s) {
        tenure::itest::run_on(io, ex, std::move(body), limit);
    }
};

// Sessions as the Go api and `consul lock -n` create them for a semaphore.
tenure::session_options sem_opts(std::string name) {
    tenure::session_options o;
    o.name = std::move(name);
    o.ttl = 2s;
    o.lock_delay = 0ms;
    o.behavior = consul::session_behavior::delete_keys;
    return o;
}

// Go's json.Marshal of semaphoreLock for these (already sorted) holders.
std::string go_lock(int limit, std::vector<std::string> holders) {
    std::sort(holders.begin(), holders.end());
    std::string s = "{\"Limit\":" + std::to_string(limit) + ",\"Holders\":{";
    for (std::size_t i = 0; i < holders.size(); ++i) s += (i ? ",\"" : "\"") + holders[i] + "\":true";
    return s + "}}";
}

std::set<std::string> holders_of(std::string const& lock_value) {
    std::set<std::string> out;
    auto v = boost::json::parse(lock_value);
    for (auto const& h : v.as_object().at("Holders").as_object()) out.insert(std::string(h.key()));
    return out;
}

// Work that runs until cancelled.
asio::awaitable<void> endless_work(bool& running) {
    running = true;
    struct on_exit {
        bool& r;
        ~on_exit() { r = false; }
    } guard{running};
    asio::steady_timer t(co_await asio::this_coro::executor, steady::time_point::max());
    co_await t.async_wait(asio::use_awaitable);
}

}  // namespace

BOOST_FIXTURE_TEST_SUITE(semaphore_core, semaphore_fixture)

BOOST_AUTO_TEST_CASE(six_contenders_limit_three_never_exceed_three_and_all_hold) {
    auto client = make_client();
    run([&]() -> asio::awaitable<void> {
        std::string const prefix = "itest/sem/six";
        std::string const lock_key = prefix + "/.lock";
        constexpr int n = 6, limit = 3;
        std::vector<tenure::session> sessions;
        for (int i = 0; i < n; ++i) {
            auto o = sem_opts("c" + std::to_string(i));
            sessions.push_back(co_await tenure::session::create(*client, o));
        }
        std::vector<std::unique_ptr<tenure::semaphore>> sems;
        for (int i = 0; i < n; ++i)
            sems.push_back(std::make_unique<tenure::semaphore>(sessions[i], prefix, limit, "c" + std::to_string(i)));

        // The server's view at every change of `.lock`.
        std::size_t server_max = 0;
        int server_versions = 0;
        bool watching = true;
        asio::cancellation_signal stop_watch;
        asio::co_spawn(
            ex,
            [&]() -> asio::awaitable<void> {
                std::uint64_t index = 0;
                while (watching) {
                    consul::read_options ro;
                    ro.index = index;
                    ro.wait = 10s;
                    auto r = co_await client->kv_get(lock_key, ro);
                    index = consul::next_wait_index(index, r.meta.index);
                    if (!r.value || !r.value->value) continue;
                    auto h = holders_of(*r.value->value);
                    ++server_versions;
                    server_max = std::max(server_max, h.size());
                    BOOST_TEST(h.size() <= std::size_t(limit));
                }
            },
            asio::bind_cancellation_slot(stop_watch.slot(), asio::detached));

        // Every contender campaigns at once; the local view at every change.
        std::vector<std::optional<tenure::leadership_scope>> permits(n);
        std::vector<int> admitted;  // in admission order
        int local_max = 0;
        asio::steady_timer changed(ex, steady::time_point::max());
        auto live = [&] {
            return static_cast<int>(std::count_if(permits.begin(), permits.end(),
                                                  [](auto const& p) { return p && p->held(); }));
        };
        for (int i = 0; i < n; ++i) {
            sems[i]->acquire([&, i](error_code ec, tenure::leadership_scope s) {
                BOOST_REQUIRE_MESSAGE(!ec, ec.message());
                permits[i] = std::move(s);
                admitted.push_back(i);
                local_max = std::max(local_max, live());
                BOOST_TEST(live() <= limit);
                changed.cancel();
            });
        }

        // Check the server against the local permits, then free one slot;
        // each release admits exactly one waiter.
        std::uint64_t highest_token = 0;
        for (std::size_t expected = limit; expected <= std::size_t(n); ++expected) {
            while (admitted.size() < expected) co_await changed.async_wait(asio::as_tuple(asio::use_awaitable));
            BOOST_TEST(live() == limit);
            auto lk = co_await client->kv_get(lock_key);
            BOOST_REQUIRE(lk.value && lk.value->value);
            std::set<std::string> mine;
            for (auto const& p : permits)
                if (p && p->held()) mine.insert(p->session_id());
            BOOST_TEST((holders_of(*lk.value->value) == mine));
            auto st = co_await sems[0]->state();
            BOOST_TEST(st.limit == limit);
            BOOST_TEST(st.holders.size() == std::size_t(limit));
            BOOST_TEST(st.contenders.size() == std::size_t(n) - (expected - limit));
            // Admissions after a release come after every earlier token.
            int newest = admitted.back();
            if (expected > std::size_t(limit)) BOOST_TEST(permits[newest]->token() > highest_token);
            for (int i : admitted) highest_token = std::max(highest_token, permits[i]->token());
            if (expected == std::size_t(n)) break;
            // Nobody else gets in while the semaphore is full.
            co_await pause(50ms);
            BOOST_TEST(admitted.size() == expected);
            int oldest = *std::find_if(admitted.begin(), admitted.end(), [&](int i) { return permits[i]->held(); });
            co_await permits[oldest]->release();
        }
        BOOST_TEST(admitted.size() == std::size_t(n));  // all six held in turn
        std::set<int> distinct(admitted.begin(), admitted.end());
        BOOST_TEST(distinct.size() == std::size_t(n));
        for (auto& p : permits) co_await p->release();
        auto lk = co_await client->kv_get(lock_key);
        BOOST_REQUIRE(lk.value && lk.value->value);
        BOOST_TEST(*lk.value->value == go_lock(limit, {}));
        auto left = co_await client->kv_list(prefix);
        BOOST_TEST(left.value.size() == 1u);  // only `.lock`: every contender key was deleted
        std::cout << "semaphore 6/3: local max " << local_max << ", server max " << server_max << " over "
                  << server_versions << " observed versions of .lock\n";
        BOOST_TEST(local_max == limit);
        BOOST_TEST(server_max <= std::size_t(limit));
        watching = false;
        stop_watch.emit(asio::cancellation_type::terminal);
        for (auto& s : sessions) co_await s.close();
    });
}

BOOST_AUTO_TEST_CASE(keys_and_lock_value_are_go_api_byte_for_byte) {
    auto client = make_client();
    run([&]() -> asio::awaitable<void> {
        std::string const prefix = "itest/sem/bytes", lock_key = prefix + "/.lock";
        auto oa = sem_opts("a"), ob = sem_opts("b");
        auto a = co_await tenure::session::create(*client, oa);
        auto b = co_await tenure::session::create(*client, ob);
        std::string const key_a = prefix + "/" + a.id();
        tenure::semaphore sa(a, prefix, 2, "alpha"), sb(b, prefix, 2, "beta");

        auto pa = co_await sa.acquire();
        BOOST_TEST(pa.held());
        BOOST_TEST(pa.key() == key_a);
        BOOST_TEST(pa.value() == "alpha");
        auto lock = co_await client->kv_get(lock_key);
        BOOST_REQUIRE(lock.value.has_value());
        BOOST_TEST(*lock.value->value == go_lock(2, {a.id()}));
        BOOST_TEST(lock.value->flags == 16210313421097356768ull);
        BOOST_TEST(lock.value->session.empty());  // never session-held
        BOOST_TEST(pa.token() == lock.value->modify_index);
        auto ca = co_await client->kv_get(pa.key());
        BOOST_REQUIRE(ca.value.has_value());
        BOOST_TEST(ca.value->session == a.id());
        BOOST_TEST(ca.value->flags == consul::semaphore_flag_value);
        BOOST_TEST(*ca.value->value == "alpha");

        auto pb = co_await sb.try_acquire();
        BOOST_TEST(pb.held());
        lock = co_await client->kv_get(lock_key);
        BOOST_TEST(*lock.value->value == go_lock(2, {a.id(), b.id()}));
        BOOST_TEST(pb.token() == lock.value->modify_index);
        BOOST_TEST(pb.token() > pa.token());
        auto st = co_await sa.state();
        std::vector<std::string> both{a.id(), b.id()};
        std::sort(both.begin(), both.end());
        BOOST_TEST(st.holders == both);
        BOOST_TEST(st.contenders == both);
        BOOST_TEST(st.limit == 2);
        BOOST_TEST(st.index == lock.value->modify_index);
        bool confirmed = co_await pa.confirm();
        BOOST_TEST(confirmed);

        co_await pa.release();  // remove ourselves from .lock, then delete the contender key
        lock = co_await client->kv_get(lock_key);
        BOOST_TEST(*lock.value->value == go_lock(2, {b.id()}));
        auto gone_a = co_await client->kv_get(key_a);
        BOOST_TEST(!gone_a.value.has_value());
        co_await pb.release();
        lock = co_await client->kv_get(lock_key);
        BOOST_TEST(*lock.value->value == R"({"Limit":2,"Holders":{}})");
        co_await a.close();
        co_await b.close();
    });
}

BOOST_AUTO_TEST_CASE(a_dead_holder_is_pruned_and_frees_its_slot) {
    auto client = make_client();
    run([&]() -> asio::awaitable<void> {
        std::string const prefix = "itest/sem/prune", lock_key = prefix + "/.lock";
        auto oa = sem_opts("a"), ob = sem_opts("b"), oc = sem_opts("c");
        auto a = co_await tenure::session::create(*client, oa);
        auto b = co_await tenure::session::create(*client, ob);
        auto c = co_await tenure::session::create(*client, oc);
        tenure::semaphore sa(a, prefix, 2), sb(b, prefix, 2), sc(c, prefix, 2);
        auto pa = co_await sa.acquire();
        auto pb = co_await sb.acquire();
        std::optional<tenure::leadership_scope> pc;
        asio::steady_timer got(ex, steady::time_point::max());
        sc.acquire([&](error_code ec, tenure::leadership_scope s) {
            BOOST_REQUIRE_MESSAGE(!ec, ec.message());
            pc = std::move(s);
            got.cancel();
        });
        co_await pause(100ms);
        BOOST_TEST(!pc.has_value());  // full: c waits

        // a's session dies on the server without releasing: Behavior=delete
        // deletes its contender key, and c prunes a from .lock.
        auto destroyed = steady::now();
        co_await client->session_destroy(a.id());
        while (!pc) co_await got.async_wait(asio::as_tuple(asio::use_awaitable));
        std::cout << "dead holder pruned, waiter admitted after "
                  << std::chrono::duration<double, std::milli>(steady::now() - destroyed).count() << " ms\n";
        BOOST_TEST(pc->held());
        auto [why] = co_await pa.wait_lost(asio::as_tuple(asio::deferred));
        BOOST_TEST((why == tenure::error::session_invalidated || why == tenure::error::key_deleted));
        auto lock = co_await client->kv_get(lock_key);
        BOOST_TEST(*lock.value->value == go_lock(2, {b.id(), c.id()}));
        std::string const key_a = prefix + "/" + a.id();
        auto gone_a = co_await client->kv_get(key_a);
        BOOST_TEST(!gone_a.value.has_value());
        co_await b.close();
        co_await c.close();
    });
}

BOOST_AUTO_TEST_CASE(a_contender_with_another_limit_is_refused) {
    auto client = make_client();
    run([&]() -> asio::awaitable<void> {
        std::string const prefix = "itest/sem/limit";
        auto oa = sem_opts("a"), ob = sem_opts("b");
        auto a = co_await tenure::session::create(*client, oa);
        auto b = co_await tenure::session::create(*client, ob);
        tenure::semaphore sa(a, prefix, 2), sb(b, prefix, 3);
        auto pa = co_await sa.acquire();
        auto [ec, pb] = co_await sb.acquire(asio::as_tuple(asio::use_awaitable));
        BOOST_TEST((ec == tenure::error::semaphore_limit_conflict));
        BOOST_TEST(ec.message().find("semaphore limit conflict") != std::string::npos);
        BOOST_TEST(!pb.held());
        // The refused contender took its entry away again.
        std::string const key_b = prefix + "/" + b.id();
        auto gone_b = co_await client->kv_get(key_b);
        BOOST_TEST(!gone_b.value.has_value());
        BOOST_TEST(pa.held());
        co_await a.close();
        co_await b.close();
    });
}

BOOST_AUTO_TEST_CASE(try_acquire_gives_an_empty_scope_when_full) {
    auto client = make_client();
    run([&]() -> asio::awaitable<void> {
        std::string const prefix = "itest/sem/try";
        auto oa = sem_opts("a"), ob = sem_opts("b");
        auto a = co_await tenure::session::create(*client, oa);
        auto b = co_await tenure::session::create(*client, ob);
        tenure::semaphore sa(a, prefix, 1), sb(b, prefix, 1);
        auto pa = co_await sa.try_acquire();
        BOOST_TEST(pa.held());
        auto pb = co_await sb.try_acquire();
        BOOST_TEST(!pb.held());
        std::string const key_b = prefix + "/" + b.id();
        auto gone_b = co_await client->kv_get(key_b);
        BOOST_TEST(!gone_b.value.has_value());
        co_await pa.release();
        pb = co_await sb.try_acquire();
        BOOST_TEST(pb.held());
        co_await a.close();
        co_await b.close();
    });
}

BOOST_AUTO_TEST_CASE(a_cancelled_wait_takes_its_contender_entry_away) {
    auto client = make_client();
    run([&]() -> asio::awaitable<void> {
        std::string const prefix = "itest/sem/cancel", lock_key = prefix + "/.lock";
        auto oa = sem_opts("a"), ob = sem_opts("b");
        auto a = co_await tenure::session::create(*client, oa);
        auto b = co_await tenure::session::create(*client, ob);
        std::string const key_b = prefix + "/" + b.id();
        tenure::semaphore sa(a, prefix, 1), sb(b, prefix, 1);
        auto pa = co_await sa.acquire();
        asio::cancellation_signal cancel;
        std::optional<error_code> result;
        asio::steady_timer done(ex, steady::time_point::max());
        sb.acquire(asio::bind_cancellation_slot(cancel.slot(), [&](error_code ec, tenure::leadership_scope s) {
            BOOST_TEST(!s.held());
            result = ec;
            done.cancel();
        }));
        // b waits with its contender entry in place.
        auto waiting = co_await client->kv_get(key_b);
        for (int i = 0; i < 100 && !waiting.value; ++i) {
            co_await pause(5ms);
            waiting = co_await client->kv_get(key_b);
        }
        BOOST_REQUIRE(waiting.value.has_value());
        BOOST_TEST(waiting.value->session == b.id());
        cancel.emit(asio::cancellation_type::terminal);
        while (!result) co_await done.async_wait(asio::as_tuple(asio::use_awaitable));
        BOOST_TEST((*result == asio::error::operation_aborted));
        auto gone_b = co_await client->kv_get(key_b);
        BOOST_TEST(!gone_b.value.has_value());
        auto lock = co_await client->kv_get(lock_key);
        BOOST_TEST(*lock.value->value == go_lock(1, {a.id()}));
        BOOST_TEST(pa.held());
        co_await a.close();
        co_await b.close();
    });
}

BOOST_AUTO_TEST_CASE(a_lock_and_a_semaphore_on_one_prefix_conflict) {
    auto client = make_client();
    run([&]() -> asio::awaitable<void> {
        auto oa = sem_opts("a"), ob = sem_opts("b");
        auto a = co_await tenure::session::create(*client, oa);
        auto b = co_await tenure::session::create(*client, ob);
        // `consul lock -n 1` uses prefix/.lock as a Lock key.
        tenure::election lock(a, "itest/sem/mixed1/.lock", "a");
        auto held = co_await lock.acquire();
        tenure::semaphore s1(b, "itest/sem/mixed1", 2);
        auto [ec1, p1] = co_await s1.acquire(asio::as_tuple(asio::use_awaitable));
        BOOST_TEST((ec1 == tenure::error::lock_conflict));
        BOOST_TEST(!p1.held());
        // And the other way round: a semaphore's .lock is no lock key.
        tenure::semaphore s2(b, "itest/sem/mixed2", 2);
        auto p2 = co_await s2.acquire();
        tenure::election lock2(a, "itest/sem/mixed2/.lock", "a");
        auto [ec2, l2] = co_await lock2.acquire(asio::as_tuple(asio::use_awaitable));
        BOOST_TEST((ec2 == tenure::error::lock_conflict));
        BOOST_TEST(!l2.held());
        BOOST_TEST(p2.held());
        co_await a.close();
        co_await b.close();
    });
}

BOOST_AUTO_TEST_CASE(a_permit_taken_away_by_force_cancels_the_work) {
    auto client = make_client();
    run([&]() -> asio::awaitable<void> {
        std::string const prefix = "itest/sem/force", lock_key = prefix + "/.lock";
        auto oa = sem_opts("a");
        auto a = co_await tenure::session::create(*client, oa);
        tenure::semaphore sa(a, prefix, 2);
        auto pa = co_await sa.acquire();
        bool running = false;
        asio::co_spawn(
            ex,
            [&]() -> asio::awaitable<void> {
                co_await pause(100ms);
                // An operator rewrites .lock without us (as Go's pruning would).
                auto lock = co_await client->kv_get(lock_key);
                consul::put_options po;
                po.flags = consul::semaphore_flag_value;
                po.cas = lock.value->modify_index;
                std::optional<std::string> empty = go_lock(2, {});
                bool rewritten = co_await client->kv_put(lock_key, empty, po);
                BOOST_TEST(rewritten);
            },
            asio::detached);
        bool finished = co_await pa.run(endless_work(running));
        BOOST_TEST(!finished);
        BOOST_TEST(!running);  // cancelled and finished
        BOOST_TEST((pa.loss_reason() == tenure::error::released_by_other));
        BOOST_TEST((a.state() != tenure::session_state::lost));  // the session lives on
        co_await a.close();
    });
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_FIXTURE_TEST_SUITE(fencing, semaphore_fixture)

BOOST_AUTO_TEST_CASE(fence_admits_the_new_leader_and_rejects_the_old_one) {
    auto client = make_client();
    run([&]() -> asio::awaitable<void> {
        auto oa = sem_opts("a"), ob = sem_opts("b");
        auto a = co_await tenure::session::create(*client, oa);
        auto b = co_await tenure::session::create(*client, ob);
        tenure::election ea(a, "itest/fence/leader", "a"), eb(b, "itest/fence/leader", "b");
        tenure::fence gate;
        auto la = co_await ea.acquire();
        auto old = la.fencing();
        BOOST_TEST(gate.admit(old));
        BOOST_TEST(gate.admit(old));  // the same term, again
        co_await la.release();
        auto lb = co_await eb.acquire();
        BOOST_TEST(lb.token() > old.value);
        BOOST_TEST(gate.admit(lb.fencing()));
        BOOST_TEST(!gate.admit(old));  // the deposed leader's late write
        BOOST_TEST(gate.highest("itest/fence/leader") == lb.token());
        co_await a.close();
        co_await b.close();
    });
}

BOOST_AUTO_TEST_CASE(fenced_put_commits_for_the_leader_and_is_refused_for_a_stale_one) {
    auto client = make_client();
    run([&]() -> asio::awaitable<void> {
        std::string const key = "itest/fenced/leader", data = "itest/fenced/data";
        auto oa = sem_opts("a"), ob = sem_opts("b");
        auto a = co_await tenure::session::create(*client, oa);
        auto b = co_await tenure::session::create(*client, ob);
        tenure::election ea(a, key, "a"), eb(b, key, "b");
        auto la = co_await ea.acquire();

        auto write = [&](std::string v) {
            consul::txn_op op;
            op.verb = "set";
            op.key = data;
            op.value = std::move(v);
            return std::vector<consul::txn_op>{op};
        };
        auto w1 = write("from-a");
        auto [ec1, ok1] = co_await consul::fenced_put(la, *client, w1, asio::as_tuple(asio::use_awaitable));
        BOOST_TEST(!ec1);
        BOOST_TEST(ok1);
        auto v1 = co_await client->kv_get(data);
        BOOST_TEST(*v1.value->value == "from-a");

        // The key moves to b while a has not noticed yet (or ignores it).
        std::optional<tenure::leadership_scope> lb;
        asio::steady_timer got(ex, steady::time_point::max());
        eb.acquire([&](error_code ec, tenure::leadership_scope s) {
            BOOST_REQUIRE(!ec);
            lb = std::move(s);
            got.cancel();
        });
        co_await client->kv_release(key, a.id(), std::nullopt, consul::lock_flag_value);
        while (!lb) co_await got.async_wait(asio::as_tuple(asio::use_awaitable));

        auto w2 = write("stale from-a");
        auto [ec2, ok2] = co_await consul::fenced_put(la, *client, w2, asio::as_tuple(asio::use_awaitable));
        BOOST_TEST((ec2 == tenure::error::not_held));
        BOOST_TEST(!ok2);
        auto v2 = co_await client->kv_get(data);
        BOOST_TEST(*v2.value->value == "from-a");  // nothing written

        auto w3 = write("from-b");
        auto [ec3, ok3] = co_await consul::fenced_put(*lb, *client, w3, asio::as_tuple(asio::use_awaitable));
        BOOST_TEST(!ec3);
        BOOST_TEST(ok3);
        auto v3 = co_await client->kv_get(data);
        BOOST_TEST(*v3.value->value == "from-b");

        // A failing write of the leader's own: guard held, nothing applied.
        consul::txn_op stale_cas;
        stale_cas.verb = "cas";
        stale_cas.key = data;
        stale_cas.value = "never";
        stale_cas.index = 1;
        std::vector<consul::txn_op> w4{stale_cas};
        auto [ec4, ok4] = co_await consul::fenced_put(*lb, *client, w4, asio::as_tuple(asio::use_awaitable));
        BOOST_TEST(!ec4);
        BOOST_TEST(!ok4);
        auto v4 = co_await client->kv_get(data);
        BOOST_TEST(*v4.value->value == "from-b");

        // An empty scope is refused locally.
        tenure::leadership_scope none;
        auto w5 = write("nobody");
        auto [ec5, ok5] = co_await consul::fenced_put(none, *client, w5, asio::as_tuple(asio::use_awaitable));
        BOOST_TEST((ec5 == tenure::error::not_held));
        BOOST_TEST(!ok5);
        co_await a.close();
        co_await b.close();
    });
}

BOOST_AUTO_TEST_SUITE_END()
