// One blocking query per KV prefix, fanned out to many waiters (internal).
//
// 10 000 elections under one prefix would otherwise park 10 000 blocking
// queries (one connection each). A hub keeps the latest snapshot of the
// prefix (GET /v1/kv/<prefix>?recurse&consistent) and one blocking query on
// it; each follower or leader monitor waits for *its* key to differ from what
// it last knew. Waking is per key: a change to another key under the prefix
// costs a map lookup, not a wake-up.
//
// Index rule: a waiter that knows its key at ModifyIndex M (from its own
// acquire, say) is only answered from a snapshot whose X-Consul-Index is
// >= M, so a snapshot taken before its write can never be mistaken for a
// change (X-Consul-Index of a prefix read is at least the ModifyIndex of every
// key it returns, and every write up to it is included).
#pragma once

#include <tenure/consul/client.hpp>
#include <tenure/detail/clock.hpp>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_signal.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

namespace tenure::detail {

class kv_watch_hub : public std::enable_shared_from_this<kv_watch_hub> {
    struct waiter;

public:
    // The state of one key as of a snapshot.
    struct key_state {
        std::optional<consul::kv_pair> pair;  // nullopt: the key does not exist
        std::uint64_t index = 0;              // X-Consul-Index of the snapshot
    };

    kv_watch_hub(consul::client& client, std::string prefix);
    ~kv_watch_hub();

    std::string const& prefix() const noexcept { return prefix_; }

    // Waits for a snapshot with index >= `min_index` in which `key` differs
    // from `known` (by existence and ModifyIndex; `known` == nullopt means
    // "don't know": any snapshot answers). nullopt when the awaiting
    // coroutine is cancelled: not an exception, because every leader's
    // monitor ends this way when its scope is released, and a throw (thrice
    // rethrown up the coroutines) per term showed at 10,000 elections.
    // `key` must start with prefix().
    struct known_state {
        bool exists = false;
        std::uint64_t modify_index = 0;
    };
    boost::asio::awaitable<std::optional<key_state>> changed(std::string key, std::uint64_t min_index,
                                                             std::optional<known_state> known);

    // The same wait with no coroutine behind it: `notify` is posted (to the
    // client's executor) once a snapshot answers, and end_watch() then gives
    // the answer and forgets the watch. A leader's monitor parks this way, a
    // registration instead of a coroutine frame, a timer and its wait per
    // held key. end_watch() before an answer just forgets the watch; every
    // watch must end (its owner's destructor at the latest). A watch_id is
    // moved, not copied: it owns the registration.
    class watch_id {
        friend class kv_watch_hub;
        std::unique_ptr<waiter> w_;
    };
    watch_id watch(std::string key, std::uint64_t min_index, std::optional<known_state> known,
                   std::function<void()> notify);
    std::optional<key_state> end_watch(watch_id w);

    // The hub's latest snapshot of `key` (nullopt before the first one).
    std::optional<key_state> current(std::string const& key) const;
    // The same without a copy: the snapshot's entry of `key`, or nullptr when
    // the snapshot has no such key; nullopt before the first snapshot. Valid
    // until the hub applies its next read: not to be held across an await.
    std::optional<consul::kv_pair const*> peek(std::string_view key) const;

    // For tests and benchmarks.
    std::size_t waiters() const noexcept { return waiter_count_; }
    std::uint64_t snapshots() const noexcept { return snapshots_; }
    std::uint64_t index() const noexcept { return index_; }

    // The hub of `client` for `prefix`, created on first use and shared by
    // every election of that client on that prefix while any holds it.
    static std::shared_ptr<kv_watch_hub> get(consul::client& client, std::string const& prefix);

private:
    // Waiters whose min_index is past the snapshot they registered against,
    // by min_index: a later snapshot may answer them though their key did
    // not move.
    using short_of_index = std::multimap<std::uint64_t, waiter*>;
    // Waiters by key: the key is the waiter's own (a waiter stays put while
    // it is registered: in changed()'s frame, or a watch's allocation), so a
    // registration costs one node and no copy of the key.
    using waiter_map = std::unordered_multimap<std::string_view, waiter*>;
    struct waiter {
        std::string key;
        std::uint64_t min_index = 0;
        std::optional<known_state> known;
        std::optional<key_state> answer;
        tenure::detail::timer* wake = nullptr;  // a coroutine's (changed)
        std::function<void()> notify;           // or a watch's
        std::optional<short_of_index::iterator> pending;
        waiter_map::iterator at;  // in waiting_
    };
    // A key of the snapshot, stamped with the last read that had it.
    struct entry {
        consul::kv_pair pair;
        std::uint64_t seen = 0;
    };
    // Keys looked up by the string_view of the answer being decoded, without
    // a std::string made per entry.
    struct key_hash {
        using is_transparent = void;
        std::size_t operator()(std::string_view k) const noexcept { return std::hash<std::string_view>{}(k); }
    };

    // Whether the snapshot answers a wait on `key` with these terms.
    bool answers(std::string_view key, std::uint64_t min_index, std::optional<known_state> const& known) const;
    // The current snapshot's answer to such a waiter, if it has one already.
    std::optional<key_state> answer_now(std::string const& key, std::uint64_t min_index,
                                        std::optional<known_state> const& known) const;
    void deliver(waiter& w);
    void add_waiter(waiter& w);
    void remove_waiter(waiter& w);
    // Delivers to the waiters of `key` the snapshot answers.
    void visit(std::string_view key);
    void ensure_running();
    // The shared query's loop. It holds the hub only weakly: when the last
    // election lets go of the hub, ~kv_watch_hub cancels the parked query.
    static boost::asio::awaitable<void> run(std::weak_ptr<kv_watch_hub> weak,
                                            std::shared_ptr<boost::asio::cancellation_signal> stop);
    // While a read is decoded: whether `key` is held at `modify_index` already
    // (then it is stamped as seen by read `stamp` and left undecoded).
    bool holds(std::string_view key, std::uint64_t modify_index, std::uint64_t stamp);
    // `pairs`: the keys of read `stamp` that holds() did not skip.
    void apply(std::vector<consul::kv_pair> pairs, std::uint64_t index, std::uint64_t stamp);
    void forget_snapshot();

    consul::client& client_;
    std::string prefix_;
    bool have_snapshot_ = false;
    std::uint64_t index_ = 0;
    // Updated in place: a snapshot's unchanged keys cost a lookup each, not
    // a copy.
    std::unordered_map<std::string, entry, key_hash, std::equal_to<>> keys_;
    std::uint64_t reads_ = 0;  // the stamp of the latest read
    waiter_map waiting_;
    short_of_index short_of_index_;
    std::size_t waiter_count_ = 0;
    std::uint64_t snapshots_ = 0;
    std::uint64_t deliveries_ = 0;  // answers given: whether a snapshot told anyone anything
    std::size_t awaiting_ = 0;      // waiters in changed(): candidates waiting for a key
    bool running_ = false;
    std::uint64_t query_index_ = 0;
    std::shared_ptr<boost::asio::cancellation_signal> stop_;  // cancels the loop's query
};

}  // namespace tenure::detail
