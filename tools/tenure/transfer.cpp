// `tenure transfer [-to NAME] <prefix>`: operator switchover. Asks the holder
// of <prefix>/.lock to hand the lock to the waiting candidate named NAME (its
// session's name), or to the best one, by writing the request key
// <prefix>/.lock.transfer that a tenure holder watches
// (election_options::accept_transfer_requests; `tenure lock` does). Waits
// until the key has a new holder and prints it:
//   transferred to name="z" session=<session id> lock_index=7
#include "cli.hpp"

#include "consul/candidates.hpp"
#include "consul/lock.hpp"
#include "net/duration.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <iostream>

namespace tenure::cli {

namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

std::string names_of(std::vector<candidate_info> const& live, std::string const& holder) {
    std::string out;
    for (auto const& c : live) {
        if (c.session == holder) continue;
        if (!out.empty()) out += ", ";
        out += quote(c.name) + " (" + c.session + ")";
    }
    return out.empty() ? "none" : out;
}

asio::awaitable<int> transfer(consul::client& client, std::string key, std::string to,
                              std::chrono::nanoseconds timeout) {
    auto const& c = detail::coro(client);
    auto const deadline = steady::now() + std::chrono::duration_cast<steady::duration>(timeout);
    auto held = co_await c.kv_get(key, detail::consistent_read());
    if (!held.value || held.value->session.empty()) {
        std::cerr << "tenure transfer: nobody holds " << quote(key) << '\n';
        co_return 1;
    }
    std::string const holder = held.value->session;
    auto reg = co_await detail::read_registry(client, key, false);
    std::optional<candidate_info> target;
    if (!to.empty()) {
        target = detail::find_candidate(reg.live, to, holder);
        if (!target) {
            std::cerr << "tenure transfer: no waiting candidate named " << quote(to) << " for " << quote(key)
                      << " (waiting: " << names_of(reg.live, holder) << ")\n";
            co_return 1;
        }
    } else if (names_of(reg.live, holder) == "none") {
        std::cerr << "tenure transfer: no candidate is waiting for " << quote(key) << '\n';
        co_return 1;
    }

    auto const request = detail::transfer_request_key(key);
    consul::put_options po;
    po.flags = detail::transfer_flag_value;
    std::string to_session;
    if (target) to_session = target->session;
    std::string body = detail::encode_transfer_request(to_session);
    co_await c.kv_put(request, std::move(body), po);

    // Wait for the key to change hands (blocking queries on the key).
    std::uint64_t index = held.meta.index;
    std::optional<consul::kv_pair> now;
    for (;;) {
        auto const left = deadline - steady::now();
        if (left <= steady::duration::zero()) break;
        auto r = co_await c.kv_get(key, detail::consistent_read(index, left));
        if (r.value && r.value->session != holder) {
            now = std::move(r.value);
            break;
        }
        if (!r.value) {
            now = consul::kv_pair{};
            break;
        }
        index = consul::next_wait_index(index, r.meta.index);
    }
    // Withdraw the request if the holder left it (a holder that does not take requests).
    try {
        auto left = co_await c.kv_get(request, detail::consistent_read());
        if (left.value) co_await c.kv_delete(request, left.value->modify_index);
    } catch (std::exception const&) {
    }
    if (!now) {
        std::cerr << "tenure transfer: the holder (session " << holder << ") did not hand " << quote(key)
                  << " over within " << detail::format_go_duration(timeout)
                  << ": it does not honour transfer requests (a consul lock process, or a tenure election"
                     " without accept_transfer_requests)\n";
        co_return 1;
    }
    if (now->session.empty()) {
        std::cerr << "tenure transfer: " << quote(key) << " was released (or deleted), not handed over\n";
        co_return 1;
    }
    std::string name;
    for (auto const& cand : reg.live)
        if (cand.session == now->session) name = cand.name;
    std::cout << "transferred to name=" << quote(name) << " session=" << now->session
              << " lock_index=" << now->lock_index << std::endl;
    if (target && now->session != target->session) {
        std::cerr << "tenure transfer: the lock went to another candidate than " << quote(to) << '\n';
        co_return 1;
    }
    co_return 0;
}

}  // namespace

void transfer_help(std::ostream& os) {
    os << "Usage: tenure transfer [options] <prefix>\n\n"
          "  Operator switchover: asks the holder of the lock <prefix>/.lock (as taken\n"
          "  by `tenure lock <prefix>`) to hand it to a waiting candidate, in one step\n"
          "  (no gap, no lock-delay, the fencing token grows by one). With -to NAME the\n"
          "  candidate whose session is named NAME (tenure lock -name NAME) or whose\n"
          "  session id is NAME; without it the best one (highest -priority, then the\n"
          "  longest waiting). `tenure leader -candidates <prefix>/.lock` lists them.\n\n"
          "  The request is the key <prefix>/.lock.transfer, which a tenure holder\n"
          "  watches; the holder's child is stopped as on a lock loss. When the key has\n"
          "  its new holder this prints, on stdout:\n\n"
          "    transferred to name=\"<name>\" session=<session id> lock_index=<LockIndex>\n\n"
          "  Exit status: 0 once the lock has moved; 1 for bad usage, an unreachable\n"
          "  agent, nobody holding the lock, an unknown NAME, no candidate waiting, a\n"
          "  holder that does not honour transfer requests (a consul lock process) by\n"
          "  -timeout, or a lock released instead of handed over.\n\n"
          "Options:\n\n"
          "  -to=<string>\n"
          "     The session name (or id) of the candidate to hand over to. Default: the\n"
          "     best candidate\n\n"
          "  -timeout=<duration>\n"
          "     How long to wait for the holder to hand over. Default: 10s\n\n";
    http_flags::help(os);
}

int run_transfer(std::vector<std::string> args) {
    std::string to;
    std::chrono::nanoseconds timeout = 10s;
    http_flags http;
    flag_set flags;
    flags.add_string("to", to);
    flags.add_duration("timeout", timeout);
    http.add_to(flags);
    auto const rest = flags.parse(args);
    if (flags.help_requested()) {
        transfer_help(std::cout);
        return 0;
    }
    if (rest.size() != 1)
        throw usage_error("exactly one prefix must be specified (got " + std::to_string(rest.size()) +
                          "); flags go before the prefix");
    if (timeout.count() <= 0) throw usage_error("-timeout must be > 0");
    std::string prefix = rest.front();
    while (!prefix.empty() && prefix.front() == '/') prefix.erase(0, 1);
    while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
    std::string const key = prefix.empty() ? std::string(".lock") : prefix + "/.lock";

    asio::io_context io{1};
    std::unique_ptr<consul::client> client;
    try {
        client = std::make_unique<consul::client>(io.get_executor(), http.config());
    } catch (std::exception const& e) {
        std::cerr << "tenure transfer: Error connecting to Consul agent: " << describe(e) << '\n';
        return 1;
    }
    int rc = 1;
    asio::co_spawn(io, transfer(*client, key, to, timeout), [&](std::exception_ptr e, int code) {
        rc = code;
        if (e) {
            try {
                std::rethrow_exception(e);
            } catch (std::exception const& ex) {
                std::cerr << "tenure transfer: " << describe(ex) << '\n';
            }
            rc = 1;
        }
        client->close();
    });
    io.run();
    return rc;
}

}  // namespace tenure::cli
