// A client-only downstream program: it starts `tenure agent` as a separate
// process (argv[1] is the tenure binary), reads the address from its first
// line, and runs one election over HTTP: acquire, check the token, release,
// close. Exit 0 on success. Built by tests/consumers/client_only.
#include <tenure/consul/client.hpp>
#include <tenure/election.hpp>
#include <tenure/leadership_scope.hpp>
#include <tenure/session.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

#include <csignal>
#include <cstdio>
#include <exception>
#include <iostream>
#include <stdexcept>
#include <string>

#include <sys/wait.h>
#include <unistd.h>

namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

struct agent_process {
    pid_t pid = -1;
    std::string address;  // "http://127.0.0.1:PORT"

    explicit agent_process(char const* tenure) {
        int out[2];
        if (pipe(out) != 0) throw std::runtime_error("pipe failed");
        pid = fork();
        if (pid == 0) {
            dup2(out[1], STDOUT_FILENO);
            close(out[0]);
            close(out[1]);
            execl(tenure, tenure, "agent", "-http-addr", "127.0.0.1:0", "-session-ttl-min", "1s", "-log-level",
                  "error", static_cast<char*>(nullptr));
            _exit(127);
        }
        close(out[1]);
        // The agent's first stdout line: "tenure agent listening on http://127.0.0.1:PORT".
        std::string line;
        char c;
        while (read(out[0], &c, 1) == 1 && c != '\n') line += c;
        close(out[0]);
        auto at = line.find("http://");
        if (at == std::string::npos) throw std::runtime_error("no address in the agent's first line: '" + line + "'");
        address = line.substr(at);
    }
    ~agent_process() {
        if (pid > 0) {
            kill(pid, SIGTERM);
            waitpid(pid, nullptr, 0);
        }
    }
};

asio::awaitable<void> one_election(tenure::consul::client& consul) {
    tenure::session_options options;
    options.ttl = 2s;
    options.lock_delay = 0s;
    tenure::session session = co_await tenure::session::create(consul, options);
    tenure::election election{session, "consumer/leader", "client-only"};
    tenure::leadership_scope lead = co_await election.acquire();
    if (lead.token() == 0) throw std::runtime_error("no fencing token");
    std::cout << "leader of " << election.key() << " with token " << lead.token() << '\n';
    co_await lead.release();
    co_await session.close();
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::cerr << "usage: consumer <path to the tenure binary>\n";
        return 2;
    }
    try {
        agent_process agent{argv[1]};
        asio::io_context ioc{1};
        tenure::consul::client consul{ioc.get_executor(), {.address = agent.address}};
        auto done = asio::co_spawn(ioc, one_election(consul), asio::use_future);
        ioc.run();
        done.get();
    } catch (std::exception const& e) {
        std::cerr << "consumer: FAILED: " << e.what() << '\n';
        return 1;
    }
    std::cout << "consumer: ok\n";
    return 0;
}
