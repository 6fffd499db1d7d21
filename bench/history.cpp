// history: what the lock history ring (agent_options::history_capacity,
// /v1/tenure/history) costs the agent. Runs the real `tenure agent` binary and
// drives acquire + release cycles over one raw keep-alive HTTP connection,
// each cycle one term, over K keys of L bytes held by sessions with long
// names. At checkpoints (multiples of the capacity) it reads the agent's
// resident memory from /proc/<pid>/status and times one whole-ring GET of
// /v1/tenure/history. Once the ring is full, each new term pushes the oldest
// out: resident memory must stop growing however many terms follow.
//
//   history [--capacity 4096] [--rounds 8] [--keys 1000] [--key-bytes 200]
//           [--no-get] [--binary path]
//
// --no-get leaves the GETs out, so the ring's own memory shows alone (an
// answer's rendering leaves the allocator's high-water mark behind).
//
// It runs the same cycles against an agent with -history-capacity 0 first:
// the difference is the ring's own memory.
#include "agent_child.hpp"
#include "raw_http.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <csignal>
#include <sys/wait.h>

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using steady = std::chrono::steady_clock;

namespace {

struct options {
    std::size_t capacity = 4096;
    int rounds = 8;  // checkpoints at 0.25, 0.5, 1, 2, ... x capacity
    int keys = 1000;
    std::size_t key_bytes = 200;
    std::string binary = TENURE_BINARY;
    bool get = true;  // --no-get: the ring alone, no answer rendered
};

// VmRSS and VmHWM of a process, in KiB.
std::pair<long, long> memory_kib(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    long rss = -1, hwm = -1;
    while (std::getline(in, line)) {
        if (line.rfind("VmRSS:", 0) == 0) rss = std::atol(line.c_str() + 6);
        if (line.rfind("VmHWM:", 0) == 0) hwm = std::atol(line.c_str() + 6);
    }
    return {rss, hwm};
}

struct checkpoint {
    std::uint64_t terms = 0;
    long rss_kib = 0;        // before the GET: the ring and the rest at rest
    long rss_after_kib = 0;  // after it: plus what rendering the answer left mapped
    double get_ms = 0;
    std::size_t get_bytes = 0;
};

std::vector<checkpoint> run(options const& o, std::size_t capacity, std::vector<std::uint64_t> const& marks) {
    auto child = bench::start_agent_child(
        o.binary, {"-history-capacity", std::to_string(capacity), "-max-sessions-per-node", "0"});
    asio::io_context ioc;
    tcp::socket sock(ioc);
    sock.connect({asio::ip::address_v4::loopback(), child.port});
    sock.set_option(tcp::no_delay(true));
    bench::raw::connection<tcp::socket> c(std::move(sock));

    // Eight sessions with 64-byte names take turns: each term records a name.
    std::vector<std::string> sessions;
    for (int i = 0; i < 8; ++i) {
        std::string name(64, 'n');
        name.replace(0, 8, "holder-" + std::to_string(i));
        auto const& r = c.round_trip(bench::raw::request(
            "PUT", "/v1/session/create", R"({"Name":")" + name + R"(","LockDelay":"0s"})"));
        sessions.push_back(bench::raw::json_string(r.body(), "ID"));
    }
    std::vector<std::string> keys;
    for (int k = 0; k < o.keys; ++k) {
        std::string key = "bench/history/" + std::to_string(k) + "/";
        key.resize(std::max(key.size(), o.key_bytes), 'k');
        keys.push_back(key);
    }

    std::vector<checkpoint> out;
    std::uint64_t done = 0;
    for (auto mark : marks) {
        for (; done < mark; ++done) {
            auto const& key = keys[done % keys.size()];
            auto const& s = sessions[done % sessions.size()];
            auto const& a = c.round_trip(bench::raw::request("PUT", "/v1/kv/" + key + "?acquire=" + s, "v"));
            if (a.body() != "true") throw std::runtime_error("acquire refused: " + a.body());
            c.round_trip(bench::raw::request("PUT", "/v1/kv/" + key + "?release=" + s, "v"));
        }
        checkpoint cp;
        cp.terms = done;
        cp.rss_kib = memory_kib(child.pid).first;
        if (!o.get) {
            cp.rss_after_kib = cp.rss_kib;
            out.push_back(cp);
            continue;
        }
        auto const t0 = steady::now();
        auto const& h = c.round_trip(bench::raw::request("GET", "/v1/tenure/history"));
        cp.get_ms = std::chrono::duration<double, std::milli>(steady::now() - t0).count();
        cp.get_bytes = h.body().size();
        cp.rss_after_kib = memory_kib(child.pid).first;
        out.push_back(cp);
    }
    ::kill(child.pid, SIGTERM);
    int st = 0;
    ::waitpid(child.pid, &st, 0);
    ::close(child.stdout_fd);
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    options o;
    for (int i = 1; i < argc; i += 2) {
        std::string const a = argv[i];
        if (a == "--no-get") {
            o.get = false;
            --i;
            continue;
        }
        if (i + 1 >= argc) {
            std::fprintf(stderr, "history: %s wants a value\n", a.c_str());
            return 2;
        }
        std::string const v = argv[i + 1];
        if (a == "--capacity") o.capacity = std::stoul(v);
        else if (a == "--rounds") o.rounds = std::stoi(v);
        else if (a == "--keys") o.keys = std::stoi(v);
        else if (a == "--key-bytes") o.key_bytes = std::stoul(v);
        else if (a == "--binary") o.binary = v;
        else {
            std::fprintf(stderr, "history: unknown option %s\n", a.c_str());
            return 2;
        }
    }
    if (o.capacity == 0 || o.rounds < 1 || o.keys < 1) {
        std::fprintf(stderr, "history: --capacity, --rounds and --keys must be positive\n");
        return 2;
    }
    // Checkpoints: a quarter and a half of the ring, then 1, 2, 4, ... times it.
    std::vector<std::uint64_t> marks{o.capacity / 4, o.capacity / 2};
    for (int r = 0; r + 2 < o.rounds; ++r) marks.push_back(o.capacity << r);

    std::printf("history: capacity %zu terms, %d keys of %zu bytes, 8 sessions with 64-byte names\n", o.capacity,
                o.keys, o.key_bytes);
    auto const base = run(o, 0, marks);
    auto const ring = run(o, o.capacity, marks);
    std::printf("%10s %10s %10s %10s %12s %10s %12s\n", "terms", "RSS off", "RSS on", "ring", "after GET",
                "GET ms", "GET bytes");
    for (std::size_t i = 0; i < marks.size(); ++i) {
        double const off = base[i].rss_kib / 1024.0, on = ring[i].rss_kib / 1024.0;
        std::printf("%10llu %10.1f %10.1f %10.1f %12.1f %10.2f %12zu\n", static_cast<unsigned long long>(marks[i]),
                    off, on, on - off, ring[i].rss_after_kib / 1024.0, ring[i].get_ms, ring[i].get_bytes);
    }
    std::printf("(RSS in MiB, read before and after one GET /v1/tenure/history of every key; ring = on - off)\n");
    return 0;
}
