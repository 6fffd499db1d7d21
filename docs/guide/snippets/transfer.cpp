// Snippets of docs/guide/priorities-and-transfer.md (CTest docs.snippet.transfer):
// candidate priority, the registry, transfer_to and yield_to_higher, against
// an embedded agent. Checks who leads after each step.
#include <tenure/agent.hpp>
#include <tenure/consul/client.hpp>
#include <tenure/election.hpp>

#include <boost/asio.hpp>

#include <iostream>
#include <optional>

namespace asio = boost::asio;
using namespace std::chrono_literals;

//[priority_options
tenure::election_options preferred_node() {
    tenure::election_options options;
    options.priority = 10;             // leads whenever it waits: the best live candidate gets a freed key
    options.priority_grace = 2s;       // after an invalidation, others defer to it this long, then anyone goes
    options.yield_to_higher = false;   // see below
    return options;
}
//]

//[yield_options
tenure::election_options small_node() {
    tenure::election_options options;
    options.priority = 1;
    options.yield_to_higher = true;  // hand over when a higher-priority candidate waits...
    options.yield_settle = 5s;       // ...without a break for 5 s (a flapping one never gets the key)
    return options;
}
//]

//[switchover
// Rolling upgrade: hand leadership to the node named `next` (its session's
// name, or its session id) before stopping this one.
asio::awaitable<void> hand_over(tenure::election& election, tenure::leadership_scope& lead, std::string next) {
    for (auto const& c : co_await election.candidates())  // best first
        std::cout << "waiting: " << c.name << " priority " << c.priority << "\n";
    std::uint64_t token = co_await lead.transfer_to(next);  // one transaction: no gap, no lock-delay
    std::cout << "handed to " << next << " with token " << token << "\n";
    // lead.loss_reason() == tenure::error::transferred; its run() work was cancelled.
}
//]

int failures = 0;
void expect(bool condition, char const* what) {
    if (!condition) {
        std::cerr << "FAILED: " << what << "\n";
        ++failures;
    }
}

asio::awaitable<tenure::session> make_session(tenure::consul::client& consul, std::string name) {
    tenure::session_options o;
    o.name = std::move(name);
    o.ttl = 10s;
    o.lock_delay = 0s;
    co_return co_await tenure::session::create(consul, std::move(o));
}

// Blocks until `n` candidates wait for `key` (blocking queries on the
// registry, `<key>.candidates/`).
asio::awaitable<void> await_waiting(tenure::consul::client& consul, std::string const& key, std::size_t n) {
    tenure::consul::read_options ro;
    for (;;) {
        std::string registry = key + ".candidates/";
        auto r = co_await consul.kv_list(registry, ro);
        std::size_t live = 0;
        for (auto const& p : r.value) live += p.session.empty() ? 0 : 1;
        if (live >= n) co_return;
        ro.index = r.meta.index;
        ro.wait = 10s;
    }
}

asio::awaitable<void> check(tenure::consul::client& consul) {
    auto ex = co_await asio::this_coro::executor;
    std::string const key = "service/report/leader";
    tenure::session s_small = co_await make_session(consul, "small");
    tenure::session s_big = co_await make_session(consul, "big");
    tenure::session s_other = co_await make_session(consul, "other");
    tenure::election small(s_small, key, "small", small_node());
    tenure::election big(s_big, key, "big", preferred_node());
    tenure::election other(s_other, key, "other");

    auto lead = co_await small.acquire();
    std::optional<tenure::leadership_scope> other_scope, big_scope;
    asio::steady_timer wake(ex, std::chrono::steady_clock::time_point::max());
    other.acquire([&](boost::system::error_code ec, tenure::leadership_scope s) {
        if (!ec) other_scope = std::move(s);
        wake.cancel();
    });
    // Wait until `other` has registered as a candidate.
    co_await await_waiting(consul, key, 1);
    co_await hand_over(small, lead, "other");
    while (!other_scope) {
        wake.expires_at(std::chrono::steady_clock::time_point::max());
        co_await wake.async_wait(asio::as_tuple(asio::use_awaitable));
    }
    expect(lead.loss_reason() == tenure::error::transferred, "the old scope ends with error::transferred");
    expect(other_scope->held(), "the target leads");

    // A clean release hands the key to the best candidate: big before small.
    std::optional<tenure::leadership_scope> small_scope;
    big.acquire([&](boost::system::error_code ec, tenure::leadership_scope s) {
        if (!ec) big_scope = std::move(s);
        wake.cancel();
    });
    small.acquire([&](boost::system::error_code ec, tenure::leadership_scope s) {
        if (!ec) small_scope = std::move(s);
        wake.cancel();
    });
    co_await await_waiting(consul, key, 2);
    co_await other_scope->release();
    while (!big_scope && !small_scope) {
        wake.expires_at(std::chrono::steady_clock::time_point::max());
        co_await wake.async_wait(asio::as_tuple(asio::use_awaitable));
    }
    expect(big_scope && !small_scope, "priority 10 leads before priority 1");
    std::cout << "after the release: " << (big_scope ? "big" : "small") << " leads\n";
    co_await big_scope->release();  // now small
    while (!small_scope) {
        wake.expires_at(std::chrono::steady_clock::time_point::max());
        co_await wake.async_wait(asio::as_tuple(asio::use_awaitable));
    }
    co_await small_scope->release();
    co_await s_small.close();
    co_await s_big.close();
    co_await s_other.close();
}

int main() {
    asio::io_context io;
    tenure::agent_options agent_options;
    agent_options.session_ttl_min = 100ms;
    agent_options.log_stream = nullptr;
    tenure::agent agent(io.get_executor(), agent_options);
    agent.start();
    tenure::consul::client consul(io.get_executor(), agent.in_process());
    asio::co_spawn(io, check(consul), [&](std::exception_ptr e) {
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
