// The failover bench on etcd (see the header of failover.cpp):
//
//   etcd     tenure candidates (tenure::session on a lease, keepalive every
//            TTL/3, lock_delay set to 0; tenure::election with etcd's key
//            scheme), one tenure::etcd::client each.
//   etcdctl  the baseline: K `etcdctl elect <name> <value>` processes (lease
//            TTL fixed at 60 s); a process leads when it prints its key.
//
// Both on one etcd member started by the bench (etcd_cluster.hpp). A watch on
// the election's prefix (one more client) follows the candidate keys, each
// event stamped when the bench reads it: the first DELETE of the leader's key
// after the term ends is the detection.
//
// How a term ends on etcd:
//   clean      etcd: scope.release() (resign: a txn deleting the key if its
//              create_revision is still ours). etcdctl: SIGINT (etcdctl
//              resigns on SIGINT and SIGTERM, then exits without revoking its
//              lease, which lingers keyless until it expires).
//   destroy-0  etcd: the leader's lease is revoked (POST /v3/lease/revoke).
//   ttl        etcd: a raw lease (TTL T, whole seconds) takes over the leader's
//              key in one txn (a put with the raw lease keeps the key's
//              create_revision, so the key stays first in line and is never
//              free); the previous leader sees its key taken and campaigns
//              again with a new session. After the followers are parked the
//              raw lease gets its last keepalive, at a random phase of etcd's
//              expiry check (every 500 ms; the rounds would lock onto it
//              otherwise); etcd deletes the key when it finds the lease expired.
//   kill       etcd: a child process (this binary, --candidate --etcd) campaigns
//              and is brought to the front by clean resigns of the leaders
//              before it (etcd's scheme has no other way to put a key first),
//              then SIGKILLed at a random moment of its keepalive cycle
//              (TTL/3); it starts at a random phase of the expiry check. etcdctl: SIGKILL; the next leader waits for the
//              killed process's 60 s lease (Go keepalive every 20 s, so
//              40-60 s); the kill comes at a random moment of that cycle.
//   sem-clean  etcd: a tenure::semaphore (limit 2) on the election's prefix:
//              the oldest holder's permit.release() deletes its key; the
//              waiter whose window held that key reads its rank again (one
//              txn) and is admitted. Not measured with etcdctl.
#include "failover.hpp"

#include "etcd_cluster.hpp"
#include "failover_run.hpp"

#include "etcd/client_access.hpp"

#include <tenure/election.hpp>
#include <tenure/etcd/client.hpp>

#include <algorithm>
#include <map>
#include <random>

namespace failover_bench {

namespace etcd = tenure::etcd;
// The client's coroutines, awaited without the co_spawn of its token operations.
using tenure::detail::coro;
using tenure::detail::watch_next;

std::chrono::seconds etcd_ttl(std::chrono::milliseconds t) {
    return std::chrono::seconds(std::max<long long>(1, (t.count() + 999) / 1000));
}

namespace {

// The lease ID a tenure etcd session's id() names (lowercase hex).
std::int64_t lease_of(std::string const& hex) { return static_cast<std::int64_t>(std::stoull(hex, nullptr, 16)); }

std::string election_name(std::string const& backend, std::string const& scenario, int k) {
    return "bench/failover/" + backend + "/" + scenario + "/" + std::to_string(k) + "/" +
           std::to_string(steady::now().time_since_epoch().count());
}

// The election's keys as seen by a watch on its prefix. arm(key): the first
// DELETE of `key` read afterwards is what deleted_at() returns.
class prefix_tracker {
public:
    prefix_tracker(etcd::client& c, std::string prefix, asio::steady_timer& wake)
        : client_(c), prefix_(std::move(prefix)), wake_(wake) {}

    // Returns once the watch is established.
    asio::awaitable<void> start() {
        std::string p = prefix_;
        std::string end = etcd::prefix_end(prefix_);
        etcd::watch_options wo;
        auto w = co_await coro(client_).watch(p, end, wo);
        running_ = true;
        auto ex = co_await asio::this_coro::executor;
        asio::co_spawn(ex, loop(std::move(w)),
                       asio::bind_cancellation_slot(stop_.slot(), [this](std::exception_ptr e) {
                           running_ = false;
                           if (e && !stopped_) failure = "prefix watch failed: " + message_of(e);
                           wake_.cancel();
                       }));
    }

    void stop() {
        stopped_ = true;
        if (running_) stop_.emit(asio::cancellation_type::terminal);
    }
    bool running() const { return running_; }

    void arm(std::string key) {
        armed_ = std::move(key);
        t1_.reset();
    }
    void disarm() { armed_.clear(); }

    // After the next leader: waits up to 2 s (or until failure() names one)
    // for the armed key's DELETE, disarms, and returns when it was read.
    template <class Failure>
    asio::awaitable<std::optional<steady::time_point>> deleted_at(Failure failure) {
        co_await wait_until(wake_, [&] { return t1_.has_value() || !failure().empty(); }, steady::now() + 2s);
        auto const t1 = t1_;
        disarm();
        co_return t1;
    }

    // Stops the watch and waits up to 5 s for it to end.
    asio::awaitable<void> shut_down() {
        stop();
        co_await wait_until(wake_, [&] { return !running_; }, steady::now() + 5s);
    }

    std::size_t size() const { return live_.size(); }
    bool has(std::string const& key) const { return live_.count(key) != 0; }
    // The keys in line: the leader first.
    std::vector<std::string> queue() const {
        std::vector<std::pair<std::int64_t, std::string>> v;
        for (auto const& [k, rev] : live_) v.emplace_back(rev, k);
        std::sort(v.begin(), v.end());
        std::vector<std::string> out;
        for (auto& [rev, k] : v) out.push_back(std::move(k));
        return out;
    }

    std::string failure;

private:
    asio::awaitable<void> loop(etcd::watch_stream w) {
        for (;;) {
            auto r = co_await watch_next(w);
            auto const t = steady::now();
            for (auto const& ev : r.events) {
                if (ev.type == etcd::event_type::put) {
                    live_[ev.kv.key] = ev.kv.create_revision;
                } else {
                    live_.erase(ev.kv.key);
                    if (!armed_.empty() && ev.kv.key == armed_ && !t1_) t1_ = t;
                }
            }
            wake_.cancel();
        }
    }

    etcd::client& client_;
    std::string prefix_;
    asio::steady_timer& wake_;
    asio::cancellation_signal stop_;
    bool running_ = false, stopped_ = false;
    std::map<std::string, std::int64_t> live_;  // key -> create_revision
    std::string armed_;
    std::optional<steady::time_point> t1_;
};

std::unique_ptr<etcd::client> make_client(asio::any_io_executor ex, etcd_server const& server) {
    etcd::client_config cc;
    cc.endpoints = {server.url()};
    return std::make_unique<etcd::client>(ex, cc);
}

// Waits until etcd has `want` live watchers (the followers parked), then
// gives them the hold (--hold-ms).
asio::awaitable<void> wait_parked_and_hold(etcd_server& server, long want, config const& cfg, int k) {
    if (!co_await server.wait_parked(want, 5s))
        std::fprintf(stderr, "\n  warning: etcd has fewer than %ld live watchers after 5 s\n", want);
    double const hold_ms = cfg.hold_ms ? *cfg.hold_ms : 10.0 + 0.5 * k;
    co_await sleep_for(std::chrono::microseconds(static_cast<long>(hold_ms * 1000)));
}

// ---------------------------------------------------------------------------
// tenure candidates on etcd.

using etcd_candidate = tenure_candidate<etcd::client>;

class etcd_run {
public:
    etcd_run(config const& cfg, scenario_def const& sc, etcd_server& server, int k, std::string self,
             asio::any_io_executor ex)
        : cfg_(cfg), sc_(sc), server_(server), k_(k), self_(std::move(self)), wake_(ex), cands_(wake_) {}

    asio::awaitable<result_set> go();

private:
    // One handover's leader and the moments it is timed by.
    struct round {
        std::string leader_key;
        std::int64_t raw_lease = 0;  // ttl: the lease that holds the key
        steady::time_point t0{}, t_renew{};
        steady::time_point t_answered{};  // semaphore: permit.release() returned
    };

    asio::awaitable<void> prepare_run();
    asio::awaitable<etcd_candidate*> handover(etcd_candidate* leader, int i, std::vector<sample>& samples);
    asio::awaitable<void> install_leader(etcd_candidate*& leader, round& r);
    asio::awaitable<std::int64_t> raw_lease_takes_key(etcd_candidate& leader, std::string const& key);
    asio::awaitable<std::string> child_to_front(etcd_candidate*& leader);
    asio::awaitable<void> park(round& r);
    asio::awaitable<void> end_term(etcd_candidate& leader, round& r);
    asio::awaitable<void> shut_down();

    asio::awaitable<etcd_candidate*> next_winner(steady::time_point deadline) {
        return cands_.next_winner(deadline, [this] { return check(); });
    }
    asio::awaitable<void> hold();
    std::string key_of(etcd_candidate const& c) const { return name_ + "/" + c.s.id(); }
    std::string check() const {
        return !cands_.failure().empty() ? cands_.failure() : tracker_ ? tracker_->failure : std::string();
    }
    std::chrono::seconds ttl() const { return etcd_ttl(cfg_.ttl); }

    config const& cfg_;
    scenario_def const& sc_;
    etcd_server& server_;
    int k_;
    std::string self_;
    std::string name_;  // the election's name; its keys are name_/<lease hex>
    tenure::session_options so_;
    std::unique_ptr<etcd::client> admin_;  // the prefix watch, raw leases, the hand-over txn
    std::unique_ptr<prefix_tracker> tracker_;
    asio::steady_timer wake_;
    candidate_set<etcd_candidate> cands_;
    std::optional<child_proc> child_;  // kill: this round's leader
    std::mt19937_64 rng_{std::random_device{}()};
    std::uniform_int_distribution<long> expiry_phase{0, 500'000};  // us
};

// Every candidate has its key in line, then the followers get time to park
// their watches.
asio::awaitable<void> etcd_run::hold() {
    bool all = co_await wait_until(
        wake_, [&] { return tracker_->size() == static_cast<std::size_t>(k_) || !check().empty(); },
        steady::now() + 10s);
    if (auto f = check(); !f.empty()) throw std::runtime_error(f);
    if (!all)
        throw std::runtime_error("the election has " + std::to_string(tracker_->size()) + " keys instead of " +
                                 std::to_string(k_));
    // Watches: two per waiting candidate (its predecessor, its own key), one for
    // the leader's scope (none for the raw lease), one for the prefix tracker.
    // A semaphore: one per waiter (on the prefix), one per holder's permit, the tracker's.
    long const want = sc_.semaphore() ? k_ + 1L : 2L * (k_ - 1) + (sc_.leader == leader_kind::raw ? 0 : 1) + 1;
    co_await wait_parked_and_hold(server_, want, cfg_, k_);
}

asio::awaitable<result_set> etcd_run::go() {
    result_set out =
        new_result_set("etcd", sc_.name, k_, 0, static_cast<double>(std::chrono::milliseconds(ttl()).count()));
    int const n = sc_.slow ? cfg_.slow_handovers : cfg_.handovers;
    co_await prepare_run();
    co_await run_handovers<etcd_candidate>(
        sc_, "etcd", 7, k_, n, 10s + 50ms * k_, [this](steady::time_point d) { return next_winner(d); },
        [this](etcd_candidate* c, int i, std::vector<sample>& v) { return handover(c, i, v); }, out.samples);
    cands_.warn_double_wins();
    co_await shut_down();
    out.load = loadavg();
    co_return out;
}

// The election, the prefix watch, and the candidates in this process.
asio::awaitable<void> etcd_run::prepare_run() {
    auto ex = co_await asio::this_coro::executor;
    name_ = election_name("etcd", sc_.name, k_);
    so_.ttl = quiet_ttl;
    so_.lock_delay = 0ns;  // measured without etcd's optional lock-delay
    admin_ = make_client(ex, server_);
    tracker_ = std::make_unique<prefix_tracker>(*admin_, name_ + "/", wake_);
    co_await tracker_->start();

    // K candidates, or K-1 beside the raw lease / the child.
    int const local = sc_.leader == leader_kind::candidate ? k_ : k_ - 1;
    cands_.start(ex, local, [&] { return make_client(ex, server_); }, name_, so_, sc_.permits);
}

// One handover, from `leader`'s term to the next leader's: appends its sample
// and returns the next leader.
asio::awaitable<etcd_candidate*> etcd_run::handover(etcd_candidate* leader, int i, std::vector<sample>& samples) {
    round r;
    co_await install_leader(leader, r);
    co_await park(r);
    co_await end_term(*leader, r);

    // 4. The next leader.
    auto const timeout = sc_.slow ? 2 * ttl() + 10s : 10s;
    etcd_candidate* next = co_await next_winner(steady::now() + timeout);
    auto const t3 = cands_.elected_at();
    auto const t1 = co_await tracker_->deleted_at([this] { return check(); });
    sample s;
    s.lock_delay = 0;
    set_timings(s, sc_.name == "ttl", r.t0, t1, t3, r.t_renew);
    if (sc_.semaphore()) s.release_answered = ms(r.t_answered - r.t0);
    samples.push_back(s);
    TRACE("etcd %s K=%d round %d: %.3f ms", sc_.name.c_str(), k_, i, s.latency);

    // 5. The old leader campaigns again.
    co_await retire_leader(cands_, *leader, sc_, child_);
    co_return next;
}

// 1. The leader of this round: the previous winner, the raw lease that takes
// its key, or the child brought to the front of the line (`leader` is then the
// last candidate that resigned for it).
asio::awaitable<void> etcd_run::install_leader(etcd_candidate*& leader, round& r) {
    if (sc_.leader == leader_kind::raw) {
        r.leader_key = key_of(*leader);
        r.raw_lease = co_await raw_lease_takes_key(*leader, r.leader_key);
    } else if (sc_.leader == leader_kind::child) {
        r.leader_key = co_await child_to_front(leader);
    } else {
        r.leader_key = key_of(*leader);
    }
}

// ttl: a raw lease (TTL T) takes the leader's key; returns the lease.
asio::awaitable<std::int64_t> etcd_run::raw_lease_takes_key(etcd_candidate& leader, std::string const& key) {
    auto g = co_await coro(*admin_).lease_grant(ttl().count());
    // The raw lease takes the leader's key: same create_revision, still first in line.
    std::vector<etcd::compare> cmps;
    cmps.push_back(etcd::compare::create_revision(key, etcd::compare_result::equal,
                                                  static_cast<std::int64_t>(leader.scope.token())));
    etcd::put_op put;
    put.key = key;
    put.value = "raw";
    put.options.lease = g.id;
    std::vector<etcd::request_op> ops;
    ops.emplace_back(std::move(put));
    std::vector<etcd::request_op> no_ops;
    auto t = co_await coro(*admin_).txn(cmps, ops, no_ops);
    if (!t.succeeded) throw std::runtime_error("hand-over txn refused: the leader's key changed");
    co_await leader.scope.wait_lost(tuple_awaitable);  // released_by_other
    leader.scope = tenure::leadership_scope{};
    leader.new_session = true;  // its key name belongs to the raw lease now
    cands_.resume(leader);
    co_return g.id;
}

// kill: starts the child (this binary, --candidate --etcd) and has the
// leaders before it resign until it leads; returns its key.
asio::awaitable<std::string> etcd_run::child_to_front(etcd_candidate*& leader) {
    // A random start: the child's keepalives (and so its lease's expiry) fall
    // at any phase of etcd's 500 ms expiry check.
    co_await sleep_for(std::chrono::microseconds(expiry_phase(rng_)));
    std::vector<std::string> args{"--candidate", "--etcd", server_.url(), "--key", name_,
                                  "--ttl-ms", std::to_string(std::chrono::milliseconds(ttl()).count())};
    std::string const child_lease = co_await start_child(child_, self_, args);
    std::string const child_key = name_ + "/" + child_lease;
    co_await wait_until(wake_, [&] { return tracker_->has(child_key) || !check().empty(); }, steady::now() + 10s);
    if (!tracker_->has(child_key)) throw std::runtime_error("the child's key did not appear");
    // Clean resigns until the child is first in line.
    for (;;) {
        auto q = tracker_->queue();
        bool const child_next = q.size() >= 2 && q[1] == child_key;
        co_await leader->scope.release(tuple_awaitable);
        leader->scope = tenure::leadership_scope{};
        if (child_next) {
            co_await expect_child_line(*child_, "ELECTED ");
            cands_.resume(*leader);
            co_return child_key;
        }
        auto* w = co_await next_winner(steady::now() + 10s);
        cands_.resume(*leader);
        leader = w;
        std::string const wk = key_of(*w);
        co_await wait_until(
            wake_, [&] { auto q2 = tracker_->queue(); return !q2.empty() && q2[0] == wk; }, steady::now() + 2s);
    }
}

// 2. Followers park; the raw lease gets its last keepalive; the tracker
// watches for the leader's key to go.
asio::awaitable<void> etcd_run::park(round& r) {
    co_await hold();
    if (sc_.leader == leader_kind::raw) {
        // At a random phase of etcd's expiry check (every 500 ms), which the
        // rounds would otherwise lock onto: each round starts when a check
        // has just deleted the previous key.
        co_await sleep_for(std::chrono::microseconds(expiry_phase(rng_)));
        r.t_renew = steady::now();
        co_await coro(*admin_).lease_keepalive(r.raw_lease);  // the raw lease's last keepalive
    }
    tracker_->arm(r.leader_key);
    if (sc_.name == "kill") {
        // At a random moment of the child's keepalive cycle (every TTL/3).
        std::uniform_int_distribution<long> phase(0, std::chrono::microseconds(ttl()).count() / 3);
        co_await sleep_for(std::chrono::microseconds(phase(rng_)));
    }
}

// 3. End the term.
asio::awaitable<void> etcd_run::end_term(etcd_candidate& leader, round& r) {
    r.t0 = steady::now();
    if (sc_.releases()) {
        co_await leader.scope.release(tuple_awaitable);
        r.t_answered = steady::now();
    } else if (sc_.name == "destroy-0") {
        auto const lease = lease_of(leader.s.id());
        co_await coro(*leader.cl).lease_revoke(lease);
    } else if (sc_.name == "kill") {
        ::kill(child_->proc->id(), SIGKILL);
    }  // ttl: etcd expires the raw lease
}

// Stop: every candidate resigns and revokes its lease.
asio::awaitable<void> etcd_run::shut_down() {
    co_await kill_child(child_);
    co_await cands_.stop();
    co_await tracker_->shut_down();
    cands_.close_clients();
    admin_->close();
}

// ---------------------------------------------------------------------------
// The `etcdctl elect` baseline.

struct ctl_proc {
    int id = 0;
    std::unique_ptr<asio::readable_pipe> out;
    std::unique_ptr<bp::process> proc;
    std::string key;          // printed when it leads
    bool ending = false;      // signalled by the bench
    bool exited = false;
};

class etcdctl_run {
public:
    etcdctl_run(config const& cfg, scenario_def const& sc, etcd_server& server, int k, asio::any_io_executor ex)
        : cfg_(cfg), sc_(sc), server_(server), k_(k), wake_(ex) {}
    ~etcdctl_run() {
        if (err_fd_ >= 0) ::close(err_fd_);
    }

    asio::awaitable<result_set> go();

private:
    asio::awaitable<void> spawn();
    asio::awaitable<void> read_loop(std::shared_ptr<ctl_proc> p);
    asio::awaitable<std::shared_ptr<ctl_proc>> next_winner(steady::time_point deadline) {
        return winners_.take(wake_, [this] { return check(); }, deadline);
    }
    std::string check() const { return !failure_.empty() ? failure_ : tracker_ ? tracker_->failure : std::string(); }
    // The end of what the etcdctl processes wrote to stderr.
    std::string stderr_tail() const {
        std::string out;
        char chunk[4096];
        for (off_t off = 0;;) {
            ssize_t n = ::pread(err_fd_, chunk, sizeof chunk, off);
            if (n <= 0) break;
            out.append(chunk, static_cast<std::size_t>(n));
            off += n;
        }
        return out.size() > 2000 ? out.substr(out.size() - 2000) : out;
    }

    config const& cfg_;
    scenario_def const& sc_;
    etcd_server& server_;
    int k_;
    int err_fd_ = -1;  // the processes' stderr: an unlinked temporary file (they all say
                       // "context canceled" when stopped)
    std::string binary_, name_;
    std::vector<std::string> env_;
    std::vector<std::shared_ptr<ctl_proc>> procs_;
    int next_id_ = 0;
    std::unique_ptr<etcd::client> admin_;
    std::unique_ptr<prefix_tracker> tracker_;
    asio::steady_timer wake_;
    winner_slot<std::shared_ptr<ctl_proc>> winners_;
    int readers_ = 0;
    std::string failure_;
    std::mt19937_64 rng_{std::random_device{}()};
};

// Reads one etcdctl's stdout: its first line (the key) says it leads, stamped
// the moment it is read.
asio::awaitable<void> etcdctl_run::read_loop(std::shared_ptr<ctl_proc> p) {
    ++readers_;
    std::string buf;
    for (;;) {
        auto [ec, n] = co_await asio::async_read_until(*p->out, asio::dynamic_buffer(buf), '\n', tuple_awaitable);
        auto const t = steady::now();
        if (ec) break;
        std::string line = buf.substr(0, n - 1);
        buf.erase(0, n);
        if (p->key.empty()) {
            p->key = line;
            winners_.elected(p, t, wake_);
        }
    }
    p->exited = true;
    if (!p->ending && failure_.empty()) failure_ = "etcdctl " + std::to_string(p->id) + " exited on its own";
    --readers_;
    wake_.cancel();
}

// Starts one more etcdctl and waits until its key is in line (so the line
// is in start order).
asio::awaitable<void> etcdctl_run::spawn() {
    auto ex = co_await asio::this_coro::executor;
    auto p = std::make_shared<ctl_proc>();
    p->id = next_id_++;
    p->out = std::make_unique<asio::readable_pipe>(ex);
    std::vector<std::string> args{"--endpoints", server_.url(), "elect", name_, "ctl-" + std::to_string(p->id)};
    p->proc = std::make_unique<bp::process>(ex, binary_, args, bp::process_stdio{nullptr, *p->out, err_fd_},
                                            child_environment(env_), die_with_parent{});
    procs_.push_back(p);
    asio::co_spawn(ex, read_loop(p), asio::detached);
    std::size_t const want = tracker_->size() + 1;
    co_await wait_until(wake_, [&] { return tracker_->size() >= want || !check().empty(); }, steady::now() + 10s);
    if (auto f = check(); !f.empty()) throw std::runtime_error(f);
    if (tracker_->size() < want) throw std::runtime_error("etcdctl " + std::to_string(p->id) + " made no key");
}

asio::awaitable<result_set> etcdctl_run::go() {
    auto ex = co_await asio::this_coro::executor;
    bool const kill9 = sc_.name == "kill";
    // Lease TTL 60 s: concurrency.NewSession's default; etcdctl elect has no flag for it.
    result_set out = new_result_set("etcdctl", sc_.name, k_, 0, 60'000);
    int const n = kill9 ? cfg_.etcdctl_kill_handovers : cfg_.handovers;

    binary_ = find_executable("etcdctl", "ETCDCTL_BINARY");
    char err_path[] = "/tmp/tenure-bench-etcdctl-XXXXXX";
    err_fd_ = ::mkostemp(err_path, O_CLOEXEC | O_APPEND);
    if (err_fd_ < 0) throw std::runtime_error("mkostemp failed");
    ::unlink(err_path);
    env_ = environment_without({"ETCDCTL_"});
    name_ = election_name("etcdctl", sc_.name, k_);
    admin_ = make_client(ex, server_);
    tracker_ = std::make_unique<prefix_tracker>(*admin_, name_ + "/", wake_);
    co_await tracker_->start();

    try {
        for (int i = 0; i < k_; ++i) {
            std::fprintf(stderr, "\r  etcdctl %-10s K=%-3d starting %d/%d", sc_.name.c_str(), k_, i, k_);
            co_await spawn();
        }
        auto leader = co_await next_winner(steady::now() + 10s);
        for (int i = 0; i < n; ++i) {
            print_progress(7, "etcdctl", sc_.name, k_, i, n);
            sample s;
            s.lock_delay = 0;
            co_await wait_until(wake_, [&] { return tracker_->size() == static_cast<std::size_t>(k_); },
                                steady::now() + 10s);
            // Watches: one per waiting etcdctl (its predecessor), one for the tracker.
            co_await wait_parked_and_hold(server_, k_, cfg_, k_);
            tracker_->arm(leader->key);
            if (kill9) {
                // At a random moment of the Go client's keepalive cycle (every 20 s).
                std::uniform_int_distribution<long> phase(0, 20'000'000);
                co_await sleep_for(std::chrono::microseconds(phase(rng_)));
            }
            leader->ending = true;
            auto const t0 = steady::now();
            ::kill(leader->proc->id(), kill9 ? SIGKILL : SIGINT);

            auto next = co_await next_winner(steady::now() + (kill9 ? 75s : 10s));
            auto const t3 = winners_.elected_at();
            auto const t1 = co_await tracker_->deleted_at([this] { return check(); });
            set_timings(s, false, t0, t1, t3, {});  // etcdctl runs no ttl scenario
            out.samples.push_back(s);
            TRACE("etcdctl %s K=%d round %d: %.3f ms", sc_.name.c_str(), k_, i, s.latency);

            // The signalled process is gone; a new one joins at the end of the line.
            co_await wait_until(wake_, [&] { return leader->exited; }, steady::now() + 10s);
            co_await leader->proc->async_wait(tuple_awaitable);
            std::erase(procs_, leader);
            co_await spawn();
            leader = next;
        }
        print_progress(7, "etcdctl", sc_.name, k_, n, n);
        std::fprintf(stderr, "\n");
    } catch (std::exception const& e) {
        std::fprintf(stderr, "\n  etcdctl %s K=%d stopped after %zu handovers: %s\n--- etcdctl stderr ---\n%s\n",
                     sc_.name.c_str(), k_, out.samples.size(), e.what(), stderr_tail().c_str());
    }
    winners_.warn_double_wins();

    // Stop: SIGINT makes each etcdctl resign (or withdraw its candidacy) and exit.
    for (auto& p : procs_) {
        p->ending = true;
        if (!p->exited) ::kill(p->proc->id(), SIGINT);
    }
    co_await wait_until(wake_, [&] { return readers_ == 0; }, steady::now() + 10s);
    for (auto& p : procs_) {
        if (p->proc->running()) ::kill(p->proc->id(), SIGKILL);
        co_await p->proc->async_wait(tuple_awaitable);
    }
    procs_.clear();
    co_await tracker_->shut_down();
    admin_->close();
    out.load = loadavg();
    co_return out;
}

}  // namespace

asio::awaitable<result_set> run_etcd(config const& cfg, scenario_def const& sc, etcd_server& server, int k,
                                     std::string const& self_exe) {
    auto ex = co_await asio::this_coro::executor;
    etcd_run r(cfg, sc, server, k, self_exe, ex);
    co_return co_await r.go();
}

asio::awaitable<result_set> run_etcdctl(config const& cfg, scenario_def const& sc, etcd_server& server, int k) {
    auto ex = co_await asio::this_coro::executor;
    etcdctl_run r(cfg, sc, server, k, ex);
    co_return co_await r.go();
}

// Prints "READY <lease hex>" once its session exists and "ELECTED <lease hex>
// <token>" once it leads, then keeps its lease alive until it is killed.
int run_etcd_child(std::string endpoint, std::string name, std::chrono::milliseconds ttl) {
    asio::io_context io;
    etcd::client_config cc;
    cc.endpoints = {endpoint};
    etcd::client cl(io.get_executor(), cc);
    return run_candidate(io, cl, name, ttl, std::chrono::nanoseconds{0}, "failover --candidate --etcd");
}

}  // namespace failover_bench
