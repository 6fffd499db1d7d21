/// @file
/// Internal: the one source of randomness in tenure (check IDs, retry
/// spreads, the agent's session IDs and blocking-query jitter). A seed comes
/// from std::random_device; in the simulation build (TENURE_SIMULATED_TIME)
/// from a sequence the schedule seeds, so a schedule replays exactly.
#pragma once

#include <tenure/detail/clock.hpp>

#include <cstdint>
#include <random>

namespace tenure::detail {

/// splitmix64: a bijection of the counter, so no two steps of one sequence
/// give the same seed.
inline std::uint64_t splitmix64(std::uint64_t& counter) {
    std::uint64_t z = (counter += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/// A fresh 64-bit seed for a pseudo-random generator.
inline std::uint64_t random_seed() {
#if defined(TENURE_SIMULATED_TIME)
    return splitmix64(sim::world().seed);  // over the world's seed
#else
    // std::random_device once per thread (it is a system call, or a file
    // opened and read: 4% of a re-lead's CPU when it ran on every acquire),
    // then splitmix64 from there. thread_local: an application may run
    // io_contexts on several threads.
    thread_local std::uint64_t counter = [] {
        std::random_device rd;
        return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
    }();
    return splitmix64(counter);
#endif
}

}  // namespace tenure::detail
