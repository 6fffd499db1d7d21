// The embedded agent's state machine: Consul's sessions, KV and lock rules,
// checks and nodes, with no sockets and no clock of its own.
//
// Every call that depends on time takes `now`; timers (session TTLs, check
// TTLs) are reported through next_deadline() and fired by advance(now). The
// HTTP front door, the in-process backend, the unit tests (mock clock) and the
// simulator (virtual clock) all drive this one class.
//
// Semantics follow Consul's state store (reference/consul-semantics.md):
// invalidation through one path (invalidate_session) for destroy, TTL lapse,
// critical or deregistered checks and node deregistration; lock-delay keyed by
// key and checked only for acquire; LockIndex moving only when a new holder
// takes a key.
#pragma once

#include "agent/history.hpp"

#include <tenure/detail/clock.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

namespace tenure::detail::agent {

using clock = tenure::detail::clock;
using time_point = clock::time_point;
using std::chrono::nanoseconds;

inline constexpr nanoseconds max_lock_delay = std::chrono::seconds{60};
inline constexpr nanoseconds session_ttl_max = std::chrono::hours{24};
inline constexpr int session_ttl_multiplier = 2;
inline constexpr std::string_view serf_check_id = "serfHealth";

struct kv_entry {
    std::string key;
    std::optional<std::string> value;  // nullopt renders as "Value": null
    std::uint64_t flags = 0;
    std::uint64_t lock_index = 0;
    std::uint64_t create_index = 0;
    std::uint64_t modify_index = 0;
    std::string session;  // empty: not held
};

enum class session_behavior { release, delete_keys };

struct service_check_ref {
    std::string id;
    std::string ns;  // Namespace; always empty in CE
};

struct session_entry {
    std::string id;
    std::string name;
    std::string node;
    std::int64_t lock_delay_ns = 15'000'000'000;  // as given (echoed), clamped only when applied
    session_behavior behavior = session_behavior::release;
    std::string ttl;              // the TTL string as given ("" = none)
    nanoseconds ttl_duration{0};  // parsed TTL, 0 = none
    std::vector<std::string> node_checks;
    std::vector<service_check_ref> service_checks;
    std::vector<std::string> checks;  // legacy "Checks" field; omitted from JSON when empty
    std::uint64_t create_index = 0;
    std::uint64_t modify_index = 0;

    // Every check bound to the session (Checks, NodeChecks, ServiceChecks).
    std::vector<std::string> check_ids() const;
};

// The request body of /v1/session/create after JSON decoding.
struct session_create_request {
    std::optional<std::string> name;
    std::optional<std::string> node;          // absent: the agent's node
    std::optional<std::int64_t> lock_delay_ns;  // absent: 15s
    std::optional<std::string> behavior;
    std::optional<std::string> ttl;
    std::optional<std::vector<std::string>> checks;
    std::optional<std::vector<std::string>> node_checks;
    std::optional<std::vector<service_check_ref>> service_checks;
};

inline constexpr std::string_view check_passing = "passing";
inline constexpr std::string_view check_warning = "warning";
inline constexpr std::string_view check_critical = "critical";
inline constexpr std::string_view check_maintenance = "maintenance";

struct health_check {
    std::string node;
    std::string check_id;
    std::string name;
    std::string status = std::string(check_critical);
    std::string notes;
    std::string output;
    std::string service_id;
    std::string service_name;
    std::string type;  // "ttl" for agent TTL checks, "" for catalog-registered ones
    nanoseconds ttl{0};
    std::optional<time_point> ttl_deadline;
    bool agent_local = false;  // registered through /v1/agent/check/register
    std::uint64_t create_index = 0;
    std::uint64_t modify_index = 0;
};

struct node_entry {
    std::string id;
    std::string node;
    std::string address;
    std::string datacenter;
    std::map<std::string, std::string> tagged_addresses;
    std::map<std::string, std::string> meta;
    std::uint64_t create_index = 0;
    std::uint64_t modify_index = 0;
};

// Why a session went away; reported to observers (metrics, tests, logs).
enum class invalidation_cause { destroyed, ttl_expired, check_critical, check_deregistered, node_deregistered };

std::string_view to_string(invalidation_cause c);

// A state error that Consul reports as HTTP 500 with this text.
struct state_error {
    std::string message;
};

template <class T>
using result = std::variant<T, state_error>;

// One KV operation of /v1/txn.
struct txn_kv_op {
    std::string verb;  // Consul's: set, cas, lock, unlock, get, get-tree, check-index,
                       // check-session, check-not-exists, delete, delete-cas, delete-tree
    std::string key;
    std::optional<std::string> value;
    std::uint64_t flags = 0;
    std::uint64_t index = 0;
    std::string session;
};

// A verb that only reads (get, get-tree, the checks): what ACLs need
// key:read for, and what leaves a transaction with nothing to write.
inline bool is_read_verb(std::string_view verb) {
    return verb == "get" || verb == "get-tree" || verb.starts_with("check-");
}

struct txn_error {
    std::size_t op_index = 0;
    std::string what;
};

struct txn_outcome {
    std::vector<kv_entry> results;  // empty when errors is not
    std::vector<txn_error> errors;
    std::uint64_t index = 0;  // the index the writes were applied at (0 for a read-only txn)
};

// What a blocking query waits on. A write wakes exactly the waiters whose
// targets it touches.
struct watch_target {
    enum class kind { key, prefix, sessions, checks, nodes, renewals };  // renewals: tenure's UI only
    kind what = kind::key;
    std::string name;  // key or prefix; empty for the tables
};

// What the writes since the last take touched, for the write-ahead log
// (persist.cpp). The log reads each entry's current value (or its absence),
// so it records state deltas, not operations. Filled only while tracking.
struct change_set {
    std::set<std::string, std::less<>> keys;  // a KV entry or its tombstone
    std::set<std::string, std::less<>> sessions;
    std::set<std::pair<std::string, std::string>> checks;  // (node, check id)
    std::set<std::string, std::less<>> nodes;
    bool empty() const noexcept { return keys.empty() && sessions.empty() && checks.empty() && nodes.empty(); }
};

struct agent_config {
    std::string node_name = "tenure";
    std::string node_id;  // generated when empty
    std::string datacenter = "dc1";
    std::string address = "127.0.0.1";
    nanoseconds session_ttl_min = std::chrono::seconds{10};
    std::size_t kv_max_value_size = 512 * 1024;
    std::uint64_t seed = 0;  // 0: a fresh seed (tenure/detail/random.hpp)
    std::size_t history_capacity = default_history_capacity;  // lock terms kept (history.hpp); 0: none
};

class state_machine {
public:
    explicit state_machine(agent_config config, time_point now);
    state_machine(state_machine const&) = delete;
    state_machine& operator=(state_machine const&) = delete;
    ~state_machine();

    agent_config const& config() const noexcept { return config_; }

    // ---- time -------------------------------------------------------------
    // The earliest instant at which advance() has work (a session TTL or a
    // check TTL), if any.
    std::optional<time_point> next_deadline() const;
    // Fires every timer due at or before `now`.
    void advance(time_point now);

    // ---- sessions ---------------------------------------------------------
    result<std::string> session_create(session_create_request const& req, time_point now);
    // true if a session was destroyed; an unknown id is not an error (Consul answers true).
    bool session_destroy(std::string_view id, time_point now);
    // The renewed session, or nullopt when unknown (HTTP 404).
    std::optional<session_entry> session_renew(std::string_view id, time_point now);
    session_entry const* session_get(std::string_view id) const;
    // When a session with a TTL was last renewed (or created); nullopt without a TTL.
    std::optional<time_point> session_renewed(std::string_view id) const;
    // Renewals since the start. Renewals move no index (as in Consul); this
    // counter lets tenure's own UI endpoint wake on them (watch kind renewals).
    std::uint64_t renewals() const noexcept { return renewals_; }
    std::vector<session_entry const*> session_list() const;
    std::vector<session_entry const*> session_list_node(std::string_view node) const;
    std::uint64_t sessions_index() const noexcept { return sessions_index_; }

    // ---- KV ---------------------------------------------------------------
    kv_entry const* kv_get(std::string_view key) const;
    // Index of a single-key read: the key's ModifyIndex, else the table index.
    std::uint64_t kv_key_index(std::string_view key) const;
    std::vector<kv_entry const*> kv_list(std::string_view prefix) const;
    // Index of a prefix read: max ModifyIndex of entries and tombstones under
    // the prefix, or the table index when there are none.
    std::uint64_t kv_prefix_index(std::string_view prefix) const;
    std::vector<std::string> kv_keys(std::string_view prefix, std::string_view separator) const;

    void kv_set(std::string_view key, std::optional<std::string> value, std::uint64_t flags);
    bool kv_cas(std::string_view key, std::optional<std::string> value, std::uint64_t flags, std::uint64_t cas);
    // false during lock-delay or when another session holds the key.
    result<bool> kv_acquire(std::string_view key, std::optional<std::string> value, std::uint64_t flags,
                            std::string_view session, time_point now);
    result<bool> kv_release(std::string_view key, std::optional<std::string> value, std::uint64_t flags,
                            std::string_view session, time_point now);
    // `now` stamps the end of a term when a held key goes (the lock history).
    void kv_delete(std::string_view key, time_point now);
    void kv_delete_tree(std::string_view prefix, time_point now);
    bool kv_delete_cas(std::string_view key, std::uint64_t cas, time_point now);
    // When a lock-delay is in force for `key` at `now`, the instant it ends.
    std::optional<time_point> lock_delay_until(std::string_view key, time_point now) const;

    // All or nothing. Writes share one index.
    txn_outcome txn(std::vector<txn_kv_op> const& ops, time_point now);

    std::uint64_t kvs_index() const noexcept { return kvs_index_; }
    // Live keys (for the agent's -max-kv-keys limit).
    std::size_t kv_count() const noexcept { return kvs_.size(); }
    // The keys a session holds now, under `prefix`, sorted.
    std::vector<kv_entry const*> held_keys(std::string_view prefix) const;
    // The keys `session` holds now, sorted.
    std::vector<std::string> keys_held_by(std::string_view session) const;

    // Every lock term of the last history_capacity, with how each ended.
    lock_history const& history() const noexcept { return history_; }

    // ---- checks and nodes --------------------------------------------------
    // Registers (or replaces) a TTL check on the agent's own node.
    result<bool> agent_check_register(health_check check, time_point now);
    // Sets a check's status (pass / warn / fail / update) and restarts its TTL.
    // false: unknown check id.
    bool agent_check_update(std::string_view id, std::string_view status, std::string output, time_point now);
    bool agent_check_deregister(std::string_view id, time_point now);
    std::vector<health_check const*> agent_checks() const;
    health_check const* check_get(std::string_view node, std::string_view id) const;
    std::vector<health_check const*> node_checks(std::string_view node) const;
    std::uint64_t checks_index() const noexcept { return checks_index_; }

    // Catalog: registers a node with optional checks (which may change status
    // and so invalidate sessions).
    result<bool> catalog_register(node_entry node, std::vector<health_check> checks, time_point now);
    // Deregisters a single check of a node, or the whole node.
    result<bool> catalog_deregister(std::string_view node, std::optional<std::string> check_id, time_point now);
    node_entry const* node_get(std::string_view node) const;
    std::vector<node_entry const*> node_list() const;
    std::uint64_t nodes_index() const noexcept { return nodes_index_; }

    // ---- observation --------------------------------------------------------
    // The last index handed out by any write.
    std::uint64_t raft_index() const noexcept { return index_; }

    class watch_registration;
    // Registers a one-shot callback fired (synchronously, from inside the
    // mutating call) by the first write that touches any target. The
    // callback must not call back into the state machine; post instead.
    // Destroying the registration cancels it.
    [[nodiscard]] watch_registration watch(std::vector<watch_target> targets, std::function<void()> callback);
    std::size_t watcher_count() const noexcept;
    // How many watchers writes have woken so far (it only grows).
    std::uint64_t wakeups() const noexcept;
    // How many transactions so far ended a hold of a lock and began
    // another: handed a lock from one session to the next.
    std::uint64_t handovers() const noexcept;

    // Called on every invalidation (for metrics and tests).
    std::function<void(session_entry const&, invalidation_cause)> on_invalidate;
    // Called when an acquire is refused because of lock-delay.
    std::function<void(std::string_view key)> on_lock_delay_reject;

    // ---- persistence --------------------------------------------------------
    // While on, every mutation records what it touched in changes().
    void track_changes(bool on) noexcept { tracking_ = on; }
    change_set& changes() noexcept { return changes_; }

    // A random UUID (v4) from the machine's generator: session and node IDs.
    std::string generate_uuid();
    // Uniform in [0, bound): blocking-query jitter.
    nanoseconds random_stagger(nanoseconds bound);

private:
    struct tombstone {
        std::uint64_t index = 0;
    };

    friend struct state_access;  // persist.cpp and metrics.cpp: restore, snapshot, counts

    std::uint64_t next_index() { return ++index_; }
    void touched_key(std::string_view k) {
        if (tracking_) changes_.keys.emplace(k);
    }
    void touched_session(std::string_view id) {
        if (tracking_) changes_.sessions.emplace(id);
    }
    void touched_check(std::string_view node, std::string_view id) {
        if (tracking_) changes_.checks.emplace(std::string(node), std::string(id));
    }
    void touched_node(std::string_view name) {
        if (tracking_) changes_.nodes.emplace(name);
    }
    void invalidate_session(std::string const& id, invalidation_cause cause, time_point now);
    void set_check_status(health_check& check, std::string_view status, std::string output, time_point now);
    void invalidate_sessions_bound_to(std::string_view node, std::string_view check_id, invalidation_cause cause,
                                      time_point now);
    void reset_session_timer(session_entry const& s, time_point now);
    void reset_check_timer(health_check& check, time_point now);

    // KV primitives shared by the endpoints, txn and invalidation.
    // Returns true when the store changed.
    bool kv_store(kv_entry entry, bool update_session, std::uint64_t idx);
    bool kv_remove(std::string_view key, std::uint64_t idx);
    // The KV verbs without lock-delay checks or index commits; `changed` is
    // set when the store changed. Shared by the endpoints and txn.
    bool cas_store(std::string_view key, std::optional<std::string> value, std::uint64_t flags, std::uint64_t cas,
                   std::uint64_t idx, bool& changed);
    result<bool> lock_key(std::string_view key, std::optional<std::string> value, std::uint64_t flags,
                          std::string_view session, std::uint64_t idx, bool& changed);
    result<bool> unlock_key(std::string_view key, std::optional<std::string> value, std::uint64_t flags,
                            std::string_view session, std::uint64_t idx, bool& changed);
    void notify_key(std::string_view key);
    // The lock history's two events, from kv_store and kv_remove (the only
    // places a key's holder changes); inside a txn they wait for its commit.
    void term_began(kv_entry const& e, std::uint64_t idx);
    void term_ended(std::string_view key, std::string_view how);
    void notify_table(watch_target::kind k);

    struct txn_undo;
    txn_undo* undo_ = nullptr;  // set while a txn runs

    agent_config config_;
    std::mt19937_64 rng_;
    std::uint64_t index_ = 0;
    std::uint64_t kvs_index_ = 0;
    std::uint64_t tombstones_index_ = 0;
    std::uint64_t sessions_index_ = 0;
    std::uint64_t checks_index_ = 0;
    std::uint64_t nodes_index_ = 0;

    std::map<std::string, kv_entry, std::less<>> kvs_;
    std::map<std::string, tombstone, std::less<>> tombstones_;
    std::map<std::string, time_point, std::less<>> lock_delays_;
    std::multimap<time_point, std::string> delay_timers_;  // forget lock-delays once they end
    std::map<std::string, session_entry, std::less<>> sessions_;
    std::unordered_map<std::string, std::set<std::string>> keys_by_session_;  // held keys
    // Session TTL timers: (deadline, id), and id -> deadline for resets.
    std::set<std::pair<time_point, std::string>> session_timers_;
    std::unordered_map<std::string, time_point> session_deadline_;
    // node -> check id -> check
    std::map<std::string, std::map<std::string, health_check, std::less<>>, std::less<>> checks_;
    std::set<std::tuple<time_point, std::string, std::string>> check_timers_;  // (deadline, node, id)
    std::map<std::string, node_entry, std::less<>> nodes_;

    std::shared_ptr<struct watch_hub> hub_;
    lock_history history_;
    std::uint64_t renewals_ = 0;
    std::uint64_t handovers_ = 0;
    // The instant of the mutating call in progress: stamps history events.
    time_point event_now_{};
    // Set while invalidate_session frees keys: how their terms end.
    struct term_ending {
        std::string_view how;
        std::optional<time_point> lock_delay_until;
    };
    std::optional<term_ending> ending_;
    bool tracking_ = false;
    change_set changes_;
};

// RAII handle of a blocking-query registration.
class state_machine::watch_registration {
public:
    watch_registration() = default;
    watch_registration(watch_registration&&) noexcept;
    watch_registration& operator=(watch_registration&&) noexcept;
    ~watch_registration();
    void reset();

private:
    friend class state_machine;
    std::weak_ptr<struct watch_hub> hub_;
    std::uint64_t id_ = 0;
};

}  // namespace tenure::detail::agent
