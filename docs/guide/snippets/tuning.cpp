// Snippets of docs/guide/ttl-and-lock-delay.md (CTest docs.snippet.tuning):
// session options, an application health probe. Checks what the server
// recorded and that a failing probe ends the session.
#include <tenure/agent.hpp>
#include <tenure/consul/client.hpp>
#include <tenure/session.hpp>

#include <boost/asio.hpp>

#include <functional>
#include <iostream>

namespace asio = boost::asio;
using namespace std::chrono_literals;

//[ttl_options
tenure::session_options report_session() {
    tenure::session_options options;
    options.name = "nightly-report";
    options.ttl = 10s;         // renewed every 5 s; local deadline: last acknowledged renewal sent + 10 s
    options.lock_delay = 15s;  // after an invalidation, the key stays free of any holder for 15 s
    return options;
}
//]

//[health_probe
tenure::session_options report_session_with_probe(std::function<bool()> healthy) {
    tenure::session_options options = report_session();
    options.health_check_ttl = 30s;             // a TTL check bound to the session, heartbeated at each renewal
    options.health_probe = std::move(healthy);  // asked before each heartbeat; false invalidates the session
    return options;
}
//]

int failures = 0;
void expect(bool condition, char const* what) {
    if (!condition) {
        std::cerr << "FAILED: " << what << "\n";
        ++failures;
    }
}

asio::awaitable<void> check(tenure::consul::client& consul) {
    // The server records what the options asked for.
    auto options0 = report_session();  // named first: g++ 12 and temporaries in co_await
    tenure::session session = co_await tenure::session::create(consul, options0);
    auto info = co_await consul.session_info_get(session.id());
    expect(info.value && info.value->ttl == 10s && info.value->lock_delay == 15s, "TTL 10s and LockDelay 15s recorded");
    co_await session.close();

    // A probe that turns false invalidates the session at the next renewal.
    bool healthy = true;
    auto options = report_session_with_probe([&healthy] { return healthy; });
    options.ttl = 200ms;  // renewals every 100 ms, to keep the test short
    tenure::session probed = co_await tenure::session::create(consul, options);
    healthy = false;
    auto [reason] = co_await probed.wait_lost(asio::as_tuple(asio::use_awaitable));
    std::cout << "session lost: " << reason.message() << "\n";
    expect(reason == tenure::error::session_invalidated, "a failing probe invalidates the session");
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
