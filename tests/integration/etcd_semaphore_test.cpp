// tenure::semaphore on etcd (src/etcd/semaphore.cpp) against real etcd: a
// single member started by etcd_process, and a three-member cluster (the
// six contenders again, a raft leader killed while a contender waits, a
// revoked permit's fenced write).
//
// The key layout is read back raw: contender keys `<prefix>/<lease hex>` on
// the session's lease, holders the first `limit` by create revision. Every
// scenario awaits events; fixed pauses appear only in "absence" windows (a
// waiter that must not be admitted) and as the work a holder does.

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
// g++ 12 false positive on Asio's coroutine frame allocator (fixed in g++ 13).
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include "etcd_member.hpp"
#include "awaiting.hpp"

#include <tenure/error.hpp>
#include <tenure/etcd/client.hpp>
#include <tenure/fenced_write.hpp>
#include <tenure/leadership_scope.hpp>
#include <tenure/semaphore.hpp>
#include <tenure/session.hpp>

#include "run_on.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace asio = boost::asio;
namespace etcd = tenure::etcd;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;
using boost::system::error_code;
using boost::system::system_error;

namespace {

using tenure::itest::pause;
using tenure::itest::run_scenario;
using tenure::itest::signal_flag;

// The scenarios run on `ex`, on TENURE_TEST_THREADS threads (run_on.hpp).
struct single_env : tenure::itest::etcd_member {
    single_env() : etcd_member(on_test_threads{}) {}
    void run(std::function<asio::awaitable<void>()> const& f) { tenure::itest::run_scenario(ioc, ex, f, 40s); }
};

struct cluster_env {
    asio::io_context ioc{1};
    tenure::itest::etcd_cluster cluster{3};
};

tenure::session_options opts(std::chrono::seconds ttl = 2s) {
    tenure::session_options o;
    o.name = "etcd semaphore test";
    o.ttl = ttl;
    return o;
}

std::int64_t lease_of(tenure::session const& s) { return static_cast<std::int64_t>(std::stoull(s.id(), nullptr, 16)); }

// An acquire running in the background; its outcome observable.
struct pending {
    explicit pending(signal_flag& f) : flag(f) {}
    signal_flag& flag;
    bool done = false;
    error_code ec;
    tenure::leadership_scope scope;
    asio::cancellation_signal cancel;

    void start(tenure::semaphore& sem) {
        sem.acquire(asio::bind_cancellation_slot(cancel.slot(), [this](error_code c, tenure::leadership_scope s) {
            ec = c;
            scope = std::move(s);
            done = true;
            flag.notify();
        }));
    }
    asio::awaitable<bool> wait(std::chrono::milliseconds limit) {
        std::function<bool()> is_done = [this] { return done; };
        co_return co_await flag.until(std::move(is_done), limit);
    }
};

// Counts a holder inside its critical section while it lives.
struct inside_counter {
    int& inside;
    inside_counter(int& n, int& max_inside) : inside(n) { max_inside = std::max(max_inside, ++inside); }
    ~inside_counter() { --inside; }
    inside_counter(inside_counter const&) = delete;
    inside_counter& operator=(inside_counter const&) = delete;
};

// Work that runs until cancelled, counted while it runs.
asio::awaitable<void> endless_work(int& inside, int& max_inside) {
    inside_counter counted(inside, max_inside);
    asio::steady_timer t(co_await asio::this_coro::executor, steady::time_point::max());
    co_await t.async_wait(asio::use_awaitable);
}

// The keys under `<prefix>/`, oldest first.
asio::awaitable<std::vector<etcd::key_value>> keys_under(etcd::client& c, std::string prefix) {
    std::string key = prefix + "/";
    std::string end = etcd::prefix_end(key);
    etcd::range_options o;
    o.order = etcd::sort_order::ascend;
    o.target = etcd::sort_target::create;
    auto r = co_await c.range(key, end, o);
    co_return r.kvs;
}

// Six contenders, limit two, each working 100 ms under its permit: never
// more than two inside, and all finish.
asio::awaitable<void> six_contenders_limit_two(etcd::client* client) {
    auto ex = co_await asio::this_coro::executor;
    constexpr int n = 6, limit = 2;
    std::string const prefix = "sem-six";
    std::vector<tenure::session> sessions;
    for (int i = 0; i < n; ++i) sessions.push_back(co_await tenure::session::create(*client, opts()));
    signal_flag flag(ex);
    int inside = 0, max_inside = 0, finished = 0;
    std::vector<std::uint64_t> admitted_tokens;  // in admission order

    auto worker = [&](int i) -> asio::awaitable<void> {
        tenure::semaphore sem(sessions[i], prefix, limit, "w" + std::to_string(i));
        auto permit = co_await sem.acquire();
        BOOST_REQUIRE(permit.held());
        BOOST_TEST(permit.key() == prefix + "/" + sessions[i].id());
        admitted_tokens.push_back(permit.token());
        auto body = [&]() -> asio::awaitable<void> {
            inside_counter counted(inside, max_inside);
            BOOST_TEST(inside <= limit);
            // etcd says the same: we are among the first `limit`.
            auto st = co_await sem.state();
            BOOST_TEST(st.limit == limit);
            BOOST_TEST(st.holders.size() <= std::size_t(limit));
            BOOST_TEST(std::count(st.holders.begin(), st.holders.end(), sessions[i].id()) == 1);
            co_await pause(100ms);  // the work
        };
        bool const completed = co_await permit.run(body());
        BOOST_TEST(completed);
        co_await permit.release();
        ++finished;
        flag.notify();
    };
    for (int i = 0; i < n; ++i) asio::co_spawn(ex, worker(i), asio::detached);

    std::function<bool()> all_done = [&] { return finished == n; };
    BOOST_REQUIRE(co_await flag.until(std::move(all_done), 20'000ms));
    BOOST_TEST(max_inside == limit);  // never more, and the slots were used
    // One token (create revision) per admission. (Their local order may
    // differ from create order: two admitted at once complete in any order.)
    BOOST_TEST(admitted_tokens.size() == std::size_t(n));
    BOOST_TEST(std::set<std::uint64_t>(admitted_tokens.begin(), admitted_tokens.end()).size() == std::size_t(n));
    BOOST_TEST((co_await keys_under(*client, prefix)).empty());  // every contender key released
    for (auto& s : sessions) co_await s.close();
}

}  // namespace

BOOST_FIXTURE_TEST_SUITE(etcd_semaphore, single_env)

BOOST_AUTO_TEST_CASE(six_contenders_limit_two_never_exceed_two_and_all_finish) {
    run([&]() -> asio::awaitable<void> { co_await six_contenders_limit_two(client.get()); });
}

BOOST_AUTO_TEST_CASE(try_acquire_on_a_full_semaphore_is_empty_and_leaves_no_key) {
    run([&]() -> asio::awaitable<void> {
        std::string const prefix = "sem-full/";  // a trailing '/' is dropped
        auto s1 = co_await tenure::session::create(*client, opts());
        auto s2 = co_await tenure::session::create(*client, opts());
        auto s3 = co_await tenure::session::create(*client, opts());
        tenure::semaphore a(s1, prefix, 2, "one"), b(s2, prefix, 2, "two"), c(s3, prefix, 2, "three");
        auto pa = co_await a.acquire();
        auto pb = co_await b.try_acquire();
        BOOST_REQUIRE(pa.held());
        BOOST_REQUIRE(pb.held());
        BOOST_TEST(pa.key() == "sem-full/" + s1.id());
        BOOST_TEST(pb.token() > pa.token());

        auto pc = co_await c.try_acquire();
        BOOST_TEST(!pc.held());
        // The layout, raw: two keys on their sessions' leases, with the values.
        auto keys = co_await keys_under(*client, "sem-full");
        BOOST_REQUIRE(keys.size() == 2u);
        BOOST_TEST(keys[0].key == "sem-full/" + s1.id());
        BOOST_TEST(keys[0].lease == lease_of(s1));
        BOOST_TEST(keys[0].value == "one");
        BOOST_TEST(static_cast<std::uint64_t>(keys[0].create_revision) == pa.token());
        BOOST_TEST(keys[1].key == "sem-full/" + s2.id());
        BOOST_TEST(keys[1].lease == lease_of(s2));

        auto st = co_await c.state();
        BOOST_TEST(st.limit == 2);
        std::vector<std::string> both{s1.id(), s2.id()};
        std::sort(both.begin(), both.end());
        BOOST_TEST(st.holders == both);
        BOOST_TEST(st.contenders == both);
        BOOST_TEST(st.index > 0u);

        // A freed slot is taken by the next attempt, with a larger token.
        co_await pa.release();
        BOOST_TEST((co_await client->range("sem-full/" + s1.id())).kvs.empty());
        auto pc2 = co_await c.try_acquire();
        BOOST_REQUIRE(pc2.held());
        BOOST_TEST(pc2.token() > pb.token());
        BOOST_TEST(co_await pc2.confirm());
        co_await pb.release();
        co_await pc2.release();
        BOOST_TEST((co_await keys_under(*client, "sem-full")).empty());
        co_await s1.close();
        co_await s2.close();
        co_await s3.close();
    });
}

BOOST_AUTO_TEST_CASE(a_revoked_lease_loses_the_permit_and_admits_a_waiter) {
    run([&]() -> asio::awaitable<void> {
        auto ex = co_await asio::this_coro::executor;
        std::string const prefix = "sem-revoke";
        auto sa = co_await tenure::session::create(*client, opts());
        auto sb = co_await tenure::session::create(*client, opts());
        auto sc = co_await tenure::session::create(*client, opts());
        tenure::semaphore a(sa, prefix, 2), b(sb, prefix, 2), c(sc, prefix, 2);
        auto pa = co_await a.acquire();
        auto pb = co_await b.acquire();
        signal_flag flag(ex);
        pending waiter(flag);
        waiter.start(c);
        BOOST_TEST(!(co_await waiter.wait(300ms)));  // absence: full

        int inside = 0, max_inside = 0;
        bool a_done = false, a_finished = true;
        pa.run(endless_work(inside, max_inside), [&](error_code, bool finished) {
            a_finished = finished;
            a_done = true;
            flag.notify();
        });
        std::function<bool()> a_inside = [&] { return inside == 1; };
        BOOST_REQUIRE(co_await flag.until(std::move(a_inside), 2'000ms));

        co_await client->lease_revoke(lease_of(sa));
        std::function<bool()> lost_and_admitted = [&] { return a_done && waiter.done; };
        BOOST_REQUIRE(co_await flag.until(std::move(lost_and_admitted), 5'000ms));
        BOOST_TEST(!a_finished);  // run() cancelled by the loss
        BOOST_TEST(!pa.held());
        auto const why = pa.loss_reason();
        BOOST_TEST((why == tenure::error::session_invalidated || why == tenure::error::key_deleted), why.message());
        BOOST_TEST(!waiter.ec, waiter.ec.message());
        BOOST_REQUIRE(waiter.scope.held());
        BOOST_TEST(waiter.scope.token() > pb.token());
        BOOST_TEST(pb.held());
        BOOST_TEST(inside == 0);

        co_await pb.release();
        co_await waiter.scope.release();
        co_await sb.close();
        co_await sc.close();
    });
}

BOOST_AUTO_TEST_CASE(a_cancelled_wait_withdraws_its_contender_key) {
    run([&]() -> asio::awaitable<void> {
        auto ex = co_await asio::this_coro::executor;
        std::string const prefix = "sem-cancel";
        auto sa = co_await tenure::session::create(*client, opts());
        auto sc = co_await tenure::session::create(*client, opts());
        tenure::semaphore a(sa, prefix, 1), c(sc, prefix, 1);
        auto pa = co_await a.acquire();
        std::string const c_key = prefix + "/" + sc.id();

        // Start the waiter, and see its key appear (a watch, not a poll).
        etcd::watch_options wo;
        std::string end;
        auto w = co_await client->watch(c_key, end, wo);
        signal_flag flag(ex);
        pending waiter(flag);
        waiter.start(c);
        auto r = co_await w.next();
        BOOST_REQUIRE(!r.events.empty());
        BOOST_TEST((r.events.front().type == etcd::event_type::put));
        BOOST_TEST(!waiter.done);

        waiter.cancel.emit(asio::cancellation_type::terminal);
        BOOST_REQUIRE(co_await waiter.wait(3'000ms));
        BOOST_TEST(waiter.ec == asio::error::operation_aborted, waiter.ec.message());
        BOOST_TEST((co_await client->range(c_key)).kvs.empty());  // withdrawn before it completed
        auto keys = co_await keys_under(*client, prefix);
        BOOST_REQUIRE(keys.size() == 1u);
        BOOST_TEST(keys[0].key == pa.key());
        co_await pa.release();
        co_await sa.close();
        co_await sc.close();
    });
}

BOOST_AUTO_TEST_SUITE_END()

// Three members: the raft leader is killed while a contender waits. No
// permit is lost (the leases survive the election of a new raft leader) and
// none is doubled (the waiter is admitted only once a holder releases).
BOOST_FIXTURE_TEST_SUITE(etcd_semaphore_cluster, cluster_env)

BOOST_AUTO_TEST_CASE(killing_the_raft_leader_mid_wait_neither_loses_nor_doubles_a_permit) {
    run_scenario(ioc, [&]() -> asio::awaitable<void> {
        auto ex = co_await asio::this_coro::executor;
        auto urls = cluster.client_urls();
        std::size_t const leader = cluster.leader_index();
        // The client talks to the raft leader first.
        etcd::client_config cfg;
        cfg.endpoints.push_back(urls[leader]);
        for (std::size_t i = 0; i < urls.size(); ++i)
            if (i != leader) cfg.endpoints.push_back(urls[i]);
        cfg.request_timeout = 1000ms;
        etcd::client client(ex, cfg);
        std::string const prefix = "sem-cluster";

        auto sa = co_await tenure::session::create(client, opts(6s));
        auto sb = co_await tenure::session::create(client, opts(6s));
        auto sc = co_await tenure::session::create(client, opts(6s));
        tenure::semaphore a(sa, prefix, 2), b(sb, prefix, 2), c(sc, prefix, 2);
        auto pa = co_await a.acquire();
        auto pb = co_await b.acquire();
        signal_flag flag(ex);
        int inside = 0, max_inside = 0, runs_ended = 0;
        auto count_end = [&](error_code, bool) {
            ++runs_ended;
            flag.notify();
        };
        asio::cancellation_signal stop_a;
        pa.run(endless_work(inside, max_inside), asio::bind_cancellation_slot(stop_a.slot(), count_end));
        pb.run(endless_work(inside, max_inside), count_end);
        pending waiter(flag);
        waiter.start(c);
        BOOST_TEST(!(co_await waiter.wait(300ms)));  // absence: full, waiting

        BOOST_TEST_MESSAGE("killing member " << leader << " (raft leader)");
        cluster.kill(leader);
        // Wait for a write to go through again: a new raft leader.
        auto const deadline = steady::now() + 15s;
        for (bool ok = false; !ok;) {
            try {
                co_await client.put("sem-cluster-probe", "x");
                ok = true;
            } catch (system_error const&) {
                if (steady::now() > deadline) throw;
            }
            if (!ok) co_await pause(100ms);
        }
        // Absence: after the failover the waiter is still not admitted, and
        // both holders still hold.
        BOOST_TEST(!(co_await waiter.wait(1'000ms)));
        BOOST_TEST(pa.held());
        BOOST_TEST(pb.held());
        BOOST_TEST(runs_ended == 0);
        auto st = co_await c.state();
        std::vector<std::string> holders{sa.id(), sb.id()};
        std::sort(holders.begin(), holders.end());
        BOOST_TEST(st.holders == holders);
        BOOST_TEST(st.contenders.size() == 3u);

        // A holder leaves: the waiter is admitted, the other holder stays.
        stop_a.emit(asio::cancellation_type::terminal);
        std::function<bool()> a_ended = [&] { return runs_ended == 1; };
        BOOST_REQUIRE(co_await flag.until(std::move(a_ended), 5'000ms));
        co_await pa.release();
        BOOST_REQUIRE(co_await waiter.wait(10'000ms));
        BOOST_TEST(!waiter.ec, waiter.ec.message());
        BOOST_REQUIRE(waiter.scope.held());
        BOOST_TEST(waiter.scope.token() > pb.token());
        BOOST_TEST(pb.held());
        BOOST_TEST(max_inside <= 2);
        BOOST_TEST(co_await waiter.scope.confirm());

        co_await pb.release();
        std::function<bool()> both_ended = [&] { return runs_ended == 2; };
        BOOST_TEST(co_await flag.until(std::move(both_ended), 5'000ms));
        co_await waiter.scope.release();
        co_await sa.close();
        co_await sb.close();
        co_await sc.close();
        client.close();
    }, 60s);
}

BOOST_AUTO_TEST_CASE(six_contenders_limit_two_on_three_members) {
    run_scenario(ioc, [&]() -> asio::awaitable<void> {
        etcd::client_config cfg;
        cfg.endpoints = cluster.client_urls();
        etcd::client client(co_await asio::this_coro::executor, cfg);
        co_await six_contenders_limit_two(&client);
        client.close();
    }, 60s);
}

BOOST_AUTO_TEST_CASE(a_revoked_permits_fenced_write_is_refused_by_the_cluster) {
    run_scenario(ioc, [&]() -> asio::awaitable<void> {
        auto urls = cluster.client_urls();
        // The holder writes through one member, its lease is revoked through
        // another: the refusal is the cluster's, not one member's view.
        etcd::client_config ca, cb;
        ca.endpoints = {urls[0]};
        cb.endpoints = {urls[1]};
        auto ex = co_await asio::this_coro::executor;
        etcd::client holder_client(ex, ca), other(ex, cb);
        auto sa = co_await tenure::session::create(holder_client, opts());
        auto sb = co_await tenure::session::create(holder_client, opts());
        tenure::semaphore a(sa, "sem-fenced", 2), b(sb, "sem-fenced", 2);
        auto pa = co_await a.acquire();
        auto pb = co_await b.acquire();
        std::vector<tenure::write_op> w1{tenure::write_op::put("sem-fenced-data/a", "1")};
        auto used = co_await tenure::fenced_write(pa, std::move(w1));
        BOOST_TEST((used == pa.fencing()));

        co_await other.lease_revoke(lease_of(sa));
        std::vector<tenure::write_op> w2{tenure::write_op::put("sem-fenced-data/a", "stale")};
        auto [ec, t] = co_await tenure::fenced_write(pa, std::move(w2), asio::as_tuple(asio::use_awaitable));
        BOOST_TEST((ec == tenure::error::not_held), ec.message());
        auto r = co_await other.range("sem-fenced-data/a");  // linearizable, through the other member
        BOOST_REQUIRE(r.kvs.size() == 1u);
        BOOST_TEST(r.kvs.front().value == "1");
        // The other permit still writes.
        std::vector<tenure::write_op> w3{tenure::write_op::put("sem-fenced-data/b", "1")};
        auto [ec2, t2] = co_await tenure::fenced_write(pb, std::move(w3), asio::as_tuple(asio::use_awaitable));
        BOOST_TEST(!ec2, ec2.message());
        co_await pb.release();
        co_await sb.close();
        holder_client.close();
        other.close();
    }, 60s);
}

BOOST_AUTO_TEST_SUITE_END()
