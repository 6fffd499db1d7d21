// Integration tests of tenure::etcd::client against real etcd processes
// (Debian's etcd 3.4, started by the etcd_process fixture on loopback ports).
//
//   etcd_client   one member per test case: every operation, the gateway's
//                 wire conventions, watches (order, history replay,
//                 compaction, cancellation), errors, dead/black-holed
//                 endpoints and failover to a live one.
//   etcd_cluster  three members: the member the client is using (the raft
//                 leader) is SIGKILLed; requests keep working on the others
//                 and a watch resumes from its last revision. Then: a member
//                 left alone ends its watches with "no leader".
//
// g++ 12.2 destroys an aggregate temporary with a non-trivial destructor
// twice when it is built inside a co_await full-expression, so requests
// (compare lists, ops) are named before they are awaited. String literals
// and trivially destructible option structs are fine.
//
// No sleeps: scenarios await events (a watch event, an answer). The timers
// below bound a wait or act as "meanwhile" in the cancellation case.

// Designated initializers that leave members to their defaults are the point.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
// g++ 12 false positive on Asio's coroutine frame allocator (fixed in g++ 13).
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include "agent_process.hpp"
#include "awaiting.hpp"
#include "etcd_process.hpp"

#include "etcd/client_access.hpp"

#include <tenure/error.hpp>
#include <tenure/etcd/client.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace asio = boost::asio;
namespace etcd = tenure::etcd;
using namespace std::chrono_literals;
using namespace asio::experimental::awaitable_operators;
using steady = std::chrono::steady_clock;

namespace {

using tenure::itest::expect_error;
using tenure::itest::pause;
using tenure::itest::within;

// ---- environments ---------------------------------------------------------------------

struct io_env {
    asio::io_context ioc{1};

    // Runs `f` on the io_context until it finishes (at most `limit`); rethrows its exception.
    void run(std::function<asio::awaitable<void>()> const& f, std::chrono::seconds limit = 30s) {
        std::exception_ptr ep;
        bool done = false;
        asio::co_spawn(ioc, f(), [&](std::exception_ptr e) {
            ep = e;
            done = true;
            ioc.stop();
        });
        ioc.restart();
        ioc.run_for(limit);
        BOOST_REQUIRE_MESSAGE(done, "scenario did not finish within " << limit.count() << "s");
        if (ep) std::rethrow_exception(ep);
    }

    std::unique_ptr<etcd::client> make_client(std::vector<std::string> endpoints,
                                              std::chrono::milliseconds timeout = 5s) {
        etcd::client_config cfg;
        cfg.endpoints = std::move(endpoints);
        cfg.request_timeout = timeout;
        return std::make_unique<etcd::client>(ioc.get_executor(), std::move(cfg));
    }
};

// One etcd member and a client on it. Members are declared so that the
// client goes first, then etcd, then the io_context.
struct single_env : io_env {
    tenure::itest::etcd_process server;
    std::unique_ptr<etcd::client> client = make_client({server.client_url()});

    ~single_env() {
        client.reset();
        if (!server.running()) BOOST_TEST_MESSAGE("etcd log:\n" << server.log());
    }
    etcd::client& c() { return *client; }
};

struct cluster_env : io_env {
    tenure::itest::etcd_cluster cluster{3};
};

// ---- helpers --------------------------------------------------------------------------

// The client's and the stream's coroutines (not their completion-token
// operations): they throw api_error with the gRPC code, the message and the
// compaction revision.
using tenure::detail::coro;
using tenure::detail::watch_next;

// The api_error `op` throws, or nullopt when it succeeds.
template <class T>
asio::awaitable<std::optional<etcd::api_error>> error_of(asio::awaitable<T> op) {
    try {
        co_await std::move(op);
    } catch (etcd::api_error const& e) {
        co_return e;
    }
    co_return std::nullopt;
}

// Collects events from `w` until there are `n` of them (bounded by `limit`).
asio::awaitable<std::vector<etcd::event>> collect(etcd::watch_stream& w, std::size_t n,
                                                  std::chrono::milliseconds limit = 10s) {
    std::vector<etcd::event> out;
    auto const deadline = steady::now() + limit;
    while (out.size() < n) {
        auto const left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady::now());
        auto r = co_await within(w.next(asio::use_awaitable), left);
        if (!r) BOOST_FAIL("only " << out.size() << " of " << n << " watch events within " << limit.count() << " ms");
        for (auto& e : r->events) out.push_back(std::move(e));
    }
    co_return out;
}

std::string binary_bytes() { return std::string("\0\x01\x7f\x80\xfe\xff\n\"{}", 10); }

// ---- scenarios: one member ------------------------------------------------------------

asio::awaitable<void> lease_lifecycle(single_env& e) {
    auto& c = e.c();
    auto const g = co_await c.lease_grant(30);
    BOOST_TEST(g.id > 0);
    BOOST_TEST(g.ttl == 30);
    BOOST_TEST(g.header.revision >= 1);
    BOOST_TEST(g.header.member_id != 0u);
    BOOST_TEST(g.header.cluster_id != 0u);

    auto const ttl = co_await c.lease_time_to_live(g.id);
    BOOST_TEST(ttl >= 28);
    BOOST_TEST(ttl <= 30);
    BOOST_TEST(co_await c.lease_keepalive(g.id) == 30);

    etcd::put_options po;
    po.lease = g.id;
    co_await c.put("lease/k", "v", po);
    auto r = co_await c.range("lease/k");
    BOOST_REQUIRE(r.kvs.size() == 1u);
    BOOST_TEST(r.kvs[0].lease == g.id);  // lease IDs are far beyond 2^31

    co_await c.lease_revoke(g.id);
    r = co_await c.range("lease/k");
    BOOST_TEST(r.kvs.empty());  // revoking deletes the lease's keys
    BOOST_TEST(co_await c.lease_keepalive(g.id) == 0);  // "TTL" omitted: unknown lease
    BOOST_TEST(co_await c.lease_time_to_live(g.id) == -1);

    auto err = co_await expect_error<etcd::api_error>(coro(c).lease_revoke(g.id), "revoke of a revoked lease");
    BOOST_TEST((err.code() == tenure::error::lease_not_found));
    BOOST_TEST(err.grpc_code() == 5);
    BOOST_TEST(err.http_status() == 404u);
    BOOST_TEST(err.server_message() == "etcdserver: requested lease not found");

    err = co_await expect_error<etcd::api_error>(coro(c).put("lease/k", "v", po), "put with a revoked lease");
    BOOST_TEST((err.code() == tenure::error::lease_not_found));

    // Caller-chosen IDs beyond 2^32 and 2^53 (a double would round the latter).
    for (std::int64_t const id : {std::int64_t{5'000'000'000}, std::int64_t{9'007'199'254'740'993}}) {
        auto const g2 = co_await c.lease_grant(30, id);
        BOOST_TEST(g2.id == id);
        etcd::put_options po2;
        po2.lease = id;
        po2.prev_kv = true;
        co_await c.put("lease/big", "v", po2);
        auto const r2 = co_await c.range("lease/big");
        BOOST_REQUIRE(r2.kvs.size() == 1u);
        BOOST_TEST(r2.kvs[0].lease == id);
        BOOST_TEST(co_await c.lease_keepalive(id) == 30);
    }
    err = co_await expect_error<etcd::api_error>(coro(c).lease_grant(30, 5'000'000'000), "grant of an existing ID");
    BOOST_TEST(err.grpc_code() == 9);
    BOOST_TEST(err.http_status() == 412u);
    BOOST_TEST((err.code() == tenure::error::etcd_error));
}

// A lease nobody keeps alive expires: its key's DELETE arrives on a watch.
asio::awaitable<void> lease_expiry(single_env& e) {
    auto& c = e.c();
    auto const g = co_await c.lease_grant(1);  // raised to etcd's minimum (1 s with the fixture's timings)
    BOOST_TEST(g.ttl >= 1);
    etcd::put_options po;
    po.lease = g.id;
    co_await c.put("expiring", "v", po);
    auto w = co_await c.watch("expiring");
    auto const events = co_await collect(w, 1, 15s);
    BOOST_TEST((events[0].type == etcd::event_type::del));
    BOOST_TEST(events[0].kv.key == "expiring");
    BOOST_TEST(co_await c.lease_keepalive(g.id) == 0);
    BOOST_TEST(co_await c.lease_time_to_live(g.id) == -1);
}

asio::awaitable<void> kv_put_range_delete(single_env& e) {
    auto& c = e.c();
    auto const p1 = co_await c.put("/svc/a", "v1");
    BOOST_TEST(p1.header.revision >= 2);
    BOOST_TEST(!p1.prev_kv);

    etcd::put_options with_prev;
    with_prev.prev_kv = true;
    auto const p2 = co_await c.put("/svc/a", "v2", with_prev);
    BOOST_REQUIRE(p2.prev_kv);
    BOOST_TEST(p2.prev_kv->value == "v1");
    BOOST_TEST(p2.prev_kv->version == 1);
    BOOST_TEST(p2.header.revision == p1.header.revision + 1);

    auto r = co_await c.range("/svc/a");
    BOOST_REQUIRE(r.kvs.size() == 1u);
    BOOST_TEST(r.kvs[0].key == "/svc/a");
    BOOST_TEST(r.kvs[0].value == "v2");
    BOOST_TEST(r.kvs[0].create_revision == p1.header.revision);
    BOOST_TEST(r.kvs[0].mod_revision == p2.header.revision);
    BOOST_TEST(r.kvs[0].version == 2);
    BOOST_TEST(r.kvs[0].lease == 0);  // omitted
    BOOST_TEST(r.count == 1);
    BOOST_TEST(r.header.revision == p2.header.revision);

    // A missing key: no kvs, count 0 (both omitted on the wire).
    r = co_await c.range("/nope");
    BOOST_TEST(r.kvs.empty());
    BOOST_TEST(r.count == 0);

    // Binary bytes and an empty value, both ways.
    std::string const bkey = "/bin/" + binary_bytes();
    co_await c.put(bkey, binary_bytes());
    co_await c.put("/svc/empty", "");
    r = co_await c.range(bkey);
    BOOST_REQUIRE(r.kvs.size() == 1u);
    BOOST_TEST(r.kvs[0].key == bkey);
    BOOST_TEST(r.kvs[0].value == binary_bytes());
    r = co_await c.range("/svc/empty");
    BOOST_REQUIRE(r.kvs.size() == 1u);
    BOOST_TEST(r.kvs[0].value.empty());

    // Prefix ranges, limit / more / count, sort, keys_only, count_only.
    co_await c.put("/svc/b", "vb");
    co_await c.put("/svc/c", "vc");
    co_await c.put("/svc0", "outside");  // the prefix's range end itself is excluded
    co_await c.put("/sv", "outside");
    std::string const end = etcd::prefix_end("/svc/");
    BOOST_TEST(end == "/svc0");
    r = co_await c.range("/svc/", end);
    BOOST_REQUIRE(r.kvs.size() == 4u);
    BOOST_TEST(r.kvs[0].key == "/svc/a");
    BOOST_TEST(r.kvs[1].key == "/svc/b");
    BOOST_TEST(r.kvs[2].key == "/svc/c");
    BOOST_TEST(r.kvs[3].key == "/svc/empty");
    BOOST_TEST(!r.more);

    r = co_await c.range("/svc/", end, {.limit = 2});
    BOOST_TEST(r.kvs.size() == 2u);
    BOOST_TEST(r.more);
    BOOST_TEST(r.count == 4);

    r = co_await c.range("/svc/", end, {.limit = 1, .order = etcd::sort_order::descend, .target = etcd::sort_target::create});
    BOOST_REQUIRE(r.kvs.size() == 1u);
    BOOST_TEST(r.kvs[0].key == "/svc/c");  // the newest

    r = co_await c.range("/svc/", end, {.keys_only = true});
    BOOST_REQUIRE(r.kvs.size() == 4u);
    BOOST_TEST(r.kvs[1].key == "/svc/b");
    BOOST_TEST(r.kvs[1].value.empty());

    r = co_await c.range("/svc/", end, {.count_only = true});
    BOOST_TEST(r.kvs.empty());
    BOOST_TEST(r.count == 4);

    r = co_await c.range("/svc/", end, {.serializable = true});
    BOOST_TEST(r.kvs.size() == 4u);

    // A read at an older revision.
    r = co_await c.range("/svc/a", "", {.revision = p1.header.revision});
    BOOST_REQUIRE(r.kvs.size() == 1u);
    BOOST_TEST(r.kvs[0].value == "v1");

    // Every key from a key on: range_end "\0".
    r = co_await c.range("/svc/c", std::string(1, '\0'));
    BOOST_TEST(r.kvs.size() == 3u);  // /svc/c, /svc/empty, /svc0

    // Delete one key, then a prefix, with prev_kv.
    auto d = co_await c.delete_range("/svc/b");
    BOOST_TEST(d.deleted == 1);
    BOOST_TEST(d.prev_kvs.empty());
    d = co_await c.delete_range("/nope");
    BOOST_TEST(d.deleted == 0);
    d = co_await c.delete_range("/svc/", end, true);
    BOOST_TEST(d.deleted == 3);
    BOOST_REQUIRE(d.prev_kvs.size() == 3u);
    BOOST_TEST(d.prev_kvs[0].key == "/svc/a");
    BOOST_TEST(d.prev_kvs[0].value == "v2");
    r = co_await c.range("/svc/", end);
    BOOST_TEST(r.kvs.empty());
    r = co_await c.range("/svc0");
    BOOST_TEST(r.kvs.size() == 1u);

    // A request etcd refuses: key not provided.
    auto const err = co_await expect_error<etcd::api_error>(coro(c).put("", "v"), "put without a key");
    BOOST_TEST(err.grpc_code() == 3);
    BOOST_TEST(err.http_status() == 400u);
    BOOST_TEST((err.code() == tenure::error::etcd_error));
    BOOST_TEST(err.server_message() == "etcdserver: key is not provided");
}

asio::awaitable<void> txn_compare_and_ops(single_env& e) {
    auto& c = e.c();
    auto const lease = co_await c.lease_grant(60);

    // The election campaign: take the key only if it does not exist.
    std::vector<etcd::compare> absent{etcd::compare::create_revision("/el/leader", etcd::compare_result::equal, 0)};
    std::vector<etcd::request_op> take{etcd::put_op{"/el/leader", "nodeA", {.lease = lease.id}}};
    std::vector<etcd::request_op> read{etcd::range_op{"/el/leader", "", {}}};
    auto const t1 = co_await c.txn(absent, take, read);
    BOOST_TEST(t1.succeeded);
    BOOST_REQUIRE(t1.responses.size() == 1u);
    BOOST_TEST(std::holds_alternative<etcd::put_response>(t1.responses[0]));
    BOOST_TEST(std::get<etcd::put_response>(t1.responses[0]).header.revision == t1.header.revision);
    std::int64_t const rev = t1.header.revision;

    std::vector<etcd::request_op> take_b{etcd::put_op{"/el/leader", "nodeB", {}}};
    auto const t2 = co_await c.txn(absent, take_b, read);
    BOOST_TEST(!t2.succeeded);  // "succeeded" omitted
    BOOST_REQUIRE(t2.responses.size() == 1u);
    auto const& rr = std::get<etcd::range_response>(t2.responses[0]);
    BOOST_REQUIRE(rr.kvs.size() == 1u);
    BOOST_TEST(rr.kvs[0].value == "nodeA");
    BOOST_TEST(rr.kvs[0].create_revision == rev);
    BOOST_TEST(rr.kvs[0].lease == lease.id);

    // Every compare target and result, true and false.
    using R = etcd::compare_result;
    struct check {
        etcd::compare cmp;
        bool expected;
    };
    std::vector<check> const checks{
        {etcd::compare::create_revision("/el/leader", R::equal, rev), true},
        {etcd::compare::create_revision("/el/leader", R::not_equal, rev), false},
        {etcd::compare::create_revision("/el/leader", R::less, rev + 1), true},
        {etcd::compare::create_revision("/el/leader", R::greater, rev), false},
        {etcd::compare::mod_revision("/el/leader", R::equal, rev), true},
        {etcd::compare::mod_revision("/el/leader", R::greater, rev - 1), true},
        {etcd::compare::mod_revision("/el/leader", R::less, rev), false},
        {etcd::compare::version("/el/leader", R::equal, 1), true},
        {etcd::compare::version("/el/leader", R::not_equal, 1), false},
        {etcd::compare::version("/el/missing", R::equal, 0), true},
        {etcd::compare::value_of("/el/leader", R::equal, "nodeA"), true},
        {etcd::compare::value_of("/el/leader", R::not_equal, "nodeA"), false},
        {etcd::compare::value_of("/el/leader", R::greater, "nodeA"), false},
        {etcd::compare::value_of("/el/leader", R::less, "nodeB"), true},
        {etcd::compare::lease("/el/leader", R::equal, lease.id), true},
        {etcd::compare::lease("/el/leader", R::not_equal, lease.id), false},
    };
    std::vector<etcd::request_op> const none;
    for (std::size_t i = 0; i < checks.size(); ++i) {
        std::vector<etcd::compare> one{checks[i].cmp};
        auto const t = co_await c.txn(one, none, none);
        BOOST_TEST(t.succeeded == checks[i].expected, "compare #" << i);
        BOOST_TEST(t.responses.empty());
    }

    // Several compares (all must hold) and several ops of every kind.
    co_await c.put("/el/x", "1");
    co_await c.put("/el/y", "2");
    std::vector<etcd::compare> both{etcd::compare::create_revision("/el/leader", R::equal, rev),
                                    etcd::compare::value_of("/el/x", R::equal, "1")};
    std::vector<etcd::request_op> ops{etcd::put_op{"/el/z", "3", {}}, etcd::range_op{"/el/", etcd::prefix_end("/el/"), {}},
                                      etcd::delete_op{"/el/x", "", true}};
    auto const t3 = co_await c.txn(both, ops, none);
    BOOST_TEST(t3.succeeded);
    BOOST_REQUIRE(t3.responses.size() == 3u);
    auto const& listed = std::get<etcd::range_response>(t3.responses[1]);
    BOOST_TEST(listed.kvs.size() == 4u);  // leader, x, y, z (the put is visible to later ops)
    auto const& deleted = std::get<etcd::delete_response>(t3.responses[2]);
    BOOST_TEST(deleted.deleted == 1);
    BOOST_REQUIRE(deleted.prev_kvs.size() == 1u);
    BOOST_TEST(deleted.prev_kvs[0].value == "1");

    both[1] = etcd::compare::value_of("/el/x", R::equal, "1");  // /el/x is gone now
    std::vector<etcd::request_op> fail_ops{etcd::delete_op{"/el/y", "", false}};
    auto const t4 = co_await c.txn(both, ops, fail_ops);
    BOOST_TEST(!t4.succeeded);
    BOOST_REQUIRE(t4.responses.size() == 1u);
    BOOST_TEST(std::get<etcd::delete_response>(t4.responses[0]).deleted == 1);

    // Resign as etcd's Election does: delete only if still ours.
    std::vector<etcd::compare> ours{etcd::compare::create_revision("/el/leader", R::equal, rev)};
    std::vector<etcd::request_op> resign{etcd::delete_op{"/el/leader", "", false}};
    BOOST_TEST((co_await c.txn(ours, resign, none)).succeeded);
    BOOST_TEST(!(co_await c.txn(ours, resign, none)).succeeded);

    // etcd refuses two puts of one key in a txn.
    std::vector<etcd::request_op> dup{etcd::put_op{"/el/d", "1", {}}, etcd::put_op{"/el/d", "2", {}}};
    std::vector<etcd::compare> no_cmp;
    auto const err = co_await expect_error<etcd::api_error>(coro(c).txn(no_cmp, dup, none), "txn with a duplicate key");
    BOOST_TEST(err.grpc_code() == 3);
    BOOST_TEST(err.http_status() == 400u);
    BOOST_TEST(err.server_message() == "etcdserver: duplicate key given in txn request");
}

asio::awaitable<void> watch_puts_and_deletes_in_order(single_env& e) {
    auto& c = e.c();
    co_await c.put("/w/before", "ignored");
    auto w = co_await c.watch("/w/", etcd::prefix_end("/w/"), {.prev_kv = true});
    BOOST_TEST(w.is_open());
    BOOST_TEST(w.created_header().revision >= 2);
    BOOST_TEST(w.endpoint() == e.server.client_url());
    std::int64_t const start = w.created_header().revision;

    co_await c.put("/w/a", "1");
    co_await c.put("/w/b", binary_bytes());
    co_await c.put("/w/a", "2");
    co_await c.put("/outside", "x");
    co_await c.delete_range("/w/a");
    co_await c.put("/w/empty", "");
    co_await c.delete_range("/w/", etcd::prefix_end("/w/"));  // b, before, empty: one revision

    auto const ev = co_await collect(w, 8);
    BOOST_REQUIRE(ev.size() == 8u);
    using T = etcd::event_type;
    BOOST_TEST((ev[0].type == T::put));
    BOOST_TEST(ev[0].kv.key == "/w/a");
    BOOST_TEST(ev[0].kv.value == "1");
    BOOST_TEST(ev[0].kv.version == 1);
    BOOST_TEST(ev[0].kv.mod_revision == start + 1);
    BOOST_TEST(!ev[0].prev_kv);
    BOOST_TEST(ev[1].kv.value == binary_bytes());
    BOOST_TEST(ev[2].kv.value == "2");
    BOOST_REQUIRE(ev[2].prev_kv);
    BOOST_TEST(ev[2].prev_kv->value == "1");
    BOOST_TEST((ev[3].type == T::del));
    BOOST_TEST(ev[3].kv.key == "/w/a");
    BOOST_TEST(ev[3].kv.mod_revision == start + 5);  // the put to /outside took start + 4
    BOOST_REQUIRE(ev[3].prev_kv);
    BOOST_TEST(ev[3].prev_kv->value == "2");
    BOOST_TEST((ev[4].type == T::put));
    BOOST_TEST(ev[4].kv.key == "/w/empty");
    BOOST_TEST(ev[4].kv.value.empty());
    for (std::size_t i = 5; i < 8; ++i) {
        BOOST_TEST((ev[i].type == T::del));
        BOOST_TEST(ev[i].kv.mod_revision == start + 7);
    }
    for (std::size_t i = 1; i < ev.size(); ++i) BOOST_TEST(ev[i].kv.mod_revision >= ev[i - 1].kv.mod_revision);

    // Filters: deletes only.
    auto dels = co_await c.watch("/f/", etcd::prefix_end("/f/"), {.no_put = true});
    co_await c.put("/f/a", "1");
    co_await c.delete_range("/f/a");
    auto const fe = co_await collect(dels, 1);
    BOOST_TEST((fe[0].type == T::del));
}

asio::awaitable<void> watch_replays_history(single_env& e) {
    auto& c = e.c();
    auto const first = co_await c.put("/h/k", "1");
    co_await c.put("/h/k", "2");
    co_await c.put("/h/other", "x");
    co_await c.delete_range("/h/k");
    co_await c.put("/h/k", "3");

    auto w = co_await c.watch("/h/k", "", {.start_revision = first.header.revision});
    auto const ev = co_await collect(w, 4);
    BOOST_REQUIRE(ev.size() == 4u);
    BOOST_TEST(ev[0].kv.value == "1");
    BOOST_TEST(ev[0].kv.mod_revision == first.header.revision);
    BOOST_TEST(ev[1].kv.value == "2");
    BOOST_TEST((ev[2].type == etcd::event_type::del));
    BOOST_TEST(ev[3].kv.value == "3");
    BOOST_TEST(ev[3].kv.version == 1);  // recreated

    // Live events follow the replay on the same stream.
    co_await c.put("/h/k", "4");
    auto const live = co_await collect(w, 1);
    BOOST_TEST(live[0].kv.value == "4");
}

asio::awaitable<void> watch_compacted(single_env& e) {
    auto& c = e.c();
    auto const first = co_await c.put("/c/k", "1");
    co_await c.put("/c/k", "2");
    auto const third = co_await c.put("/c/k", "3");
    co_await c.compact(third.header.revision, true);

    // A read below the compaction point.
    auto err = co_await expect_error<etcd::api_error>(coro(c).range("/c/k", "", {.revision = first.header.revision}), "range at a compacted revision");
    BOOST_TEST((err.code() == tenure::error::etcd_compacted));
    BOOST_TEST(err.grpc_code() == 11);

    // A watch below it: created, then canceled with compact_revision.
    auto w = co_await c.watch("/c/k", "", {.start_revision = first.header.revision});
    err = co_await expect_error<etcd::api_error>(watch_next(w), "watch from a compacted revision");
    BOOST_TEST((err.code() == tenure::error::etcd_compacted));
    BOOST_TEST(err.compact_revision() == third.header.revision);
    std::int64_t const compact_rev = err.compact_revision();
    BOOST_TEST(!w.is_open());
    err = co_await expect_error<etcd::api_error>(watch_next(w), "next() on a closed stream");
    BOOST_TEST((err.code() == asio::error::not_connected));

    // Resuming where history begins works.
    auto w2 = co_await c.watch("/c/k", "", {.start_revision = compact_rev});
    auto const ev = co_await collect(w2, 1);
    BOOST_TEST(ev[0].kv.value == "3");
}

// Cancelling next() closes the stream; destroying a stream with nothing
// pending is fine too; the client keeps working.
asio::awaitable<void> watch_cancel(single_env& e) {
    auto& c = e.c();
    auto w = co_await c.watch("/quiet");
    auto const r = co_await (w.next(asio::use_awaitable) || pause(200ms));
    BOOST_TEST(r.index() == 1u);  // the timer won; next() was cancelled
    BOOST_TEST(!w.is_open());
    auto const err = co_await expect_error<etcd::api_error>(watch_next(w), "next() after a cancelled next()");
    BOOST_TEST((err.code() == asio::error::not_connected));

    {
        auto w2 = co_await c.watch("/quiet");
        etcd::watch_stream moved = std::move(w2);
        BOOST_TEST(moved.is_open());
        BOOST_TEST(!w2.is_open());
    }
    // A stream closed by close() while next() waits.
    auto w3 = co_await c.watch("/quiet");
    auto closer = [&]() -> asio::awaitable<void> {
        co_await pause(50ms);
        w3.close();
    };
    auto const both = co_await (expect_error<etcd::api_error>(watch_next(w3), "next() on a stream closed meanwhile") && closer());
    BOOST_TEST((both.code() == asio::error::operation_aborted));
    co_await c.put("/quiet", "still works");
    BOOST_TEST((co_await c.range("/quiet")).kvs.size() == 1u);
}

// A dead endpoint first: requests and watches fail over to the live one,
// which is then remembered. A black hole (accepts, never answers) costs one
// request timeout.
asio::awaitable<void> endpoint_failover(single_env& e) {
    auto const dead = "http://127.0.0.1:" + std::to_string(tenure::itest::free_loopback_port());
    auto const live = e.server.client_url();
    auto c = e.make_client({dead, live});
    BOOST_TEST(c->current_endpoint() == dead);
    co_await c->put("fo/k", "v");
    BOOST_TEST(c->current_endpoint() == live);
    BOOST_TEST((co_await c->range("fo/k")).kvs.size() == 1u);
    auto const g = co_await c->lease_grant(10);
    BOOST_TEST(co_await c->lease_keepalive(g.id) == 10);

    auto c2 = e.make_client({dead, live});
    auto w = co_await c2->watch("fo/k");
    BOOST_TEST(w.endpoint() == live);
    BOOST_TEST(c2->current_endpoint() == live);
    co_await c2->put("fo/k", "v2");
    auto const ev = co_await collect(w, 1);
    BOOST_TEST(ev[0].kv.value == "v2");

    // Only dead endpoints: the transport error, no HTTP status.
    auto c3 = e.make_client({dead});
    auto err = co_await expect_error<etcd::api_error>(coro(*c3).range("fo/k"), "range on a dead endpoint");
    BOOST_TEST((err.code() == asio::error::connection_refused));
    BOOST_TEST(err.http_status() == 0u);
    BOOST_TEST(err.grpc_code() == 0);
    err = co_await expect_error<etcd::api_error>(coro(*c3).watch("fo/k"), "watch on a dead endpoint");
    BOOST_TEST((err.code() == asio::error::connection_refused));

    // A black hole: the kernel completes the connection, nobody answers.
    asio::ip::tcp::acceptor hole(e.ioc, {asio::ip::make_address("127.0.0.1"), 0});
    std::string const hole_url = "http://127.0.0.1:" + std::to_string(hole.local_endpoint().port());
    auto c4 = e.make_client({hole_url, live}, 300ms);
    auto const t0 = steady::now();
    BOOST_TEST((co_await c4->range("fo/k")).kvs.size() == 1u);
    BOOST_TEST(c4->current_endpoint() == live);
    BOOST_TEST((steady::now() - t0 >= 250ms));  // the black hole cost its timeout
    auto c5 = e.make_client({hole_url}, 200ms);
    err = co_await expect_error<etcd::api_error>(coro(*c5).range("fo/k"), "range on a black hole");
    BOOST_TEST((err.code() == asio::error::timed_out));
}

// A server that is not etcd (a tenure agent, which speaks Consul's API):
// the HTTP status and the body come back, for unary requests and watches.
asio::awaitable<void> not_an_etcd_server(single_env& e, std::uint16_t agent_port) {
    auto c = e.make_client({"http://127.0.0.1:" + std::to_string(agent_port)});
    auto err = co_await expect_error<etcd::api_error>(coro(*c).range("k"), "range on a Consul agent");
    BOOST_TEST(err.http_status() == 404u);
    BOOST_TEST(err.grpc_code() == 0);
    BOOST_TEST((err.code() == tenure::error::http_status));
    BOOST_TEST(err.server_message() == "404 page not found");
    err = co_await expect_error<etcd::api_error>(coro(*c).watch("k"), "watch on a Consul agent");
    BOOST_TEST(err.http_status() == 404u);
    BOOST_TEST((err.code() == tenure::error::http_status));
    BOOST_TEST(err.server_message() == "404 page not found");
    err = co_await expect_error<etcd::api_error>(coro(*c).lease_keepalive(1), "keepalive on a Consul agent");
    BOOST_TEST(err.http_status() == 404u);
}

// The configuration: normalization, ETCDCTL_ENDPOINTS-free defaults, bad URLs.
void config_checks(single_env& e) {
    auto c = e.make_client({"127.0.0.1:2379", "localhost", " http://127.0.0.1:1/ "});
    BOOST_TEST(c->config().endpoints[0] == "http://127.0.0.1:2379");
    BOOST_TEST(c->config().endpoints[1] == "http://localhost:2379");
    BOOST_TEST(c->config().endpoints[2] == "http://127.0.0.1:1");
    BOOST_CHECK_THROW(e.make_client({"https://127.0.0.1:2379"}), boost::system::system_error);
    BOOST_CHECK_THROW(e.make_client({"http://127.0.0.1:2379/v3"}), boost::system::system_error);
    BOOST_CHECK_THROW(e.make_client({"http://127.0.0.1:99999"}), boost::system::system_error);
}

// ---- scenario: three members ----------------------------------------------------------

asio::awaitable<void> cluster_kill_current_member(cluster_env& e, std::size_t leader) {
    // The client starts on the leader; the others follow.
    std::vector<std::string> endpoints{e.cluster.member(leader).client_url()};
    for (std::size_t i = 0; i < e.cluster.size(); ++i)
        if (i != leader) endpoints.push_back(e.cluster.member(i).client_url());
    auto c = e.make_client(endpoints, 3s);

    auto const g = co_await c->lease_grant(30);
    etcd::put_options po;
    po.lease = g.id;
    auto const p = co_await c->put("/cl/k", "before", po);
    BOOST_TEST(c->current_endpoint() == endpoints[0]);
    auto w = co_await c->watch("/cl/", etcd::prefix_end("/cl/"));
    BOOST_TEST(w.endpoint() == endpoints[0]);
    std::int64_t last_seen = w.created_header().revision;
    BOOST_TEST(last_seen >= p.header.revision);

    e.cluster.kill(leader);

    // The watch on the killed member ends with a transport error.
    auto const err = co_await expect_error<etcd::api_error>(watch_next(w), "watch on a killed member");
    BOOST_TEST(err.http_status() == 0u);
    BOOST_TEST(!w.is_open());

    // Requests keep working: the next member answers once a new leader is elected.
    auto const t0 = steady::now();
    auto const p2 = co_await c->put("/cl/k", "after", po);
    BOOST_TEST_MESSAGE("first put after the kill took "
                       << std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - t0).count() << " ms");
    BOOST_TEST(c->current_endpoint() != endpoints[0]);
    BOOST_TEST(p2.header.revision > p.header.revision);
    auto const r = co_await c->range("/cl/k");
    BOOST_REQUIRE(r.kvs.size() == 1u);
    BOOST_TEST(r.kvs[0].value == "after");
    BOOST_TEST(r.kvs[0].lease == g.id);
    BOOST_TEST(co_await c->lease_keepalive(g.id) == 30);  // the lease survived the leader

    // A new watch resumes after the last revision seen: nothing is lost.
    auto w2 = co_await c->watch("/cl/", etcd::prefix_end("/cl/"), {.start_revision = last_seen + 1});
    BOOST_TEST(w2.endpoint() != endpoints[0]);
    auto const ev = co_await collect(w2, 1);
    BOOST_TEST(ev[0].kv.value == "after");

    auto const st = co_await c->status();
    BOOST_TEST(st.leader != 0u);
    BOOST_TEST(st.version.rfind("3.", 0) == 0u);
}

// A member that loses its quorum ends its watches with "no leader" (the
// client sends Grpc-Metadata-hasleader: true); serializable reads still work.
asio::awaitable<void> cluster_quorum_loss(cluster_env& e, std::size_t survivor) {
    auto c = e.make_client({e.cluster.member(survivor).client_url()});
    co_await c->put("/q/k", "v");
    auto w = co_await c->watch("/q/", etcd::prefix_end("/q/"));
    for (std::size_t i = 0; i < e.cluster.size(); ++i)
        if (i != survivor) e.cluster.kill(i);

    auto const t0 = steady::now();
    auto const outcome = co_await within(error_of(watch_next(w)), 20s);
    BOOST_REQUIRE_MESSAGE(outcome, "the watch did not end within 20 s of losing the quorum");
    auto const& r = *outcome;
    BOOST_REQUIRE_MESSAGE(r, "the watch delivered events instead of ending");
    BOOST_TEST_MESSAGE("the watch ended "
                       << std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - t0).count()
                       << " ms after the quorum was lost: " << r->what());
    BOOST_TEST((r->code() == tenure::error::etcd_unavailable));
    BOOST_TEST(r->grpc_code() == 14);
    BOOST_TEST(r->server_message() == "etcdserver: no leader");
    BOOST_TEST(!w.is_open());

    auto const local = co_await c->range("/q/k", "", {.serializable = true});
    BOOST_REQUIRE(local.kvs.size() == 1u);
    BOOST_TEST(local.kvs[0].value == "v");
}

}  // namespace

BOOST_FIXTURE_TEST_SUITE(etcd_client, single_env)

BOOST_AUTO_TEST_CASE(lease_grant_keepalive_ttl_revoke) {
    run([&] { return lease_lifecycle(*this); });
}
BOOST_AUTO_TEST_CASE(lease_expires_without_keepalive) {
    run([&] { return lease_expiry(*this); });
}
BOOST_AUTO_TEST_CASE(kv_put_range_delete_binary_prefix) {
    run([&] { return kv_put_range_delete(*this); });
}
BOOST_AUTO_TEST_CASE(txn_compares_and_ops) {
    run([&] { return txn_compare_and_ops(*this); });
}
BOOST_AUTO_TEST_CASE(watch_events_in_order) {
    run([&] { return watch_puts_and_deletes_in_order(*this); });
}
BOOST_AUTO_TEST_CASE(watch_from_old_revision_replays) {
    run([&] { return watch_replays_history(*this); });
}
BOOST_AUTO_TEST_CASE(watch_on_compacted_revision) {
    run([&] { return watch_compacted(*this); });
}
BOOST_AUTO_TEST_CASE(watch_next_cancellation_closes) {
    run([&] { return watch_cancel(*this); });
}
BOOST_AUTO_TEST_CASE(failover_from_dead_endpoint) {
    run([&] { return endpoint_failover(*this); });
}
BOOST_AUTO_TEST_CASE(answers_from_a_server_that_is_not_etcd) {
    tenure::itest::agent_process agent;
    run([&] { return not_an_etcd_server(*this, agent.port()); });
}
BOOST_AUTO_TEST_CASE(endpoint_configuration) {
    config_checks(*this);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_FIXTURE_TEST_SUITE(etcd_cluster, cluster_env)

BOOST_AUTO_TEST_CASE(killing_the_current_member_keeps_requests_working) {
    std::size_t const leader = cluster.leader_index();
    run([&] { return cluster_kill_current_member(*this, leader); }, 60s);
    BOOST_TEST(cluster.leader_index() != leader);
}
BOOST_AUTO_TEST_CASE(losing_quorum_ends_watches_with_no_leader) {
    run([&] { return cluster_quorum_loss(*this, 0); }, 60s);
}

BOOST_AUTO_TEST_SUITE_END()
