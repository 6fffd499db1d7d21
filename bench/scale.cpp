// scale: N elections in one process, on one thread, against `tenure agent`
// over loopback HTTP, with one session per candidate and one shared watch per
// prefix (election_options::shared_watch).
//
// Two candidates per election, A and B, each one session (TTL 10 s, LockDelay
// 0) on one tenure::consul::client capped at --max-connections (16):
//   1. A campaigns for all N keys "scale/e<i>"        -> time until all led
//   2. B campaigns for the same N keys; its N followers wait on the hub
//   3. mass release: every A scope released at once   -> time until B leads all
// and reports: RSS of the bench process per election (A's scopes + B's
// followers), connections (the client's high-water mark and the agent's
// ESTABLISHED sockets) and CPU of the bench and of the agent per phase.
// Renewals cost one request per session per TTL/2, whatever N.
//
//   ./build/bench/scale                 # N = 1000 and 10000
//   ./build/bench/scale --n 10000 --max-connections 16
// A phase that does not finish within --phase-timeout-s (120) fails the run,
// with how far it got and the sessions' states.
#include <tenure/consul/client.hpp>
#include <tenure/election.hpp>

#include "consul/watch_hub.hpp"  // to see when every follower is parked
#include "alloc_count.hpp"  // this executable's operator new counts (the one TU that includes it)
#include "common.hpp"       // child processes, CPU time

#include <boost/asio.hpp>
#include <boost/process/v2.hpp>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <csignal>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#ifndef TENURE_BINARY
#define TENURE_BINARY "tenure"
#endif

namespace {

namespace asio = boost::asio;
namespace bp = boost::process::v2;
using steady = std::chrono::steady_clock;
using namespace std::chrono_literals;

double ms(steady::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

using bench::alloc_counts;
using bench::cpu_seconds;
using bench::self_cpu_seconds;
using bench::self_usage;
using bench::die_with_parent;  // the agent child dies with the bench

long rss_kib(pid_t pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(f, line))
        if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
    return -1;
}

// ESTABLISHED TCP connections whose local port is `port` (the agent's side).
int established_on(unsigned port) {
    int n = 0;
    for (char const* file : {"/proc/net/tcp", "/proc/net/tcp6"}) {
        std::ifstream f(file);
        std::string line;
        std::getline(f, line);
        while (std::getline(f, line)) {
            std::istringstream in(line);
            std::string sl, local, remote, st;
            in >> sl >> local >> remote >> st;
            auto colon = local.rfind(':');
            if (colon == std::string::npos) continue;
            if (std::stoul(local.substr(colon + 1), nullptr, 16) == port && st == "01") ++n;
        }
    }
    return n;
}

struct phase {
    double wall_ms = 0, bench_cpu_s = 0, agent_cpu_s = 0;
    double rusage_cpu_s = 0;  // the bench's, from getrusage (microseconds, not clock ticks)
    long minor_faults = 0;    // the bench's page faults that touched new memory (getrusage ru_minflt)
    alloc_counts allocs;      // the bench's operator new calls and bytes in the phase
};

struct result {
    int n = 0;
    phase lead, follow, relead;
    long rss_before_kib = 0, rss_after_kib = 0, agent_rss_kib = 0;
    std::size_t max_client_connections = 0;
    int max_agent_connections = 0;
};

// What one page fault costs this machine: CPU microseconds to touch fresh
// anonymous pages, one write each. Under some hypervisors a fault costs tens of
// times what it does on bare metal, and the phases' CPU per election then
// depends on how much memory they touch first as much as on the code's work.
double fault_cost_us() {
    std::size_t const pages = 16384;
    long const page = ::sysconf(_SC_PAGE_SIZE);
    std::size_t const size = pages * static_cast<std::size_t>(page);
    void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return 0;
    double const c0 = self_cpu_seconds();
    auto* bytes = static_cast<volatile char*>(p);
    for (std::size_t i = 0; i < size; i += static_cast<std::size_t>(page)) bytes[i] = 1;
    double const c1 = self_cpu_seconds();
    ::munmap(p, size);
    return 1e6 * (c1 - c0) / pages;
}

asio::awaitable<void> yield_ms(int n) {
    asio::steady_timer t(co_await asio::this_coro::executor, std::chrono::milliseconds{n});
    co_await t.async_wait(asio::use_awaitable);
}

// The connections' high-water marks, sampled while the phases run: the
// client's count every 2 ms (cheap) and the agent's every second and at the
// end (reading /proc/net/tcp walks the kernel's whole socket table: every
// 5 ms it took 40% of the bench's CPU in a profile, every 100 ms still 7%,
// all of it counted as the client's cost per election).
struct connection_sampler {
    tenure::consul::client& client;
    unsigned port;  // the agent's
    result& out;
    bool sampling = true;

    void sample_client() {
        out.max_client_connections = std::max(out.max_client_connections, client.open_connections());
    }
    void sample_agent() { out.max_agent_connections = std::max(out.max_agent_connections, established_on(port)); }

    asio::awaitable<void> loop() {
        for (int i = 0; sampling; ++i) {
            sample_client();
            if (i % 500 == 0) sample_agent();
            co_await yield_ms(2);
        }
    }
};

// Wall and CPU time of one phase (the bench's and the agent's), from its construction.
struct phase_clock {
    pid_t self, agent;
    steady::time_point t0 = steady::now();
    double c0 = cpu_seconds(self), g0 = cpu_seconds(agent);
    self_usage u0 = self_usage::now();
    alloc_counts a0 = alloc_counts::now();

    void stop(phase& p) const {
        p.allocs = alloc_counts::now() - a0;
        auto const u = self_usage::now();
        p.minor_faults = u.minor_faults - u0.minor_faults;
        p.rusage_cpu_s = u.cpu_s - u0.cpu_s;
        p.wall_ms = ms(steady::now() - t0);
        p.bench_cpu_s = cpu_seconds(self) - c0;
        p.agent_cpu_s = cpu_seconds(agent) - g0;
    }
};

// Waits (polling every ms) until `done()`, at most `limit`. Past it the phase
// failed: a lost session (a renewal starved under a profiler, say) leaves its
// candidates waiting for good, and the bench says so instead of hanging. It
// exits at once: thousands of detached campaigns still refer to the sides,
// which unwinding would destroy under them (the agent child dies with us).
template <class Done, class State>
asio::awaitable<void> await_phase(char const* what, Done done, State state, steady::duration limit) {
    auto const deadline = steady::now() + limit;
    while (!done()) {
        if (steady::now() >= deadline) {
            std::fprintf(stderr, "scale: %s did not finish within %lld s: %s\n", what,
                         static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(limit).count()),
                         state().c_str());
            std::fflush(nullptr);
            std::_Exit(1);
        }
        co_await yield_ms(1);
    }
}

char const* state_name(tenure::session_state s) {
    switch (s) {
        case tenure::session_state::healthy: return "healthy";
        case tenure::session_state::jeopardy: return "jeopardy";
        case tenure::session_state::lost: return "lost";
    }
    return "?";
}

// One side of all N elections: a candidate per key, all on one session.
struct side {
    explicit side(int n) : scopes(static_cast<std::size_t>(n)) {}
    std::vector<std::unique_ptr<tenure::election>> elections;
    std::vector<tenure::leadership_scope> scopes;
    int led = 0;  // acquire()s resolved

    // Campaigns for every key at once: each acquire() in its own coroutine.
    void campaign(asio::any_io_executor ex, tenure::session& s, std::vector<std::string> const& keys,
                  char const* value, tenure::election_options const& eo) {
        for (std::size_t i = 0; i < keys.size(); ++i) {
            elections.push_back(std::make_unique<tenure::election>(s, keys[i], value, eo));
            asio::co_spawn(
                ex,
                [this, i]() -> asio::awaitable<void> {
                    scopes[i] = co_await elections[i]->acquire();
                    ++led;
                },
                asio::detached);
        }
    }
};

asio::awaitable<void> run_one(std::string url, unsigned port, pid_t agent_pid, int n, std::size_t max_conn,
                              steady::duration phase_limit, result& out) {
    auto ex = co_await asio::this_coro::executor;
    tenure::consul::client_config cc;
    cc.address = url;
    cc.max_connections = max_conn;
    cc.request_timeout = 60s;
    tenure::consul::client client(ex, cc);
    out.n = n;
    pid_t const self = ::getpid();
    connection_sampler conns{client, port, out};
    asio::co_spawn(ex, conns.loop(), asio::detached);

    tenure::session_options so;
    so.ttl = 10s;
    so.lock_delay = 0ms;
    so.name = "scale-a";
    auto sa = co_await tenure::session::create(client, so);
    so.name = "scale-b";
    auto sb = co_await tenure::session::create(client, so);

    tenure::election_options eo;
    eo.shared_watch = "scale/n" + std::to_string(n) + "/";
    std::vector<std::string> keys;
    for (int i = 0; i < n; ++i) keys.push_back(eo.shared_watch + "e" + std::to_string(i));

    out.rss_before_kib = rss_kib(self);
    side a(n), b(n);
    auto const sessions = [&] {
        return std::string("session A ") + state_name(sa.state()) + ", B " + state_name(sb.state());
    };

    // 1. A campaigns for every key at once.
    {
        phase_clock clock{self, agent_pid};
        a.campaign(ex, sa, keys, "a", eo);
        co_await await_phase(
            "A's campaign", [&] { return a.led == n; },
            [&] { return std::to_string(a.led) + " of " + std::to_string(n) + " led; " + sessions(); }, phase_limit);
        clock.stop(out.lead);
    }
    // The prefix's hub, which A's monitors share and B's followers will.
    auto const hub = tenure::detail::kv_watch_hub::get(client, eo.shared_watch);
    std::fprintf(stderr, "  n=%d: A leads all in %.1f ms (%llu snapshots of the prefix)\n", n, out.lead.wall_ms,
                 static_cast<unsigned long long>(hub->snapshots()));

    // 2. B's followers park on the hub.
    {
        auto const snapshots_before = hub->snapshots();
        phase_clock clock{self, agent_pid};
        b.campaign(ex, sb, keys, "b", eo);
        // Parked: A's N monitors and B's N followers all wait on the hub,
        // and every follower's registry entry is in the hub's snapshot. (The
        // waiters alone are not enough: a follower's first read waits on the
        // hub too, before it has registered.) An entry stays once in, so each
        // poll resumes at the first key not yet seen: the check is the bench's
        // CPU, counted in the phase, and must stay small beside the followers'.
        std::size_t seen = 0;
        std::string entry;
        auto const registered = [&] {
            for (; seen < keys.size(); ++seen) {
                entry.assign(keys[seen]).append(".candidates/").append(sb.id());
                auto s = hub->current(entry);
                if (!s || !s->pair) return false;
            }
            return true;
        };
        co_await await_phase(
            "B's followers parking",
            [&] { return hub->waiters() >= static_cast<std::size_t>(2 * n) && registered(); },
            [&] { return std::to_string(hub->waiters()) + " hub waiters of " + std::to_string(2 * n) + "; " + sessions(); },
            phase_limit);
        clock.stop(out.follow);
        out.rss_after_kib = rss_kib(self);
        out.agent_rss_kib = rss_kib(agent_pid);
        std::fprintf(stderr, "  n=%d: B's followers parked in %.1f ms (%llu snapshots), bench RSS %ld -> %ld KiB\n", n,
                     out.follow.wall_ms, static_cast<unsigned long long>(hub->snapshots() - snapshots_before),
                     out.rss_before_kib, out.rss_after_kib);
        if (b.led != 0) std::fprintf(stderr, "  warning: %d B candidates led before the release\n", b.led);
    }

    // 3. Mass release: every A scope at once; B re-leads all.
    {
        auto const snapshots_before = hub->snapshots();
        phase_clock clock{self, agent_pid};
        for (int i = 0; i < n; ++i)
            asio::co_spawn(ex, a.scopes[i].release(asio::use_awaitable), asio::detached);
        co_await await_phase(
            "B's re-lead", [&] { return b.led == n; },
            [&] { return std::to_string(b.led) + " of " + std::to_string(n) + " re-led; " + sessions(); }, phase_limit);
        clock.stop(out.relead);
        std::fprintf(stderr, "  n=%d: B re-leads all %.1f ms after the mass release (%llu snapshots of the prefix)\n", n,
                     out.relead.wall_ms, static_cast<unsigned long long>(hub->snapshots() - snapshots_before));
    }
    int held = 0;
    for (auto& s : b.scopes) held += s.held() ? 1 : 0;
    if (held != n) std::fprintf(stderr, "  warning: %d of %d B scopes held at the end\n", held, n);

    conns.sampling = false;
    conns.sample_client();
    conns.sample_agent();
    a.scopes.clear();
    b.scopes.clear();
    co_await sa.close();
    co_await sb.close();
    a.elections.clear();
    b.elections.clear();
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<int> ns{1000, 10000};
    std::size_t max_conn = 16;
    auto phase_limit = std::chrono::seconds{120};
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--n" && i + 1 < argc) ns = {std::stoi(argv[++i])};
        else if (a == "--max-connections" && i + 1 < argc) max_conn = std::stoul(argv[++i]);
        else if (a == "--phase-timeout-s" && i + 1 < argc) phase_limit = std::chrono::seconds{std::stoi(argv[++i])};
        else {
            std::fprintf(stderr, "usage: scale [--n N] [--max-connections C] [--phase-timeout-s S (120)]\n");
            return a == "--help" || a == "-h" ? 0 : 2;
        }
    }

    asio::io_context io;
    asio::readable_pipe out(io);
    std::vector<std::string> args{"agent", "-http-addr", "127.0.0.1:0", "-log-level", "warn"};
    bp::process agent(io, TENURE_BINARY, args, bp::process_stdio{{}, out, {}}, die_with_parent{});
    std::string line;
    asio::read_until(out, asio::dynamic_buffer(line), '\n');
    std::string url = line.substr(line.rfind(' ') + 1);
    url.erase(url.find_last_not_of("\r\n") + 1);
    unsigned port = static_cast<unsigned>(std::stoul(url.substr(url.rfind(':') + 1)));

    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    std::printf("scale: elections on one thread, one client (max_connections %zu), shared watch per prefix\n",
                max_conn);
    std::printf("machine: %s; load average at start: %s; agent %s (pid %d)\n", bench::machine().c_str(),
                bench::loadavg().c_str(), url.c_str(), static_cast<int>(agent.id()));

    std::vector<result> results;
    for (int n : ns) {
        result r;
        std::exception_ptr error;
        asio::co_spawn(io, run_one(url, port, static_cast<pid_t>(agent.id()), n, max_conn, phase_limit, r),
                       [&](std::exception_ptr e) { error = e; });
        io.restart();
        io.run_for(10min);
        if (error) {
            try {
                std::rethrow_exception(error);
            } catch (std::exception const& e) {
                std::fprintf(stderr, "scale: n=%d failed: %s\n", n, e.what());
                return 1;
            }
        }
        results.push_back(r);
    }
    ::kill(static_cast<pid_t>(agent.id()), SIGTERM);
    boost::system::error_code ec;
    agent.wait(ec);

    std::printf("\n%8s | %12s %9s %9s | %12s | %12s %9s %9s | %10s %11s | %8s %8s\n", "N", "all led ms",
                "cpu s", "agent s", "followers ms", "re-led ms", "cpu s", "agent s", "RSS/elec", "agent RSS",
                "conn max", "agent");
    for (auto const& r : results) {
        double per = r.n ? double(r.rss_after_kib - r.rss_before_kib) * 1024.0 / r.n : 0;
        std::printf("%8d | %12.1f %9.2f %9.2f | %12.1f | %12.1f %9.2f %9.2f | %8.0f B %8ld KiB | %8zu %8d\n", r.n,
                    r.lead.wall_ms, r.lead.bench_cpu_s, r.lead.agent_cpu_s, r.follow.wall_ms, r.relead.wall_ms,
                    r.relead.bench_cpu_s, r.relead.agent_cpu_s, per, r.agent_rss_kib, r.max_client_connections,
                    r.max_agent_connections);
    }
    // Per election: the bench's CPU (getrusage) and operator new calls and bytes, per phase.
    std::printf("load average at the end: %s\n", bench::loadavg().c_str());
    std::printf("\nper election (the bench process): CPU us (getrusage user + sys), operator new calls, bytes, minor page faults\n");
    std::printf("%8s | %9s %8s %8s %6s | %9s %8s %8s %6s | %9s %8s %8s %6s\n", "N", "lead us", "new", "bytes", "flt",
                "follow us", "new", "bytes", "flt", "re-lead us", "new", "bytes", "flt");
    for (auto const& r : results) {
        double const n = r.n ? double(r.n) : 1;
        auto per = [n](phase const& p) {
            return std::array<double, 4>{1e6 * p.rusage_cpu_s / n, double(p.allocs.count) / n,
                                         double(p.allocs.bytes) / n, double(p.minor_faults) / n};
        };
        auto const l = per(r.lead), f = per(r.follow), x = per(r.relead);
        std::printf("%8d | %9.1f %8.1f %8.0f %6.2f | %9.1f %8.1f %8.0f %6.2f | %9.1f %8.1f %8.0f %6.2f\n", r.n, l[0],
                    l[1], l[2], l[3], f[0], f[1], f[2], f[3], x[0], x[1], x[2], x[3]);
    }
    double const fault_us = fault_cost_us();
    std::printf("one minor page fault costs this machine %.2f us of CPU (fresh anonymous pages, one write each);\n"
                "flt x that is the part of a phase's CPU per election spent touching memory for the first time.\n",
                fault_us);
    std::printf("\nRSS/elec: growth of the bench's RSS from before A campaigns to B's followers parked, divided by N\n"
                "(one leader scope + one parked follower per election, plus the hub's snapshot of the prefix).\n");
    return 0;
}
