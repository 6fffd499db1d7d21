// Snippets of docs/guide/concepts.md (CTest docs.snippet.concepts): session
// states, loss and its reason, fencing, confirm(). Runs against an agent in
// this process; a second client plays "someone else".
#include <tenure/agent.hpp>
#include <tenure/consul/client.hpp>
#include <tenure/election.hpp>
#include <tenure/fence.hpp>
#include <tenure/fenced_write.hpp>

#include <boost/asio.hpp>

#include <iostream>
#include <vector>

namespace asio = boost::asio;
using namespace std::chrono_literals;

int failures = 0;
void expect(bool condition, char const* what) {
    if (!condition) {
        std::cerr << "FAILED: " << what << "\n";
        ++failures;
    }
}

void publish(std::uint64_t token) { std::cout << "published with token " << token << "\n"; }

//[watch_session
void watch(tenure::session_options& options) {
    options.on_event = [](tenure::leadership_event const& e) {
        using kind = tenure::leadership_event_kind;
        auto ms = [](auto d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); };
        switch (e.kind) {
        case kind::jeopardy:
            std::cout << "renewals failing (" << e.reason.message() << "); lease gone in " << ms(e.margin) << " ms\n";
            break;
        case kind::renewed:  // healthy, again after a jeopardy
            break;
        case kind::lost:
            std::cout << (e.key.empty() ? "session" : e.key) << " lost: " << e.reason.message() << "\n";
            break;
        case kind::acquired:
        case kind::released:
            std::cout << to_string(e.kind) << " " << e.key << " token " << e.token << "\n";
            break;
        }
    };
}
//]

//[run_under_scope
asio::awaitable<void> report_loop(tenure::leadership_scope& lead) {
    asio::steady_timer tick(co_await asio::this_coro::executor);
    for (;;) {
        publish(lead.token());
        tick.expires_after(1s);
        co_await tick.async_wait(asio::use_awaitable);  // cancelled when leadership is lost
    }
}

asio::awaitable<void> lead(tenure::election& election) {
    tenure::leadership_scope scope = co_await election.acquire();
    auto work = report_loop(scope);
    bool finished = co_await scope.run(std::move(work));
    if (!finished) {
        boost::system::error_code why = scope.loss_reason();
        if (why == tenure::error::released_by_other || why == tenure::error::key_deleted)
            std::cout << "an operator took the lock away\n";
        else if (why == tenure::error::session_invalidated)
            std::cout << "the server ended our session\n";
        else if (why == tenure::error::lease_expired_locally)
            std::cout << "no renewal acknowledged for a whole TTL: we stepped down\n";
    }
}
//]

//[fence
struct ledger {
    tenure::fence gate;

    bool write(tenure::fencing_token const& token, std::string const& entry) {
        if (!gate.admit(token)) return false;  // older than a token already seen: a deposed leader
        std::cout << "ledger: " << entry << "\n";
        return true;
    }
};
//]

//[confirm
asio::awaitable<void> step(tenure::leadership_scope& lead) {
    if (!co_await lead.confirm()) co_return;  // a consistent read: are we still the holder?
    publish(lead.token());

    // Applied only while our session holds the key, on Consul and on etcd.
    std::vector<tenure::write_op> writes{tenure::write_op::put("service/report/last-run", std::to_string(lead.token()))};
    tenure::fencing_token used = co_await tenure::fenced_write(lead, std::move(writes));
    std::cout << "recorded under token " << used.value << "\n";
}
//]

asio::awaitable<void> scenario(tenure::consul::client& consul, tenure::consul::client& other) {
    tenure::session_options options;
    options.ttl = 1s;
    options.lock_delay = 100ms;
    watch(options);
    tenure::session session = co_await tenure::session::create(consul, options);
    tenure::election election(session, "service/report/leader", "node-a");

    // Loss: someone deletes the key while we lead; the work is cancelled.
    asio::steady_timer later(co_await asio::this_coro::executor, 50ms);
    asio::co_spawn(
        other.get_executor(),
        [&]() -> asio::awaitable<void> {
            co_await later.async_wait(asio::use_awaitable);
            co_await other.kv_delete("service/report/leader");
        },
        asio::detached);
    co_await lead(election);

    // confirm() and fenced_write while leading; both refused once deposed.
    tenure::leadership_scope scope = co_await election.acquire();
    co_await step(scope);
    auto recorded = co_await consul.kv_get("service/report/last-run");
    expect(recorded.value && recorded.value->value == std::to_string(scope.token()), "fenced write applied");
    co_await other.kv_delete("service/report/leader");
    expect(!co_await scope.confirm(), "confirm() false after the key was deleted");
    expect(scope.lost() && scope.loss_reason() == tenure::error::key_deleted, "scope lost: key_deleted");

    // The fence: a newer token is admitted, an older one refused.
    ledger book;
    tenure::fencing_token old_token{"service/report/leader", 1}, new_token{"service/report/leader", 2};
    expect(book.write(new_token, "new leader"), "newer token admitted");
    expect(!book.write(old_token, "stale leader"), "older token refused");

    co_await session.close();
}

int main() {
    asio::io_context io;
    tenure::agent_options agent_options;
    agent_options.session_ttl_min = 100ms;
    agent_options.log_stream = nullptr;
    tenure::agent agent(io.get_executor(), agent_options);
    agent.start();
    tenure::consul::client consul(io.get_executor(), agent.in_process());
    tenure::consul::client other(io.get_executor(), agent.in_process());
    asio::co_spawn(io, scenario(consul, other), [&](std::exception_ptr e) {
        if (e) {
            try {
                std::rethrow_exception(e);
            } catch (std::exception const& x) {
                std::cerr << "FAILED: " << x.what() << "\n";
            }
            ++failures;
        }
        agent.stop();
    });
    io.run();
    return failures == 0 ? 0 : 1;
}
