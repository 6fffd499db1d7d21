// Candidate registry, leadership transfer and priority (issue #21) against the
// real `tenure agent` binary over HTTP.
//
// One io_context, no threads; every step awaits an event: a registry entry
// appearing (a blocking query on `<key>.candidates/`), an acquire completing,
// a scope's loss.

// g++ 12 false positive on Asio's coroutine frame allocator (fixed in g++ 13).
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include "agent_process.hpp"
#include "awaiting.hpp"
#include "run_on.hpp"

#include "consul/client_access.hpp"  // the client's coroutines
#include "consul/lock.hpp"           // consistent_read
#include "consul/watch_hub.hpp"      // the shared watch's snapshot

#include <tenure/consul/client.hpp>
#include <tenure/election.hpp>
#include <tenure/error.hpp>

#include <boost/asio.hpp>
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <array>
#include <iostream>
#include <map>
#include <memory>

namespace asio = boost::asio;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;
using boost::system::error_code;
namespace consul = tenure::consul;

namespace transfer_itest {

// A candidate: a session, an election, and its pending acquire().
struct candidate {
    std::string name;
    tenure::session session;
    std::unique_ptr<tenure::election> election;
    asio::cancellation_signal cancel;
    std::optional<tenure::leadership_scope> scope;
    error_code ec;
    bool done = false;
    int wins = 0;

    void start(asio::steady_timer& wake) {
        done = false;
        scope.reset();
        election->acquire(asio::bind_cancellation_slot(cancel.slot(), [this, &wake](error_code e, tenure::leadership_scope s) {
            ec = e;
            done = true;
            if (!e) {
                scope = std::move(s);
                ++wins;
            }
            wake.cancel();
        }));
    }
};

struct fixture {
    tenure::itest::agent_process agent{[] {
        tenure::itest::agent_options o;
        o.session_ttl_min = "100ms";
        return o;
    }()};
    asio::io_context io;
    std::unique_ptr<consul::client> client = [this] {
        consul::client_config c;
        c.address = "http://127.0.0.1:" + std::to_string(agent.port());
        c.request_timeout = 5000ms;
        return std::make_unique<consul::client>(io.get_executor(), c);
    }();

    void run(std::function<asio::awaitable<void>()> body, steady::duration limit = 60s) {
        tenure::itest::run_on(io, std::move(body), limit);
    }

    asio::awaitable<tenure::session> session(std::string name, std::chrono::milliseconds ttl = 2s,
                                             std::chrono::milliseconds lock_delay = 0ms) {
        tenure::session_options o;
        o.name = std::move(name);
        o.ttl = ttl;
        o.lock_delay = lock_delay;
        co_return co_await tenure::session::create(*client, std::move(o));
    }

    // Makes `c` a candidate for `key` named `name`: its own session and
    // election. Named arguments only: g++ 12 destroys the temporaries of a
    // co_await expression twice.
    asio::awaitable<void> enroll(candidate& c, char const* name, std::string const& key,
                                 tenure::election_options const& eo) {
        c.name = name;
        c.session = co_await session(c.name);
        c.election = std::make_unique<tenure::election>(c.session, key, c.name, eo);
    }
    void enroll(candidate&, char const*, std::string const&, tenure::election_options&&) = delete;
    asio::awaitable<void> enroll(candidate& c, char const* name, std::string const& key) {
        static tenure::election_options const defaults;
        return enroll(c, name, key, defaults);
    }

    // Blocks (blocking queries on the registry) until `n` live entries are
    // there, none of them `holder`'s (a winner's entry goes in the background).
    asio::awaitable<void> await_candidates(std::string const& key, std::size_t n, std::string holder = {}) {
        std::uint64_t index = 0;
        for (;;) {
            std::string registry = key + ".candidates/";
            auto r = co_await tenure::detail::coro(*client).kv_list(std::move(registry),
                                                                    tenure::detail::consistent_read(index, 10s));
            // Entries locked by their sessions (the marker is locked too, by
            // the one it names: not a candidate).
            std::size_t live = std::count_if(r.value.begin(), r.value.end(), [](consul::kv_pair const& p) {
                return !p.session.empty() && p.flags == tenure::detail::candidate_flag_value;
            });
            bool const holder_there = std::any_of(r.value.begin(), r.value.end(), [&](consul::kv_pair const& p) {
                return !holder.empty() && p.session == holder && p.flags == tenure::detail::candidate_flag_value;
            });
            if (live == n && !holder_there) co_return;
            index = consul::next_wait_index(index, r.meta.index);
        }
    }

    // Blocks (blocking queries on `<key>.candidates/.max`) until the
    // priority marker names `session` (empty: until there is no marker),
    // locked by that session (`locked`), or unlocked. Its ModifyIndex (0: none).
    asio::awaitable<std::uint64_t> await_marker(std::string const& key, std::string const& session, bool locked = true) {
        std::uint64_t index = 0;
        for (;;) {
            std::string marker = key + ".candidates/.max";
            auto r = co_await tenure::detail::coro(*client).kv_get(std::move(marker),
                                                                   tenure::detail::consistent_read(index, 10s));
            if (session.empty() && !r.value) co_return 0;
            if (r.value && r.value->value && r.value->value->ends_with(" " + session) &&
                r.value->session == (locked ? session : std::string()))
                co_return r.value->modify_index;
            index = consul::next_wait_index(index, r.meta.index);
        }
    }
    // `session` holds `key`, and the transaction that gave it the key took
    // its registry entry out: `.seen` moved at the key's index, no entry.
    asio::awaitable<void> expect_holder_unlisted(std::string const& key, std::string const& session, bool shared) {
        auto k = co_await read_key(key);
        BOOST_TEST(k.session == session);
        auto seen = co_await read_key(key + ".candidates/.seen");
        BOOST_TEST(seen.modify_index == k.modify_index, "shared " << shared << ": .seen moved at " << seen.modify_index
                                                                  << ", the key at " << k.modify_index);
        auto entry = co_await tenure::detail::coro(*client).kv_get(key + ".candidates/" + session,
                                                                   tenure::detail::consistent_read());
        BOOST_TEST(!entry.value.has_value(), "shared " << shared << ": the holder is still listed");
    }
    double txns() const { return agent.metric("tenure_http_requests_total{method=\"PUT\",endpoint=\"txn\""); }
    // The agent's count of non-blocking KV reads (its latency histogram
    // leaves blocking queries out).
    double kv_reads() const { return agent.metric("tenure_http_request_duration_seconds_count{endpoint=\"kv\""); }

    // Starts c's acquire and waits until the registry lists `n` waiting.
    asio::awaitable<void> start_until_listed(candidate& c, asio::steady_timer& wake, std::string const& key, std::size_t n) {
        c.start(wake);
        co_await await_candidates(key, n);
    }

    asio::awaitable<void> hand_to_first_waiter(std::string const& key, asio::steady_timer& wake,
                                               tenure::leadership_scope& lead, candidate& w, candidate& x, candidate& y,
                                               tenure::election_options const& later);

    asio::awaitable<consul::kv_pair> read_key(std::string key) {
        auto r = co_await tenure::detail::coro(*client).kv_get(std::move(key), tenure::detail::consistent_read());
        BOOST_REQUIRE(r.value.has_value());
        co_return *r.value;
    }
};

asio::awaitable<void> wait_for(asio::steady_timer& wake, std::function<bool()> const& cond) {
    while (!cond()) {
        wake.expires_at(steady::time_point::max());
        co_await wake.async_wait(asio::as_tuple(asio::use_awaitable));
    }
}

// h (holding `lead`) releases with w, x and y waiting in that order (x and y
// with `later`); w takes the key and reads the registry once in the
// background, which notes whom it would hand over to. Returns once w has
// taken that read's answer in.
asio::awaitable<void> fixture::hand_to_first_waiter(std::string const& key, asio::steady_timer& wake,
                                                    tenure::leadership_scope& lead, candidate& w, candidate& x,
                                                    candidate& y, tenure::election_options const& later) {
    co_await enroll(w, "w", key);
    co_await enroll(x, "x", key, later);
    co_await enroll(y, "y", key, later);
    co_await start_until_listed(w, wake, key, 1);
    co_await start_until_listed(x, wake, key, 2);
    co_await start_until_listed(y, wake, key, 3);
    co_await await_marker(key, w.session.id());
    // h saw the registry empty when it took the key: its release reads it,
    // then hands over to w, who reads it once more in the background.
    double const before = kv_reads();
    co_await lead.release();
    co_await wait_for(wake, [&] { return w.done; });
    BOOST_TEST_REQUIRE(w.scope.has_value());
    while (kv_reads() < before + 2) co_await tenure::itest::pause(1ms);
    // The agent counts a read as it answers: one more round trip on this
    // io_context lets w take in the answer it had already been sent.
    co_await read_key(key);
}

asio::awaitable<void> endless() {
    asio::steady_timer t(co_await asio::this_coro::executor, steady::time_point::max());
    co_await t.async_wait(asio::use_awaitable);
}

tenure::election_options with_priority(int p) {
    tenure::election_options o;
    o.priority = p;
    return o;
}

}  // namespace transfer_itest

using namespace transfer_itest;

BOOST_FIXTURE_TEST_SUITE(transfer_priority, fixture)

BOOST_AUTO_TEST_CASE(candidates_are_listed_best_first_and_leave_when_their_acquire_ends) {
    run([&]() -> asio::awaitable<void> {
        std::string const key = "itest/cand/leader";
        auto hs = co_await session("holder");
        tenure::election he(hs, key, "h");
        auto lead = co_await he.acquire();
        asio::steady_timer wake(io, steady::time_point::max());

        std::vector<std::unique_ptr<candidate>> cs;
        std::vector<int> prios{0, 5, 0};
        for (int i = 0; i < 3; ++i) {
            auto c = std::make_unique<candidate>();
            c->name = "c" + std::to_string(i);
            c->session = co_await session(c->name);
            c->election = std::make_unique<tenure::election>(c->session, key, "v" + std::to_string(i),
                                                             with_priority(prios[i]));
            c->start(wake);
            co_await await_candidates(key, static_cast<std::size_t>(i + 1));
            cs.push_back(std::move(c));
        }
        auto list = co_await he.candidates();
        BOOST_TEST_REQUIRE(list.size() == 3u);
        BOOST_TEST(list[0].name == "c1");  // the highest priority
        BOOST_TEST(list[0].priority == 5);
        BOOST_TEST(list[0].value == "v1");
        BOOST_TEST(list[0].session == cs[1]->session.id());
        BOOST_TEST(list[1].name == "c0");  // equal priorities: the longest waiting first
        BOOST_TEST(list[2].name == "c2");
        BOOST_TEST(list[1].since < list[2].since);

        // The lock key itself is api.Lock's: its flags, the holder's value.
        auto k = co_await read_key(key);
        BOOST_TEST(k.flags == consul::lock_flag_value);
        BOOST_TEST(k.value.value_or("") == "h");

        // An acquire that ends takes its entry along.
        cs[2]->cancel.emit(asio::cancellation_type::terminal);
        co_await wait_for(wake, [&] { return cs[2]->done; });
        BOOST_TEST(cs[2]->ec == asio::error::operation_aborted);
        co_await await_candidates(key, 2);
        auto after = co_await he.candidates();
        BOOST_TEST(after.size() == 2u);
        for (auto const& c : after) BOOST_TEST(c.name != "c2");

        // A candidate whose session ends is left out, and its entry goes.
        std::string const c0_entry = key + ".candidates/" + cs[0]->session.id();
        co_await cs[0]->session.close();
        co_await await_candidates(key, 1);
        auto last = co_await he.candidates();
        BOOST_TEST_REQUIRE(last.size() == 1u);
        BOOST_TEST(last[0].name == "c1");
        for (auto& c : cs) c->cancel.emit(asio::cancellation_type::terminal);
        co_await wait_for(wake, [&] { return cs[1]->done; });
        co_await lead.release();  // reads the registry: prunes what an ended session left
        for (std::uint64_t index = 0;;) {
            auto r = co_await tenure::detail::coro(*client).kv_get(c0_entry, tenure::detail::consistent_read(index, 10s));
            if (!r.value) break;
            index = consul::next_wait_index(index, r.meta.index);
        }
    });
}

BOOST_AUTO_TEST_CASE(transfer_under_contention_of_10_followers_always_lands_on_the_target) {
    run([&]() -> asio::awaitable<void> {
        std::string const key = "itest/transfer/leader";
        asio::steady_timer wake(io, steady::time_point::max());
        std::vector<std::unique_ptr<candidate>> cs;
        for (int i = 0; i < 11; ++i) {
            auto c = std::make_unique<candidate>();
            std::string const name = "n" + std::to_string(i);
            co_await enroll(*c, name.c_str(), key);
            cs.push_back(std::move(c));
        }
        cs[0]->start(wake);
        co_await wait_for(wake, [&] { return cs[0]->done; });
        BOOST_REQUIRE(cs[0]->scope && cs[0]->scope->held());
        for (int i = 1; i < 11; ++i) cs[i]->start(wake);
        co_await await_candidates(key, 10);

        int holder = 0;
        int rounds = 0;
        for (int target : {7, 3, 10, 1, 5, 9, 2, 8, 4, 6}) {
            auto& from = *cs[holder];
            // The holder's work runs until the transfer ends it.
            bool finished = true;
            bool ended = false;
            asio::co_spawn(io, from.scope->run(endless()), [&](std::exception_ptr, bool f) {
                finished = f;
                ended = true;
                wake.cancel();
            });
            auto const before = from.scope->token();
            // By session id for even rounds, by name for odd ones.
            std::string const who = rounds % 2 ? cs[target]->name : cs[target]->session.id();
            auto token = co_await from.scope->transfer_to(who);
            co_await wait_for(wake, [&] { return ended && cs[target]->done; });
            BOOST_TEST(!finished);
            BOOST_TEST(from.scope->loss_reason() == tenure::make_error_code(tenure::error::transferred));
            BOOST_TEST(!cs[target]->ec);
            BOOST_REQUIRE(cs[target]->scope);
            BOOST_TEST(cs[target]->scope->held());
            BOOST_TEST(cs[target]->scope->token() == token);
            BOOST_TEST(token == before + 1);  // the fencing token grows
            auto k = co_await read_key(key);
            BOOST_TEST(k.session == cs[target]->session.id());
            BOOST_TEST(k.value.value_or("") == cs[target]->name);
            // Nobody else was elected meanwhile.
            for (int i = 0; i < 11; ++i)
                if (i != target && i != holder) BOOST_TEST(!cs[i]->done, "candidate " << i << " was elected");
            // The old holder queues again.
            from.start(wake);
            co_await await_candidates(key, 10, cs[target]->session.id());
            holder = target;
            ++rounds;
        }
        BOOST_TEST(rounds == 10);
        for (auto& c : cs) c->cancel.emit(asio::cancellation_type::terminal);
        for (auto& c : cs) co_await wait_for(wake, [&] { return c->done || c.get() == cs[holder].get(); });
        co_await cs[holder]->scope->release();
    });
}

BOOST_AUTO_TEST_CASE(bad_targets_change_nothing) {
    run([&]() -> asio::awaitable<void> {
        std::string const key = "itest/badtarget/leader";
        asio::steady_timer wake(io, steady::time_point::max());
        auto hs = co_await session("holder");
        tenure::election he(hs, key, "h");
        auto lead = co_await he.acquire();
        auto const before = co_await read_key(key);

        candidate a, gone;
        co_await enroll(a, "a", key);
        co_await enroll(gone, "gone", key);
        a.start(wake);
        co_await start_until_listed(gone, wake, key, 2);
        std::string const gone_id = gone.session.id();
        gone.cancel.emit(asio::cancellation_type::terminal);  // no longer waiting
        co_await wait_for(wake, [&] { return gone.done; });
        co_await await_candidates(key, 1);

        std::vector<std::string> bad{"nobody", gone_id, "gone", hs.id(), "holder"};
        for (auto const& t : bad) {
            auto [ec, token] = co_await lead.transfer_to(t, asio::as_tuple(asio::use_awaitable));
            BOOST_TEST(ec == tenure::make_error_code(tenure::error::no_such_candidate), t << ": " << ec.message());
            BOOST_TEST(token == 0u);
        }
        BOOST_TEST(lead.held());
        auto const after = co_await read_key(key);
        BOOST_TEST(after.session == before.session);
        BOOST_TEST(after.lock_index == before.lock_index);
        BOOST_TEST(after.modify_index == before.modify_index);
        BOOST_TEST(!a.done);

        // A scope that no longer holds cannot transfer.
        co_await lead.release();  // hands over to `a` (handoff_on_release)
        co_await wait_for(wake, [&] { return a.done; });
        BOOST_TEST(!a.ec);
        auto [ec, token] = co_await lead.transfer_to("a", asio::as_tuple(asio::use_awaitable));
        BOOST_TEST(ec == tenure::make_error_code(tenure::error::not_held));
        BOOST_REQUIRE(a.scope);
        co_await a.scope->release();
    });
}

BOOST_AUTO_TEST_CASE(priority_is_respected_over_100_handovers) {
    run([&]() -> asio::awaitable<void> {
        std::string const key = "itest/priority/leader";
        asio::steady_timer wake(io, steady::time_point::max());
        std::vector<int> const prios{0, 3, 7, 3, 1};
        std::vector<std::unique_ptr<candidate>> cs;
        for (std::size_t i = 0; i < prios.size(); ++i) {
            auto c = std::make_unique<candidate>();
            std::string const name = "p" + std::to_string(i);
            auto const options = with_priority(prios[i]);
            co_await enroll(*c, name.c_str(), key, options);
            cs.push_back(std::move(c));
        }
        cs[0]->start(wake);
        co_await wait_for(wake, [&] { return cs[0]->done; });
        for (std::size_t i = 1; i < cs.size(); ++i) cs[i]->start(wake);

        std::size_t holder = 0;
        std::map<std::string, int> led;
        for (int round = 0; round < 100; ++round) {
            co_await await_candidates(key, cs.size() - 1, cs[holder]->session.id());
            auto waiting = co_await cs[holder]->election->candidates();
            BOOST_REQUIRE(waiting.size() == cs.size() - 1);
            auto const expected = waiting.front().session;
            auto const old_token = cs[holder]->scope->token();
            co_await cs[holder]->scope->release();  // a clean release hands over to the best
            std::size_t next = cs.size();
            co_await wait_for(wake, [&] {
                for (std::size_t i = 0; i < cs.size(); ++i)
                    if (i != holder && cs[i]->done) next = i;
                return next != cs.size();
            });
            BOOST_TEST(cs[next]->session.id() == expected, "round " << round << ": " << cs[next]->name
                                                                     << " led instead of " << waiting.front().name);
            BOOST_TEST(cs[next]->scope->token() == old_token + 1);
            ++led[cs[next]->name];
            cs[holder]->start(wake);  // the old holder queues again
            holder = next;
        }
        // The top candidate leads every other term, the older 3 and the newer 3 share the rest.
        std::cout << "priority handovers:";
        for (auto const& [n, count] : led) std::cout << ' ' << n << '=' << count;
        std::cout << '\n';
        BOOST_TEST(led["p2"] == 50);
        BOOST_TEST(led["p1"] + led["p3"] == 50);
        BOOST_TEST(led["p0"] == 0);
        BOOST_TEST(led["p4"] == 0);
        for (auto& c : cs) c->cancel.emit(asio::cancellation_type::terminal);
        for (auto& c : cs) co_await wait_for(wake, [&] { return c->done; });
        co_await cs[holder]->scope->release();
    });
}

BOOST_AUTO_TEST_CASE(a_holder_that_saw_no_candidates_still_hands_over_to_new_ones) {
    // The release after an empty registry is one guarded unlock; candidates
    // that arrive since must void the guard, so the handoff (the longest
    // waiting of equals) happens every round.
    run([&]() -> asio::awaitable<void> {
        std::string const key = "itest/fastpath/leader";
        asio::steady_timer wake(io, steady::time_point::max());
        auto hs = co_await session("holder");
        tenure::election he(hs, key, "h");
        for (int round = 0; round < 5; ++round) {
            auto lead = co_await he.acquire();
            co_await lead.release();  // nobody waits: the registry is seen empty
            lead = co_await he.acquire();
            candidate first, second;
            co_await enroll(first, "first", key);
            co_await enroll(second, "second", key);
            co_await start_until_listed(first, wake, key, 1);
            co_await start_until_listed(second, wake, key, 2);
            co_await lead.release();
            co_await wait_for(wake, [&] { return first.done || second.done; });
            BOOST_TEST(first.done, "round " << round << ": the release did not hand over to the longest waiting");
            BOOST_TEST(!second.done);
            // The next term of `first` hands over to `second` the same way.
            BOOST_REQUIRE(first.scope);
            co_await first.scope->release();
            co_await wait_for(wake, [&] { return second.done; });
            BOOST_TEST(!second.ec);
            if (second.scope) co_await second.scope->release();
        }
    });
}

// The lock transaction that takes the key takes the winner's registry entry
// out with it (one raft index for both, and `.seen` moved by it): the win
// costs no request of its own, and nobody ever sees the holder still listed
// as waiting. With and without a shared watch (the marker read from the
// hub's snapshot, or as the candidate wrote it), after an invalidation.
BOOST_AUTO_TEST_CASE(a_winner_leaves_the_registry_in_the_transaction_that_takes_the_key) {
    run([&]() -> asio::awaitable<void> {
        asio::steady_timer wake(io, steady::time_point::max());
        for (bool const shared : {false, true}) {
            std::string const key = shared ? "itest/entry-out/shared/leader" : "itest/entry-out/leader";
            tenure::election_options eo;
            if (shared) eo.shared_watch = "itest/entry-out/shared/";
            auto hs = co_await session("holder");
            tenure::election he(hs, key, "h", eo);
            auto lead = co_await he.acquire();
            candidate w;
            co_await enroll(w, "w", key, eo);
            co_await start_until_listed(w, wake, key, 1);
            // An invalidation: the holder's session destroyed, so the waiter
            // sees the key free and takes it itself (no handoff).
            co_await tenure::detail::coro(*client).session_destroy(hs.id());
            co_await wait_for(wake, [&] { return w.done; });
            BOOST_TEST_REQUIRE(!w.ec);
            BOOST_TEST_REQUIRE(w.scope.has_value());
            co_await expect_holder_unlisted(key, w.session.id(), shared);
            co_await w.scope->release();
        }
    });
}

// A release hands the key over in one transaction that also takes the
// target's registry entry out (`.seen` moved by it) and unnames it in the
// marker: the target has nothing left to remove, and the holder names the
// next best from what that transaction read back. With a shared watch the
// holder takes the target from the hub's snapshot (guarded by `.seen`), so
// the release is that one transaction (and the naming after it) and no
// candidate sends another.
BOOST_AUTO_TEST_CASE(a_handover_takes_the_targets_entry_out_in_its_transaction) {
    run([&]() -> asio::awaitable<void> {
        asio::steady_timer wake(io, steady::time_point::max());
        for (bool const shared : {false, true}) {
            std::string const prefix = shared ? "itest/handover/shared/" : "itest/handover/";
            std::string const key = prefix + "leader";
            auto options = [&](int priority) {
                auto o = with_priority(priority);
                if (shared) o.shared_watch = prefix;
                return o;
            };
            auto hs = co_await session("holder");
            tenure::election he(hs, key, "h", options(0));
            auto lead = co_await he.acquire();
            candidate w, x;
            auto const first = options(2), second = options(1);
            co_await enroll(w, "w", key, first);
            co_await enroll(x, "x", key, second);
            co_await start_until_listed(w, wake, key, 1);
            co_await start_until_listed(x, wake, key, 2);
            auto const named_at = co_await await_marker(key, w.session.id());
            if (shared) {
                // The holder's hub has seen both registrations and the marker name w.
                auto const registered = co_await read_key(key + ".candidates/.seen");
                auto hub = tenure::detail::kv_watch_hub::get(*client, prefix);
                while (hub->index() < std::max(named_at, registered.modify_index)) co_await tenure::itest::pause(1ms);
            }

            double const txns_before = txns();
            co_await lead.release();
            co_await wait_for(wake, [&] { return w.done; });
            BOOST_TEST_REQUIRE(!w.ec);
            BOOST_TEST_REQUIRE(w.scope.has_value());
            BOOST_TEST(!x.done);
            co_await expect_holder_unlisted(key, w.session.id(), shared);
            co_await await_marker(key, x.session.id());  // the old holder named the next best
            // The handover, then the old holder's naming of x (the marker
            // replaced and locked by x's session): nothing from w.
            if (shared) BOOST_TEST(txns() - txns_before == 2.0, "the handover took " << txns() - txns_before << " transactions");

            // w's release hands over to x the same way; then nobody waits.
            co_await w.scope->release();
            co_await wait_for(wake, [&] { return x.done; });
            BOOST_TEST_REQUIRE(x.scope.has_value());
            auto const now_held = co_await read_key(key);
            BOOST_TEST(now_held.session == x.session.id());
            co_await await_candidates(key, 0);
            co_await await_marker(key, "");
            co_await x.scope->release();
        }
    });
}

// A holder that got the key by a handover reads the registry once, in the
// background while it holds the key, and notes whom it would hand over to:
// its release is then the handover's one transaction, with no read first,
// and names the next candidate in that transaction. The agent counts the
// non-blocking reads of the KV store (its latency histogram leaves blocking
// queries out); x and y are made quiet (quick_retake: no read of their own
// when they get the key), so the holders' reads are all that count.
BOOST_AUTO_TEST_CASE(a_release_after_a_handover_reads_nothing_first) {
    run([&]() -> asio::awaitable<void> {
        std::string const key = "itest/noted/leader";
        asio::steady_timer wake(io, steady::time_point::max());
        auto hs = co_await session("holder");
        tenure::election he(hs, key, "h");
        auto lead = co_await he.acquire();
        tenure::election_options quiet;
        quiet.quick_retake = true;
        candidate w, x, y;
        co_await hand_to_first_waiter(key, wake, lead, w, x, y, quiet);

        double const held = kv_reads();
        co_await w.scope->release();
        co_await wait_for(wake, [&] { return x.done; });
        BOOST_TEST(kv_reads() - held == 0.0, "w read " << kv_reads() - held << " times to hand over");
        BOOST_TEST_REQUIRE(x.scope.has_value());
        BOOST_TEST(!y.done);
        co_await await_marker(key, y.session.id());  // named by the handover's transaction
        co_await x.scope->release();
        co_await wait_for(wake, [&] { return y.done; });
        BOOST_TEST_REQUIRE(y.scope.has_value());
        co_await y.scope->release();
    });
}

// What a holder noted can go stale while it holds the key: the one it would
// hand over to stops waiting, or a better candidate arrives. `.seen` moves in
// both cases, the noted handover is refused, and the release reads the
// registry and hands over to the right candidate.
BOOST_AUTO_TEST_CASE(a_noted_handover_gone_stale_goes_to_the_best_candidate) {
    run([&]() -> asio::awaitable<void> {
        asio::steady_timer wake(io, steady::time_point::max());
        for (bool const better_arrives : {false, true}) {
            std::string const key = better_arrives ? "itest/noted-stale/better/leader" : "itest/noted-stale/left/leader";
            auto hs = co_await session("holder");
            tenure::election he(hs, key, "h");
            auto lead = co_await he.acquire();
            candidate w, x, y, z;
            tenure::election_options const plain;
            co_await hand_to_first_waiter(key, wake, lead, w, x, y, plain);  // w noted x

            candidate* expected = &y;
            if (better_arrives) {
                auto const first = with_priority(5);
                co_await enroll(z, "z", key, first);
                z.start(wake);
                co_await await_marker(key, z.session.id());
                expected = &z;
            } else {
                x.cancel.emit(asio::cancellation_type::terminal);  // x gives up: its removal names y
                co_await wait_for(wake, [&] { return x.done; });
                co_await await_marker(key, y.session.id());
            }
            co_await w.scope->release();
            co_await wait_for(wake, [&] { return expected->done; });
            BOOST_TEST(!expected->ec, "better_arrives " << better_arrives << ": " << expected->ec.message());
            BOOST_TEST_REQUIRE(expected->scope.has_value());
            if (better_arrives) BOOST_TEST(!x.done, "x took the key before z, who ranks first");
            std::array<candidate*, 3> const others{&x, &y, &z};
            for (candidate* c : others)
                if (c->election && !c->done) c->cancel.emit(asio::cancellation_type::terminal);
            co_await wait_for(wake, [&] {
                return std::all_of(others.begin(), others.end(), [](candidate* c) { return !c->election || c->done; });
            });
            co_await expected->scope->release();
        }
    });
}

// A plain release (handoff_on_release off, as `consul lock` releases): every
// waiter sends its lock guarded by a check-session of the marker, which is
// locked by the one it names, so that one gets the key with no read first
// and the others go back to waiting. When the marker cannot be locked (its
// lock-delay, after the session it was locked by was invalidated), it is
// written unlocked and the order still holds: the waiters read it.
BOOST_AUTO_TEST_CASE(a_plain_release_goes_to_the_candidate_the_marker_is_locked_by) {
    run([&]() -> asio::awaitable<void> {
        std::string const key = "itest/plain/leader";
        asio::steady_timer wake(io, steady::time_point::max());
        tenure::election_options plain;
        plain.handoff_on_release = false;
        auto hs = co_await session("holder");
        tenure::election he(hs, key, "h", plain);
        auto lead = co_await he.acquire();

        candidate w, x, y, z;
        co_await enroll(w, "w", key, plain);
        // x's session has a lock-delay: once it ends, whatever it held (the
        // marker, once x is named) cannot be locked for that long.
        x.name = "x";
        x.session = co_await session("x", 2s, 30s);
        x.election = std::make_unique<tenure::election>(x.session, key, "x", plain);
        co_await start_until_listed(w, wake, key, 1);
        co_await start_until_listed(x, wake, key, 2);
        co_await await_marker(key, w.session.id());  // locked by w
        co_await lead.release();
        co_await wait_for(wake, [&] { return w.done; });
        BOOST_TEST_REQUIRE(w.scope.has_value());
        BOOST_TEST(!x.done);
        co_await await_marker(key, x.session.id());  // w, now holding, named x
        co_await await_candidates(key, 1, w.session.id());

        // x's session ends while the marker is locked by it.
        co_await enroll(z, "z", key, plain);
        z.start(wake);
        co_await await_candidates(key, 2, w.session.id());
        co_await await_marker(key, x.session.id());  // x registered first among equals
        co_await tenure::detail::coro(*client).session_destroy(x.session.id());
        co_await wait_for(wake, [&] { return x.done; });
        auto const high = [&] {
            auto o = with_priority(5);
            o.handoff_on_release = false;
            return o;
        }();
        co_await enroll(y, "y", key, high);
        y.start(wake);
        // It ranks first and names itself, unlocked: the lock is refused.
        co_await await_marker(key, y.session.id(), false);
        co_await w.scope->release();
        co_await wait_for(wake, [&] { return y.done || z.done; });
        BOOST_TEST(y.done, "z took the key before y, whom the marker names");
        BOOST_TEST(!z.done);
        BOOST_TEST_REQUIRE(y.scope.has_value());
        // y names z, unlocked while x's lock-delay lasts; z takes the key next.
        co_await await_marker(key, z.session.id(), false);
        co_await y.scope->release();
        co_await wait_for(wake, [&] { return z.done; });
        BOOST_TEST_REQUIRE(z.scope.has_value());
        co_await z.scope->release();
    });
}

BOOST_AUTO_TEST_CASE(after_an_invalidation_a_better_candidate_goes_first) {
    run([&]() -> asio::awaitable<void> {
        std::string const key = "itest/invalid/leader";
        asio::steady_timer wake(io, steady::time_point::max());
        for (int round = 0; round < 5; ++round) {
            auto hs = co_await session("holder");
            tenure::election he(hs, key, "h");
            auto lead = co_await he.acquire();
            candidate lo, hi;
            auto const low = with_priority(1), high = with_priority(5);
            co_await enroll(lo, "lo", key, low);
            co_await enroll(hi, "hi", key, high);
            co_await start_until_listed(lo, wake, key, 1);  // the lower one waits longer
            co_await start_until_listed(hi, wake, key, 2);
            // Invalidation: the holder's session destroyed on the server, no release.
            co_await tenure::detail::coro(*client).session_destroy(hs.id());
            co_await wait_for(wake, [&] { return hi.done || lo.done; });
            BOOST_TEST(hi.done, "round " << round << ": the lower-priority candidate took the key first");
            BOOST_TEST(!lo.done);
            lo.cancel.emit(asio::cancellation_type::terminal);
            co_await wait_for(wake, [&] { return lo.done; });
            if (hi.scope) co_await hi.scope->release();
        }
    });
}

// Equal priorities: after an invalidation the one that waited longest goes
// first (a race would pick each order of three with chance 1/6 a round).
BOOST_AUTO_TEST_CASE(after_an_invalidation_equals_go_in_the_order_they_waited) {
    run([&]() -> asio::awaitable<void> {
        std::string const key = "itest/fifo/leader";
        asio::steady_timer wake(io, steady::time_point::max());
        for (int round = 0; round < 5; ++round) {
            auto hs = co_await session("holder");
            tenure::election he(hs, key, "h");
            auto lead = co_await he.acquire();
            std::vector<std::unique_ptr<candidate>> waiting;
            for (std::string name : {"first", "second", "third"}) {
                auto c = std::make_unique<candidate>();
                co_await enroll(*c, name.c_str(), key);
                c->start(wake);
                co_await await_candidates(key, waiting.size() + 1);
                waiting.push_back(std::move(c));
            }
            // Invalidate the holder, then each new holder in turn (its scope is
            // kept: a destroyed scope would hand the key over cleanly).
            std::string holder = hs.id();
            for (std::size_t next = 0; next < waiting.size(); ++next) {
                co_await tenure::detail::coro(*client).session_destroy(holder);
                auto led = [&](std::size_t i) { return waiting[i]->done && i < next; };
                co_await wait_for(wake, [&] {
                    for (std::size_t i = 0; i < waiting.size(); ++i)
                        if (waiting[i]->done && !led(i)) return true;
                    return false;
                });
                for (std::size_t i = next; i < waiting.size(); ++i)
                    BOOST_TEST(waiting[i]->done == (i == next),
                               "round " << round << ": " << waiting[i]->name << (waiting[i]->done ? " led" : " waits")
                                        << " when " << waiting[next]->name << " should lead");
                if (!waiting[next]->done) break;
                BOOST_TEST(!waiting[next]->ec);
                holder = waiting[next]->session.id();
            }
            for (auto& c : waiting)
                if (!c->done) {
                    c->cancel.emit(asio::cancellation_type::terminal);
                    co_await wait_for(wake, [&] { return c->done; });
                }
        }
    });
}

// A waiter defers at once to the candidate it last read the marker naming.
// That naming goes stale when the one named gives up (naming the next: `b`)
// and campaigns again: `b` must not wait on its fresh entry, nor `a` on `b`,
// for the grace (an hour here: a stall fails the test by its time limit).
BOOST_AUTO_TEST_CASE(a_naming_gone_stale_does_not_stall_the_one_named_since) {
    run([&]() -> asio::awaitable<void> {
        std::string const key = "itest/stale-naming/leader";
        asio::steady_timer wake(io, steady::time_point::max());
        tenure::election_options eo;
        eo.priority_grace = std::chrono::hours{1};
        auto hs = co_await session("holder");
        tenure::election he(hs, key, "h", eo);
        auto lead = co_await he.acquire();
        candidate a, b;
        co_await enroll(a, "a", key, eo);
        a.start(wake);
        co_await await_marker(key, a.session.id());
        co_await enroll(b, "b", key, eo);
        co_await start_until_listed(b, wake, key, 2);  // registers; reads back the marker: `a` is named
        // `a` gives up: its entry goes and it names `b`; then it waits anew.
        a.cancel.emit(asio::cancellation_type::terminal);
        co_await wait_for(wake, [&] { return a.done; });
        BOOST_TEST(a.ec == asio::error::operation_aborted);
        co_await await_marker(key, b.session.id());
        co_await start_until_listed(a, wake, key, 2);
        // The holder's session ends: `b`, named, leads.
        co_await tenure::detail::coro(*client).session_destroy(hs.id());
        co_await wait_for(wake, [&] { return a.done || b.done; });
        BOOST_TEST(b.done);
        BOOST_TEST(!b.ec);
        BOOST_TEST(!a.done);
        a.cancel.emit(asio::cancellation_type::terminal);
        co_await wait_for(wake, [&] { return a.done; });
    });
}

BOOST_AUTO_TEST_CASE(yield_to_higher_ignores_a_flapping_candidate_then_hands_over) {
    run([&]() -> asio::awaitable<void> {
        std::string const key = "itest/yield/leader";
        asio::steady_timer wake(io, steady::time_point::max());
        auto hs = co_await session("holder");
        tenure::election_options ho;
        ho.yield_to_higher = true;
        ho.yield_settle = 1s;
        tenure::election he(hs, key, "h", ho);
        auto lead = co_await he.acquire();
        bool ended = false, finished = true;
        asio::co_spawn(io, lead.run(endless()), [&](std::exception_ptr, bool f) {
            finished = f;
            ended = true;
            wake.cancel();
        });
        candidate equal;  // the same priority: never a reason to yield
        co_await enroll(equal, "equal", key);
        co_await start_until_listed(equal, wake, key, 1);

        candidate f;
        auto const high = with_priority(5);
        co_await enroll(f, "flappy", key, high);
        // Flaps: each appearance ends long before the settle time.
        for (int i = 0; i < 5; ++i) {
            co_await start_until_listed(f, wake, key, 2);
            f.cancel.emit(asio::cancellation_type::terminal);
            co_await wait_for(wake, [&] { return f.done; });
            co_await await_candidates(key, 1);
        }
        BOOST_TEST(lead.held());
        BOOST_TEST(!ended);
        // Now it stays: the leader hands over once it has settled.
        auto const before = lead.token();
        f.start(wake);
        co_await wait_for(wake, [&] { return f.done && ended; });
        BOOST_TEST(!finished);
        BOOST_TEST(lead.loss_reason() == tenure::make_error_code(tenure::error::yielded));
        BOOST_TEST(!f.ec);
        BOOST_REQUIRE(f.scope);
        BOOST_TEST(f.scope->token() == before + 1);
        BOOST_TEST(!equal.done);
        equal.cancel.emit(asio::cancellation_type::terminal);
        co_await wait_for(wake, [&] { return equal.done; });
        co_await f.scope->release();
    });
}

BOOST_AUTO_TEST_SUITE_END()
