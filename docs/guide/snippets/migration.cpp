// Snippets of docs/guide/migrating.md (CTest docs.snippet.migration): Go's
// api.Lock, its stopCh, LockTryOnce and a key watch, in tenure. Runs against
// an agent in this process.
#include <tenure/agent.hpp>
#include <tenure/consul/client.hpp>
#include <tenure/election.hpp>

#include <boost/asio.hpp>
#include <boost/asio/experimental/parallel_group.hpp>

#include <iostream>
#include <optional>

namespace asio = boost::asio;
using namespace std::chrono_literals;

int failures = 0;
void expect(bool condition, char const* what) {
    if (!condition) {
        std::cerr << "FAILED: " << what << "\n";
        ++failures;
    }
}

asio::awaitable<void> do_work(std::uint64_t fencing_token) {
    std::cout << "working with fencing token " << fencing_token << "\n";
    co_return;
}

//[go_lock
asio::awaitable<void> lock_like_go(tenure::consul::client& consul) {
    tenure::session_options options;  // LockOptions.SessionName, SessionTTL, LockDelay
    options.name = "Consul API Lock";
    options.ttl = 15s;
    options.lock_delay = 15s;  // 0 really means 0 here (the Go api omits it: 15 s)
    tenure::session session = co_await tenure::session::create(consul, options);

    tenure::election election(session, "service/report/leader", "node-a");  // Key, Value
    tenure::leadership_scope lead = co_await election.acquire();              // lock.Lock(stopCh)
    std::uint64_t fencing_token = lead.token();                               // the key's LockIndex

    auto work = do_work(fencing_token);
    co_await lead.run(std::move(work));  // select on leaderCh: the work is cancelled on loss
    co_await lead.release();             // lock.Unlock()
    co_await session.close();            // the Go api destroys its session after Unlock too
}
//]

//[lock_timeout
// LockWaitTime: give up the wait after `timeout`. The first of the two
// operations to complete wins; the other is cancelled.
asio::awaitable<std::optional<tenure::leadership_scope>> lock_within(tenure::election& election,
                                                                     std::chrono::milliseconds timeout) {
    asio::steady_timer timer(co_await asio::this_coro::executor, timeout);
    auto race = asio::experimental::make_parallel_group(election.acquire(asio::deferred),
                                                        timer.async_wait(asio::deferred));
    auto [order, ec, lead, timer_ec] = co_await race.async_wait(asio::experimental::wait_for_one(), asio::deferred);
    if (order[0] == 1) co_return std::nullopt;  // timed out: acquire() was cancelled, nothing written
    if (ec) throw boost::system::system_error(ec);
    co_return std::move(lead);
}
//]

//[try_once
// LockTryOnce without a wait: one attempt.
asio::awaitable<bool> run_if_free(tenure::election& election) {
    tenure::leadership_scope lead = co_await election.try_acquire();
    if (!lead) co_return false;  // held by someone else, or a lock-delay is running
    auto work = do_work(lead.token());
    co_await lead.run(std::move(work));
    co_await lead.release();
    co_return true;
}
//]

//[watch_leader
// `consul watch -type=key` or a blocking-query loop on the key.
asio::awaitable<void> print_leaders(tenure::consul::client& consul, int changes) {
    tenure::leader_observer observer(consul, "service/report/leader");
    for (int i = 0; i < changes; ++i) {
        std::optional<tenure::leader_info> leader = co_await observer.next();
        if (leader)
            std::cout << "leader: " << leader->value << " (fencing token " << leader->lock_index << ")\n";
        else
            std::cout << "no leader\n";
    }
}
//]

asio::awaitable<void> scenario(tenure::consul::client& consul, tenure::consul::client& rival) {
    co_await lock_like_go(consul);

    // A rival holds the key: the timed acquisition gives up, try_acquire too.
    tenure::session_options options;
    options.ttl = 10s;
    tenure::session rival_session = co_await tenure::session::create(rival, options);
    tenure::election rival_election(rival_session, "service/report/leader", "node-b");
    tenure::leadership_scope rival_lead = co_await rival_election.acquire();

    tenure::session session = co_await tenure::session::create(consul, options);
    tenure::election election(session, "service/report/leader", "node-a");
    auto timed_out = co_await lock_within(election, 100ms);
    expect(!timed_out, "lock_within gives up while the rival leads");
    expect(!co_await run_if_free(election), "run_if_free does nothing while the rival leads");

    // The observer sees the rival, then nobody once the rival releases.
    bool watched = false;
    asio::co_spawn(
        co_await asio::this_coro::executor,
        [&]() -> asio::awaitable<void> {
            co_await print_leaders(consul, 2);
            watched = true;
        },
        asio::detached);
    asio::steady_timer pause(co_await asio::this_coro::executor, 20ms);
    co_await pause.async_wait(asio::use_awaitable);
    co_await rival_lead.release();
    for (int i = 0; i < 500 && !watched; ++i) {
        pause.expires_after(10ms);
        co_await pause.async_wait(asio::use_awaitable);
    }
    expect(watched, "the observer saw the rival, then no leader");
    expect(co_await run_if_free(election), "run_if_free runs once the key is free");
    co_await session.close();
    co_await rival_session.close();
}

int main() {
    asio::io_context io;
    tenure::agent_options agent_options;
    agent_options.log_stream = nullptr;
    tenure::agent agent(io.get_executor(), agent_options);
    agent.start();
    tenure::consul::client consul(io.get_executor(), agent.in_process());
    tenure::consul::client rival(io.get_executor(), agent.in_process());
    asio::co_spawn(io, scenario(consul, rival), [&](std::exception_ptr e) {
        if (e) {
            try {
                std::rethrow_exception(e);
            } catch (std::exception const& x) {
                std::cerr << "FAILED: " << x.what() << "\n";
            }
            ++failures;
        }
        agent.stop();
    });
    io.run();
    return failures == 0 ? 0 : 1;
}
