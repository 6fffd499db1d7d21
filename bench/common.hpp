// Shared pieces of the benchmarks that link tenure (failover, throughput,
// scale): the two Consul backends (the `tenure agent` binary over loopback
// HTTP, and a tenure::agent in the bench process with in-process clients),
// child processes that die with the bench, percentiles, the machine's load,
// gnuplot, and small helpers for coroutines and command lines.
#pragma once

#include <tenure/agent.hpp>
#include <tenure/consul/client.hpp>

#define BOOST_PROCESS_V2_HEADER_ONLY 1
#include <boost/asio.hpp>
#include <boost/process/v2.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <cerrno>
#include <csignal>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#ifndef TENURE_BINARY
#define TENURE_BINARY "tenure"
#endif

namespace bench {

namespace asio = boost::asio;
namespace bp = boost::process::v2;
using steady = std::chrono::steady_clock;
using namespace std::chrono_literals;

inline double ms(steady::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// co_await x(tuple_awaitable): errors come back as a value instead of a throw
// (a cancelled timer is the usual way to be woken here).
constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);

inline asio::awaitable<void> sleep_for(steady::duration d) {
    asio::steady_timer t(co_await asio::this_coro::executor, d);
    co_await t.async_wait(tuple_awaitable);
}

// What the std::exception behind `e` says (anything else is rethrown): for
// the completion handlers of co_spawn.
inline std::string message_of(std::exception_ptr e) {
    try {
        std::rethrow_exception(e);
    } catch (std::exception const& x) {
        return x.what();
    }
}

// Boost.Process v2 initializer: the child gets SIGKILL when the bench dies, so
// an interrupted run leaves no agent or candidate behind.
struct die_with_parent {
    template <class Launcher>
    bp::error_code on_exec_setup(Launcher&, bp::filesystem::path const&, char const* const*&) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        return {};
    }
};

// Nearest-rank percentile of an unsorted sample (p in [0, 100]).
inline double pct(std::vector<double> v, double p) {
    if (v.empty()) return std::nan("");
    std::sort(v.begin(), v.end());
    auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
    return v[std::clamp<std::size_t>(rank, 1, v.size()) - 1];
}
inline double max_of(std::vector<double> const& v) {
    return v.empty() ? std::nan("") : *std::max_element(v.begin(), v.end());
}

inline std::string loadavg() {
    std::ifstream f("/proc/loadavg");
    std::string a, b, c;
    f >> a >> b >> c;
    return a + " " + b + " " + c;
}

// User + system CPU seconds of a process.
inline double cpu_seconds(pid_t pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    auto close = s.rfind(')');
    if (close == std::string::npos) return 0;
    std::istringstream in(s.substr(close + 2));
    std::string field;
    double utime = 0, stime = 0;
    for (int i = 3; in >> field; ++i) {
        if (i == 14) utime = std::stod(field);
        if (i == 15) {
            stime = std::stod(field);
            break;
        }
    }
    return (utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// This process's own usage so far, from one getrusage call.
struct self_usage {
    double cpu_s = 0;       // user + system (microsecond resolution, where /proc/<pid>/stat counts clock ticks)
    long minor_faults = 0;  // pages touched for the first time (or again after malloc gave them back)

    static self_usage now() {
        rusage u{};
        ::getrusage(RUSAGE_SELF, &u);
        auto sec = [](timeval t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
        return {sec(u.ru_utime) + sec(u.ru_stime), u.ru_minflt};
    }
};

inline double self_cpu_seconds() { return self_usage::now().cpu_s; }

inline std::string machine() {
    long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
    long mem_mib = static_cast<long>(::sysconf(_SC_PHYS_PAGES) / 1024 * ::sysconf(_SC_PAGE_SIZE) / 1024);
    std::string cpu;
    std::ifstream f("/proc/cpuinfo");
    for (std::string line; std::getline(f, line);)
        if (line.rfind("model name", 0) == 0) {
            cpu = line.substr(line.find(':') + 2);
            break;
        }
    return std::to_string(cores) + " cores (" + cpu + "), " + std::to_string(mem_mib) + " MiB RAM";
}

// Sends `sig` to the child if it still runs, reaps it, and forgets it.
inline void stop_process(std::optional<bp::process>& proc, int sig) {
    if (proc && proc->running()) {
        ::kill(proc->id(), sig);
        boost::system::error_code ec;
        proc->wait(ec);
    }
    proc.reset();
}

// A backend: where the candidates' clients talk to.
//   http   - the `tenure agent` binary as a child process, over loopback HTTP
//   inproc - a tenure::agent on the bench's io_context, in-process clients
//            (its HTTP listener on 127.0.0.1 serves child processes)
// (etcd and the `etcdctl elect` baseline will be further backends; see the
// failover bench's header.)
class backend {
public:
    // `log_level` info: the agent logs every session invalidation; a thread of
    // the bench reads its stderr with blocking reads and stamps each line the
    // moment it arrives (the io_context may be busy with the responses the same
    // event woke), then hands it to on_log on the io_context. warn: the agent's
    // stderr is inherited.
    // `http_addr`: where the agent child listens; "unix:///path" for a Unix
    // domain socket (HTTP over it), else a loopback TCP port.
    // `agent_flags`: more flags for the agent child (e.g. -busy-poll=50us).
    static std::unique_ptr<backend> start_http(asio::io_context& io, std::string const& ttl_min,
                                               std::string const& log_level = "warn",
                                               std::string const& http_addr = "127.0.0.1:0",
                                               std::vector<std::string> const& agent_flags = {}) {
        auto b = std::unique_ptr<backend>(new backend(io, "http"));
        b->out_.emplace(io);
        std::vector<std::string> args{"agent", "-http-addr", http_addr, "-log-level", log_level,
                                      "-session-ttl-min", ttl_min};
        args.insert(args.end(), agent_flags.begin(), agent_flags.end());
        if (log_level == "warn") {
            b->proc_.emplace(io, TENURE_BINARY, args, bp::process_stdio{{}, *b->out_, {}}, die_with_parent{});
        } else {
            int fds[2];
            if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
            b->proc_.emplace(io, TENURE_BINARY, args, bp::process_stdio{{}, *b->out_, fds[1]}, die_with_parent{});
            ::close(fds[1]);
            b->log_ = std::make_shared<log_reader>();
            b->log_->ex = io.get_executor();
            b->log_thread_ = std::thread([r = b->log_, fd = fds[0]] { read_log(r, fd); });
        }
        std::string line;
        asio::read_until(*b->out_, asio::dynamic_buffer(line), '\n');
        b->url_ = line.substr(line.rfind(' ') + 1);
        b->url_.erase(b->url_.find_last_not_of("\r\n") + 1);
        return b;
    }

    // Called on the io_context with each line the agent child logs (http
    // backend started with log level info) and the moment it was read.
    void on_log(std::function<void(std::string const&, steady::time_point)> f) {
        if (log_) log_->on_line = std::move(f);
    }

    static std::unique_ptr<backend> start_inproc(asio::io_context& io, std::chrono::nanoseconds ttl_min) {
        auto b = std::unique_ptr<backend>(new backend(io, "inproc"));
        tenure::agent_options o;
        o.http_addr = "127.0.0.1:0";
        o.session_ttl_min = ttl_min;
        o.level = tenure::log_level::warn;
        o.log_stream = &std::cerr;
        b->agent_.emplace(io.get_executor(), o);
        b->agent_->start();
        b->url_ = b->agent_->http_address();
        return b;
    }

    ~backend() { stop(); }

    void stop() {
        stop_process(proc_, SIGTERM);
        if (log_thread_.joinable()) log_thread_.join();  // EOF once the agent has exited
        if (agent_) agent_->stop();
    }

    std::string const& name() const { return name_; }
    // The agent's HTTP address (also served by the in-process agent).
    std::string const& url() const { return url_; }
    tenure::agent* agent() { return agent_ ? &*agent_ : nullptr; }
    // The process the agent runs in: the child, or the bench itself (inproc).
    pid_t agent_pid() const { return proc_ ? static_cast<pid_t>(proc_->id()) : ::getpid(); }
    asio::any_io_executor executor() const { return io_.get_executor(); }

    std::unique_ptr<tenure::consul::client> make_client() {
        tenure::consul::client_config cc;
        cc.address = url_;
        if (agent_) return std::make_unique<tenure::consul::client>(io_.get_executor(), agent_->in_process(), cc);
        return std::make_unique<tenure::consul::client>(io_.get_executor(), cc);
    }

private:
    struct log_reader {
        asio::any_io_executor ex;
        std::function<void(std::string const&, steady::time_point)> on_line;  // used on ex only
    };
    static void read_log(std::shared_ptr<log_reader> r, int fd) {
        std::string buf;
        char chunk[4096];
        for (;;) {
            ssize_t n = ::read(fd, chunk, sizeof chunk);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;
            auto const t = steady::now();
            buf.append(chunk, static_cast<std::size_t>(n));
            for (std::size_t nl; (nl = buf.find('\n')) != std::string::npos;) {
                std::string line = buf.substr(0, nl);
                buf.erase(0, nl + 1);
                asio::post(r->ex, [r, line = std::move(line), t] {
                    if (r->on_line) r->on_line(line, t);
                    else if (line.find("[WARN]") != std::string::npos || line.find("[ERROR]") != std::string::npos)
                        std::fprintf(stderr, "agent: %s\n", line.c_str());
                });
            }
        }
        ::close(fd);
    }

    backend(asio::io_context& io, std::string name) : io_(io), name_(std::move(name)) {}
    asio::io_context& io_;
    std::string name_, url_;
    std::optional<asio::readable_pipe> out_;
    std::shared_ptr<log_reader> log_;
    std::thread log_thread_;
    std::optional<bp::process> proc_;
    std::optional<tenure::agent> agent_;
};

// Runs `gnuplot script` (gnuplot-nox); false when gnuplot is missing or fails.
inline bool run_gnuplot(std::string const& script) {
    std::string cmd = "gnuplot '" + script + "'";
    return std::system(cmd.c_str()) == 0;
}

// The value of the flag args[i] (the next argument); advances i. Throws when
// there is none.
inline std::string flag_value(std::vector<std::string> const& args, std::size_t& i) {
    if (i + 1 >= args.size()) throw std::runtime_error("missing value for " + args[i]);
    return args[++i];
}

// "a,b,c" -> {"a", "b", "c"}
inline std::vector<std::string> split(std::string const& s, char sep = ',') {
    std::vector<std::string> out;
    std::stringstream in(s);
    for (std::string item; std::getline(in, item, sep);)
        if (!item.empty()) out.push_back(item);
    return out;
}

}  // namespace bench
