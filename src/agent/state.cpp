#include "agent/state.hpp"
#include <tenure/detail/random.hpp>
#include "net/duration.hpp"

#include <boost/uuid/random_generator.hpp>
#include <boost/uuid/uuid_io.hpp>

#include <algorithm>
#include <set>

namespace tenure::detail::agent {

std::string_view to_string(invalidation_cause c) {
    switch (c) {
    case invalidation_cause::destroyed: return "destroyed";
    case invalidation_cause::ttl_expired: return "ttl-expired";
    case invalidation_cause::check_critical: return "check-critical";
    case invalidation_cause::check_deregistered: return "check-deregistered";
    case invalidation_cause::node_deregistered: return "node-deregistered";
    }
    return "unknown";
}

std::vector<std::string> session_entry::check_ids() const {
    std::vector<std::string> ids = checks;
    ids.insert(ids.end(), node_checks.begin(), node_checks.end());
    for (auto const& sc : service_checks) ids.push_back(sc.id);
    return ids;
}

// ---------------------------------------------------------------------------
// Watches: blocking queries park here. Writes wake exactly the watchers of the
// keys, prefixes or tables they touch.

struct watch_hub {
    // A watcher's id grows with each one parked, and each list is ordered by
    // id: a write wakes its watchers in the order they parked, the longest
    // waiting first (a hash set's order would be arbitrary). One thread
    // answers them one after another, so the order is what a woken client
    // waits for.
    using id_list = std::set<std::uint64_t>;
    struct watcher {
        std::vector<watch_target> targets;
        std::function<void()> callback;
    };
    std::uint64_t next_id = 1;
    std::uint64_t fired = 0;  // watchers woken, ever
    std::unordered_map<std::uint64_t, watcher> watchers;
    std::unordered_map<std::string, id_list> by_key;
    std::map<std::string, id_list, std::less<>> by_prefix;
    id_list by_table[4];  // sessions, checks, nodes, renewals

    id_list* list_for(watch_target const& t, bool create) {
        switch (t.what) {
        case watch_target::kind::key: {
            if (create) return &by_key[t.name];
            auto it = by_key.find(t.name);
            return it == by_key.end() ? nullptr : &it->second;
        }
        case watch_target::kind::prefix: {
            if (create) return &by_prefix[t.name];
            auto it = by_prefix.find(t.name);
            return it == by_prefix.end() ? nullptr : &it->second;
        }
        case watch_target::kind::sessions: return &by_table[0];
        case watch_target::kind::checks: return &by_table[1];
        case watch_target::kind::nodes: return &by_table[2];
        case watch_target::kind::renewals: return &by_table[3];
        }
        return nullptr;
    }

    void drop_index(std::uint64_t id, watch_target const& t) {
        auto* list = list_for(t, false);
        if (!list) return;
        list->erase(id);
        if (list->empty()) {
            if (t.what == watch_target::kind::key) by_key.erase(t.name);
            else if (t.what == watch_target::kind::prefix) by_prefix.erase(t.name);
        }
    }

    std::uint64_t add(std::vector<watch_target> targets, std::function<void()> cb) {
        std::uint64_t id = next_id++;
        for (auto const& t : targets) list_for(t, true)->insert(id);
        watchers.emplace(id, watcher{std::move(targets), std::move(cb)});
        return id;
    }

    void remove(std::uint64_t id) {
        auto it = watchers.find(id);
        if (it == watchers.end()) return;
        for (auto const& t : it->second.targets) drop_index(id, t);
        watchers.erase(it);
    }

    // Fires (and unregisters) every watcher in `ids`.
    void fire(id_list ids) {
        for (auto id : ids) {
            auto it = watchers.find(id);
            if (it == watchers.end()) continue;
            auto cb = std::move(it->second.callback);
            for (auto const& t : it->second.targets) drop_index(id, t);
            watchers.erase(it);
            ++fired;
            if (cb) cb();
        }
    }

    void fire_list(id_list* list) {
        if (!list || list->empty()) return;
        fire(*list);  // copy: fire() edits the lists
    }
};

state_machine::watch_registration::watch_registration(watch_registration&& o) noexcept
    : hub_(std::move(o.hub_)), id_(std::exchange(o.id_, 0)) {}

state_machine::watch_registration& state_machine::watch_registration::operator=(watch_registration&& o) noexcept {
    if (this != &o) {
        reset();
        hub_ = std::move(o.hub_);
        id_ = std::exchange(o.id_, 0);
    }
    return *this;
}

state_machine::watch_registration::~watch_registration() { reset(); }

void state_machine::watch_registration::reset() {
    if (id_ == 0) return;
    if (auto hub = hub_.lock()) hub->remove(id_);
    id_ = 0;
    hub_.reset();
}

state_machine::watch_registration state_machine::watch(std::vector<watch_target> targets,
                                                       std::function<void()> callback) {
    watch_registration reg;
    reg.hub_ = hub_;
    reg.id_ = hub_->add(std::move(targets), std::move(callback));
    return reg;
}

std::size_t state_machine::watcher_count() const noexcept { return hub_->watchers.size(); }
std::uint64_t state_machine::wakeups() const noexcept { return hub_->fired; }
std::uint64_t state_machine::handovers() const noexcept { return handovers_; }

// ---------------------------------------------------------------------------
// Transactions: an undo log of every key touched, restored on failure.

struct state_machine::txn_undo {
    struct saved {
        std::optional<kv_entry> entry;
        std::optional<tombstone> grave;
    };
    std::map<std::string, saved, std::less<>> keys;
    std::vector<std::string> touched;  // keys to notify on commit
    struct term_event {
        bool began = false;
        lock_term term;  // began: the new term; else key and end
    };
    std::vector<term_event> terms;  // lock history events to record on commit
    // Holds of a lock this txn ended and began: both means it handed a
    // lock from one session to another (counted even with no history kept).
    int terms_ended = 0;
    int terms_began = 0;
    std::uint64_t kvs_index, tombstones_index;

    void remember(state_machine const& sm, std::string_view key) {
        if (keys.count(key)) return;
        saved s;
        if (auto it = sm.kvs_.find(key); it != sm.kvs_.end()) s.entry = it->second;
        if (auto it = sm.tombstones_.find(key); it != sm.tombstones_.end()) s.grave = it->second;
        keys.emplace(std::string(key), std::move(s));
    }
};

void state_machine::notify_key(std::string_view key) {
    if (undo_) {  // inside a txn: wake watchers only once it commits
        undo_->touched.emplace_back(key);
        return;
    }
    if (auto it = hub_->by_key.find(std::string(key)); it != hub_->by_key.end()) hub_->fire_list(&it->second);
    if (hub_->by_prefix.empty()) return;
    for (std::size_t len = 0; len <= key.size(); ++len) {
        auto it = hub_->by_prefix.find(key.substr(0, len));
        if (it != hub_->by_prefix.end()) hub_->fire_list(&it->second);
    }
}

void state_machine::notify_table(watch_target::kind k) {
    watch_target t{k, {}};
    hub_->fire_list(hub_->list_for(t, false));
}

// ---------------------------------------------------------------------------

void state_machine::term_began(kv_entry const& e, std::uint64_t idx) {
    if (undo_) ++undo_->terms_began;
    if (history_.capacity() == 0) return;
    lock_term t;
    t.key = e.key;
    t.session = e.session;
    if (auto it = sessions_.find(e.session); it != sessions_.end()) {
        t.name = it->second.name;
        t.node = it->second.node;
    }
    t.lock_index = e.lock_index;
    t.acquire_index = idx;
    t.acquired = event_now_;
    if (undo_) undo_->terms.push_back({true, std::move(t)});
    else history_.begin(std::move(t));
}

void state_machine::term_ended(std::string_view key, std::string_view how) {
    if (undo_) ++undo_->terms_ended;
    if (history_.capacity() == 0) return;
    std::optional<time_point> delay;
    if (ending_) {
        how = ending_->how;
        delay = ending_->lock_delay_until;
    }
    if (undo_) {
        lock_term t;
        t.key = key;
        t.end = how;
        undo_->terms.push_back({false, std::move(t)});
        return;
    }
    history_.end(key, how, event_now_, delay);
}

state_machine::state_machine(agent_config config, time_point now)
    : config_(std::move(config)), hub_(std::make_shared<watch_hub>()), history_(config_.history_capacity) {
    std::uint64_t seed = config_.seed;
    if (seed == 0) seed = tenure::detail::random_seed();
    rng_.seed(seed);

    // The agent registers its own node with a passing serfHealth check, so
    // sessions created with the default checks validate (checklist §12).
    node_entry self;
    self.id = config_.node_id.empty() ? generate_uuid() : config_.node_id;
    self.node = config_.node_name;
    self.address = config_.address;
    self.datacenter = config_.datacenter;
    health_check serf;
    serf.check_id = std::string(serf_check_id);
    serf.name = "Serf Health Status";
    serf.status = std::string(check_passing);
    serf.output = "Agent alive and reachable";
    auto r = catalog_register(std::move(self), {std::move(serf)}, now);
    (void)r;
}

state_machine::~state_machine() = default;

std::string state_machine::generate_uuid() {
    boost::uuids::basic_random_generator<std::mt19937_64> gen(rng_);
    return boost::uuids::to_string(gen());
}

nanoseconds state_machine::random_stagger(nanoseconds bound) {
    if (bound.count() <= 0) return nanoseconds{0};
    std::uniform_int_distribution<std::int64_t> dist(0, bound.count() - 1);
    return nanoseconds{dist(rng_)};
}

// ---- time -----------------------------------------------------------------

std::optional<time_point> state_machine::next_deadline() const {
    std::optional<time_point> best;
    auto consider = [&](time_point t) {
        if (!best || t < *best) best = t;
    };
    if (!session_timers_.empty()) consider(session_timers_.begin()->first);
    if (!check_timers_.empty()) consider(std::get<0>(*check_timers_.begin()));
    if (!delay_timers_.empty()) consider(delay_timers_.begin()->first);
    return best;
}

void state_machine::advance(time_point now) {
    while (!session_timers_.empty() && session_timers_.begin()->first <= now) {
        std::string id = session_timers_.begin()->second;
        invalidate_session(id, invalidation_cause::ttl_expired, now);
    }
    while (!check_timers_.empty() && std::get<0>(*check_timers_.begin()) <= now) {
        auto [when, node, id] = *check_timers_.begin();
        check_timers_.erase(check_timers_.begin());
        auto nit = checks_.find(node);
        if (nit == checks_.end()) continue;
        auto cit = nit->second.find(id);
        if (cit == nit->second.end()) continue;
        cit->second.ttl_deadline.reset();
        set_check_status(cit->second, check_critical, "TTL expired", now);
    }
    // Forget lock-delays that have ended (they are only ever compared with now).
    while (!delay_timers_.empty() && delay_timers_.begin()->first <= now) {
        auto [when, key] = *delay_timers_.begin();
        delay_timers_.erase(delay_timers_.begin());
        if (auto it = lock_delays_.find(key); it != lock_delays_.end() && it->second <= now) lock_delays_.erase(it);
    }
}

void state_machine::reset_session_timer(session_entry const& s, time_point now) {
    if (auto it = session_deadline_.find(s.id); it != session_deadline_.end()) {
        session_timers_.erase({it->second, s.id});
        session_deadline_.erase(it);
    }
    if (s.ttl_duration.count() <= 0) return;
    time_point deadline = now + s.ttl_duration * session_ttl_multiplier;
    session_timers_.emplace(deadline, s.id);
    session_deadline_[s.id] = deadline;
}

void state_machine::reset_check_timer(health_check& check, time_point now) {
    if (check.ttl_deadline) check_timers_.erase({*check.ttl_deadline, check.node, check.check_id});
    check.ttl_deadline.reset();
    if (check.type != "ttl" || check.ttl.count() <= 0) return;
    check.ttl_deadline = now + check.ttl;
    check_timers_.emplace(*check.ttl_deadline, check.node, check.check_id);
}

// ---- sessions -----------------------------------------------------------------

result<std::string> state_machine::session_create(session_create_request const& req, time_point now) {
    session_entry s;
    s.name = req.name.value_or("");
    s.node = req.node.value_or(config_.node_name);
    if (s.node.empty()) return state_error{"Must provide Node"};

    std::string behavior = req.behavior.value_or("");
    if (behavior.empty() || behavior == "release") s.behavior = session_behavior::release;
    else if (behavior == "delete") s.behavior = session_behavior::delete_keys;
    else return state_error{"Invalid Behavior setting '" + behavior + "'"};

    s.ttl = req.ttl.value_or("");
    if (!s.ttl.empty()) {
        auto parsed = parse_go_duration(s.ttl);
        if (!parsed.value) return state_error{"Session TTL '" + s.ttl + "' invalid: " + parsed.error};
        s.ttl_duration = *parsed.value;
        if (s.ttl_duration.count() != 0 &&
            (s.ttl_duration < config_.session_ttl_min || s.ttl_duration > session_ttl_max)) {
            return state_error{"Invalid Session TTL '" + std::to_string(s.ttl_duration.count()) +
                               "', must be between [" + format_go_duration(config_.session_ttl_min) + "=" +
                               format_go_duration(session_ttl_max) + "]"};
        }
        if (s.ttl_duration.count() < 0) s.ttl_duration = nanoseconds{0};
    }
    s.lock_delay_ns = req.lock_delay_ns.value_or(15'000'000'000);

    // Consul 1.7's fix-up of the legacy Checks field (agent/session_endpoint.go).
    std::vector<std::string> checks = req.checks ? *req.checks : std::vector<std::string>{std::string(serf_check_id)};
    std::vector<std::string> node_checks =
        req.node_checks ? *req.node_checks : std::vector<std::string>{std::string(serf_check_id)};
    if (checks.empty()) node_checks.clear();
    else if (checks.size() == 1 && checks[0] == serf_check_id) checks.clear();
    else if (node_checks.empty()) checks.clear();
    s.checks = std::move(checks);
    s.node_checks = std::move(node_checks);
    if (req.service_checks) s.service_checks = *req.service_checks;

    // State-store validation.
    if (!nodes_.count(s.node)) return state_error{"apply failed: Missing node registration"};
    for (auto const& id : s.check_ids()) {
        auto const* c = check_get(s.node, id);
        if (!c) return state_error{"apply failed: Missing check '" + id + "' registration"};
        if (c->status == check_critical) return state_error{"apply failed: Check '" + id + "' is in critical state"};
    }

    do s.id = generate_uuid();
    while (sessions_.count(s.id));
    std::uint64_t idx = next_index();
    s.create_index = s.modify_index = idx;
    sessions_index_ = idx;
    reset_session_timer(s, now);
    std::string id = s.id;
    sessions_.emplace(id, std::move(s));
    touched_session(id);
    notify_table(watch_target::kind::sessions);
    return id;
}

bool state_machine::session_destroy(std::string_view id, time_point now) {
    if (!sessions_.count(id)) return false;
    invalidate_session(std::string(id), invalidation_cause::destroyed, now);
    return true;
}

std::optional<session_entry> state_machine::session_renew(std::string_view id, time_point now) {
    auto it = sessions_.find(id);
    if (it == sessions_.end()) return std::nullopt;
    reset_session_timer(it->second, now);
    ++renewals_;
    notify_table(watch_target::kind::renewals);
    return it->second;
}

std::optional<time_point> state_machine::session_renewed(std::string_view id) const {
    auto s = sessions_.find(id);
    auto d = session_deadline_.find(std::string(id));
    if (s == sessions_.end() || d == session_deadline_.end()) return std::nullopt;
    return d->second - s->second.ttl_duration * session_ttl_multiplier;
}

session_entry const* state_machine::session_get(std::string_view id) const {
    auto it = sessions_.find(id);
    return it == sessions_.end() ? nullptr : &it->second;
}

std::vector<session_entry const*> state_machine::session_list() const {
    std::vector<session_entry const*> out;
    out.reserve(sessions_.size());
    for (auto const& [id, s] : sessions_) out.push_back(&s);
    return out;
}

std::vector<session_entry const*> state_machine::session_list_node(std::string_view node) const {
    std::vector<session_entry const*> out;
    for (auto const& [id, s] : sessions_)
        if (s.node == node) out.push_back(&s);
    return out;
}

// The one invalidation path (Consul's deleteSessionTxn): destroy, TTL lapse,
// critical or deregistered checks and node deregistration all come here, so
// all of them apply lock-delay. Only ?release= is free of it.
void state_machine::invalidate_session(std::string const& id, invalidation_cause cause, time_point now) {
    auto it = sessions_.find(id);
    if (it == sessions_.end()) return;
    session_entry s = std::move(it->second);
    sessions_.erase(it);
    touched_session(id);
    if (auto d = session_deadline_.find(id); d != session_deadline_.end()) {
        session_timers_.erase({d->second, id});
        session_deadline_.erase(d);
    }
    std::uint64_t idx = next_index();
    sessions_index_ = idx;

    nanoseconds delay{std::min<std::int64_t>(s.lock_delay_ns, max_lock_delay.count())};
    std::set<std::string> held;
    if (auto k = keys_by_session_.find(id); k != keys_by_session_.end()) held = std::move(k->second);
    keys_by_session_.erase(id);
    event_now_ = now;
    std::optional<time_point> until;
    if (delay.count() > 0) until = now + delay;
    ending_ = term_ending{to_string(cause), until};
    for (auto const& key : held) {
        auto kit = kvs_.find(key);
        if (kit == kvs_.end() || kit->second.session != id) continue;
        if (s.behavior == session_behavior::release) {
            kv_entry e = kit->second;
            e.session.clear();
            kv_store(std::move(e), true, idx);
        } else {
            kv_remove(key, idx);
        }
        if (until) {
            lock_delays_[key] = *until;
            delay_timers_.emplace(*until, key);
        }
    }
    ending_.reset();
    notify_table(watch_target::kind::sessions);
    if (on_invalidate) on_invalidate(s, cause);
}

// ---- KV ---------------------------------------------------------------------

kv_entry const* state_machine::kv_get(std::string_view key) const {
    auto it = kvs_.find(key);
    return it == kvs_.end() ? nullptr : &it->second;
}

std::uint64_t state_machine::kv_key_index(std::string_view key) const {
    if (auto const* e = kv_get(key)) return e->modify_index;
    return std::max(kvs_index_, tombstones_index_);
}

std::vector<kv_entry const*> state_machine::kv_list(std::string_view prefix) const {
    std::vector<kv_entry const*> out;
    for (auto it = kvs_.lower_bound(prefix); it != kvs_.end() && it->first.starts_with(prefix); ++it)
        out.push_back(&it->second);
    return out;
}

std::uint64_t state_machine::kv_prefix_index(std::string_view prefix) const {
    std::uint64_t table = std::max(kvs_index_, tombstones_index_);
    if (prefix.empty()) return table;
    std::uint64_t idx = 0;
    for (auto it = kvs_.lower_bound(prefix); it != kvs_.end() && it->first.starts_with(prefix); ++it)
        idx = std::max(idx, it->second.modify_index);
    for (auto it = tombstones_.lower_bound(prefix); it != tombstones_.end() && it->first.starts_with(prefix); ++it)
        idx = std::max(idx, it->second.index);
    return idx != 0 ? idx : table;
}

std::vector<std::string> state_machine::kv_keys(std::string_view prefix, std::string_view separator) const {
    std::vector<std::string> out;
    for (auto it = kvs_.lower_bound(prefix); it != kvs_.end() && it->first.starts_with(prefix); ++it) {
        std::string_view key = it->first;
        if (!separator.empty()) {
            auto pos = key.find(separator, prefix.size());
            if (pos != std::string_view::npos) key = key.substr(0, pos + separator.size());
        }
        if (out.empty() || out.back() != key) out.emplace_back(key);
    }
    return out;
}

std::vector<kv_entry const*> state_machine::held_keys(std::string_view prefix) const {
    std::vector<kv_entry const*> out;
    for (auto const& [session, keys] : keys_by_session_)
        for (auto const& k : keys)
            if (k.starts_with(prefix))
                if (auto const* e = kv_get(k)) out.push_back(e);
    std::sort(out.begin(), out.end(), [](auto const* a, auto const* b) { return a->key < b->key; });
    return out;
}

std::vector<std::string> state_machine::keys_held_by(std::string_view session) const {
    auto it = keys_by_session_.find(std::string(session));
    if (it == keys_by_session_.end()) return {};
    return {it->second.begin(), it->second.end()};
}

bool state_machine::kv_store(kv_entry e, bool update_session, std::uint64_t idx) {
    if (undo_) undo_->remember(*this, e.key);
    auto it = kvs_.find(e.key);
    kv_entry const* existing = it == kvs_.end() ? nullptr : &it->second;
    e.create_index = existing ? existing->create_index : idx;
    if (!update_session) e.session = existing ? existing->session : std::string{};
    if (existing && existing->lock_index == e.lock_index && existing->flags == e.flags &&
        existing->value == e.value && existing->session == e.session) {
        return false;  // identical: Consul skips the write and keeps ModifyIndex
    }
    e.modify_index = idx;
    std::string old_session = existing ? existing->session : std::string{};
    if (old_session != e.session) {
        if (!old_session.empty()) {
            auto k = keys_by_session_.find(old_session);
            if (k != keys_by_session_.end()) {
                k->second.erase(e.key);
                if (k->second.empty()) keys_by_session_.erase(k);
            }
            term_ended(e.key, "released");
        }
        if (!e.session.empty()) {
            keys_by_session_[e.session].insert(e.key);
            term_began(e, idx);
        }
    }
    std::string key = e.key;
    if (existing) it->second = std::move(e);
    else kvs_.emplace(key, std::move(e));
    kvs_index_ = idx;
    touched_key(key);
    notify_key(key);
    return true;
}

bool state_machine::kv_remove(std::string_view key, std::uint64_t idx) {
    if (undo_) undo_->remember(*this, key);
    auto it = kvs_.find(key);
    if (it == kvs_.end()) return false;
    if (!it->second.session.empty()) {
        auto k = keys_by_session_.find(it->second.session);
        if (k != keys_by_session_.end()) {
            k->second.erase(it->first);
            if (k->second.empty()) keys_by_session_.erase(k);
        }
        term_ended(key, "deleted");
    }
    std::string k(key);
    kvs_.erase(it);
    tombstones_[k] = tombstone{idx};
    tombstones_index_ = idx;
    kvs_index_ = idx;
    touched_key(k);
    notify_key(k);
    return true;
}

namespace {
// tenure keeps LockIndex on a plain set or CAS of an existing key (Consul
// resets it to 0), so the fencing token of a key never moves backwards.
std::uint64_t kept_lock_index(kv_entry const* existing) { return existing ? existing->lock_index : 0; }
}  // namespace

void state_machine::kv_set(std::string_view key, std::optional<std::string> value, std::uint64_t flags) {
    std::uint64_t idx = index_ + 1;
    kv_entry e{std::string(key), std::move(value), flags, kept_lock_index(kv_get(key)), 0, 0, {}};
    if (kv_store(std::move(e), false, idx)) index_ = idx;
}

bool state_machine::cas_store(std::string_view key, std::optional<std::string> value, std::uint64_t flags,
                              std::uint64_t cas, std::uint64_t idx, bool& changed) {
    auto const* existing = kv_get(key);
    if (cas == 0 && existing) return false;
    if (cas != 0 && (!existing || existing->modify_index != cas)) return false;
    kv_entry e{std::string(key), std::move(value), flags, kept_lock_index(existing), 0, 0, {}};
    changed = kv_store(std::move(e), false, idx) || changed;
    return true;
}

namespace {

// One write at the next index: `op(idx, changed)`; the index moves only if
// the write changed something.
template <class Op>
auto at_next_index(std::uint64_t& index, Op op) {
    std::uint64_t const idx = index + 1;
    bool changed = false;
    auto r = op(idx, changed);
    if (changed) index = idx;
    return r;
}

}  // namespace

bool state_machine::kv_cas(std::string_view key, std::optional<std::string> value, std::uint64_t flags,
                           std::uint64_t cas) {
    return at_next_index(index_, [&](std::uint64_t idx, bool& changed) {
        return cas_store(key, std::move(value), flags, cas, idx, changed);
    });
}

result<bool> state_machine::lock_key(std::string_view key, std::optional<std::string> value, std::uint64_t flags,
                                     std::string_view session, std::uint64_t idx, bool& changed) {
    if (session.empty()) return state_error{"missing session"};
    if (!sessions_.count(session)) return state_error{"invalid session \"" + std::string(session) + "\""};
    auto const* existing = kv_get(key);
    kv_entry e{std::string(key), std::move(value), flags, 1, 0, 0, std::string(session)};
    if (existing) {
        if (existing->session == session) e.lock_index = existing->lock_index;  // re-acquire by the holder
        else if (!existing->session.empty()) return false;                     // held by another session
        else e.lock_index = existing->lock_index + 1;                          // a new holder
    }
    changed = kv_store(std::move(e), true, idx) || changed;
    return true;
}

result<bool> state_machine::unlock_key(std::string_view key, std::optional<std::string> value, std::uint64_t flags,
                                       std::string_view session, std::uint64_t idx, bool& changed) {
    if (session.empty()) return state_error{"missing session"};
    auto const* existing = kv_get(key);
    if (!existing || existing->session != session) return false;
    kv_entry e{std::string(key), std::move(value), flags, existing->lock_index, 0, 0, {}};
    changed = kv_store(std::move(e), true, idx) || changed;
    return true;
}

std::optional<time_point> state_machine::lock_delay_until(std::string_view key, time_point now) const {
    auto it = lock_delays_.find(key);
    if (it == lock_delays_.end() || it->second <= now) return std::nullopt;
    return it->second;
}

result<bool> state_machine::kv_acquire(std::string_view key, std::optional<std::string> value, std::uint64_t flags,
                                       std::string_view session, time_point now) {
    // Consul checks lock-delay before anything else (kvsPreApply), so even a
    // bogus session gets a plain false during the delay.
    if (lock_delay_until(key, now)) {
        if (on_lock_delay_reject) on_lock_delay_reject(key);
        return false;
    }
    event_now_ = now;
    return at_next_index(index_, [&](std::uint64_t idx, bool& changed) {
        return lock_key(key, std::move(value), flags, session, idx, changed);
    });
}

result<bool> state_machine::kv_release(std::string_view key, std::optional<std::string> value, std::uint64_t flags,
                                       std::string_view session, time_point now) {
    event_now_ = now;
    return at_next_index(index_, [&](std::uint64_t idx, bool& changed) {
        return unlock_key(key, std::move(value), flags, session, idx, changed);
    });
}

void state_machine::kv_delete(std::string_view key, time_point now) {
    event_now_ = now;
    std::uint64_t idx = index_ + 1;
    if (kv_remove(key, idx)) index_ = idx;
}

void state_machine::kv_delete_tree(std::string_view prefix, time_point now) {
    event_now_ = now;
    std::uint64_t idx = index_ + 1;
    std::vector<std::string> doomed;
    for (auto it = kvs_.lower_bound(prefix); it != kvs_.end() && it->first.starts_with(prefix); ++it)
        doomed.push_back(it->first);
    bool changed = false;
    for (auto const& k : doomed) changed = kv_remove(k, idx) || changed;
    if (changed) index_ = idx;
}

bool state_machine::kv_delete_cas(std::string_view key, std::uint64_t cas, time_point now) {
    auto const* existing = kv_get(key);
    if (!existing) return true;
    if (existing->modify_index != cas) return false;
    kv_delete(key, now);
    return true;
}

// ---- txn ----------------------------------------------------------------------

namespace {
std::string q(std::string_view s) {
    std::string out = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') out += '\\';
        out += c;
    }
    out += '"';
    return out;
}
kv_entry without_value(kv_entry e) {
    e.value.reset();
    return e;
}
}  // namespace

txn_outcome state_machine::txn(std::vector<txn_kv_op> const& ops, time_point now) {
    txn_outcome out;
    // Consul rejects lock verbs during lock-delay before applying anything.
    for (std::size_t i = 0; i < ops.size(); ++i) {
        if (ops[i].verb == "lock" && lock_delay_until(ops[i].key, now)) {
            if (on_lock_delay_reject) on_lock_delay_reject(ops[i].key);
            out.errors.push_back({i, "failed to lock key " + q(ops[i].key) + " due to lock delay"});
        }
    }
    if (!out.errors.empty()) return out;

    event_now_ = now;
    txn_undo undo;
    undo.kvs_index = kvs_index_;
    undo.tombstones_index = tombstones_index_;
    undo_ = &undo;
    std::uint64_t idx = index_ + 1;
    bool changed = false;

    for (std::size_t i = 0; i < ops.size(); ++i) {
        auto const& op = ops[i];
        auto fail = [&](std::string what) { out.errors.push_back({i, std::move(what)}); };
        auto stored = [&] { out.results.push_back(without_value(*kv_get(op.key))); };
        std::string const& v = op.verb;
        if (v == "set") {
            kv_entry e{op.key, op.value, op.flags, kept_lock_index(kv_get(op.key)), 0, 0, {}};
            changed = kv_store(std::move(e), false, idx) || changed;
            stored();
        } else if (v == "cas") {
            if (cas_store(op.key, op.value, op.flags, op.index, idx, changed)) stored();
            else fail("failed to set key " + q(op.key) + ", index is stale");
        } else if (v == "lock" || v == "unlock") {
            auto r = v == "lock" ? lock_key(op.key, op.value, op.flags, op.session, idx, changed)
                                 : unlock_key(op.key, op.value, op.flags, op.session, idx, changed);
            if (auto const* err = std::get_if<state_error>(&r)) fail(err->message);
            else if (std::get<bool>(r)) stored();
            else if (v == "lock") fail("failed to lock key " + q(op.key) + ", lock is already held");
            else fail("failed to unlock key " + q(op.key) + ", lock isn't held, or is held by another session");
        } else if (v == "get") {
            if (auto const* e = kv_get(op.key)) out.results.push_back(*e);
            else fail("key " + q(op.key) + " doesn't exist");
        } else if (v == "get-tree") {
            for (auto const* e : kv_list(op.key)) out.results.push_back(*e);
        } else if (v == "check-index") {
            auto const* e = kv_get(op.key);
            if (!e) fail("failed to check index, key " + q(op.key) + " doesn't exist");
            else if (e->modify_index != op.index)
                fail("failed index check for key " + q(op.key) + ", current modify index " +
                     std::to_string(e->modify_index) + " != " + std::to_string(op.index));
            else out.results.push_back(without_value(*e));
        } else if (v == "check-session") {
            auto const* e = kv_get(op.key);
            if (!e) fail("failed to check session, key " + q(op.key) + " doesn't exist");
            else if (e->session != op.session)
                fail("failed session check for key " + q(op.key) + ", current session " + q(e->session) + " != " +
                     q(op.session));
            else out.results.push_back(without_value(*e));
        } else if (v == "check-not-exists") {
            if (kv_get(op.key)) fail("key " + q(op.key) + " exists");
        } else if (v == "delete") {
            changed = kv_remove(op.key, idx) || changed;
        } else if (v == "delete-cas") {
            auto const* e = kv_get(op.key);
            if (e && e->modify_index != op.index) fail("failed to delete key " + q(op.key) + ", index is stale");
            else if (e) changed = kv_remove(op.key, idx) || changed;
        } else if (v == "delete-tree") {
            std::vector<std::string> doomed;
            for (auto const* e : kv_list(op.key)) doomed.push_back(e->key);
            for (auto const& k : doomed) changed = kv_remove(k, idx) || changed;
        } else {
            fail("unknown KV verb " + q(v));
        }
    }
    undo_ = nullptr;

    if (!out.errors.empty()) {
        // Roll back every touched key; watchers that were woken re-evaluate
        // and find nothing changed.
        for (auto& [key, saved] : undo.keys) {
            if (auto it = kvs_.find(key); it != kvs_.end() && !it->second.session.empty()) {
                auto k = keys_by_session_.find(it->second.session);
                if (k != keys_by_session_.end()) {
                    k->second.erase(key);
                    if (k->second.empty()) keys_by_session_.erase(k);
                }
            }
            if (saved.entry) {
                if (!saved.entry->session.empty()) keys_by_session_[saved.entry->session].insert(key);
                kvs_[key] = std::move(*saved.entry);
            } else {
                kvs_.erase(key);
            }
            if (saved.grave) tombstones_[key] = *saved.grave;
            else tombstones_.erase(key);
        }
        kvs_index_ = undo.kvs_index;
        tombstones_index_ = undo.tombstones_index;
        out.results.clear();
        return out;
    }
    if (changed) {
        index_ = idx;
        out.index = idx;
    }
    if (undo.terms_ended > 0 && undo.terms_began > 0) ++handovers_;
    for (auto& ev : undo.terms) {
        if (ev.began) history_.begin(std::move(ev.term));
        else history_.end(ev.term.key, ev.term.end, now, std::nullopt);
    }
    for (auto const& key : undo.touched) notify_key(key);
    return out;
}

// ---- checks and nodes -------------------------------------------------------------

health_check const* state_machine::check_get(std::string_view node, std::string_view id) const {
    auto nit = checks_.find(node);
    if (nit == checks_.end()) return nullptr;
    auto cit = nit->second.find(id);
    return cit == nit->second.end() ? nullptr : &cit->second;
}

std::vector<health_check const*> state_machine::node_checks(std::string_view node) const {
    std::vector<health_check const*> out;
    if (auto nit = checks_.find(node); nit != checks_.end())
        for (auto const& [id, c] : nit->second) out.push_back(&c);
    return out;
}

std::vector<health_check const*> state_machine::agent_checks() const {
    std::vector<health_check const*> out;
    for (auto const* c : node_checks(config_.node_name))
        if (c->agent_local) out.push_back(c);
    return out;
}

void state_machine::invalidate_sessions_bound_to(std::string_view node, std::string_view check_id,
                                                 invalidation_cause cause, time_point now) {
    std::vector<std::string> doomed;
    for (auto const& [id, s] : sessions_) {
        if (s.node != node) continue;
        auto ids = s.check_ids();
        if (std::find(ids.begin(), ids.end(), check_id) != ids.end()) doomed.push_back(id);
    }
    for (auto const& id : doomed) invalidate_session(id, cause, now);
}

void state_machine::set_check_status(health_check& check, std::string_view status, std::string output,
                                     time_point now) {
    if (check.status != status || check.output != output) {
        check.status = std::string(status);
        check.output = std::move(output);
        std::uint64_t idx = next_index();
        check.modify_index = idx;
        checks_index_ = idx;
        touched_check(check.node, check.check_id);
        notify_table(watch_target::kind::checks);
    }
    // A critical check invalidates every session bound to it (catalog.go ensureCheckTxn).
    if (status == check_critical) {
        std::string node = check.node, id = check.check_id;  // `check` stays valid: sessions don't own checks
        invalidate_sessions_bound_to(node, id, invalidation_cause::check_critical, now);
    }
}

result<bool> state_machine::agent_check_register(health_check check, time_point now) {
    check.node = config_.node_name;
    check.agent_local = true;
    if (check.check_id.empty()) check.check_id = check.name;
    if (check.status.empty()) check.status = std::string(check_critical);
    auto& node_map = checks_[check.node];
    std::uint64_t idx = next_index();
    auto it = node_map.find(check.check_id);
    if (it != node_map.end()) {
        check.create_index = it->second.create_index;
        if (it->second.ttl_deadline) check_timers_.erase({*it->second.ttl_deadline, check.node, check.check_id});
        it->second.ttl_deadline.reset();
    } else {
        check.create_index = idx;
    }
    check.modify_index = idx;
    checks_index_ = idx;
    check.ttl_deadline.reset();
    std::string status = check.status;
    std::string output = check.output;
    auto& stored = node_map[check.check_id] = std::move(check);
    touched_check(stored.node, stored.check_id);
    reset_check_timer(stored, now);
    notify_table(watch_target::kind::checks);
    if (status == check_critical)
        invalidate_sessions_bound_to(stored.node, stored.check_id, invalidation_cause::check_critical, now);
    return true;
}

bool state_machine::agent_check_update(std::string_view id, std::string_view status, std::string output,
                                       time_point now) {
    auto nit = checks_.find(config_.node_name);
    if (nit == checks_.end()) return false;
    auto cit = nit->second.find(id);
    if (cit == nit->second.end() || !cit->second.agent_local) return false;
    reset_check_timer(cit->second, now);
    set_check_status(cit->second, status, std::move(output), now);
    return true;
}

bool state_machine::agent_check_deregister(std::string_view id, time_point now) {
    auto const* c = check_get(config_.node_name, id);
    if (!c || !c->agent_local) return false;
    auto r = catalog_deregister(config_.node_name, std::string(id), now);
    (void)r;
    return true;
}

result<bool> state_machine::catalog_register(node_entry node, std::vector<health_check> checks, time_point now) {
    std::uint64_t idx = next_index();
    auto it = nodes_.find(node.node);
    if (it != nodes_.end()) {
        node.create_index = it->second.create_index;
        if (node.id.empty()) node.id = it->second.id;
    } else {
        node.create_index = idx;
        if (node.id.empty()) node.id = generate_uuid();
    }
    node.modify_index = idx;
    nodes_index_ = idx;
    std::string name = node.node;
    nodes_[name] = std::move(node);
    touched_node(name);
    notify_table(watch_target::kind::nodes);

    for (auto& c : checks) {
        c.node = name;
        if (c.check_id.empty()) c.check_id = c.name;
        if (c.status.empty()) c.status = std::string(check_critical);
        auto& node_map = checks_[name];
        auto cit = node_map.find(c.check_id);
        if (cit == node_map.end()) {
            c.create_index = c.modify_index = idx;
            checks_index_ = idx;
            std::string status = c.status;
            auto& stored = node_map[c.check_id] = std::move(c);
            touched_check(name, stored.check_id);
            notify_table(watch_target::kind::checks);
            if (status == check_critical)
                invalidate_sessions_bound_to(name, stored.check_id, invalidation_cause::check_critical, now);
        } else {
            cit->second.name = c.name;
            cit->second.notes = c.notes;
            cit->second.service_id = c.service_id;
            cit->second.service_name = c.service_name;
            touched_check(name, cit->first);
            set_check_status(cit->second, c.status, std::move(c.output), now);
        }
    }
    return true;
}

result<bool> state_machine::catalog_deregister(std::string_view node, std::optional<std::string> check_id,
                                               time_point now) {
    if (check_id) {
        auto nit = checks_.find(node);
        if (nit == checks_.end()) return true;
        auto cit = nit->second.find(*check_id);
        if (cit == nit->second.end()) return true;
        if (cit->second.ttl_deadline) check_timers_.erase({*cit->second.ttl_deadline, cit->second.node, *check_id});
        nit->second.erase(cit);
        touched_check(node, *check_id);
        std::uint64_t idx = next_index();
        checks_index_ = idx;
        notify_table(watch_target::kind::checks);
        invalidate_sessions_bound_to(node, *check_id, invalidation_cause::check_deregistered, now);
        return true;
    }
    auto it = nodes_.find(node);
    if (it == nodes_.end()) return true;
    std::string name = it->first;
    // Sessions first (they reference the node), then its checks, then the node.
    std::vector<std::string> doomed;
    for (auto const& [id, s] : sessions_)
        if (s.node == name) doomed.push_back(id);
    for (auto const& id : doomed) invalidate_session(id, invalidation_cause::node_deregistered, now);
    if (auto nit = checks_.find(name); nit != checks_.end()) {
        for (auto& [id, c] : nit->second) {
            if (c.ttl_deadline) check_timers_.erase({*c.ttl_deadline, c.node, id});
            touched_check(name, id);
        }
        checks_.erase(nit);
    }
    nodes_.erase(name);
    touched_node(name);
    std::uint64_t idx = next_index();
    nodes_index_ = idx;
    checks_index_ = idx;
    notify_table(watch_target::kind::nodes);
    notify_table(watch_target::kind::checks);
    return true;
}

node_entry const* state_machine::node_get(std::string_view node) const {
    auto it = nodes_.find(node);
    return it == nodes_.end() ? nullptr : &it->second;
}

std::vector<node_entry const*> state_machine::node_list() const {
    std::vector<node_entry const*> out;
    for (auto const& [name, n] : nodes_) out.push_back(&n);
    return out;
}

}  // namespace tenure::detail::agent
