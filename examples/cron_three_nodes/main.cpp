// The README's main demo: a "nightly report" job that must run on exactly one
// of three nodes.
//
//   cron_three_nodes                 starts a tenure agent and three node processes,
//                                    kills the leader midway, prints the timeline and
//                                    verifies that no two nodes ever ran at once
//   cron_three_nodes --node NAME --consul URL
//                                    one node: campaign, run the report under the scope
//
// Each node is the whole story of tenure in a few lines (node_main below).
#include <tenure/consul/client.hpp>
#include <tenure/election.hpp>

#define BOOST_PROCESS_V2_HEADER_ONLY 1
#include <boost/asio.hpp>
#include <boost/process/v2.hpp>

#include <algorithm>
#include <filesystem>
#include <cstdio>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace asio = boost::asio;
namespace bp = boost::process::v2;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

namespace {

std::int64_t now_ns() { return std::chrono::duration_cast<std::chrono::nanoseconds>(steady::now().time_since_epoch()).count(); }

// ============================================================================
// One node.

// A node reports what it does on stdout, one event per line, stamped with the
// monotonic clock (shared by every process on the machine).
void emit(std::string const& node, std::string const& kind, std::string const& detail = {}) {
    std::printf("EVENT %lld %s %s %s\n", static_cast<long long>(now_ns()), node.c_str(), kind.c_str(), detail.c_str());
    std::fflush(stdout);
}

// The leader's work: one report a second, stamped with the fencing token.
// Cancelled (the timer wait throws) the moment leadership is lost.
asio::awaitable<void> run_report(tenure::leadership_scope& lead, std::string name) {
    emit(name, "work-start", std::to_string(lead.token()));
    struct stop_note {
        std::string name;
        ~stop_note() { emit(name, "work-stop"); }
    } note{name};
    asio::steady_timer tick(co_await asio::this_coro::executor);
    for (int n = 1;; ++n) {
        emit(name, "report", std::to_string(n) + " " + std::to_string(lead.token()));
        tick.expires_after(1s);
        co_await tick.async_wait(asio::use_awaitable);
    }
}

asio::awaitable<void> node_main(tenure::consul::client& consul, std::string name) {
    tenure::campaign_options options;
    options.session.name = name;
    options.session.ttl = 2s;         // the agent runs with -session-ttl-min 1s
    options.session.lock_delay = 3s;  // time for a partitioned old leader to notice and stop
    options.key = "service/nightly-report/leader";
    options.value = name;
    // Every election and loss of the campaign is an event of its sessions.
    options.session.on_event = [name](tenure::leadership_event const& e) {
        if (e.kind == tenure::leadership_event_kind::acquired) emit(name, "elected", std::to_string(e.token));
        else if (e.kind == tenure::leadership_event_kind::lost && !e.key.empty()) emit(name, "lost", e.reason.message());
    };
    // (Named, not a temporary: g++ 12 destroys temporaries of a co_await
    // expression twice.)
    std::function<asio::awaitable<void>(tenure::leadership_scope&)> body =
        [name](tenure::leadership_scope& lead) { return run_report(lead, name); };
    co_await tenure::campaign(consul, options, body);
}

int run_node(std::string name, std::string consul_url) {
    asio::io_context io;
    tenure::consul::client_config config;
    config.address = consul_url;
    tenure::consul::client consul(io.get_executor(), config);
    asio::cancellation_signal stop;
    // SIGTERM: cancel the campaign, which releases the key and destroys the
    // session, so the next node takes over without lock-delay.
    asio::signal_set signals(io, SIGINT, SIGTERM);
    signals.async_wait([&](boost::system::error_code ec, int) {
        if (!ec) {
            emit(name, "shutdown");
            stop.emit(asio::cancellation_type::terminal);
        }
    });
    emit(name, "started");
    asio::co_spawn(io, node_main(consul, name),
                   asio::bind_cancellation_slot(stop.slot(), [&](std::exception_ptr) {
                       emit(name, "exit");
                       signals.cancel();
                   }));
    io.run();
    return 0;
}

// ============================================================================
// The orchestrator.

struct event {
    double t;  // seconds since the demo started
    std::string node, kind, detail;
};

class demo {
public:
    demo(asio::io_context& io, std::string self, std::string tenure_bin)
        : io_(io), self_(std::move(self)), tenure_bin_(std::move(tenure_bin)), start_ns_(now_ns()) {}

    asio::awaitable<int> run();

private:
    double since_start(std::int64_t ns) const { return static_cast<double>(ns - start_ns_) / 1e9; }
    void print(double t, std::string const& who, std::string const& what) {
        std::printf("%+8.3fs  %-7s %s\n", t, who.c_str(), what.c_str());
        std::fflush(stdout);
    }
    asio::awaitable<void> read_node(asio::readable_pipe& pipe);
    asio::awaitable<void> read_agent_log(asio::readable_pipe& pipe);
    asio::awaitable<void> wait_for(std::function<bool()> cond, std::chrono::seconds limit);
    std::optional<std::string> current_leader() const;
    bool verify();

    asio::io_context& io_;
    std::string self_, tenure_bin_;
    std::int64_t start_ns_;
    std::vector<event> events_;
    std::map<std::string, double> killed_at_;
    asio::steady_timer changed_{io_, steady::time_point::max()};
    double invalidated_at_ = -1;
};

asio::awaitable<void> demo::read_node(asio::readable_pipe& pipe) {
    std::string buf;
    for (;;) {
        auto [ec, n] = co_await asio::async_read_until(pipe, asio::dynamic_buffer(buf), '\n',
                                                       asio::as_tuple(asio::use_awaitable));
        if (ec) co_return;
        std::string line = buf.substr(0, n - 1);
        buf.erase(0, n);
        std::istringstream in(line);
        std::string tag, node, kind, detail;
        long long ns = 0;
        in >> tag >> ns >> node >> kind;
        std::getline(in >> std::ws, detail);
        if (tag != "EVENT") continue;
        event e{since_start(ns), node, kind, detail};
        events_.push_back(e);
        changed_.cancel();
        if (kind == "elected") {
            std::string extra;
            if (invalidated_at_ >= 0) {
                extra = "  (lock-delay waited " + std::to_string(e.t - invalidated_at_).substr(0, 5) + "s after the invalidation)";
                invalidated_at_ = -1;
            }
            print(e.t, node, "elected, fencing token " + detail + extra);
        } else if (kind == "report") {
            std::istringstream d(detail);
            int n2 = 0;
            unsigned long long token = 0;
            d >> n2 >> token;
            print(e.t, node, "runs the report #" + std::to_string(n2) + " stamped with token " + std::to_string(token));
        } else if (kind == "lost") {
            print(e.t, node, "lost leadership: " + detail);
        } else if (kind == "work-stop") {
            print(e.t, node, "report job stopped");
        } else if (kind == "shutdown") {
            print(e.t, node, "SIGTERM received: releasing the key, destroying the session");
        }
    }
}

asio::awaitable<void> demo::read_agent_log(asio::readable_pipe& pipe) {
    std::string buf;
    for (;;) {
        auto [ec, n] = co_await asio::async_read_until(pipe, asio::dynamic_buffer(buf), '\n',
                                                       asio::as_tuple(asio::use_awaitable));
        if (ec) co_return;
        std::string line = buf.substr(0, n - 1);
        buf.erase(0, n);
        auto pos = line.find("session invalidated:");
        if (pos == std::string::npos) continue;
        double t = since_start(now_ns());
        std::string who = "?";
        if (auto p = line.find("name=\""); p != std::string::npos) who = line.substr(p + 6, line.find('"', p + 6) - p - 6);
        std::string cause = line.substr(line.rfind("cause=") + 6);
        if (cause == "ttl-expired") {
            invalidated_at_ = t;
            print(t, "agent", "session of " + who + " expired (no renewal for 2 x TTL): key freed, lock-delay 3s starts");
        }
    }
}

asio::awaitable<void> demo::wait_for(std::function<bool()> cond, std::chrono::seconds limit) {
    auto deadline = steady::now() + limit;
    while (!cond()) {
        if (steady::now() >= deadline) throw std::runtime_error("the demo timed out waiting for an event");
        changed_.expires_at(std::min(deadline, steady::now() + 1s));
        co_await changed_.async_wait(asio::as_tuple(asio::use_awaitable));
    }
}

std::optional<std::string> demo::current_leader() const {
    std::map<std::string, bool> leading;
    for (auto const& e : events_) {
        if (e.kind == "work-start") leading[e.node] = true;
        if (e.kind == "work-stop") leading[e.node] = false;
    }
    for (auto const& [node, on] : leading)
        if (on && !killed_at_.count(node)) return node;
    return std::nullopt;
}

// No two nodes ran the report at once, and tokens only grew.
bool demo::verify() {
    struct interval {
        std::string node;
        double from, to;
        unsigned long long token;
    };
    std::vector<interval> terms;
    std::map<std::string, std::size_t> open;
    for (auto const& e : events_) {
        if (e.kind == "work-start") {
            open[e.node] = terms.size();
            terms.push_back({e.node, e.t, 1e18, std::stoull(e.detail)});
        } else if (e.kind == "work-stop" && open.count(e.node)) {
            terms[open[e.node]].to = e.t;
            open.erase(e.node);
        }
    }
    for (auto& [node, idx] : open)
        if (killed_at_.count(node)) terms[idx].to = killed_at_[node];  // SIGKILL ends the work
    bool ok = !terms.empty();
    std::printf("\nVerification (%zu leadership terms):\n", terms.size());
    for (std::size_t i = 0; i < terms.size(); ++i) {
        auto const& a = terms[i];
        std::printf("  %-7s led from %+.3fs to %+.3fs with token %llu\n", a.node.c_str(), a.from, a.to, a.token);
        for (std::size_t j = i + 1; j < terms.size(); ++j) {
            auto const& b = terms[j];
            if (a.from < b.to && b.from < a.to) {
                std::printf("  FAIL: %s and %s ran at the same time\n", a.node.c_str(), b.node.c_str());
                ok = false;
            }
        }
        if (i > 0 && a.token <= terms[i - 1].token) {
            std::printf("  FAIL: token %llu after %llu did not grow\n", a.token, terms[i - 1].token);
            ok = false;
        }
    }
    unsigned long long last = 0;
    for (auto const& e : events_) {
        if (e.kind != "report") continue;
        unsigned long long token = std::stoull(e.detail.substr(e.detail.find(' ') + 1));
        if (token < last) {
            std::printf("  FAIL: a report was stamped with token %llu after %llu\n", token, last);
            ok = false;
        }
        last = token;
    }
    std::printf("%s\n", ok ? "PASS: never two leaders at once; every new term had a larger fencing token."
                           : "FAIL: see above.");
    return ok;
}

asio::awaitable<int> demo::run() {
    auto ex = co_await asio::this_coro::executor;
    // The agent, with short TTLs allowed for the demo.
    asio::readable_pipe agent_out(ex), agent_err(ex);
    bp::process agent(ex, tenure_bin_, {"agent", "-http-addr", "127.0.0.1:0", "-session-ttl-min", "1s", "-node", "demo", "-ui"},
                      bp::process_stdio{{}, agent_out, agent_err});
    std::string buf;
    auto [ec, n] = co_await asio::async_read_until(agent_out, asio::dynamic_buffer(buf), '\n',
                                                   asio::as_tuple(asio::use_awaitable));
    if (ec) throw std::runtime_error("the agent did not start");
    // The first line only: with -ui the agent prints a second one, which the
    // read may have taken in too.
    std::string const line = buf.substr(0, n - 1);
    std::string url = line.substr(line.rfind(' ') + 1);
    print(since_start(now_ns()), "agent", "tenure agent listening on " + url);
    // The agent's live view (-ui): every handover below appears there as it happens.
    print(since_start(now_ns()), "agent", "web UI: " + url + "/ui/ (open it to watch the handovers)");
    print(since_start(now_ns()), "demo", "three nodes campaign for service/nightly-report/leader (TTL 2s, lock-delay 3s)");
    asio::co_spawn(ex, read_agent_log(agent_err), asio::detached);

    std::vector<std::string> names{"node-1", "node-2", "node-3"};
    std::map<std::string, std::unique_ptr<asio::readable_pipe>> pipes;
    std::map<std::string, std::unique_ptr<bp::process>> nodes;
    for (auto const& name : names) {
        pipes[name] = std::make_unique<asio::readable_pipe>(ex);
        std::vector<std::string> node_args{"--node", name, "--consul", url};
        nodes[name] = std::make_unique<bp::process>(ex, self_, node_args, bp::process_stdio{{}, *pipes[name], {}});
        asio::co_spawn(ex, read_node(*pipes[name]), asio::detached);
    }

    auto reports_by = [&](std::string const& node) {
        return std::count_if(events_.begin(), events_.end(),
                             [&](event const& e) { return e.node == node && e.kind == "report"; });
    };
    int exit_code = 1;
    try {
        // 1. Someone leads; let it run a few reports, then SIGKILL it: no release,
        //    no goodbye. The server notices after 2 x TTL and applies lock-delay.
        co_await wait_for([&] { return current_leader().has_value(); }, 10s);
        std::string first = *current_leader();
        co_await wait_for([&] { return reports_by(first) >= 4; }, 10s);
        double t = since_start(now_ns());
        nodes[first]->terminate();  // SIGKILL
        killed_at_[first] = t;
        print(t, "demo", "SIGKILL " + first + " (the leader): it cannot release anything");

        // 2. The takeover waits for detection (TTL) and lock-delay.
        co_await wait_for([&] { return current_leader().has_value(); }, 20s);
        std::string second = *current_leader();
        co_await wait_for([&] { return reports_by(second) >= 3; }, 10s);

        // 3. A clean shutdown releases the key: the last node takes over at once.
        print(since_start(now_ns()), "demo", "SIGTERM " + second + ": a clean handover, no lock-delay");
        ::kill(nodes[second]->id(), SIGTERM);
        co_await wait_for(
            [&] {
                auto l = current_leader();
                return l && *l != second;
            },
            10s);
        std::string third = *current_leader();
        co_await wait_for([&] { return reports_by(third) >= 2; }, 10s);
        print(since_start(now_ns()), "demo", "stopping");
        for (auto const& name : names)
            if (!killed_at_.count(name) && nodes[name]->running()) ::kill(nodes[name]->id(), SIGTERM);
        for (auto const& name : names) {
            if (killed_at_.count(name)) continue;
            co_await nodes[name]->async_wait(asio::as_tuple(asio::use_awaitable));
        }
        // Give the pipes a moment to drain the last events.
        co_await wait_for([&] { return std::count_if(events_.begin(), events_.end(), [](event const& e) {
                                     return e.kind == "exit";
                                 }) >= 2; },
                          5s);
        exit_code = verify() ? 0 : 1;
    } catch (std::exception const& e) {
        std::printf("demo error: %s\n", e.what());
        for (auto& [name, p] : nodes)
            if (p->running()) p->terminate();
    }
    ::kill(agent.id(), SIGTERM);
    co_await agent.async_wait(asio::as_tuple(asio::use_awaitable));
    co_return exit_code;
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> args(argv + 1, argv + argc);
    std::string node, consul_url, tenure_bin = TENURE_BINARY;
    for (std::size_t i = 0; i + 1 < args.size(); i += 2) {
        if (args[i] == "--node") node = args[i + 1];
        else if (args[i] == "--consul") consul_url = args[i + 1];
        else if (args[i] == "--tenure") tenure_bin = args[i + 1];
        else {
            std::cerr << "usage: cron_three_nodes [--tenure PATH] | --node NAME --consul URL\n";
            return 2;
        }
    }
    if (!node.empty()) return run_node(node, consul_url);

    asio::io_context io;
    demo d(io, std::filesystem::read_symlink("/proc/self/exe").string(), tenure_bin);
    int rc = 1;
    asio::co_spawn(io, d.run(), [&](std::exception_ptr e, int code) {
        rc = code;
        if (e) {
            try {
                std::rethrow_exception(e);
            } catch (std::exception const& ex) {
                std::cerr << "demo failed: " << ex.what() << "\n";
            }
            rc = 1;
        }
        io.stop();
    });
    io.run();
    return rc;
}
