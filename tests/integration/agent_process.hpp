// Runs the real `tenure agent` binary as a child process for one test.
//
// The constructor starts `tenure agent -http-addr 127.0.0.1:0
// -session-ttl-min 100ms ...`, reads the one line the agent prints on stdout
// once it listens (`tenure agent listening on http://127.0.0.1:PORT`) and
// parses the port. The destructor sends SIGTERM, waits for the exit, and
// sends SIGKILL if the agent has not exited after a grace period. stderr (the
// agent's log) goes to an unlinked temporary file the tests print when they fail.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

namespace tenure::itest {

struct agent_options {
    std::string binary;  // empty: TENURE_BINARY (the build's `tenure`)
    std::string node = "itest-node";
    std::string datacenter = "itest-dc";
    std::string session_ttl_min = "100ms";
    std::string http_addr = "127.0.0.1:0";  // or unix:///path
    std::vector<std::string> extra_args;
    std::chrono::milliseconds startup_timeout{15000};
};

class agent_process {
public:
    explicit agent_process(agent_options opts = {});
    ~agent_process();
    agent_process(agent_process const&) = delete;
    agent_process& operator=(agent_process const&) = delete;

    pid_t pid() const noexcept { return pid_; }
    std::uint16_t port() const noexcept { return port_; }  // 0 on a Unix socket
    // The address from the banner: http://127.0.0.1:PORT or unix:///path.
    std::string const& address() const noexcept { return address_; }
    std::string const& banner() const noexcept { return banner_; }

    // Sends `sig` and waits for the process to exit. Returns the raw wait
    // status, or nullopt when it did not exit within `timeout` (it is then
    // still running and the destructor will SIGKILL it).
    std::optional<int> stop(int sig, std::chrono::milliseconds timeout);
    // True while the process has not exited (reaps it if it has).
    bool running();
    // Raw wait status once reaped.
    std::optional<int> exit_status() const noexcept { return status_; }

    // Whatever the agent wrote to stdout after its first line (read once it exited).
    std::string remaining_stdout();
    // The agent's stderr so far.
    std::string log() const;
    // The sum of the agent's Prometheus samples (/v1/agent/metrics) on lines
    // that start with `prefix`, e.g. `tenure_http_requests_total{method="PUT",endpoint="txn"`.
    double metric(std::string const& prefix) const;

private:
    void await_banner(std::chrono::milliseconds startup_timeout);
    std::optional<int> wait_exit(std::chrono::milliseconds timeout);

    pid_t pid_ = -1;
    int stdout_fd_ = -1;
    int pidfd_ = -1;
    std::uint16_t port_ = 0;
    std::string address_;
    std::string banner_;
    std::string pending_stdout_;  // bytes read past the first line
    int log_fd_ = -1;  // the agent's stderr (an unlinked temporary file)
    std::optional<int> status_;
};

}  // namespace tenure::itest
