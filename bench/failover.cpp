// failover: handover latency of the election — from the moment a leader's term
// ends to the moment the next candidate's election.acquire() resolves — as a
// distribution over many handovers, per scenario, backend and candidate count;
// and of the semaphore (sem-clean): a permit holder's clean release -> a parked
// waiter's semaphore.acquire() resolved.
//
//   failover [--quick | --full] [--scenario LIST] [--backend LIST] [--candidates LIST]
//            [--handovers N] [--slow-handovers N] [--ttl-ms T] [--lock-delay-ms D]
//            [--hold-ms H] [--etcd-unsafe-no-fsync] [--etcdctl-kill-handovers N]
//            [--no-raw-floor] [--csv FILE] [--plot DIR]
//   failover --candidate --consul URL --key KEY --ttl-ms T --lock-delay-ms D   (child mode)
//   failover --candidate --etcd URL --key NAME --ttl-ms T                      (child mode, etcd)
//
// --quick (the default: 20 handovers, 4 for probe/ttl/kill, TTL 300 ms, D 50 ms; etcd's
// lease TTL is T rounded up to whole seconds, at least 1 s; etcdctl kill skipped) takes about
// 2 minutes (sem-clean's rows on http, inproc and etcd add a few seconds each); --full (200
// handovers, 30 for probe/ttl/kill, TTL 1 s, D 100 ms, 3 etcdctl kill handovers of ~1 min
// each per K) about 40 minutes.
// LISTs are comma-separated. A table goes to stdout, progress to stderr, one
// CSV row per handover to --csv, and a CDF plot per scenario (PNG, gnuplot) to --plot.
//
// Scenarios (how the leader's term ends; "D" is --lock-delay-ms):
//   clean       the leader releases the key (?release=, handoff_on_release off): no
//               lock-delay; the parked followers race for it.
//   handoff     the same release with the default election_options: the release hands
//               the key to the longest-waiting follower in one transaction
//               (handoff_on_release): what a user's release() does. Its raw floor is
//               clean's (a release, then one acquire by a parked follower).
//   destroy-0   the leader's session is destroyed (PUT /v1/session/destroy), LockDelay 0.
//   destroy     the same with LockDelay D.
//   check-fail  the leader's session carries tenure's application health check
//               (session_options::health_check_ttl); the bench sets that check critical
//               (PUT /v1/agent/check/fail): the server invalidates the session; LockDelay D.
//   probe       the same check, but through the session's health_probe turning false: the
//               session reports the check critical at its next renewal (every TTL/2).
//   ttl         TTL lapse: a raw session (created with the client, TTL T, never renewed
//               again) holds the key; the server invalidates it 2 x TTL after its last
//               renewal (Consul's grace). Measured from the invalidation AND from the last
//               renewal.
//   kill        a real child process (this binary in --candidate mode: a tenure session with
//               TTL T, renewed every T/2, and election.acquire()) leads and is SIGKILLed.
//               Leadership ends at the kill; the server notices when the TTL lapses.
//   transfer    the leader hands the key to a random parked follower with
//               leadership_scope::transfer_to() (one /v1/txn: check-session of its
//               registry entry, unlock, lock): the gap from the transfer's answer
//               (inproc: the key's change) to the target's acquire() resolving.
//   prio-clean  clean, with priorities 0..3 (candidate id % 4): the release hands the
//               key to the best parked candidate (handoff_on_release).
//   sem-clean   a tenure::semaphore (limit 2) instead of an election: K contenders, 2
//               holders (each holds until the bench says), K-2 waiters parked in
//               semaphore.acquire(). The bench releases the holder admitted first
//               (permit.release(): the `.lock` CAS without it, then the delete of its
//               contender key; etcd: the delete of its key) and times it until a
//               waiter's acquire() resolves; the released contender then waits again
//               with the same session. Consul sessions with behavior delete_keys.
//               K must exceed the limit (rows with K <= 2 are skipped).
//
// Backends: http (the `tenure agent` binary as a child process, one Consul HTTP client
// per candidate over loopback keep-alive connections) and inproc (a tenure::agent on the
// bench's io_context, one in-process client per candidate, no sockets; the kill
// scenario's child process talks to that same agent over its HTTP listener).
// etcd (tenure's elections on etcd: a lease is the session, keepalive every TTL/3,
// lock_delay 0) and etcdctl (the baseline: K `etcdctl elect` processes) run on one etcd
// member that the bench starts on free loopback ports (etcd_cluster.hpp); they measure
// clean, destroy-0 (etcd: the lease revoked), ttl (etcd: lease expiry), kill and sem-clean
// (etcdctl: clean and kill only); see failover_etcd.cpp. Without etcd (or etcdctl)
// installed those rows are skipped with a message.
//
// K candidates means K sessions contend for the key: the leader and K-1 followers
// parked in acquire(). In the candidate-led scenarios the leader is the previous
// winner; in ttl and kill the previous winner hands the key over to the raw session /
// the child with one transaction (unlock + lock), then campaigns again as a follower.
// Before each term ends the followers are given time to park (--hold-ms; on the
// in-process backend the bench also waits until the agent has them parked).
//
// Breakdown of each handover:
//   detection    end of leadership -> the server invalidates the session (clean: the key
//                is free). inproc: exact, from the agent's state machine hooks. http: the
//                earliest of three signs, each an upper bound: the agent's "session
//                invalidated" log line (read from its stderr by a thread of the bench that
//                stamps each line on arrival; the agent writes it before it answers
//                the woken queries), a blocking query on /v1/session/info/<id> (not for
//                clean), and the answer to the request that ended the term. The CSV
//                also has the blocking query's own figure (query_detection_ms): with 100
//                candidates it is one of 100 woken queries and can lag by milliseconds.
//   lock-delay   the leader's LockDelay (0 for clean and destroy-0).
//   acquisition  invalidation + lock-delay -> acquire() resolved: the overshoot past
//                the lock-delay (for clean: key free -> acquire resolved).
// The raw-API floor (issue 23; failover_floor.cpp; --no-raw-floor to skip it): after
// each http row of clean, destroy-0 and destroy, the same number of handovers with K raw
// participants against the same agent, written with Beast directly (one keep-alive
// connection and one session each): the leader's ?release= (or session destroy), a
// follower's parked blocking GET returns, it sends one ?acquire= (after an invalidation
// with LockDelay D, D after its GET returned). Rows of backend "raw"; at the end, a table
// of tenure's p50 and p99 as ratios to the floor's (and, with D, of the overshoots past D).
// On etcd and etcdctl: detection = end -> the leader's key deleted, as a watch on the
// election's prefix sees it; lock-delay 0; acquisition = key deleted -> acquire() resolved
// (etcdctl: -> the next process printed its key).
// sem-clean: latency = release sent -> a waiter's acquire() resolved; detection = release
// sent -> `.lock` rewritten without the holder (inproc: exact, a watch on the agent's state
// machine; http: not observed, "-": a blocking query would be one more woken query racing
// the waiters) or -> the holder's key deleted (etcd, the prefix watch); acquisition = from
// there -> acquire() resolved; ans (release_answered_ms) = release sent -> release()
// returned, which on Consul can come after the waiter is admitted.
#include "etcd_cluster.hpp"
#include "failover.hpp"
#include "failover_run.hpp"

#include <tenure/election.hpp>

#include "agent/agent_access.hpp"
#include "consul/client_access.hpp"

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <sstream>

namespace {

using namespace failover_bench;
namespace consul = tenure::consul;
using tenure::detail::agent::watch_target;
// The client's coroutines, awaited without the co_spawn of its token operations.
using tenure::detail::coro;

// ---------------------------------------------------------------------------
// Child mode: one candidate in its own process (the kill scenario's leader).
// Prints "READY <session>" once its session exists and "ELECTED <session>
// <token>" once it leads, then keeps renewing until it is killed.

int run_child(std::string url, std::string key, std::chrono::milliseconds ttl, std::chrono::milliseconds delay) {
    asio::io_context io;
    consul::client_config cc;
    cc.address = url;
    consul::client cl(io.get_executor(), cc);
    return run_candidate(io, cl, key, ttl, delay, "failover --candidate");
}

// ---------------------------------------------------------------------------
// One run: a backend, a scenario, K candidates, N handovers.

struct candidate : tenure_candidate<consul::client> {
    using tenure_candidate::tenure_candidate;
    std::shared_ptr<bool> probe_fail;  // probe scenario: the session's health_probe answers !*probe_fail
};

class run {
public:
    run(config const& cfg, scenario_def const& sc, backend& be, int k, std::string self_exe)
        : cfg_(cfg), sc_(sc), be_(be), k_(k), self_(std::move(self_exe)), wake_(be.executor()), cands_(wake_) {}

    asio::awaitable<result_set> go();

private:
    // One handover's leader and the moments it is timed by.
    struct round {
        std::string sid;       // the leader's session
        std::string check_id;  // check-fail: the health check bound to it
        int target = -1;       // transfer: the candidate the key goes to
        steady::time_point t0{}, t_renew{};
        steady::time_point t_answered{};  // semaphore: permit.release() returned
    };

    void prepare_run();
    void install_hooks();
    void remove_hooks();
    void start_candidates(asio::any_io_executor ex);
    asio::awaitable<candidate*> handover(candidate& leader, int i, std::vector<sample>& samples);
    asio::awaitable<void> install_leader(candidate& leader, round& r);
    asio::awaitable<std::string> start_raw_leader(candidate& leader);
    asio::awaitable<std::string> start_child_leader(candidate& leader);
    asio::awaitable<std::string> health_check_of(candidate& leader, std::string const& sid);
    asio::awaitable<void> park(round& r);
    asio::awaitable<void> end_term(candidate& leader, round& r);
    asio::awaitable<sample> time_handover(round& r, candidate const& next, steady::time_point t3);
    asio::awaitable<void> shut_down();

    asio::awaitable<candidate*> next_winner(steady::time_point deadline) {
        return cands_.next_winner(deadline, [this] { return cands_.failure(); });
    }
    asio::awaitable<void> hold(int followers, bool leader_monitor);
    void arm_observer(std::string const& sid, bool key_mode);
    asio::awaitable<void> observe(std::string sid, bool key_mode);
    void disarm_observer();
    asio::awaitable<void> swap_to(candidate& w, std::string const& sid, std::string const& value);
    // Each sign of the invalidation (or release) is an upper bound: keep the earliest.
    void set_t1(steady::time_point t) {
        if (!t1_ || t < *t1_) t1_ = t;
        wake_.cancel();
    }
    std::chrono::nanoseconds delay() const { return sc_.delay ? std::chrono::nanoseconds(cfg_.lock_delay) : 0ns; }
    // What a clean release changes first: the election's key, or the semaphore's `.lock`.
    std::string released_key() const { return sc_.semaphore() ? key_ + "/.lock" : key_; }
    // Whether the release (invalidation) is seen: everywhere but a semaphore's
    // release over HTTP (see arm_observer).
    bool sees_end() const { return be_.agent() || !sc_.semaphore(); }
    steady::duration round_timeout() const { return 2 * cfg_.ttl + cfg_.lock_delay + 10s; }

    config const& cfg_;
    scenario_def const& sc_;
    backend& be_;
    int k_;
    std::string self_;
    std::string key_;
    tenure::session_options so_;
    std::unique_ptr<consul::client> admin_;  // the raw session, the hand-over txn, the http observer
    asio::steady_timer wake_;                // the controller waits on it
    candidate_set<candidate> cands_;
    std::optional<child_proc> child_;        // kill: this round's leader

    // The in-process agent's hooks as they were before the run (restored after it).
    std::function<void(tenure::detail::agent::session_entry const&, tenure::detail::agent::invalidation_cause)>
        saved_hook_;
    std::function<void(std::string_view)> saved_reject_hook_;

    // Observation of the round's invalidation (or key release).
    std::string watch_sid_;
    std::optional<steady::time_point> t1_;
    std::optional<steady::time_point> t_query_;  // http: when the blocking query saw it
    bool log_seen_ = false;                        // http: the agent's log line about it was read
    std::optional<tenure::detail::agent::state_machine::watch_registration> key_watch_;
    std::unique_ptr<asio::cancellation_signal> obs_stop_;
    bool obs_parked_ = false;
    bool obs_running_ = false;
    int rejects_ = 0;
    std::mt19937_64 rng_{std::random_device{}()};
};

// Lets the followers park in their blocking queries before the term ends.
asio::awaitable<void> run::hold(int followers, bool leader_monitor) {
    double base = cfg_.hold_ms ? *cfg_.hold_ms : (be_.agent() ? 2.0 : 10.0 + 0.5 * k_);
    co_await sleep_for(std::chrono::microseconds(static_cast<long>(base * 1000)));
    if (auto* a = be_.agent()) {
        // In-process: every parked blocking query is a watch on the state machine.
        auto want = static_cast<std::size_t>(followers + (leader_monitor ? 1 : 0));
        auto deadline = steady::now() + 2s;
        while (tenure::detail::agent_access::state(*a).watcher_count() < want && steady::now() < deadline) co_await sleep_for(1ms);
    }
}

// The round's observation: when the server invalidates `sid` (key_mode: when
// the key stops being held by `sid`).
void run::arm_observer(std::string const& sid, bool key_mode) {
    watch_sid_ = sid;
    t1_.reset();
    t_query_.reset();
    log_seen_ = false;
    if (auto* a = be_.agent()) {
        if (key_mode) {
            watch_target t;
            t.what = watch_target::kind::key;
            t.name = released_key();
            key_watch_.emplace(tenure::detail::agent_access::state(*a).watch({t}, [this] { set_t1(steady::now()); }));
        }
        return;  // invalidations: the on_invalidate hook installed by go()
    }
    // Over HTTP the answer to the release is the sign of a clean release; a
    // blocking query on the key would be one more woken query racing the
    // followers. (A semaphore's release answers after two writes, the `.lock`
    // CAS and the delete of its contender key, when a waiter may already hold
    // the permit: there its answer is reported apart, and the `.lock` write
    // is not seen over HTTP.)
    if (key_mode) return;
    obs_parked_ = false;
    obs_running_ = true;
    obs_stop_ = std::make_unique<asio::cancellation_signal>();
    asio::co_spawn(wake_.get_executor(), observe(sid, key_mode),
                   asio::bind_cancellation_slot(obs_stop_->slot(), [this](std::exception_ptr) {
                       obs_running_ = false;
                       wake_.cancel();
                   }));
}

asio::awaitable<void> run::observe(std::string sid, bool key_mode) {
    consul::read_options ro;
    if (key_mode) {
        auto r = co_await coro(*admin_).kv_get(key_);
        while (r.value && r.value->session == sid) {
            ro.index = r.meta.index;
            ro.wait = 5min;
            obs_parked_ = true;
            wake_.cancel();
            r = co_await coro(*admin_).kv_get(key_, ro);
        }
    } else {
        auto r = co_await coro(*admin_).session_info_get(sid);
        while (r.value) {
            ro.index = r.meta.index;
            ro.wait = 5min;
            obs_parked_ = true;
            wake_.cancel();
            r = co_await coro(*admin_).session_info_get(sid, ro);
        }
    }
    t_query_ = steady::now();
    set_t1(*t_query_);
}

void run::disarm_observer() {
    key_watch_.reset();
    watch_sid_.clear();
    if (obs_stop_ && obs_running_) obs_stop_->emit(asio::cancellation_type::terminal);
}

// Hands the key from candidate `w` to session `sid` in one transaction: no
// moment where the key is free for the followers to take.
asio::awaitable<void> run::swap_to(candidate& w, std::string const& sid, std::string const& value) {
    consul::txn_op unlock;
    unlock.verb = "unlock";
    unlock.key = key_;
    unlock.value = w.name;
    unlock.flags = consul::lock_flag_value;
    unlock.session = w.s.id();
    consul::txn_op lock;
    lock.verb = "lock";
    lock.key = key_;
    lock.value = value;
    lock.flags = consul::lock_flag_value;
    lock.session = sid;
    std::vector<consul::txn_op> ops{unlock, lock};
    auto res = co_await coro(*admin_).txn(ops);
    if (!res.committed)
        throw std::runtime_error("hand-over txn refused: " + (res.errors.empty() ? std::string("?") : res.errors[0].what));
    // The previous winner notices (released_by_other) and campaigns again.
    co_await w.scope.wait_lost(tuple_awaitable);
    w.scope = tenure::leadership_scope{};
    cands_.resume(w);
}

asio::awaitable<result_set> run::go() {
    result_set out =
        new_result_set(be_.name(), sc_.name, k_, ms(delay()), static_cast<double>(cfg_.ttl.count()));
    int const n = sc_.slow ? cfg_.slow_handovers : cfg_.handovers;
    prepare_run();
    install_hooks();
    start_candidates(co_await asio::this_coro::executor);
    co_await run_handovers<candidate>(
        sc_, be_.name(), 6, k_, n, 10s + 20ms * k_, [this](steady::time_point d) { return next_winner(d); },
        [this](candidate* c, int i, std::vector<sample>& v) { return handover(*c, i, v); }, out.samples);
    cands_.warn_double_wins();
    co_await shut_down();
    out.load = loadavg();
    co_return out;
}

// The run's key and its candidates' session options.
void run::prepare_run() {
    key_ = "bench/failover/" + sc_.name + "/" + std::to_string(k_) + "/" +
           std::to_string(steady::now().time_since_epoch().count());
    so_.ttl = sc_.name == "probe" ? std::chrono::nanoseconds(cfg_.ttl) : std::chrono::nanoseconds(quiet_ttl);
    so_.lock_delay = delay();
    if (sc_.name == "check-fail" || sc_.name == "probe") so_.health_check_ttl = 3 * so_.ttl;
    // Semaphore sessions delete their contender keys when they end, as the Go
    // api's and `consul lock`'s do (tenure/semaphore.hpp).
    if (sc_.semaphore()) so_.behavior = consul::session_behavior::delete_keys;
    admin_ = be_.make_client();
}

// Where the signs of each invalidation come from.
void run::install_hooks() {
    // In-process: the exact moment of the invalidation, from the state machine.
    if (auto* a = be_.agent()) {
        saved_reject_hook_ = tenure::detail::agent_access::state(*a).on_lock_delay_reject;
        tenure::detail::agent_access::state(*a).on_lock_delay_reject = [this, saved = saved_reject_hook_](std::string_view key) {
            if (saved) saved(key);
            if (key == key_) ++rejects_;
        };
        saved_hook_ = tenure::detail::agent_access::state(*a).on_invalidate;
        tenure::detail::agent_access::state(*a).on_invalidate = [this, saved = saved_hook_](auto const& s, auto cause) {
            if (saved) saved(s, cause);
            if (!watch_sid_.empty() && s.id == watch_sid_) set_t1(steady::now());
        };
    }

    // Over HTTP, the agent logs each invalidation the moment it happens (before
    // it answers the woken blocking queries): the earliest sign of it.
    if (!be_.agent()) {
        be_.on_log([this](std::string const& line, steady::time_point t) {
            if (watch_sid_.empty() || line.find("session invalidated: id=" + watch_sid_) == std::string::npos) return;
            log_seen_ = true;
            set_t1(t);
        });
    }
}

void run::remove_hooks() {
    be_.on_log({});
    if (auto* a = be_.agent()) {
        tenure::detail::agent_access::state(*a).on_invalidate = saved_hook_;
        tenure::detail::agent_access::state(*a).on_lock_delay_reject = saved_reject_hook_;
    }
}

// The candidates in this process: K, or K-1 beside the raw session / child leader.
void run::start_candidates(asio::any_io_executor ex) {
    int const local = sc_.leader == leader_kind::candidate ? k_ : k_ - 1;
    bool const probe = sc_.name == "probe";
    if (sc_.name == "prio-clean")
        cands_.options_of = [](int id) {
            tenure::election_options o;
            o.priority = id % 4;  // mixed: 0..3
            return o;
        };
    if (sc_.name == "clean")  // the plain ?release= and the followers' race, as before handoffs
        cands_.options_of = [](int) {
            tenure::election_options o;
            o.handoff_on_release = false;
            return o;
        };
    cands_.start(
        ex, local, [this] { return be_.make_client(); }, key_, so_, sc_.permits,
        [probe](candidate& c, tenure::session_options& so) {
            if (!probe) return;
            auto flag = std::make_shared<bool>(false);
            c.probe_fail = flag;
            so.health_probe = [flag] { return !*flag; };
        });
}

// One handover, from `leader`'s term to the next leader's: appends its sample
// and returns the next leader.
asio::awaitable<candidate*> run::handover(candidate& leader, int i, std::vector<sample>& samples) {
    round r;
    co_await install_leader(leader, r);
    TRACE("round %d leader installed %s", i, r.sid.c_str());
    co_await park(r);
    co_await end_term(leader, r);
    TRACE("term ended");

    // 4. The next leader.
    candidate* next = co_await next_winner(steady::now() + round_timeout());
    auto const t3 = cands_.elected_at();
    if (r.target >= 0 && next->id != r.target)
        std::fprintf(stderr, "\n  warning: transfer to candidate %d elected %d\n", r.target, next->id);
    sample const s = co_await time_handover(r, *next, t3);
    samples.push_back(s);

    // 5. The old leader campaigns again.
    co_await retire_leader(cands_, leader, sc_, child_);
    TRACE("round done");
    co_return next;
}

// 1. The leader of this round: the previous winner, or the raw session or
// the child it hands the key to.
asio::awaitable<void> run::install_leader(candidate& leader, round& r) {
    if (sc_.leader == leader_kind::raw) {
        r.sid = co_await start_raw_leader(leader);
    } else if (sc_.leader == leader_kind::child) {
        r.sid = co_await start_child_leader(leader);
    } else {
        r.sid = leader.s.id();
        if (sc_.name == "check-fail") r.check_id = co_await health_check_of(leader, r.sid);
    }
}

// ttl: a raw session (TTL T, renewed only by the bench) takes the key.
asio::awaitable<std::string> run::start_raw_leader(candidate& leader) {
    consul::session_request req;
    req.name = "bench-raw";
    req.ttl = cfg_.ttl;
    req.lock_delay = delay();
    req.node_checks = std::vector<std::string>{};  // only the TTL keeps it alive
    std::string sid = co_await coro(*admin_).session_create(req);
    std::string value = "raw";
    co_await swap_to(leader, sid, value);
    co_return sid;
}

// kill: a child process (this binary, --candidate) takes the key.
asio::awaitable<std::string> run::start_child_leader(candidate& leader) {
    std::vector<std::string> args{"--candidate", "--consul", be_.url(), "--key", key_,
                                  "--ttl-ms", std::to_string(cfg_.ttl.count()),
                                  "--lock-delay-ms", std::to_string(cfg_.lock_delay.count())};
    std::string sid = co_await start_child(child_, self_, args);
    std::string value = "child";
    co_await swap_to(leader, sid, value);
    co_await expect_child_line(*child_, "ELECTED ");
    co_return sid;
}

// check-fail: the tenure health check bound to the leader's session.
asio::awaitable<std::string> run::health_check_of(candidate& leader, std::string const& sid) {
    std::string check_id;
    auto info = co_await coro(*leader.cl).session_info_get(sid);
    if (info.value)
        for (auto const& c : info.value->node_checks)
            if (c.rfind("tenure-health:", 0) == 0) check_id = c;
    if (check_id.empty()) throw std::runtime_error("the leader's session has no health check");
    co_return check_id;
}

// 2. Followers park; the observer too.
asio::awaitable<void> run::park(round& r) {
    int const followers = sc_.leader == leader_kind::candidate ? cands_.size() - 1 : cands_.size();
    co_await hold(followers, sc_.leader != leader_kind::raw);
    TRACE("held");
    if (sc_.leader == leader_kind::raw) {
        // The last renewal the raw session will ever get, once the followers
        // are parked again (so that the agent is idle when it handles it).
        r.t_renew = steady::now();
        co_await coro(*admin_).session_renew(r.sid);
    }
    arm_observer(r.sid, sc_.releases());
    if (!be_.agent()) {
        co_await wait_until(wake_, [&] { return obs_parked_ || !obs_running_; }, steady::now() + 5s);
        co_await sleep_for(1ms);
    }

    TRACE("observer parked %d running %d", int(obs_parked_), int(obs_running_));
    // A SIGKILL or a failing probe strikes at a random moment of the
    // leader's renewal cycle (every TTL/2), not right after a renewal.
    if (sc_.name == "kill" || sc_.name == "probe") {
        std::uniform_int_distribution<long> phase(0, std::chrono::microseconds(cfg_.ttl).count() / 2);
        co_await sleep_for(std::chrono::microseconds(phase(rng_)));
    }
}

// 3. End the term.
asio::awaitable<void> run::end_term(candidate& leader, round& r) {
    rejects_ = 0;
    r.t0 = steady::now();
    if (sc_.name == "transfer") {
        std::uniform_int_distribution<int> pick(0, cands_.size() - 2);
        r.target = pick(rng_);
        if (r.target >= leader.id) ++r.target;
        auto [ec, token] = co_await leader.scope.transfer_to(cands_.at(r.target).s.id(), tuple_awaitable);
        if (ec) throw std::runtime_error("transfer_to failed: " + ec.message());
        (void)token;
    } else if (sc_.releases()) {
        co_await leader.scope.release(tuple_awaitable);
    } else if (sc_.name == "destroy" || sc_.name == "destroy-0") {
        co_await coro(*leader.cl).session_destroy(r.sid);
    } else if (sc_.name == "check-fail") {
        std::string note = "failover bench";
        co_await coro(*leader.cl).check_fail(r.check_id, note);
    } else if (sc_.name == "probe") {
        *leader.probe_fail = true;
    } else if (sc_.name == "kill") {
        ::kill(child_->proc->id(), SIGKILL);
    }  // ttl: nothing to do, the server's TTL timer ends it
    // The answer to the request that ended the term comes after the
    // server acted on it: an upper bound for the invalidation / release.
    auto const answered = steady::now();
    TRACE("end request answered after %.3f ms (t1 %s)", ms(answered - r.t0), t1_ ? "set" : "unset");
    if (sc_.semaphore()) r.t_answered = answered;
    else if (sc_.releases() || sc_.name == "check-fail" || sc_.name.rfind("destroy", 0) == 0) set_t1(answered);
}

// The handover's sample, once the observer has had its chance to see the
// invalidation; `next` was elected at t3.
asio::awaitable<sample> run::time_handover(round& r, candidate const& next, steady::time_point t3) {
    if (sees_end()) co_await wait_until(wake_, [&] { return t1_.has_value(); }, steady::now() + 2s);
    if (!be_.agent() && !sc_.releases())  // the log line is the earliest sign: wait for it
        co_await wait_until(wake_, [&] { return log_seen_; }, steady::now() + 200ms);
    disarm_observer();
    co_await wait_until(wake_, [&] { return !obs_running_; }, steady::now() + 5s);
    TRACE("winner %d, t1 %d", next.id, int(t1_.has_value()));
    sample s;
    s.lock_delay = ms(delay());
    auto const ended = set_timings(s, sc_.name == "ttl", r.t0, t1_, t3, r.t_renew);
    if (be_.agent()) s.rejected = rejects_;
    if (t_query_) s.query_detection = ms(*t_query_ - ended);
    if (sc_.semaphore()) s.release_answered = ms(r.t_answered - r.t0);
    co_return s;
}

// Stop: every candidate releases and closes its session.
asio::awaitable<void> run::shut_down() {
    disarm_observer();
    co_await wait_until(wake_, [&] { return !obs_running_; }, steady::now() + 5s);
    co_await kill_child(child_);
    TRACE("stopping");
    co_await cands_.stop();
    cands_.close_clients();
    admin_->close();
    remove_hooks();
}

// ---------------------------------------------------------------------------
// Output.

void print_header() {
    std::printf("%-7s %-10s %4s %5s | %9s %9s %9s %9s | %9s %7s | %9s %9s %9s | %9s %9s %9s %5s %5s\n", "backend",
                "scenario", "K", "n", "p50 ms", "p90 ms", "p99 ms", "max ms", "detect50", "delay", "acq p50", "acq p99",
                "acq max", "rn>inv50", "rn>acq50", "ans50", "rej/h", "load1");
}

void print_row(result_set const& r) {
    auto const& v = r.samples;
    auto lat = column(v, [](sample const& s) { return s.latency; });
    auto det = column(v, [](sample const& s) { return s.detection; });
    auto acq = column(v, [](sample const& s) { return s.acquisition; });
    auto ren = column(v, [](sample const& s) { return s.from_renewal; });
    auto rin = column(v, [](sample const& s) { return s.renew_to_inval; });
    auto ans = column(v, [](sample const& s) { return s.release_answered; });
    auto rejv = column(v, [](sample const& s) { return s.rejected < 0 ? nan_v : double(s.rejected); });
    std::string rej = "-";
    if (!rejv.empty()) {
        char buf[16];
        std::snprintf(buf, sizeof buf, "%.2f", std::accumulate(rejv.begin(), rejv.end(), 0.0) / double(rejv.size()));
        rej = buf;
    }
    auto f = [](double x) {
        char buf[32];
        if (std::isnan(x)) return std::string("-");
        std::snprintf(buf, sizeof buf, "%.3f", x);
        return std::string(buf);
    };
    std::printf("%-7s %-10s %4d %5zu | %9s %9s %9s %9s | %9s %7.0f | %9s %9s %9s | %9s %9s %9s %5s %5s\n",
                r.backend.c_str(), r.scenario.c_str(), r.candidates, v.size(), f(pct(lat, 50)).c_str(),
                f(pct(lat, 90)).c_str(), f(pct(lat, 99)).c_str(), f(max_of(lat)).c_str(), f(pct(det, 50)).c_str(),
                r.lock_delay_ms, f(pct(acq, 50)).c_str(), f(pct(acq, 99)).c_str(), f(max_of(acq)).c_str(),
                f(pct(rin, 50)).c_str(), f(pct(ren, 50)).c_str(), f(pct(ans, 50)).c_str(), rej.c_str(),
                r.load.substr(0, r.load.find(' ')).c_str());
    std::fflush(stdout);
}

void write_csv_header(std::ofstream& f) {
    f << "backend,scenario,candidates,handover,latency_ms,detection_ms,lock_delay_ms,acquisition_ms,"
         "renewal_to_invalidation_ms,from_renewal_ms,ttl_ms,lock_delay_rejections,query_detection_ms,load1,"
         "release_answered_ms\n";
}

void write_csv(std::ofstream& f, result_set const& r) {
    auto num = [](double x) {
        if (std::isnan(x)) return std::string();
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.4f", x);
        return std::string(buf);
    };
    for (std::size_t i = 0; i < r.samples.size(); ++i) {
        auto const& s = r.samples[i];
        f << r.backend << ',' << r.scenario << ',' << r.candidates << ',' << i << ',' << num(s.latency) << ','
          << num(s.detection) << ',' << num(s.lock_delay) << ',' << num(s.acquisition) << ','
          << num(s.renew_to_inval) << ',' << num(s.from_renewal) << ',' << num(r.ttl_ms) << ','
          << (s.rejected < 0 ? std::string() : std::to_string(s.rejected)) << ',' << num(s.query_detection) << ','
          << r.load.substr(0, r.load.find(' ')) << ',' << num(s.release_answered) << '\n';
    }
    f.flush();
}

// One CDF data file per series: "value fraction" lines, sorted.
void write_cdf(std::string const& path, std::vector<double> v) {
    std::sort(v.begin(), v.end());
    std::ofstream f(path);
    for (std::size_t i = 0; i < v.size(); ++i)
        f << v[i] << ' ' << static_cast<double>(i + 1) / static_cast<double>(v.size()) << '\n';
}

// Which kinds of backend a scenario's rows come from.
struct backend_mix {
    bool consul = false, etcd = false, etcdctl = false;
    double etcd_ttl_ms = 0;
    bool any_etcd() const { return etcd || etcdctl; }
};

backend_mix mix_of(std::vector<result_set const*> const& sets) {
    backend_mix m;
    for (auto* r : sets) {
        if (r->backend == "etcd") {
            m.etcd = true;
            m.etcd_ttl_ms = r->ttl_ms;
        } else if (r->backend == "etcdctl") {
            m.etcdctl = true;
        } else {
            m.consul = true;
        }
    }
    return m;
}

// "Failover: <what ends the term> — <the parameters of each kind of series present>".
std::string plot_heading(config const& cfg, scenario_def const& sc, backend_mix const& mix,
                         std::vector<result_set const*> const& sets) {
    std::size_t n_min = SIZE_MAX, n_max = 0;
    for (auto* r : sets) {
        n_min = std::min(n_min, r->samples.size());
        n_max = std::max(n_max, r->samples.size());
    }
    std::string params;
    auto add = [&](std::string const& p) { params += (params.empty() ? "" : ", ") + p; };
    if (sc.semaphore()) {
        add("limit " + std::to_string(sc.permits) + ", K - " + std::to_string(sc.permits) + " waiters parked");
    } else {
        if (mix.consul) {
            if (sc.slow) add("TTL " + std::to_string(cfg.ttl.count()) + " ms");
            add("lock-delay " + (sc.delay ? std::to_string(cfg.lock_delay.count()) + " ms" : std::string("0")));
        }
        if (mix.etcd)
            add(std::string("etcd") +
                (sc.slow ? ": lease TTL " + std::to_string(static_cast<long>(mix.etcd_ttl_ms / 1000)) + " s" : "") +
                (mix.consul && sc.delay ? ", lock-delay 0" : ""));
        if (mix.etcdctl) add(std::string("etcdctl") + (sc.slow ? ": lease TTL 60 s" : ""));
    }
    add((n_min == n_max ? std::to_string(n_max) : std::to_string(n_min) + "-" + std::to_string(n_max)) +
        " handovers per line");
    std::string title = mix.consul ? sc.title : sc.etcd_title;
    if (mix.consul && mix.any_etcd() && sc.etcd_title != sc.title) title += " / etcd: " + sc.etcd_title;
    return "Failover: " + title + " — " + params;
}

// A gnuplot `plot` command with one CDF line per row (backend, K) of the
// samples' `field`, each written to its own .dat file; empty if no row has one.
template <class Field>
std::string cdf_plot(std::filesystem::path const& dir, std::string const& name, std::string const& what,
                     std::vector<result_set const*> const& sets, std::map<int, std::string>& color_of, Field field) {
    std::string cmd = "plot ";
    bool first = true;
    for (auto* r : sets) {
        auto v = column(r->samples, field);
        if (v.empty()) continue;
        std::string file =
            (dir / "gnuplot" / (name + "_" + what + "_" + r->backend + "_" + std::to_string(r->candidates) + ".dat"))
                .string();
        write_cdf(file, v);
        if (!first) cmd += ", \\\n     ";
        first = false;
        // Solid: Consul over HTTP; dashed: in-process; dash-dot: etcd; dotted: etcdctl.
        std::string const dt = r->backend == "http"     ? "1"
                               : r->backend == "inproc" ? "2"
                               : r->backend == "etcd"   ? "4"
                                                        : "3";
        cmd += "'" + file + "' using 1:2 with steps lw " + (dt == "3" ? "3" : "2") + " dt " + dt + " lc rgb '" +
               color_of[r->candidates] + "' title '" + r->backend + ", K=" + std::to_string(r->candidates) + "'";
    }
    return first ? std::string() : cmd + "\n";
}

// Panel 1's x axis: the handover latency (ttl: from the last renewal).
void latency_axis(std::ofstream& g, scenario_def const& sc, backend_mix const& mix) {
    if (sc.semaphore()) {
        g << "set logscale x\n";
        g << "set xlabel 'permit handover (ms, log scale): release sent -> a waiter''s acquire() resolved'\n";
    } else if (!sc.delay) {
        g << "set logscale x\n";
        g << "set xlabel 'handover latency (ms, log scale): end of the term -> next acquire() resolved'\n";
    } else if (sc.name == "ttl") {
        g << "set xlabel 'ms from the last renewal of the leader session to the next acquire() resolved'\n";
    } else if (sc.name == "kill" && mix.etcdctl) {
        g << "set logscale x\nset key top left\n";  // the etcdctl lines are at the far right
        g << "set xlabel 'handover latency (ms, log scale): end of the term -> next acquire() resolved'\n";
    } else {
        g << "set xlabel 'handover latency (ms): end of the term -> next acquire() resolved'\n";
    }
}

// Panel 1's title beside the acquisition panel: what the latency is made of.
std::string latency_panel_title(scenario_def const& sc, backend_mix const& mix) {
    bool const ttl = sc.name == "ttl";
    std::string t = "latency: detection + lock-delay + acquisition";
    if (ttl) t = "from the last renewal: the 2 x TTL grace + lock-delay + acquisition";
    else if (sc.name == "kill") t = "from the SIGKILL: TTL lapse (1.5-2 x TTL) + lock-delay + acquisition";
    if (ttl && mix.etcd) t += " (etcd: TTL + up to 0.5 s)";
    else if (sc.name == "kill" && mix.any_etcd()) t += " (etcd: 2/3-1 x TTL + up to 0.5 s)";
    else if (sc.name == "probe") t = "from the probe turning false: next renewal (< TTL/2) + lock-delay + acquisition";
    return t;
}

// The gnuplot script of one scenario's PNG (`sets`: its rows with samples).
void write_plot_script(std::filesystem::path const& gp, std::filesystem::path const& png, config const& cfg,
                       std::string const& name, std::vector<result_set const*> const& sets,
                       std::map<int, std::string>& color_of) {
    auto const& sc = find_scenario(name);
    bool const two_panels = sc.delay;
    auto const mix = mix_of(sets);
    std::filesystem::path const dir = cfg.plot_dir;
    std::ofstream g(gp);
    g << "set terminal pngcairo size " << (two_panels ? 1400 : (mix.any_etcd() ? 1000 : 800))
      << ",560 font 'DejaVu Sans,10'\n";
    g << "set output '" << png.string() << "'\n";
    g << "set key bottom right\nset grid\nset yrange [0:1]\nset ytics 0.1\n";
    g << "set ylabel 'fraction of handovers'\n";
    if (two_panels)
        g << "set multiplot layout 1,2 title \"" << plot_heading(cfg, sc, mix, sets) << "\"\n";
    else
        g << "set title \"" << plot_heading(cfg, sc, mix, sets) << "\"\n";

    // Panel 1: the handover latency.
    latency_axis(g, sc, mix);
    if (two_panels) g << "set title '" << latency_panel_title(sc, mix) << "'\n";
    g << (name == "ttl" ? cdf_plot(dir, name, "from_renewal", sets, color_of,
                                   [](sample const& s) { return s.from_renewal; })
                        : cdf_plot(dir, name, "latency", sets, color_of, [](sample const& s) { return s.latency; }));
    if (two_panels) {
        g << "unset title\nset title 'acquisition: overshoot past the end of the lock-delay'\nset key bottom right\n";
        g << "set logscale x\n";
        g << "set xlabel 'ms from invalidation + lock-delay to the next acquire() resolved (log scale)'\n";
        g << cdf_plot(dir, name, "acquisition", sets, color_of, [](sample const& s) { return s.acquisition; });
        g << "unset multiplot\n";
    }
}

// A PNG per scenario: the CDF of the handover latency, one line per backend and
// candidate count; scenarios with a lock-delay or a detection phase get a second
// panel with the acquisition (the overshoot past the lock-delay).
void plot(config const& cfg, std::vector<result_set> const& results) {
    namespace fs = std::filesystem;
    fs::path dir = cfg.plot_dir;
    fs::create_directories(dir / "gnuplot");
    std::map<std::string, std::vector<result_set const*>> by_scenario;
    for (auto const& r : results)
        if (!r.samples.empty()) by_scenario[r.scenario].push_back(&r);
    std::vector<std::string> colors{"#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02"};
    std::map<int, std::string> color_of;
    for (auto k : cfg.candidates) color_of.emplace(k, colors[color_of.size() % colors.size()]);

    for (auto const& [name, sets] : by_scenario) {
        fs::path gp = dir / "gnuplot" / ("failover_" + name + ".gp");
        fs::path png = dir / ("failover_" + name + ".png");
        write_plot_script(gp, png, cfg, name, sets, color_of);
        if (!run_gnuplot(gp.string()))
            std::fprintf(stderr, "gnuplot failed for %s (is gnuplot-nox installed?)\n", gp.c_str());
        else
            std::fprintf(stderr, "plot: %s\n", png.c_str());
    }
}

// Reads a CSV written by --csv back into result sets (for --from-csv).
std::vector<result_set> read_csv(std::string const& path, config& cfg) {
    std::ifstream f(path);
    if (!f) throw std::runtime_error("cannot read " + path);
    std::string line;
    std::getline(f, line);
    auto header = split(line);
    std::vector<result_set> out;
    std::set<int> ks;
    while (std::getline(f, line)) {
        std::vector<std::string> cells;
        std::stringstream in(line);
        for (std::string c; std::getline(in, c, ',');) cells.push_back(c);
        cells.resize(header.size());
        std::map<std::string, std::string> row;
        for (std::size_t i = 0; i < header.size(); ++i) row[header[i]] = cells[i];
        auto num = [&](std::string const& k) { return row[k].empty() ? nan_v : std::stod(row[k]); };
        int k = std::stoi(row["candidates"]);
        if (out.empty() || out.back().backend != row["backend"] || out.back().scenario != row["scenario"] ||
            out.back().candidates != k) {
            result_set r;
            r.backend = row["backend"];
            r.scenario = row["scenario"];
            r.candidates = k;
            r.lock_delay_ms = num("lock_delay_ms");
            r.ttl_ms = num("ttl_ms");
            r.load = row["load1"];
            out.push_back(r);
            ks.insert(k);
            if (r.backend == "http" || r.backend == "inproc")
                cfg.ttl = std::chrono::milliseconds(static_cast<long>(r.ttl_ms));
            if (r.lock_delay_ms > 0) cfg.lock_delay = std::chrono::milliseconds(static_cast<long>(r.lock_delay_ms));
        }
        sample s;
        s.latency = num("latency_ms");
        s.detection = num("detection_ms");
        s.lock_delay = num("lock_delay_ms");
        s.acquisition = num("acquisition_ms");
        s.renew_to_inval = num("renewal_to_invalidation_ms");
        s.from_renewal = num("from_renewal_ms");
        s.rejected = row["lock_delay_rejections"].empty() ? -1 : std::stoi(row["lock_delay_rejections"]);
        s.query_detection = num("query_detection_ms");
        s.release_answered = num("release_answered_ms");  // absent before the semaphore rows
        out.back().samples.push_back(s);
    }
    cfg.candidates.assign(ks.begin(), ks.end());
    return out;
}

int usage() {
    std::cerr << "usage: failover [--quick | --full]\n"
                 "                [--scenario clean,handoff,destroy-0,destroy,check-fail,probe,ttl,kill,transfer,prio-clean,sem-clean]\n"
                 "                [--backend http,inproc,etcd,etcdctl] [--candidates 3,10,100] [--handovers N]\n"
                 "                [--slow-handovers N] [--ttl-ms T] [--lock-delay-ms D] [--hold-ms H]\n"
                 "                [--etcd-unsafe-no-fsync] [--etcdctl-kill-handovers N] [--no-raw-floor]\n"
                 "                [--csv FILE] [--plot DIR]\n"
                 "       failover --from-csv FILE [--plot DIR]   (table and plots of a previous run)\n";
    return 2;
}

// Child mode: failover --candidate (--consul URL | --etcd URL) --key KEY ...
int candidate_main(std::vector<std::string> const& args) {
    std::string url, key, etcd_url;
    int ttl = 1000, delay = 0;
    for (std::size_t i = 1; i < args.size(); ++i) {
        if (args[i] == "--consul") url = flag_value(args, i);
        else if (args[i] == "--etcd") etcd_url = flag_value(args, i);
        else if (args[i] == "--key") key = flag_value(args, i);
        else if (args[i] == "--ttl-ms") ttl = std::stoi(flag_value(args, i));
        else if (args[i] == "--lock-delay-ms") delay = std::stoi(flag_value(args, i));
        else return usage();
    }
    if (!etcd_url.empty()) return run_etcd_child(etcd_url, key, std::chrono::milliseconds(ttl));
    return run_child(url, key, std::chrono::milliseconds(ttl), std::chrono::milliseconds(delay));
}

// Defaults follow the mode; explicit flags override them whatever their order.
void set_mode_defaults(std::vector<std::string> const& args, config& cfg) {
    for (auto const& a : args)
        if (a == "--full") cfg.mode = "full";
    if (cfg.mode == "full") {
        cfg.handovers = 200;
        cfg.slow_handovers = 30;
        cfg.ttl = 1000ms;
        cfg.lock_delay = 100ms;
        cfg.etcdctl_kill_handovers = 3;
    }
}

// The scenario list ("all" or none: every one), and what may not run at all.
void check_config(config& cfg) {
    if (cfg.scenarios.empty() || (cfg.scenarios.size() == 1 && cfg.scenarios[0] == "all"))
        for (auto const& s : all_scenarios) cfg.scenarios.push_back(s.name);
    for (auto const& s : cfg.scenarios) find_scenario(s);
    for (auto const& b : cfg.backends)
        if (b != "http" && b != "inproc" && b != "etcd" && b != "etcdctl")
            throw std::runtime_error("unknown backend " + b);
    for (int k : cfg.candidates)
        if (k < 2) throw std::runtime_error("--candidates: at least 2 (a leader and a follower)");
}

// The flags over the mode's defaults: 0, or the exit code after the usage.
int parse_flags(std::vector<std::string> const& args, config& cfg) {
    set_mode_defaults(args, cfg);
    try {
        for (std::size_t i = 0; i < args.size(); ++i) {
            auto const& a = args[i];
            if (a == "--quick" || a == "--full") continue;
            else if (a == "--scenario") cfg.scenarios = split(flag_value(args, i));
            else if (a == "--backend") cfg.backends = split(flag_value(args, i));
            else if (a == "--candidates") {
                cfg.candidates.clear();
                for (auto const& k : split(flag_value(args, i))) cfg.candidates.push_back(std::stoi(k));
            } else if (a == "--handovers") cfg.handovers = std::stoi(flag_value(args, i));
            else if (a == "--slow-handovers") cfg.slow_handovers = std::stoi(flag_value(args, i));
            else if (a == "--ttl-ms") cfg.ttl = std::chrono::milliseconds(std::stoi(flag_value(args, i)));
            else if (a == "--lock-delay-ms") cfg.lock_delay = std::chrono::milliseconds(std::stoi(flag_value(args, i)));
            else if (a == "--hold-ms") cfg.hold_ms = std::stod(flag_value(args, i));
            else if (a == "--csv") cfg.csv = flag_value(args, i);
            else if (a == "--plot") cfg.plot_dir = flag_value(args, i);
            else if (a == "--from-csv") cfg.from_csv = flag_value(args, i);
            else if (a == "--etcd-unsafe-no-fsync") cfg.etcd_fsync = false;
            else if (a == "--no-raw-floor") cfg.raw_floor = false;
            else if (a == "--etcdctl-kill-handovers") cfg.etcdctl_kill_handovers = std::stoi(flag_value(args, i));
            else return usage();
        }
        check_config(cfg);
    } catch (std::exception const& e) {
        std::cerr << "failover: " << e.what() << "\n";
        return usage();
    }
    return 0;
}

// --from-csv: the table and plots of a previous run.
int print_from_csv(config& cfg) {
    try {
        auto results = read_csv(cfg.from_csv, cfg);
        std::printf("failover results read from %s\n", cfg.from_csv.c_str());
        print_header();
        for (auto const& r : results) print_row(r);
        print_floor_ratios(results);
        if (!cfg.plot_dir.empty()) plot(cfg, results);
        return 0;
    } catch (std::exception const& e) {
        std::cerr << "failover: " << e.what() << "\n";
        return 1;
    }
}

// What the run is, where, and how to read its table.
void print_banner(config const& cfg) {
    std::time_t now = std::time(nullptr);
    char date[64];
    std::strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S %Z", std::localtime(&now));
    std::printf("failover bench (%s): %s; %d handovers per scenario (%d for probe/ttl/kill), TTL %lld ms, "
                "lock-delay D %lld ms; etcd: lease TTL %lld s, lock-delay 0; etcdctl: lease TTL 60 s, %d kill "
                "handovers\n",
                cfg.mode.c_str(), date, cfg.handovers, cfg.slow_handovers, static_cast<long long>(cfg.ttl.count()),
                static_cast<long long>(cfg.lock_delay.count()), static_cast<long long>(etcd_ttl(cfg.ttl).count()),
                cfg.etcdctl_kill_handovers);
    std::printf("machine: %s; load average at start: %s\n", machine().c_str(), loadavg().c_str());
    std::printf("latency: end of the term -> next acquire() resolved (ttl: from the server's invalidation); "
                "detect50: end -> invalidation (or key free), p50;\nacq: invalidation + lock-delay -> acquire() "
                "resolved (the overshoot); rn>inv50, rn>acq50: ttl only, last renewal -> invalidation, -> acquire() "
                "resolved. All in ms.\nrej/h: acquires refused by the lock-delay per handover (inproc only); load1: the "
                "1-minute load average after the row.\netcd, etcdctl: detect = end -> the leader's key deleted (seen by "
                "a watch); acq = key deleted -> acquire() resolved (etcdctl: -> the next process printed its key).\n"
                "sem-clean (semaphore, limit 2, K contenders): latency = a holder's release sent -> a waiter's "
                "acquire() resolved; detect = -> `.lock` rewritten\n(inproc; not seen over http) or the holder's key "
                "deleted (etcd); acq = from there -> acquire() resolved; ans50: release sent -> release() returned, "
                "p50.\n");
    print_header();
}

// Each row as it is measured: the table, the CSV (--csv), and the plots at the end.
struct row_sink {
    std::ofstream csv;
    std::vector<result_set> results;

    void add(result_set r) {
        print_row(r);
        if (csv.is_open()) write_csv(csv, r);
        results.push_back(std::move(r));
    }
};

// The one etcd member of the etcd and etcdctl rows, started when they first need it.
struct etcd_member {
    std::unique_ptr<etcd_server> server;
    std::string error;  // why it could not start (then it is not tried again)
};

asio::awaitable<void> start_etcd_once(asio::io_context& io, config const& cfg, etcd_member& etcd) {
    if (etcd.server || !etcd.error.empty()) co_return;
    etcd_server_options eo;
    eo.fsync = cfg.etcd_fsync;
    try {
        etcd.server = co_await etcd_server::start(io, eo);
    } catch (std::exception const& e) {
        etcd.error = e.what();
    }
    if (etcd.server)
        std::fprintf(stderr, "etcd %s at %s (one member, WAL fsync %s)\n", etcd.server->version().c_str(),
                     etcd.server->url().c_str(), etcd.server->fsync() ? "on" : "off");
}

// A semaphore row needs waiters: more candidates than permits.
bool enough_candidates(scenario_def const& sc, std::string const& bname, int k) {
    if (!sc.semaphore() || k > sc.permits) return true;
    std::fprintf(stderr, "backend %s: %s K=%d skipped (K must exceed the %d permits)\n", bname.c_str(),
                 sc.name.c_str(), k, sc.permits);
    return false;
}

// The rows of backend etcd or etcdctl: each scenario that applies there, each K.
asio::awaitable<void> measure_etcd_backend(asio::io_context& io, config const& cfg, std::string const& bname,
                                           std::string const& self, etcd_member& etcd, row_sink& rows) {
    co_await start_etcd_once(io, cfg, etcd);
    if (!etcd.server) {
        std::fprintf(stderr, "backend %s skipped: %s\n", bname.c_str(), etcd.error.c_str());
        co_return;
    }
    if (bname == "etcdctl" && find_executable("etcdctl", "ETCDCTL_BINARY").empty()) {
        std::fprintf(stderr, "backend etcdctl skipped: etcdctl not found (Debian: etcd-client)\n");
        co_return;
    }
    for (auto const& sname : cfg.scenarios) {
        auto const& sc = find_scenario(sname);
        if (bname == "etcd" ? sc.etcd_title.empty() : !sc.etcdctl) {
            std::fprintf(stderr, "backend %s: scenario %s does not apply, skipped\n", bname.c_str(), sname.c_str());
            continue;
        }
        if (bname == "etcdctl" && sname == "kill" && cfg.etcdctl_kill_handovers <= 0) {
            std::fprintf(stderr, "backend etcdctl: kill skipped (each handover waits for a 60 s "
                                 "lease; --etcdctl-kill-handovers N to run it)\n");
            continue;
        }
        for (int k : cfg.candidates) {
            if (!enough_candidates(sc, bname, k)) continue;
            result_set res;
            if (bname == "etcd") res = co_await run_etcd(cfg, sc, *etcd.server, k, self);
            else res = co_await run_etcdctl(cfg, sc, *etcd.server, k);
            rows.add(std::move(res));
        }
    }
}

// The rows of backend http or inproc: an agent of their own, each scenario, each K.
asio::awaitable<void> measure_consul_backend(asio::io_context& io, config const& cfg, std::string const& bname,
                                             std::string const& self, row_sink& rows) {
    std::unique_ptr<backend> be =
        bname == "http" ? backend::start_http(io, "10ms", "info") : backend::start_inproc(io, 10ms);
    std::fprintf(stderr, "backend %s: agent at %s\n", bname.c_str(), be->url().c_str());
    for (auto const& sname : cfg.scenarios) {
        for (int k : cfg.candidates) {
            if (!enough_candidates(find_scenario(sname), bname, k)) continue;
            run r(cfg, find_scenario(sname), *be, k, self);
            result_set res = co_await r.go();
            rows.add(std::move(res));
            if (bname == "http" && cfg.raw_floor && has_raw_floor(find_scenario(sname))) {
                result_set fl = co_await run_raw_floor(cfg, find_scenario(sname), be->url(), k);
                rows.add(std::move(fl));
            }
        }
    }
    be->stop();
    co_await sleep_for(50ms);  // let the agent's coroutines unwind
}

asio::awaitable<void> measure_all(asio::io_context& io, config const& cfg, std::string const& self, row_sink& rows) {
    etcd_member etcd;
    for (auto const& bname : cfg.backends) {
        if (bname == "etcd" || bname == "etcdctl") co_await measure_etcd_backend(io, cfg, bname, self, etcd, rows);
        else co_await measure_consul_backend(io, cfg, bname, self, rows);
    }
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> args(argv + 1, argv + argc);
    if (!args.empty() && args[0] == "--candidate") return candidate_main(args);

    config cfg;
    if (int rc = parse_flags(args, cfg)) return rc;
    if (!cfg.from_csv.empty()) return print_from_csv(cfg);

    std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
    print_banner(cfg);
    row_sink rows;
    if (!cfg.csv.empty()) {
        rows.csv.open(cfg.csv);
        write_csv_header(rows.csv);
    }

    asio::io_context io;
    int rc = 0;
    asio::co_spawn(io, measure_all(io, cfg, self, rows), [&](std::exception_ptr e) {
        if (e) {
            std::cerr << "failover failed: " << message_of(e) << "\n";
            rc = 1;
        }
    });
    io.run();
    print_floor_ratios(rows.results);
    std::printf("load average at the end: %s\n", loadavg().c_str());
    if (!cfg.plot_dir.empty()) plot(cfg, rows.results);
    return rc;
}
