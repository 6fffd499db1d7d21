// A semaphore-limited worker pool: N workers share a tenure::semaphore of K
// permits, so at most K of them run their task at once, across every process
// that uses the same prefix (and `consul lock -n K` / Go's api.Semaphore too).
//
//   worker_pool --demo
//       an embedded agent and 6 workers, at most 2 at a time; exits 0 when
//       every task ran and no more than 2 ever ran together
//   worker_pool [--workers N] [--limit K]
//       N workers (default 4) against the agent at CONSUL_HTTP_ADDR (default
//       http://127.0.0.1:8500), each with its own HTTP client and session.
//       Start several processes with the same --limit: they share the K permits.
//
// A permit is a tenure::leadership_scope: run() cancels the task if the
// permit is lost (the session invalidated, the holder pruned).
#include <tenure/agent.hpp>
#include <tenure/consul/client.hpp>
#include <tenure/semaphore.hpp>

#include <boost/asio.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <list>
#include <optional>
#include <string>

namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

constexpr char const* pool_prefix = "service/thumbnailer/pool";

// What the pool observed, to check the limit.
struct pool_stats {
    int running = 0;
    int most_running = 0;
    int completed = 0;
};

asio::awaitable<void> task(std::string name, std::uint64_t token, std::chrono::milliseconds duration,
                           pool_stats& stats) {
    ++stats.running;
    stats.most_running = std::max(stats.most_running, stats.running);
    std::cout << name << ": starts (permit token " << token << ", " << stats.running << " running)" << std::endl;
    struct leave {
        pool_stats& s;
        ~leave() { --s.running; }
    } on_exit{stats};
    asio::steady_timer work(co_await asio::this_coro::executor, duration);  // the task itself
    co_await work.async_wait(asio::use_awaitable);                           // cancelled if the permit is lost
    ++stats.completed;
    std::cout << name << ": done" << std::endl;
}

asio::awaitable<void> worker(tenure::consul::client& consul, std::string name, int limit,
                             std::chrono::milliseconds duration, pool_stats& stats) {
    tenure::session_options options;
    options.name = "worker_pool " + name;
    options.ttl = 10s;
    options.lock_delay = 0s;  // a permit is not a leader: no need to wait after a crash
    // As the Go api and `consul lock -n` do: the server deletes a dead
    // worker's contender key, leaving nothing behind under the prefix.
    options.behavior = tenure::consul::session_behavior::delete_keys;
    tenure::session session = co_await tenure::session::create(consul, options);

    tenure::semaphore pool(session, pool_prefix, limit, name);
    tenure::leadership_scope permit = co_await pool.acquire();  // waits for a free permit; never polls

    auto work = task(name, permit.token(), duration, stats);
    bool finished = co_await permit.run(std::move(work));
    if (!finished) std::cout << name << ": permit lost: " << permit.loss_reason().message() << std::endl;
    co_await permit.release();  // frees the permit for the next worker
    co_await session.close();
}

int parse_int(char const* text, char const* flag) {
    try {
        int n = std::stoi(text);
        if (n > 0) return n;
    } catch (std::exception const&) {
    }
    std::cerr << "worker_pool: " << flag << " needs a positive number, got \"" << text << "\"\n";
    std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
    bool demo = false;
    int workers = 4, limit = 2;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--demo") == 0) {
            demo = true, workers = 6;
        } else if (std::strcmp(argv[i], "--workers") == 0 && i + 1 < argc) {
            workers = parse_int(argv[++i], "--workers");
        } else if (std::strcmp(argv[i], "--limit") == 0 && i + 1 < argc) {
            limit = parse_int(argv[++i], "--limit");
        } else {
            std::cerr << "usage: worker_pool --demo | worker_pool [--workers N] [--limit K]\n";
            return 2;
        }
    }

    asio::io_context io;
    std::optional<tenure::agent> agent;
    if (demo) {
        tenure::agent_options options;
        options.log_stream = nullptr;
        agent.emplace(io.get_executor(), options);
        agent->start();
    }
    std::list<tenure::consul::client> clients;  // one per worker, as separate processes would have
    pool_stats stats;
    int ended = 0, failed = 0;
    auto duration = demo ? 100ms : 2000ms;
    for (int i = 1; i <= workers; ++i) {
        auto& consul = agent ? clients.emplace_back(io.get_executor(), agent->in_process()) : clients.emplace_back(io.get_executor());
        std::string name = "worker-" + std::to_string(i);
        asio::co_spawn(io, worker(consul, name, limit, duration, stats), [&, name](std::exception_ptr e) {
            if (e) {
                ++failed;
                try {
                    std::rethrow_exception(e);
                } catch (std::exception const& x) {
                    std::cerr << name << ": " << x.what() << std::endl;
                }
            }
            if (++ended == workers && agent) agent->stop();
        });
    }
    io.run();

    std::cout << stats.completed << " of " << workers << " tasks completed; at most " << stats.most_running
              << " ran at once (limit " << limit << ")" << std::endl;
    bool ok = failed == 0 && stats.completed == workers && stats.most_running <= limit;
    if (demo) std::cout << (ok ? "PASS" : "FAIL") << std::endl;
    return ok ? 0 : 1;
}
