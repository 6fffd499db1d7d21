#include "etcd_process.hpp"
#include "process_io.hpp"

#include "http_client.hpp"

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string_view>
#include <thread>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace tenure::itest {

namespace {

using steady = std::chrono::steady_clock;
using namespace std::chrono_literals;

// The last `max` bytes of a log, for exception messages.
std::string tail(std::string s, std::size_t max = 6000) {
    if (s.size() > max) s = "...\n" + s.substr(s.size() - max);
    return s;
}

bool executable(std::string const& path) { return ::access(path.c_str(), X_OK) == 0; }

std::string find_etcd(std::string const& configured) {
    if (!configured.empty()) return configured;
    if (char const* e = std::getenv("ETCD_BINARY"); e && *e) return e;
    if (executable("/usr/bin/etcd")) return "/usr/bin/etcd";
    if (char const* path = std::getenv("PATH")) {
        std::string_view p(path);
        while (!p.empty()) {
            auto const colon = p.find(':');
            std::string dir(p.substr(0, colon));
            if (!dir.empty() && executable(dir + "/etcd")) return dir + "/etcd";
            if (colon == std::string_view::npos) break;
            p.remove_prefix(colon + 1);
        }
    }
    throw std::runtime_error(
        "etcd not found (set ETCD_BINARY, or install etcd-server: bash scripts/setup.sh)");
}

std::string unique_token() {
    static std::atomic<unsigned> counter{0};
    return "tenure-itest-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" +
           std::to_string(steady::now().time_since_epoch().count() % 1000000007);
}

int bound_loopback_socket(std::uint16_t& port) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
        int const err = errno;
        ::close(fd);
        throw std::runtime_error(std::string("bind 127.0.0.1:0: ") + std::strerror(err));
    }
    socklen_t len = sizeof addr;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    port = ntohs(addr.sin_port);
    return fd;
}

std::optional<std::uint64_t> u64_field(boost::json::object const& o, std::string_view name) {
    auto const* v = o.if_contains(name);
    if (!v) return std::uint64_t{0};  // zero values are omitted
    if (auto const* s = v->if_string()) {
        std::uint64_t out = 0;
        auto [p, ec] = std::from_chars(s->data(), s->data() + s->size(), out);
        if (ec != std::errc{} || p != s->data() + s->size()) return std::nullopt;
        return out;
    }
    return std::nullopt;
}

}  // namespace

std::uint16_t free_loopback_port() { return free_loopback_ports(1).front(); }

std::vector<std::uint16_t> free_loopback_ports(std::size_t n) {
    std::vector<int> fds;
    std::vector<std::uint16_t> ports;
    try {
        for (std::size_t i = 0; i < n; ++i) {
            std::uint16_t p = 0;
            fds.push_back(bound_loopback_socket(p));
            ports.push_back(p);
        }
    } catch (...) {
        for (int fd : fds) ::close(fd);
        throw;
    }
    for (int fd : fds) ::close(fd);
    return ports;
}

// ---- etcd_process ---------------------------------------------------------------------

namespace {
bool port_clash(std::string const& log) { return log.find("address already in use") != std::string::npos; }
}  // namespace

etcd_process::etcd_process(etcd_options opts) : name_(opts.name) {
    // A port found free may be taken by someone else before etcd binds it:
    // with ports of our choosing, try again with new ones.
    bool const own_ports = opts.client_port == 0 && opts.peer_port == 0;
    for (int attempt = 1;; ++attempt) {
        try {
            start(opts);
            return;
        } catch (std::exception const&) {
            bool const retry = own_ports && attempt < 5 && port_clash(log());
            cleanup();  // no destructor runs for a half-built object
            if (!retry) throw;
        }
    }
}

void etcd_process::start(etcd_options opts) {
    std::string const binary = find_etcd(opts.binary);
    if (opts.client_port == 0 || opts.peer_port == 0) {
        auto const ports = free_loopback_ports(2);
        if (opts.client_port == 0) opts.client_port = ports[0];
        if (opts.peer_port == 0) opts.peer_port = ports[1];
    }
    client_port_ = opts.client_port;
    peer_port_ = opts.peer_port;

    std::string base = "/tmp";
    if (char const* t = std::getenv("TMPDIR"); t && *t) base = t;
    std::string tmpl = base + "/tenure-itest-etcd-XXXXXX";
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error(std::string("mkdtemp: ") + std::strerror(errno));
    data_dir_ = tmpl;

    std::string const client_url_s = client_url();
    std::string const peer_url = "http://127.0.0.1:" + std::to_string(peer_port_);
    std::string const initial_cluster =
        opts.initial_cluster.empty() ? name_ + "=" + peer_url : opts.initial_cluster;
    std::string const token = opts.cluster_token.empty() ? unique_token() : opts.cluster_token;
    std::vector<std::string> args = {binary,
                                     "--name", name_,
                                     "--data-dir", data_dir_ + "/data",
                                     "--listen-client-urls", client_url_s,
                                     "--advertise-client-urls", client_url_s,
                                     "--listen-peer-urls", peer_url,
                                     "--initial-advertise-peer-urls", peer_url,
                                     "--initial-cluster", initial_cluster,
                                     "--initial-cluster-state", "new",
                                     "--initial-cluster-token", token,
                                     "--heartbeat-interval", std::to_string(opts.heartbeat_ms),
                                     "--election-timeout", std::to_string(opts.election_ms),
                                     "--logger", "zap",
                                     "--unsafe-no-fsync"};
    args.insert(args.end(), opts.extra_args.begin(), opts.extra_args.end());

    char log_tmpl[] = "/tmp/tenure-itest-etcd-log-XXXXXX";
    log_fd_ = ::mkostemp(log_tmpl, O_CLOEXEC);
    if (log_fd_ < 0) throw std::runtime_error(std::string("mkostemp: ") + std::strerror(errno));
    ::unlink(log_tmpl);

    // Prepared before fork: the test process may have threads.
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    // etcd reads ETCD_* variables as flags: keep the caller's out of it.
    std::vector<char*> envp;
    for (char** e = environ; e && *e; ++e)
        if (std::strncmp(*e, "ETCD_", 5) != 0) envp.push_back(*e);
    envp.push_back(nullptr);
    pid_t const parent = ::getpid();

    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    if (pid_ == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive a crashed test binary
        if (::getppid() != parent) ::_exit(127);
        int devnull = ::open("/dev/null", O_RDWR);
        if (devnull >= 0) {
            ::dup2(devnull, STDIN_FILENO);
            ::dup2(devnull, STDOUT_FILENO);
        }
        ::dup2(log_fd_, STDERR_FILENO);
        ::execve(argv[0], argv.data(), envp.data());
        ::_exit(127);
    }
    pidfd_ = open_pidfd(pid_);
    if (opts.wait_ready) wait_ready(opts.startup_timeout);
}

etcd_process::~etcd_process() { cleanup(); }

void etcd_process::cleanup() noexcept {
    if (pid_ > 0 && !status_) {
        ::kill(pid_, SIGKILL);
        wait_exit(10s);
    }
    pid_ = -1;
    status_.reset();
    if (pidfd_ >= 0) ::close(pidfd_);
    pidfd_ = -1;
    if (log_fd_ >= 0) ::close(log_fd_);
    log_fd_ = -1;
    if (!data_dir_.empty()) {
        std::error_code ec;
        std::filesystem::remove_all(data_dir_, ec);
        data_dir_.clear();
    }
}

std::string etcd_process::client_url() const { return "http://127.0.0.1:" + std::to_string(client_port_); }

void etcd_process::wait_ready(std::chrono::milliseconds timeout) {
    auto const deadline = steady::now() + timeout;
    std::string last;
    for (;;) {
        if (!running())
            throw std::runtime_error("etcd " + name_ + " exited during startup (wait status " +
                                     std::to_string(status_.value_or(-1)) + ")\n--- etcd log ---\n" + tail(log()));
        try {
            http_client c("127.0.0.1", client_port_);
            request_options o;
            o.timeout = 1s;
            auto const r = c.get("/health", o);
            if (r.status == 200 && r.body.find("\"health\":\"true\"") != std::string::npos) return;
            last = std::to_string(r.status) + " " + r.body;
        } catch (http_error const& e) {
            last = e.what();
        }
        if (steady::now() >= deadline)
            throw std::runtime_error("etcd " + name_ + " not healthy within " + std::to_string(timeout.count()) +
                                     " ms (last: " + last + ")\n--- etcd log ---\n" + tail(log()));
        std::this_thread::sleep_for(20ms);  // readiness polling
    }
}

std::optional<int> etcd_process::wait_exit(std::chrono::milliseconds timeout) {
    if (status_) return status_;
    auto const deadline = steady::now() + timeout;
    for (;;) {
        int st = 0;
        pid_t r = ::waitpid(pid_, &st, WNOHANG);
        if (r == pid_) {
            status_ = st;
            return status_;
        }
        if (r < 0 && errno != EINTR) return std::nullopt;
        if (steady::now() >= deadline) return std::nullopt;
        if (pidfd_ >= 0) {
            pollfd p{pidfd_, POLLIN, 0};
            ::poll(&p, 1, remaining_ms(deadline));
        } else {
            ::usleep(2000);
        }
    }
}

std::optional<int> etcd_process::stop(int sig, std::chrono::milliseconds timeout) {
    if (status_) return status_;
    ::kill(pid_, sig);
    return wait_exit(timeout);
}

void etcd_process::kill() {
    if (status_ || pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    if (!wait_exit(10s)) throw std::runtime_error("etcd " + name_ + " did not exit after SIGKILL");
}

bool etcd_process::running() {
    if (status_) return false;
    int st = 0;
    pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
        status_ = st;
        return false;
    }
    return true;
}

std::optional<etcd_member_status> etcd_process::status(std::chrono::milliseconds timeout) {
    if (!running()) return std::nullopt;
    try {
        http_client c("127.0.0.1", client_port_);
        request_options o;
        o.timeout = timeout;
        auto const r = c.request("POST", "/v3/maintenance/status", "{}", o);
        if (r.status != 200) return std::nullopt;
        boost::system::error_code ec;
        auto const v = boost::json::parse(r.body, ec);
        if (ec || !v.is_object()) return std::nullopt;
        auto const& obj = v.get_object();
        etcd_member_status s;
        auto const* h = obj.if_contains("header");
        if (!h || !h->is_object()) return std::nullopt;
        auto const member = u64_field(h->get_object(), "member_id");
        auto const leader = u64_field(obj, "leader");
        if (!member || !leader) return std::nullopt;
        s.member_id = *member;
        s.leader = *leader;
        return s;
    } catch (http_error const&) {
        return std::nullopt;
    }
}

std::string etcd_process::log() const { return log_fd_ >= 0 ? read_all(log_fd_) : std::string(); }

// ---- etcd_cluster -----------------------------------------------------------------------

etcd_cluster::etcd_cluster(std::size_t n, std::chrono::milliseconds startup_timeout) {
    for (int attempt = 1;; ++attempt) {
        try {
            start(n, startup_timeout);
            return;
        } catch (std::exception const&) {
            // A port found free was taken before etcd bound it: new ports.
            bool const retry = attempt < 5 && port_clash(logs());
            members_.clear();
            if (!retry) throw;
        }
    }
}

void etcd_cluster::start(std::size_t n, std::chrono::milliseconds startup_timeout) {
    auto const ports = free_loopback_ports(2 * n);
    std::string const token = unique_token();
    std::string initial;
    for (std::size_t i = 0; i < n; ++i) {
        if (!initial.empty()) initial += ',';
        initial += "m" + std::to_string(i) + "=http://127.0.0.1:" + std::to_string(ports[2 * i + 1]);
    }
    // All members first (none is healthy before a quorum exists), then wait.
    for (std::size_t i = 0; i < n; ++i) {
        etcd_options o;
        o.name = "m" + std::to_string(i);
        o.client_port = ports[2 * i];
        o.peer_port = ports[2 * i + 1];
        o.initial_cluster = initial;
        o.cluster_token = token;
        o.wait_ready = false;
        members_.push_back(std::make_unique<etcd_process>(o));
    }
    try {
        for (auto& m : members_) m->wait_ready(startup_timeout);
    } catch (std::exception const& e) {
        throw std::runtime_error(std::string(e.what()) + "\n--- all members ---\n" + logs());
    }
}

etcd_cluster::~etcd_cluster() = default;  // each member SIGKILLs itself and removes its data

std::vector<std::string> etcd_cluster::client_urls() const {
    std::vector<std::string> out;
    for (auto const& m : members_) out.push_back(m->client_url());
    return out;
}

std::size_t etcd_cluster::leader_index(std::chrono::milliseconds timeout) {
    auto const deadline = steady::now() + timeout;
    for (;;) {
        std::vector<std::optional<etcd_member_status>> st;
        for (auto& m : members_) st.push_back(m->status());
        for (auto const& s : st) {
            if (!s || s->leader == 0) continue;
            for (std::size_t j = 0; j < members_.size(); ++j)
                if (st[j] && st[j]->member_id == s->leader) return j;
        }
        if (steady::now() >= deadline)
            throw std::runtime_error("no etcd leader among the running members within " +
                                     std::to_string(timeout.count()) + " ms\n" + logs());
        std::this_thread::sleep_for(20ms);  // polling the cluster's state
    }
}

std::string etcd_cluster::logs() const {
    std::string out;
    for (auto const& m : members_) out += "--- " + m->name() + " ---\n" + tail(m->log(), 3000);
    return out;
}

}  // namespace tenure::itest
