// The simulation: scheduler, network, agent front, client model, checker.
// See simulation.hpp for what is real library code and what is a model.
#include "simulation.hpp"

#include "agent/state.hpp"
#include "net/duration.hpp"
#include "core/session_fsm.hpp"
#include <tenure/error.hpp>
#include <tenure/fence.hpp>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <queue>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace tenure::sim {

namespace agent = tenure::detail::agent;
using agent::time_point;
using std::chrono::nanoseconds;
using namespace std::chrono_literals;

namespace {

// consul::lock_flag_value (include/tenure/consul/client.hpp), the Go api's lock flag.
constexpr std::uint64_t lock_flag = 0x2ddccbc058a50c18ull;

std::uint64_t splitmix(std::uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// ---- scheduler -------------------------------------------------------------

// Events run in time order; ties are broken by a random key drawn from the
// schedule's generator (so the seed also picks the interleaving), except for
// events queued with `ordered`, which run first and in FIFO order (a resumed
// client's backlog).
class scheduler {
public:
    scheduler(std::uint64_t seed, time_point start) : rng_(seed), now_(start) {}

    time_point now() const noexcept { return now_; }
    std::mt19937_64& rng() noexcept { return rng_; }

    void at(time_point t, std::function<void()> fn) { push(std::max(t, now_), rng_() | 1, std::move(fn)); }
    void at_ordered(time_point t, std::function<void()> fn) { push(std::max(t, now_), 0, std::move(fn)); }

    bool empty() const noexcept { return queue_.empty(); }
    time_point next_time() const { return queue_.top().at; }
    void advance_to(time_point t) { now_ = std::max(now_, t); }
    void run_next() {
        event ev = std::move(const_cast<event&>(queue_.top()));
        queue_.pop();
        now_ = ev.at;
        ev.fn();
    }

private:
    struct event {
        time_point at;
        std::uint64_t tie;
        std::uint64_t seq;
        std::function<void()> fn;
    };
    struct later {
        bool operator()(event const& a, event const& b) const {
            if (a.at != b.at) return a.at > b.at;
            if (a.tie != b.tie) return a.tie > b.tie;
            return a.seq > b.seq;
        }
    };
    void push(time_point t, std::uint64_t tie, std::function<void()> fn) {
        queue_.push(event{t, tie, seq_++, std::move(fn)});
    }

    std::mt19937_64 rng_;
    time_point now_;
    std::uint64_t seq_ = 0;
    std::priority_queue<event, std::vector<event>, later> queue_;
};

struct violation_error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// ---- parameters of one schedule --------------------------------------------

struct params {
    int keys = 1;
    int clients = 3;
    nanoseconds ttl = 1s;
    nanoseconds lock_delay = 0s;
    nanoseconds retry_backoff = 100ms;       // campaign_options::retry_backoff
    nanoseconds request_timeout = 2s;        // consul client request timeout (scaled from 10 s)
    nanoseconds blocking_wait = 3s;          // consistent_read's wait (scaled from 30 s)
    nanoseconds blocking_margin = 500ms;     // client_options::blocking_margin (scaled from 5 s)
    nanoseconds net_delay_max = 20ms;
    double drop = 0;
    double duplicate = 0;
    nanoseconds fence_delay_max = 50ms;      // client -> fenced resource
    nanoseconds work_interval = 250ms;
    double step_down = 0.02;                 // chance a unit of work is the body's last
    nanoseconds heal_at = 5s;
    nanoseconds max_pause = 0s;
    nanoseconds liveness_bound = 10s;
};

// Reply of the agent to one request (the parts the client model reads).
enum class lock_outcome { acquired, held, lock_delay, failed };

struct reply {
    bool ok = true;  // false: HTTP 500 (the client throws, like a transport error)
    lock_outcome outcome = lock_outcome::failed;  // of a lock transaction
    bool found = true;
    bool result = false;
    std::optional<agent::kv_entry> kv;
    std::uint64_t index = 0;
    std::string id;
    nanoseconds lock_delay{0};
};

class world;

enum class scope_status { held, released, lost };

struct scope_model {
    std::string key;
    std::string session;
    std::uint64_t token = 0;
    std::uint64_t modify_index = 0;
    scope_status status = scope_status::held;
    tenure::error reason = tenure::error::leadership_lost;
};

struct session_model {
    session_model(std::string i, nanoseconds ttl, time_point sent) : id(std::move(i)), fsm(ttl, sent) {}
    std::string id;
    tenure::detail::session_fsm fsm;
    bool lost = false;  // lost_event
    tenure::error lost_reason = tenure::error::leadership_lost;
};

// ---- the client model ----------------------------------------------------------

class client {
public:
    client(world& w, int id, std::string key, double rate, nanoseconds offset)
        : w_(w), id_(id), key_(std::move(key)), rate_(rate), offset_(offset) {}

    int id() const noexcept { return id_; }
    std::string const& key() const noexcept { return key_; }
    double rate() const noexcept { return rate_; }

    time_point local_now() const;
    // The true instant at which the local clock reads `local`.
    time_point true_of(time_point local) const;

    // Belief (invariant 1): holds a scope, session not lost, before the local deadline.
    bool believes() const {
        return scope_ && scope_->status == scope_status::held && sess_ && !sess_->lost &&
               local_now() < sess_->fsm.local_deadline();
    }
    scope_model const* scope() const { return scope_.get(); }
    session_model const* session() const { return sess_.get(); }

    // ---- faults ----
    int partitioned = 0;  // >0: cut off from the agent
    bool crashed() const noexcept { return crashed_; }
    void start();
    void crash();
    void restart();
    void pause();
    void resume();
    bool paused() const noexcept { return paused_; }

    // Runs `fn` on this client at true time `t` unless it crashed since; a
    // paused client keeps it for later.
    void post_at(time_point t, std::function<void()> fn);
    void deliver(std::uint64_t rid, reply r);
    std::uint64_t generation() const noexcept { return gen_; }

private:
    using reply_fn = std::function<void(std::optional<reply>)>;
    using agent_op = std::function<void(std::function<void(reply)>)>;

    void dispatch(std::uint64_t gen, time_point t, std::function<void()> const& fn);
    void timer_local(time_point local, std::function<void()> fn) { post_at(true_of(local), std::move(fn)); }
    // One request with a deadline on the local clock; nullopt: transport error or timeout.
    void rpc(char const* what, time_point local_deadline, agent_op op, reply_fn on_reply);
    time_point request_deadline() const { return local_now() + w_params().request_timeout; }
    time_point blocking_deadline() const {
        auto const& p = w_params();
        return local_now() + p.blocking_wait + p.blocking_wait / 16 + p.blocking_margin;
    }
    params const& w_params() const;
    void trace(char const* fmt, ...) const __attribute__((format(printf, 2, 3)));

    // campaign_op
    void campaign_loop();
    void campaign_sleep_then_loop();
    void create_session();
    // election::acquire_impl + consul_session::acquire
    void start_acquire();
    void acquire_step();
    void acquire_held_by_other(std::uint64_t meta_index);
    void acquire_try(std::uint64_t epoch, std::optional<agent::kv_entry> seen);
    void acquire_after_lock_delay(std::uint64_t epoch, agent::txn_kv_op guard, agent::txn_kv_op lock);
    void acquire_transient();
    void acquire_failed();  // an exception out of acquire: campaign's `failed` path
    void elected(std::uint64_t token, std::uint64_t modify_index);
    // session_impl::renew_loop
    void renew_arm(std::shared_ptr<session_model> const& s);
    void renew_wake(std::shared_ptr<session_model> const& s);
    void mark_lost(std::shared_ptr<session_model> const& s, tenure::error why);
    // scope
    void monitor_step(std::shared_ptr<scope_model> const& sc, std::uint64_t index, nanoseconds retry);
    void scope_lose(std::shared_ptr<scope_model> const& sc, tenure::error why);
    void work_step(std::shared_ptr<scope_model> const& sc);
    void run_ended(std::shared_ptr<scope_model> const& sc);
    void release_then_continue(std::shared_ptr<scope_model> const& sc);

    world& w_;
    int id_;
    std::string key_;
    double rate_;
    nanoseconds offset_;

    std::uint64_t gen_ = 0;
    bool crashed_ = false;
    bool paused_ = false;
    struct deferred {
        time_point at;
        std::uint64_t seq;
        std::function<void()> fn;
    };
    std::vector<deferred> backlog_;
    std::uint64_t backlog_seq_ = 0;

    std::uint64_t next_rid_ = 0;
    std::map<std::uint64_t, reply_fn> pending_;

    enum class phase { idle, creating, acquiring, leading, releasing, sleeping };
    phase phase_ = phase::idle;
    std::shared_ptr<session_model> sess_;
    std::shared_ptr<scope_model> scope_;

    // consul_session::acquire's locals
    struct acquire_locals {
        std::uint64_t epoch = 0;
        std::uint64_t index = 0;
        tenure::detail::acquire_backoff backoff = tenure::detail::acquire_backoff();
        std::string last_holder;
        nanoseconds holder_delay{0};
        nanoseconds error_retry = 20ms;
    } acq_;
    std::uint64_t acquire_epoch_ = 0;
    int works_left_ = 0;
};

// ---- the world ---------------------------------------------------------------------

class world {
public:
    world(std::uint64_t seed, sim_options const& o);
    sim_result run();

    scheduler sched;
    params p;
    sim_options opt;
    agent::state_machine sm;
    time_point epoch;
    std::vector<std::unique_ptr<client>> clients;
    std::vector<std::string> keys;
    sim_stats stats;
    std::string summary;
    bool healed = false;

    std::mt19937_64& rng() { return sched.rng(); }
    bool chance(double p) { return p > 0 && std::uniform_real_distribution<double>(0, 1)(rng()) < p; }
    nanoseconds uniform(nanoseconds lo, nanoseconds hi) {
        if (hi <= lo) return lo;
        return nanoseconds{std::uniform_int_distribution<std::int64_t>(lo.count(), hi.count())(rng())};
    }
    double seconds(time_point t) const { return std::chrono::duration<double>(t - epoch).count(); }

    void log(char const* fmt, ...) const __attribute__((format(printf, 2, 3)));
    void vlog(char const* prefix, char const* fmt, va_list ap) const;

    // ---- network ----
    // A request from `c` to the agent; `op` runs on the agent at arrival.
    void to_agent(client& c, char const* what, std::function<void()> op);
    // A reply from the agent to `c` (of incarnation `gen`).
    void to_client(client& c, std::uint64_t gen, std::uint64_t rid, reply r);
    // A fenced write to the resource (not through the agent's network).
    void to_resource(client const& c, std::string key, std::string session, std::uint64_t token);

    // ---- agent front (the HTTP layer's job, as direct calls) ----
    void agent_kv_get(std::string key, std::uint64_t index, nanoseconds wait, std::function<void(reply)> respond);

    // ---- checker ----
    void on_elected(client const& c, scope_model const& sc);
    void on_work(client const& c, scope_model const& sc);
    void check();
    [[noreturn]] void fail(std::string what);

private:
    struct blocking {
        std::string key;
        std::uint64_t min_index = 0;
        time_point deadline;
        int not_found_seen = 0;
        bool done = false;
        agent::state_machine::watch_registration reg;
        std::function<void(reply)> respond;
    };
    void evaluate(std::shared_ptr<blocking> const& b);
    void plan_faults();
    void heal();

    tenure::fence fence_;
    struct key_track {
        std::string holder;            // agent's last non-empty holder
        std::uint64_t lock_index = 0;  // its LockIndex
        std::uint64_t worked_token = 0;
        std::string worked_session;
        std::uint64_t admitted_token = 0;
        std::string admitted_session;
        std::optional<time_point> leader_since_heal;
    };
    std::map<std::string, key_track> track_;
    time_point heal_time_;
};

params const& client::w_params() const { return w_.p; }

void client::trace(char const* fmt, ...) const {
    if (!w_.opt.verbose) return;
    char prefix[32];
    std::snprintf(prefix, sizeof prefix, "c%d ", id_);
    va_list ap;
    va_start(ap, fmt);
    w_.vlog(prefix, fmt, ap);
    va_end(ap);
}

time_point client::local_now() const {
    auto elapsed = static_cast<double>((w_.sched.now() - w_.epoch).count());
    return w_.epoch + offset_ + nanoseconds{static_cast<std::int64_t>(std::floor(elapsed * rate_))};
}

time_point client::true_of(time_point local) const {
    auto rel = static_cast<double>((local - w_.epoch - offset_).count());
    auto t = w_.epoch + nanoseconds{static_cast<std::int64_t>(std::ceil(rel / rate_))};
    // Floating point: make sure the local clock has reached `local` by then.
    auto reading = [&](time_point at) {
        auto e = static_cast<double>((at - w_.epoch).count());
        return w_.epoch + offset_ + nanoseconds{static_cast<std::int64_t>(std::floor(e * rate_))};
    };
    while (reading(t) < local) t += nanoseconds{1};
    return std::max(t, w_.sched.now());
}

void client::post_at(time_point t, std::function<void()> fn) {
    w_.sched.at(t, [this, g = gen_, t, fn = std::move(fn)] { dispatch(g, t, fn); });
}

void client::dispatch(std::uint64_t gen, time_point t, std::function<void()> const& fn) {
    if (gen != gen_ || crashed_) return;
    if (paused_) {
        backlog_.push_back(deferred{t, backlog_seq_++, fn});
        return;
    }
    fn();
}

void client::pause() {
    if (paused_) return;
    paused_ = true;
    trace("paused");
}

void client::resume() {
    if (!paused_) return;
    paused_ = false;
    trace("resumed with %zu late events", backlog_.size());
    // Timers and messages are handled late, in the order they became due.
    std::stable_sort(backlog_.begin(), backlog_.end(), [](deferred const& a, deferred const& b) {
        return a.at != b.at ? a.at < b.at : a.seq < b.seq;
    });
    auto now = w_.sched.now();
    for (auto& d : backlog_)
        w_.sched.at_ordered(now, [this, g = gen_, t = d.at, fn = std::move(d.fn)] { dispatch(g, t, fn); });
    backlog_.clear();
}

void client::crash() {
    if (crashed_) return;
    trace("CRASH%s", scope_ && scope_->status == scope_status::held ? " (while leading)" : "");
    crashed_ = true;
    ++gen_;
    backlog_.clear();
    pending_.clear();
    sess_.reset();
    scope_.reset();
    phase_ = phase::idle;
    ++acquire_epoch_;
}

void client::restart() {
    if (!crashed_) return;
    crashed_ = false;
    ++gen_;
    trace("restart");
    post_at(w_.sched.now(), [this] { campaign_loop(); });
}

void client::start() {
    post_at(w_.sched.now(), [this] { campaign_loop(); });
}

void client::rpc(char const* what, time_point local_deadline, agent_op op, reply_fn on_reply) {
    auto rid = ++next_rid_;
    pending_.emplace(rid, std::move(on_reply));
    // The request deadline (consul::client's, or with_deadline's).
    timer_local(local_deadline, [this, rid, what] {
        auto it = pending_.find(rid);
        if (it == pending_.end()) return;
        auto fn = std::move(it->second);
        pending_.erase(it);
        trace("%s #%" PRIu64 " timed out", what, rid);
        fn(std::nullopt);
    });
    trace("-> %s #%" PRIu64, what, rid);
    w_.to_agent(*this, what, [this, g = gen_, rid, op = std::move(op)] {
        op([this, g, rid](reply r) { w_.to_client(*this, g, rid, std::move(r)); });
    });
}

void client::deliver(std::uint64_t rid, reply r) {
    auto it = pending_.find(rid);
    if (it == pending_.end()) return;  // timed out, abandoned, or a duplicate
    auto fn = std::move(it->second);
    pending_.erase(it);
    fn(std::move(r));
}

// ---- campaign_op ----

void client::campaign_loop() {
    if (!sess_ || sess_->fsm.state() == tenure::detail::session_state::lost) {
        create_session();
        return;
    }
    start_acquire();
}

void client::campaign_sleep_then_loop() {
    phase_ = phase::sleeping;
    timer_local(local_now() + w_params().retry_backoff, [this] { campaign_loop(); });
}

void client::create_session() {
    phase_ = phase::creating;
    auto const sent = local_now();
    auto ttl = w_params().ttl;
    auto delay = w_params().lock_delay;
    auto& w = w_;
    rpc("session_create", request_deadline(),
        [&w, ttl, delay](std::function<void(reply)> respond) {
            agent::session_create_request req;
            req.name = "sim";
            req.ttl = tenure::detail::format_go_duration(ttl);
            req.lock_delay_ns = delay.count();
            auto r = w.sm.session_create(req, w.sched.now());
            reply rep;
            if (auto* id = std::get_if<std::string>(&r)) rep.id = *id;
            else rep.ok = false;
            respond(std::move(rep));
        },
        [this, sent, ttl](std::optional<reply> r) {
            if (!r || !r->ok) {
                campaign_sleep_then_loop();
                return;
            }
            sess_ = std::make_shared<session_model>(r->id, ttl, sent);
            if (w_.opt.planted_bug) sess_->fsm.ignore_local_deadline_for_testing();
            trace("session %s created", sess_->id.substr(0, 8).c_str());
            renew_arm(sess_);
            start_acquire();
        });
}

// ---- election::acquire_impl / consul_session::acquire ----

void client::start_acquire() {
    if (sess_->lost) {  // acquire_impl throws the session's loss reason
        campaign_sleep_then_loop();
        return;
    }
    phase_ = phase::acquiring;
    acq_ = acquire_locals{};
    acq_.epoch = ++acquire_epoch_;
    acq_.holder_delay = w_params().lock_delay;
    acquire_step();
}

void client::acquire_transient() {
    // pause_and_grow(error_retry); index = 0; continue
    auto pause = acq_.error_retry;
    acq_.error_retry = std::min<nanoseconds>(acq_.error_retry * 2, 1s);
    acq_.index = 0;
    timer_local(local_now() + pause, [this, ep = acq_.epoch] {
        if (ep == acquire_epoch_) acquire_step();
    });
}

void client::acquire_failed() {
    ++acquire_epoch_;
    campaign_sleep_then_loop();
}

void client::acquire_step() {
    auto& w = w_;
    auto key = key_;
    auto index = acq_.index;
    auto wait = w_params().blocking_wait;
    rpc("kv_get(acquire)", index ? blocking_deadline() : request_deadline(),
        [&w, key, index, wait](std::function<void(reply)> respond) {
            w.agent_kv_get(key, index, wait, std::move(respond));
        },
        [this, ep = acq_.epoch](std::optional<reply> r) {
            if (ep != acquire_epoch_) return;
            if (!r || !r->ok) {
                acquire_transient();
                return;
            }
            acq_.error_retry = 20ms;
            auto const& pair = r->kv;
            if (pair && !pair->session.empty() && pair->session != sess_->id) {
                auto meta_index = r->index;
                if (pair->session != acq_.last_holder) {
                    // Held by another candidate: learn its LockDelay once, then block.
                    acq_.last_holder = pair->session;
                    acq_.holder_delay = w_params().lock_delay;
                    auto& w = w_;
                    rpc("session_info", request_deadline(),
                        [&w, holder = pair->session](std::function<void(reply)> respond) {
                            reply rep;
                            auto const* s = w.sm.session_get(holder);
                            rep.found = s != nullptr;
                            if (s) rep.lock_delay = nanoseconds{s->lock_delay_ns};
                            respond(std::move(rep));
                        },
                        [this, ep, meta_index](std::optional<reply> info) {
                            if (ep != acquire_epoch_) return;
                            if (info && info->ok && info->found) acq_.holder_delay = info->lock_delay;
                            acquire_held_by_other(meta_index);
                        });
                    return;
                }
                acquire_held_by_other(meta_index);
                return;
            }
            if (!acq_.last_holder.empty()) {
                // Seen held, now free: a lock-delay may have started now.
                acq_.backoff.freed(local_now(), acq_.holder_delay);
                acq_.last_holder.clear();
            }
            acquire_try(ep, pair);
        });
}

void client::acquire_held_by_other(std::uint64_t meta_index) {
    acq_.backoff.held();
    // consul::next_wait_index
    std::uint64_t prev = acq_.index;
    acq_.index = meta_index < prev ? 0 : std::max<std::uint64_t>(meta_index, 1);
    acquire_step();
}

namespace {
// A lock transaction at the agent, its answer classified as classify() in
// src/consul/lock.cpp does.
std::function<void(std::function<void(reply)>)> lock_txn(world& w, std::vector<agent::txn_kv_op> ops) {
    return [&w, ops = std::move(ops)](std::function<void(reply)> respond) {
        auto out = w.sm.txn(ops, w.sched.now());
        reply rep;
        if (out.errors.empty()) {
            rep.outcome = lock_outcome::acquired;
            if (!out.results.empty()) rep.kv = out.results.back();
        } else {
            for (auto const& e : out.errors) {
                if (e.what.find("lock delay") != std::string::npos) {
                    rep.outcome = lock_outcome::lock_delay;
                    break;
                }
                if (e.what.find("already held") != std::string::npos) {
                    rep.outcome = lock_outcome::held;
                    break;
                }
            }
        }
        respond(std::move(rep));
    };
}
}  // namespace

// The lock is a one-op `lock` transaction (classify() in src/consul/lock.cpp).
void client::acquire_try(std::uint64_t ep, std::optional<agent::kv_entry> seen) {
    auto& w = w_;
    agent::txn_kv_op lock;
    lock.verb = "lock";
    lock.key = key_;
    lock.value = "c" + std::to_string(id_);
    lock.flags = lock_flag;
    lock.session = sess_->id;
    rpc("txn(lock)", request_deadline(), lock_txn(w, {lock}),
        [this, ep, lock, seen](std::optional<reply> r) {
            if (ep != acquire_epoch_) return;
            auto const outcome = r && r->ok ? r->outcome : lock_outcome::failed;
            if (outcome == lock_outcome::acquired && r->kv && r->kv->session == sess_->id) {
                elected(r->kv->lock_index, r->kv->modify_index);
                return;
            }
            if (outcome == lock_outcome::held) {  // lost the race: read again
                acq_.index = 0;
                acquire_step();
                return;
            }
            if (outcome == lock_outcome::lock_delay) {
                // Retry at the delay's end with the lock alone, guarded by
                // the free key as read (its index, or its absence).
                agent::txn_kv_op guard;
                guard.key = key_;
                if (seen) {
                    guard.verb = "check-index";
                    guard.index = seen->modify_index;
                } else {
                    guard.verb = "check-not-exists";
                }
                acquire_after_lock_delay(ep, guard, lock);
                return;
            }
            acquire_transient();  // transport error or an odd answer: pause_and_grow
        });
}

void client::acquire_after_lock_delay(std::uint64_t ep, agent::txn_kv_op guard, agent::txn_kv_op lock) {
    auto when = acq_.backoff.refused(local_now(), w_params().lock_delay);
    timer_local(when, [this, ep, guard, lock] {
        if (ep != acquire_epoch_) return;
        rpc("txn(check+lock)", request_deadline(), lock_txn(w_, {guard, lock}),
            [this, ep, guard, lock](std::optional<reply> r) {
                if (ep != acquire_epoch_) return;
                auto const outcome = r && r->ok ? r->outcome : lock_outcome::failed;
                if (outcome == lock_outcome::acquired && r->kv && r->kv->session == sess_->id) {
                    elected(r->kv->lock_index, r->kv->modify_index);
                    return;
                }
                if (outcome == lock_outcome::lock_delay) {
                    acquire_after_lock_delay(ep, guard, lock);
                    return;
                }
                acq_.index = 0;  // anything else: read the key again
                acquire_step();
            });
    });
}

void client::elected(std::uint64_t token, std::uint64_t modify_index) {
    ++acquire_epoch_;  // the acquire coroutine is done
    auto sc = std::make_shared<scope_model>();
    sc->key = key_;
    sc->session = sess_->id;
    sc->token = token;
    sc->modify_index = modify_index;
    scope_ = sc;
    phase_ = phase::leading;
    trace("ELECTED %s token=%" PRIu64, key_.c_str(), token);
    w_.on_elected(*this, *sc);
    // adopt(): start the monitor. Then campaign runs the body under scope.run().
    monitor_step(sc, modify_index, 20ms);
    works_left_ = 1;
    while (!w_.chance(w_params().step_down) && works_left_ < 1000) ++works_left_;
    work_step(sc);
}

// ---- session_impl::renew_loop ----

void client::renew_arm(std::shared_ptr<session_model> const& s) {
    if (s != sess_ || s->lost) return;
    timer_local(s->fsm.next_wakeup(), [this, s] { renew_wake(s); });
}

void client::renew_wake(std::shared_ptr<session_model> const& s) {
    if (s != sess_ || s->lost) return;
    auto now = local_now();
    if (s->fsm.check_deadline(now)) {
        trace("local deadline passed: session lost");
        mark_lost(s, tenure::error::lease_expired_locally);
        return;
    }
    if (now < s->fsm.next_renew()) {
        renew_arm(s);
        return;
    }
    auto const sent = now;
    auto const attempt_deadline =
        std::min(s->fsm.local_deadline(), sent + std::max<nanoseconds>(s->fsm.ttl() / 4, s->fsm.retry_interval()));
    auto& w = w_;
    rpc("session_renew", std::min(attempt_deadline, request_deadline()),
        [&w, id = s->id](std::function<void(reply)> respond) {
            reply rep;
            rep.found = w.sm.session_renew(id, w.sched.now()).has_value();
            respond(std::move(rep));
        },
        [this, s, sent](std::optional<reply> r) {
            if (s != sess_ || s->lost) return;
            if (r && r->ok && !r->found) {
                trace("renew: 404, session invalidated");
                s->fsm.invalidated();
                mark_lost(s, tenure::error::session_invalidated);
                return;
            }
            if (r && r->ok) s->fsm.renew_succeeded(sent, local_now());
            else s->fsm.renew_failed(sent, local_now());
            if (s->fsm.state() == tenure::detail::session_state::lost) {
                trace("renewal failed past the local deadline: session lost");
                mark_lost(s, s->fsm.lost_reason());
                return;
            }
            renew_arm(s);
        });
}

void client::mark_lost(std::shared_ptr<session_model> const& s, tenure::error why) {
    if (s->lost) return;
    if (s->fsm.state() != tenure::detail::session_state::lost) s->fsm.lose(tenure::error::leadership_lost);
    s->lost = true;
    s->lost_reason = why;
    if (scope_ && scope_->session == s->id) scope_lose(scope_, why);
    // election::acquire_impl races the acquire against the session's loss.
    if (phase_ == phase::acquiring && s == sess_) acquire_failed();
}

// ---- the scope: monitor, run(work), release ----

void client::scope_lose(std::shared_ptr<scope_model> const& sc, tenure::error why) {
    if (sc->status != scope_status::held) return;
    sc->status = scope_status::lost;
    sc->reason = why;
    trace("scope %s token=%" PRIu64 " lost (%d)", sc->key.c_str(), sc->token, static_cast<int>(why));
    // run() sees the loss event: the work is cancelled and run returns false.
    post_at(w_.sched.now(), [this, sc] { run_ended(sc); });
}

void client::monitor_step(std::shared_ptr<scope_model> const& sc, std::uint64_t index, nanoseconds retry) {
    if (sc->status != scope_status::held) return;
    auto& w = w_;
    auto wait = w_params().blocking_wait;
    rpc("kv_get(monitor)", blocking_deadline(),
        [&w, key = sc->key, index, wait](std::function<void(reply)> respond) {
            w.agent_kv_get(key, index, wait, std::move(respond));
        },
        [this, sc, index, retry](std::optional<reply> r) {
            if (sc->status != scope_status::held) return;
            if (!r || !r->ok) {
                timer_local(local_now() + retry,
                            [this, sc, index, retry] { monitor_step(sc, index, std::min<nanoseconds>(retry * 2, 1s)); });
                return;
            }
            if (!r->kv) {
                scope_lose(sc, tenure::error::key_deleted);
                return;
            }
            if (r->kv->session != sc->session) {
                if (!r->kv->session.empty()) {
                    scope_lose(sc, tenure::error::released_by_other);
                    return;
                }
                // Freed without our release: ask whether our session is gone
                // (one more round trip before the loss, as in the real monitor).
                auto& w = w_;
                rpc("session_info(monitor)", request_deadline(),
                    [&w, id = sc->session](std::function<void(reply)> respond) {
                        reply rep;
                        rep.found = w.sm.session_get(id) != nullptr;
                        respond(std::move(rep));
                    },
                    [this, sc](std::optional<reply> info) {
                        bool gone = info && info->ok && !info->found;
                        scope_lose(sc, gone ? tenure::error::session_invalidated : tenure::error::released_by_other);
                    });
                return;
            }
            std::uint64_t next = r->index < index ? 0 : std::max<std::uint64_t>(r->index, 1);
            monitor_step(sc, next, 20ms);
        });
}

void client::work_step(std::shared_ptr<scope_model> const& sc) {
    // run() cancels the work when the scope's loss event fires; the work
    // itself does not look at the clock.
    if (sc != scope_ || sc->status != scope_status::held) return;
    w_.on_work(*this, *sc);
    w_.to_resource(*this, sc->key, sc->session, sc->token);
    if (--works_left_ <= 0) {
        trace("work done: stepping down");
        run_ended(sc);  // the body finished: run() returns true
        return;
    }
    timer_local(local_now() + w_params().work_interval, [this, sc] { work_step(sc); });
}

void client::run_ended(std::shared_ptr<scope_model> const& sc) {
    if (sc != scope_ || phase_ != phase::leading) return;
    phase_ = phase::releasing;
    release_then_continue(sc);
}

void client::release_then_continue(std::shared_ptr<scope_model> const& sc) {
    // scope_state::begin_release
    bool send = sc->status == scope_status::held ||
                (sc->status == scope_status::lost && sc->reason == tenure::error::lease_expired_locally);
    if (sc->status == scope_status::held) sc->status = scope_status::released;
    auto after = [this, sc] {
        if (scope_ == sc) scope_.reset();
        campaign_sleep_then_loop();
    };
    if (!send) {
        after();
        return;
    }
    auto& w = w_;
    rpc("kv_release", request_deadline(),
        [&w, key = sc->key, sid = sc->session](std::function<void(reply)> respond) {
            auto r = w.sm.kv_release(key, std::nullopt, lock_flag, sid);
            reply rep;
            rep.ok = std::holds_alternative<bool>(r);
            respond(std::move(rep));
        },
        [this, sc, after](std::optional<reply> r) {
            if (r && r->ok) {
                after();
                return;
            }
            // campaign_op does not catch a failed release: the campaign ends
            // with the error. The model's application starts a new campaign
            // (new session) after the backoff; the old session object's
            // destructor closes it (its scope is already released).
            trace("release failed: campaign restarts");
            if (scope_ == sc) scope_.reset();
            if (sess_ && !sess_->lost) {
                auto& w = w_;
                auto old = sess_;
                old->lost = true;  // closing: its renew loop stops
                rpc("session_destroy", request_deadline(),
                    [&w, id = old->id](std::function<void(reply)> respond) {
                        w.sm.session_destroy(id, w.sched.now());
                        respond(reply{});
                    },
                    [](std::optional<reply>) {});
            }
            sess_.reset();
            campaign_sleep_then_loop();
        });
}

// ---- world ----

world::world(std::uint64_t seed, sim_options const& o)
    : sched(splitmix(seed), time_point{} + std::chrono::hours{1}), opt(o),
      sm(
          [&] {
              agent::agent_config cfg;
              cfg.node_name = "sim-agent";
              cfg.session_ttl_min = 10ms;
              cfg.seed = splitmix(seed ^ 0x5eed) | 1;
              return cfg;
          }(),
          time_point{} + std::chrono::hours{1}),
      epoch(time_point{} + std::chrono::hours{1}) {
    auto& g = rng();
    auto pick = [&](std::initializer_list<double> xs) { return *(xs.begin() + g() % xs.size()); };
    p.keys = 1 + static_cast<int>(g() % 2);
    int min_clients = std::max(2, 2 * p.keys);
    p.clients = min_clients + static_cast<int>(g() % (6 - min_clients + 1));
    p.ttl = std::chrono::milliseconds{static_cast<std::int64_t>(pick({500, 1000, 2000}))};
    p.lock_delay = std::chrono::duration_cast<nanoseconds>(p.ttl * pick({0.0, 0.25, 1.0, 2.0}));
    p.net_delay_max = std::chrono::duration_cast<nanoseconds>(p.ttl * pick({0.0, 0.01, 0.05, 0.2}));
    p.drop = pick({0.0, 0.01, 0.05, 0.15});
    p.duplicate = pick({0.0, 0.0, 0.02, 0.1});
    p.fence_delay_max = std::chrono::duration_cast<nanoseconds>(p.ttl * pick({0.01, 0.1, 1.0}));
    p.work_interval = p.ttl / 4;
    p.heal_at = std::chrono::duration_cast<nanoseconds>(p.ttl * (2 + static_cast<int>(g() % 9)));
    // The margin a pause must stay under (docs/safety.md): the server frees
    // the key no earlier than 2xTTL after the last renewal's send, plus
    // lock-delay; the holder stops TTL/rate after it.
    double slowest = 1.0 - opt.max_drift;
    auto margin = std::chrono::duration_cast<nanoseconds>(p.ttl * (2.0 - 1.0 / slowest)) + p.lock_delay;
    p.max_pause = std::chrono::duration_cast<nanoseconds>(margin * (opt.long_pauses ? 3.0 : 0.9));
    // After the heal: the old holder's session lapses (2xTTL) and its
    // lock-delay ends; a follower whose blocking query vanished times out
    // (wait + wait/16 + margin), backs off (<= 1 s) and reads again; one more
    // lock-delay refusal; a few round trips and backoffs.
    p.liveness_bound = 2 * p.ttl + 2 * p.lock_delay + p.blocking_wait + p.blocking_wait / 16 + p.blocking_margin +
                       p.request_timeout + 1s + 2 * p.ttl + 20 * p.net_delay_max + 4 * p.retry_backoff;

    for (int k = 0; k < p.keys; ++k) keys.push_back("service/sim/leader-" + std::to_string(k));
    for (int i = 0; i < p.clients; ++i) {
        double drift = std::uniform_real_distribution<double>(-opt.max_drift, opt.max_drift)(g);
        auto offset = nanoseconds{static_cast<std::int64_t>(g() % 1'000'000'000'000ull)};
        clients.push_back(std::make_unique<client>(*this, i, keys[i % p.keys], 1.0 + drift, offset));
    }
    for (auto const& k : keys) track_[k];

    sm.on_invalidate = [this](agent::session_entry const& s, agent::invalidation_cause c) {
        ++stats.invalidations;
        if (opt.verbose) log("agent: session %s invalidated (%s)", s.id.substr(0, 8).c_str(),
                             std::string(agent::to_string(c)).c_str());
    };
    sm.on_lock_delay_reject = [this](std::string_view key) {
        ++stats.lock_delay_refusals;
        if (opt.verbose) log("agent: acquire of %.*s refused (lock-delay)", int(key.size()), key.data());
    };

    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "keys=%d clients=%d ttl=%.1fs lock_delay=%.2fs delay<=%.0fms drop=%.2f dup=%.2f "
                  "fence_delay<=%.0fms heal=%.1fs max_pause=%.0fms bound=%.1fs%s",
                  p.keys, p.clients, std::chrono::duration<double>(p.ttl).count(),
                  std::chrono::duration<double>(p.lock_delay).count(),
                  std::chrono::duration<double, std::milli>(p.net_delay_max).count(), p.drop, p.duplicate,
                  std::chrono::duration<double, std::milli>(p.fence_delay_max).count(),
                  std::chrono::duration<double>(p.heal_at).count(),
                  std::chrono::duration<double, std::milli>(p.max_pause).count(),
                  std::chrono::duration<double>(p.liveness_bound).count(), opt.planted_bug ? " PLANTED-BUG" : "");
    summary = buf;
}

void world::vlog(char const* prefix, char const* fmt, va_list ap) const {
    std::printf("[%10.6f] %s", seconds(sched.now()), prefix);
    std::vprintf(fmt, ap);
    std::printf("\n");
}

void world::log(char const* fmt, ...) const {
    va_list ap;
    va_start(ap, fmt);
    vlog("", fmt, ap);
    va_end(ap);
}

void world::to_agent(client& c, char const* what, std::function<void()> op) {
    int copies = chance(p.duplicate) ? 2 : 1;
    for (int i = 0; i < copies; ++i) {
        if (c.partitioned > 0 || chance(p.drop)) {
            if (opt.verbose) log("net: c%d -> agent %s dropped", c.id(), what);
            continue;
        }
        sched.at(sched.now() + uniform(0ns, p.net_delay_max), [this, &c, op, what] {
            if (c.partitioned > 0) {
                if (opt.verbose) log("net: c%d -> agent %s lost in the partition", c.id(), what);
                return;
            }
            op();
        });
    }
}

void world::to_client(client& c, std::uint64_t gen, std::uint64_t rid, reply r) {
    int copies = chance(p.duplicate) ? 2 : 1;
    for (int i = 0; i < copies; ++i) {
        if (c.partitioned > 0 || chance(p.drop)) continue;
        sched.at(sched.now() + uniform(0ns, p.net_delay_max), [this, &c, gen, rid, r] {
            if (c.partitioned > 0 || gen != c.generation()) return;
            c.post_at(sched.now(), [&c, rid, r] { c.deliver(rid, r); });
        });
    }
}

void world::to_resource(client const& c, std::string key, std::string session, std::uint64_t token) {
    int cid = c.id();
    sched.at(sched.now() + uniform(0ns, p.fence_delay_max), [this, cid, key, session, token] {
        bool admitted = fence_.admit(key, token);
        auto& t = track_[key];
        if (!admitted) {
            ++stats.fence_refused;
            if (opt.verbose) log("fence: c%d's write with token %" PRIu64 " refused (highest %" PRIu64 ")", cid, token,
                                 fence_.highest(key));
            return;
        }
        ++stats.fence_admitted;
        if (token < t.admitted_token) fail("fence admitted a lower token");
        if (token == t.admitted_token && session != t.admitted_session && !t.admitted_session.empty())
            fail("fence admitted token " + std::to_string(token) + " from two sessions");
        t.admitted_token = token;
        t.admitted_session = session;
    });
}

void world::agent_kv_get(std::string key, std::uint64_t index, nanoseconds wait, std::function<void(reply)> respond) {
    auto b = std::make_shared<blocking>();
    b->key = std::move(key);
    b->min_index = index;
    b->respond = std::move(respond);
    if (index != 0) {
        // http_api's block_or_answer: deadline = now + wait + jitter(wait/16).
        b->deadline = sched.now() + wait + sm.random_stagger(wait / 16);
        sched.at(b->deadline, [this, b] { evaluate(b); });
    }
    evaluate(b);
}

void world::evaluate(std::shared_ptr<blocking> const& b) {
    if (b->done) return;
    auto const* e = sm.kv_get(b->key);
    std::uint64_t index = sm.kv_key_index(b->key);
    bool answer = b->min_index == 0;
    if (!answer) {
        if (!e) {
            if (b->not_found_seen > 0) b->min_index = std::max(b->min_index, index);
            ++b->not_found_seen;
        }
        answer = index > b->min_index || sched.now() >= b->deadline;
    }
    if (!answer) {
        b->reg = sm.watch({agent::watch_target{agent::watch_target::kind::key, b->key}},
                          [this, w = std::weak_ptr<blocking>(b)] {
                              // Must not call back into the state machine from here: post.
                              if (auto s = w.lock()) sched.at(sched.now(), [this, s] { evaluate(s); });
                          });
        return;
    }
    b->done = true;
    b->reg.reset();
    reply r;
    if (e) r.kv = *e;
    r.index = std::max<std::uint64_t>(index, 1);
    auto respond = std::move(b->respond);
    respond(std::move(r));
}

void world::plan_faults() {
    auto& g = rng();
    auto heal = epoch + p.heal_at;
    for (auto& cp : clients) {
        client* c = cp.get();
        int faults = static_cast<int>(g() % 4);
        time_point pause_free = epoch;  // pauses of one client never overlap
        for (int i = 0; i < faults; ++i) {
            // Strictly before the heal; each fault's end is scheduled by its
            // start, so an end never runs first.
            auto start = epoch + uniform(0ns, p.heal_at - 1ms);
            switch (g() % 3) {
            case 0: {
                auto end = std::min(heal, start + uniform(0ns, 3 * p.ttl));
                sched.at(start, [this, c, end] {
                    if (opt.verbose) log("fault: c%d partitioned", c->id());
                    ++c->partitioned;
                    sched.at(end, [this, c] {
                        if (opt.verbose) log("fault: c%d partition healed", c->id());
                        c->partitioned = std::max(0, c->partitioned - 1);
                    });
                });
                break;
            }
            case 1: {
                start = std::max(start, pause_free);
                auto end = start + uniform(0ns, p.max_pause);
                if (end >= heal) break;  // keep every pause whole and before the heal
                pause_free = end + 1ms;
                sched.at(start, [this, c, end] {
                    if (opt.verbose) log("fault: c%d paused", c->id());
                    c->pause();
                    sched.at(end, [this, c] {
                        if (opt.verbose) log("fault: c%d resumes", c->id());
                        c->resume();
                    });
                });
                break;
            }
            default: {
                auto end = std::min(heal, start + uniform(0ns, 2 * p.ttl));
                sched.at(start, [this, c, end] {
                    c->crash();
                    sched.at(end, [c] { c->restart(); });
                });
                break;
            }
            }
        }
    }
    sched.at(heal, [this] { this->heal(); });
}

void world::heal() {
    if (opt.verbose) log("HEAL: no more faults; every key must have a leader within %.1fs",
                         std::chrono::duration<double>(p.liveness_bound).count());
    healed = true;
    heal_time_ = sched.now();
    p.drop = 0;
    p.duplicate = 0;
    // A healed network is a healthy one: round trips well under TTL/4, the
    // cap of one renewal attempt (slower networks lose sessions, see
    // docs/safety.md).
    p.net_delay_max = std::min<nanoseconds>(p.net_delay_max, p.ttl / 50);
    for (auto& c : clients) {
        c->partitioned = 0;
        c->resume();
        c->restart();
    }
}

void world::on_elected(client const& c, scope_model const& sc) {
    ++stats.terms;
    (void)c;
    (void)sc;
}

void world::on_work(client const& c, scope_model const& sc) {
    ++stats.work;
    bool believes = c.believes();
    if (!believes) ++stats.late_work;
    if (opt.verbose) log("c%d works for %s token=%" PRIu64 "%s", c.id(), sc.key.c_str(), sc.token,
                         believes ? "" : " (past its local deadline: a late timer after a pause)");
    auto& t = track_[sc.key];
    if (sc.token < t.worked_token) {
        if (opt.long_pauses) {
            ++stats.overlapping_work;
            return;
        }
        fail("work overlap on " + sc.key + ": c" + std::to_string(c.id()) + " worked with token " +
             std::to_string(sc.token) + " after the leader with token " + std::to_string(t.worked_token) +
             " had started working");
    }
    if (sc.token == t.worked_token && sc.session != t.worked_session && !t.worked_session.empty())
        fail("two sessions worked with token " + std::to_string(sc.token));
    t.worked_token = sc.token;
    t.worked_session = sc.session;
}

void world::fail(std::string what) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "t=%.6fs: ", seconds(sched.now()));
    throw violation_error(buf + what);
}

void world::check() {
    for (auto const& key : keys) {
        client const* leader = nullptr;
        for (auto const& c : clients) {
            if (c->key() != key || !c->believes()) continue;
            if (leader) {
                auto describe = [&](client const& x) {
                    char b[160];
                    auto deadline = x.session()->fsm.local_deadline();
                    char in[48] = "none";
                    if (deadline != time_point::max())
                        std::snprintf(in, sizeof in, "in %.3fs",
                                      std::chrono::duration<double>(deadline - x.local_now()).count());
                    std::snprintf(b, sizeof b, "c%d (token %" PRIu64 ", local deadline %s%s%s)", x.id(),
                                  x.scope()->token, in, x.paused() ? ", paused" : "",
                                  x.partitioned ? ", partitioned" : "");
                    return std::string(b);
                };
                fail("two leaders of " + key + ": " + describe(*leader) + " and " + describe(*c));
            }
            leader = c.get();
        }
        auto& t = track_[key];
        if (leader && healed && !t.leader_since_heal) t.leader_since_heal = sched.now();

        // The agent: a holder is a live session; a new holder moves LockIndex.
        if (auto const* e = sm.kv_get(key); e && !e->session.empty()) {
            if (!sm.session_get(e->session)) fail("agent: " + key + " held by a session that does not exist");
            if (e->session != t.holder) {
                if (e->lock_index <= t.lock_index && !t.holder.empty())
                    fail("agent: new holder of " + key + " without a higher LockIndex");
                t.holder = e->session;
            }
            if (e->lock_index < t.lock_index) fail("agent: LockIndex of " + key + " went backwards");
            t.lock_index = e->lock_index;
        }
    }
}

sim_result world::run() {
    sim_result result;
    result.summary = summary;
    if (opt.verbose) log("schedule: %s", summary.c_str());
    try {
        for (auto& c : clients) c->start();
        plan_faults();
        auto limit = epoch + p.heal_at + p.liveness_bound;
        std::optional<time_point> stop_at;
        while (!sched.empty()) {
            auto next = sched.next_time();
            // The agent's own timers (session TTLs, lock-delay bookkeeping) fire first.
            if (auto d = sm.next_deadline(); d && *d <= next) {
                sched.advance_to(*d);
                sm.advance(*d);
                ++stats.events;
                check();
                continue;
            }
            if (stop_at && next > *stop_at) break;
            if (next > limit) {
                for (auto const& key : keys)
                    if (!track_[key].leader_since_heal) {
                        sched.advance_to(limit);
                        fail("liveness: no leader for " + key + " within " +
                             std::to_string(std::chrono::duration<double>(p.liveness_bound).count()) +
                             "s of the heal");
                    }
                break;
            }
            sched.run_next();
            ++stats.events;
            check();
            if (healed && !stop_at) {
                bool all = std::all_of(keys.begin(), keys.end(),
                                       [&](std::string const& k) { return track_[k].leader_since_heal.has_value(); });
                // Every key has a leader: run two more TTLs to see it settle, then stop.
                if (all) stop_at = sched.now() + 2 * p.ttl;
            }
        }
    } catch (violation_error const& e) {
        result.ok = false;
        result.violation = e.what();
    }
    stats.virtual_seconds = seconds(sched.now());
    result.stats = stats;
    return result;
}

}  // namespace

sim_result run_schedule(std::uint64_t seed, sim_options const& options) {
    world w(seed, options);
    return w.run();
}

}  // namespace tenure::sim
