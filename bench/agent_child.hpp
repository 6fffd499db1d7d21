// The `tenure agent` binary as a child process, for the benches that talk raw
// HTTP to it and do not link tenure (agent_load, durability): fork + exec,
// then the address line the agent prints on stdout once it listens.
#pragma once

#include <chrono>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include <csignal>
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <unistd.h>

#ifndef TENURE_BINARY
#define TENURE_BINARY "tenure"  // the build passes the path of the tenure_cli target
#endif

namespace bench {

struct agent_child {
    pid_t pid = -1;
    unsigned short port = 0;  // on 127.0.0.1
    int stdout_fd = -1;       // the agent's stdout; the caller closes it once the agent is stopped
};

// Starts `binary agent -http-addr 127.0.0.1:0 -log-level warn <flags>` (it gets
// SIGKILL if the bench dies first) and waits up to 15 s for its address line.
inline agent_child start_agent_child(std::string const& binary, std::vector<std::string> const& flags) {
    std::vector<std::string> args = {binary, "agent", "-http-addr", "127.0.0.1:0", "-log-level", "warn"};
    args.insert(args.end(), flags.begin(), flags.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
    pid_t parent = ::getpid();
    pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != parent) ::_exit(127);  // the bench died before prctl
        ::dup2(fds[1], STDOUT_FILENO);
        ::execv(argv[0], argv.data());
        ::_exit(127);
    }
    ::close(fds[1]);
    std::string line;
    auto const deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    while (line.find('\n') == std::string::npos) {
        pollfd p{fds[0], POLLIN, 0};
        int left = static_cast<int>(
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count());
        if (left <= 0 || ::poll(&p, 1, left) <= 0) throw std::runtime_error("the agent printed no address line");
        char buf[256];
        ssize_t r = ::read(fds[0], buf, sizeof buf);
        if (r <= 0) throw std::runtime_error("the agent exited before printing its address (" + binary + ")");
        line.append(buf, static_cast<std::size_t>(r));
    }
    line.resize(line.find('\n'));
    agent_child c;
    c.pid = pid;
    c.stdout_fd = fds[0];
    c.port = static_cast<unsigned short>(std::stoul(line.substr(line.rfind(':') + 1)));
    return c;
}

}  // namespace bench
