// `tenure leader [-watch] <key>`: who holds a lock key (on etcd: who leads an
// election), once or as it changes.
//
// One line per answer on stdout, flushed at once:
//   leader value="node-a" session=<session id> lock_index=3
//   no leader
#include "cli.hpp"

#include <tenure/election.hpp>

#include "consul/candidates.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <csignal>
#include <iostream>
#include <memory>
#include <optional>

namespace tenure::cli {

namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;

std::string leader_line(std::optional<leader_info> const& l) {
    if (!l) return "no leader";
    return "leader value=" + quote(l->value) + " session=" + l->session + " lock_index=" + std::to_string(l->lock_index);
}

// Prints the holder; with `watch`, then every change until cancelled. A read
// that fails after the first answer is retried with a growing pause (a watch
// rides out an agent restart); the first one failing is an error.
asio::awaitable<int> observe(leader_observer& observer, std::string key, bool watch, bool const& interrupted) {
    bool answered = false;
    auto pause = 500ms;
    for (;;) {
        auto [ec, info] = co_await observer.next(asio::as_tuple(asio::use_awaitable));
        if (interrupted) co_return watch ? 0 : 1;
        if (ec) {
            if (!watch || !answered) {
                std::cerr << "tenure leader: Error querying key " << quote(key) << ": " << ec.message() << '\n';
                co_return 1;
            }
            std::cerr << "tenure leader: Error watching key " << quote(key) << ": " << ec.message() << "; retrying in "
                      << std::chrono::duration<double>(pause).count() << "s\n";
            asio::steady_timer t(co_await asio::this_coro::executor, pause);
            auto [tec] = co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
            if (interrupted) co_return 0;
            (void)tec;
            pause = std::min<std::chrono::milliseconds>(pause * 2, 10s);
            continue;
        }
        pause = 500ms;
        answered = true;
        std::cout << leader_line(info) << std::endl;
        if (!watch) co_return 0;
    }
}

std::string candidate_line(candidate_info const& c) {
    return "candidate name=" + quote(c.name) + " session=" + c.session + " priority=" + std::to_string(c.priority) +
           " value=" + quote(c.value) + " since=" + std::to_string(c.since);
}

// -candidates: the waiting candidates, best first, one line each.
asio::awaitable<int> list_candidates(consul::client& client, std::string key) {
    auto reg = co_await detail::read_registry(client, key, false);
    if (reg.live.empty()) std::cout << "no candidates" << std::endl;
    for (auto const& c : reg.live) std::cout << candidate_line(c) << '\n';
    std::cout.flush();
    co_return 0;
}

}  // namespace

void leader_help(std::ostream& os) {
    os << "Usage: tenure leader [options] <key>\n\n"
          "  Prints who holds the lock at <key>, one line on stdout:\n\n"
          "    leader value=\"<value>\" session=<session id> lock_index=<LockIndex>\n"
          "    no leader\n\n"
          "  The value is quoted, with \", \\ and non-printable bytes escaped (\\n, \\xNN).\n"
          "  LockIndex is the lock's fencing token. For a lock taken by\n"
          "  `tenure lock <prefix>` or `consul lock <prefix>` the key is <prefix>/.lock.\n"
          "  A leading '/' of the key is dropped.\n\n"
          "  With -watch it prints the current holder, then one line each time the\n"
          "  holder changes (blocking queries, no polling), until SIGINT or SIGTERM\n"
          "  (exit 0). Errors after the first answer are retried.\n\n"
          "  On etcd (-etcd-endpoints, or ETCDCTL_ENDPOINTS) <key> is the election\n"
          "  name, as for `etcdctl elect -l <name>` (for `tenure lock -etcd-endpoints\n"
          "  ... <prefix>` the prefix): the leader is the oldest key under <key>/,\n"
          "  session is its lease id in hex and lock_index its create revision (the\n"
          "  fencing token). -watch follows one etcd watch.\n\n"
          "  With -candidates it prints the candidates waiting for the key instead,\n"
          "  best first (highest priority, then the longest waiting), one line each\n"
          "  (Consul; their registry is <key>.candidates/<session id>):\n\n"
          "    candidate name=\"<session name>\" session=<id> priority=<N> value=\"<v>\" since=<index>\n"
          "    no candidates\n\n"
          "  Exit status: 0 on success; 1 for bad usage or when the agent (or etcd)\n"
          "  cannot be queried.\n\n"
          "Options:\n\n"
          "  -candidates\n"
          "     List the waiting candidates instead of the holder. Default: false\n\n"
          "  -watch\n"
          "     Keep watching and print every change of holder. Default: false\n\n";
    http_flags::help(os);
    os << '\n';
    etcd_flags::help(os);
}

int run_leader(std::vector<std::string> args) {
    bool watch = false;
    bool candidates = false;
    http_flags http;
    etcd_flags etcd_opts;
    flag_set flags;
    flags.add_bool("watch", watch);
    flags.add_bool("candidates", candidates);
    http.add_to(flags);
    etcd_opts.add_to(flags);
    auto const rest = flags.parse(args);
    if (flags.help_requested()) {
        leader_help(std::cout);
        return 0;
    }
    if (rest.empty()) throw usage_error("a key must be specified (got none)");
    if (rest.size() > 1)
        throw usage_error("exactly one key must be specified (got " + std::to_string(rest.size()) +
                          "); flags go before the key");
    bool const on_etcd = etcd_opts.selected(flags);
    std::string key = rest.front();
    while (!key.empty() && key.front() == '/') key.erase(0, 1);
    if (key.empty()) throw usage_error("the key must not be empty (got " + quote(rest.front()) + ")");

    if (candidates) {
        if (on_etcd) throw usage_error("-candidates is for Consul (etcd's candidates are the keys under <key>/)");
        if (watch) throw usage_error("-candidates and -watch do not go together");
        asio::io_context io{1};
        consul::client client(io.get_executor(), http.config());
        int rc = 1;
        asio::co_spawn(io, list_candidates(client, key), [&](std::exception_ptr e, int code) {
            rc = code;
            if (e) {
                try {
                    std::rethrow_exception(e);
                } catch (std::exception const& ex) {
                    std::cerr << "tenure leader: Error querying candidates of " << quote(key) << ": " << describe(ex)
                              << '\n';
                }
                rc = 1;
            }
            client.close();
        });
        io.run();
        return rc;
    }

    asio::io_context io{1};
    asio::signal_set signals(io, SIGINT, SIGTERM);
    std::unique_ptr<consul::client> client;
    std::unique_ptr<etcd::client> etcd_client;
    std::unique_ptr<leader_observer> observer;
    try {
        if (on_etcd) {
            etcd_client = std::make_unique<etcd::client>(io.get_executor(), etcd_opts.config());
            observer = std::make_unique<leader_observer>(*etcd_client, key);
        } else {
            client = std::make_unique<consul::client>(io.get_executor(), http.config());
            observer = std::make_unique<leader_observer>(*client, key);
        }
    } catch (std::exception const& e) {
        std::cerr << "tenure leader: Error connecting to " << (on_etcd ? "etcd" : "Consul agent") << ": "
                  << describe(e) << '\n';
        return 1;
    }

    asio::cancellation_signal stop;
    bool interrupted = false;
    int rc = 1;
    signals.async_wait([&](boost::system::error_code ec, int) {
        if (ec) return;
        interrupted = true;
        stop.emit(asio::cancellation_type::terminal);
    });
    asio::co_spawn(io, observe(*observer, key, watch, interrupted),
                   asio::bind_cancellation_slot(stop.slot(), [&](std::exception_ptr e, int code) {
                       rc = code;
                       if (e) {
                           try {
                               std::rethrow_exception(e);
                           } catch (std::exception const& ex) {
                               std::cerr << "tenure leader: " << describe(ex) << '\n';
                           }
                           rc = interrupted && watch ? 0 : 1;
                       }
                       signals.cancel();
                       if (client) client->close();
                       if (etcd_client) etcd_client->close();
                   }));
    io.run();
    return rc;
}

}  // namespace tenure::cli
