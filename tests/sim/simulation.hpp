// Deterministic simulation of tenure (issues #7, #18): the shipped library in
// virtual time.
//
// One io_context, one seeded schedule, no sockets in use, no threads. The
// library is built again with TENURE_SIMULATED_TIME (tests/sim/CMakeLists.txt):
// every clock read and timer of src/ goes through include/tenure/detail/clock.hpp,
// which then gives the virtual clock of detail/simulated_time.hpp. That clock
// jumps to the next timer whenever nothing is ready, so a minute of leases,
// lock-delays and blocking queries runs in milliseconds. Randomness (check IDs,
// retry spreads, the agent's session IDs and blocking-query jitter) comes from
// detail/random.hpp, seeded by the schedule. A schedule is fully determined by
// its seed: `tenure_sim --seed N --verbose` replays it byte for byte.
//
// Nothing here is a model of the library. Each client is a consul::client
// whose transport is the agent's own in-process connection, behind a fault
// injector (world.hpp); it runs, as a user would:
//   - an election used directly: session::create, election::acquire,
//     leadership_scope::run(work), release, again (and a new session after a loss);
//   - or tenure::campaign with the same work as its body;
//   - or a tenure::semaphore of two permits;
//   - and client 0 a leader_observer of job/0.
// The agent is the real tenure::agent (state machine, HTTP API semantics,
// blocking queries, TTL timers, lock-delay) on a process of its own.
//
// Faults, until the heal time: per request a delay each way, a request lost
// on the way, an answer lost after the request was applied, a duplicate
// (applied twice), a connection reset, 429 and 500/503 answers (world.hpp,
// fault_rates); reordering across connections (independent delays); a client
// partitioned from the agent; stop-the-world pauses of a client (nothing of
// it runs, its timers and answers are handled late) and of the agent; per
// process clock drift (+-max_drift) and clock offsets.
//
// Invariants (schedule.cpp, checker), checked as things happen:
//   1. on one key, no two clients' work under run() overlaps in virtual time,
//      from the body starting (the acquire resolved) to its end (cancelled on
//      loss, or finished); a semaphore never has more than its limit;
//   2. the fencing tokens of successive terms of a key strictly increase, and
//      a leader_observer never sees one go back;
//   3. the agent never shows a key held by a session it does not know;
//   4. liveness: once the faults stop, every key with a candidate has a
//      leader within 2 x TTL + lock-delay + 36 s (a follower whose blocking
//      query's answer was lost just before the heal waits out its deadline,
//      30 s + 30/16 s + 1 s);
//   5. after a clean shutdown (every loop cancelled) no session and no held
//      key is left on the agent, and nothing of the library is left in the
//      io_context.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace tenure::sim {

struct sim_options {
    bool verbose = false;
    // The planted bug: session_fsm::ignore_local_deadline_for_testing() on
    // every client's sessions. Expected to break invariant 1.
    bool planted_bug = false;
    // Largest clock-rate error of a client (0.02: its clock runs 2% fast or slow).
    double max_drift = 0.02;
    // Pauses up to 3x the safety margin instead of 0.9x: safety then rests on
    // the fence alone (invariant 4 is reported, not enforced).
    bool long_pauses = false;
};

struct sim_stats {
    std::uint64_t events = 0;  // requests through the fault injector
    std::uint64_t terms = 0;            // elections won
    std::uint64_t work = 0;             // units of work issued
    std::uint64_t late_work = 0;        // work issued past the issuer's local deadline (a pause)
    std::uint64_t overlapping_work = 0; // work after a later term's work (only counted with long_pauses)
    std::uint64_t fence_admitted = 0;
    std::uint64_t fence_refused = 0;    // stale writes the fence turned away
    std::uint64_t lock_delay_refusals = 0;
    std::uint64_t invalidations = 0;
    std::uint64_t agent_restarts = 0;   // crashes recovered from the data directory
    double virtual_seconds = 0;
};

struct sim_result {
    bool ok = true;
    std::string violation;  // what broke, when ok is false
    std::string summary;    // the schedule's parameters
    sim_stats stats;
};

// Runs one schedule, fully determined by `seed`.
sim_result run_schedule(std::uint64_t seed, sim_options const& options);

}  // namespace tenure::sim
