// A downstream program using tenure as an ordinary CMake dependency: an
// embedded agent on 127.0.0.1:0, an in-process Consul client, one session,
// one election: acquire, check the fencing token, release, close. Exit 0 on
// success. Built by tests/consumers/{find_package,add_subdirectory}.
#include <tenure/agent.hpp>
#include <tenure/consul/client.hpp>
#include <tenure/election.hpp>
#include <tenure/leadership_scope.hpp>
#include <tenure/session.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

#include <chrono>
#include <exception>
#include <iostream>
#include <string>

namespace asio = boost::asio;
using namespace std::chrono_literals;

int main() {
    asio::io_context ioc{1};
    tenure::agent_options agent_opts;
    agent_opts.http_addr = "127.0.0.1:0";
    agent_opts.session_ttl_min = 1s;
    agent_opts.log_stream = nullptr;
    tenure::agent agent{ioc.get_executor(), agent_opts};
    agent.start();
    tenure::consul::client consul{ioc.get_executor(), agent.in_process()};

    int status = 1;
    asio::co_spawn(
        ioc,
        [&]() -> asio::awaitable<void> {
            tenure::session_options options;
            options.ttl = 2s;
            options.lock_delay = 0s;
            tenure::session session = co_await tenure::session::create(consul, options);
            tenure::election election{session, "consumer/leader", "consumer"};
            tenure::leadership_scope lead = co_await election.acquire();
            std::cout << "leader of " << election.key() << " with token " << lead.token() << '\n';
            co_await lead.release();
            co_await session.close();
            status = 0;
        },
        [&](std::exception_ptr e) {
            if (e) {
                try {
                    std::rethrow_exception(e);
                } catch (std::exception const& ex) {
                    std::cerr << "consumer: " << ex.what() << '\n';
                }
            }
            agent.stop();
        });
    ioc.run();
    std::cout << (status == 0 ? "consumer: ok" : "consumer: FAILED") << '\n';
    return status;
}
