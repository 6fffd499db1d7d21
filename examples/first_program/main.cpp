// The first program: take a lock, print its fencing token, let it go.
//
//   first_program              against the agent at CONSUL_HTTP_ADDR (default
//                              http://127.0.0.1:8500): `tenure agent` or Consul
//   first_program --embedded   against a tenure::agent inside this process
//                              (no sockets; what the CTest smoke test runs)
//
// Prints `leader of service/first-program/leader with fencing token N` and
// exits 0. Run it twice against one agent: the token grows by one each time.
#include <tenure/agent.hpp>
#include <tenure/consul/client.hpp>
#include <tenure/election.hpp>

#include <boost/asio.hpp>

#include <cstring>
#include <iostream>
#include <optional>

namespace asio = boost::asio;
using namespace std::chrono_literals;

asio::awaitable<void> lead_once(tenure::consul::client& consul) {
    tenure::session_options options;
    options.name = "first_program";
    options.ttl = 10s;        // renewed every 5 s in the background
    options.lock_delay = 1s;  // applied only if this process dies holding the lock
    tenure::session session = co_await tenure::session::create(consul, options);

    tenure::election election(session, "service/first-program/leader", "first_program");
    tenure::leadership_scope lead = co_await election.acquire();  // waits while someone else leads
    std::cout << "leader of " << lead.key() << " with fencing token " << lead.token() << std::endl;

    co_await lead.release();  // a clean release: the next leader need not wait for the lock-delay
    co_await session.close();
}

int main(int argc, char** argv) {
    bool embedded = argc > 1 && std::strcmp(argv[1], "--embedded") == 0;
    asio::io_context io;

    std::optional<tenure::agent> agent;
    std::optional<tenure::consul::client> consul;
    if (embedded) {
        tenure::agent_options options;
        options.log_stream = nullptr;
        agent.emplace(io.get_executor(), options);
        agent->start();
        consul.emplace(io.get_executor(), agent->in_process());  // in-process: no sockets
    } else {
        consul.emplace(io.get_executor());  // CONSUL_HTTP_ADDR or http://127.0.0.1:8500
    }

    int status = 1;
    asio::co_spawn(io, lead_once(*consul), [&](std::exception_ptr e) {
        try {
            if (e) std::rethrow_exception(e);
            status = 0;
        } catch (std::exception const& x) {
            std::cerr << "first_program: " << x.what() << std::endl;
        }
        if (agent) agent->stop();  // lets io.run() return
    });
    io.run();
    return status;
}
