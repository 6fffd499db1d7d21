// Cancellation at every suspension point (issue #18, item 7), in virtual time.
//
// For each operation - election acquire and try_acquire, leadership_scope
// run, release and confirm, campaign, semaphore acquire, session create and
// close - a fresh world (tests/sim/world.hpp: the real agent, one or two
// clients, no faults, so every run is deterministic) starts the operation
// with a cancellation slot bound to its handler, and for k = 1, 2, 3, ...
// emits a cancellation just after the k-th suspension point, until k passes
// the last one (the operation completes before its k-th suspension point).
//
// A suspension point: the k-th handler run as client A's process after the
// operation started. Client A's consul::client runs on a counting executor
// (a process_executor that counts each handler it posts and runs; a
// dispatch that runs inline in the handler running now is no new handler),
// so every resumption of the operation's coroutines - and of the session's
// background work (renewals, the scope's monitor) interleaved with it - is
// one point. The cancellation is emitted as A, at the end of the k-th
// handler, before the io_context runs anything else. The count restarts at
// 0 right after the operation is initiated (from outside any handler).
//
// After each run:
//   - the handler ran exactly once (and not again while the world runs on);
//   - an error is operation_aborted (the cancellation) or nothing;
//   - what the operation documents for a cancellation: a cancelled acquire
//     leaves no key of A's session on the agent (the key or permit taken
//     just before is released again, the candidate entry or contender key
//     deleted), confirm and run leave leadership held, a cancelled session
//     create's session lapses, a cancelled campaign has handed over (no key
//     held, no session left, no lock-delay on the key);
//   - after every session is closed, the agent has no session and no held
//     key, and the session objects are gone (no leak);
//   - after the clients are destroyed and the agent stopped, nothing of the
//     library is left in the io_context (as schedule.cpp's clean shutdown).
// Terminal cancellation for every operation; partial and total as well for
// those that document them (acquire, try_acquire, confirm, semaphore acquire).
//
// Usage: tenure_sim_cancel [--verbose]
#include "world.hpp"

#include <tenure/election.hpp>
#include <tenure/semaphore.hpp>
#include <tenure/session.hpp>

#include "agent/agent_access.hpp"
#include "agent/state.hpp"
#include "consul/transport.hpp"
#include "core/backend.hpp"
#include "core/event.hpp"

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/bind_executor.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/post.hpp>

#include <chrono>
#include <csignal>
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace tenure::sim {

namespace {

using boost::system::error_code;
namespace wsim = tenure::detail::sim;

bool verbose = false;
nanoseconds latency{0};  // client A's, each way (see agent_hop)

std::string fmt(char const* f, auto... args) {
    char buf[512];
    std::snprintf(buf, sizeof buf, f, args...);
    return buf;
}

[[noreturn]] void fatal(std::string const& what) {
    std::printf("tenure_sim_cancel: FATAL %s\n", what.c_str());
    std::fflush(stdout);
    std::_Exit(1);
}

// ---- counting the handlers of client A -------------------------------------------

struct tally {
    std::uint64_t handlers = 0;   // run as A since the operation started
    std::uint64_t cancel_at = 0;  // 0: never
    std::function<void()> at_kth;
    void ran() {
        ++handlers;
        if (handlers == cancel_at && at_kth) at_kth();
    }
};

// process_executor (detail/simulated_time.hpp) with a count of the handlers
// it runs: the same inline dispatch, the same run_as.
class counting_executor {
public:
    counting_executor(asio::io_context::executor_type inner, process* p, tally* t) noexcept
        : inner_(std::move(inner)), process_(p), tally_(t) {}

    asio::io_context& query(asio::execution::context_t) const noexcept {
        return asio::query(inner_, asio::execution::context);
    }
    asio::execution::blocking_t query(asio::execution::blocking_t) const noexcept {
        return possibly_ ? asio::execution::blocking_t(asio::execution::blocking.possibly)
                         : asio::execution::blocking_t(asio::execution::blocking.never);
    }
    counting_executor require(asio::execution::blocking_t::never_t) const noexcept {
        auto e = *this;
        e.possibly_ = false;
        return e;
    }
    counting_executor require(asio::execution::blocking_t::possibly_t) const noexcept {
        auto e = *this;
        e.possibly_ = true;
        return e;
    }

    template <class F>
    void execute(F&& f) const {
        auto& w = wsim::world();
        if (possibly_ && w.current == process_ && !process_->stopped && !process_->dead &&
            inner_.running_in_this_thread()) {
            std::decay_t<F> fn(std::forward<F>(f));
            fn();
            return;
        }
        asio::post(inner_, [p = process_, t = tally_, f = std::decay_t<F>(std::forward<F>(f))]() mutable {
            process_executor::run_as(p, [&] {
                f();
                t->ran();  // the end of a handler: where the cancellation goes
            });
        });
    }

    friend bool operator==(counting_executor const& a, counting_executor const& b) noexcept {
        return a.inner_ == b.inner_ && a.process_ == b.process_ && a.tally_ == b.tally_ &&
               a.possibly_ == b.possibly_;
    }
    friend bool operator!=(counting_executor const& a, counting_executor const& b) noexcept { return !(a == b); }

private:
    asio::io_context::executor_type inner_;
    process* process_;
    tally* tally_;
    bool possibly_ = true;
};

static_assert(asio::execution::is_executor<counting_executor>::value);

// Client A's transport: the agent's in-process connection, each request
// handled on the agent's process, as world.cpp's fault injector does with
// its faults off (a client that gives up does not stop the agent's side),
// after `latency` on the way there and back again. With no latency the
// agent's answer is usually queued already when the cancellation comes (it
// races the answer); with 1 ms it comes while the request is in flight.
class agent_hop final : public consul::detail::transport {
public:
    agent_hop(world& w, std::shared_ptr<transport> inner, nanoseconds latency)
        : world_(w), inner_(std::move(inner)), latency_(latency) {}

    asio::awaitable<consul::detail::http_response> send(boost::beast::http::verb method, std::string target,
                                                        std::string body, detail::clock::time_point deadline) override {
        using consul::detail::http_response;
        struct exchange {
            explicit exchange(asio::any_io_executor ex) : answered(std::move(ex)) {}
            detail::event answered;
            std::optional<http_response> answer;
            std::exception_ptr error;
        };
        auto const left = deadline - detail::clock::now();
        auto x = std::make_shared<exchange>(co_await asio::this_coro::executor);
        // (Named, not temporaries of a co_await expression: g++ 12 destroys those twice.)
        auto request = [inner = inner_, method, target = std::move(target), body = std::move(body), left,
                        latency = latency_]() mutable -> asio::awaitable<http_response> {
            if (latency > nanoseconds::zero()) co_await detail::sleep_until(detail::clock::now() + latency);
            auto answer =
                co_await inner->send(method, std::move(target), std::move(body), detail::clock::now() + left - latency);
            if (latency > nanoseconds::zero()) co_await detail::sleep_until(detail::clock::now() + latency);
            co_return answer;
        };
        asio::co_spawn(world_.executor(world_.agent_process()), std::move(request),
                       [x](std::exception_ptr e, http_response r) {
                           if (e) x->error = e;
                           else x->answer = std::move(r);
                           x->answered.set();
                       });
        co_await x->answered.wait();
        if (x->error) std::rethrow_exception(x->error);
        co_return std::move(*x->answer);
    }
    void close() override { inner_->close(); }

private:
    world& world_;
    std::shared_ptr<transport> inner_;
    nanoseconds latency_;
};

consul::client_config client_config() {
    consul::client_config cc;
    cc.request_timeout = 1s;
    cc.blocking_margin = 1s;
    return cc;
}

constexpr auto ttl = std::chrono::nanoseconds{1s};
constexpr auto lock_delay = std::chrono::nanoseconds{1s};

session_options session_opts(std::string name, consul::session_behavior behavior = consul::session_behavior::release) {
    session_options o;
    o.name = std::move(name);
    o.ttl = ttl;
    o.lock_delay = lock_delay;
    o.behavior = behavior;
    return o;
}

// ---- the world of one run ---------------------------------------------------------

// What the handler of the operation under test saw. Declared before the
// fixture, so that it outlives every handler the world may still run.
struct probe {
    asio::cancellation_signal signal;
    int completions = 0;
    error_code ec;
    bool emitted = false;             // the cancellation went out before the operation completed
    std::uint64_t completed_at = 0;   // A's handlers until the completion
    void done(error_code e, tally const& t) {
        ++completions;
        ec = e;
        completed_at = t.handlers;
    }
};

class fixture {
public:
    tally count;  // first: outlives the world, whose last handlers report to it
    trace log;
    world w;
    process* pa = nullptr;
    process* pb = nullptr;
    std::unique_ptr<consul::client> a, b;
    std::vector<std::weak_ptr<detail::session_impl>> sessions_made;  // must all be gone at the end
    std::string violation;

    fixture() : w(7, log) {
        agent_options ao;
        ao.session_ttl_min = 100ms;
        ao.level = log_level::off;
        ao.log_stream = nullptr;
        w.start_agent(ao);
        w.faults_on = false;
        pa = &w.add_process("client-a", 0);
        pb = &w.add_process("client-b", 0);
        consul::transport_factory factory = [this](asio::any_io_executor, consul::client_config const& c) {
            std::shared_ptr<consul::detail::transport> inner =
                detail::make_inprocess_transport(w.executor(w.agent_process()), w.agent(), c.token);
            return std::shared_ptr<consul::detail::transport>(std::make_shared<agent_hop>(w, std::move(inner), latency));
        };
        process_executor::run_as(pa, [&] {
            a = std::make_unique<consul::client>(counting_executor(w.io().get_executor(), pa, &count), factory,
                                                 client_config());
        });
        b = w.make_client(*pb, 1, client_config());
    }

    void fail(std::string what) {
        if (violation.empty()) violation = fmt("t=%.6f s: ", std::chrono::duration<double>(world::now()).count()) + what;
    }

    // Runs the world until done() or `limit` of virtual time has passed.
    bool run_until(std::function<bool()> const& done, nanoseconds limit) {
        auto const deadline = world::now() + limit;
        auto& io = w.io();
        io.restart();
        while (!done()) {
            if (world::now() >= deadline) return false;
            if (io.run_one() == 0) return done();  // nothing left that could ever run
        }
        return true;
    }
    void run_for(nanoseconds d) {
        run_until([] { return false; }, d);
    }

    // Starts the operation under test (as A) and arms the cancellation.
    template <class Start>
    void start(probe& p, std::uint64_t k, asio::cancellation_type type, Start&& initiate) {
        count.cancel_at = 0;
        process_executor::run_as(pa, [&] { initiate(p.signal.slot()); });
        count.handlers = 0;
        count.cancel_at = k;
        count.at_kth = [&p, type] {
            if (p.completions != 0) return;
            p.emitted = true;
            p.signal.emit(type);
        };
    }

    // The operation's completion, then a while more: it must not run again.
    void await_completion(probe& p, char const* what) {
        if (!run_until([&] { return p.completions > 0; }, 120s))
            fatal(fmt("%s did not complete within 120 virtual seconds (cancellation %s)", what,
                      p.emitted ? "emitted" : "not emitted"));
        count.at_kth = nullptr;
        if (p.ec && p.ec != asio::error::operation_aborted)
            fail(fmt("%s completed with %s, not operation_aborted", what, p.ec.message().c_str()));
        if (p.ec && !p.emitted) fail(fmt("%s failed (%s) without a cancellation", what, p.ec.message().c_str()));
    }

    // ---- setup steps (uncancelled) ----
    // Their handlers keep what they fill in alive themselves (a handler
    // that ran late or twice must not write into a returned frame) and
    // count their calls: setup operations complete exactly once too.
    template <class T>
    struct outcome {
        int calls = 0;
        error_code ec;
        std::optional<T> value;
    };
    template <class T>
    auto filler(std::shared_ptr<outcome<T>> const& o) {
        return [o](error_code ec, T v) {
            if (++o->calls > 1) fatal("a setup operation completed twice");
            o->ec = ec;
            o->value.emplace(std::move(v));
        };
    }
    session make_session(consul::client& c, process& p, session_options o) {
        auto r = std::make_shared<outcome<session>>();
        process_executor::run_as(&p, [&] { session::create(c, std::move(o), filler(r)); });
        if (!run_until([&] { return r->calls > 0; }, 60s) || r->ec) fatal("setup: session::create failed");
        sessions_made.push_back(detail::session_access::impl(*r->value));
        return std::move(*r->value);
    }
    leadership_scope take(election& e, process& p) {
        auto r = std::make_shared<outcome<leadership_scope>>();
        process_executor::run_as(&p, [&] { e.acquire(filler(r)); });
        if (!run_until([&] { return r->calls > 0; }, 60s) || r->ec || !r->value->held())
            fatal("setup: acquire failed");
        return std::move(*r->value);
    }
    leadership_scope take(semaphore& s, process& p) {
        auto r = std::make_shared<outcome<leadership_scope>>();
        process_executor::run_as(&p, [&] { s.acquire(filler(r)); });
        if (!run_until([&] { return r->calls > 0; }, 60s) || r->ec || !r->value->held())
            fatal("setup: semaphore acquire failed");
        return std::move(*r->value);
    }
    void close(session& s, process& p) {
        if (!s.valid()) return;
        auto calls = std::make_shared<int>(0);
        process_executor::run_as(&p, [&] {
            s.close([calls](error_code) {
                if (++*calls > 1) fatal("a session's close() completed twice");
            });
        });
        if (!run_until([&] { return *calls > 0; }, 60s)) fail("a session's close() did not complete");
    }
    // The handlers are bound to the process's executor: an empty scope has no
    // executor of its own, and its release() would otherwise complete on
    // Asio's system executor, a thread pool outside the simulated world.
    void release(leadership_scope& l, process& p) {
        auto calls = std::make_shared<int>(0);
        process_executor::run_as(&p, [&] {
            l.release(asio::bind_executor(w.executor(p), [calls](error_code) {
                if (++*calls > 1) fatal("a release() completed twice");
            }));
        });
        if (!run_until([&] { return *calls > 0; }, 60s)) fail("a release() did not complete");
    }
    // At time `at`, as B: release `l`.
    void release_at(nanoseconds at, leadership_scope& l) {
        w.at(at, [this, &l] {
            process_executor::run_as(pb, [this, &l] { l.release(asio::bind_executor(w.executor(*pb), [](error_code) {})); });
        });
    }

    // ---- what the agent shows ----
    detail::agent::state_machine& agent_state() { return detail::agent_access::state(w.agent()); }
    std::set<std::string> keys_of(std::string const& session_id) {
        std::set<std::string> keys;
        for (auto const* e : agent_state().kv_list(""))
            if (!session_id.empty() && e->session == session_id) keys.insert(e->key);
        return keys;
    }
    bool agent_knows(std::string const& session_id) { return agent_state().session_get(session_id) != nullptr; }
    bool lock_delay_on(std::string const& key) {
        bool on = false;
        process_executor::run_as(&w.agent_process(),
                                 [&] { on = agent_state().lock_delay_until(key, detail::clock::now()).has_value(); });
        return on;
    }

    // The end of every run: nothing on the agent once the sessions are
    // closed (the caller closed them), no session object left, nothing of
    // the library in the io_context once the clients are gone.
    void finish(probe& p, char const* what) {
        run_for(1s);  // background releases and deletes
        if (auto left = agent_state().session_list(); !left.empty())
            fail(fmt("%zu session(s) left on the agent after closing, e.g. %s", left.size(),
                     left.front()->name.c_str()));
        for (auto const* e : agent_state().kv_list(""))
            if (!e->session.empty()) fail("key " + e->key + " still held after closing");
        if (p.completions != 1) fail(fmt("%s completed %d times", what, p.completions));
        process_executor::run_as(pa, [&] { a.reset(); });
        process_executor::run_as(pb, [&] { b.reset(); });
        process_executor::run_as(&w.agent_process(), [&] { w.agent().stop(); });
        wsim::world().stalled = false;
        auto const deadline = world::now() + 1h;
        auto& io = w.io();
        io.restart();
        while (io.run_one() != 0)
            if (world::now() > deadline) {
                fail("work still runs an hour after everything closed");
                break;
            }
        if (wsim::world().stalled) fail("work was left waiting in the io_context after everything closed");
        if (p.completions != 1) fail(fmt("%s completed %d times", what, p.completions));
        for (auto const& s : sessions_made)
            if (!s.expired()) fail("a session's state outlived its session (leak)");
    }
};

// The handler types of the operations, counting into a probe.
struct on_done {
    probe& p;
    tally const& t;
    void operator()(error_code ec) const { p.done(ec, t); }
};
template <class T>
struct on_value {
    probe& p;
    tally const& t;
    std::optional<T>& out;
    void operator()(error_code ec, T v) const {
        out.emplace(std::move(v));
        p.done(ec, t);
    }
};

struct run_outcome {
    bool emitted = false;
    bool aborted = false;
    std::string violation;
};

char const* type_name(asio::cancellation_type t) {
    if (t == asio::cancellation_type::terminal) return "terminal";
    if (t == asio::cancellation_type::partial) return "partial";
    return "total";
}

// A work of `steps` sleeps of 200 ms, counted while it runs.
struct work_count {
    int active = 0;
    int started = 0;
};
asio::awaitable<void> held_work(work_count& c, int steps) {
    ++c.started;
    ++c.active;
    struct ended {
        work_count& c;
        ~ended() { --c.active; }
    } guard{c};
    for (int i = 0; steps < 0 || i < steps; ++i) co_await detail::sleep_until(detail::clock::now() + 200ms);
}

// ---- the operations ---------------------------------------------------------------

// A's acquire of "job", alone (free) or behind B, who releases 1.5 s after it started.
run_outcome election_acquire(std::uint64_t k, asio::cancellation_type type, bool contended, bool once) {
    probe p;
    fixture f;
    char const* what = once ? "try_acquire" : "acquire";
    auto sa = f.make_session(*f.a, *f.pa, session_opts("a"));
    auto sb = f.make_session(*f.b, *f.pb, session_opts("b"));
    election ea(sa, "job", "a");
    election eb(sb, "job", "b");
    leadership_scope held_by_b;
    if (contended) {
        held_by_b = f.take(eb, *f.pb);
        f.release_at(world::now() + 1500ms, held_by_b);
    }
    std::optional<leadership_scope> r;
    f.start(p, k, type, [&](asio::cancellation_slot slot) {
        auto h = asio::bind_cancellation_slot(slot, on_value<leadership_scope>{p, f.count, r});
        if (once) ea.try_acquire(std::move(h));
        else ea.acquire(std::move(h));
    });
    f.await_completion(p, what);
    f.run_for(3s);  // B's release, A's cleanup in the background
    if (p.completions != 1) f.fail(fmt("%s completed %d times", what, p.completions));
    auto const mine = f.keys_of(sa.id());
    if (p.ec) {
        if (r && r->held()) f.fail(std::string("a cancelled ") + what + " handed out a held scope");
        if (!mine.empty()) f.fail(std::string("after a cancelled ") + what + ", A's session still holds " + *mine.begin());
    } else if (r && r->held()) {
        if (mine != std::set<std::string>{"job"})
            f.fail(fmt("A leads, but its session holds %zu key(s) (the key and its candidate entry?)", mine.size()));
    } else if (!once || !contended) {
        f.fail(std::string(what) + " completed without the key and without an error");
    }
    f.release(held_by_b, *f.pb);
    if (r) f.release(*r, *f.pa);
    f.close(sa, *f.pa);
    f.close(sb, *f.pb);
    process_executor::run_as(f.pa, [&] { r.reset(); sa = session{}; });
    process_executor::run_as(f.pb, [&] { held_by_b = leadership_scope{}; sb = session{}; });
    f.finish(p, what);
    return {p.emitted, p.ec == asio::error::operation_aborted, f.violation};
}

// A's permit of "sem" (limit 1), free or behind B, who gives it back 1.5 s after.
run_outcome semaphore_acquire(std::uint64_t k, asio::cancellation_type type, bool contended) {
    probe p;
    fixture f;
    auto sa = f.make_session(*f.a, *f.pa, session_opts("a", consul::session_behavior::delete_keys));
    auto sb = f.make_session(*f.b, *f.pb, session_opts("b", consul::session_behavior::delete_keys));
    semaphore ma(sa, "sem", 1, "a");
    semaphore mb(sb, "sem", 1, "b");
    leadership_scope held_by_b;
    if (contended) {
        held_by_b = f.take(mb, *f.pb);
        f.release_at(world::now() + 1500ms, held_by_b);
    }
    std::optional<leadership_scope> r;
    f.start(p, k, type, [&](asio::cancellation_slot slot) {
        ma.acquire(asio::bind_cancellation_slot(slot, on_value<leadership_scope>{p, f.count, r}));
    });
    f.await_completion(p, "semaphore acquire");
    f.run_for(3s);
    auto const mine = f.keys_of(sa.id());
    if (p.ec) {
        if (r && r->held()) f.fail("a cancelled semaphore acquire handed out a held permit");
        if (!mine.empty()) f.fail("after a cancelled semaphore acquire, A's session still holds " + *mine.begin());
    } else if (r && r->held()) {
        if (mine != std::set<std::string>{"sem/" + sa.id()}) f.fail("A holds a permit, but not (only) its contender key");
    } else {
        f.fail("semaphore acquire completed without a permit and without an error");
    }
    f.release(held_by_b, *f.pb);
    if (r) f.release(*r, *f.pa);
    f.close(sa, *f.pa);
    f.close(sb, *f.pb);
    process_executor::run_as(f.pa, [&] { r.reset(); sa = session{}; });
    process_executor::run_as(f.pb, [&] { held_by_b = leadership_scope{}; sb = session{}; });
    f.finish(p, "semaphore acquire");
    return {p.emitted, p.ec == asio::error::operation_aborted, f.violation};
}

// run(work) on a held scope: the work is three sleeps of 200 ms.
run_outcome scope_run(std::uint64_t k, asio::cancellation_type type) {
    probe p;
    fixture f;
    work_count wc;
    auto sa = f.make_session(*f.a, *f.pa, session_opts("a"));
    election ea(sa, "job", "a");
    auto scope = f.take(ea, *f.pa);
    std::optional<bool> finished;
    f.start(p, k, type, [&](asio::cancellation_slot slot) {
        auto work = held_work(wc, 3);
        scope.run(std::move(work), asio::bind_cancellation_slot(slot, on_value<bool>{p, f.count, finished}));
    });
    f.await_completion(p, "run");
    if (wc.active != 0) f.fail("run() completed while its work still ran");
    if (!p.ec && !(finished && *finished)) f.fail("run() completed uncancelled, but not finished");
    f.run_for(1s);
    if (!scope.held()) f.fail("a cancelled run() ended leadership");
    if (f.keys_of(sa.id()) != std::set<std::string>{"job"}) f.fail("after run(), A's session does not hold the key alone");
    f.release(scope, *f.pa);
    f.close(sa, *f.pa);
    process_executor::run_as(f.pa, [&] { scope = leadership_scope{}; sa = session{}; });
    f.finish(p, "run");
    return {p.emitted, p.ec == asio::error::operation_aborted, f.violation};
}

// release() of a held scope, B waiting for the key (the handoff path).
run_outcome scope_release(std::uint64_t k, asio::cancellation_type type) {
    probe p;
    fixture f;
    auto sa = f.make_session(*f.a, *f.pa, session_opts("a"));
    auto sb = f.make_session(*f.b, *f.pb, session_opts("b"));
    election ea(sa, "job", "a");
    election eb(sb, "job", "b");
    auto scope = f.take(ea, *f.pa);
    std::optional<std::pair<error_code, leadership_scope>> rb;
    process_executor::run_as(f.pb, [&] {
        eb.acquire([&rb](error_code ec, leadership_scope s) { rb.emplace(ec, std::move(s)); });
    });
    f.run_for(2s);  // B registers and waits
    if (rb) fatal("setup: B's acquire completed while A held the key");
    f.start(p, k, type, [&](asio::cancellation_slot slot) {
        scope.release(asio::bind_cancellation_slot(slot, on_done{p, f.count}));
    });
    f.await_completion(p, "release");
    // (Cancelled before its first step, the release has not begun: still held.)
    if (!p.ec && scope.held()) f.fail("the scope is still held after release()");
    f.run_for(1s);
    if (!p.ec && f.keys_of(sa.id()).count("job")) f.fail("A's session still holds the key after a release");
    f.close(sa, *f.pa);
    // close() releases what the cancelled release left held: no lock-delay.
    if (f.lock_delay_on("job")) f.fail("closing the session after a cancelled release left a lock-delay");
    // B leads now: by the handoff, or once A's session released or destroyed.
    if (!f.run_until([&] { return rb.has_value(); }, 10s)) f.fail("B never got the key after A's release and close");
    else if (rb->first || !rb->second.held()) f.fail("B's acquire failed: " + rb->first.message());
    if (rb) f.release(rb->second, *f.pb);
    f.close(sb, *f.pb);
    process_executor::run_as(f.pa, [&] { scope = leadership_scope{}; sa = session{}; });
    process_executor::run_as(f.pb, [&] { rb.reset(); sb = session{}; });
    f.finish(p, "release");
    return {p.emitted, p.ec == asio::error::operation_aborted, f.violation};
}

// confirm() of a held scope.
run_outcome scope_confirm(std::uint64_t k, asio::cancellation_type type) {
    probe p;
    fixture f;
    auto sa = f.make_session(*f.a, *f.pa, session_opts("a"));
    election ea(sa, "job", "a");
    auto scope = f.take(ea, *f.pa);
    std::optional<bool> held;
    f.start(p, k, type, [&](asio::cancellation_slot slot) {
        scope.confirm(asio::bind_cancellation_slot(slot, on_value<bool>{p, f.count, held}));
    });
    f.await_completion(p, "confirm");
    if (!p.ec && !(held && *held)) f.fail("confirm() said the scope is not held");
    f.run_for(1s);
    if (!scope.held()) f.fail("confirm() ended leadership");
    if (f.keys_of(sa.id()) != std::set<std::string>{"job"}) f.fail("after confirm(), A's session does not hold the key");
    f.release(scope, *f.pa);
    f.close(sa, *f.pa);
    process_executor::run_as(f.pa, [&] { scope = leadership_scope{}; sa = session{}; });
    f.finish(p, "confirm");
    return {p.emitted, p.ec == asio::error::operation_aborted, f.violation};
}

// session::create on A.
run_outcome session_create(std::uint64_t k, asio::cancellation_type type) {
    probe p;
    fixture f;
    std::optional<session> r;
    f.start(p, k, type, [&](asio::cancellation_slot slot) {
        auto o = session_opts("a");
        session::create(*f.a, std::move(o),
                        asio::bind_cancellation_slot(slot, on_value<session>{p, f.count, r}));
    });
    f.await_completion(p, "session::create");
    if (r && r->valid()) f.sessions_made.push_back(detail::session_access::impl(*r));
    if (p.ec && r && r->valid()) f.fail("a cancelled session::create handed out a session");
    if (!p.ec && !(r && r->valid())) f.fail("session::create completed without a session and without an error");
    // A session the agent made for a cancelled create is not renewed: it
    // lapses after 2 x TTL. A created one is renewed.
    f.run_for(2 * ttl + 1s);
    auto const left = f.agent_state().session_list().size();
    if (p.ec && left != 0) f.fail("the session of a cancelled create did not lapse");
    if (!p.ec && left != 1) f.fail("the created session is not (alone) on the agent");
    if (r) f.close(*r, *f.pa);
    process_executor::run_as(f.pa, [&] { r.reset(); });
    f.finish(p, "session::create");
    return {p.emitted, p.ec == asio::error::operation_aborted, f.violation};
}

// close() of A's session while it holds "job" and B waits for it.
run_outcome session_close(std::uint64_t k, asio::cancellation_type type) {
    probe p;
    fixture f;
    auto sa = f.make_session(*f.a, *f.pa, session_opts("a"));
    auto sb = f.make_session(*f.b, *f.pb, session_opts("b"));
    election ea(sa, "job", "a");
    election eb(sb, "job", "b");
    auto scope = f.take(ea, *f.pa);
    std::optional<std::pair<error_code, leadership_scope>> rb;
    process_executor::run_as(f.pb, [&] {
        eb.acquire([&rb](error_code ec, leadership_scope s) { rb.emplace(ec, std::move(s)); });
    });
    f.run_for(2s);
    if (rb) fatal("setup: B's acquire completed while A held the key");
    auto const id = sa.id();
    f.start(p, k, type, [&](asio::cancellation_slot slot) {
        sa.close(asio::bind_cancellation_slot(slot, on_done{p, f.count}));
    });
    f.await_completion(p, "session close");
    if (!p.ec) {
        // Closed: released first (B leads without a lock-delay), then destroyed.
        if (f.agent_knows(id)) f.fail("the session is still on the agent after close()");
        if (f.lock_delay_on("job")) f.fail("a clean close() left a lock-delay on the key");
    }
    // Cancelled: the session may stay until its TTL lapses, and then B
    // leads. A close cancelled before its first step has not begun: the
    // user closes again (a close() after one that began returns at once).
    if (p.ec) f.close(sa, *f.pa);
    if (!f.run_until([&] { return rb.has_value(); }, 2 * ttl + lock_delay + 5s))
        f.fail("B never got the key after A's session closed");
    else if (rb->first || !rb->second.held()) f.fail("B's acquire failed: " + rb->first.message());
    f.run_until([&] { return !f.agent_knows(id); }, 2 * ttl + 2s);
    if (f.agent_knows(id)) f.fail("A's session is still on the agent 2 x TTL after its close()");
    if (rb) f.release(rb->second, *f.pb);
    f.close(sb, *f.pb);
    process_executor::run_as(f.pa, [&] { scope = leadership_scope{}; sa = session{}; });
    process_executor::run_as(f.pb, [&] { rb.reset(); sb = session{}; });
    f.finish(p, "session close");
    return {p.emitted, p.ec == asio::error::operation_aborted, f.violation};
}

// The campaign loop on A, its body three sleeps of 200 ms; it never ends
// uncancelled, so k runs up to `horizon` (the handlers until its second
// term began, from a run without a cancellation).
struct campaign_run {
    run_outcome outcome;
    std::uint64_t second_term_at = 0;
};
campaign_run campaign_loop(std::uint64_t k, asio::cancellation_type type) {
    probe p;
    fixture f;
    work_count wc;
    std::uint64_t second_term_at = 0;
    f.start(p, k, type, [&](asio::cancellation_slot slot) {
        campaign_options o;
        o.session = session_opts("a");
        o.key = "job";
        o.value = "a";
        o.retry_backoff = 100ms;
        std::function<asio::awaitable<void>(leadership_scope&)> body = [&wc, &f, &second_term_at](leadership_scope&) {
            if (wc.started == 1 && second_term_at == 0) second_term_at = f.count.handlers;
            return held_work(wc, 3);
        };
        campaign(*f.a, std::move(o), std::move(body), asio::bind_cancellation_slot(slot, on_done{p, f.count}));
    });
    if (k == 0) {  // the reference run: up to the second term
        f.run_until([&] { return second_term_at != 0; }, 60s);
        if (second_term_at == 0) fatal("campaign: no second term within 60 s");
        f.count.at_kth = [&] {
            if (p.completions != 0) return;
            p.emitted = true;
            p.signal.emit(asio::cancellation_type::terminal);
        };
        f.count.cancel_at = f.count.handlers + 1;
    }
    f.await_completion(p, "campaign");
    if (p.ec != asio::error::operation_aborted) f.fail("campaign completed without operation_aborted");
    if (wc.active != 0) f.fail("campaign completed while its body still ran");
    // Cancelled: it released the key and closed its session (a clean
    // handover: no lock-delay); a session the agent made for a cancelled
    // create lapses after 2 x TTL.
    for (auto const* e : f.agent_state().kv_list(""))
        if (!e->session.empty()) f.fail("key " + e->key + " still held after the campaign ended");
    if (f.lock_delay_on("job")) f.fail("the cancelled campaign left a lock-delay on its key");
    f.run_for(2 * ttl + 1s);
    f.finish(p, "campaign");
    return {{p.emitted, true, f.violation}, second_term_at};
}

// ---- driving -------------------------------------------------------------------

int failures = 0;
char current_run[160] = "";  // for a crash report

extern "C" void report_crash(int sig) {
    char line[256];
    int n = std::snprintf(line, sizeof line, "tenure_sim_cancel: signal %d during %s\n", sig, current_run);
    if (n > 0) (void)!write(2, line, static_cast<std::size_t>(n));
    std::signal(sig, SIG_DFL);
    std::raise(sig);
}
std::uint64_t runs = 0;  // worlds run

// Cancels at k = 1, 2, ... until the operation completes before its k-th
// suspension point (or up to `horizon`); the points covered.
std::uint64_t cover(std::string const& name, asio::cancellation_type type,
                    std::function<run_outcome(std::uint64_t, asio::cancellation_type)> const& one,
                    std::uint64_t horizon = 0) {
    std::uint64_t aborted = 0, covered = 0;
    for (std::uint64_t k = 1;; ++k) {
        std::snprintf(current_run, sizeof current_run, "%s, %s cancellation at k=%llu, latency %lld ns", name.c_str(),
                      type_name(type), static_cast<unsigned long long>(k), static_cast<long long>(latency.count()));
        auto o = one(k, type);
        ++runs;
        if (verbose)
            std::printf("  %s %s k=%llu: %s%s\n", name.c_str(), type_name(type), static_cast<unsigned long long>(k),
                        !o.emitted ? "completed first" : o.aborted ? "operation_aborted" : "completed anyway",
                        o.violation.empty() ? "" : (" VIOLATION " + o.violation).c_str());
        if (!o.violation.empty()) {
            ++failures;
            std::printf("VIOLATION %s, %s cancellation after suspension point %llu: %s\n", name.c_str(),
                        type_name(type), static_cast<unsigned long long>(k), o.violation.c_str());
        }
        if (!o.emitted) break;
        ++covered;
        if (o.aborted) ++aborted;
        if (horizon != 0 && k >= horizon) break;
        if (k > 100000) fatal(name + ": no end of suspension points");
    }
    std::printf("%-28s %-8s %4llu suspension points (%llu cancelled with operation_aborted, %llu completed anyway)\n",
                name.c_str(), type_name(type), static_cast<unsigned long long>(covered),
                static_cast<unsigned long long>(aborted), static_cast<unsigned long long>(covered - aborted));
    std::fflush(stdout);
    return covered;
}

}  // namespace

int run(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--verbose") == 0) verbose = true;
        else {
            std::fprintf(stderr, "usage: tenure_sim_cancel [--verbose]\n");
            return 2;
        }
    }
    std::signal(SIGSEGV, report_crash);
    std::signal(SIGABRT, report_crash);
    auto const started = std::chrono::steady_clock::now();
    using ct = asio::cancellation_type;
    ct const all_types[] = {ct::terminal, ct::partial, ct::total};

    for (auto lat : {nanoseconds{0}, nanoseconds{1ms}}) {
    latency = lat;
    std::printf("-- client A's requests %s:\n", lat == nanoseconds{0} ? "answered at once" : "with 1 ms latency each way");
    for (auto t : all_types) {
        cover("election acquire (free)", t, [](auto k, auto ty) { return election_acquire(k, ty, false, false); });
        cover("election acquire (behind B)", t, [](auto k, auto ty) { return election_acquire(k, ty, true, false); });
        cover("election try_acquire (free)", t, [](auto k, auto ty) { return election_acquire(k, ty, false, true); });
        cover("election try_acquire (held)", t, [](auto k, auto ty) { return election_acquire(k, ty, true, true); });
        cover("semaphore acquire (free)", t, [](auto k, auto ty) { return semaphore_acquire(k, ty, false); });
        cover("semaphore acquire (behind B)", t, [](auto k, auto ty) { return semaphore_acquire(k, ty, true); });
        cover("scope confirm", t, scope_confirm);
    }
    cover("scope run", ct::terminal, scope_run);
    cover("scope release (B waiting)", ct::terminal, scope_release);
    cover("session create", ct::terminal, session_create);
    cover("session close (B waiting)", ct::terminal, session_close);
    auto const reference = campaign_loop(0, ct::terminal);
    ++runs;
    if (!reference.outcome.violation.empty()) {
        ++failures;
        std::printf("VIOLATION campaign (reference run): %s\n", reference.outcome.violation.c_str());
    }
    cover("campaign (to its 2nd term)", ct::terminal, [](auto k, auto ty) { return campaign_loop(k, ty).outcome; },
          reference.second_term_at);
    }

    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::printf("tenure_sim_cancel: %llu runs, %s in %.2f s wall\n", static_cast<unsigned long long>(runs),
                failures == 0 ? "all passed" : "FAILED", wall);
    return failures == 0 ? 0 : 1;
}

}  // namespace tenure::sim

int main(int argc, char** argv) { return tenure::sim::run(argc, argv); }
