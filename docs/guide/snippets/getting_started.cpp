// Snippets of docs/guide/getting-started.md (CTest docs.snippet.getting_started).
// The guide quotes the regions between //[name and //]; docs.guide_quotes
// checks that the quotes match. Runs against an agent in this process, once
// in-process and once over HTTP.
#include <tenure/agent.hpp>
#include <tenure/consul/client.hpp>
#include <tenure/election.hpp>

#include <boost/asio.hpp>

#include <iostream>

namespace asio = boost::asio;
using namespace std::chrono_literals;

std::uint64_t last_token = 0;

//[lead_once
asio::awaitable<void> lead_once(tenure::consul::client& consul) {
    tenure::session_options options;
    options.name = "nightly-report";
    options.ttl = 10s;
    options.lock_delay = 10s;
    tenure::session session = co_await tenure::session::create(consul, options);

    tenure::election election(session, "service/nightly-report/leader", "node-a");
    tenure::leadership_scope lead = co_await election.acquire();
    std::cout << "leading with fencing token " << lead.token() << "\n";

    co_await lead.release();
    co_await session.close();
}
//]

asio::awaitable<void> lead_and_record(tenure::consul::client& consul) {
    tenure::session_options options;
    options.ttl = 10s;
    tenure::session session = co_await tenure::session::create(consul, options);
    tenure::election election(session, "service/nightly-report/leader", "check");
    tenure::leadership_scope lead = co_await election.acquire();
    last_token = lead.token();
    co_await lead.release();
    co_await session.close();
}

asio::awaitable<void> both(tenure::consul::client& in_process, tenure::consul::client& over_http) {
    co_await lead_once(in_process);
    co_await lead_once(over_http);
    co_await lead_and_record(in_process);
}

int main() {
    //[embedded_agent
    asio::io_context io;
    tenure::agent_options agent_options;
    agent_options.http_addr = "127.0.0.1:0";  // any free port
    tenure::agent agent(io.get_executor(), agent_options);
    agent.start();
    tenure::consul::client consul(io.get_executor(), agent.in_process());  // in-process: no sockets
    //]

    //[http_client
    tenure::consul::client_config config;
    config.address = agent.http_address();  // empty: CONSUL_HTTP_ADDR, else http://127.0.0.1:8500
    tenure::consul::client over_http(io.get_executor(), config);
    //]

    bool ok = false;
    asio::co_spawn(io, both(consul, over_http), [&](std::exception_ptr e) {
        ok = !e;
        agent.stop();
    });
    io.run();
    // Three terms on one key: the fencing token grew to 3.
    std::cout << "token of the third term: " << last_token << "\n";
    return ok && last_token == 3 ? 0 : 1;
}
