// Failures under tenure's election on real etcd: a candidate process killed
// (`tenure lock -etcd-endpoints` as the child), etcd unreachable (the fault
// proxy paused between the client and the member), and with three members
// the member the leader's client talks to, or the raft leader, killed.
//
// Every scenario asserts the order of events, never fixed timings: a handover
// only once the old lease is gone, a scope lost at (not before) its local
// deadline, never two scopes held at once, work resuming after a failover.
// Fixed pauses appear only in "absence" windows.

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
// g++ 12 false positive on Asio's coroutine frame allocator (fixed in g++ 13).
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include "etcd_member.hpp"
#include "awaiting.hpp"
#include "fault_proxy.hpp"
#include "pending_acquire.hpp"

#include <tenure/election.hpp>
#include <tenure/error.hpp>
#include <tenure/etcd/client.hpp>
#include <tenure/leadership_scope.hpp>
#include <tenure/session.hpp>

#include "run_on.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef TENURE_BINARY
#error "TENURE_BINARY must name the tenure executable"
#endif

namespace asio = boost::asio;
namespace etcd = tenure::etcd;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;
using boost::system::system_error;

namespace {

using tenure::itest::pause;
using tenure::itest::run_scenario;
using tenure::itest::signal_flag;

tenure::session_options opts(std::chrono::seconds ttl) {
    tenure::session_options o;
    o.name = "etcd failover test";
    o.ttl = ttl;
    return o;
}

std::int64_t lease_of(std::string const& hex) { return static_cast<std::int64_t>(std::stoull(hex, nullptr, 16)); }

using pending = tenure::itest::pending_acquire;

// ---- a `tenure` child process ------------------------------------------------------------

struct tenure_child {
    pid_t pid = -1;
    std::optional<asio::posix::stream_descriptor> out;
    std::string buf;

    tenure_child(asio::any_io_executor ex, std::vector<std::string> args) {
        int fds[2];
        if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
        args.insert(args.begin(), TENURE_BINARY);
        std::vector<char*> argv;
        for (auto& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        pid = ::fork();
        if (pid < 0) throw std::runtime_error("fork");
        if (pid == 0) {
            ::prctl(PR_SET_PDEATHSIG, SIGKILL);
            ::dup2(fds[1], 1);
            int devnull = ::open("/dev/null", O_RDWR);
            if (devnull >= 0) ::dup2(devnull, 0);
            ::unsetenv("ETCDCTL_ENDPOINTS");
            ::unsetenv("CONSUL_HTTP_ADDR");
            ::execv(argv[0], argv.data());
            ::_exit(127);
        }
        ::close(fds[1]);
        out.emplace(ex, fds[0]);
    }
    ~tenure_child() { kill(SIGKILL); }

    void kill(int sig) {
        if (pid <= 0) return;
        ::kill(pid, sig);
        int st = 0;
        ::waitpid(pid, &st, 0);
        pid = -1;
    }

    // The next stdout line; nullopt when `limit` passes first or at EOF.
    asio::awaitable<std::optional<std::string>> line(std::chrono::milliseconds limit) {
        auto ex = co_await asio::this_coro::executor;
        asio::steady_timer t(ex, limit);
        t.async_wait([this](boost::system::error_code ec) {
            if (!ec) out->cancel();
        });
        auto [ec, n] =
            co_await asio::async_read_until(*out, asio::dynamic_buffer(buf), '\n', asio::as_tuple(asio::use_awaitable));
        t.cancel();
        if (ec) co_return std::nullopt;
        std::string l = buf.substr(0, n - 1);
        buf.erase(0, n);
        co_return l;
    }
};

std::map<std::string, std::string> fields(std::string const& line) {
    std::map<std::string, std::string> out;
    std::istringstream in(line);
    std::string word;
    while (in >> word)
        if (auto eq = word.find('='); eq != std::string::npos) out[word.substr(0, eq)] = word.substr(eq + 1);
    return out;
}

// ---- one member ----------------------------------------------------------------------------

struct single_env : tenure::itest::etcd_member {
    asio::ip::tcp::endpoint target() const {
        return {asio::ip::make_address("127.0.0.1"), server.client_port()};
    }
};

// A `tenure lock -etcd-endpoints` process holds the election; it is
// SIGKILLed (its child too). The waiting candidate leads only once the
// killed process's lease is gone (expired: nobody revoked it), with a larger
// fencing token.
asio::awaitable<void> killed_process(single_env& e) {
    auto ex = co_await asio::this_coro::executor;
    tenure_child holder(ex, {"lock", "-etcd-endpoints", e.server.client_url(), "-session-ttl", "2s", "elk",
                             "echo pid=$$ session=$TENURE_SESSION token=$TENURE_FENCING_TOKEN key=$TENURE_LOCK_KEY; "
                             "exec sleep 100"});
    auto line = co_await holder.line(15'000ms);
    BOOST_REQUIRE_MESSAGE(line.has_value(), "tenure lock on etcd did not run its child");
    auto f = fields(*line);
    pid_t const child = std::stoi(f["pid"]);
    std::string const lease_hex = f["session"];
    BOOST_TEST(f["key"] == "elk/" + lease_hex);
    std::uint64_t const child_token = std::stoull(f["token"]);

    auto s2 = co_await tenure::session::create(*e.client, opts(3s));
    tenure::election e2(s2, "elk", "in-process");
    auto leader = co_await e2.leader();
    BOOST_REQUIRE(leader.has_value());
    BOOST_TEST(leader->session == lease_hex);
    BOOST_TEST(leader->lock_index == child_token);

    pending p2(ex);
    p2.start(e2);
    BOOST_REQUIRE(!(co_await p2.wait(300ms)));  // absence: the process holds it

    // SIGKILL: no resign, no revoke. Then its child (own process group).
    holder.kill(SIGKILL);
    ::kill(-child, SIGKILL);
    ::kill(child, SIGKILL);
    BOOST_TEST(!(co_await p2.wait(300ms)));  // absence: the lease (TTL 2 s) outlives the kill a while
    BOOST_REQUIRE_MESSAGE(co_await p2.wait(15'000ms), "no handover after the killed process's lease");
    BOOST_REQUIRE(!p2.ec);
    // Ordering: by the time we lead, the killed process's lease is gone.
    BOOST_TEST(co_await e.client->lease_time_to_live(lease_of(lease_hex)) == -1);
    BOOST_TEST(p2.scope.token() > child_token);
    co_await p2.scope.release();
    co_await s2.close();
}

// A waiting candidate whose lease expires (its client cannot reach etcd:
// keepalives hang) ends its campaign with an error at its local deadline;
// the leader is not disturbed, and etcd deletes the dead candidate's key
// once the lease expires there.
asio::awaitable<void> lease_expires_while_campaigning(single_env& e) {
    auto ex = co_await asio::this_coro::executor;
    tenure::test::fault_proxy proxy(ex, e.target());
    proxy.start();
    etcd::client_config cfg;
    cfg.endpoints = {proxy.address()};
    cfg.request_timeout = 500ms;
    etcd::client via_proxy(ex, cfg);

    auto s1 = co_await tenure::session::create(*e.client, opts(10s));
    auto s2 = co_await tenure::session::create(via_proxy, opts(2s));
    tenure::election e1(s1, "elx", "one"), e2(s2, "elx", "two");
    auto scope = co_await e1.acquire();
    pending p2(ex);
    p2.start(e2);
    BOOST_REQUIRE(!(co_await p2.wait(300ms)));
    std::string const k2 = "elx/" + s2.id();
    BOOST_REQUIRE(!(co_await e.client->range(k2)).kvs.empty());

    proxy.pause();
    BOOST_REQUIRE_MESSAGE(co_await p2.wait(10'000ms), "the campaign outlived its lease");
    BOOST_TEST((p2.ec == tenure::error::lease_expired_locally), p2.ec.message());
    BOOST_TEST(!p2.scope.held());
    BOOST_TEST((s2.state() == tenure::session_state::lost));
    BOOST_TEST((p2.at >= s2.local_deadline()));
    BOOST_TEST(scope.held());
    BOOST_TEST(co_await scope.confirm());

    // etcd expires the lease on its own: the key goes, the leader stays.
    bool gone = false;
    for (int i = 0; i < 100 && !gone; ++i) {
        gone = (co_await e.client->range(k2)).kvs.empty();
        if (!gone) co_await pause(100ms);
    }
    BOOST_TEST(gone);
    BOOST_TEST(co_await scope.confirm());
    proxy.resume();
    co_await scope.release();
    co_await s1.close();
    co_await s2.close();  // lost: nothing to revoke; before its client goes
    via_proxy.close();
}

// The leader's etcd becomes unreachable (the proxy holds every byte): the
// scope is lost with lease_expired_locally at its local deadline and its
// work is cancelled; a candidate that can reach etcd leads only after that
// (and after the lease expired on the server): never two scopes at once.
asio::awaitable<void> unreachable_leader(single_env& e) {
    auto ex = co_await asio::this_coro::executor;
    tenure::test::fault_proxy proxy(ex, e.target());
    proxy.start();
    etcd::client_config cfg;
    cfg.endpoints = {proxy.address()};
    cfg.request_timeout = 500ms;
    etcd::client via_proxy(ex, cfg);

    auto s1 = co_await tenure::session::create(via_proxy, opts(2s));
    auto s2 = co_await tenure::session::create(*e.client, opts(10s));
    tenure::election e1(s1, "elu", "one"), e2(s2, "elu", "two");
    auto scope = co_await e1.acquire();
    pending p2(ex);
    p2.start(e2);
    BOOST_REQUIRE(!(co_await p2.wait(300ms)));

    bool work_cancelled = false;
    steady::time_point cancelled_at{};
    auto work = [&]() -> asio::awaitable<void> {
        try {
            co_await pause(60'000ms);
        } catch (system_error const&) {
            work_cancelled = true;
            cancelled_at = steady::now();
            throw;
        }
    };
    proxy.pause();
    auto w = work();
    bool const finished = co_await scope.run(std::move(w), asio::use_awaitable);
    BOOST_TEST(!finished);
    BOOST_TEST(work_cancelled);
    BOOST_TEST((scope.loss_reason() == tenure::error::lease_expired_locally), scope.loss_reason().message());
    auto const deadline = s1.local_deadline();
    BOOST_TEST((cancelled_at >= deadline));
    BOOST_TEST_MESSAGE("work cancelled "
                       << std::chrono::duration_cast<std::chrono::milliseconds>(cancelled_at - deadline).count()
                       << " ms after the local deadline");

    // The other candidate takes over once etcd expires the lease: after the loss.
    BOOST_REQUIRE(co_await p2.wait(15'000ms));
    BOOST_REQUIRE(!p2.ec);
    BOOST_TEST((p2.at >= cancelled_at));
    BOOST_TEST(p2.scope.token() > scope.token());
    proxy.resume();
    co_await scope.release();  // lost at the local deadline: a resign attempt, refused (the key is gone)
    co_await s1.close();
    co_await p2.scope.release();
    co_await s2.close();
    via_proxy.close();
}

// ---- three members -------------------------------------------------------------------------

struct cluster_env {
    asio::io_context ioc{1};
    tenure::itest::etcd_cluster cluster{3};
};

// Two campaigns (clients A and B) whose bodies do fenced writes (a txn on
// the body's own key's create revision) in a loop. `victim` picks the member
// to kill; A's client talks to it first. Afterwards there must still be
// exactly one leader at a time and the writes must resume.
asio::awaitable<void> kill_member(cluster_env& env, bool kill_raft_leader) {
    auto ex = co_await asio::this_coro::executor;
    auto urls = env.cluster.client_urls();
    std::size_t const leader = env.cluster.leader_index();
    std::size_t victim = leader;
    if (!kill_raft_leader) victim = (leader + 1) % urls.size();  // a follower
    // A talks to the victim first, B to another member first.
    std::vector<std::string> a_urls{urls[victim]}, b_urls;
    for (std::size_t i = 0; i < urls.size(); ++i)
        if (i != victim) a_urls.push_back(urls[i]);
    for (std::size_t i = 1; i <= urls.size(); ++i) b_urls.push_back(urls[(victim + i) % urls.size()]);
    etcd::client_config ca, cb;
    ca.endpoints = a_urls;
    cb.endpoints = b_urls;
    ca.request_timeout = cb.request_timeout = 1000ms;
    etcd::client a(ex, ca), b(ex, cb);

    signal_flag progress(ex);
    int holding = 0, max_holding = 0, writes = 0;
    std::vector<std::uint64_t> write_tokens;
    std::vector<std::string> elected;
    auto body_for = [&](etcd::client& client) {
        return [&, cp = &client](tenure::leadership_scope& scope) -> asio::awaitable<void> {
            etcd::client& c = *cp;
            ++holding;
            max_holding = std::max(max_holding, holding);
            struct leave {
                int& h;
                ~leave() { --h; }
            } guard{holding};
            for (;;) {
                try {
                    std::vector<etcd::compare> cmps;
                    cmps.push_back(etcd::compare::create_revision(scope.key(), etcd::compare_result::equal,
                                                                  static_cast<std::int64_t>(scope.token())));
                    etcd::put_op put;
                    put.key = "elw-work";
                    put.value = std::to_string(scope.token());
                    std::vector<etcd::request_op> ops;
                    ops.emplace_back(std::move(put));
                    std::vector<etcd::request_op> none;
                    auto r = co_await c.txn(cmps, ops, none);
                    if (!r.succeeded) throw system_error(make_error_code(tenure::error::key_deleted));
                    ++writes;
                    write_tokens.push_back(scope.token());
                    progress.notify();
                } catch (system_error const& e) {
                    if (e.code() == asio::error::operation_aborted) throw;
                    if (e.code() == make_error_code(tenure::error::key_deleted)) throw;
                    // A member going away: retry; the scope decides about loss.
                }
                co_await pause(50ms);
            }
        };
    };
    auto make = [&](std::string who) {
        tenure::campaign_options o;
        o.session = opts(4s);
        o.key = "elw";
        o.value = who;
        o.session.on_event = [&elected, &progress, who](tenure::leadership_event const& e) {
            if (e.kind != tenure::leadership_event_kind::acquired) return;
            elected.push_back(who);
            progress.notify();
        };
        return o;
    };

    asio::cancellation_signal stop_a, stop_b;
    int ended = 0;
    auto oa = make("A");
    tenure::campaign(a, std::move(oa), body_for(a),
                     asio::bind_cancellation_slot(stop_a.slot(), [&](boost::system::error_code) {
                         ++ended;
                         progress.notify();
                     }));
    // (Predicates are named before co_await: g++ 12 would destroy a
    // temporary std::function in the co_await expression twice.)
    std::function<bool()> started = [&] { return writes >= 3; };
    BOOST_REQUIRE(co_await progress.until(std::move(started), 15'000ms));
    BOOST_TEST(elected.front() == "A");
    auto ob = make("B");
    tenure::campaign(b, std::move(ob), body_for(b),
                     asio::bind_cancellation_slot(stop_b.slot(), [&](boost::system::error_code) {
                         ++ended;
                         progress.notify();
                     }));
    co_await pause(300ms);  // B is waiting

    int const before = writes;
    BOOST_TEST_MESSAGE("killing member " << victim << (kill_raft_leader ? " (raft leader)" : " (follower)")
                                         << "; A talks to " << a.current_endpoint());
    env.cluster.kill(victim);
    std::function<bool()> more = [&] { return writes >= before + 10; };
    bool const resumed = co_await progress.until(std::move(more), 30'000ms);
    BOOST_TEST(resumed, "writes did not resume after the kill: " << writes - before);
    BOOST_TEST(max_holding == 1);
    BOOST_TEST(ended == 0);  // both campaigns still running
    // Fencing: tokens of successful writes never go back.
    BOOST_TEST(std::is_sorted(write_tokens.begin(), write_tokens.end()));
    std::string elected_list;
    for (auto const& w : elected) elected_list += w + " ";
    BOOST_TEST_MESSAGE("elected in turn: " << elected_list);

    stop_a.emit(asio::cancellation_type::terminal);
    stop_b.emit(asio::cancellation_type::terminal);
    std::function<bool()> both_ended = [&] { return ended == 2; };
    BOOST_TEST(co_await progress.until(std::move(both_ended), 15'000ms));
    BOOST_TEST(max_holding == 1);
    a.close();
    b.close();
}

}  // namespace

BOOST_FIXTURE_TEST_SUITE(etcd_failover, single_env)

BOOST_AUTO_TEST_CASE(killed_candidate_process_hands_over_after_its_lease) {
    run_scenario(ioc, [&] { return killed_process(*this); });
}
BOOST_AUTO_TEST_CASE(lease_expiring_while_campaigning_ends_the_campaign) {
    run_scenario(ioc, [&] { return lease_expires_while_campaigning(*this); });
}
BOOST_AUTO_TEST_CASE(unreachable_etcd_loses_the_scope_by_the_local_deadline) {
    run_scenario(ioc, [&] { return unreachable_leader(*this); });
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_FIXTURE_TEST_SUITE(etcd_cluster_election, cluster_env)

BOOST_AUTO_TEST_CASE(killing_the_leaders_member_keeps_one_leader) {
    run_scenario(ioc, [&] { return kill_member(*this, false); }, 90s);
}
BOOST_AUTO_TEST_CASE(killing_the_raft_leader_keeps_one_leader) {
    run_scenario(ioc, [&] { return kill_member(*this, true); }, 90s);
}

BOOST_AUTO_TEST_SUITE_END()
