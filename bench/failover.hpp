// Shared by failover.cpp (the Consul backends, output, main) and
// failover_etcd.cpp (the etcd and `etcdctl elect` backends): the scenarios,
// the configuration, one handover's sample and a run's result set.
#pragma once

#include "common.hpp"

#include <tenure/election.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace bench {
class etcd_server;  // etcd_cluster.hpp
}

namespace failover_bench {

using namespace bench;
constexpr double nan_v = std::numeric_limits<double>::quiet_NaN();
inline bool const trace_on = std::getenv("FAILOVER_TRACE") != nullptr;
#define TRACE(...) do { if (trace_on) { std::fprintf(stderr, "[trace] " __VA_ARGS__); std::fprintf(stderr, "\n"); } } while (0)

enum class leader_kind { candidate, raw, child };

struct scenario_def {
    std::string name;
    std::string title;  // for tables and plots
    bool delay;         // LockDelay D applies (else 0)
    bool slow;          // a round takes about a TTL: --slow-handovers
    leader_kind leader;
    std::string etcd_title;  // what the scenario is on etcd; empty: not measured there
    bool etcdctl = false;    // measured with the `etcdctl elect` baseline too
    int permits = 0;         // a tenure::semaphore with this limit instead of an election

    bool semaphore() const { return permits > 0; }
    // The term ends with a clean release: the session lives on and campaigns again.
    // (transfer: the session lives on too; the key goes straight to the target.)
    bool releases() const {
        return name == "clean" || name == "handoff" || name == "prio-clean" || name == "transfer" || semaphore();
    }
};

inline std::vector<scenario_def> const all_scenarios = {
    {"clean", "clean release (?release=)", false, false, leader_kind::candidate,
     "resign (delete the key)", true},
    {"handoff", "clean release, default options (handoff to the longest waiter)", false, false,
     leader_kind::candidate, ""},
    {"destroy-0", "session destroyed, LockDelay 0", false, false, leader_kind::candidate, "lease revoked"},
    {"destroy", "session destroyed, LockDelay D", true, false, leader_kind::candidate, ""},
    {"check-fail", "bound health check set critical", true, false, leader_kind::candidate, ""},
    {"probe", "health probe turns false (seen at the next renewal)", true, true, leader_kind::candidate, ""},
    {"ttl", "TTL lapse (session no longer renewed)", true, true, leader_kind::raw,
     "lease expiry (no more keepalives)"},
    {"kill", "leader process SIGKILLed", true, true, leader_kind::child, "leader process SIGKILLed", true},
    {"transfer", "transfer_to() a waiting candidate (one txn)", false, false, leader_kind::candidate, ""},
    {"prio-clean", "clean release, mixed priorities (handoff to the best)", false, false, leader_kind::candidate, ""},
    {"sem-clean", "semaphore: a holder releases its permit", false, false, leader_kind::candidate,
     "semaphore: a holder releases its permit", false, 2},
};

inline scenario_def const& find_scenario(std::string const& name) {
    for (auto const& s : all_scenarios)
        if (s.name == name) return s;
    throw std::runtime_error("unknown scenario " + name);
}

struct config {
    std::string mode = "quick";
    std::vector<std::string> scenarios;
    std::vector<std::string> backends{"http", "inproc", "etcd", "etcdctl"};
    std::vector<int> candidates{3, 10, 100};
    int handovers = 20;
    int slow_handovers = 4;
    std::chrono::milliseconds ttl{300};
    std::chrono::milliseconds lock_delay{50};
    std::optional<double> hold_ms;
    std::string csv, plot_dir;
    std::string from_csv;  // print and plot a previous run's CSV instead of measuring
    // etcd: fsync its WAL (etcd's default) unless --etcd-unsafe-no-fsync.
    bool etcd_fsync = true;
    // etcdctl kill: each handover waits for a 60 s lease (0: skipped).
    int etcdctl_kill_handovers = 0;
    // http: after each row of a scenario with a raw floor, the same handovers
    // written with Beast directly against the same agent (failover_floor.cpp).
    bool raw_floor = true;
};

// Long TTL for sessions whose TTL plays no part in the scenario.
constexpr std::chrono::seconds quiet_ttl{10};

struct sample {
    double latency = nan_v;       // end of leadership -> acquire() resolved
    double detection = nan_v;     // end -> invalidation (key free)
    double lock_delay = 0;        // configured
    double acquisition = nan_v;   // invalidation + lock-delay -> acquire() resolved
    double renew_to_inval = nan_v;  // ttl: last renewal sent -> invalidation
    double from_renewal = nan_v;    // ttl: last renewal sent -> acquire() resolved
    int rejected = -1;              // inproc: acquires refused by the lock-delay during the handover
    double query_detection = nan_v;  // http: end -> the blocking query on /v1/session/info (clean: the key) saw it
    double release_answered = nan_v;  // semaphore: release sent -> permit.release() returned
};

struct result_set {
    std::string backend, scenario;
    int candidates = 0;
    double lock_delay_ms = 0, ttl_ms = 0;
    std::vector<sample> samples;
    std::string load;  // load average after the run
};

// A run's result set before its first sample.
inline result_set new_result_set(std::string backend, std::string scenario, int k, double lock_delay_ms,
                                 double ttl_ms) {
    result_set r;
    r.backend = std::move(backend);
    r.scenario = std::move(scenario);
    r.candidates = k;
    r.lock_delay_ms = lock_delay_ms;
    r.ttl_ms = ttl_ms;
    return r;
}

template <class F>
std::vector<double> column(std::vector<sample> const& v, F f) {
    std::vector<double> out;
    for (auto const& s : v)
        if (double x = f(s); !std::isnan(x)) out.push_back(x);
    return out;
}

// Waits on `timer` (cancelled by whoever changes the condition) until cond()
// holds or the deadline passes. (A template: a lambda converted to
// std::function inside a co_await expression would trip g++ 12.)
template <class F>
asio::awaitable<bool> wait_until(asio::steady_timer& timer, F cond, steady::time_point deadline) {
    while (!cond()) {
        if (steady::now() >= deadline) co_return false;
        timer.expires_at(deadline);
        co_await timer.async_wait(tuple_awaitable);
    }
    co_return true;
}

// The kill scenario's child, on either backend (Consul or etcd client): a
// session and election.acquire(); prints "READY <session>" once the session
// exists and "ELECTED <session> <token>" once it leads, then keeps the
// session alive until it is killed. `what` names the mode in errors.
template <class Client>
int run_candidate(asio::io_context& io, Client& cl, std::string key, std::chrono::nanoseconds ttl,
                  std::chrono::nanoseconds delay, char const* what) {
    int rc = 0;
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
            tenure::session_options so;
            so.name = "bench-child-" + std::to_string(::getpid());
            so.ttl = ttl;
            so.lock_delay = delay;
            tenure::session s = co_await tenure::session::create(cl, so);
            std::printf("READY %s\n", s.id().c_str());
            std::fflush(stdout);
            tenure::election e(s, key, so.name);
            tenure::leadership_scope scope = co_await e.acquire();
            std::printf("ELECTED %s %llu\n", s.id().c_str(), static_cast<unsigned long long>(scope.token()));
            std::fflush(stdout);
            co_await scope.wait_lost(tuple_awaitable);  // until SIGKILL
        },
        [&](std::exception_ptr e) {
            if (e) {
                std::fprintf(stderr, "%s: %s\n", what, message_of(e).c_str());
                rc = 1;
            }
            cl.close();
        });
    io.run();
    return rc;
}

// ---- the raw-API floor (failover_floor.cpp) ----

// Whether the scenario has a raw floor: clean, destroy-0, destroy.
bool has_raw_floor(scenario_def const& sc);
// The scenario's handovers (cfg.handovers) by K raw participants against the
// agent at `url` (backend "raw" in the result set).
asio::awaitable<result_set> run_raw_floor(config const& cfg, scenario_def const& sc, std::string const& url, int k);
// The table of tenure's http rows against the raw rows that follow them.
void print_floor_ratios(std::vector<result_set> const& rows);

// ---- etcd (failover_etcd.cpp) ----

// The lease TTL the etcd rows use for --ttl-ms T: whole seconds, at least 1.
std::chrono::seconds etcd_ttl(std::chrono::milliseconds t);

// One run on etcd: tenure candidates (backend "etcd") or `etcdctl elect`
// processes (backend "etcdctl").
asio::awaitable<result_set> run_etcd(config const& cfg, scenario_def const& sc, etcd_server& server, int k,
                                     std::string const& self_exe);
asio::awaitable<result_set> run_etcdctl(config const& cfg, scenario_def const& sc, etcd_server& server, int k);

// Child mode on etcd: a tenure session (lease) and election.acquire().
int run_etcd_child(std::string endpoint, std::string name, std::chrono::milliseconds ttl);

}  // namespace failover_bench
