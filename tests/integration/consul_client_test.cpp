// Integration tests of tenure::consul::client.
//
// Every scenario runs twice: over HTTP against a real `tenure agent` process
// (suite consul_client_http), and in-process against a tenure::agent on the
// test's io_context (suite consul_client_inprocess), where the agent must
// never see a connection. Transport-specific behaviour (connection refused,
// deadlines, cancellation, the keep-alive pool and its stale-connection
// retry, address parsing) has its own suite, consul_client_transport.
//
// g++ 12.2 destroys an aggregate temporary with a non-trivial destructor
// twice when it is built inside a co_await full-expression
// (`co_await c.session_create({.name = "x"})` frees a string twice), so the
// scenarios name such requests before awaiting. Trivially destructible
// aggregates (put_options, read_options) and function results are fine.
//
// Scenarios await events (a blocking query woken by a write, a server that
// answers) rather than sleep. The one timer used as a "meanwhile" is in the
// cancellation cases, where the point is to cancel a request that is parked.

// Designated initializers that leave members to their defaults are the point.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
// g++ 12 false positive on Asio's coroutine frame allocator (fixed in g++ 13).
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include "agent_process.hpp"
#include "awaiting.hpp"

#include "consul/client_access.hpp"

#include <tenure/agent.hpp>
#include <tenure/consul/client.hpp>
#include <tenure/error.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/buffers_iterator.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

namespace asio = boost::asio;
namespace consul = tenure::consul;
using namespace std::chrono_literals;
using namespace asio::experimental::awaitable_operators;
using tcp = asio::ip::tcp;
using steady = std::chrono::steady_clock;

namespace {

using tenure::itest::expect_error;
using tenure::itest::pause;

constexpr std::uint64_t big_flags = 16210313421097356768ull;  // semaphore flags, > 2^63

// ---- environments ---------------------------------------------------------------

// An io_context with a client on it; the client is destroyed first.
struct client_env {
    asio::io_context ioc{1};
    std::string node;
    std::string datacenter;

    virtual ~client_env() = default;
    virtual std::unique_ptr<consul::client> make_client(consul::client_config cfg = {}) = 0;
    virtual bool in_process() const = 0;

    consul::client& c() {
        if (!client_) client_ = make_client();
        return *client_;
    }

    // Runs `f` on the io_context until it finishes (at most `limit`); rethrows its exception.
    void run(std::function<asio::awaitable<void>(client_env&)> const& f, std::chrono::seconds limit = 60s) {
        std::exception_ptr ep;
        bool done = false;
        asio::co_spawn(ioc, f(*this), [&](std::exception_ptr e) {
            ep = e;
            done = true;
            ioc.stop();
        });
        ioc.restart();
        ioc.run_for(limit);
        BOOST_REQUIRE_MESSAGE(done, "scenario did not finish within " << limit.count() << "s");
        if (ep) std::rethrow_exception(ep);
    }

protected:
    std::unique_ptr<consul::client> client_;
};

// A real `tenure agent` process, over HTTP.
struct http_env : client_env {
    tenure::itest::agent_process agent;

    http_env() {
        node = "itest-node";
        datacenter = "itest-dc";
    }
    ~http_env() override { client_.reset(); }

    std::string address() const { return "127.0.0.1:" + std::to_string(agent.port()); }

    std::unique_ptr<consul::client> make_client(consul::client_config cfg = {}) override {
        if (cfg.address.empty()) cfg.address = address();
        return std::make_unique<consul::client>(ioc.get_executor(), std::move(cfg));
    }
    bool in_process() const override { return false; }
};

// A tenure::agent on the test's io_context, called in-process.
struct inprocess_env : client_env {
    std::unique_ptr<tenure::agent> agent;

    inprocess_env() {
        node = "tenure";
        datacenter = "dc1";
        agent = std::make_unique<tenure::agent>(
            ioc.get_executor(),
            tenure::agent_options{.http_addr = "127.0.0.1:0", .session_ttl_min = 100ms, .log_stream = nullptr});
        agent->start();
    }
    ~inprocess_env() override {
        BOOST_CHECK_EQUAL(agent->connection_count(), 0u);
        client_.reset();
        agent.reset();
    }

    std::unique_ptr<consul::client> make_client(consul::client_config cfg = {}) override {
        return std::make_unique<consul::client>(ioc.get_executor(), agent->in_process(), std::move(cfg));
    }
    bool in_process() const override { return true; }
};

// ---- helpers ----------------------------------------------------------------------

// The client's coroutines (not its completion-token operations): they throw
// api_error with the HTTP status and the server's message.
using tenure::detail::coro;

// A KV value for comparisons and messages.
std::string val(std::optional<std::string> const& v) { return v ? *v : std::string("<no value>"); }

consul::session_request short_session(std::string name, std::chrono::nanoseconds lock_delay = 0s) {
    consul::session_request r;
    r.name = std::move(name);
    r.ttl = 10s;
    r.lock_delay = lock_delay;
    return r;
}

// ---- scenarios (both transports) --------------------------------------------------------

asio::awaitable<void> sessions(client_env& e) {
    auto& c = e.c();
    consul::session_request req;
    req.name = "itest session";
    req.ttl = 15s;
    req.lock_delay = 7s;
    req.behavior = consul::session_behavior::delete_keys;
    std::string const id = co_await c.session_create(req);
    BOOST_TEST(id.size() == 36u);

    auto info = co_await c.session_info_get(id);
    BOOST_REQUIRE(info.value);
    BOOST_TEST(info.value->id == id);
    BOOST_TEST(info.value->name == "itest session");
    BOOST_TEST(info.value->node == e.node);
    BOOST_TEST(info.value->ttl.count() == std::chrono::nanoseconds(15s).count());
    BOOST_TEST(info.value->lock_delay.count() == std::chrono::nanoseconds(7s).count());
    BOOST_TEST((info.value->behavior == consul::session_behavior::delete_keys));
    BOOST_TEST(info.value->node_checks == std::vector<std::string>{"serfHealth"});
    BOOST_TEST(info.value->create_index > 0u);
    BOOST_TEST(info.meta.index >= info.value->create_index);
    BOOST_TEST(info.meta.known_leader);

    // No checks at all, explicitly.
    consul::session_request bare = short_session("bare");
    bare.node_checks = std::vector<std::string>{};
    std::string const bare_id = co_await c.session_create(bare);
    auto bare_info = co_await c.session_info_get(bare_id);
    BOOST_REQUIRE(bare_info.value);
    BOOST_TEST(bare_info.value->node_checks.empty());
    BOOST_TEST((bare_info.value->behavior == consul::session_behavior::release));

    auto list = co_await c.session_list();
    BOOST_TEST(list.value.size() == 2u);
    BOOST_TEST(list.meta.index >= bare_info.value->create_index);

    auto renewed = co_await c.session_renew(id);
    BOOST_REQUIRE(renewed);
    BOOST_TEST(renewed->id == id);
    BOOST_TEST(renewed->ttl.count() == std::chrono::nanoseconds(15s).count());

    co_await c.session_destroy(id);
    BOOST_TEST(!(co_await c.session_renew(id)));
    BOOST_TEST(!(co_await c.session_info_get(id)).value);
    co_await c.session_destroy(id);  // unknown: Consul answers true
    BOOST_TEST((co_await c.session_list()).value.size() == 1u);
    co_await c.session_destroy(bare_id);
    BOOST_TEST((co_await c.session_list()).value.empty());
}

// A session with a short TTL lapses (after 2 x TTL without renewal); a
// blocking read of it is woken by the invalidation, and renew then says 404.
asio::awaitable<void> session_ttl_expiry(client_env& e) {
    auto& c = e.c();
    consul::session_request req = short_session("short-lived");
    req.ttl = 100ms;
    std::string const id = co_await c.session_create(req);
    BOOST_TEST(co_await c.kv_acquire("ttl/k", id, "v"));
    auto info = co_await c.session_info_get(id);
    BOOST_REQUIRE(info.value);
    BOOST_TEST(info.value->ttl.count() == std::chrono::nanoseconds(100ms).count());
    std::uint64_t index = info.meta.index;
    std::optional<consul::session_info> seen = info.value;
    auto const start = steady::now();
    while (seen && steady::now() - start < 20s) {
        auto r = co_await c.session_info_get(id, {.index = index, .wait = 10s});
        index = consul::next_wait_index(index, r.meta.index);
        seen = r.value;
    }
    BOOST_TEST(!seen);
    BOOST_TEST(!(co_await c.session_renew(id)));
    auto key = co_await c.kv_get("ttl/k");
    BOOST_REQUIRE(key.value);
    BOOST_TEST(key.value->session.empty());
}

asio::awaitable<void> lock_delay_zero(client_env& e) {
    auto& c = e.c();
    std::string const a = co_await c.session_create(short_session("a", 0s));
    auto info = co_await c.session_info_get(a);
    BOOST_REQUIRE(info.value);
    BOOST_TEST(info.value->lock_delay.count() == 0);

    // The default (15s) is sent explicitly too and echoed.
    consul::session_request const defaults{.name = "default"};
    std::string const d = co_await c.session_create(defaults);
    auto dinfo = co_await c.session_info_get(d);
    BOOST_REQUIRE(dinfo.value);
    BOOST_TEST(dinfo.value->lock_delay.count() == std::chrono::nanoseconds(15s).count());

    // With no lock-delay, a destroyed holder's key can be taken at once.
    BOOST_TEST(co_await c.kv_acquire("ld/zero", a, "a"));
    co_await c.session_destroy(a);
    std::string const b = co_await c.session_create(short_session("b"));
    BOOST_TEST(co_await c.kv_acquire("ld/zero", b, "b"));

    // With a lock-delay, it cannot.
    BOOST_TEST(co_await c.kv_acquire("ld/delayed", d, "d"));
    co_await c.session_destroy(d);
    BOOST_TEST(!(co_await c.kv_acquire("ld/delayed", b, "b")));
}

asio::awaitable<void> kv_operations(client_env& e) {
    auto& c = e.c();
    auto missing = co_await c.kv_get("kv/missing");
    BOOST_TEST(!missing.value);
    BOOST_TEST(missing.meta.index >= 1u);
    BOOST_TEST(missing.meta.known_leader);

    BOOST_TEST(co_await c.kv_put("kv/a", "alpha", {.flags = 42}));
    auto a = co_await c.kv_get("kv/a");
    BOOST_REQUIRE(a.value);
    BOOST_TEST(a.value->key == "kv/a");
    BOOST_TEST(val(a.value->value) == "alpha");
    BOOST_TEST(a.value->flags == 42u);
    BOOST_TEST(a.value->session.empty());
    BOOST_TEST(a.value->lock_index == 0u);
    BOOST_TEST(a.meta.index == a.value->modify_index);
    BOOST_TEST(a.value->create_index == a.value->modify_index);

    // Values are bytes; a missing value is not an empty one.
    std::string bytes;
    for (int i = 0; i < 256; ++i) bytes += static_cast<char>(i);
    BOOST_TEST(co_await c.kv_put("kv/bin", bytes));
    BOOST_TEST(val((co_await c.kv_get("kv/bin")).value->value) == bytes);
    BOOST_TEST(co_await c.kv_put("kv/null", std::nullopt));
    auto null = co_await c.kv_get("kv/null");
    BOOST_REQUIRE(null.value);
    BOOST_TEST(!null.value->value);

    // Keys are percent-encoded (but '/' separates).
    std::string const odd = "kv/odd key?&=#%+\xc3\xa9/x";
    BOOST_TEST(co_await c.kv_put(odd, "odd"));
    auto oddv = co_await c.kv_get(odd);
    BOOST_REQUIRE(oddv.value);
    BOOST_TEST(oddv.value->key == odd);

    auto list = co_await c.kv_list("kv/");
    BOOST_TEST(list.value.size() == 4u);
    BOOST_TEST(list.value.front().key == "kv/a");
    BOOST_TEST(list.meta.index >= oddv.value->modify_index);
    BOOST_TEST((co_await c.kv_list("nothing/here/")).value.empty());

    auto keys = co_await c.kv_keys("kv/", "/");
    BOOST_TEST(keys.value == (std::vector<std::string>{"kv/a", "kv/bin", "kv/null", "kv/odd key?&=#%+\xc3\xa9/"}));
    auto all_keys = co_await c.kv_keys("kv/");
    BOOST_TEST(all_keys.value.size() == 4u);
    BOOST_TEST((co_await c.kv_keys("nothing/here/")).value.empty());

    // CAS: 0 creates only; otherwise the ModifyIndex must match.
    BOOST_TEST(!(co_await c.kv_put("kv/a", "x", {.cas = 0})));
    BOOST_TEST(co_await c.kv_put("kv/new", "n", {.cas = 0}));
    std::uint64_t const mi = a.value->modify_index;
    BOOST_TEST(!(co_await c.kv_put("kv/a", "beta", {.cas = mi + 1000})));
    BOOST_TEST(co_await c.kv_put("kv/a", "beta", {.cas = mi}));
    auto b = co_await c.kv_get("kv/a");
    BOOST_TEST(val(b.value->value) == "beta");
    BOOST_TEST(b.value->flags == 0u);  // a PUT without flags resets them

    // delete, delete-cas.
    BOOST_TEST(!(co_await c.kv_delete("kv/a", b.value->modify_index + 1000)));
    BOOST_TEST(co_await c.kv_delete("kv/a", b.value->modify_index));
    BOOST_TEST(!(co_await c.kv_get("kv/a")).value);
    BOOST_TEST(co_await c.kv_delete("kv/a", 5));  // missing key: true
    BOOST_TEST(co_await c.kv_delete("kv/new"));
    BOOST_TEST(!(co_await c.kv_get("kv/new")).value);

    co_await c.kv_delete_tree("kv/");
    BOOST_TEST((co_await c.kv_list("kv/")).value.empty());
    BOOST_TEST((co_await c.kv_keys("")).value.empty());
}

asio::awaitable<void> flags_round_trip(client_env& e) {
    auto& c = e.c();
    BOOST_TEST(co_await c.kv_put("flags/sem", "v", {.flags = big_flags}));
    auto v = co_await c.kv_get("flags/sem");
    BOOST_REQUIRE(v.value);
    BOOST_TEST(v.value->flags == big_flags);
    BOOST_TEST(co_await c.kv_put("flags/max", "v", {.flags = UINT64_MAX}));
    BOOST_TEST((co_await c.kv_get("flags/max")).value->flags == UINT64_MAX);

    std::string const s = co_await c.session_create(short_session("flags"));
    BOOST_TEST(co_await c.kv_acquire("flags/lock", s, "v", consul::lock_flag_value));
    auto l = co_await c.kv_list("flags/");
    BOOST_REQUIRE(l.value.size() == 3u);
    BOOST_TEST(l.value[0].flags == consul::lock_flag_value);
    BOOST_TEST(l.value[1].flags == UINT64_MAX);
    BOOST_TEST(l.value[2].flags == big_flags);
}

asio::awaitable<void> acquire_release(client_env& e) {
    auto& c = e.c();
    std::string const s1 = co_await c.session_create(short_session("s1", 1s));
    std::string const s2 = co_await c.session_create(short_session("s2", 1s));

    BOOST_TEST(co_await c.kv_acquire("lock/k", s1, "one", consul::lock_flag_value));
    auto held = co_await c.kv_get("lock/k");
    BOOST_REQUIRE(held.value);
    BOOST_TEST(held.value->session == s1);
    BOOST_TEST(held.value->lock_index == 1u);
    BOOST_TEST(held.value->flags == consul::lock_flag_value);

    BOOST_TEST(co_await c.kv_acquire("lock/k", s1, "one again", consul::lock_flag_value));  // same holder
    BOOST_TEST(!(co_await c.kv_acquire("lock/k", s2, "two")));
    BOOST_TEST(!(co_await c.kv_release("lock/k", s2, "two")));
    BOOST_TEST(co_await c.kv_release("lock/k", s1, "one", consul::lock_flag_value));

    auto released = co_await c.kv_get("lock/k");
    BOOST_REQUIRE(released.value);
    BOOST_TEST(released.value->session.empty());
    BOOST_TEST(released.value->lock_index == 1u);
    BOOST_TEST(val(released.value->value) == "one");

    // A clean release applies no lock-delay.
    BOOST_TEST(co_await c.kv_acquire("lock/k", s2, "two"));
    BOOST_TEST((co_await c.kv_get("lock/k")).value->lock_index == 2u);
}

asio::awaitable<void> server_error(client_env& e) {
    auto& c = e.c();
    std::string const unknown = "7a3f0c4e-5b1d-4c2a-9e8f-0123456789ab";
    auto err = co_await expect_error<consul::api_error>(coro(c).kv_acquire("err/k", unknown, "v"), "acquire with an unknown session");
    BOOST_TEST(err.http_status() == 500u);
    BOOST_TEST((err.code() == tenure::error::http_status));
    BOOST_TEST(err.server_message().find("invalid session") != std::string::npos, err.server_message());
    BOOST_TEST(std::string(err.what()).find("500") != std::string::npos, err.what());

    consul::session_request const too_short{.name = "x", .ttl = 1ns};
    auto bad = co_await expect_error<consul::api_error>(coro(c).session_create(too_short), "TTL below the minimum");
    BOOST_TEST(bad.http_status() == 500u);
    BOOST_TEST(bad.server_message().find("Invalid Session TTL") != std::string::npos, bad.server_message());

    auto missing_key = co_await expect_error<consul::api_error>(coro(c).kv_get(""), "empty key");
    BOOST_TEST(missing_key.http_status() == 400u);

    // ?dc= is sent: the agent knows only its own datacenter.
    auto other_dc = e.make_client({.datacenter = "elsewhere"});
    auto dc_err = co_await expect_error<consul::api_error>(coro(*other_dc).kv_get("k"), "unknown datacenter");
    BOOST_TEST(dc_err.http_status() == 500u);
    BOOST_TEST(dc_err.server_message().find("No path to datacenter") != std::string::npos);
    auto own_dc = e.make_client({.datacenter = e.datacenter});
    BOOST_TEST(!(co_await own_dc->kv_get("k")).value);
}

asio::awaitable<void> blocking_get_woken(client_env& e) {
    auto& c = e.c();
    BOOST_TEST(co_await c.kv_put("watch/k", "before"));
    auto first = co_await c.kv_get("watch/k");
    std::uint64_t const index = first.meta.index;

    auto waiter = [&]() -> asio::awaitable<consul::read_result<std::optional<consul::kv_pair>>> {
        co_return co_await c.kv_get("watch/k", {.index = index, .wait = 30s});
    };
    auto writer = [&]() -> asio::awaitable<bool> { co_return co_await c.kv_put("watch/k", "after"); };
    auto const start = steady::now();
    auto [woken, wrote] = co_await (waiter() && writer());
    BOOST_TEST(wrote);
    BOOST_REQUIRE(woken.value);
    BOOST_TEST(val(woken.value->value) == "after");
    BOOST_TEST(woken.meta.index > index);
    BOOST_TEST(consul::next_wait_index(index, woken.meta.index) == woken.meta.index);
    BOOST_TEST((steady::now() - start) < 20s);  // woken, not timed out

    // A second waiter on the prefix, woken by a delete.
    auto lw = [&]() -> asio::awaitable<consul::read_result<std::vector<consul::kv_pair>>> {
        co_return co_await c.kv_list("watch/", {.index = woken.meta.index, .wait = 30s});
    };
    auto del = [&]() -> asio::awaitable<bool> { co_return co_await c.kv_delete("watch/k"); };
    auto [listed, deleted] = co_await (lw() && del());
    BOOST_TEST(deleted);
    BOOST_TEST(listed.value.empty());
}

asio::awaitable<void> blocking_timeout(client_env& e) {
    auto& c = e.c();
    BOOST_TEST(co_await c.kv_put("idle/k", "v"));
    auto first = co_await c.kv_get("idle/k");
    auto const start = steady::now();
    auto again = co_await c.kv_get("idle/k", {.index = first.meta.index, .wait = 200ms});
    auto const took = steady::now() - start;
    BOOST_TEST(again.meta.index == first.meta.index);
    BOOST_REQUIRE(again.value);
    BOOST_TEST(val(again.value->value) == "v");
    BOOST_TEST(took >= 190ms);
    BOOST_TEST(consul::next_wait_index(first.meta.index, again.meta.index) == first.meta.index);

    // Sessions table too (consistent mode is accepted).
    auto sl = co_await c.session_list({.mode = consul::consistency::consistent});
    auto sl2 = co_await c.session_list({.index = sl.meta.index, .wait = 200ms, .mode = consul::consistency::stale});
    BOOST_TEST(sl2.meta.index == sl.meta.index);
}

asio::awaitable<void> transactions(client_env& e) {
    auto& c = e.c();
    BOOST_TEST(co_await c.kv_put("txn/existing", "old", {.flags = 1}));
    auto existing = co_await c.kv_get("txn/existing");

    // "hello" and "hi" need base64 padding on the wire.
    // (Built outside the co_await: g++ 12 miscompiles a braced list there.)
    std::vector<consul::txn_op> ops(3);
    ops[0] = {.verb = "set", .key = "txn/a", .value = "hello", .flags = big_flags};
    ops[1] = {.verb = "cas", .key = "txn/existing", .value = "hi", .index = existing.value->modify_index};
    ops[2] = {.verb = "get", .key = "txn/a"};
    auto ok = co_await c.txn(ops);
    BOOST_TEST(ok.committed);
    BOOST_TEST(ok.errors.empty());
    BOOST_REQUIRE(ok.results.size() == 3u);
    BOOST_TEST(ok.results[2].key == "txn/a");
    BOOST_TEST(val(ok.results[2].value) == "hello");
    BOOST_TEST(ok.results[2].flags == big_flags);
    BOOST_TEST(val((co_await c.kv_get("txn/existing")).value->value) == "hi");

    std::vector<consul::txn_op> failing(2);
    failing[0] = {.verb = "set", .key = "txn/b", .value = "b"};
    failing[1] = {.verb = "cas", .key = "txn/existing", .value = "nope", .index = existing.value->modify_index};
    auto rolled_back = co_await c.txn(failing);
    BOOST_TEST(!rolled_back.committed);
    BOOST_TEST(rolled_back.results.empty());
    BOOST_REQUIRE(rolled_back.errors.size() == 1u);
    BOOST_TEST(rolled_back.errors[0].op_index == 1u);
    BOOST_TEST(!rolled_back.errors[0].what.empty());
    BOOST_TEST(!(co_await c.kv_get("txn/b")).value);
}

asio::awaitable<void> agent_and_checks(client_env& e) {
    auto& c = e.c();
    auto self = co_await c.agent_self();
    BOOST_TEST(self.node_name == e.node);
    BOOST_TEST(self.datacenter == e.datacenter);

    consul::check_registration const check{
        .id = "itest-check", .name = "itest check", .ttl = 30s, .status = "passing", .notes = "bound to a session"};
    co_await c.check_register(check);
    co_await c.check_pass("itest-check", "fine");
    co_await c.check_warn("itest-check", "hmm");
    co_await c.check_pass("itest-check");

    consul::session_request req = short_session("bound");
    req.node_checks = std::vector<std::string>{"serfHealth", "itest-check"};
    std::string const s = co_await c.session_create(req);
    auto info = co_await c.session_info_get(s);
    BOOST_REQUIRE(info.value);
    BOOST_TEST(info.value->node_checks == (std::vector<std::string>{"serfHealth", "itest-check"}));
    BOOST_TEST(co_await c.kv_acquire("checks/lock", s, "v"));

    // Failing the check invalidates the session and releases its key.
    co_await c.check_fail("itest-check", "broken");
    BOOST_TEST(!(co_await c.session_renew(s)));
    auto key = co_await c.kv_get("checks/lock");
    BOOST_REQUIRE(key.value);
    BOOST_TEST(key.value->session.empty());

    // A critical check refuses new sessions bound to it.
    auto refused = co_await expect_error<consul::api_error>(coro(c).session_create(req), "session bound to a critical check");
    BOOST_TEST(refused.http_status() == 500u);
    BOOST_TEST(refused.server_message().find("critical") != std::string::npos, refused.server_message());

    co_await c.check_deregister("itest-check");
    auto gone = co_await expect_error<consul::api_error>(coro(c).check_pass("itest-check"), "pass of a deregistered check");
    BOOST_TEST(gone.http_status() == 404u);
}

// A blocking query cancelled through its cancellation slot: the operation
// ends at once with operation_aborted, and the client stays usable.
asio::awaitable<void> cancel_blocking_query(client_env& e) {
    auto& c = e.c();
    auto const first = co_await c.kv_get("cancel/k");
    asio::cancellation_signal signal;
    std::exception_ptr ep;
    bool done = false;
    auto const start = steady::now();
    asio::co_spawn(co_await asio::this_coro::executor,
                   coro(c).kv_get("cancel/k", {.index = first.meta.index, .wait = 30s}),
                   asio::bind_cancellation_slot(signal.slot(), [&](std::exception_ptr x, auto) {
                       ep = x;
                       done = true;
                   }));
    co_await pause(100ms);  // meanwhile the query is parked
    BOOST_TEST(!done);
    signal.emit(asio::cancellation_type::terminal);
    while (!done) co_await pause(1ms);
    BOOST_TEST((steady::now() - start) < 20s);
    BOOST_REQUIRE(ep);
    try {
        std::rethrow_exception(ep);
    } catch (boost::system::system_error const& x) {
        BOOST_TEST((x.code() == asio::error::operation_aborted), x.what());
    }

    // close() aborts a parked request too.
    ep = nullptr;
    done = false;
    asio::co_spawn(co_await asio::this_coro::executor,
                   coro(c).kv_get("cancel/k", {.index = first.meta.index, .wait = 30s}),
                   [&](std::exception_ptr x, auto) {
                       ep = x;
                       done = true;
                   });
    co_await pause(100ms);
    BOOST_TEST(!done);
    c.close();
    while (!done) co_await pause(1ms);
    BOOST_REQUIRE(ep);
    try {
        std::rethrow_exception(ep);
    } catch (consul::api_error const& x) {
        BOOST_TEST((x.code() == asio::error::operation_aborted), x.what());
        BOOST_TEST(x.http_status() == 0u);
    }

    BOOST_TEST(co_await c.kv_put("cancel/k", "still works"));
    BOOST_TEST(val((co_await c.kv_get("cancel/k")).value->value) == "still works");
}

asio::awaitable<void> wait_index_rules(client_env&) {
    BOOST_TEST(consul::next_wait_index(10, 12) == 12u);
    BOOST_TEST(consul::next_wait_index(10, 10) == 10u);
    BOOST_TEST(consul::next_wait_index(10, 9) == 0u);  // went backwards: reset
    BOOST_TEST(consul::next_wait_index(0, 0) == 1u);   // below 1: 1
    BOOST_TEST(consul::next_wait_index(0, 7) == 7u);
    BOOST_TEST(consul::next_wait_index(5, 0) == 0u);
    co_return;
}

using scenario = asio::awaitable<void> (*)(client_env&);

}  // namespace

#define TENURE_CLIENT_SCENARIOS(X) \
    X(sessions)                    \
    X(session_ttl_expiry)          \
    X(lock_delay_zero)             \
    X(kv_operations)               \
    X(flags_round_trip)            \
    X(acquire_release)             \
    X(server_error)                \
    X(blocking_get_woken)          \
    X(blocking_timeout)            \
    X(transactions)                \
    X(agent_and_checks)            \
    X(cancel_blocking_query)       \
    X(wait_index_rules)

#define TENURE_CLIENT_CASE(name) \
    BOOST_AUTO_TEST_CASE(name) { run(static_cast<scenario>(&::name)); }

BOOST_FIXTURE_TEST_SUITE(consul_client_http, http_env)
TENURE_CLIENT_SCENARIOS(TENURE_CLIENT_CASE)
BOOST_AUTO_TEST_SUITE_END()

BOOST_FIXTURE_TEST_SUITE(consul_client_inprocess, inprocess_env)
TENURE_CLIENT_SCENARIOS(TENURE_CLIENT_CASE)

BOOST_AUTO_TEST_CASE(request_deadline) {
    // A request deadline shorter than the server's wait (negative margin)
    // ends the request with timed_out.
    run([](client_env& e) -> asio::awaitable<void> {
        auto c = e.make_client({.blocking_margin = -1900ms});
        auto first = co_await c->kv_get("d/k");
        auto err = co_await expect_error<consul::api_error>(coro(*c).kv_get("d/k", {.index = first.meta.index, .wait = 2s}), "deadline");
        BOOST_TEST((err.code() == asio::error::timed_out), err.what());
        BOOST_TEST(err.http_status() == 0u);
    });
}

BOOST_AUTO_TEST_CASE(stopped_agent) {
    run([](client_env& e) -> asio::awaitable<void> {
        BOOST_TEST(co_await e.c().kv_put("k", "v"));
        static_cast<inprocess_env&>(e).agent->stop();
        auto err = co_await expect_error<consul::api_error>(coro(e.c()).kv_get("k"), "stopped agent");
        BOOST_TEST((err.code() == tenure::error::agent_stopped), err.what());
    });
}
BOOST_AUTO_TEST_SUITE_END()

// ---- transport ------------------------------------------------------------------------

namespace {

// A scripted HTTP/1.1 peer: for each accepted connection, a list of actions.
struct fake_server {
    explicit fake_server(asio::io_context& ioc) : acceptor(ioc, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)) {}
    tcp::acceptor acceptor;
    int accepted = 0;
    int requests = 0;

    std::string address() const { return "http://127.0.0.1:" + std::to_string(acceptor.local_endpoint().port()); }

    static std::string answer(std::string const& body) {
        return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
               "\r\n\r\n" + body;
    }

    // Reads one request header (the client's requests here have no body).
    asio::awaitable<bool> read_request(tcp::socket& s, asio::streambuf& buf) {
        auto [ec, n] = co_await asio::async_read_until(s, buf, "\r\n\r\n", asio::as_tuple(asio::use_awaitable));
        if (ec) co_return false;
        buf.consume(n);
        ++requests;
        co_return true;
    }
};

constexpr std::string_view self_body = R"({"Config":{"NodeName":"fake","Datacenter":"fake-dc"}})";

}  // namespace

BOOST_AUTO_TEST_SUITE(consul_client_transport)

BOOST_AUTO_TEST_CASE(connection_refused) {
    asio::io_context ioc{1};
    std::uint16_t port = 0;
    {
        tcp::acceptor a(ioc, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
        port = a.local_endpoint().port();
    }  // closed: nothing listens there now
    consul::client c(ioc.get_executor(), {.address = "127.0.0.1:" + std::to_string(port)});
    std::optional<consul::api_error> err;
    asio::co_spawn(ioc, [&]() -> asio::awaitable<void> {
        try {
            co_await coro(c).kv_get("k");
        } catch (consul::api_error const& e) {
            err = e;
        }
    }, asio::detached);
    auto const start = steady::now();
    ioc.run_for(30s);
    BOOST_REQUIRE(err);
    BOOST_TEST(err->http_status() == 0u);
    BOOST_TEST((err->code() == asio::error::connection_refused), err->what());
    BOOST_TEST((steady::now() - start) < 5s);
}

BOOST_AUTO_TEST_CASE(answered_requests_leave_no_pending_work) {
    // Once its requests are answered the client waits for nothing: the
    // caller's io_context::run() returns (the deadlines of the requests,
    // an hour away, are not left pending).
    asio::io_context ioc{1};
    fake_server server(ioc);
    consul::client c(ioc.get_executor(), {.address = server.address(), .request_timeout = std::chrono::hours{1}});
    int answered = 0;
    asio::co_spawn(ioc, [&]() -> asio::awaitable<void> {
        auto s = co_await server.acceptor.async_accept(asio::use_awaitable);
        server.acceptor.close();
        asio::streambuf buf;
        for (int i = 0; i < 3; ++i) {
            if (!co_await server.read_request(s, buf)) co_return;
            co_await asio::async_write(s, asio::buffer(fake_server::answer(std::string(self_body))), asio::use_awaitable);
        }
    }, asio::detached);
    asio::co_spawn(ioc, [&]() -> asio::awaitable<void> {
        for (int i = 0; i < 3; ++i) {
            co_await coro(c).agent_self();
            ++answered;
        }
        c.close();  // the idle connection too
    }, asio::detached);
    ioc.run_for(std::chrono::minutes{1});
    BOOST_TEST(answered == 3);
    BOOST_TEST(ioc.stopped());  // ran out of work, not out of time
}

BOOST_AUTO_TEST_CASE(request_timeout) {
    // A server that accepts and never answers.
    asio::io_context ioc{1};
    fake_server server(ioc);
    consul::client c(ioc.get_executor(), {.address = server.address(), .request_timeout = 200ms});
    std::optional<tcp::socket> held;
    server.acceptor.async_accept([&](boost::system::error_code ec, tcp::socket s) {
        if (!ec) held.emplace(std::move(s));
    });
    std::optional<consul::api_error> err;
    asio::co_spawn(ioc, [&]() -> asio::awaitable<void> {
        try {
            co_await coro(c).agent_self();
        } catch (consul::api_error const& e) {
            err = e;
        }
        server.acceptor.close();
        held.reset();
    }, asio::detached);
    ioc.run_for(30s);
    BOOST_REQUIRE(err);
    BOOST_TEST((err->code() == asio::error::timed_out), err->what());
    BOOST_TEST(err->http_status() == 0u);
}

BOOST_AUTO_TEST_CASE(each_request_on_a_kept_alive_connection_has_its_own_deadline) {
    // One connection, three requests, each with its own deadline: the
    // second (a blocking query, answered after the first one's deadline has
    // passed) must not time out, and the third (never answered) must time
    // out at its own deadline, not at the blocking query's later one.
    asio::io_context ioc{1};
    fake_server server(ioc);
    consul::client c(ioc.get_executor(),
                     {.address = server.address(), .request_timeout = 200ms, .blocking_margin = 100ms});
    std::optional<tcp::socket> held;
    asio::co_spawn(ioc, [&]() -> asio::awaitable<void> {
        auto s = co_await server.acceptor.async_accept(asio::use_awaitable);
        ++server.accepted;
        asio::streambuf buf;
        if (!co_await server.read_request(s, buf)) co_return;
        co_await asio::async_write(s, asio::buffer(fake_server::answer(std::string(self_body))), asio::use_awaitable);
        if (!co_await server.read_request(s, buf)) co_return;
        asio::steady_timer hold(ioc, 500ms);  // past the first request's deadline
        co_await hold.async_wait(asio::use_awaitable);
        std::string const missing = "HTTP/1.1 404 Not Found\r\nX-Consul-Index: 7\r\nContent-Length: 0\r\n\r\n";
        co_await asio::async_write(s, asio::buffer(missing), asio::use_awaitable);
        if (!co_await server.read_request(s, buf)) co_return;
        held.emplace(std::move(s));  // the third is never answered
    }, asio::detached);
    bool blocking_answered = false;
    std::optional<consul::api_error> err;
    steady::duration third_took{};
    asio::co_spawn(ioc, [&]() -> asio::awaitable<void> {
        co_await coro(c).agent_self();
        auto r = co_await coro(c).kv_get("k", {.index = 3, .wait = 1s});
        blocking_answered = !r.value && r.meta.index == 7;
        auto const start = steady::now();
        try {
            co_await coro(c).agent_self();
        } catch (consul::api_error const& e) {
            err = e;
        }
        third_took = steady::now() - start;
        c.close();
        server.acceptor.close();
        held.reset();
    }, asio::detached);
    ioc.run_for(30s);
    BOOST_TEST(blocking_answered);
    BOOST_REQUIRE(err);
    BOOST_TEST((err->code() == asio::error::timed_out), err->what());
    // Its own deadline is 200 ms away; the blocking query's was at least 660 ms away.
    auto const third_ms = std::chrono::duration_cast<std::chrono::milliseconds>(third_took).count();
    BOOST_TEST((third_took < 550ms), third_ms << " ms");
    BOOST_TEST(server.accepted == 1);
    BOOST_TEST(server.requests == 3);
}

BOOST_AUTO_TEST_CASE(stale_keep_alive_connection_is_retried) {
    // Connection 1 answers one request, then reads the next and closes
    // without answering (the server's idle timeout racing the client's
    // reuse). The client must retry that request once on connection 2.
    asio::io_context ioc{1};
    fake_server server(ioc);
    consul::client c(ioc.get_executor(), {.address = server.address()});
    asio::co_spawn(ioc, [&]() -> asio::awaitable<void> {
        for (int conn = 0; conn < 2; ++conn) {
            auto s = co_await server.acceptor.async_accept(asio::use_awaitable);
            ++server.accepted;
            asio::streambuf buf;
            if (!co_await server.read_request(s, buf)) co_return;
            co_await asio::async_write(s, asio::buffer(fake_server::answer(std::string(self_body))), asio::use_awaitable);
            if (conn == 0) {
                if (!co_await server.read_request(s, buf)) co_return;
                s.close();  // drop the kept-alive connection with a request in it
            } else {
                // keep it open until the client is done
                co_await server.read_request(s, buf);
            }
        }
    }, asio::detached);
    bool ok = false;
    asio::co_spawn(ioc, [&]() -> asio::awaitable<void> {
        auto a = co_await c.agent_self();
        BOOST_TEST(a.node_name == "fake");
        auto b = co_await c.agent_self();  // on the kept-alive connection, which dies
        BOOST_TEST(b.datacenter == "fake-dc");
        ok = true;
        c.close();
        server.acceptor.close();
    }, asio::detached);
    ioc.run_for(30s);
    BOOST_TEST(ok);
    BOOST_TEST(server.accepted == 2);
    BOOST_TEST(server.requests == 3);
}

BOOST_AUTO_TEST_CASE(closed_idle_connection_is_not_reused) {
    // The server closes connection 1 right after answering; the next request
    // must go out on a new connection (the pool notices the close, or the
    // request is retried).
    asio::io_context ioc{1};
    fake_server server(ioc);
    consul::client c(ioc.get_executor(), {.address = server.address()});
    asio::co_spawn(ioc, [&]() -> asio::awaitable<void> {
        for (int conn = 0; conn < 2; ++conn) {
            auto s = co_await server.acceptor.async_accept(asio::use_awaitable);
            ++server.accepted;
            asio::streambuf buf;
            if (!co_await server.read_request(s, buf)) co_return;
            co_await asio::async_write(s, asio::buffer(fake_server::answer(std::string(self_body))), asio::use_awaitable);
            if (conn == 1) co_await server.read_request(s, buf);  // until the client closes
        }
    }, asio::detached);
    bool ok = false;
    asio::co_spawn(ioc, [&]() -> asio::awaitable<void> {
        co_await c.agent_self();
        auto b = co_await c.agent_self();
        BOOST_TEST(b.node_name == "fake");
        ok = true;
        c.close();
        server.acceptor.close();
    }, asio::detached);
    ioc.run_for(30s);
    BOOST_TEST(ok);
    BOOST_TEST(server.accepted == 2);
    BOOST_TEST(server.requests == 2);
}

// An embedded agent and a client of it on one io_context, for the tests
// that look at what the agent sees of the client's connections. The client
// goes first.
struct agent_and_client {
    explicit agent_and_client(consul::client_config config, std::string http_addr = "127.0.0.1:0")
        : agent(std::make_unique<tenure::agent>(
              ioc.get_executor(), tenure::agent_options{.http_addr = std::move(http_addr), .log_stream = nullptr})) {
        agent->start();
        config.address = agent->http_address();
        client = std::make_unique<consul::client>(ioc.get_executor(), std::move(config));
    }
    ~agent_and_client() {
        client.reset();
        agent.reset();
    }
    // Runs the io_context until `body` returns (true) or 30 s pass (false).
    bool run(std::function<asio::awaitable<void>()> body) {
        bool finished = false;
        asio::co_spawn(ioc, [&]() -> asio::awaitable<void> {
            co_await body();
            finished = true;
            ioc.stop();
        }, asio::detached);
        ioc.run_for(std::chrono::seconds(30));
        return finished;
    }

    asio::io_context ioc{1};
    std::unique_ptr<tenure::agent> agent;
    std::unique_ptr<consul::client> client;
};

BOOST_AUTO_TEST_CASE(keep_alive_pool) {
    // The embedded agent's HTTP server counts our connections.
    agent_and_client t({.max_idle_connections = 2});
    auto& agent = *t.agent;
    auto& c = *t.client;
    BOOST_TEST(t.run([&]() -> asio::awaitable<void> {
        for (int i = 0; i < 10; ++i) BOOST_TEST(co_await c.kv_put("pool/k", std::to_string(i)));
        BOOST_TEST(agent.connection_count() == 1u);  // one connection, reused

        // Three at once need three connections; two of them stay pooled.
        auto get = [&] { return c.kv_get("pool/k", {}, asio::use_awaitable); };
        auto [a, b, d] = co_await (get() && get() && get());
        BOOST_TEST(val(a.value->value) == "9");
        BOOST_TEST(val(b.value->value) == "9");
        BOOST_TEST(val(d.value->value) == "9");
        // The third is closed by the client (the pool keeps two); the server
        // notices on its next read.
        for (int i = 0; i < 1000 && agent.connection_count() != 2u; ++i) co_await pause(1ms);
        BOOST_TEST(agent.connection_count() == 2u);
        for (int i = 0; i < 5; ++i) BOOST_TEST(co_await c.kv_put("pool/k", "again"));
        BOOST_TEST(agent.connection_count() == 2u);

        c.close();  // closes the idle connections
        for (int i = 0; i < 1000 && agent.connection_count() != 0u; ++i) co_await pause(1ms);
        BOOST_TEST(agent.connection_count() == 0u);
    }));
}

BOOST_AUTO_TEST_CASE(a_waiting_request_is_not_overtaken) {
    // One connection (max_connections 1). X's first write is in flight when
    // Y asks and waits; X asks again the moment its answer is in. The
    // connection X gives back is Y's: X's second write comes after Y's.
    // (Left among the idle ones, it went to X, which asked before the woken
    // Y ran, and Y queued again at the back.)
    agent_and_client t({.max_connections = 1});
    auto& c = *t.client;
    int done = 0;
    asio::co_spawn(t.ioc, [&]() -> asio::awaitable<void> {
        BOOST_TEST(co_await c.kv_put("fifo/x1", "1"));
        BOOST_TEST(co_await c.kv_put("fifo/x2", "2"));
        ++done;
    }, asio::detached);
    asio::co_spawn(t.ioc, [&]() -> asio::awaitable<void> {
        BOOST_TEST(co_await c.kv_put("fifo/y", "y"));
        ++done;
    }, asio::detached);
    BOOST_TEST(t.run([&]() -> asio::awaitable<void> {
        while (done != 2) co_await pause(1ms);
        auto index = [&](std::string key) -> asio::awaitable<std::uint64_t> {
            auto r = co_await c.kv_get(key, {}, asio::use_awaitable);
            co_return r.value ? r.value->modify_index : 0;
        };
        auto const x1 = co_await index("fifo/x1");
        auto const y = co_await index("fifo/y");
        auto const x2 = co_await index("fifo/x2");
        BOOST_TEST(x1 != 0u);
        BOOST_TEST(x1 < y);
        BOOST_TEST(y < x2);
    }));
}

BOOST_AUTO_TEST_CASE(a_request_larger_than_the_socket_takes_is_sent_whole) {
    // The agent shares the client's thread, so it reads nothing while the
    // client sends: a 400 KB request is more than a Unix socket takes at
    // once (about 200 KB), and what the first send leaves must still be
    // written. (Loopback TCP takes it whole.)
    auto const path = "/tmp/tenure-itest-big-" + std::to_string(::getpid()) + ".sock";
    agent_and_client t({.request_timeout = 10'000ms}, "unix://" + path);
    auto& c = *t.client;
    std::string big(400 * 1024, 'v');
    for (std::size_t i = 0; i < big.size(); i += 4096) big[i] = static_cast<char>('a' + (i / 4096) % 26);
    BOOST_TEST(t.run([&]() -> asio::awaitable<void> {
        BOOST_TEST(co_await c.kv_put("big/k", big));
        auto r = co_await c.kv_get("big/k", {}, asio::use_awaitable);
        BOOST_REQUIRE(r.value);
        BOOST_TEST((r.value->value == big));
    }));
}

BOOST_AUTO_TEST_CASE(addresses) {
    asio::io_context ioc{1};
    BOOST_CHECK_NO_THROW(consul::client(ioc.get_executor(), {.address = "127.0.0.1:8500"}));
    BOOST_CHECK_NO_THROW(consul::client(ioc.get_executor(), {.address = "http://localhost:8500"}));
    BOOST_CHECK_NO_THROW(consul::client(ioc.get_executor(), {.address = "http://[::1]:8500/"}));
    BOOST_TEST(consul::client(ioc.get_executor(), {.address = "localhost:9"}).config().address ==
               "http://localhost:9");
    BOOST_TEST(consul::client(ioc.get_executor(), {.address = "https://127.0.0.1:8501"}).config().address ==
               "https://127.0.0.1:8501");  // TLS: agent_security_test.cpp
    BOOST_CHECK_THROW(consul::client(ioc.get_executor(), {.address = "ftp://127.0.0.1:21"}),
                      boost::system::system_error);
    BOOST_CHECK_THROW(consul::client(ioc.get_executor(), {.address = "127.0.0.1:99999"}), boost::system::system_error);

    // CONSUL_HTTP_ADDR and CONSUL_HTTP_TOKEN when the config is empty.
    ::setenv("CONSUL_HTTP_ADDR", "127.0.0.1:8577", 1);
    ::setenv("CONSUL_HTTP_TOKEN", "secret", 1);
    {
        consul::client c(ioc.get_executor());
        BOOST_TEST(c.config().address == "http://127.0.0.1:8577");
        BOOST_TEST(c.config().token == "secret");
        consul::client d(ioc.get_executor(), {.address = "127.0.0.1:1", .token = "mine"});
        BOOST_TEST(d.config().address == "http://127.0.0.1:1");
        BOOST_TEST(d.config().token == "mine");
    }
    ::unsetenv("CONSUL_HTTP_ADDR");
    ::unsetenv("CONSUL_HTTP_TOKEN");
    BOOST_TEST(consul::client(ioc.get_executor()).config().address == "http://127.0.0.1:8500");
}

BOOST_AUTO_TEST_CASE(token_header_sent) {
    // The fake server checks the request for X-Consul-Token.
    asio::io_context ioc{1};
    fake_server server(ioc);
    consul::client c(ioc.get_executor(), {.address = server.address(), .token = "t0ken", .datacenter = "dc9"});
    std::string request;
    asio::co_spawn(ioc, [&]() -> asio::awaitable<void> {
        auto s = co_await server.acceptor.async_accept(asio::use_awaitable);
        asio::streambuf buf;
        auto n = co_await asio::async_read_until(s, buf, "\r\n\r\n", asio::use_awaitable);
        request.assign(asio::buffers_begin(buf.data()), asio::buffers_begin(buf.data()) + n);
        co_await asio::async_write(s, asio::buffer(fake_server::answer(std::string(self_body))), asio::use_awaitable);
    }, asio::detached);
    bool ok = false;
    asio::co_spawn(ioc, [&]() -> asio::awaitable<void> {
        co_await c.agent_self();
        ok = true;
        c.close();
    }, asio::detached);
    ioc.run_for(30s);
    BOOST_TEST(ok);
    BOOST_TEST(request.find("GET /v1/agent/self?dc=dc9 HTTP/1.1\r\n") == 0u, request);
    BOOST_TEST(request.find("X-Consul-Token: t0ken\r\n") != std::string::npos, request);
    BOOST_TEST(request.find("\r\nHost: " + server.address().substr(server.address().find("://") + 3) + "\r\n") !=
                   std::string::npos,
               request);
    BOOST_TEST(request.find("\r\nUser-Agent: tenure/") != std::string::npos, request);
    BOOST_TEST(request.find("Content-Length") == std::string::npos, request);  // a GET without a body

    // A token that would split the request is refused up front.
    BOOST_CHECK_THROW(consul::client(ioc.get_executor(), {.address = server.address(), .token = "t\r\nX-Evil: 1"}),
                      boost::system::system_error);
}

BOOST_AUTO_TEST_SUITE_END()
