// tenure::fenced_write against the real servers: the `tenure agent` binary
// over HTTP (Consul's /v1/txn with check-session) and a real etcd member (a
// txn comparing the lock key's create revision and lease). The same scenarios
// run on both; the data keys are read back raw with each backend's client.
//
// A stale holder is made the way it happens in production: its session is
// ended on the server (Consul: destroyed; etcd: lease revoked) or its key is
// taken from it, and it writes before or after it notices: the server must
// refuse either way. Every scenario awaits events, no sleeps.

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
// g++ 12 false positive on Asio's coroutine frame allocator (fixed in g++ 13).
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include "agent_process.hpp"
#include "etcd_member.hpp"
#include "run_on.hpp"

#include <tenure/consul/client.hpp>
#include <tenure/election.hpp>
#include <tenure/error.hpp>
#include <tenure/etcd/client.hpp>
#include <tenure/fenced_write.hpp>
#include <tenure/semaphore.hpp>
#include <tenure/session.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/mpl/list.hpp>
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace asio = boost::asio;
namespace consul = tenure::consul;
namespace etcd = tenure::etcd;
using namespace std::chrono_literals;
using boost::system::error_code;
using tenure::write_op;

namespace {

// What a scenario needs of a backend.
struct env_base {
    explicit env_base(asio::io_context& i) : io(i) {}
    virtual ~env_base() = default;
    asio::io_context& io;
    void run(std::function<asio::awaitable<void>()> const& body) { tenure::itest::run_scenario(io, body, 30s); }
    virtual asio::awaitable<tenure::session> open(std::string name) = 0;
    // The value at `key`, nullopt when absent (read raw with the backend's client).
    virtual asio::awaitable<std::optional<std::string>> read(std::string key) = 0;
    virtual asio::awaitable<void> write_raw(std::string key, std::string value) = 0;
    // Ends the session on the server, behind its back.
    virtual asio::awaitable<void> end_session(tenure::session const& s) = 0;
    // Takes the key from its holder without ending the session.
    virtual asio::awaitable<void> take_key(std::string key, tenure::session const& holder) = 0;
};

// The Consul protocol: the agent binary, one HTTP client.
struct consul_env : env_base {
    // A transaction takes 64 ops, the guard being one; more is refused
    // before anything is sent.
    static constexpr int max_batch = 63;
    error_code const too_big = make_error_code(boost::system::errc::invalid_argument);
    asio::io_context ioc{1};
    tenure::itest::agent_process agent{[] {
        tenure::itest::agent_options o;
        o.session_ttl_min = "100ms";
        return o;
    }()};
    std::unique_ptr<consul::client> client;

    consul_env() : env_base(ioc) {
        consul::client_config c;
        c.address = "http://127.0.0.1:" + std::to_string(agent.port());
        c.request_timeout = 2000ms;
        client = std::make_unique<consul::client>(ioc.get_executor(), c);
    }
    asio::awaitable<tenure::session> open(std::string name) override {
        tenure::session_options o;
        o.name = std::move(name);
        o.ttl = 2s;
        o.lock_delay = 0ms;
        // Behaviour release (the default): the key outlives its holder, so
        // its LockIndex grows across holders (a deleted key starts again at 1).
        co_return co_await tenure::session::create(*client, o);
    }
    asio::awaitable<std::optional<std::string>> read(std::string key) override {
        auto r = co_await client->kv_get(std::move(key));
        if (!r.value) co_return std::nullopt;
        co_return r.value->value.value_or("");
    }
    asio::awaitable<void> write_raw(std::string key, std::string value) override { co_await client->kv_put(key, value); }
    asio::awaitable<void> end_session(tenure::session const& s) override { co_await client->session_destroy(s.id()); }
    asio::awaitable<void> take_key(std::string key, tenure::session const& holder) override {
        co_await client->kv_release(key, holder.id(), std::nullopt, consul::lock_flag_value);
    }
};

// etcd: one member started for the suite's test case.
struct etcd_env : tenure::itest::etcd_member, env_base {
    // etcd's --max-txn-ops (128 by default): more is refused by the server.
    static constexpr int max_batch = 128;
    error_code const too_big = tenure::error::etcd_error;
    etcd_env() : env_base(ioc) {}
    asio::awaitable<tenure::session> open(std::string name) override {
        tenure::session_options o;
        o.name = std::move(name);
        o.ttl = 2s;
        co_return co_await tenure::session::create(*client, o);
    }
    asio::awaitable<std::optional<std::string>> read(std::string key) override {
        auto r = co_await client->range(std::move(key));
        if (r.kvs.empty()) co_return std::nullopt;
        co_return r.kvs.front().value;
    }
    asio::awaitable<void> write_raw(std::string key, std::string value) override { co_await client->put(key, value); }
    asio::awaitable<void> end_session(tenure::session const& s) override {
        co_await client->lease_revoke(static_cast<std::int64_t>(std::stoull(s.id(), nullptr, 16)));
    }
    // The election's key is the candidate key (scope.key()): deleting it
    // hands the election on, as an operator's `etcdctl del` would.
    asio::awaitable<void> take_key(std::string key, tenure::session const&) override { co_await client->delete_range(key); }
};

using result = std::tuple<error_code, tenure::fencing_token>;

asio::awaitable<result> try_write(tenure::leadership_scope const& s, std::vector<write_op> w) {
    co_return co_await tenure::fenced_write(s, std::move(w), asio::as_tuple(asio::use_awaitable));
}

// An acquire in the background, awaited with a bound.
struct pending_scope {
    explicit pending_scope(asio::any_io_executor ex) : done(ex, std::chrono::steady_clock::time_point::max()) {}
    asio::steady_timer done;
    std::optional<tenure::leadership_scope> scope;
    error_code ec;

    template <class Primitive>
    void start(Primitive& p) {
        p.acquire([this](error_code e, tenure::leadership_scope s) {
            ec = e;
            scope = std::move(s);
            done.cancel();
        });
    }
    asio::awaitable<tenure::leadership_scope*> get() {
        if (!scope) {
            done.expires_after(10s);
            co_await done.async_wait(asio::as_tuple(asio::use_awaitable));
        }
        BOOST_REQUIRE_MESSAGE(scope, "the waiter was not admitted in time");
        BOOST_REQUIRE(!ec);
        co_return &*scope;
    }
};

// ---- the scenarios, one body per backend ----

void leader_commits_a_batch_and_names_its_token(env_base& env, std::string const& base) {
    env.run([&]() -> asio::awaitable<void> {
        auto a = co_await env.open("a");
        tenure::election e(a, base + "/leader", "a");
        auto lead = co_await e.acquire();
        co_await env.write_raw(base + "/data/old", "to remove");

        std::vector<write_op> w1{write_op::put(base + "/data/x", "1"),
                                                    write_op::put(base + "/data/y", "two"),
                                                    write_op::remove(base + "/data/old")};
        auto [ec, used] = co_await try_write(lead, std::move(w1));
        BOOST_TEST(!ec, ec.message());
        BOOST_TEST((used == lead.fencing()));
        BOOST_TEST(used.value > 0u);
        auto const got1 = (co_await env.read(base + "/data/x")).value_or("<none>");
        BOOST_TEST(got1 == "1");
        auto const got2 = (co_await env.read(base + "/data/y")).value_or("<none>");
        BOOST_TEST(got2 == "two");
        bool const got10 = (co_await env.read(base + "/data/old")).has_value();
        BOOST_TEST(!got10);

        // An empty batch: the server's word on the lock alone.
        std::vector<write_op> w2{};
        auto [ec2, used2] = co_await try_write(lead, std::move(w2));
        BOOST_TEST(!ec2, ec2.message());
        BOOST_TEST((used2 == lead.fencing()));
        BOOST_TEST(lead.held());
        co_await a.close();
    });
}

void a_holder_whose_session_ended_is_refused_and_writes_nothing(env_base& env, std::string const& base) {
    env.run([&]() -> asio::awaitable<void> {
        auto a = co_await env.open("a");
        auto b = co_await env.open("b");
        std::string const key = base + "/leader", data = base + "/data";
        tenure::election ea(a, key, "a"), eb(b, key, "b");
        auto la = co_await ea.acquire();
        std::vector<write_op> w3{write_op::put(data, "from a")};
        auto [ec1, t1] = co_await try_write(la, std::move(w3));
        BOOST_TEST(!ec1, ec1.message());

        pending_scope next(env.io.get_executor());
        next.start(eb);
        // a's session ends on the server (Consul: destroyed; etcd: its lease
        // revoked); a writes at once, before or after its monitor notices.
        co_await env.end_session(a);
        std::vector<write_op> w4{write_op::put(data, "stale from a"), write_op::remove(data + "/b")};
        auto [ec2, t2] = co_await try_write(la, std::move(w4));
        BOOST_TEST((ec2 == tenure::error::not_held), ec2.message());
        BOOST_TEST((t2 == tenure::fencing_token{}));
        BOOST_TEST(!la.held());  // the refusal is a loss, if the monitor was not first
        auto const got3 = (co_await env.read(data)).value_or("<none>");
        BOOST_TEST(got3 == "from a");

        // The next holder writes, with a higher token.
        auto* lb = co_await next.get();
        co_await env.write_raw(data + "/b", "keep");
        std::vector<write_op> w5{write_op::put(data, "from b")};
        auto [ec3, t3] = co_await try_write(*lb, std::move(w5));
        BOOST_TEST(!ec3, ec3.message());
        BOOST_TEST(t3.value > t1.value);
        auto const got4 = (co_await env.read(data)).value_or("<none>");
        BOOST_TEST(got4 == "from b");
        // ... and a, still trying, changes nothing.
        std::vector<write_op> w6{write_op::remove(data + "/b")};
        auto [ec4, t4] = co_await try_write(la, std::move(w6));
        BOOST_TEST((ec4 == tenure::error::not_held));
        auto const got5 = (co_await env.read(data + "/b")).value_or("<none>");
        BOOST_TEST(got5 == "keep");
        co_await b.close();
    });
}

void a_holder_whose_key_was_taken_is_refused_and_learns_it(env_base& env, std::string const& base) {
    env.run([&]() -> asio::awaitable<void> {
        auto a = co_await env.open("a");
        auto b = co_await env.open("b");
        std::string const key = base + "/leader", data = base + "/data";
        tenure::election ea(a, key, "a"), eb(b, key, "b");
        auto la = co_await ea.acquire();
        pending_scope next(env.io.get_executor());
        next.start(eb);
        // The key moves on while a's session lives on (an operator frees it).
        co_await env.take_key(la.key(), a);
        auto* lb = co_await next.get();
        std::vector<write_op> w7{write_op::put(data, "stale from a")};
        auto [ec, t] = co_await try_write(la, std::move(w7));
        BOOST_TEST((ec == tenure::error::not_held), ec.message());
        BOOST_TEST(!la.held());
        BOOST_TEST(la.lost());
        bool const got11 = (co_await env.read(data)).has_value();
        BOOST_TEST(!got11);
        std::vector<write_op> w8{write_op::put(data, "from b")};
        auto [ec2, t2] = co_await try_write(*lb, std::move(w8));
        BOOST_TEST(!ec2, ec2.message());
        auto const got6 = (co_await env.read(data)).value_or("<none>");
        BOOST_TEST(got6 == "from b");
        co_await a.close();
        co_await b.close();
    });
}

void a_semaphore_permit_fences_its_writes(env_base& env, std::string const& base) {
    env.run([&]() -> asio::awaitable<void> {
        auto a = co_await env.open("a");
        auto b = co_await env.open("b");
        tenure::semaphore sa(a, base + "/sem", 2, "a"), sb(b, base + "/sem", 2, "b");
        auto pa = co_await sa.acquire();
        auto pb = co_await sb.acquire();
        std::vector<write_op> w9{write_op::put(base + "/data/a", "1")};
        auto [ec1, t1] = co_await try_write(pa, std::move(w9));
        std::vector<write_op> w10{write_op::put(base + "/data/b", "1")};
        auto [ec2, t2] = co_await try_write(pb, std::move(w10));
        BOOST_TEST(!ec1, ec1.message());
        BOOST_TEST(!ec2, ec2.message());
        BOOST_TEST((t1 == pa.fencing()));
        BOOST_TEST((t2 == pb.fencing()));
        co_await env.end_session(a);
        std::vector<write_op> w11{write_op::put(base + "/data/a", "stale")};
        auto [ec3, t3] = co_await try_write(pa, std::move(w11));
        BOOST_TEST((ec3 == tenure::error::not_held), ec3.message());
        auto const got7 = (co_await env.read(base + "/data/a")).value_or("<none>");
        BOOST_TEST(got7 == "1");
        std::vector<write_op> w12{write_op::put(base + "/data/b", "2")};
        auto [ec4, t4] = co_await try_write(pb, std::move(w12));
        BOOST_TEST(!ec4, ec4.message());
        auto const got8 = (co_await env.read(base + "/data/b")).value_or("<none>");
        BOOST_TEST(got8 == "2");
        co_await b.close();
    });
}

void bad_input_is_refused_and_changes_nothing(env_base& env, std::string const& base) {
    env.run([&]() -> asio::awaitable<void> {
        auto a = co_await env.open("a");
        tenure::election e(a, base + "/leader", "a");
        auto lead = co_await e.acquire();
        // A write without a key spoils the batch: nothing is sent.
        std::vector<write_op> w13{write_op::put(base + "/data", "x"), write_op::put("", "y")};
        auto [ec, t] = co_await try_write(lead, std::move(w13));
        BOOST_TEST((ec == boost::system::errc::invalid_argument), ec.message());
        bool const got12 = (co_await env.read(base + "/data")).has_value();
        BOOST_TEST(!got12);
        BOOST_TEST(lead.held());
        // An empty scope: not_held, through the handler.
        tenure::leadership_scope none;
        auto [ec2, t2] = co_await try_write(none, {});
        BOOST_TEST((ec2 == tenure::error::not_held));
        co_await a.close();
    });
}

// `count` writes in one batch: more than the backend's transaction takes
// (Consul 63 besides the guard, etcd 128) is refused as a whole with
// `refusal`, the scope still held; up to it (refusal {}), all are applied.
void a_batch_of(env_base& env, int count, error_code refusal, std::string const& base) {
    env.run([&]() -> asio::awaitable<void> {
        auto a = co_await env.open("a");
        tenure::election e(a, base + "/leader", "a");
        auto lead = co_await e.acquire();
        std::vector<write_op> many;
        for (int i = 0; i < count; ++i) many.push_back(write_op::put(base + "/many/" + std::to_string(i), "v"));
        auto [ec, t] = co_await try_write(lead, std::move(many));
        BOOST_TEST_MESSAGE(count << " writes: " << (ec ? ec.message() : "committed"));
        bool const first = (co_await env.read(base + "/many/0")).has_value();
        bool const last = (co_await env.read(base + "/many/" + std::to_string(count - 1))).has_value();
        BOOST_TEST((ec == refusal), ec.message());
        if (!refusal) BOOST_TEST((first && last));
        else BOOST_TEST(!(first || last));
        BOOST_TEST(lead.held());
        co_await a.close();
    });
}

}  // namespace

// Each case runs on both backends: <consul_env> and <etcd_env>.
using backends = boost::mpl::list<consul_env, etcd_env>;

BOOST_AUTO_TEST_SUITE(fenced_write)

BOOST_AUTO_TEST_CASE_TEMPLATE(leader_commits_a_batch_and_names_its_token, Env, backends) {
    Env env;
    ::leader_commits_a_batch_and_names_its_token(env, "itest/fw1");
}
BOOST_AUTO_TEST_CASE_TEMPLATE(a_holder_whose_session_ended_is_refused_and_writes_nothing, Env, backends) {
    Env env;  // Consul: the session destroyed; etcd: the lease revoked
    ::a_holder_whose_session_ended_is_refused_and_writes_nothing(env, "itest/fw2");
}
BOOST_AUTO_TEST_CASE_TEMPLATE(a_holder_whose_key_was_taken_is_refused_and_learns_it, Env, backends) {
    Env env;
    ::a_holder_whose_key_was_taken_is_refused_and_learns_it(env, "itest/fw3");
}
BOOST_AUTO_TEST_CASE_TEMPLATE(a_semaphore_permit_fences_its_writes, Env, backends) {
    Env env;
    ::a_semaphore_permit_fences_its_writes(env, "itest/fw4");
}
BOOST_AUTO_TEST_CASE_TEMPLATE(bad_input_is_refused_and_changes_nothing, Env, backends) {
    Env env;
    ::bad_input_is_refused_and_changes_nothing(env, "itest/fw5");
    ::a_batch_of(env, env.max_batch + 1, env.too_big, "itest/fw6");
    ::a_batch_of(env, env.max_batch, {}, "itest/fw7");
}

BOOST_AUTO_TEST_SUITE_END()
