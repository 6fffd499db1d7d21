// Consul's session and lock algorithm behind tenure's session and election:
// PUT /v1/session/renew, KV ?acquire= / ?release= with the Go api's lock flag
// value, consistent blocking queries for followers and the leader's monitor.
#include "consul/lock.hpp"
#include "consul/candidates.hpp"

#include <tenure/detail/random.hpp>

// g++ 12 false positive on Asio's coroutine frame allocator (fixed in g++ 13).
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <random>

namespace tenure::detail {

using namespace std::chrono_literals;
using boost::system::system_error;

namespace {

// A unique check ID per session: two sessions of one process must not share a check.
std::string unique_check_id(std::string const& name) {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(random_seed()));
    return "tenure-health:" + name + ":" + buf;
}

// A different retry spread for every candidate (see acquire_backoff).
std::uint64_t next_spread_seed() { return random_seed(); }

// This process's candidates that saw a key freed, per key, until their
// attempt ends. They all try the key (at once, and again when a lock-delay
// ends) from this process; on one thread the winner's answer would queue
// behind every loser's request. So each spreads its tries over
// spread_per_candidate per candidate that saw the key freed before it: the
// first goes at once, and a candidate alone in its process (the usual
// deployment) never waits. Process-wide because every client's candidates
// share the process's threads; a mutex because clients may run on several.
class key_herds {
public:
    static key_herds& instance() {
        static auto* herds = new key_herds;  // never destroyed: coroutine frames may outlive statics
        return *herds;
    }
    int join(std::string const& key) {
        std::lock_guard lock(mutex_);
        return counts_[key]++;
    }
    void leave(std::string const& key) {
        std::lock_guard lock(mutex_);
        if (auto it = counts_.find(key); it != counts_.end() && --it->second <= 0) counts_.erase(it);
    }

private:
    std::mutex mutex_;
    std::unordered_map<std::string, int> counts_;
};

class herd_member {
public:
    explicit herd_member(std::string key) : key_(std::move(key)), before_(key_herds::instance().join(key_)) {}
    ~herd_member() { key_herds::instance().leave(key_); }
    herd_member(herd_member const&) = delete;
    herd_member& operator=(herd_member const&) = delete;
    int before() const noexcept { return before_; }  // candidates of this process that saw it first

private:
    std::string key_;
    int before_;
};

constexpr auto spread_per_candidate = std::chrono::microseconds{250};
constexpr auto max_retry_spread = std::chrono::milliseconds{10};     // after a lock-delay (and at most D/10)
constexpr auto max_first_try_spread = std::chrono::milliseconds{10};  // the first try of a freed key
constexpr auto max_named_lead = std::chrono::milliseconds{2};        // the named one's early tries (and at most D/10)

clock::duration random_up_to(clock::duration limit) {
    if (limit <= clock::duration::zero()) return clock::duration::zero();
    std::minstd_rand rng(static_cast<std::uint_fast32_t>(next_spread_seed() >> 16));
    std::uniform_int_distribution<clock::duration::rep> d(0, limit.count());
    return clock::duration{d(rng)};
}
}  // namespace

consul::read_options consistent_read(std::uint64_t index, std::chrono::nanoseconds wait) {
    consul::read_options ro;
    ro.mode = consul::consistency::consistent;
    if (index != 0) {
        ro.index = index;
        ro.wait = wait;
    }
    return ro;
}

// A release the server asks us to bring back later (429: a rate limit, 503)
// is sent again: giving up would leave the key held until the session ends,
// and the session's lock-delay would then hold back the next leader as well.
// Pauses from 50 ms, doubling up to 1 s, until the session's local deadline
// (past it the server may free the key itself); other errors end at once.
// Sending it twice is harmless: a release by a session that no longer holds
// the key changes nothing.
asio::awaitable<void> consul_lock_scope::send_release() {
    auto self = shared_from_this();
    clock::duration pause = 50ms;
    for (;;) {
        try {
            co_await send_release_once();
            co_return;
        } catch (consul::api_error const& e) {
            bool const later = e.http_status() == 429 || e.http_status() == 503;
            if (!later || session->lost_event.is_set() || clock::now() + pause >= session->fsm.local_deadline()) throw;
        }
        co_await sleep_until(clock::now() + pause);
        pause = std::min<clock::duration>(2 * pause, 1s);
    }
}

// PUT ?release=, or for quick_retake a one-op `unlock` transaction (the same
// rule): its answer carries the key's new ModifyIndex, which lets this
// session's next acquire of the key skip its first read.
// Each way of releasing is a coroutine of its own, so that this one's frame
// (paid for every release) holds none of their locals: a frame past 1 KiB
// takes malloc's slow path, which at 10 000 releases showed in the profile.
asio::awaitable<void> consul_lock_scope::send_release_once() {
    if (handoff_on_release && !quick_retake) {
        // Hand the key to the best waiting candidate in one transaction (no
        // race between the followers, no gap); look again if it left meanwhile.
        auto& owner = static_cast<consul_session&>(*session);
        auto noted = owner.take_handover_note(key);  // taken in any case: a note serves one release
        if (auto const seen = consul_session::take_note(owner.registry_empty_at, key))
            if (co_await release_if_nobody_waits(*seen)) co_return;
        // A failure to read or hand over falls back to the plain release.
        if (hub && co_await hand_over_from_snapshot()) co_return;
        if (noted && co_await hand_over(handover_from_note(std::move(*noted)))) co_return;
        if (co_await hand_over_from_registry()) co_return;
        transfer_target.clear();
    }
    if (!quick_retake) {
        co_await coro(client).kv_release(key, session->id, value, consul::lock_flag_value);
        co_return;
    }
    co_await unlock_noting_index();
}

// Nobody registered or left since we saw the registry empty at `seen_index`:
// a plain unlock, guarded by that, in one round trip.
asio::awaitable<bool> consul_lock_scope::release_if_nobody_waits(std::uint64_t seen_index) {
    auto& owner = static_cast<consul_session&>(*session);
    auto r = co_await coro(client).txn(guarded_unlock_ops(seen_index));
    if (r.committed) {
        // The guard held, so the registry is still empty as of the
        // same index: the next release needs no read either. Nobody
        // waited for the key, so this session may take it again with
        // no read first (the released ModifyIndex as its guard).
        // (A check-index guard reports `.seen` first: the key's entry is the last.)
        owner.note_registry_empty(key, seen_index);
        if (!r.results.empty() && r.results.back().key == key && r.results.back().session.empty())
            owner.note_released(key, r.results.back().modify_index);
        co_return true;
    }
    for (auto const& e : r.errors)
        if (e.op_index == 1) co_return true;  // not ours to release any more
    co_return false;
}

std::vector<consul::txn_op> consul_lock_scope::guarded_unlock_ops(std::uint64_t seen_index) const {
    return txn_ops(seen_guard(seen_index), unlock_op());
}

// Holds while nobody registered or left since `.seen` was at `seen_index`
// (0: it did not exist).
consul::txn_op consul_lock_scope::seen_guard(std::uint64_t seen_index) const {
    consul::txn_op guard;
    guard.key = registry_seen_key(key);
    if (seen_index == 0) {
        guard.verb = "check-not-exists";
    } else {
        guard.verb = "check-index";
        guard.index = seen_index;
    }
    return guard;
}

// The `unlock` op of this scope's key, by its session.
consul::txn_op consul_lock_scope::unlock_op() const {
    consul::txn_op op;
    op.verb = "unlock";
    op.key = key;
    op.value = value;
    op.flags = consul::lock_flag_value;
    op.session = session->id;
    return op;
}

// Reads the registry and hands the key to the best candidate other than us;
// up to three tries when the registry moved meanwhile. True when the key is
// handed over or is no longer ours; false: release it plainly.
asio::awaitable<bool> consul_lock_scope::hand_over_from_registry() {
    auto& owner = static_cast<consul_session&>(*session);
    for (int attempt = 0; attempt < 3; ++attempt) {
        registry_view reg;
        try {
            reg = co_await read_registry(client, key, false);
        } catch (system_error const& e) {
            if (is_abort(e)) throw;
            co_return false;
        }
        if (!reg.stale.empty()) {
            // Entries of ended sessions (behaviour release leaves them
            // unlocked): removed in the background, owned by the session.
            session->spawn_owned([c = &client, stale = reg.stale]() { return prune_stale(*c, stale); });
        }
        auto const best = best_other_than(reg.live, session->id);
        if (!best) {
            owner.note_registry_empty(key, reg.seen ? reg.seen->modify_index : 0);
            co_return false;
        }
        // Unguarded: the marker's compare-and-set refuses a registry that moved.
        planned_handover h{*best, std::move(reg.marker), std::nullopt, std::move(reg.live)};
        if (co_await hand_over(std::move(h))) co_return true;
    }
    co_return false;
}

// quick_retake: a one-op unlock transaction, whose answer notes the index.
asio::awaitable<void> consul_lock_scope::unlock_noting_index() {
    auto r = co_await coro(client).txn(txn_ops(unlock_op()));
    if (r.committed && r.results.size() == 1 && r.results.front().session.empty())
        static_cast<consul_session&>(*session).note_released(key, r.results.front().modify_index);
}

std::optional<consul_lock_scope::planned_handover> consul_lock_scope::handover_in_snapshot() const {
    // Looked at in place (peek: no copies); only the marker is kept. The
    // three names share one buffer: `<key>.candidates/` and each name after it.
    std::string name = candidates_prefix(key);
    auto const dir_end = name.size();
    name.reserve(dir_end + 64);  // a session ID is 36 characters
    auto const look = [&](std::string_view in_dir) {
        name.resize(dir_end);
        name.append(in_dir);
        return hub->peek(name);
    };
    auto const marker = look(marker_name);
    if (!marker || !*marker) return std::nullopt;
    auto const named = decode_priority_marker((*marker)->value);
    if (!named || named->first.empty() || named->first == session->id) return std::nullopt;
    auto const entry = look(named->first);
    if (!entry || !*entry || (*entry)->session != named->first || (*entry)->flags != candidate_flag_value)
        return std::nullopt;
    auto target = candidate_from_entry(**entry, named->first);
    auto const seen = look(seen_name);
    if (!target || !seen) return std::nullopt;
    // Nobody registered or left since the snapshot (every registration and
    // removal moves `.seen`), so the marker's candidate is still the best.
    return planned_handover{std::move(*target), **marker, seen_guard(*seen ? (*seen)->modify_index : 0), {}};
}

asio::awaitable<bool> consul_lock_scope::hand_over_from_snapshot() {
    auto h = handover_in_snapshot();
    if (!h) co_return false;
    co_return co_await hand_over(std::move(*h));
}

consul_lock_scope::planned_handover consul_lock_scope::handover_from_note(handover_note n) const {
    auto target = n.live.front();
    return planned_handover{std::move(target), std::move(n.marker), seen_guard(n.seen_index), std::move(n.live)};
}

void consul_session::note_handover(std::string const& key, std::vector<candidate_info> const& live,
                                   consul::kv_pair marker, std::optional<consul::kv_pair> const& seen) {
    auto const named = decode_priority_marker(marker.value);
    handover_note n{{}, std::move(marker), seen ? seen->modify_index : 0};
    std::copy_if(live.begin(), live.end(), std::back_inserter(n.live), [&](candidate_info const& c) { return c.session != id; });
    if (n.live.empty() || !named || named->first != n.live.front().session) return;
    if (handover_notes.size() >= 4096 && !handover_notes.contains(key)) handover_notes.clear();
    handover_notes.insert_or_assign(key, std::move(n));
    if (auto const it = registry_empty_at.find(key); it != registry_empty_at.end()) it->second = taken;
}

asio::awaitable<bool> consul_lock_scope::hand_over(planned_handover h) {
    transfer_target = h.target.session;
    try {
        auto out = co_await transfer_txn(client, key, session->id, value, h.target, h.marker,
                                         h.live.empty() ? nullptr : &h.live, h.guard ? &*h.guard : nullptr);
        if (out.held) {
            if (out.after) name_after_handover(std::move(*out.after));
            co_return true;
        }
        transfer_target.clear();
        co_return out.holder_lost;  // not ours to release any more
    } catch (system_error const& e) {
        if (is_abort(e)) throw;
    }
    transfer_target.clear();
    co_return false;
}

void consul_lock_scope::name_after_handover(registry_view after) {
    if (!needs_naming(after)) return;
    session->spawn_owned([c = &client, k = key, self = session->id, after = std::move(after)]() -> asio::awaitable<void> {
        try {
            co_await name_next_best(*c, k, self, after, true);
        } catch (system_error const&) {
            // The marker stays as it was: the next freeing reads the registry.
        }
    });
}

asio::awaitable<boost::system::error_code> consul_lock_scope::check_held() {
    auto self = shared_from_this();
    auto r = co_await coro(client).kv_get(key, consistent_read());
    if (!r.value) co_return make_error_code(error::key_deleted);
    if (r.value->session != session->id) co_return make_error_code(error::released_by_other);
    co_return boost::system::error_code{};
}

namespace {

// The key as one read saw it.
struct key_view {
    std::optional<consul::kv_pair> pair;
    std::uint64_t index = 0;  // X-Consul-Index of the read
};

// A consistent read of `key`: through the hub when there is one (answered
// once the key differs from `known` in a snapshot at least as new as
// `min_index`), else a blocking query on the key itself (`min_index` 0: now).
asio::awaitable<key_view> read_key(consul::client& client, kv_watch_hub* hub, std::string const& key,
                                   std::uint64_t min_index, std::optional<kv_watch_hub::known_state> known) {
    if (hub) {
        auto s = co_await hub->changed(key, min_index, known);
        if (!s) throw system_error(asio::error::operation_aborted);
        co_return key_view{std::move(s->pair), s->index};
    }
    auto r = co_await coro(client).kv_get(key, consistent_read(min_index));
    co_return key_view{std::move(r.value), r.meta.index};
}

std::optional<kv_watch_hub::known_state> known_of(std::optional<consul::kv_pair> const& p) {
    if (!p) return kv_watch_hub::known_state{false, 0};
    return kv_watch_hub::known_state{true, p->modify_index};
}

enum class lock_outcome { acquired, held, lock_delay, failed };

lock_outcome classify(consul::txn_result const& r) {
    if (r.committed) return lock_outcome::acquired;
    for (auto const& e : r.errors) {
        if (e.what.find("lock delay") != std::string::npos) return lock_outcome::lock_delay;
        if (e.what.find("already held") != std::string::npos) return lock_outcome::held;
    }
    return lock_outcome::failed;
}

// One lock transaction (any guard first, then the lock op, then any ops
// that go with taking the key): how it went, and the locked key when it went
// through for `session`. A transport failure is `failed`.
//
// The request itself is not cancelled: aborted in flight, it could still
// take the key on the server, and nobody would release it until the session
// ended. A cancellation that arrives meanwhile is honoured once the answer
// is in: a key taken is released again, then operation_aborted is thrown
// (so an acquire cancelled with any type leaves nothing behind). One that
// arrives while the request still waits for a connection stops it there,
// before anything is sent.
//
// Asio cancels a coroutine's operations through the state of its whole
// coroutine thread, so for the request that state records a cancellation
// and passes none on, and no await throws for it; then it is put back as
// the thread had it. That thread is the acquire's own (race() in
// core/event.hpp co_spawns it): Asio's defaults, terminal in and out, and
// awaits that throw once cancelled. (A co_spawn of the request with no
// cancellation slot did the same at the cost of a coroutine thread, its
// entry frame and a trip through the scheduler per attempt.)
struct lock_attempt {
    lock_outcome outcome = lock_outcome::failed;
    std::vector<consul::kv_pair> results;  // everything the transaction read back, when it went through
    std::size_t lock_at = 0;               // results[lock_at]: the locked key
    bool guard_failed = false;             // not committed because ops[0], a guard, did not hold
    // The locked key, when the lock went through.
    consul::kv_pair const* held() const { return outcome == lock_outcome::acquired ? &results[lock_at] : nullptr; }
};

// What the lock transaction's answer (nullopt: it failed) says.
lock_attempt attempt_of(std::optional<consul::txn_result> t, std::string const& lock_key, bool guarded,
                        std::string const& session) {
    lock_attempt a;
    if (!t) return a;
    a.outcome = classify(*t);
    if (a.outcome == lock_outcome::acquired) {
        // The lock op's result: the last one of the key (a guard on the
        // key itself comes before it; reads of other keys may follow).
        auto const held = std::find_if(t->results.rbegin(), t->results.rend(),
                                       [&](consul::kv_pair const& p) { return p.key == lock_key; });
        if (held == t->results.rend() || held->session != session) {
            a.outcome = lock_outcome::failed;  // an odd answer
        } else {
            a.lock_at = static_cast<std::size_t>(std::distance(held, t->results.rend()) - 1);
            a.results = std::move(t->results);
        }
    } else if (guarded) {
        a.guard_failed = std::any_of(t->errors.begin(), t->errors.end(),
                                     [](consul::txn_error const& e) { return e.op_index == 0; });
    }
    return a;
}

asio::awaitable<lock_attempt> try_lock(consul::client& client, std::vector<consul::txn_op> ops,
                                       std::string const& lock_key, std::string const& session) {
    bool const guarded = !ops.empty() && ops.front().verb != "lock";
    if ((co_await asio::this_coro::cancellation_state).cancelled() != asio::cancellation_type::none)
        throw system_error(asio::error::operation_aborted);
    co_await asio::this_coro::reset_cancellation_state(asio::enable_terminal_cancellation(),
                                                       asio::disable_cancellation());
    co_await asio::this_coro::throw_if_cancelled(false);
    std::optional<consul::txn_result> t;
    bool aborted = false;  // the client closed, or cancelled while waiting for a connection
    try {
        t = co_await coro(client).txn(std::move(ops));
    } catch (system_error const& ex) {
        aborted = is_abort(ex);
    }
    auto const cancelled = (co_await asio::this_coro::cancellation_state).cancelled();
    co_await asio::this_coro::reset_cancellation_state();
    co_await asio::this_coro::throw_if_cancelled(true);
    if (aborted) throw system_error(asio::error::operation_aborted);
    lock_attempt a = attempt_of(std::move(t), lock_key, guarded, session);
    if (cancelled == asio::cancellation_type::none) co_return a;
    if (auto const* held = a.held()) {
        // The release must go out: no cancellation slot reaches it.
        auto unstoppable = asio::bind_cancellation_slot(asio::cancellation_slot(), asio::use_awaitable);
        auto ex = co_await asio::this_coro::executor;
        try {
            co_await asio::co_spawn(
                ex, coro(client).kv_release(held->key, session, held->value, consul::lock_flag_value), unstoppable);
        } catch (system_error const&) {
            // The session's end frees the key then.
        }
    }
    throw system_error(asio::error::operation_aborted);
}

// After a lock-delay refusal: retry when the delay ends with the lock alone,
// guarded by what the read showed (the free key's index, or its absence): no
// read first, so the first retry is one round trip. The key when taken;
// nullopt on anything but another lock-delay refusal (the caller reads the
// key again).
asio::awaitable<std::optional<consul::kv_pair>> retake_after_lock_delay(consul::client& client,
                                                                        std::string const& session,
                                                                        consul::txn_op const& lock_op,
                                                                        std::optional<consul::kv_pair> const& seen,
                                                                        acquire_backoff& backoff,
                                                                        clock::duration lock_delay) {
    consul::txn_op guard;
    guard.key = lock_op.key;
    if (seen) {
        guard.verb = "check-index";
        guard.index = seen->modify_index;
    } else {
        guard.verb = "check-not-exists";
    }
    for (;;) {
        co_await sleep_until(backoff.refused(clock::now(), lock_delay));
        auto guarded = txn_ops(guard, lock_op);
        auto again = co_await try_lock(client, std::move(guarded), lock_op.key, session);
        if (auto const* held = again.held()) co_return *held;
        if (again.outcome != lock_outcome::lock_delay) co_return std::nullopt;
    }
}

}  // namespace

// On a hub, the monitor waits as a watch (a registration, no coroutine)
// until the hub sees the key change; then watch_key() takes over.
void consul_lock_scope::start_monitor() {
    if (!hub) return scope_state::start_monitor();
    watching = true;
    std::weak_ptr<consul_lock_scope> weak = std::static_pointer_cast<consul_lock_scope>(shared_from_this());
    hub_watch = hub->watch(key, modify_index, kv_watch_hub::known_state{true, modify_index}, [weak] {
        if (auto self = weak.lock()) self->on_hub_answer();
    });
    // Released or lost: the watch ends (a monitor started since has the slot).
    monitor_cancel.slot().assign([this](asio::cancellation_type) { stop_hub_watch(); });
}

void consul_lock_scope::stop_hub_watch() noexcept {
    if (hub_watch) hub->end_watch(*std::exchange(hub_watch, std::nullopt));
}

// The hub saw the key change (or its notice was posted before the watch
// ended: then there is nothing to do).
void consul_lock_scope::on_hub_answer() {
    if (!hub_watch) return;
    auto answer = hub->end_watch(*std::exchange(hub_watch, std::nullopt));
    if (status != scope_status::held) return;
    auto self = std::static_pointer_cast<consul_lock_scope>(shared_from_this());
    session->spawn_owned([self, answer = std::move(answer)]() mutable { return self->watch_key(std::move(answer)); },
                         monitor_cancel.slot());
}

// Watches the key (its own blocking queries, or the prefix's hub); loss when
// the key is gone or held by another session. Errors are retried: the
// session's local deadline, not the monitor, decides when an unreachable
// server means loss.
asio::awaitable<void> consul_lock_scope::watch_key(std::optional<kv_watch_hub::key_state> first) {
    auto self = shared_from_this();
    watching = true;
    std::uint64_t index = modify_index;
    std::optional<kv_watch_hub::known_state> known = kv_watch_hub::known_state{true, modify_index};
    clock::duration retry = 20ms;
    while (status == scope_status::held) {
        std::optional<key_view> r;
        try {
            if (first) {
                r = key_view{std::move(first->pair), first->index};
                first.reset();
            } else if (hub) {
                // Stopped (released, lost) with no exception: once per term.
                auto s = co_await hub->changed(key, index, known);
                if (!s) co_return;
                r = key_view{std::move(s->pair), s->index};
            } else {
                r = co_await read_key(client, nullptr, key, index, known);
            }
            retry = 20ms;
        } catch (system_error const& e) {
            if (status != scope_status::held || is_abort(e)) co_return;
        }
        if (status != scope_status::held) co_return;
        if (!r) {
            co_await pause_and_grow(retry);  // throws operation_aborted when the monitor is stopped
            continue;
        }
        auto const& pair = r->pair;
        if (!pair) {
            lose(make_error_code(error::key_deleted));
            co_return;
        }
        if (pair->session != session->id) {
            auto why = make_error_code(error::released_by_other);
            if (!transfer_target.empty() && pair->session == transfer_target && transfer_reason) {
                lose(transfer_reason);
                co_return;
            }
            if (pair->session.empty()) {
                // Freed without our release: was our session invalidated?
                bool gone = false;
                try {
                    auto info = co_await coro(client).session_info_get(session->id);
                    gone = !info.value.has_value();
                } catch (system_error const&) {
                }
                if (gone) why = make_error_code(error::session_invalidated);
            }
            lose(why);
            co_return;
        }
        known = known_of(pair);
        index = hub ? r->index : consul::next_wait_index(index, r->index);
    }
}

// The candidate loop (api.Lock's algorithm, minus its 5 s poll): block while
// someone holds the key, race when it clears, and on a refusal of a free key
// (lock-delay) retry when the previous holder's LockDelay ends. The acquire
// is a one-op transaction so that its answer carries the new LockIndex (the
// fencing token) and says why a refusal happened, with no second read.
// The LockDelay of `holder`'s session, asked once per session (this
// session's own when the server does not say).
asio::awaitable<clock::duration> consul_session::holder_lock_delay(std::string const& holder) {
    if (auto known = holder_delays.find(holder); known != holder_delays.end()) co_return known->second;
    if (auto asked = delay_lookups.find(holder); asked != delay_lookups.end()) {
        auto lookup = asked->second;
        co_await lookup->done.async_wait(asio::as_tuple(asio::use_awaitable));
        if (!lookup->delay) throw system_error(asio::error::operation_aborted);  // we were cancelled
        co_return *lookup->delay;
    }
    auto lookup = std::make_shared<delay_lookup>(client.get_executor());
    delay_lookups.emplace(holder, lookup);
    // However the lookup ends, those waiting for it get an answer: the
    // session's own LockDelay if it failed.
    clock::duration delay = options.lock_delay;
    struct settle {
        consul_session& s;
        std::string const& holder;
        delay_lookup& lookup;
        clock::duration const& delay;
        ~settle() {
            lookup.delay = delay;
            lookup.done.cancel();
            s.delay_lookups.erase(holder);
        }
    } settled{*this, holder, *lookup, delay};
    try {
        auto info = co_await coro(client).session_info_get(holder);
        if (info.value) {
            delay = info.value->lock_delay;
            if (holder_delays.size() >= 4096) holder_delays.clear();
            holder_delays.emplace(holder, delay);
        }
    } catch (system_error const& ex) {
        if (is_abort(ex)) throw;
    }
    co_return delay;
}

namespace {

// This candidate's registry entry while it waits (candidates.hpp): made when
// the acquire first finds the key held. The lock transaction that takes the
// key takes the entry out too (removal_ops after the lock op: all or
// nothing), so the usual win costs no request of its own. Otherwise it is
// removed in the background (owned by the session) when the acquire ends
// however it ends. An acquire that ended without the key while a handoff to
// it was landing gives the key back.
struct candidate_registration {
    std::shared_ptr<consul_session> session;
    std::string key;
    bool active = false;  // the entry may exist
    bool won = false;     // the acquire took the key
    bool name_next = false;  // took the key with nobody live named: name the next best anyway
    std::uint64_t since = 0;
    std::uint64_t modify_index = 0;  // of our entry: deleted by compare-and-delete (a newer registration stays)
    // Who the marker named, ranked before us, when we last read it (the
    // registration's read-back, a ranking read), until that one is seen to
    // stop waiting. Without a hub's snapshot it spares the waiters a lock the
    // guard would refuse, sent ahead of the named one's on the agent's queue.
    // `named_seen_at`: an index the named one's entry was no newer than then
    // (an entry written since means it waits anew: the naming may be stale).
    std::optional<priority_marker> named_seen;
    std::uint64_t named_seen_at = 0;
    // Once the lock took the entry out: note whom a release would hand the
    // key to (consul_session::handover_notes; without a hub's snapshot).
    bool note_target = false;

    candidate_registration(std::shared_ptr<consul_session> s, std::string k) : session(std::move(s)), key(std::move(k)) {}
    candidate_registration(candidate_registration const&) = delete;
    candidate_registration& operator=(candidate_registration const&) = delete;

    // Removes the entry `at` its ModifyIndex (0: whatever it is), moves
    // `.seen`, and reads the registry as that leaves it (the marker with it):
    // who to name next, without another read.
    static std::vector<consul::txn_op> removal_ops(std::string const& key, std::string const& session,
                                                   std::uint64_t at) {
        consul::txn_op gone;
        gone.key = candidate_key(key, session);
        gone.verb = at != 0 ? "delete-cas" : "delete";
        gone.index = at;
        consul::txn_op seen;
        seen.verb = "set";
        seen.key = registry_seen_key(key);
        seen.value = std::to_string(next_spread_seed());
        consul::txn_op tree;
        tree.verb = "get-tree";
        tree.key = candidates_prefix(key);
        std::vector<consul::txn_op> ops;
        ops.reserve(3);
        ops.push_back(std::move(gone));
        ops.push_back(std::move(seen));
        ops.push_back(std::move(tree));
        return ops;
    }

    // The ops the lock transaction carries for a registered candidate. A
    // plain delete: our current entry, whatever its index (a compare that
    // failed would fail the lock with it, on every retry).
    std::vector<consul::txn_op> ops_with_lock() const { return active ? removal_ops(key, session->id, 0) : std::vector<consul::txn_op>{}; }

    // What a read of the marker showed, for a candidate of `priority`, `at`
    // an index its candidate's entry was no newer than (0: unknown).
    void remember_named(std::optional<priority_marker> const& top, int priority, std::uint64_t at) {
        if (at != 0 && top && !top->first.empty() && top->first != session->id && top->priority >= priority) {
            named_seen = top;
            named_seen_at = at;
        } else {
            named_seen.reset();
        }
    }

    // The lock transaction went through with ops_with_lock(): the entry is
    // gone; `results` is what it read back.
    void removed_by_lock(std::vector<consul::kv_pair> const& results) {
        if (!active) return;
        active = false;
        auto reg = parse_registry(key, results, 0);
        bool const alone = !best_other_than(reg.live, session->id);
        // What a release would read first: nobody waits, as of .seen's index.
        if (alone) session->note_registry_empty(key, reg.seen ? reg.seen->modify_index : 0);
        session->spawn_owned([s = session, k = key, reg = std::move(reg), always = name_next,
                              note = note_target && !alone]() -> asio::awaitable<void> {
            try {
                auto marker = co_await name_next_best(s->client, k, s->id, reg, always);
                if (note && marker) s->note_handover(k, reg.live, std::move(*marker), reg.seen);
            } catch (system_error const&) {
                // The marker stays as it was: the next freeing reads the registry.
            }
        });
    }

    ~candidate_registration() {
        if (!active) return;
        session->spawn_owned([s = session, k = key, won = won, at = modify_index, always = name_next]() {
            return withdraw(s, k, won, at, always);
        });
    }

    // Takes `s`'s entry on `k` out (at its ModifyIndex `at`, 0: whatever it
    // is) and names the next best; an acquire that ended without the key
    // (`won` false) while a handoff to it was landing gives the key back.
    static asio::awaitable<void> withdraw(std::shared_ptr<consul_session> s, std::string k, bool won, std::uint64_t at,
                                          bool always) {
        try {
            // Only while the entry is still ours: a handover to us took
            // it out already (transfer_txn), and `.seen` must not move
            // for nothing.
            std::string const entry = candidate_key(k, s->id);
            consul::txn_op ours;
            ours.verb = "check-session";
            ours.key = entry;
            ours.session = s->id;
            std::vector<consul::txn_op> ops{std::move(ours)};
            for (auto& op : removal_ops(k, s->id, at)) ops.push_back(std::move(op));
            auto t = co_await coro(s->client).txn(std::move(ops));
            if (t.committed) {
                std::erase_if(t.results, [&](consul::kv_pair const& p) { return p.key == entry; });
                auto const reg = parse_registry(k, t.results, 0);
                co_await name_next_best(s->client, k, s->id, reg, always);
            }
            if (won) co_return;
            auto r = co_await coro(s->client).kv_get(k, consistent_read());
            if (!r.value || r.value->session != s->id) co_return;
            bool in_use = std::any_of(s->scopes.begin(), s->scopes.end(), [&](std::weak_ptr<scope_state> const& w) {
                auto live = w.lock();
                return live && live->key == k && live->status == scope_status::held;
            });
            if (!in_use) co_await coro(s->client).kv_release(k, s->id, r.value->value, consul::lock_flag_value);
        } catch (system_error const&) {
            // The session's end takes the entry (and any key) along.
        }
    }
};

// After a handover to `s` (no lock transaction of its own, so no read-back),
// in place of the entry's removal: the handover's transaction took the entry
// out. One registry read, in the background while `s` holds the key, shows
// that, and whom a release would hand the key to (handover_note): the
// release then needs no read. A registrant ranked after the one named does
// not spoil the note. An entry still there is taken out as usual.
// The read waits `settle` (the monitor's delay) first: the old holder often
// campaigns again at once, and if it ranks before the one named, a note
// read before its registration would be refused at the release.
asio::awaitable<void> after_handover_to(std::shared_ptr<consul_session> s, std::string key, std::uint64_t entry_at,
                                        bool always, clock::duration settle) {
    if (settle > clock::duration::zero()) co_await sleep_until(clock::now() + settle);
    auto const ours = [&](auto const& c) { return c.session == s->id; };
    for (int look = 0; look < 2; ++look) {
        registry_view reg;
        bool read = true;
        try {
            reg = co_await read_registry(s->client, key, false);
        } catch (system_error const&) {
            read = false;  // remove the entry as without the read
        }
        if (!read || std::any_of(reg.live.begin(), reg.live.end(), ours)) {
            if (look == 0) co_await candidate_registration::withdraw(s, key, true, entry_at, always);
            co_return;
        }
        auto const best = best_other_than(reg.live, s->id);
        if (!best) co_return;
        auto const named = reg.marker ? decode_priority_marker(reg.marker->value) : std::nullopt;
        if (named && named->first == best->session) {
            s->note_handover(key, reg.live, std::move(*reg.marker), reg.seen);
            co_return;
        }
        // Nobody named the best: it registered after the one who handed
        // over last read the registry (the one named then took the marker
        // with it), or it is naming itself right now. Naming it keeps the
        // order for an invalidation, and the note for our release; when
        // that loses to the registrant's own naming, one more look.
        try {
            if (auto marker = co_await name_next_best(s->client, key, s->id, reg, true)) {
                s->note_handover(key, reg.live, std::move(*marker), reg.seen);
                co_return;
            }
        } catch (system_error const&) {
            co_return;  // no note: the release reads the registry
        }
    }
}

}  // namespace

asio::awaitable<std::vector<candidate_info>> consul_session::read_candidates(std::string key) {
    auto reg = co_await read_registry(client, key, false);
    co_return std::move(reg.live);
}

namespace {

// The lock op of `key` for this session.
consul::txn_op lock_op_for(consul_session const& s, std::string const& key, std::string const& value) {
    consul::txn_op op;
    op.verb = "lock";
    op.key = key;
    op.value = value;
    op.flags = consul::lock_flag_value;
    op.session = s.id;
    return op;
}
std::vector<consul::txn_op> lock_alone(consul_session const& s, std::string const& key, std::string const& value) {
    return txn_ops(lock_op_for(s, key, value));
}

// The key, taken if nobody touched it since this session released it at
// ModifyIndex `at` (check-index): no read first.
asio::awaitable<std::shared_ptr<scope_state>> retake(consul_session& s, std::string const& key,
                                                     std::string const& value, std::shared_ptr<kv_watch_hub> const& hub,
                                                     election_options const& eopts, std::uint64_t at) {
    consul::txn_op check;
    check.verb = "check-index";
    check.key = key;
    check.index = at;
    auto a = co_await try_lock(s.client, txn_ops(std::move(check), lock_op_for(s, key, value)), key, s.id);
    if (auto const* held = a.held()) co_return s.won(key, value, hub, eopts, *held);
    co_return nullptr;
}

// A candidate that waits registers beside the key (candidates.hpp), in one
// transaction, and names itself in the marker when it ranks first. (Its own
// coroutine: acquire_with's frame, paid by every acquire, holds none of this.)
asio::awaitable<void> register_waiting(consul_session& s, candidate_registration& reg, std::string const& value,
                                       kv_watch_hub* hub, int priority) {
    std::string const& key = reg.key;
    // Waiting: register beside the key (candidates.hpp).
    consul::txn_op entry;
    entry.verb = "lock";
    entry.key = candidate_key(key, s.id);
    entry.value = encode_candidate(s.options.name, value, priority, next_spread_seed());
    entry.flags = candidate_flag_value;
    entry.session = s.id;
    consul::txn_op seen;
    seen.verb = "set";
    seen.key = registry_seen_key(key);
    seen.value = std::to_string(next_spread_seed());
    std::string const mk = priority_marker_key(key);
    candidate_info me{s.id, s.options.name, value, priority, 0};
    // A hub's snapshot that shows no marker: name ourselves in
    // the same transaction (check-not-exists + lock), one request
    // for both; a marker written since fails it, and the
    // registration goes again the usual way. Else the same
    // transaction reads the marker back: a get-tree of its own
    // key, which (unlike Consul's `get`) does not fail the
    // transaction when there is no marker.
    auto const snapshot = hub ? hub->peek(mk) : std::nullopt;
    bool named_in_txn = snapshot && !*snapshot;
    reg.active = true;
    std::optional<consul::txn_result> t;
    for (;;) {
        std::vector<consul::txn_op> ops;
        ops.reserve(4);
        ops.push_back(entry);
        if (named_in_txn) {
            append_naming_ops(ops, key, 0, me, true);
        } else {
            consul::txn_op& marker = ops.emplace_back();
            marker.verb = "get-tree";
            marker.key = mk;
        }
        ops.push_back(seen);
        t.reset();
        try {
            t = co_await coro(s.client).txn(std::move(ops));
        } catch (system_error const& ex) {
            if (is_abort(ex)) throw;
        }
        if (!named_in_txn || (t && t->committed) || !t) break;
        named_in_txn = false;
    }
    bool const registered =
        t && t->committed && !t->results.empty() && t->results.front().key == candidate_key(key, s.id);
    if (registered) {
        reg.since = t->results.front().create_index;
        reg.modify_index = t->results.front().modify_index;
    }
    if (registered && !named_in_txn) {
        me.since = reg.since;
        // Ranked before the best candidate the marker names (or none
        // named): name ourselves, the marker locked by our session
        // (append_naming_ops; a lost race is looked at again).
        auto const m = std::find_if(t->results.begin(), t->results.end(),
                                    [&](consul::kv_pair const& p) { return p.key == mk; });
        std::optional<priority_marker> known;
        std::uint64_t at = 0;
        if (m != t->results.end()) {
            known = decode_priority_marker(m->value);
            at = m->modify_index;
        }
        bool locked = true;
        for (int attempt = 0; attempt < 3 && takes_marker(known, priority); ++attempt) {
            try {
                std::vector<consul::txn_op> mops;
                append_naming_ops(mops, key, at, me, locked);
                auto named = co_await coro(s.client).txn(std::move(mops));
                if (named.committed) break;
                if (refused_for_lock_delay(named)) {
                    locked = false;  // see append_naming_ops
                    continue;
                }
                std::string marker_key = mk;  // named: see read_registry
                auto again = co_await coro(s.client).kv_get(std::move(marker_key), consistent_read());
                known = again.value ? decode_priority_marker(again.value->value) : std::nullopt;
                at = again.value ? again.value->modify_index : 0;
            } catch (system_error const& ex) {
                if (is_abort(ex)) throw;
                break;
            }
        }
        // The one named was named at `at`, the marker's ModifyIndex, and
        // registered before that.
        if (known && !takes_marker(known, priority)) reg.remember_named(*known, priority, at);
    }
}

// Reads the marker, for a candidate that is not named in it (or cannot tell
// from the snapshot): who it names, and whether that one still waits.
struct ranking {
    std::optional<priority_marker> top;  // what the marker says
    std::string defer_to;                // the live candidate named, ranked before us
    std::uint64_t defer_index = 0;       // of the read that showed it waiting
    bool read_all = false;               // nobody live named, and someone may rank before us
};
asio::awaitable<void> read_ranking(consul_session& s, std::string const& key, int priority, ranking& out) {
    try {
        std::string mk = priority_marker_key(key);
        auto m = co_await coro(s.client).kv_get(std::move(mk), consistent_read());
        if (m.value) out.top = decode_priority_marker(m.value->value);
        if (out.top && out.top->first != s.id && out.top->priority >= priority) {
            std::optional<std::uint64_t> named_waits;
            if (!out.top->first.empty()) named_waits = co_await waits_as_candidate(s.client, key, out.top->first);
            if (named_waits) {
                out.defer_to = out.top->first;
                out.defer_index = *named_waits;
            } else {
                out.read_all = true;
            }
        }
    } catch (system_error const& ex) {
        if (is_abort(ex)) throw;
    }
}

// The guard the hub's snapshot of the marker gives this candidate's lock:
// a check that the marker names us (`rk.top` then says so). Without a
// snapshot, the same guard sent without knowing (`speculative`).
std::optional<consul::txn_op> guard_from_snapshot(kv_watch_hub* hub, std::string const& key, std::string const& id,
                                                  int priority, ranking& rk, bool& speculative) {
    std::string mk = priority_marker_key(key);
    auto const s = hub ? hub->peek(mk) : std::nullopt;
    std::optional<consul::txn_op> guard;
    if (!s) {
        speculative = true;
        return named_in_marker(key, id);
    }
    consul::kv_pair const* marker = *s;
    if (!marker) return guard;
    auto m = decode_priority_marker(marker->value);
    if (marker->session == id) {
        guard = named_in_marker(key, id);
    } else if (marker->session.empty() && m && m->first == id) {
        // Named with a plain compare-and-set: guarded by its index.
        guard.emplace();
        guard->verb = "check-index";
        guard->key = std::move(mk);
        guard->index = marker->modify_index;
    }
    if (guard) rk.top = priority_marker{priority, id};
    return guard;
}

// A candidate ranked after another defers until `deadline` (the old holder's
// lock-delay plus the grace): a stuck candidate (SIGKILLed, its session alive
// for up to 2 x TTL) delays the others by the grace, not by its TTL.
struct deferral {
    bool named_left = false;        // the one named stopped waiting: look at the key again
    std::optional<key_view> taken;  // the key, held again, as the registry's read saw it
};
asio::awaitable<deferral> defer(consul_session& s, candidate_registration& reg, std::string const& value,
                                int priority, std::string const& defer_to, std::uint64_t defer_index,
                                clock::time_point deadline) {
    std::string const& key = reg.key;
    auto const left = [&] { return std::max<clock::duration>(deadline - clock::now(), 1ms); };
    deferral out;
    if (!defer_to.empty()) {
        // The one named goes. Wait until it stops waiting: its entry
        // goes with its winning lock transaction, or with its session.
        // Then look at the key again.
        while (clock::now() < deadline) {
            std::optional<std::uint64_t> still;
            try {
                still = co_await waits_as_candidate(s.client, key, defer_to, defer_index, left());
            } catch (system_error const& ex) {
                if (is_abort(ex)) throw;
                break;
            }
            // Gone, or written again past the index we knew it by: it gave
            // up and registered anew, and the marker may have moved (to us,
            // when we deferred on a remembered naming). Look again.
            if (!still || (defer_index != 0 && *still > defer_index)) {
                out.named_left = true;
                break;
            }
            defer_index = consul::next_wait_index(defer_index, *still);
        }
        co_return out;
    }
    // The marker names nobody live: find the best from the
    // registry, woken by any change of the key or the registry.
    // The winner names the next best (name_next), so this costs
    // each waiter a registry read only after such a gap.
    reg.name_next = true;
    candidate_info const me{s.id, s.options.name, value, priority, reg.since};
    std::uint64_t rindex = 0;
    for (;;) {
        std::optional<registry_view> v;
        try {
            v = co_await read_registry(s.client, key, true, rindex, left());
        } catch (system_error const& ex) {
            if (is_abort(ex)) throw;
        }
        if (!v) break;
        if (v->lock && !v->lock->session.empty()) {
            out.taken = key_view{std::move(v->lock), v->index};
            break;
        }
        if (!v->stale.empty()) co_await prune_stale(s.client, v->stale);
        auto const best = best_other_than(v->live, s.id);
        if (!best || !ranks_before(*best, me) || clock::now() >= deadline) break;
        rindex = consul::next_wait_index(rindex, v->index);
    }
    co_return out;
}

}  // namespace

namespace {

// What the first look leaves the candidate loop: the key as it saw it, to
// go on from with no read (nullopt: read it), and where a read of it starts.
struct first_look {
    std::optional<key_view> seen;
    std::uint64_t index = 0;
    std::optional<kv_watch_hub::known_state> known;  // nullopt: any state answers
};

// The candidate loop, once the first look found the key taken (or the first
// try lost): registers beside the key, defers to the one the marker names,
// blocks on the key and races when it clears. (`first` lives in the
// caller's frame, which awaits this at once.)
asio::awaitable<std::shared_ptr<scope_state>> contend(std::shared_ptr<consul_session> self, std::string key,
                                                      std::string value, bool once, std::shared_ptr<kv_watch_hub> hub,
                                                      election_options const& eopts, first_look& first) {
    consul_session& s = *self;
    bool const quick_retake = eopts.quick_retake;
    std::uint64_t index = first.index;
    std::optional<kv_watch_hub::known_state> known = std::move(first.known);
    acquire_backoff backoff;
    std::optional<herd_member> in_herd;  // from seeing the key freed to the end of the attempt
    std::string last_holder;
    clock::duration holder_delay = s.options.lock_delay;
    clock::duration error_retry = 20ms;
    consul::txn_op const lock_op = lock_op_for(s, key, value);

    candidate_registration reg(self, key);
    bool const note_targets = !hub && eopts.handoff_on_release && !quick_retake;
    reg.note_target = note_targets;
    std::optional<clock::time_point> free_since;  // when this waiting candidate saw the key free
    clock::duration const grace =
        std::max<clock::duration>(clock::duration::zero(), std::chrono::duration_cast<clock::duration>(eopts.priority_grace));

    auto acquired = [&](consul::kv_pair const& held) {
        reg.won = true;
        return s.won(key, value, hub, eopts, held);
    };

    // The key as the first look, a deferral or a refused try saw it: no read needed.
    std::optional<key_view> seen_taken = std::move(first.seen);
    bool read_marker = false;  // the marker failed as a guard, or told nothing: read it
    // A freed key whose lock-delay spread waits for the marker's read (see
    // `speculative` below): when it was seen freed, and how many of this
    // process saw it first.
    std::optional<clock::time_point> freed_unsettled;
    clock::duration behind_unsettled{};
    for (;;) {
        std::optional<key_view> r;
        bool transient = false;
        try {
            if (seen_taken)
                r = std::exchange(seen_taken, std::nullopt);
            else
                r = co_await read_key(s.client, hub.get(), key, index, known);
        } catch (system_error const& ex) {
            if (is_abort(ex)) throw;
            transient = true;
        }
        if (transient) {
            co_await pause_and_grow(error_retry);
            index = 0;
            known.reset();
            continue;
        }
        error_retry = 20ms;
        auto const& pair = r->pair;
        if (pair && pair->flags != consul::lock_flag_value) throw system_error(make_error_code(error::lock_conflict));

        // Handed to this waiting candidate (a transfer, a handoff on release).
        // The handover's transaction took our entry out with it: when the
        // hub's snapshot (as new as this answer) shows it gone, there is
        // nothing left to remove and the one who handed over named the next.
        if (pair && pair->session == s.id && reg.active) {
            if (hub) {
                auto const entry = hub->peek(candidate_key(key, s.id));
                if (entry && !*entry) reg.active = false;
            }
            if (note_targets && reg.active) {
                reg.active = false;  // after_handover_to sees to the entry
                auto const settle = std::clamp<clock::duration>(
                    std::chrono::duration_cast<clock::duration>(eopts.monitor_delay), clock::duration::zero(), 1s);
                s.spawn_owned([self, key, at = reg.modify_index, always = reg.name_next, settle]() {
                    return after_handover_to(self, key, at, always, settle);
                });
            }
            co_return acquired(*pair);
        }

        if (pair && !pair->session.empty() && pair->session != s.id) {
            free_since.reset();
            if (!once && !reg.active) co_await register_waiting(*self, reg, value, hub.get(), eopts.priority);
            // The one we knew named holds it: it named another on winning.
            if (reg.named_seen && reg.named_seen->first == pair->session) reg.named_seen.reset();
            // Held by another candidate: learn its LockDelay once, then block.
            if (pair->session != last_holder) {
                last_holder = pair->session;
                holder_delay = co_await s.holder_lock_delay(last_holder);
            }
            backoff.held();
            in_herd.reset();
            read_marker = false;
            freed_unsettled.reset();
            if (once) co_return nullptr;
            index = hub ? r->index : consul::next_wait_index(index, r->index);
            known = known_of(pair);
            continue;
        }
        clock::duration behind = clock::duration::zero();
        std::optional<clock::time_point> freed_at;  // we saw it held and now free: a lock-delay may have started
        if (!last_holder.empty()) {
            in_herd.emplace(key);
            behind = in_herd->before() * spread_per_candidate;
            freed_at = clock::now();
            last_holder.clear();
        } else if (freed_unsettled) {
            freed_at = std::exchange(freed_unsettled, std::nullopt);
            behind = behind_unsettled;
        }

        // A freed key (an invalidation, or a release that found nobody
        // waiting): the best waiting candidate goes first. The marker names
        // it (candidates.hpp), locked by its session: this candidate's lock
        // is guarded by a check-session of the marker for itself, so the one
        // named goes at once with no read. Without a hub, every waiter sends
        // that guarded lock (`speculative`): only the one named gets
        // through, and the others read the marker (one small read, and one
        // more to see that the one named still waits). A hub's snapshot shows
        // who the marker names, and only that one tries.
        ranking rk;  // who the marker names
        std::optional<consul::txn_op> marker_guard;
        bool speculative = false;  // guarded by the marker without knowing whether it names us
        bool remembered = false;   // deferring to the one we last read named, with no read now
        if (reg.active && !once && grace > clock::duration::zero() && !std::exchange(read_marker, false)) {
            marker_guard = guard_from_snapshot(hub.get(), key, s.id, eopts.priority, rk, speculative);
            if (speculative && reg.named_seen) {
                // No snapshot, but our last read of the marker named another
                // that has not been seen to stop waiting: defer to it instead
                // of a try its guard refuses. Its entry is blocked on from
                // the index we knew it by, and from before the one that
                // showed the key free: an entry unchanged since parks the
                // read until the named one's lock removes it; a missing entry
                // (the table's index is at least the key's) or one written
                // again (it gave up and waits anew: the marker may have
                // moved) answers at once, and we look again.
                marker_guard.reset();
                speculative = false;
                rk.top = reg.named_seen;
                rk.defer_to = reg.named_seen->first;
                rk.defer_index = std::min(reg.named_seen_at, r->index > 1 ? r->index - 1 : 0);
                remembered = true;
            }
        }
        if (reg.active && !once && grace > clock::duration::zero() && !marker_guard && !remembered) {
            co_await read_ranking(*self, key, eopts.priority, rk);
            // Remembered only while the one named waits, as of its entry's read.
            reg.remember_named(rk.defer_to.empty() ? std::nullopt : rk.top, eopts.priority, rk.defer_index);
        }
        bool const named = rk.top && rk.top->first == s.id;
        if (freed_at && speculative) {
            // Whether we are named decides the spread: settled by the try,
            // or by the marker's read after it.
            freed_unsettled = freed_at;
            behind_unsettled = behind;
        } else if (freed_at) {
            // Retries after the lock-delay are spread by the same order; the
            // one named retries at its end, starting a little before it (the
            // only candidate that does: the others defer to it).
            backoff.spread_retries(named ? clock::duration::zero() : std::min<clock::duration>(max_retry_spread, behind),
                                   next_spread_seed());
            backoff.lead_retries(named ? max_named_lead : clock::duration::zero());
            backoff.freed(*freed_at, holder_delay);
        }
        if (!rk.defer_to.empty() || rk.read_all) {
            // We defer for the grace (after the old holder's lock-delay), then
            // try: a stuck candidate (SIGKILLed, its session alive for up to
            // 2 x TTL) delays the others by the grace, not by its TTL.
            if (!free_since) free_since = clock::now();
            auto d = co_await defer(*self, reg, value, eopts.priority, rk.defer_to, rk.defer_index,
                                    *free_since + holder_delay + grace);
            if (d.named_left) {
                reg.named_seen.reset();  // it won, or gave up, and named another (or waits anew)
                index = 0;
                known.reset();
                continue;
            }
            if (d.taken) {
                if (d.taken->pair->session == s.id) co_return acquired(*d.taken->pair);
                // Held again: back to waiting on it, from what we saw.
                seen_taken = std::move(d.taken);
                continue;
            }
        }
        // Racing for it: those of this process who saw it free first try
        // first. The one the marker names goes at once.
        if (behind > clock::duration::zero() && !named && !speculative)
            co_await sleep_until(clock::now() + random_up_to(std::min<clock::duration>(max_first_try_spread, behind)));

        std::vector<consul::txn_op> ops;
        if (marker_guard) ops.push_back(std::move(*marker_guard));
        ops.push_back(lock_op);
        for (auto& op : reg.ops_with_lock()) ops.push_back(std::move(op));
        auto attempt = co_await try_lock(s.client, std::move(ops), key, s.id);
        auto const outcome = attempt.outcome;
        if (auto const* held = attempt.held()) {
            reg.removed_by_lock(attempt.results);
            co_return acquired(*held);
        }
        if (attempt.guard_failed) {
            // Not named (or the marker moved after the snapshot): the one
            // named may hold the key by now. Look again, reading the marker
            // if it is still free.
            read_marker = true;
            index = 0;
            known.reset();
            continue;
        }
        if (speculative && outcome == lock_outcome::lock_delay) {
            // Refused before the guard was looked at: read the marker, then
            // wait out the lock-delay as the one named or defer to it. The
            // key is as we saw it.
            read_marker = true;
            seen_taken = std::move(r);
            continue;
        }
        if (outcome == lock_outcome::held) {
            in_herd.reset();
            if (once) co_return nullptr;
            // Lost the race: wait until the snapshot shows the winner.
            index = hub ? r->index : 0;
            known = hub ? known_of(pair) : std::nullopt;
            continue;
        }
        if (outcome == lock_outcome::lock_delay) {
            if (once) co_return nullptr;
            if (auto held = co_await retake_after_lock_delay(s.client, s.id, lock_op, pair, backoff, s.options.lock_delay))
                co_return acquired(*held);
            in_herd.reset();
            index = 0;
            known.reset();
            continue;
        }
        // Transport error, an odd answer, or a session the server no longer
        // knows (the session's own loss ends this loop then).
        co_await pause_and_grow(error_retry);
        index = 0;
        known.reset();
    }
}

}  // namespace

std::shared_ptr<scope_state> consul_session::won(std::string const& key, std::string const& value,
                                                 std::shared_ptr<kv_watch_hub> const& hub,
                                                 election_options const& eopts, consul::kv_pair const& held) {
    auto self = std::static_pointer_cast<consul_session>(shared_from_this());
    auto st = std::make_shared<consul_lock_scope>(self, key, value, client, hub);
    st->token = held.lock_index;
    st->modify_index = held.modify_index;
    st->quick_retake = eopts.quick_retake;
    st->priority = eopts.priority;
    st->handoff_on_release = eopts.handoff_on_release;
    st->yield_to_higher = eopts.yield_to_higher;
    st->yield_settle = std::max<clock::duration>(clock::duration::zero(),
                                                 std::chrono::duration_cast<clock::duration>(eopts.yield_settle));
    st->accept_transfer_requests = eopts.accept_transfer_requests;
    // Negative: at once; beyond a year: a year (keeps now + delay finite).
    st->monitor_delay = std::clamp<clock::duration>(std::chrono::duration_cast<clock::duration>(eopts.monitor_delay),
                                                    clock::duration::zero(), std::chrono::hours{24 * 366});
    adopt(st);
    if (st->yield_to_higher || st->accept_transfer_requests)
        spawn_owned([st]() { return st->watch_candidates(); }, st->watch_cancel.slot());
    return st;
}

// The first look, in a frame of its own that holds none of the candidate
// loop's state (contend): a key nobody holds is taken with one read and one
// lock transaction, which is every acquire that meets no contention.
asio::awaitable<std::shared_ptr<scope_state>> consul_session::acquire_with(std::string key, std::string value,
                                                                            bool once,
                                                                            std::shared_ptr<kv_watch_hub> hub,
                                                                            election_options const& eopts) {
    // Retake: this session released the key cleanly and, if nobody has
    // touched it since (check-index), it is still a free lock key: take it
    // with no read first. Any other answer falls back to the loop.
    // The release notes the index only when nobody waited for the key (its
    // guarded unlock, with handoff_on_release), or with quick_retake, which
    // opts into beating the followers a release woke (no rotation).
    if (auto const at = take_note(released_at, key))
        if (auto st = co_await retake(*this, key, value, hub, eopts, *at)) co_return st;

    first_look look;
    try {
        look.seen = co_await read_key(client, hub.get(), key, 0, std::nullopt);
    } catch (system_error const& ex) {
        if (is_abort(ex)) throw;  // else the loop reads again
    }
    consul::kv_pair const* pair = look.seen && look.seen->pair ? &*look.seen->pair : nullptr;
    bool const free = look.seen && (!pair || (pair->flags == consul::lock_flag_value &&
                                              (pair->session.empty() || pair->session == id)));
    if (free) {
        auto attempt = co_await try_lock(client, lock_alone(*this, key, value), key, id);
        if (auto const* held = attempt.held()) co_return won(key, value, hub, eopts, *held);
        if (once && (attempt.outcome == lock_outcome::held || attempt.outcome == lock_outcome::lock_delay))
            co_return nullptr;
        if (attempt.outcome == lock_outcome::held && hub) {
            // Lost the race: wait until the snapshot shows the winner.
            look.index = look.seen->index;
            look.known = known_of(look.seen->pair);
        }
        // Else the loop reads again, but for a lock-delay refusal: it goes on
        // from the key as it was (its own try is refused as well, and it
        // then retries when the delay ends, guarded by what it saw).
        if (attempt.outcome != lock_outcome::lock_delay) look.seen.reset();
    }
    auto self = std::static_pointer_cast<consul_session>(shared_from_this());
    co_return co_await contend(std::move(self), std::move(key), std::move(value), once, std::move(hub), eopts, look);
}

// transfer_to, a yield, an operator request: one transaction that checks the
// target still waits, unlocks the key for us and locks it for the target.
asio::awaitable<std::uint64_t> consul_lock_scope::transfer(std::string target, boost::system::error_code reason) {
    auto self = shared_from_this();
    auto ex = co_await asio::this_coro::executor;
    for (int attempt = 1;; ++attempt) {
        auto reg = co_await read_registry(client, key, false);
        if (status != scope_status::held) throw system_error(make_error_code(error::not_held));
        auto const c = find_candidate(reg.live, target, session->id);
        if (!c) throw system_error(make_error_code(error::no_such_candidate));
        transfer_target = c->session;
        transfer_reason = reason;
        // Sent, the transaction is not withdrawn (it may commit anyway): its
        // answer decides how the scope ends.
        auto out = co_await asio::co_spawn(ex, transfer_txn(client, key, session->id, value, *c, reg.marker, &reg.live),
                                           asio::bind_cancellation_slot(asio::cancellation_slot(), asio::use_awaitable));
        if (out.held) {
            lose(reason);
            co_return out.held->lock_index;
        }
        transfer_target.clear();
        transfer_reason.clear();
        if (out.holder_lost) throw system_error(make_error_code(error::not_held));  // the monitor reports the loss
        // The target stopped waiting meanwhile; else the marker moved since
        // the read (a registration named itself): read again.
        if (out.target_gone || attempt == 3) throw system_error(make_error_code(error::no_such_candidate));
    }
}

// While held: one blocking query on `<key>` (recursive), which shows the key,
// its registry and the transfer request. A request hands over to its target
// (or the best candidate); with yield_to_higher, a candidate of higher
// priority that has waited yield_settle without a break gets the key.
asio::awaitable<void> consul_lock_scope::watch_candidates() {
    auto self = shared_from_this();
    std::uint64_t index = 0;
    clock::duration retry = 20ms;
    std::string settling;  // the higher candidate we are waiting out, by session and entry
    std::uint64_t settling_since = 0;
    clock::time_point settling_from{};
    while (status == scope_status::held) {
        std::optional<registry_view> v;
        try {
            clock::duration wait = 30s;
            if (!settling.empty()) wait = std::max<clock::duration>(settling_from + yield_settle - clock::now(), 1ms);
            v = co_await read_registry(client, key, true, index, wait);
            retry = 20ms;
        } catch (system_error const& e) {
            if (is_abort(e) || status != scope_status::held) co_return;
        }
        if (status != scope_status::held) co_return;
        if (!v) {
            co_await pause_and_grow(retry);
            index = 0;
            continue;
        }
        index = consul::next_wait_index(index, v->index);
        std::optional<candidate_info> best;
        for (auto const& c : v->live)
            if (c.session != session->id) {
                best = c;
                break;
            }
        if (accept_transfer_requests && v->request) {
            std::string const to = decode_transfer_request(v->request->value);
            try {
                co_await coro(client).kv_delete(v->request->key, v->request->modify_index);  // consumed
                std::optional<candidate_info> target = best;
                if (!to.empty()) target = find_candidate(v->live, to, session->id);
                if (target) {
                    co_await transfer(target->session, make_error_code(error::transferred));
                    co_return;
                }
            } catch (system_error const& e) {
                if (is_abort(e) || status != scope_status::held) co_return;
            }
            continue;
        }
        if (!yield_to_higher) continue;
        if (!best || best->priority <= priority) {
            settling.clear();
            continue;
        }
        if (settling != best->session || settling_since != best->since) {
            settling = best->session;
            settling_since = best->since;
            settling_from = clock::now();
        }
        if (clock::now() < settling_from + yield_settle) continue;
        try {
            co_await transfer(best->session, make_error_code(error::yielded));
            co_return;
        } catch (system_error const& e) {
            if (is_abort(e) || status != scope_status::held) co_return;
        }
        settling.clear();
    }
}

asio::awaitable<std::shared_ptr<scope_state>> consul_session::acquire(claim c) {
    if (c.kind == claim_kind::slot) return acquire_permit(std::move(c.key), c.limit, std::move(c.value), c.once);
    static election_options const defaults;
    return acquire_key(std::move(c.key), std::move(c.value), c.once, c.options ? *c.options : defaults);
}

asio::awaitable<claim_holders> consul_session::read(claim_kind kind, std::string key, int limit) {
    if (kind == claim_kind::slot) co_return co_await read_slots(std::move(key), limit);
    claim_holders held;
    if (auto leader = co_await read_leader(std::move(key))) held.holders.push_back(std::move(*leader));
    co_return held;
}

asio::awaitable<std::optional<leader_info>> consul_session::read_leader(std::string key) {
    auto r = co_await coro(client).kv_get(key);
    if (!r.value || r.value->session.empty()) co_return std::nullopt;
    co_return leader_info{r.value->value.value_or(""), r.value->session, r.value->lock_index, r.value->modify_index};
}

asio::awaitable<std::shared_ptr<scope_state>> consul_session::acquire_key(std::string key, std::string value,
                                                                           bool once,
                                                                           election_options const& options) {
    auto const& prefix = options.shared_watch;
    std::shared_ptr<kv_watch_hub> hub;
    if (!prefix.empty() && key.starts_with(prefix)) hub = kv_watch_hub::get(client, prefix);
    return acquire_with(std::move(key), std::move(value), once, std::move(hub), options);
}

asio::awaitable<std::shared_ptr<session_impl>> create_consul_session(consul::client& client, session_options options) {
    if (options.ttl.count() < 0) throw system_error(make_error_code(std::errc::invalid_argument));
    consul::session_request req;
    req.name = options.name;
    req.ttl = options.ttl;
    req.lock_delay = options.lock_delay;
    req.behavior = options.behavior;
    req.node_checks = options.node_checks;

    std::string check_id;
    if (options.health_check_ttl) {
        // Register the application's TTL check passing, then bind it.
        check_id = unique_check_id(options.name);
        consul::check_registration reg;
        reg.id = check_id;
        reg.name = "tenure session health: " + options.name;
        reg.ttl = *options.health_check_ttl;
        reg.status = "passing";
        co_await coro(client).check_register(reg);
        std::vector<std::string> checks = options.node_checks.value_or(std::vector<std::string>{"serfHealth"});
        checks.push_back(check_id);
        req.node_checks = std::move(checks);
    }

    auto const sent = clock::now();
    std::string id = co_await coro(client).session_create(req);
    auto impl = std::make_shared<consul_session>(client, std::move(options), std::move(id), sent);
    impl->check_id = std::move(check_id);
    impl->start();
    co_return impl;
}

}  // namespace tenure::detail
