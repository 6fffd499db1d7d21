// Internal: the candidate registry beside a Consul lock key, and the transfer
// transaction (docs/guide/priorities-and-transfer.md has the layout).
//
//   <key>                          the lock key (api.Lock / consul lock: untouched)
//   <key>.candidates/<session id>  one per waiting candidate, locked by its session,
//                                  flags candidate_flag_value, value
//                                  {"Name":..,"Value":..,"Priority":N,"Nonce":..}
//   <key>.candidates/.max          the best waiting candidate as last written:
//                                  "<priority> <session id>" (or "<priority>"),
//                                  locked by that candidate's session
//   <key>.candidates/.seen         rewritten by every registration and removal
//   <key>.transfer                 an operator's transfer request (`tenure transfer`),
//                                  flags transfer_flag_value, value {"To":"<name or id>"}
//
// None of them is under `<key>/`, and none is the key: `consul lock`, api.Lock
// and api.Semaphore read only their own keys and their own prefix's contender
// entries (a semaphore's prefix is not a lock key's).
#pragma once

#include "consul/client_access.hpp"
#include "core/backend.hpp"

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tenure::detail {

inline constexpr std::uint64_t candidate_flag_value = 0x74656e7563616e64ull;  // "tenucand"
inline constexpr std::uint64_t transfer_flag_value = 0x74656e757472616eull;   // "tenutran"

// The registry's names, after the key: `<key>.candidates/` holds one entry
// per waiting session and the two below; `<key>.transfer` is a request.
inline constexpr std::string_view registry_dir = ".candidates/";
inline constexpr std::string_view marker_name = ".max";
inline constexpr std::string_view seen_name = ".seen";
inline constexpr std::string_view transfer_suffix = ".transfer";

// `<key>.candidates/` followed by `name`, built in one allocation.
inline std::string in_registry(std::string const& key, std::string_view name) {
    std::string s;
    s.reserve(key.size() + registry_dir.size() + name.size());
    s.append(key).append(registry_dir).append(name);
    return s;
}
inline std::string candidates_prefix(std::string const& key) { return in_registry(key, {}); }
inline std::string candidate_key(std::string const& key, std::string const& session) {
    return in_registry(key, session);
}
inline std::string transfer_request_key(std::string const& key) { return key + std::string(transfer_suffix); }
// The best waiting candidate, by compare-and-set: a registering candidate that
// ranks before the one named (or finds none named) names itself, and the one
// named, when it stops waiting (it won, or gave up), names the next from one
// read of the registry. A waiter that sees a key freed by an invalidation
// reads this one small key: named itself, it goes at once; another, live, it
// defers to; a priority above its own with nobody live named, it reads the
// registry. So a handover costs one registry read, by one candidate.
//
// The marker is locked by the named candidate's session: a waiter sends its
// lock transaction at once, guarded by a check-session of the marker for
// itself (named_in_marker), and only the one named gets through, with no read
// first. The others see the guard fail and read the marker as above.
inline std::string priority_marker_key(std::string const& key) { return in_registry(key, marker_name); }
struct priority_marker {
    int priority = 0;
    std::string first;  // its session id; empty in a marker written before there was one
};
std::optional<priority_marker> decode_priority_marker(std::optional<std::string> const& value);
std::string encode_priority_marker(int priority, std::string const& session);
// Does a candidate of `priority` registering as `session` take the marker?
bool takes_marker(std::optional<priority_marker> const& known, int priority);
// The ops that name `next` in the marker, replacing it as it was at `at` (0:
// absent; a marker that moved since fails them). `locked`: the marker is
// locked by `next`'s session (see above); else it is a plain compare-and-set,
// for when that lock is refused (the marker's lock-delay, after the session
// it was locked by was invalidated).
void append_naming_ops(std::vector<consul::txn_op>& ops, std::string const& key, std::uint64_t at,
                       candidate_info const& next, bool locked);
// Did the transaction fail only because a lock it asked for is in its
// lock-delay (Consul refuses those before looking at anything else)?
bool refused_for_lock_delay(consul::txn_result const& r);
// The guard a waiting `session` puts first in its lock transaction: the
// marker names it, and is locked by it.
consul::txn_op named_in_marker(std::string const& key, std::string const& session);
// Rewritten (with a fresh value) by every registration and removal: a holder
// that saw the registry empty at this key's ModifyIndex knows it still is
// while the index has not moved, and releases with one transaction
// (check-index + unlock) instead of reading the registry first.
inline std::string registry_seen_key(std::string const& key) { return in_registry(key, seen_name); }

// `nonce` makes each registration's value (so its ModifyIndex) its own.
std::string encode_candidate(std::string const& name, std::string const& value, int priority, std::uint64_t nonce);
std::string encode_transfer_request(std::string const& to);
// The target of a request ("" : the best candidate).
std::string decode_transfer_request(std::optional<std::string> const& value);

// a ranks before b: higher priority, then the older entry.
inline bool ranks_before(candidate_info const& a, candidate_info const& b) {
    if (a.priority != b.priority) return a.priority > b.priority;
    return a.since < b.since;
}

// The best of `live` (best first) other than `self`; nullptr when none.
inline candidate_info const* best_other_than(std::vector<candidate_info> const& live, std::string_view self) {
    for (auto const& c : live)
        if (c.session != self) return &c;
    return nullptr;
}

// What one recursive read of `<key>` (or of the registry) shows.
struct registry_view {
    std::optional<consul::kv_pair> lock;     // the lock key itself, if it was in the read
    std::vector<candidate_info> live;        // best first
    std::vector<consul::kv_pair> stale;      // entries whose session has ended (prunable)
    std::optional<consul::kv_pair> request;  // <key>.transfer
    std::optional<consul::kv_pair> marker;   // <key>.candidates/.max
    std::optional<consul::kv_pair> seen;     // <key>.candidates/.seen
    std::uint64_t index = 0;
};
registry_view parse_registry(std::string const& key, std::vector<consul::kv_pair> const& pairs, std::uint64_t index);

// Reads the registry (consistent; blocking past `index` for up to `wait` when
// `index` is not 0). With `with_key`, the read is of `<key>` recursively, so
// the lock key and the transfer request come with it.
asio::awaitable<registry_view> read_registry(consul::client& c, std::string const& key, bool with_key,
                                             std::uint64_t index = 0,
                                             std::chrono::nanoseconds wait = std::chrono::seconds{30});

// Deletes stale entries (compare-and-delete: a re-registration is kept).
asio::awaitable<void> prune_stale(consul::client& c, std::vector<consul::kv_pair> const& stale);

// Does `session` wait on `key`: is its entry there, held by it? One small
// read (blocking past `index` for up to `wait` when `index` is not 0): the
// index of the answer while it waits, nullopt once it does not.
asio::awaitable<std::optional<std::uint64_t>> waits_as_candidate(consul::client& c, std::string const& key,
                                                                 std::string const& session, std::uint64_t index = 0,
                                                                 std::chrono::nanoseconds wait = std::chrono::seconds{30});

// After `self` stopped waiting on `key` (it won, or gave up), with `reg` the
// registry as the transaction that removed its entry left it: when the
// marker names `self` (or nobody), or with `always`, name the best candidate
// still waiting; an empty registry removes the marker. Compare-and-set: a
// better candidate that named itself meanwhile stays. Returns the marker as
// it now names the best candidate of `reg` (written, or already so); nullopt
// when it names nobody or another (the caller knows no handover target).
asio::awaitable<std::optional<consul::kv_pair>> name_next_best(consul::client& c, std::string const& key,
                                                               std::string const& self, registry_view const& reg,
                                                               bool always);

// The candidate `target` names (a session id, else the best-ranked of that
// session name) among `live`, skipping `self`.
std::optional<candidate_info> find_candidate(std::vector<candidate_info> const& live, std::string const& target,
                                             std::string const& self);

// The candidate an entry of the registry describes (`session` is the id its
// key ends with); its ranking fields default when the value does not decode.
std::optional<candidate_info> candidate_from_entry(consul::kv_pair const& p, std::string_view session);

// One transaction hands `key` from `holder` to `target`: `guard` (if any)
// holds, the target still waits (its entry is locked by its session), the
// key is unlocked for `holder` and locked for the target with its value. The
// same transaction takes the target's entry out of the registry (it waits
// no more: `.seen` moves) and puts the marker right, so that neither the
// holder nor the target needs another request to leave the registry right:
// with `live` (the registry as the caller read it, best first) it names the
// next best in `marker`'s place (compare-and-set: a marker that moved fails
// the handover, and the caller reads again); without, it deletes a marker
// that names the target and reads the registry back into `after`, for the
// caller to name the next best from (name_next_best).
struct transfer_outcome {
    std::optional<consul::kv_pair> held;  // the key as the target now holds it; nullopt when refused
    bool holder_lost = false;             // the unlock was refused: `holder` no longer holds the key
    bool target_gone = false;             // the check was refused: the target no longer waits
    // Without `live`, once handed over: the registry the handover left (on
    // the heap: it would make the frame of every coroutine holding an
    // outcome past the size malloc serves fast).
    std::unique_ptr<registry_view> after;
};
asio::awaitable<transfer_outcome> transfer_txn(consul::client& c, std::string const& key, std::string const& holder,
                                               std::string const& holder_value, candidate_info const& target,
                                               std::optional<consul::kv_pair> const& marker,
                                               std::vector<candidate_info> const* live,
                                               consul::txn_op const* guard = nullptr);

// After a handover without `live` went through: does the marker need naming
// afresh from what the transaction read back (someone still waits, or a
// marker is left over)? See name_next_best.
bool needs_naming(registry_view const& after);

}  // namespace tenure::detail
