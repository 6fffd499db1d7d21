// durability: what -data-dir costs. KV PUTs against the real `tenure agent`
// binary, in memory and with a write-ahead log (fdatasync before each
// acknowledgement, group commit per event-loop turn), with 1..C concurrent
// keep-alive connections. Prints latency percentiles, throughput and, with
// the log, writes per fdatasync (from the agent's own metrics).
//
//   durability [--n 2000] [--conns 1,8,64] [--dir /var/tmp] [--binary path]
//
// --dir picks the filesystem the log lives on (tmpfs would measure nothing).
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "agent_child.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <csignal>
#include <sys/wait.h>
#include <unistd.h>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace fs = std::filesystem;
using tcp = asio::ip::tcp;
using steady = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

using bench::agent_child;  // the agent binary as a child; start_agent_child()

void stop(agent_child& c) {
    ::kill(c.pid, SIGTERM);
    int st = 0;
    ::waitpid(c.pid, &st, 0);
    ::close(c.stdout_fd);
}

struct run_result {
    std::vector<double> lat_ms;
    double seconds = 0;
};

asio::awaitable<void> writer(tcp::endpoint ep, int id, int count, run_result& r) {
    tcp::socket s(co_await asio::this_coro::executor);
    co_await s.async_connect(ep, asio::use_awaitable);
    s.set_option(tcp::no_delay(true));
    beast::flat_buffer buf;
    for (int i = 0; i < count; ++i) {
        http::request<http::string_body> req{http::verb::put, "/v1/kv/bench/" + std::to_string(id) + "/" + std::to_string(i), 11};
        req.set(http::field::host, "127.0.0.1");
        req.body() = "value-" + std::to_string(i);
        req.prepare_payload();
        auto const t0 = steady::now();
        co_await http::async_write(s, req, asio::use_awaitable);
        http::response<http::string_body> res;
        co_await http::async_read(s, buf, res, asio::use_awaitable);
        r.lat_ms.push_back(std::chrono::duration<double, std::milli>(steady::now() - t0).count());
        if (res.result_int() != 200) throw std::runtime_error("PUT answered " + std::to_string(res.result_int()));
    }
}

std::string get(unsigned short port, std::string target) {
    asio::io_context ioc;
    tcp::socket s(ioc);
    s.connect({asio::ip::make_address("127.0.0.1"), port});
    http::request<http::empty_body> req{http::verb::get, target, 11};
    req.set(http::field::host, "127.0.0.1");
    http::write(s, req);
    beast::flat_buffer buf;
    http::response<http::string_body> res;
    http::read(s, buf, res);
    return res.body();
}

double prom_value(std::string const& text, std::string const& name) {
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line))
        if (line.starts_with(name + " ")) return std::stod(line.substr(name.size() + 1));
    return 0;
}

double pct(std::vector<double> v, double p) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<std::size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5))];
}

}  // namespace

int main(int argc, char** argv) {
    int n = 2000;
    std::vector<int> conns = {1, 8, 64};
    std::string dir_base = "/var/tmp";
    std::string binary = TENURE_BINARY;
    for (int i = 1; i + 1 < argc; i += 2) {
        std::string a = argv[i], v = argv[i + 1];
        if (a == "--n") n = std::stoi(v);
        else if (a == "--dir") dir_base = v;
        else if (a == "--binary") binary = v;
        else if (a == "--conns") {
            conns.clear();
            std::stringstream ss(v);
            for (std::string x; std::getline(ss, x, ',');) conns.push_back(std::stoi(x));
        } else {
            std::cerr << "usage: durability [--n N] [--conns 1,8,64] [--dir DIR] [--binary PATH]\n";
            return 2;
        }
    }
    std::printf("%-8s %6s %7s %9s %9s %9s %10s %12s\n", "mode", "conns", "writes", "p50 ms", "p99 ms", "max ms",
                "writes/s", "writes/fsync");
    for (bool durable : {false, true}) {
        for (int c : conns) {
            std::string tmpl = dir_base + "/tenure-durability-bench-XXXXXX";
            if (durable && !::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp in " + dir_base + " failed");
            std::vector<std::string> extra;
            if (durable) extra = {"-data-dir", tmpl};
            agent_child ag = bench::start_agent_child(binary, extra);
            asio::io_context ioc{1};
            tcp::endpoint ep{asio::ip::make_address("127.0.0.1"), ag.port};
            std::vector<run_result> results(static_cast<std::size_t>(c));
            int const per = std::max(1, n / c);
            std::exception_ptr failure;
            auto const t0 = steady::now();
            for (int i = 0; i < c; ++i)
                asio::co_spawn(ioc, writer(ep, i, per, results[static_cast<std::size_t>(i)]), [&](std::exception_ptr e) {
                    if (e && !failure) failure = e;
                });
            ioc.run();
            double const secs = std::chrono::duration<double>(steady::now() - t0).count();
            if (failure) std::rethrow_exception(failure);
            std::vector<double> all;
            for (auto& r : results) all.insert(all.end(), r.lat_ms.begin(), r.lat_ms.end());
            double per_fsync = 0;
            if (durable) {
                auto m = get(ag.port, "/v1/agent/metrics?format=prometheus");
                double commits = prom_value(m, "tenure_wal_commits_total");
                per_fsync = commits > 0 ? static_cast<double>(all.size()) / commits : 0;
            }
            stop(ag);
            if (durable) fs::remove_all(tmpl);
            char pf[32] = "-";
            if (durable) std::snprintf(pf, sizeof pf, "%.2f", per_fsync);
            std::printf("%-8s %6d %7zu %9.3f %9.3f %9.3f %10.0f %12s\n", durable ? "wal" : "memory", c, all.size(),
                        pct(all, 50), pct(all, 99), pct(all, 100), static_cast<double>(all.size()) / secs, pf);
            std::fflush(stdout);
        }
    }
    std::printf("log directory filesystem: %s\n", dir_base.c_str());
    return 0;
}
