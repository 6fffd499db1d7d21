// Failover latency: from the moment a leader's term ends to the moment the
// next candidate's acquire() resolves, over many handovers.
//
//   failover [--handovers N] [--candidates K] [--scenario clean|destroy|all]
//            [--lock-delay-ms D] [--agent-addr URL]
//
// clean:   the leader releases the key (?release=): no lock-delay.
// destroy: the leader's session is destroyed on the server: lock-delay D
//          applies; the figure of interest is the overshoot past D.
// Without --agent-addr it starts the `tenure agent` binary (HTTP on loopback).
#include <tenure/consul/client.hpp>
#include <tenure/election.hpp>

#define BOOST_PROCESS_V2_HEADER_ONLY 1
#include <boost/asio.hpp>
#include <boost/process/v2.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

namespace asio = boost::asio;
namespace bp = boost::process::v2;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

namespace {

struct config {
    int handovers = 200;
    int candidates = 3;
    std::string scenario = "all";
    int lock_delay_ms = 50;
    std::string agent_addr;
};

double ms(steady::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

struct run_state {
    std::vector<double> samples;
    steady::time_point term_end{};
    bool measuring = false;
    int wanted = 0;
    bool done = false;
};

asio::awaitable<void> candidate(tenure::consul::client& client, config const& cfg, std::string const& scenario,
                                std::string key, int id, run_state& st) {
    tenure::session_options so;
    so.name = "bench-" + std::to_string(id);
    so.ttl = 10s;
    so.lock_delay = scenario == "clean" ? 0ms : std::chrono::milliseconds(cfg.lock_delay_ms);
    tenure::session s;
    try {
        while (!st.done) {
            s = co_await tenure::session::create(client, so);
            tenure::election e(s, key, so.name);
            while (!st.done) {
                auto [ec, scope] = co_await e.acquire(asio::as_tuple(asio::use_awaitable));
                if (ec == asio::error::operation_aborted) throw boost::system::system_error(ec);
                if (ec) break;  // our session was destroyed: campaign with a new one
                auto now = steady::now();
                if (st.measuring && !st.done) st.samples.push_back(ms(now - st.term_end));
                st.measuring = true;
                if (static_cast<int>(st.samples.size()) >= st.wanted) {
                    st.done = true;
                    co_await scope.release();
                    break;
                }
                // End the term.
                st.term_end = steady::now();
                if (scenario == "clean") {
                    co_await scope.release();
                } else {
                    co_await client.session_destroy(s.id());
                    co_await scope.wait_lost(asio::as_tuple(asio::use_awaitable));
                    break;
                }
                if (st.samples.size() % 50 == 0)
                    std::fprintf(stderr, "\r  %s: %zu/%d handovers", scenario.c_str(), st.samples.size(), st.wanted);
            }
        }
    } catch (boost::system::system_error const& e) {
        if (e.code() != asio::error::operation_aborted) throw;
    }
    // Stopped (or done): close the session before the client goes away.
    co_await asio::this_coro::reset_cancellation_state();
    if (s.valid() && s.state() != tenure::session_state::lost) co_await s.close(asio::as_tuple(asio::use_awaitable));
}

double pct(std::vector<double> v, double p) {
    std::sort(v.begin(), v.end());
    if (v.empty()) return 0;
    auto i = static_cast<std::size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5);
    return v[std::min(i, v.size() - 1)];
}

asio::awaitable<void> bench(config cfg, std::string url) {
    std::vector<std::string> scenarios;
    if (cfg.scenario == "all") scenarios = {"clean", "destroy"};
    else scenarios = {cfg.scenario};
    std::printf("%-9s %4s %6s %10s %9s %9s %9s %9s %12s\n", "scenario", "cand", "n", "lock-delay", "p50 ms",
                "p90 ms", "p99 ms", "max ms", "p50 overshoot");
    for (auto const& sc : scenarios) {
        std::vector<std::unique_ptr<tenure::consul::client>> clients;
        std::vector<std::unique_ptr<asio::cancellation_signal>> stops;
        run_state st;
        st.wanted = cfg.handovers;
        auto ex = co_await asio::this_coro::executor;
        int finished = 0;
        std::string key = "bench/failover/" + sc + "/" + std::to_string(steady::now().time_since_epoch().count());
        for (int i = 0; i < cfg.candidates; ++i) {
            tenure::consul::client_config cc;
            cc.address = url;
            clients.push_back(std::make_unique<tenure::consul::client>(ex, cc));
            stops.push_back(std::make_unique<asio::cancellation_signal>());
            asio::co_spawn(ex, candidate(*clients.back(), cfg, sc, key, i, st),
                           asio::bind_cancellation_slot(stops.back()->slot(), [&](std::exception_ptr e) {
                ++finished;
                if (e) {
                    try {
                        std::rethrow_exception(e);
                    } catch (std::exception const& x) {
                        std::fprintf(stderr, "candidate failed: %s\n", x.what());
                    }
                    st.done = true;
                }
            }));
        }
        asio::steady_timer t(ex);
        while (!st.done) {
            t.expires_after(10ms);
            co_await t.async_wait(asio::use_awaitable);
        }
        // The others are still blocked in acquire: stop them and let them close their sessions.
        for (auto& stop : stops) stop->emit(asio::cancellation_type::terminal);
        while (finished < cfg.candidates) {
            t.expires_after(5ms);
            co_await t.async_wait(asio::use_awaitable);
        }
        std::fprintf(stderr, "\r%60s\r", "");
        double delay = sc == "clean" ? 0.0 : cfg.lock_delay_ms;
        std::printf("%-9s %4d %6zu %8.0f ms %9.3f %9.3f %9.3f %9.3f %9.3f ms\n", sc.c_str(), cfg.candidates,
                    st.samples.size(), delay, pct(st.samples, 50), pct(st.samples, 90), pct(st.samples, 99),
                    st.samples.empty() ? 0.0 : *std::max_element(st.samples.begin(), st.samples.end()),
                    pct(st.samples, 50) - delay);
        for (auto& c : clients) c->close();
    }
}

}  // namespace

int main(int argc, char** argv) {
    config cfg;
    std::vector<std::string> args(argv + 1, argv + argc);
    for (std::size_t i = 0; i < args.size(); ++i) {
        auto next = [&]() -> std::string {
            if (i + 1 >= args.size()) throw std::runtime_error("missing value for " + args[i]);
            return args[++i];
        };
        if (args[i] == "--handovers") cfg.handovers = std::stoi(next());
        else if (args[i] == "--candidates") cfg.candidates = std::stoi(next());
        else if (args[i] == "--scenario") cfg.scenario = next();
        else if (args[i] == "--lock-delay-ms") cfg.lock_delay_ms = std::stoi(next());
        else if (args[i] == "--agent-addr") cfg.agent_addr = next();
        else {
            std::cerr << "usage: failover [--handovers N] [--candidates K] [--scenario clean|destroy|all]"
                         " [--lock-delay-ms D] [--agent-addr URL]\n";
            return 2;
        }
    }
    asio::io_context io;
    std::string url = cfg.agent_addr;
    std::optional<bp::process> agent;
    asio::readable_pipe out(io);
    if (url.empty()) {
        agent.emplace(io, TENURE_BINARY, std::vector<std::string>{"agent", "-http-addr", "127.0.0.1:0", "-log-level", "warn"},
                      bp::process_stdio{{}, out, {}});
        std::string line;
        asio::read_until(out, asio::dynamic_buffer(line), '\n');
        url = line.substr(line.rfind(' ') + 1);
        url.erase(url.find_last_not_of("\r\n") + 1);
    }
    std::printf("failover bench: agent %s over loopback HTTP, %d handovers per scenario, %d candidates\n",
                url.c_str(), cfg.handovers, cfg.candidates);
    int rc = 0;
    asio::co_spawn(io, bench(cfg, url), [&](std::exception_ptr e) {
        if (e) {
            try {
                std::rethrow_exception(e);
            } catch (std::exception const& x) {
                std::cerr << "bench failed: " << x.what() << "\n";
            }
            rc = 1;
        }
        io.stop();
    });
    io.run();
    if (agent) agent->terminate();
    return rc;
}
