// The simulated world a schedule runs in: one io_context in virtual time
// (tenure/detail/simulated_time.hpp), simulated processes (the agent and each
// client) with their own drifting clocks, and the faults a schedule injects
// at the transport seam between a consul::client and the real agent.
#pragma once

#include <tenure/agent.hpp>
#include <tenure/consul/client.hpp>
#include <tenure/detail/clock.hpp>

#include "consul/transport.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/io_context.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#if !defined(TENURE_SIMULATED_TIME)
#error "tests/sim is built against the simulation build of the library (TENURE_SIMULATED_TIME)"
#endif

namespace tenure::sim {

class faulty_transport;

namespace asio = boost::asio;
using detail::sim::process;
using detail::sim::process_executor;
using namespace std::chrono_literals;
using std::chrono::nanoseconds;

// What the network and the machines do to one request, drawn per request.
struct fault_rates {
    double delay = 0.2;            // an extra delay, each way, up to max_delay
    nanoseconds max_delay = 30ms;
    double drop_request = 0.01;    // never reaches the agent: the client waits out its deadline
    double drop_answer = 0.01;     // applied, but the answer is lost
    double duplicate = 0.01;       // applied twice (a retransmission), the first answer returned
    double reset = 0.01;           // the connection resets before the request is sent
    double status_429 = 0.005;     // the agent's rate limit
    double status_5xx = 0.01;      // 500 / 503 without applying
};

// Trace of one schedule, printed as it happens with --verbose.
struct trace {
    bool enabled = false;
    void add(std::string line);
};

// The world: virtual time, processes, the agent, the faults.
class world {
public:
    world(std::uint64_t seed, trace& log);
    ~world();
    world(world const&) = delete;
    world& operator=(world const&) = delete;

    asio::io_context& io() noexcept { return io_; }
    std::mt19937_64& rng() noexcept { return rng_; }
    double uniform() { return std::uniform_real_distribution<double>(0, 1)(rng_); }
    nanoseconds uniform(nanoseconds lo, nanoseconds hi) {
        return nanoseconds{std::uniform_int_distribution<std::int64_t>(lo.count(), hi.count())(rng_)};
    }
    // Virtual world time since the schedule began.
    static nanoseconds now() noexcept;

    // A new simulated process (its clock: a random offset, drift within
    // +-max_drift), and an executor that runs handlers as it.
    process& add_process(std::string name, double max_drift);
    asio::any_io_executor executor(process& p);
    std::string const& name(process const& p) const;

    // The agent, on its own process. `durable`: its state is kept in a fresh
    // data directory (on tmpfs when there is one), so that it can crash and
    // restart from it.
    void start_agent(agent_options options, bool durable = false);
    // The agent that runs now (between a crash and its restart: none).
    tenure::agent& agent() noexcept { return *agent_; }
    bool agent_up() const noexcept { return agent_ != nullptr; }
    process& agent_process() noexcept { return *agent_process_; }
    // As SIGKILL: the agent's process dies with whatever it had not yet
    // committed to its data directory, and every connection to it resets.
    void crash_agent();
    // A new agent process recovers the data directory (every session gets a
    // fresh TTL x 2, lock-delays are gone) and clients reconnect to it.
    void restart_agent();
    int agent_restarts() const noexcept { return incarnation_; }

    // A client on process p whose requests go through the fault injector.
    std::unique_ptr<consul::client> make_client(process& p, int id, consul::client_config config);

    // Faults. While `faults_on`, each request draws from `rates`; a
    // partitioned client's requests are black holes.
    fault_rates rates;
    bool faults_on = true;
    std::vector<bool> partitioned;  // by client id
    std::uint64_t requests = 0, faults = 0;
    std::uint64_t invalidations = 0, lock_delay_refusals = 0;  // by the agent

    // Runs `f` at world time `at`, as the world (not any process).
    void at(nanoseconds when, std::function<void()> f);
    // Stops process p for `length` (a stop-the-world pause: nothing of it runs).
    void pause(process& p, nanoseconds length);

    // Runs until nothing is ready and no timer will ever fire (returns true),
    // or until `stop_at` world time (returns false).
    bool run_until(nanoseconds stop_at);

    trace& log;

private:
    friend class faulty_transport;
    void launch_agent();
    // Declared before io_, so destroyed after it: handlers the io_context
    // still holds when it goes refer to their processes.
    std::vector<std::unique_ptr<process>> processes_;
    std::vector<std::string> names_;
    process* agent_process_ = nullptr;
    asio::io_context io_;
    std::mt19937_64 rng_;
    agent_options agent_options_;
    std::string data_dir_;  // removed by the destructor
    int incarnation_ = 0;   // restarts so far
    std::unique_ptr<tenure::agent> agent_;
    // Crashed agents stay until the world ends: their dead process's
    // handlers, dropped as they come due, still refer to them.
    std::vector<std::unique_ptr<tenure::agent>> crashed_;
    std::vector<faulty_transport*> transports_;  // to reset on a crash
};

}  // namespace tenure::sim
