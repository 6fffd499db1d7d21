// throughput: acquire+release cycles per second on one key, by one candidate
// and by K candidates contending, over loopback HTTP (the `tenure agent`
// binary as a child) and in-process (tenure::agent on the bench's io_context).
//
//   throughput [--quick | --full] [--backend http,http-retake,unix,unix-retake,inproc,inproc-retake]
//              [--candidates 1,2,10,100] [--seconds S] [--cpus LIST] [--csv FILE] [--plot DIR]
//              [--tag NAME] [--busy-poll DURATION]
//
// --cpus 0 runs the bench and the agent child on one core (sched_setaffinity,
// inherited by the child). On a VM that takes the cross-vCPU wake-up out of
// every round trip, so the figures show what the code costs rather than what
// the hypervisor charges to wake an idle vCPU. The header prints how idle
// vCPUs wait (guest halt polling, see halt_poll_text); --tag names the plot
// of a run made under other settings (throughput-TAG.png).
//
// --busy-poll 50us runs the agent child with -busy-poll=50us and the bench's
// own io_context with tenure::run_with_busy_poll (50 us): both keep polling
// that long after their last event before sleeping, so a round trip between
// vCPUs that halt when idle no longer pays for waking them (the plot is
// throughput-busy-poll.png). The cpu% columns show what that costs: CPU time
// of the bench and of the agent child per second of the run (100 = one core;
// inproc has no child).
//
// Each candidate has its own client and session (LockDelay 0, TTL 10 s) and
// loops: election.acquire(), then scope.release(). "unix" is the agent child
// over HTTP on a Unix domain socket (unix:///tmp/...) instead of loopback
// TCP. The "-retake" backends set
// election_options::quick_retake (no read before retaking a key the
// candidate itself released). A cycle is timed from the
// acquire() call to the release's answer; with K > 1 it includes the wait for
// the others' terms. Prints cycles/s, the per-cycle latency percentiles, the
// acquire() part alone, and how evenly the cycles were shared (min/max per
// candidate). --quick: 2 s per configuration (the default); --full: 10 s.
#include "alloc_count.hpp"  // this executable's operator new counts (the one TU that includes it)
#include "common.hpp"
#include "raw_http.hpp"

#include <tenure/busy_poll.hpp>
#include "net/duration.hpp"
#include <tenure/election.hpp>

#include <boost/asio/local/stream_protocol.hpp>

#include <array>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <thread>
#include <type_traits>

#include <sched.h>

namespace {

using namespace bench;
namespace consul = tenure::consul;

struct config {
    std::string mode = "quick";
    std::vector<std::string> backends{"http", "inproc"};
    std::vector<int> candidates{1, 2, 10, 100};
    double seconds = 2;
    std::string cpus;  // empty: as the kernel schedules
    std::string csv, plot_dir;
    std::string tag;  // names the plot of a run under other settings
    std::string busy_poll;  // Go duration; empty: both processes sleep when idle
    std::chrono::nanoseconds busy_poll_ns{0};
};

struct result {
    std::string backend;
    int candidates = 0;
    double elapsed_s = 0;
    std::vector<double> cycle_ms, acquire_ms;
    std::vector<int> per_candidate;
    int switches = 0;  // cycles whose holder differs from the previous cycle's
    int last_holder = -1;
    double bench_cpu_pct = 0, agent_cpu_pct = -1;  // -1: no agent child
    // Per measured cycle, this process only (inproc: the agent's work too):
    // CPU (getrusage user + sys) and operator new calls and bytes.
    double cpu_us_per_cycle = 0, allocs_per_cycle = 0, bytes_per_cycle = 0;
    std::string failure;  // a candidate that stopped on an error (its cycles end there)
    std::string load;
};

struct worker {
    int id = 0;
    std::unique_ptr<consul::client> cl;
    tenure::session s;
    std::optional<tenure::election> e;
    asio::cancellation_signal stop;
    int cycles = 0;
};

asio::awaitable<void> cycle_loop(worker& w, result& r, bool const& measuring, bool const& stopping) {
    try {
        while (!stopping) {
            auto const t0 = steady::now();
            auto [ec, scope] = co_await w.e->acquire(tuple_awaitable);
            if (ec) break;  // cancelled at the end (or a failure, reported below)
            auto const t1 = steady::now();
            co_await scope.release();
            auto const t2 = steady::now();
            if (measuring && !stopping) {
                r.cycle_ms.push_back(ms(t2 - t0));
                r.acquire_ms.push_back(ms(t1 - t0));
                ++w.cycles;
                if (r.last_holder >= 0 && r.last_holder != w.id) ++r.switches;
                r.last_holder = w.id;
            }
        }
    } catch (boost::system::system_error const& e) {
        if (e.code() != asio::error::operation_aborted) throw;
    }
}

asio::awaitable<result> measure(backend& be, std::string name, int k, double seconds) {
    auto ex = co_await asio::this_coro::executor;
    result r;
    r.backend = name;
    tenure::election_options eo;
    eo.quick_retake = name.ends_with("-retake");
    r.candidates = k;
    std::string key = "bench/throughput/" + std::to_string(k) + "/" +
                      std::to_string(steady::now().time_since_epoch().count());
    std::vector<std::unique_ptr<worker>> ws;
    for (int i = 0; i < k; ++i) {
        auto w = std::make_unique<worker>();
        w->id = i;
        w->cl = be.make_client();
        tenure::session_options so;
        so.name = "throughput-" + std::to_string(i);
        so.ttl = 10s;
        so.lock_delay = 0s;
        w->s = co_await tenure::session::create(*w->cl, so);
        w->e.emplace(w->s, key, so.name, eo);
        ws.push_back(std::move(w));
    }
    bool measuring = false, stopping = false;
    int finished = 0;
    std::string failure;
    asio::steady_timer done(ex, steady::time_point::max());
    for (auto& w : ws)
        asio::co_spawn(ex, cycle_loop(*w, r, measuring, stopping),
                       asio::bind_cancellation_slot(w->stop.slot(), [&](std::exception_ptr e) {
                           ++finished;
                           if (e) failure = message_of(e);
                           done.cancel();
                       }));
    co_await sleep_for(std::chrono::milliseconds(200));  // warm-up: connections, first wake-ups
    measuring = true;
    auto const start = steady::now();
    pid_t const self = ::getpid(), agent = be.agent_pid();
    double const bench_cpu0 = cpu_seconds(self), agent_cpu0 = agent != self ? cpu_seconds(agent) : 0;
    double const rusage0 = self_cpu_seconds();
    auto const allocs0 = alloc_counts::now();
    auto const total = std::chrono::duration_cast<steady::duration>(std::chrono::duration<double>(seconds));
    while (steady::now() - start < total) {
        co_await sleep_for(std::min<steady::duration>(total - (steady::now() - start), 500ms));
        std::fprintf(stderr, "\r  %-13s K=%-3d %5.1f s  %zu cycles", name.c_str(), k,
                     std::chrono::duration<double>(steady::now() - start).count(), r.cycle_ms.size());
    }
    stopping = true;
    auto const allocs = alloc_counts::now() - allocs0;
    double const cpu_s = self_cpu_seconds() - rusage0;
    r.elapsed_s = std::chrono::duration<double>(steady::now() - start).count();
    if (auto const n = static_cast<double>(r.cycle_ms.size()); n > 0) {
        r.cpu_us_per_cycle = 1e6 * cpu_s / n;
        r.allocs_per_cycle = static_cast<double>(allocs.count) / n;
        r.bytes_per_cycle = static_cast<double>(allocs.bytes) / n;
    }
    r.bench_cpu_pct = 100 * (cpu_seconds(self) - bench_cpu0) / r.elapsed_s;
    if (agent != self) r.agent_cpu_pct = 100 * (cpu_seconds(agent) - agent_cpu0) / r.elapsed_s;
    std::fprintf(stderr, "\n");
    for (auto& w : ws) w->stop.emit(asio::cancellation_type::terminal);
    while (finished < k) {
        done.expires_after(5s);
        co_await done.async_wait(tuple_awaitable);
    }
    r.failure = failure;
    for (auto& w : ws) {
        r.per_candidate.push_back(w->cycles);
        co_await w->s.close(tuple_awaitable);
    }
    for (auto& w : ws) w->cl->close();
    r.load = loadavg();
    co_return r;
}

// The floor under every HTTP row: one raw HTTP/1.1 round trip to the same
// agent over a blocking socket (no tenure code on the client side: Beast
// directly, raw_http.hpp), a GET of a missing key. A cycle needs at least two
// round trips (the lock, the release), so one candidate can do at most
// 1 / (2 x p50) cycles per second.
template <class Socket>
void print_floor(Socket sock, char const* over) {
    raw::connection<Socket> conn(std::move(sock));
    std::string const req = raw::request("GET", "/v1/kv/bench/floor");
    std::vector<double> rtt;
    for (int i = 0; i < 20000; ++i) {
        auto const t0 = steady::now();
        conn.round_trip(req);
        if (i >= 1000) rtt.push_back(ms(steady::now() - t0) * 1000.0);
    }
    double const p50 = pct(rtt, 50);
    std::printf("floor: one raw HTTP round trip to the agent over %s (blocking socket, no tenure code): p50 %.1f us, "
                "p99 %.1f us\n       -> at most %.0f cycles/s for one candidate (2 round trips per cycle)\n",
                over, p50, pct(rtt, 99), 1e6 / (2 * p50));
}

// Below that: the kernel's part alone. Two threads of the bench ping-pong
// 200 bytes over a blocking socket pair (no HTTP, no agent): what a round
// trip costs in wake-ups and the socket layer, over TCP and a Unix socket.
template <class Protocol>
double socket_ping_pong_p50(typename Protocol::endpoint const& listen_at) {
    asio::io_context io;
    typename Protocol::acceptor acceptor(io, listen_at);
    typename Protocol::socket client(io), server(io);
    std::thread echo([&] {
        acceptor.accept(server);
        std::array<char, 256> b{};
        boost::system::error_code ec;
        for (;;) {
            auto const n = server.read_some(asio::buffer(b), ec);
            if (ec) break;
            asio::write(server, asio::buffer(b.data(), n), ec);
            if (ec) break;
        }
    });
    client.connect(acceptor.local_endpoint());
    if constexpr (std::is_same_v<Protocol, asio::ip::tcp>) {
        client.set_option(asio::ip::tcp::no_delay(true));
    }
    std::array<char, 200> msg{};
    std::array<char, 256> in{};
    std::vector<double> rtt;
    for (int i = 0; i < 20000; ++i) {
        auto const t0 = steady::now();
        asio::write(client, asio::buffer(msg));
        for (std::size_t got = 0; got < msg.size();) got += client.read_some(asio::buffer(in));
        if (i >= 1000) rtt.push_back(ms(steady::now() - t0) * 1000.0);
    }
    client.close();
    echo.join();
    return pct(rtt, 50);
}

void print_socket_floor() {
    double const tcp = socket_ping_pong_p50<asio::ip::tcp>({asio::ip::make_address("127.0.0.1"), 0});
    std::string const path = "/tmp/tenure-throughput-pingpong-" + std::to_string(::getpid()) + ".sock";
    ::unlink(path.c_str());
    double const local = socket_ping_pong_p50<asio::local::stream_protocol>(asio::local::stream_protocol::endpoint(path));
    ::unlink(path.c_str());
    std::printf("kernel floor: 200-byte ping-pong between two threads, blocking sockets, no HTTP: "
                "loopback TCP p50 %.1f us, Unix socket p50 %.1f us\n",
                tcp, local);
}

void print_floor(std::string const& url) {
    asio::io_context io;
    if (url.starts_with("unix://")) {
        asio::local::stream_protocol::socket sock(io);
        sock.connect(asio::local::stream_protocol::endpoint(url.substr(7)));
        print_floor(std::move(sock), "a Unix socket");
        return;
    }
    asio::ip::tcp::socket sock(io);
    sock.connect({asio::ip::make_address("127.0.0.1"), raw::port_of(url)});
    sock.set_option(asio::ip::tcp::no_delay(true));
    print_floor(std::move(sock), "loopback TCP");
}

void print_header() {
    std::printf("%-13s %4s %8s %10s | %8s %8s %8s %8s | %8s %8s | %7s %7s %7s | %5s %5s | %7s %7s %7s | %s\n",
                "backend", "K", "cycles", "cycles/s", "p50 ms", "p90 ms", "p99 ms", "max ms", "acq p50", "acq p99",
                "min/c", "max/c", "switch%", "cpu%", "agent", "us/cyc", "new/cyc", "B/cyc", "load");
}

void print_row(result const& r) {
    auto n = r.cycle_ms.size();
    double rate = static_cast<double>(n) / r.elapsed_s;
    int mn = r.per_candidate.empty() ? 0 : *std::min_element(r.per_candidate.begin(), r.per_candidate.end());
    int mx = r.per_candidate.empty() ? 0 : *std::max_element(r.per_candidate.begin(), r.per_candidate.end());
    double sw = n > 1 ? 100.0 * r.switches / static_cast<double>(n - 1) : 0.0;
    char agent_cpu[16] = "-";
    if (r.agent_cpu_pct >= 0) std::snprintf(agent_cpu, sizeof agent_cpu, "%.0f", r.agent_cpu_pct);
    std::printf("%-13s %4d %8zu %10.0f | %8.3f %8.3f %8.3f %8.3f | %8.3f %8.3f | %7d %7d %6.1f%% | %5.0f %5s | "
                "%7.1f %7.1f %7.0f | %s\n",
                r.backend.c_str(), r.candidates, n, rate, pct(r.cycle_ms, 50), pct(r.cycle_ms, 90),
                pct(r.cycle_ms, 99), max_of(r.cycle_ms), pct(r.acquire_ms, 50), pct(r.acquire_ms, 99), mn, mx, sw,
                r.bench_cpu_pct, agent_cpu, r.cpu_us_per_cycle, r.allocs_per_cycle, r.bytes_per_cycle,
                r.load.c_str());
    if (!r.failure.empty()) std::printf("  ^ a candidate stopped on an error, so this row is short: %s\n", r.failure.c_str());
    std::fflush(stdout);
}

// How an idle vCPU waits on a KVM guest. With the cpuidle-haltpoll driver it
// polls up to guest_halt_poll_ns before halting (the kernel's default:
// 200 us); a halted vCPU costs an IPI and a VM entry to wake, which is most
// of a round trip between two processes on different vCPUs.
std::string halt_poll_text(bool brief) {
    std::ifstream driver("/sys/devices/system/cpu/cpuidle/current_driver");
    std::string name;
    std::getline(driver, name);
    std::ifstream ns("/sys/module/haltpoll/parameters/guest_halt_poll_ns");
    long poll = -1;
    if (!(ns >> poll) || name != "haltpoll") return brief ? "cpuidle " + name : "cpuidle driver: " + (name.empty() ? std::string("none") : name);
    if (brief) return poll == 0 ? "idle vCPUs halt at once" : "guest halt polling " + std::to_string(poll / 1000) + " us";
    return "cpuidle driver: haltpoll, guest_halt_poll_ns=" + std::to_string(poll) +
           (poll == 0 ? " (idle vCPUs halt at once; the kernel's default is 200000)" : "");
}

void plot(config const& cfg, std::vector<result> const& results) {
    namespace fs = std::filesystem;
    fs::path dir = cfg.plot_dir;
    fs::create_directories(dir / "gnuplot");
    // Pinned runs get their own files: throughput-cpus0.png for --cpus 0;
    // --tag T adds -T (throughput-haltpoll.png).
    std::string name = "throughput";
    if (!cfg.cpus.empty()) {
        name += "-cpus";
        for (char c : cfg.cpus) name += c == ',' ? '_' : c;
    }
    if (cfg.busy_poll_ns.count() > 0) name += "-busy-poll";
    if (!cfg.tag.empty()) name += "-" + cfg.tag;
    fs::path dat = dir / "gnuplot" / (name + ".dat");
    fs::path gp = dir / "gnuplot" / (name + ".gp");
    fs::path png = dir / (name + ".png");
    {
        // One block per backend: K, cycles/s, p50, p99 (ms).
        std::ofstream f(dat);
        for (auto const& b : cfg.backends) {
            f << "# " << b << "\n";
            for (auto const& r : results)
                if (r.backend == b)
                    f << r.candidates << ' ' << static_cast<double>(r.cycle_ms.size()) / r.elapsed_s << ' '
                      << pct(r.cycle_ms, 50) << ' ' << pct(r.cycle_ms, 99) << '\n';
            f << "\n\n";
        }
    }
    std::ofstream g(gp);
    g << "set terminal pngcairo size 1300,520 font 'DejaVu Sans,10'\n";
    g << "set output '" << png.string() << "'\n";
    g << "set multiplot layout 1,2 title \"Lock throughput: acquire()+release() cycles on one key, K candidates "
         "contending (" << cfg.seconds << " s per point"
      << (cfg.cpus.empty() ? std::string() : "; bench and agent pinned to CPU " + cfg.cpus)
      << (cfg.tag.empty() ? std::string() : "; " + cfg.tag) << "; " << halt_poll_text(true)
      << (cfg.busy_poll_ns.count() > 0 ? "; bench and agent busy-poll " + cfg.busy_poll : std::string()) << ")\"\n";
    g << "set grid\nset logscale x\nset xlabel 'candidates K (log scale)'\nset key top right\n";
    g << "set ylabel 'cycles per second (all candidates together, log scale)'\nset logscale y\n";
    g << "set title 'throughput'\n";
    // Issue #5's goal for HTTP on one key.
    g << "set arrow 1 from graph 0, first 20000 to graph 1, first 20000 nohead dt 3 lw 1.5 lc rgb '#444444'\n";
    g << "set label 1 'goal over HTTP: 20,000/s' at graph 0.02, first 22500 tc rgb '#444444'\n";
    auto color = [](std::string const& b) {
        if (b == "http") return std::string("#d95f02");
        if (b == "http-retake") return std::string("#7570b3");
        if (b == "unix") return std::string("#e6ab02");
        if (b == "unix-retake") return std::string("#a6761d");
        if (b == "inproc-retake") return std::string("#e7298a");
        return std::string("#1b9e77");
    };
    std::string plot = "plot ";
    for (std::size_t i = 0; i < cfg.backends.size(); ++i) {
        if (i) plot += ", ";
        plot += "'" + dat.string() + "' index " + std::to_string(i) + " using 1:2 with linespoints lw 2 pt 7 lc rgb '" +
                color(cfg.backends[i]) + "' title '" + cfg.backends[i] + "'";
    }
    g << plot << "\n";
    g << "unset arrow 1\nunset label 1\n";
    g << "set title 'time per cycle (acquire() call -> release answered)'\n";
    g << "set ylabel 'ms per cycle (log scale)'\n";
    plot = "plot ";
    for (std::size_t i = 0; i < cfg.backends.size(); ++i) {
        if (i) plot += ", ";
        plot += "'" + dat.string() + "' index " + std::to_string(i) + " using 1:3 with linespoints lw 2 pt 7 lc rgb '" +
                color(cfg.backends[i]) + "' title '" + cfg.backends[i] + " p50', '" + dat.string() + "' index " +
                std::to_string(i) + " using 1:4 with linespoints lw 1 dt 2 pt 6 lc rgb '" + color(cfg.backends[i]) +
                "' title '" + cfg.backends[i] + " p99'";
    }
    g << plot << "\nunset multiplot\n";
    g.close();
    if (run_gnuplot(gp.string())) std::fprintf(stderr, "plot: %s\n", png.c_str());
    else std::fprintf(stderr, "gnuplot failed for %s\n", gp.c_str());
}

int usage() {
    std::cerr << "usage: throughput [--quick | --full]\n"
                 "                  [--backend http,http-retake,unix,unix-retake,inproc,inproc-retake]\n"
                 "                  [--candidates 1,2,10,100]\n"
                 "                  [--seconds S] [--cpus LIST] [--csv FILE] [--plot DIR] [--tag NAME]\n"
                 "                  [--busy-poll DURATION]\n";
    return 2;
}

// --busy-poll and --backend, checked once the flags are read.
void check_config(config& cfg) {
    if (!cfg.busy_poll.empty()) {
        auto const d = tenure::detail::parse_go_duration(cfg.busy_poll);
        if (!d.value || d.value->count() < 0 || *d.value > 1s)
            throw std::runtime_error("--busy-poll takes a duration from 0 to 1s (e.g. 50us), got " + cfg.busy_poll);
        cfg.busy_poll_ns = *d.value;
    }
    for (auto const& b : cfg.backends)
        if (b != "http" && b != "inproc" && b != "http-retake" && b != "inproc-retake" && b != "unix" &&
            b != "unix-retake")
            throw std::runtime_error("unknown backend " + b);
}

// The flags over the mode's defaults (whatever their order): 0, or the exit
// code after the usage.
int parse_flags(std::vector<std::string> const& args, config& cfg) {
    for (auto const& a : args)
        if (a == "--full") {
            cfg.mode = "full";
            cfg.seconds = 10;
        }
    try {
        for (std::size_t i = 0; i < args.size(); ++i) {
            if (args[i] == "--quick" || args[i] == "--full") continue;
            else if (args[i] == "--backend") cfg.backends = split(flag_value(args, i));
            else if (args[i] == "--candidates") {
                cfg.candidates.clear();
                for (auto const& k : split(flag_value(args, i))) cfg.candidates.push_back(std::stoi(k));
            } else if (args[i] == "--seconds") cfg.seconds = std::stod(flag_value(args, i));
            else if (args[i] == "--cpus") cfg.cpus = flag_value(args, i);
            else if (args[i] == "--csv") cfg.csv = flag_value(args, i);
            else if (args[i] == "--plot") cfg.plot_dir = flag_value(args, i);
            else if (args[i] == "--tag") cfg.tag = flag_value(args, i);
            else if (args[i] == "--busy-poll") cfg.busy_poll = flag_value(args, i);
            else return usage();
        }
        check_config(cfg);
    } catch (std::exception const& e) {
        std::cerr << "throughput: " << e.what() << "\n";
        return usage();
    }
    return 0;
}

// --cpus: pins the bench (and so the agent child it starts) to those CPUs.
// 0, or the exit code.
int pin_cpus(config const& cfg) {
    if (cfg.cpus.empty()) return 0;
    cpu_set_t set;
    CPU_ZERO(&set);
    try {
        for (auto const& c : split(cfg.cpus)) CPU_SET(std::stoi(c), &set);
    } catch (std::exception const&) {
        std::cerr << "throughput: --cpus takes CPU numbers separated by commas, got " << cfg.cpus << "\n";
        return usage();
    }
    if (::sched_setaffinity(0, sizeof set, &set) != 0) {
        std::perror("throughput: sched_setaffinity");
        return 2;
    }
    return 0;
}

// What the run is, where, and how to read its table.
void print_banner(config const& cfg) {
    std::time_t now = std::time(nullptr);
    char date[64];
    std::strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S %Z", std::localtime(&now));
    std::printf("throughput bench (%s): %s; %.1f s per configuration; one key, LockDelay 0\n", cfg.mode.c_str(), date,
                cfg.seconds);
    std::printf("machine: %s; load average at start: %s\n", machine().c_str(), loadavg().c_str());
    std::printf("%s\n", halt_poll_text(false).c_str());
    if (cfg.busy_poll_ns.count() > 0)
        std::printf("busy poll: the bench's io_context and the agent child poll %s after their last event before "
                    "sleeping\n",
                    cfg.busy_poll.c_str());
    std::printf("cpus: %s\n", cfg.cpus.empty() ? "as the kernel schedules (bench and agent free to use every core)"
                                               : ("pinned to " + cfg.cpus + " (bench and agent child)").c_str());
    std::printf("a cycle: acquire() called -> release() answered; acq: the acquire() part; min/c, max/c: cycles "
                "of the least and most served candidate;\nswitch%%: cycles whose holder differs from the previous "
                "cycle's (0%%: one candidate keeps re-taking the key); cpu%%, agent: CPU time of the bench and of the "
                "agent child\nper second of the row (100 = one core busy); us/cyc, new/cyc, B/cyc: per measured cycle, this "
                "process's CPU (getrusage user + sys)\nand its operator new calls and bytes (inproc: the in-process "
                "agent's share included; K > 1: the waiting candidates' too)\n");
    print_header();
}

// Every row: for each backend a fresh agent (child or in-process), each K.
asio::awaitable<void> measure_all(asio::io_context& io, config const& cfg, std::vector<result>& results) {
    std::vector<std::string> agent_flags;
    if (cfg.busy_poll_ns.count() > 0) agent_flags.push_back("-busy-poll=" + cfg.busy_poll);
    std::set<std::string> floors_printed;
    for (auto const& bname : cfg.backends) {
        std::string const socket_path = "/tmp/tenure-throughput-" + std::to_string(::getpid()) + ".sock";
        std::unique_ptr<backend> be =
            bname.starts_with("http")   ? backend::start_http(io, "1s", "warn", "127.0.0.1:0", agent_flags)
            : bname.starts_with("unix") ? backend::start_http(io, "1s", "warn", "unix://" + socket_path, agent_flags)
                                        : backend::start_inproc(io, 1s);
        // One floor per transport, before its first row.
        std::string const transport = bname.substr(0, bname.find('-'));
        if (transport != "inproc" && !floors_printed.contains(transport)) {
            floors_printed.insert(transport);
            print_floor(be->url());
        }
        for (int k : cfg.candidates) {
            result r = co_await measure(*be, bname, k, cfg.seconds);
            print_row(r);
            results.push_back(std::move(r));
        }
        be->stop();
        co_await sleep_for(50ms);
    }
}

// --csv: one line per cycle.
void write_csv(std::string const& path, std::vector<result> const& results) {
    std::ofstream f(path);
    f << "backend,candidates,cycle,cycle_ms,acquire_ms\n";
    for (auto const& r : results)
        for (std::size_t i = 0; i < r.cycle_ms.size(); ++i)
            f << r.backend << ',' << r.candidates << ',' << i << ',' << r.cycle_ms[i] << ',' << r.acquire_ms[i] << '\n';
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> args(argv + 1, argv + argc);
    config cfg;
    if (int rc = parse_flags(args, cfg)) return rc;
    if (int rc = pin_cpus(cfg)) return rc;
    print_banner(cfg);

    if (std::any_of(cfg.backends.begin(), cfg.backends.end(), [](std::string const& b) { return !b.starts_with("inproc"); }))
        print_socket_floor();
    asio::io_context io{1};  // one thread runs it, as in a single-threaded server
    std::vector<result> results;
    int rc = 0;
    asio::co_spawn(io, measure_all(io, cfg, results), [&](std::exception_ptr e) {
        if (e) {
            std::cerr << "throughput failed: " << message_of(e) << "\n";
            rc = 1;
        }
    });
    tenure::run_with_busy_poll(io, cfg.busy_poll_ns);  // io.run() without --busy-poll
    std::printf("load average at the end: %s\n", loadavg().c_str());
    if (!cfg.csv.empty()) write_csv(cfg.csv, results);
    if (!cfg.plot_dir.empty()) plot(cfg, results);
    return rc;
}
