// agent_load: how `tenure agent` holds up under many parked blocking queries.
//
//   agent_load [--n 10000] [--keys 100] [--m 2000] [--agent-addr HOST:PORT [--agent-pid PID]]
//              [--agent-binary PATH] [--launchers 16]
//
// Starts the agent binary as a child (or uses a running one with
// --agent-addr), then, from ONE thread with Asio coroutines:
//   1. opens N keep-alive connections, each parked in a blocking GET
//      /v1/kv/bench/k<i % keys>?index=<current>&wait=10m;
//   2. while they are parked, measures the agent's RSS (/proc/<pid>/status
//      VmRSS), its open connections, and the latency of M plain GETs on
//      another connection (p50/p90/p99/max);
//   3. PUTs every key and measures how long until all N blocking GETs have
//      returned.
// Prints a table. A benchmark, not a test: it asserts nothing about speed.

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include "agent_child.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using steady = std::chrono::steady_clock;
using boost::system::error_code;
using namespace std::chrono_literals;

namespace {

// ---- options ---------------------------------------------------------------

struct options {
    std::size_t n = 10000;
    std::size_t keys = 100;
    std::size_t m = 2000;
    std::size_t launchers = 16;
    std::string agent_addr;  // empty: start the agent
    pid_t agent_pid = -1;
    std::string agent_binary = TENURE_BINARY;
};

[[noreturn]] void usage(char const* why) {
    std::cerr << "agent_load: " << why << "\n"
              << "usage: agent_load [--n N] [--keys K] [--m M] [--launchers L]\n"
                 "                  [--agent-addr HOST:PORT [--agent-pid PID]] [--agent-binary PATH]\n";
    std::exit(2);
}

std::size_t parse_size(std::string_view s, char const* flag) {
    std::size_t v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{} || p != s.data() + s.size()) usage((std::string("bad value for ") + flag).c_str());
    return v;
}

options parse_options(int argc, char** argv) {
    options o;
    for (int i = 1; i < argc; ++i) {
        std::string_view a = argv[i];
        auto value = [&]() -> std::string_view {
            if (i + 1 >= argc) usage((std::string("missing value for ") + std::string(a)).c_str());
            return argv[++i];
        };
        if (a == "--n") o.n = parse_size(value(), "--n");
        else if (a == "--keys") o.keys = parse_size(value(), "--keys");
        else if (a == "--m") o.m = parse_size(value(), "--m");
        else if (a == "--launchers") o.launchers = parse_size(value(), "--launchers");
        else if (a == "--agent-addr") o.agent_addr = value();
        else if (a == "--agent-pid") o.agent_pid = static_cast<pid_t>(parse_size(value(), "--agent-pid"));
        else if (a == "--agent-binary") o.agent_binary = value();
        else if (a == "--help" || a == "-h") usage("help");
        else usage((std::string("unknown argument ") + std::string(a)).c_str());
    }
    if (o.n == 0 || o.keys == 0 || o.launchers == 0) usage("--n, --keys and --launchers must be positive");
    return o;
}

// ---- process helpers -------------------------------------------------------

rlim_t raise_nofile() {
    rlimit rl{};
    if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
    ::getrlimit(RLIMIT_NOFILE, &rl);
    return rl.rlim_cur;
}

// VmRSS of a process in KiB, or 0.
std::size_t rss_kib(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(in, line))
        if (line.rfind("VmRSS:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10);
    return 0;
}

// Open sockets of a process (entries of /proc/<pid>/fd that are sockets).
std::size_t socket_fds(pid_t pid) {
    std::size_t n = 0;
    std::error_code ec;
    for (auto const& e : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
        char target[64];
        ssize_t len = ::readlink(e.path().c_str(), target, sizeof target - 1);
        if (len > 0 && std::string_view(target, static_cast<std::size_t>(len)).rfind("socket:", 0) == 0) ++n;
    }
    return n;
}

// ESTABLISHED TCP connections whose local port is `port` (the server side), from /proc/net/tcp.
std::size_t established_to(unsigned short port) {
    std::ifstream in("/proc/net/tcp");
    std::string line;
    std::getline(in, line);  // header
    std::size_t n = 0;
    char want[8];
    std::snprintf(want, sizeof want, ":%04X", port);
    while (std::getline(in, line)) {
        std::istringstream ss(line);
        std::string sl, local, remote, st;
        ss >> sl >> local >> remote >> st;
        if (st == "01" && local.size() >= 5 && local.compare(local.size() - 5, 5, want) == 0) ++n;
    }
    return n;
}

using bench::agent_child;  // the agent binary as a child; start_agent_child()

void stop_agent(agent_child& c) {
    if (c.pid <= 0) return;
    ::kill(c.pid, SIGTERM);
    int st = 0;
    for (int i = 0; i < 500; ++i) {
        if (::waitpid(c.pid, &st, WNOHANG) == c.pid) {
            c.pid = -1;
            break;
        }
        ::usleep(10000);
    }
    if (c.pid > 0) {
        ::kill(c.pid, SIGKILL);
        ::waitpid(c.pid, &st, 0);
        c.pid = -1;
    }
    ::close(c.stdout_fd);
}

// ---- statistics ------------------------------------------------------------

struct percentiles {
    double p50 = 0, p90 = 0, p99 = 0, max = 0, mean = 0;
};

percentiles summarize(std::vector<double> v) {
    percentiles p;
    if (v.empty()) return p;
    std::sort(v.begin(), v.end());
    auto at = [&](double q) {
        std::size_t i = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
        return v[std::min(i, v.size() - 1)];
    };
    p.p50 = at(0.50);
    p.p90 = at(0.90);
    p.p99 = at(0.99);
    p.max = v.back();
    double sum = 0;
    for (double x : v) sum += x;
    p.mean = sum / static_cast<double>(v.size());
    return p;
}

double ms_since(steady::time_point t0, steady::time_point t) {
    return std::chrono::duration<double, std::milli>(t - t0).count();
}

// ---- the load --------------------------------------------------------------

struct shared_state {
    shared_state(options const& o, tcp::endpoint e) : opts(o), ep(e), host(e.address().to_string() + ":" + std::to_string(e.port())) {}
    options const& opts;
    tcp::endpoint ep;
    std::string host;
    std::vector<std::uint64_t> key_index;     // X-Consul-Index of each key before the wake-up
    std::size_t connected = 0, written = 0, returned = 0, ok = 0, errors = 0, returned_early = 0;
    bool waking = false;
    steady::time_point wake_start{};
    std::vector<double> wake_ms;      // per parked GET: return time after the first PUT was sent
    std::vector<double> own_put_ms;   // per parked GET: return time after the PUT of its own key was sent
    std::vector<std::optional<steady::time_point>> put_sent;  // per key
    std::optional<asio::steady_timer> all_returned;
    std::string first_error;
};

http::request<http::string_body> make_request(http::verb verb, std::string target, std::string const& host,
                                               std::string body = {}) {
    http::request<http::string_body> req{verb, target, 11};
    req.set(http::field::host, host);
    req.set(http::field::user_agent, "tenure-agent-load");
    req.body() = std::move(body);
    if (verb == http::verb::put) req.prepare_payload();
    return req;
}

// One request/response on a kept-alive connection.
asio::awaitable<http::response<http::string_body>> exchange(tcp::socket& s, beast::flat_buffer& buf,
                                                            http::request<http::string_body> const& req) {
    co_await http::async_write(s, req, asio::use_awaitable);
    http::response<http::string_body> res;
    co_await http::async_read(s, buf, res, asio::use_awaitable);
    co_return res;
}

asio::awaitable<void> parked_get(tcp::socket s, std::size_t key, std::string target, shared_state& st) {
    beast::flat_buffer buf;
    auto req = make_request(http::verb::get, std::move(target), st.host);
    auto [wec, wn] = co_await http::async_write(s, req, asio::as_tuple(asio::use_awaitable));
    if (!wec) ++st.written;
    http::response<http::string_body> res;
    error_code rec = wec;
    if (!wec) std::tie(rec, std::ignore) = co_await http::async_read(s, buf, res, asio::as_tuple(asio::use_awaitable));
    auto const now = steady::now();
    ++st.returned;
    if (!st.waking) ++st.returned_early;
    if (rec || res.result_int() != 200) {
        ++st.errors;
        if (st.first_error.empty())
            st.first_error = rec ? rec.message() : "HTTP " + std::to_string(res.result_int()) + " " + res.body();
    } else {
        ++st.ok;
        if (st.waking) st.wake_ms.push_back(ms_since(st.wake_start, now));
        if (st.waking && st.put_sent[key]) st.own_put_ms.push_back(ms_since(*st.put_sent[key], now));
    }
    if (st.returned == st.opts.n && st.all_returned) st.all_returned->cancel();
}

// Opens connections i = first, first + stride, ... and parks a GET on each.
asio::awaitable<void> launcher(std::size_t first, std::size_t stride, shared_state& st) {
    auto ex = co_await asio::this_coro::executor;
    for (std::size_t i = first; i < st.opts.n; i += stride) {
        tcp::socket s(ex);
        auto [ec] = co_await s.async_connect(st.ep, asio::as_tuple(asio::use_awaitable));
        if (ec) {
            ++st.errors;
            ++st.returned;
            if (st.first_error.empty()) st.first_error = "connect: " + ec.message();
            continue;
        }
        s.set_option(tcp::no_delay(true));
        ++st.connected;
        std::size_t k = i % st.opts.keys;
        std::string target =
            "/v1/kv/bench/k" + std::to_string(k) + "?index=" + std::to_string(st.key_index[k]) + "&wait=10m";
        asio::co_spawn(ex, parked_get(std::move(s), k, std::move(target), st), asio::detached);
    }
}

asio::awaitable<void> wait_for(std::chrono::milliseconds d) {
    asio::steady_timer t(co_await asio::this_coro::executor, d);
    co_await t.async_wait(asio::use_awaitable);
}

struct report {
    double connect_ms = 0;
    std::size_t rss_idle_kib = 0, rss_parked_kib = 0, rss_after_kib = 0, self_rss_kib = 0;
    std::size_t agent_sockets = 0, established = 0;
    percentiles get_latency;
    double get_total_ms = 0;
    double put_all_ms = 0, all_returned_ms = 0;
    percentiles wake, own_put;
};

asio::awaitable<void> run(shared_state& st, pid_t agent_pid, report& rep) {
    auto ex = co_await asio::this_coro::executor;
    auto const& o = st.opts;

    // Control connection: seed the keys, read their indexes.
    tcp::socket ctl(ex);
    co_await ctl.async_connect(st.ep, asio::use_awaitable);
    ctl.set_option(tcp::no_delay(true));
    beast::flat_buffer cbuf;
    st.key_index.resize(o.keys);
    st.put_sent.resize(o.keys);
    for (std::size_t k = 0; k < o.keys; ++k) {
        std::string key = "/v1/kv/bench/k" + std::to_string(k);
        auto put = co_await exchange(ctl, cbuf, make_request(http::verb::put, key, st.host, "initial"));
        if (put.result_int() != 200) throw std::runtime_error("seed PUT failed: " + put.body());
        auto get = co_await exchange(ctl, cbuf, make_request(http::verb::get, key, st.host));
        st.key_index[k] = std::stoull(std::string(get["X-Consul-Index"]));
    }
    if (agent_pid > 0) rep.rss_idle_kib = rss_kib(agent_pid);

    // 1. Park N blocking GETs.
    auto const t_connect = steady::now();
    std::size_t done_launchers = 0;
    asio::steady_timer launchers_done(ex, steady::time_point::max());
    for (std::size_t l = 0; l < o.launchers; ++l) {
        asio::co_spawn(ex, launcher(l, o.launchers, st), [&](std::exception_ptr e) {
            if (e && st.first_error.empty()) {
                try {
                    std::rethrow_exception(e);
                } catch (std::exception const& x) {
                    st.first_error = std::string("launcher: ") + x.what();
                }
            }
            if (++done_launchers == o.launchers) launchers_done.cancel();
        });
    }
    co_await launchers_done.async_wait(asio::as_tuple(asio::use_awaitable));
    while (st.written + st.errors < o.n) co_await wait_for(5ms);
    rep.connect_ms = ms_since(t_connect, steady::now());

    // Let the agent read every request (it has accepted them all once its socket count says so).
    if (agent_pid > 0) {
        auto const until = steady::now() + 30s;
        while (socket_fds(agent_pid) < o.n && steady::now() < until) co_await wait_for(50ms);
    }
    co_await wait_for(1000ms);

    // 2. Measure while parked.
    if (agent_pid > 0) {
        rep.rss_parked_kib = rss_kib(agent_pid);
        rep.agent_sockets = socket_fds(agent_pid);
    }
    rep.self_rss_kib = rss_kib(::getpid());
    rep.established = established_to(st.ep.port());

    std::vector<double> lat;
    lat.reserve(o.m);
    auto const t_gets = steady::now();
    for (std::size_t i = 0; i < o.m; ++i) {
        auto const t = steady::now();
        auto res = co_await exchange(
            ctl, cbuf, make_request(http::verb::get, "/v1/kv/bench/k" + std::to_string(i % o.keys), st.host));
        lat.push_back(ms_since(t, steady::now()));
        if (res.result_int() != 200) throw std::runtime_error("plain GET failed: " + std::to_string(res.result_int()));
    }
    rep.get_total_ms = ms_since(t_gets, steady::now());
    rep.get_latency = summarize(lat);

    // 3. Wake everyone: PUT every key, then await the last parked GET.
    st.all_returned.emplace(ex, steady::time_point::max());
    st.waking = true;
    st.wake_start = steady::now();
    for (std::size_t k = 0; k < o.keys; ++k) {
        st.put_sent[k] = steady::now();
        auto res = co_await exchange(
            ctl, cbuf, make_request(http::verb::put, "/v1/kv/bench/k" + std::to_string(k), st.host, "woken"));
        if (res.result_int() != 200) throw std::runtime_error("wake PUT failed");
    }
    rep.put_all_ms = ms_since(st.wake_start, steady::now());
    if (st.returned < o.n) {
        asio::steady_timer guard(ex, 60s);
        guard.async_wait([&](error_code ec) {
            if (!ec) st.all_returned->cancel();
        });
        co_await st.all_returned->async_wait(asio::as_tuple(asio::use_awaitable));
        guard.cancel();
    }
    rep.all_returned_ms = ms_since(st.wake_start, steady::now());
    rep.wake = summarize(st.wake_ms);
    rep.own_put = summarize(st.own_put_ms);
    if (agent_pid > 0) rep.rss_after_kib = rss_kib(agent_pid);
}

std::string mib(std::size_t kib) {
    std::ostringstream os;
    os << std::fixed << std::setprecision(1) << static_cast<double>(kib) / 1024.0 << " MiB";
    return os.str();
}

}  // namespace

int main(int argc, char** argv) {
    options opts = parse_options(argc, argv);
    ::signal(SIGPIPE, SIG_IGN);
    rlim_t const nofile = raise_nofile();  // inherited by the agent child
    if (nofile < opts.n + 64)
        std::cerr << "agent_load: warning: RLIMIT_NOFILE is " << nofile << ", below --n + 64\n";

    agent_child child;
    tcp::endpoint ep;
    pid_t agent_pid = opts.agent_pid;
    try {
        if (opts.agent_addr.empty()) {
            child = bench::start_agent_child(opts.agent_binary, {"-max-connections", std::to_string(opts.n + 1024)});
            agent_pid = child.pid;
            ep = tcp::endpoint(asio::ip::make_address("127.0.0.1"), child.port);
        } else {
            auto colon = opts.agent_addr.rfind(':');
            if (colon == std::string::npos) usage("--agent-addr wants HOST:PORT");
            ep = tcp::endpoint(asio::ip::make_address(opts.agent_addr.substr(0, colon)),
                               static_cast<unsigned short>(std::stoul(opts.agent_addr.substr(colon + 1))));
        }
    } catch (std::exception const& e) {
        std::cerr << "agent_load: " << e.what() << '\n';
        return 1;
    }

    shared_state st(opts, ep);
    report rep;
    int rc = 0;
    asio::io_context ioc(1);  // one thread: this one
    asio::co_spawn(ioc, run(st, agent_pid, rep), [&](std::exception_ptr e) {
        if (e) {
            try {
                std::rethrow_exception(e);
            } catch (std::exception const& ex) {
                std::cerr << "agent_load: " << ex.what() << '\n';
            }
            rc = 1;
        }
        ioc.stop();  // parked GETs that never returned are abandoned
    });
    auto const t0 = steady::now();
    ioc.run();
    double const total_s = ms_since(t0, steady::now()) / 1000.0;

    auto row = [](std::string const& k, std::string const& v) {
        std::cout << "  " << std::left << std::setw(48) << k << v << '\n';
    };
    auto fmt = [](double v, char const* unit = " ms") {
        std::ostringstream os;
        os << std::fixed << std::setprecision(v < 10 ? 3 : 1) << v << unit;
        return os.str();
    };
    std::cout << "\ntenure agent_load — " << opts.n << " parked blocking GETs over " << opts.keys << " keys, "
              << opts.m << " plain GETs\n";
    std::cout << "  agent: " << (opts.agent_addr.empty() ? opts.agent_binary : opts.agent_addr) << " at "
              << ep.address().to_string() << ":" << ep.port() << (agent_pid > 0 ? ", pid " + std::to_string(agent_pid) : "")
              << "; client: 1 thread, Asio coroutines; RLIMIT_NOFILE " << nofile << "\n\n";
    row("parked GETs written / connections opened", std::to_string(st.written) + " / " + std::to_string(st.connected));
    row("time to open and park all connections", fmt(rep.connect_ms));
    row("returned before the wake-up (should be 0)", std::to_string(st.returned_early));
    if (agent_pid > 0) {
        row("agent RSS idle (before connections)", mib(rep.rss_idle_kib));
        row("agent RSS with all GETs parked", mib(rep.rss_parked_kib));
        if (st.written > 0 && rep.rss_parked_kib > rep.rss_idle_kib)
            row("  per parked connection",
                fmt(static_cast<double>(rep.rss_parked_kib - rep.rss_idle_kib) * 1024.0 /
                        static_cast<double>(st.written),
                    " bytes"));
        row("agent open sockets (/proc/<pid>/fd)", std::to_string(rep.agent_sockets));
    }
    row("ESTABLISHED to the agent port (/proc/net/tcp)", std::to_string(rep.established));
    row("load generator RSS", mib(rep.self_rss_kib));
    std::cout << '\n';
    row("plain GET latency, " + std::to_string(opts.m) + " sequential (p50)", fmt(rep.get_latency.p50));
    row("  p90", fmt(rep.get_latency.p90));
    row("  p99", fmt(rep.get_latency.p99));
    row("  max", fmt(rep.get_latency.max));
    row("  throughput",
        fmt(rep.get_total_ms > 0 ? static_cast<double>(opts.m) * 1000.0 / rep.get_total_ms : 0, " req/s"));
    std::cout << '\n';
    row("PUT of all " + std::to_string(opts.keys) + " keys (sequential)", fmt(rep.put_all_ms));
    row("all " + std::to_string(opts.n) + " blocking GETs returned after", fmt(rep.all_returned_ms));
    row("  wake latency p50 (from the first PUT)", fmt(rep.wake.p50));
    row("  p90", fmt(rep.wake.p90));
    row("  p99", fmt(rep.wake.p99));
    row("  max", fmt(rep.wake.max));
    row("  wake latency after the PUT of its key (p50)", fmt(rep.own_put.p50));
    row("  p99", fmt(rep.own_put.p99));
    row("  max", fmt(rep.own_put.max));
    row("woken with 200 / errors", std::to_string(st.wake_ms.size()) + " / " + std::to_string(st.errors));
    if (!st.first_error.empty()) row("first error", st.first_error);
    if (agent_pid > 0) row("agent RSS after the wake-up", mib(rep.rss_after_kib));
    row("total run time", fmt(total_s, " s"));
    std::cout.flush();

    if (opts.agent_addr.empty()) stop_agent(child);
    if (st.returned < opts.n || st.errors > 0 || st.returned_early > 0) rc = rc ? rc : 1;
    return rc;
}
