// A real etcd for the benchmarks: one member (Debian's etcd-server) started
// by the bench on free loopback ports with a fresh temporary data directory,
// stopped and removed when the bench is done (PR_SET_PDEATHSIG kills it if
// the bench dies first). The same approach as the integration tests'
// fixture (tests/integration/etcd_process.*), written again here so that
// bench/ does not depend on test code.
//
// Raft timings: heartbeat 50 ms, election timeout 500 ms, so that etcd's
// minimum lease TTL (1.5 x election timeout, rounded up to seconds) is 1 s
// (etcd's defaults would make it 2 s). The WAL is fsynced as by default
// unless `fsync` is false (--unsafe-no-fsync).
#pragma once

#include "common.hpp"

#include <tenure/etcd/client.hpp>

#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <string_view>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

extern char** environ;

namespace bench {

// The bench's environment without the variables whose names start with one of
// `prefixes` (etcd reads ETCD_* as flags; etcdctl refuses ETCDCTL_ENDPOINTS
// beside --endpoints).
inline std::vector<std::string> environment_without(std::initializer_list<std::string_view> prefixes) {
    std::vector<std::string> out;
    for (char** e = environ; e && *e; ++e) {
        std::string_view v(*e);
        bool drop = false;
        for (auto p : prefixes) drop = drop || v.substr(0, p.size()) == p;
        if (!drop) out.emplace_back(v);
    }
    return out;
}

// Boost.Process v2 initializer: the child's environment (process_environment's
// on_setup is not header-only in Boost 1.81). `vars` must outlive the launch.
struct child_environment {
    explicit child_environment(std::vector<std::string> const& vars) {
        for (auto const& v : vars) ptrs.push_back(v.c_str());
        ptrs.push_back(nullptr);
    }
    template <class Launcher>
    bp::error_code on_setup(Launcher& launcher, bp::filesystem::path const&, char const* const*&) {
        launcher.env = ptrs.data();
        return {};
    }
    std::vector<char const*> ptrs;
};

// $env_var, else /usr/bin/<name>, else <name> on PATH; empty when not found.
inline std::string find_executable(std::string const& name, char const* env_var) {
    auto ok = [](std::string const& p) { return !p.empty() && ::access(p.c_str(), X_OK) == 0; };
    if (char const* e = std::getenv(env_var); e && ok(e)) return e;
    if (ok("/usr/bin/" + name)) return "/usr/bin/" + name;
    if (char const* path = std::getenv("PATH")) {
        std::string_view p(path);
        while (!p.empty()) {
            auto const colon = p.find(':');
            std::string dir(p.substr(0, colon));
            if (!dir.empty() && ok(dir + "/" + name)) return dir + "/" + name;
            if (colon == std::string_view::npos) break;
            p.remove_prefix(colon + 1);
        }
    }
    return {};
}

// `n` distinct loopback ports that were free a moment ago (all held open
// until every one is chosen).
inline std::vector<std::uint16_t> free_loopback_ports(std::size_t n) {
    std::vector<int> fds;
    std::vector<std::uint16_t> ports;
    for (std::size_t i = 0; i < n; ++i) {
        int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof addr;
        if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
            ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
            if (fd >= 0) ::close(fd);
            for (int f : fds) ::close(f);
            throw std::runtime_error(std::string("cannot bind a loopback port: ") + std::strerror(errno));
        }
        fds.push_back(fd);
        ports.push_back(ntohs(addr.sin_port));
    }
    for (int f : fds) ::close(f);
    return ports;
}

struct etcd_server_options {
    std::string binary;  // empty: find_executable("etcd", "ETCD_BINARY")
    bool fsync = true;
    int heartbeat_ms = 50;
    int election_ms = 500;
    std::chrono::milliseconds startup_timeout{20'000};
};

class etcd_server {
public:
    // Starts the member and returns once it answers /v3/maintenance/status.
    // Throws (with the tail of etcd's log) when it cannot start.
    static asio::awaitable<std::unique_ptr<etcd_server>> start(asio::io_context& io, etcd_server_options const& opts) {
        etcd_server_options o = opts;
        if (o.binary.empty()) o.binary = find_executable("etcd", "ETCD_BINARY");
        if (o.binary.empty()) throw std::runtime_error("etcd not found (install etcd-server: bash scripts/setup.sh)");
        for (int attempt = 1;; ++attempt) {
            auto s = std::unique_ptr<etcd_server>(new etcd_server(io));
            s->launch(o);
            std::string why;
            try {
                co_await s->wait_ready(o.startup_timeout);
                co_return s;
            } catch (std::exception const& e) {
                why = e.what();
            }
            // A port found free may be taken before etcd binds it: new ports.
            bool const clash = s->log().find("address already in use") != std::string::npos;
            s->stop();
            if (!clash || attempt == 5) throw std::runtime_error(why);
        }
    }

    ~etcd_server() { stop(); }

    std::string const& url() const { return url_; }
    std::string const& version() const { return version_; }
    bool fsync() const { return fsync_; }

    // SIGKILL (a throwaway member: nothing to flush), reap, remove the data.
    void stop() {
        stop_process(proc_, SIGKILL);
        if (!dir_.empty()) {
            std::error_code ec;
            std::filesystem::remove_all(dir_, ec);
            dir_.clear();
        }
    }

    std::string log() const {
        std::ifstream f(dir_ + "/etcd.log");
        std::stringstream ss;
        ss << f.rdbuf();
        return ss.str();
    }

    // etcd's watcher gauges (GET /metrics): every watcher, and the unsynced
    // ("slow") ones that still catch up on past revisions — etcd moves those
    // to the synced group in a loop every 100 ms, so a watch created from an
    // older revision is not live until then.
    struct watcher_counts {
        long total = -1;
        long unsynced = -1;
    };
    asio::awaitable<watcher_counts> watchers() {
        auto const colon = url_.rfind(':');
        asio::ip::tcp::endpoint ep(asio::ip::make_address("127.0.0.1"),
                                   static_cast<unsigned short>(std::stoi(url_.substr(colon + 1))));
        asio::ip::tcp::socket sock(io_);
        co_await sock.async_connect(ep, asio::use_awaitable);
        std::string req = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
        co_await asio::async_write(sock, asio::buffer(req), asio::use_awaitable);
        std::string body;
        auto [ec, n] = co_await asio::async_read(sock, asio::dynamic_buffer(body), asio::as_tuple(asio::use_awaitable));
        (void)n;  // ends with EOF (HTTP/1.0)
        watcher_counts c;
        auto gauge = [&](std::string const& name) {
            auto pos = body.find("\n" + name + " ");
            return pos == std::string::npos ? -1L : std::stol(body.substr(pos + name.size() + 2));
        };
        c.total = gauge("etcd_debugging_mvcc_watcher_total");
        c.unsynced = gauge("etcd_debugging_mvcc_slow_watcher_total");
        co_return c;
    }

    // Polls watchers() until at least `want` watchers exist and none is
    // unsynced: the followers are parked on live watches. False on timeout.
    asio::awaitable<bool> wait_parked(long want, std::chrono::milliseconds timeout) {
        auto const deadline = steady::now() + timeout;
        for (;;) {
            auto c = co_await watchers();
            if (c.total >= want && c.unsynced == 0) co_return true;
            if (steady::now() >= deadline) co_return false;
            asio::steady_timer t(io_, std::chrono::milliseconds(5));  // etcd offers no event for this
            co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
        }
    }

private:
    explicit etcd_server(asio::io_context& io) : io_(io) {}

    void launch(etcd_server_options const& o) {
        auto const ports = free_loopback_ports(2);
        url_ = "http://127.0.0.1:" + std::to_string(ports[0]);
        std::string const peer = "http://127.0.0.1:" + std::to_string(ports[1]);
        std::string base = "/tmp";
        if (char const* t = std::getenv("TMPDIR"); t && *t) base = t;
        std::string tmpl = base + "/tenure-bench-etcd-XXXXXX";
        if (!::mkdtemp(tmpl.data())) throw std::runtime_error(std::string("mkdtemp: ") + std::strerror(errno));
        dir_ = tmpl;
        fsync_ = o.fsync;
        std::vector<std::string> args{"--name", "bench",
                                      "--data-dir", dir_ + "/data",
                                      "--listen-client-urls", url_,
                                      "--advertise-client-urls", url_,
                                      "--listen-peer-urls", peer,
                                      "--initial-advertise-peer-urls", peer,
                                      "--initial-cluster", "bench=" + peer,
                                      "--initial-cluster-state", "new",
                                      "--initial-cluster-token", "tenure-bench-" + std::to_string(::getpid()),
                                      "--heartbeat-interval", std::to_string(o.heartbeat_ms),
                                      "--election-timeout", std::to_string(o.election_ms),
                                      "--logger", "zap"};
        if (!o.fsync) args.push_back("--unsafe-no-fsync");
        env_ = environment_without({"ETCD_"});
        bp::filesystem::path log_path = dir_ + "/etcd.log";
        proc_.emplace(io_, o.binary, args, bp::process_stdio{nullptr, nullptr, log_path},
                      child_environment(env_), die_with_parent{});
    }

    asio::awaitable<void> wait_ready(std::chrono::milliseconds timeout) {
        tenure::etcd::client_config cc;
        cc.endpoints = {url_};
        cc.request_timeout = std::chrono::milliseconds(1000);
        tenure::etcd::client c(io_.get_executor(), cc);
        auto const deadline = steady::now() + timeout;
        for (;;) {
            std::string last;
            try {
                auto st = co_await c.status();
                version_ = st.version;
                c.close();
                co_return;
            } catch (std::exception const& e) {
                last = e.what();
            }
            auto tail = [&] {
                auto l = log();
                return l.size() > 3000 ? "...\n" + l.substr(l.size() - 3000) : l;
            };
            if (!proc_->running())
                throw std::runtime_error("etcd exited during startup\n--- etcd log ---\n" + tail());
            if (steady::now() >= deadline)
                throw std::runtime_error("etcd not ready within " + std::to_string(timeout.count()) + " ms (" + last +
                                         ")\n--- etcd log ---\n" + tail());
            asio::steady_timer t(io_, std::chrono::milliseconds(20));  // readiness polling
            co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
        }
    }

    asio::io_context& io_;
    std::string url_, dir_, version_;
    bool fsync_ = true;
    std::vector<std::string> env_;
    std::optional<bp::process> proc_;
};

}  // namespace bench
