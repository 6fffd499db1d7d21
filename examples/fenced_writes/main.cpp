// Fencing, step by step: a leader stalls (a stop-the-world pause), loses
// leadership while frozen, wakes up and tries to finish a write it had
// started. Locks are advisory; the fencing token is what stops it:
//   - a protected resource (tenure::fence) rejects the write stamped with the
//     old token, because it has already seen the new leader's larger one;
//   - a write into the coordination store itself through tenure::fenced_write
//     is refused by the server, because the old leader's session no longer
//     holds the key (the same call on etcd: a txn on the key's lease).
//
// Node A runs on its own io_context; the pause is simply not running it
// while the agent and node B go on. Exits 0 when both stale writes were refused.
#include <tenure/agent.hpp>
#include <tenure/consul/client.hpp>
#include <tenure/election.hpp>
#include <tenure/fence.hpp>
#include <tenure/fenced_write.hpp>

#include <boost/asio.hpp>

#include <iostream>
#include <thread>

namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

constexpr char const* key = "service/ledger/leader";

// The protected resource: a ledger that only takes writes it can fence.
struct ledger {
    tenure::fence gate;
    std::vector<std::string> entries;

    bool write(tenure::fencing_token const& token, std::string entry) {
        if (!gate.admit(token)) {
            std::cout << "    ledger: REJECTED \"" << entry << "\" stamped with token " << token.value
                      << " (highest seen " << gate.highest(token.key) << ")\n";
            return false;
        }
        std::cout << "    ledger: accepted \"" << entry << "\" with token " << token.value << "\n";
        entries.push_back(std::move(entry));
        return true;
    }
};

tenure::session_options session_opts(std::string name) {
    tenure::session_options o;
    o.name = std::move(name);
    o.ttl = 1s;
    o.lock_delay = 500ms;
    return o;
}

std::vector<tenure::write_op> kv_write(std::string k, std::string v) {
    return {tenure::write_op::put(std::move(k), std::move(v))};
}

}  // namespace

int main() {
    asio::io_context io;    // the agent and node B
    asio::io_context io_a;  // node A, frozen during its pause
    tenure::agent_options ao;
    ao.session_ttl_min = 1s;
    ao.log_stream = nullptr;
    tenure::agent agent(io.get_executor(), ao);
    agent.start();

    tenure::consul::client_config ca;
    ca.address = agent.http_address();
    tenure::consul::client client_a(io_a.get_executor(), ca);
    tenure::consul::client client_b(io.get_executor(), agent.in_process());
    ledger resource;
    int refused = 0;

    // Runs an io_context until `done` (A's calls go over HTTP to the agent,
    // so the agent's io_context must run at the same time).
    auto run_until = [&](bool const& done) {
        for (int i = 0; i < 20000 && !done; ++i) {
            io.poll();
            io_a.poll();
            if (!done) std::this_thread::sleep_for(100us);
        }
    };

    std::cout << "1. node A becomes leader and writes\n";
    tenure::session sa;
    tenure::leadership_scope lead_a;
    bool a_ready = false;
    asio::co_spawn(
        io_a,
        [&]() -> asio::awaitable<void> {
            sa = co_await tenure::session::create(client_a, session_opts("node-a"));
            tenure::election e(sa, key, "node-a");
            lead_a = co_await e.acquire();
            std::cout << "    node A leads with fencing token " << lead_a.token() << "\n";
            resource.write(lead_a.fencing(), "A: debit 100");
            auto used = co_await tenure::fenced_write(lead_a, kv_write("ledger/last", "A: debit 100"));
            std::cout << "    consul KV: A's fenced write committed under token " << used.value << "\n";
            a_ready = true;
        },
        asio::detached);
    run_until(a_ready);

    std::cout << "2. node A stalls (a long GC pause): it renews nothing, notices nothing\n";
    std::cout << "3. the server expires A's session after 2 x TTL, applies lock-delay, and B takes over\n";
    bool b_done = false;
    tenure::session sb;
    tenure::leadership_scope lead_b;
    auto stall_started = std::chrono::steady_clock::now();
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
            sb = co_await tenure::session::create(client_b, session_opts("node-b"));
            tenure::election e(sb, key, "node-b");
            lead_b = co_await e.acquire();
            auto waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - stall_started).count();
            std::cout << "    node B leads with fencing token " << lead_b.token() << " (" << waited
                      << " s into A's pause)\n";
            resource.write(lead_b.fencing(), "B: credit 50");
            auto used = co_await tenure::fenced_write(lead_b, kv_write("ledger/last", "B: credit 50"));
            std::cout << "    consul KV: B's fenced write committed under token " << used.value << "\n";
            b_done = true;
        },
        asio::detached);
    for (int i = 0; i < 20000 && !b_done; ++i) {
        io.run_for(1ms);  // only the agent and B run: A is frozen
    }

    std::cout << "4. node A wakes up and finishes the write it had started, with its old token\n";
    bool a_done = false;
    asio::co_spawn(
        io_a,
        [&]() -> asio::awaitable<void> {
            if (!resource.write(lead_a.fencing(), "A: debit 100 (again)")) ++refused;
            auto [ec, used] = co_await tenure::fenced_write(lead_a, kv_write("ledger/last", "A: debit 100 (again)"),
                                                            asio::as_tuple(asio::use_awaitable));
            std::cout << "    consul KV: A's fenced write " << (ec ? "refused" : "committed") << " ("
                      << (ec ? ec.message() : std::string("ok")) << ")\n";
            if (ec == tenure::error::not_held) ++refused;
            a_done = true;
        },
        asio::detached);
    run_until(a_done);

    std::cout << "5. A's own session notices too: its local deadline has long passed\n";
    bool a_noticed = false;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
            co_await sa.wait_lost(asio::as_tuple(asio::use_awaitable));
            a_noticed = true;
        },
        asio::detached);
    run_until(a_noticed);
    std::cout << "    node A: " << (lead_a.lost() ? "leadership lost: " + lead_a.loss_reason().message()
                                                   : std::string("still believes it leads"))
              << "\n";

    bool closed = false;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
            co_await lead_b.release();
            co_await sb.close();
            closed = true;
        },
        asio::detached);
    run_until(closed);
    agent.stop();
    std::cout << (refused == 2 ? "PASS: both stale writes were refused.\n" : "FAIL\n");
    return refused == 2 ? 0 : 1;
}
