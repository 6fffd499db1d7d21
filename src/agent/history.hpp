// The agent's memory of lock terms: who held each key, with which fencing
// token, from when to when, how the term ended and the lock-delay its end
// started. Consul keeps none of this; the UI's timeline and
// /v1/tenure/history (docs/agent.md) read it.
//
// A ring of at most `capacity` terms across all keys: once full, each new term
// pushes out the oldest, so memory stays bounded however many keys and
// holders come and go (bench/RESULTS.md, "The history ring's memory"). It is
// not persisted: after a restart it starts empty. The state machine feeds it
// (state.cpp, from the one place a key's holder changes) with the instants
// its callers pass in, so a mock or virtual clock drives it like the rest.
#pragma once

#include <tenure/detail/clock.hpp>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <iterator>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tenure::detail::agent {

inline constexpr std::size_t default_history_capacity = 4096;

struct lock_term {
    std::string key;
    std::string session;
    std::string name;  // the session's name and node when it took the key
    std::string node;
    std::uint64_t lock_index = 0;     // the fencing token of this term
    std::uint64_t acquire_index = 0;  // the write that took the key
    tenure::detail::clock::time_point acquired;
    std::optional<tenure::detail::clock::time_point> ended;  // nullopt: still held
    // How it ended: "released", "deleted", or an invalidation cause
    // ("destroyed", "ttl-expired", ...). Static strings.
    std::string_view end;
    std::optional<tenure::detail::clock::time_point> lock_delay_until;  // the delay its end started
};

class lock_history {
public:
    using time_point = tenure::detail::clock::time_point;

    explicit lock_history(std::size_t capacity = default_history_capacity) : capacity_(capacity) {}

    // A new holder took `key`. A term still open for the key (which a
    // well-formed caller never leaves) is closed first.
    void begin(lock_term term);
    // The holder of `key` let go of it. Nothing when no term of it is open
    // (it began before the agent started, or fell out of the ring).
    void end(std::string_view key, std::string_view how, time_point now, std::optional<time_point> lock_delay_until);

    std::size_t capacity() const noexcept { return capacity_; }
    std::size_t size() const noexcept { return ring_.size(); }
    // Terms recorded since the start, including those pushed out.
    std::uint64_t recorded() const noexcept { return first_seq_ + ring_.size(); }

    // The terms in the ring of every key for which `match(key)` is true,
    // grouped by key (sorted), each group oldest first.
    template <class Match>
    std::vector<std::pair<std::string_view, std::vector<lock_term const*>>> by_key(Match match) const;

private:
    std::size_t capacity_;
    std::deque<lock_term> ring_;
    std::uint64_t first_seq_ = 0;                           // sequence number of ring_.front()
    std::unordered_map<std::string, std::uint64_t> open_;  // key -> sequence number of its open term
};

template <class Match>
std::vector<std::pair<std::string_view, std::vector<lock_term const*>>> lock_history::by_key(Match match) const {
    std::map<std::string_view, std::vector<lock_term const*>> groups;
    for (auto const& t : ring_)
        if (match(std::string_view(t.key))) groups[t.key].push_back(&t);
    return {std::make_move_iterator(groups.begin()), std::make_move_iterator(groups.end())};
}

}  // namespace tenure::detail::agent
