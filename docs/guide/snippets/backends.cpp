// Snippets of docs/guide/backends.md (CTest docs.snippet.backends): one
// election function for every backend. The Consul part runs against an agent
// in this process over HTTP; the etcd part runs only when ETCDCTL_ENDPOINTS
// names an etcd (it is compiled either way).
#include <tenure/agent.hpp>
#include <tenure/consul/client.hpp>
#include <tenure/election.hpp>
#include <tenure/etcd/client.hpp>

#include <boost/asio.hpp>

#include <cstdlib>
#include <iostream>

namespace asio = boost::asio;
using namespace std::chrono_literals;

//[any_backend
// The same code leads on Consul, on `tenure agent` and on etcd: only the
// session's creation names the backend.
asio::awaitable<std::uint64_t> lead_once(tenure::session& session) {
    tenure::election election(session, "service/nightly-report/leader", "node-a");
    tenure::leadership_scope lead = co_await election.acquire();
    std::uint64_t token = lead.token();
    co_await lead.release();
    co_return token;
}
//]

asio::awaitable<std::uint64_t> on_consul(std::string address) {
    auto ex = co_await asio::this_coro::executor;
    //[consul_backend
    tenure::consul::client_config config;
    config.address = address;  // a Consul agent or `tenure agent`; empty: CONSUL_HTTP_ADDR
    config.token = "";         // ACL token (X-Consul-Token); empty: CONSUL_HTTP_TOKEN
    tenure::consul::client consul(ex, config);

    tenure::session_options options;
    options.ttl = 10s;
    options.lock_delay = 15s;
    tenure::session session = co_await tenure::session::create(consul, options);
    //]
    std::uint64_t token = co_await lead_once(session);
    co_await session.close();
    co_return token;
}

asio::awaitable<std::uint64_t> on_etcd() {
    auto ex = co_await asio::this_coro::executor;
    //[etcd_backend
    tenure::etcd::client_config config;  // endpoints: ETCDCTL_ENDPOINTS, else http://127.0.0.1:2379
    tenure::etcd::client etcd(ex, config);

    tenure::session_options options;
    options.ttl = 10s;  // the lease's TTL, kept alive every TTL/3; revoked by close()
    tenure::session session = co_await tenure::session::create(etcd, options);
    //]
    std::uint64_t token = co_await lead_once(session);
    co_await session.close();
    co_return token;
}

int main() {
    asio::io_context io;
    tenure::agent_options agent_options;
    agent_options.log_stream = nullptr;
    tenure::agent agent(io.get_executor(), agent_options);
    agent.start();

    int failures = 0;
    bool with_etcd = std::getenv("ETCDCTL_ENDPOINTS") != nullptr;
    auto report = [&](char const* what) {
        return [&, what](std::exception_ptr e, std::uint64_t token) {
            if (e) {
                try {
                    std::rethrow_exception(e);
                } catch (std::exception const& x) {
                    std::cerr << what << " FAILED: " << x.what() << "\n";
                }
                ++failures;
            } else {
                std::cout << what << ": led with fencing token " << token << "\n";
            }
        };
    };
    asio::co_spawn(io, on_consul(agent.http_address()), [&](std::exception_ptr e, std::uint64_t token) {
        report("consul")(e, token);
        agent.stop();
    });
    if (with_etcd) asio::co_spawn(io, on_etcd(), report("etcd"));
    else std::cout << "etcd: skipped (set ETCDCTL_ENDPOINTS to run it)\n";
    io.run();
    return failures == 0 ? 0 : 1;
}
