#include "agent_process.hpp"
#include "http_client.hpp"
#include "process_io.hpp"

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string_view>

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef TENURE_BINARY
#error "TENURE_BINARY must name the tenure executable"
#endif

namespace tenure::itest {

namespace {

using steady = std::chrono::steady_clock;

std::runtime_error failure(std::string what, int log_fd) {
    return std::runtime_error(what + "\n--- agent stderr ---\n" + read_all(log_fd));
}

}  // namespace

agent_process::agent_process(agent_options opts) {
    std::string const binary = opts.binary.empty() ? std::string(TENURE_BINARY) : opts.binary;
    std::vector<std::string> args = {binary, "agent", "-http-addr", opts.http_addr, "-session-ttl-min",
                                     opts.session_ttl_min};
    if (!opts.node.empty()) args.insert(args.end(), {"-node", opts.node});
    if (!opts.datacenter.empty()) args.insert(args.end(), {"-datacenter", opts.datacenter});
    args.insert(args.end(), opts.extra_args.begin(), opts.extra_args.end());

    // The agent's stderr goes to an anonymous file: unlinked at once, so nothing
    // is left behind even if the test binary crashes.
    char tmpl[] = "/tmp/tenure-itest-agent-XXXXXX";
    log_fd_ = ::mkostemp(tmpl, O_CLOEXEC);
    if (log_fd_ < 0) throw std::runtime_error(std::string("mkostemp: ") + std::strerror(errno));
    ::unlink(tmpl);

    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
        ::close(log_fd_);
        throw std::runtime_error(std::string("pipe2: ") + std::strerror(errno));
    }

    // Everything the child touches is prepared before fork (the test process may have threads).
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t const parent = ::getpid();

    pid_ = ::fork();
    if (pid_ < 0) {
        ::close(fds[0]);
        ::close(fds[1]);
        ::close(log_fd_);
        throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    }
    if (pid_ == 0) {
        // The agent must not outlive a crashed test binary.
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != parent) ::_exit(127);
        ::dup2(fds[1], STDOUT_FILENO);
        ::dup2(log_fd_, STDERR_FILENO);
        int devnull = ::open("/dev/null", O_RDONLY);
        if (devnull >= 0) ::dup2(devnull, STDIN_FILENO);
        ::execv(argv[0], argv.data());
        ::_exit(127);
    }
    ::close(fds[1]);
    stdout_fd_ = fds[0];
    pidfd_ = open_pidfd(pid_);
    try {
        await_banner(opts.startup_timeout);
    } catch (...) {
        // No destructor runs for a half-built object: reap the child here.
        if (!status_) {
            ::kill(pid_, SIGKILL);
            wait_exit(std::chrono::milliseconds(5000));
        }
        ::close(stdout_fd_);
        if (pidfd_ >= 0) ::close(pidfd_);
        ::close(log_fd_);
        throw;
    }
}

void agent_process::await_banner(std::chrono::milliseconds startup_timeout) {
    // Await the first stdout line: the agent prints it once it is listening.
    auto const deadline = steady::now() + startup_timeout;
    std::string buf;
    while (buf.find('\n') == std::string::npos) {
        pollfd p{stdout_fd_, POLLIN, 0};
        int r = ::poll(&p, 1, remaining_ms(deadline));
        if (r < 0 && errno == EINTR) continue;
        if (r == 0) throw failure("tenure agent printed no line within the startup timeout", log_fd_);
        char chunk[256];
        ssize_t n = ::read(stdout_fd_, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            wait_exit(std::chrono::milliseconds(2000));
            throw failure("tenure agent closed stdout before printing its address (wait status " +
                              std::to_string(status_.value_or(-1)) + ")",
                          log_fd_);
        }
        buf.append(chunk, static_cast<std::size_t>(n));
    }
    auto nl = buf.find('\n');
    banner_ = buf.substr(0, nl);
    pending_stdout_ = buf.substr(nl + 1);

    constexpr std::string_view unix_prefix = "tenure agent listening on unix://";
    if (banner_.compare(0, unix_prefix.size(), unix_prefix) == 0) {
        address_ = banner_.substr(unix_prefix.size() - 7);
        return;
    }
    constexpr std::string_view prefix = "tenure agent listening on http://127.0.0.1:";
    if (banner_.compare(0, prefix.size(), prefix) != 0)
        throw failure("unexpected first stdout line: '" + banner_ + "'", log_fd_);
    std::string_view digits = std::string_view(banner_).substr(prefix.size());
    unsigned long port = 0;
    if (digits.empty() || digits.size() > 5 || digits.find_first_not_of("0123456789") != std::string_view::npos ||
        (port = std::stoul(std::string(digits))) == 0 || port > 65535)
        throw failure("no port in the first stdout line: '" + banner_ + "'", log_fd_);
    port_ = static_cast<std::uint16_t>(port);
    address_ = "http://127.0.0.1:" + std::to_string(port_);
}

agent_process::~agent_process() {
    if (pid_ > 0 && !status_) {
        if (!stop(SIGTERM, std::chrono::milliseconds(5000))) {
            ::kill(pid_, SIGKILL);
            wait_exit(std::chrono::milliseconds(5000));
        }
    }
    if (stdout_fd_ >= 0) ::close(stdout_fd_);
    if (pidfd_ >= 0) ::close(pidfd_);
    if (log_fd_ >= 0) ::close(log_fd_);
}

std::optional<int> agent_process::wait_exit(std::chrono::milliseconds timeout) {
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
            // The pidfd becomes readable when the process exits.
            pollfd p{pidfd_, POLLIN, 0};
            ::poll(&p, 1, remaining_ms(deadline));
        } else {
            ::usleep(2000);  // kernels without pidfd_open
        }
    }
}

std::optional<int> agent_process::stop(int sig, std::chrono::milliseconds timeout) {
    if (status_) return status_;
    ::kill(pid_, sig);
    return wait_exit(timeout);
}

bool agent_process::running() {
    if (status_) return false;
    int st = 0;
    pid_t r = ::waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
        status_ = st;
        return false;
    }
    return true;
}

std::string agent_process::remaining_stdout() {
    std::string out = std::move(pending_stdout_);
    pending_stdout_.clear();
    if (stdout_fd_ < 0) return out;
    int flags = ::fcntl(stdout_fd_, F_GETFL);
    ::fcntl(stdout_fd_, F_SETFL, flags | O_NONBLOCK);
    char chunk[4096];
    for (;;) {
        ssize_t n = ::read(stdout_fd_, chunk, sizeof chunk);
        if (n > 0) {
            out.append(chunk, static_cast<std::size_t>(n));
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        break;  // EOF or nothing more for now
    }
    ::fcntl(stdout_fd_, F_SETFL, flags);
    return out;
}

std::string agent_process::log() const { return log_fd_ >= 0 ? read_all(log_fd_) : std::string(); }

double agent_process::metric(std::string const& prefix) const {
    http_client http("127.0.0.1", port_);
    auto const text = http.get("/v1/agent/metrics?format=prometheus").body;
    double sum = 0;
    for (std::size_t at = text.find("\n" + prefix); at != std::string::npos; at = text.find("\n" + prefix, at + 1)) {
        auto const line_end = text.find('\n', at + 1);
        auto const line = text.substr(at + 1, line_end - at - 1);
        sum += std::stod(line.substr(line.rfind(' ') + 1));
    }
    return sum;
}

}  // namespace tenure::itest
