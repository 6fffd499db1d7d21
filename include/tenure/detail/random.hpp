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

/// A fresh 64-bit seed for a pseudo-random generator.
inline std::uint64_t random_seed() {
#if defined(TENURE_SIMULATED_TIME)
    // splitmix64 over the world's seed.
    std::uint64_t z = (sim::world().seed += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
#else
    std::random_device rd;
    return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
#endif
}

}  // namespace tenure::detail
