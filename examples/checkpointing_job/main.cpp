// A long job that must run on one node at a time and survive a failover: it
// works in steps, and before each step's side effect it re-confirms
// leadership with scope.confirm(); each step ends with a fenced checkpoint
// write, and whoever leads next resumes from the last checkpoint.
//
//   checkpointing_job --demo
//       an embedded agent and two workers, A and B, in this process. After
//       step 4 the server invalidates the leader's session (as when its
//       health check goes critical): the step in progress is cancelled, the
//       other worker takes over after the lock-delay and resumes at step 5.
//       Exits 0 when every step was published exactly once, in order.
//   checkpointing_job [--name NAME]
//       one worker against the agent at CONSUL_HTTP_ADDR (default
//       http://127.0.0.1:8500). Start two, kill -9 the leader, watch the
//       other resume. Delete jobs/nightly-export/ to run the job again.
//
// Delivery is at least once: a leader that dies between a side effect and
// its checkpoint has that step redone by the next leader, so make side
// effects idempotent (key them by the step number) or fence them.
#include <tenure/agent.hpp>
#include <tenure/consul/client.hpp>
#include <tenure/election.hpp>
#include <tenure/fence.hpp>
#include <tenure/fenced_write.hpp>

#include <boost/asio.hpp>

#include <cstring>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

constexpr char const* leader_key = "jobs/nightly-export/leader";
constexpr char const* checkpoint_key = "jobs/nightly-export/checkpoint";
constexpr int total_steps = 8;

struct settings {
    std::chrono::milliseconds step_time = 1000ms;      // the "long" part of a step
    std::chrono::milliseconds restart_pause = 2000ms;  // a worker that lost waits this long before campaigning again
    std::chrono::seconds ttl = 10s;
    std::chrono::milliseconds lock_delay = 1000ms;
    // Demo only: called after each checkpoint (to inject the failure).
    std::function<void(tenure::leadership_scope&, int step)> after_checkpoint;
    // Demo only: called with each published step.
    std::function<void(int step, std::string const& by)> on_publish;
};

void say(std::string const& who, std::string const& what) { std::cout << who << ": " << what << std::endl; }

// The last completed step (0: none), read with a consistent read.
asio::awaitable<int> load_checkpoint(tenure::consul::client& consul) {
    tenure::consul::read_options consistent;
    consistent.mode = tenure::consul::consistency::consistent;
    auto found = co_await consul.kv_get(checkpoint_key, consistent);
    if (!found.value || !found.value->value) co_return 0;
    co_return std::stoi(*found.value->value);
}

std::vector<tenure::write_op> checkpoint_write(int step) {
    return {tenure::write_op::put(checkpoint_key, std::to_string(step))};
}

// The job, run under the scope: every await in it is cancelled the moment
// leadership is lost. Sets `done` when the last step is checkpointed.
asio::awaitable<void> export_job(tenure::leadership_scope& lead, tenure::consul::client& consul,
                                 std::string name, settings const& cfg, bool& done) {
    int last = co_await load_checkpoint(consul);
    say(name, "resuming after step " + std::to_string(last) + " (fencing token " + std::to_string(lead.token()) + ")");
    asio::steady_timer work(co_await asio::this_coro::executor);
    for (int step = last + 1; step <= total_steps; ++step) {
        // 1. The long part. Loss of leadership cancels this wait.
        work.expires_after(cfg.step_time);
        co_await work.async_wait(asio::use_awaitable);

        // 2. Still the leader? A consistent read of the key, just before the
        //    side effect: a leader that learns late (a pause, a partition)
        //    stops here. false also marks the scope lost, which ends run().
        if (!co_await lead.confirm()) {
            say(name, "step " + std::to_string(step) + ": no longer the leader, not publishing");
            co_return;
        }

        // 3. The side effect (here: printing the step; in real life an upload, an email...).
        say(name, "PUBLISH step " + std::to_string(step) + " (token " + std::to_string(lead.token()) + ")");
        if (cfg.on_publish) cfg.on_publish(step, name);

        // 4. The checkpoint, fenced: the server refuses it if our session no
        //    longer holds the leader key, however late we are.
        auto writes = checkpoint_write(step);
        auto [ec, used] = co_await tenure::fenced_write(lead, std::move(writes), asio::as_tuple(asio::use_awaitable));
        if (ec) {
            say(name, "checkpoint of step " + std::to_string(step) + " refused: " + ec.message());
            co_return;
        }
        if (cfg.after_checkpoint) cfg.after_checkpoint(lead, step);
    }
    done = true;
}

// One worker: campaign, run the job while leading, campaign again after a
// loss (with a new session: the old one may be gone), until the job is done.
asio::awaitable<void> worker(tenure::consul::client& consul, std::string name, settings const& cfg) {
    for (;;) {
        tenure::session_options options;
        options.name = "checkpointing_job " + name;
        options.ttl = cfg.ttl;
        options.lock_delay = cfg.lock_delay;
        tenure::session session = co_await tenure::session::create(consul, options);

        tenure::election election(session, leader_key, name);
        tenure::leadership_scope lead = co_await election.acquire();
        say(name, "leading with fencing token " + std::to_string(lead.token()));

        bool done = false;
        auto job = export_job(lead, consul, name, cfg, done);  // named first: see the g++ 12 note in README.md
        co_await lead.run(std::move(job));
        if (done) {
            say(name, "job complete");
            co_await lead.release();
            co_await session.close();
            co_return;
        }
        say(name, "lost leadership (" + lead.loss_reason().message() + "); campaigning again later");
        asio::steady_timer pause(co_await asio::this_coro::executor, cfg.restart_pause);
        co_await pause.async_wait(asio::use_awaitable);
    }  // the old session closes in the background as it goes out of scope
}

int run_demo() {
    asio::io_context io;
    tenure::agent_options agent_options;
    agent_options.session_ttl_min = 100ms;
    agent_options.log_stream = nullptr;
    tenure::agent agent(io.get_executor(), agent_options);
    agent.start();
    tenure::consul::client consul_a(io.get_executor(), agent.in_process());
    tenure::consul::client consul_b(io.get_executor(), agent.in_process());
    tenure::consul::client operator_client(io.get_executor(), agent.in_process());

    std::vector<std::pair<int, std::string>> published;
    bool injected = false;
    settings cfg;
    cfg.step_time = 50ms;
    cfg.restart_pause = 1000ms;  // the loser "restarts" slowly, so the other worker takes over
    cfg.ttl = 2s;
    cfg.lock_delay = 300ms;
    cfg.on_publish = [&](int step, std::string const& by) { published.emplace_back(step, by); };
    cfg.after_checkpoint = [&](tenure::leadership_scope& lead, int step) {
        if (step != 4 || injected) return;
        injected = true;
        std::cout << "-- the server invalidates the leader's session (its health check went critical)" << std::endl;
        operator_client.session_destroy(lead.session_id(), asio::detached);
    };

    int finished = 0;
    auto on_exit = [&](std::string name) {
        return [&, name](std::exception_ptr e) {
            if (e) {
                try {
                    std::rethrow_exception(e);
                } catch (std::exception const& x) {
                    say(name, std::string("failed: ") + x.what());
                }
            }
            if (++finished == 2) agent.stop();
        };
    };
    asio::co_spawn(io, worker(consul_a, "A", cfg), on_exit("A"));
    asio::co_spawn(io, worker(consul_b, "B", cfg), on_exit("B"));
    io.run();

    // Every step published exactly once, in order, by whoever led at the time.
    bool ok = injected && published.size() == total_steps;
    for (std::size_t i = 0; ok && i < published.size(); ++i) ok = published[i].first == static_cast<int>(i) + 1;
    bool handed_over = ok && published.front().second != published.back().second;
    if (ok && handed_over) {
        std::cout << "PASS: steps 1-" << total_steps << " published once each, in order; " << published.front().second
                  << " did 1-4, " << published.back().second << " resumed at step 5" << std::endl;
        return 0;
    }
    std::cout << "FAIL: published";
    for (auto const& [step, by] : published) std::cout << ' ' << step << '/' << by;
    std::cout << std::endl;
    return 1;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc > 1 && std::strcmp(argv[1], "--demo") == 0) return run_demo();
    std::string name = "worker";
    if (argc > 2 && std::strcmp(argv[1], "--name") == 0) name = argv[2];

    asio::io_context io;
    tenure::consul::client consul(io.get_executor());  // CONSUL_HTTP_ADDR or http://127.0.0.1:8500
    settings cfg;
    int status = 1;
    asio::co_spawn(io, worker(consul, name, cfg), [&](std::exception_ptr e) {
        try {
            if (e) std::rethrow_exception(e);
            status = 0;
        } catch (std::exception const& x) {
            std::cerr << "checkpointing_job: " << x.what() << std::endl;
        }
    });
    io.run();
    return status;
}
