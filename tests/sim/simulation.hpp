// Deterministic simulation of tenure's Consul-style leader election (issue #7).
//
// One virtual clock, one seeded scheduler, no sockets, no threads. A schedule
// is fully determined by its seed: `tenure_sim --seed N --verbose` replays it
// event by event.
//
// What is the REAL library code and what is a model:
//
//   REAL  detail::agent::state_machine (src/agent/state.cpp): sessions with
//         TTL (invalidated at receive time + 2xTTL), lock-delay, KV
//         acquire/release, LockIndex, watch() wake-ups for blocking queries,
//         its seeded RNG for blocking-query jitter. Driven with virtual time.
//   REAL  detail::session_fsm (src/core/session_fsm.hpp): each
//         client's renewal schedule, jeopardy retries, local deadline (send
//         time of the last acknowledged renewal + TTL), loss.
//   REAL  detail::acquire_backoff: the candidate's retry after a lock-delay
//         refusal.
//   REAL  tenure::fence (src/fence.cpp): the fenced resource's gate.
//   MODEL of the agent's HTTP blocking loop (src/agent/http_api.cpp,
//         block_or_answer): answer at once for index 0, when the key's index
//         passed the client's, or at wait + wait/16 jitter; the missing-key
//         floor rule. Requests call the state machine directly (the HTTP
//         codec is covered by the unit tests and the fuzzers).
//   MODEL of the client, step for step, as callback chains instead of
//         coroutines (the library reads std::chrono::steady_clock and asio
//         timers directly, so it cannot run in virtual time unchanged):
//           session_impl::renew_loop (src/core/session.cpp): wake at
//             fsm.next_wakeup(), check_deadline, renewal attempts capped at
//             min(local deadline, sent + max(TTL/4, retry interval)),
//             404 -> invalidated, mark_lost -> every scope loses;
//           consul_session::acquire (src/consul/lock.cpp): consistent read
//             -> block on index while held by another (learn its LockDelay
//             once) -> freed() -> a one-op `lock` transaction (its answer
//             carries the LockIndex, the token) -> lost race: read again;
//             lock-delay: backoff.refused(), then the lock guarded by the
//             free key's index (check-index / check-not-exists) until it is
//             not refused by the lock-delay, else read again; transient
//             errors -> pause_and_grow; raced against the session's loss
//             (election::acquire_impl). Every candidate is alone in its
//             process, so its retry spread is 0 (acquire_backoff's default);
//             quick_retake is off (the default);
//           consul_lock_scope::monitor: blocking reads from the ModifyIndex,
//             loss when the key is gone or held by another session;
//           campaign_loop (src/core/campaign.cpp): create session -> acquire ->
//             run(work) until lost or the work ends -> release (also after a
//             local expiry, begin_release) -> retry_backoff -> again;
//           the consul::client request deadlines (request timeout; blocking
//             reads wait + wait/16 + margin).
//         Scaled time constants (blocking wait, request timeout) keep
//         schedules short; the ratios that matter for safety (TTL, 2xTTL,
//         lock-delay, renew every TTL/2) are the library's.
//   MODEL of the application: while its scope is held it does "work" every
//         TTL/4 (its local clock); each unit of work is a write stamped with
//         the scope's fencing token and sent to a fenced resource.
//
// Faults: per-message delay, drop (a black hole: the client waits for its
// request deadline), duplicate, reorder (independent delays); a client
// partitioned from the agent; a client paused (stop-the-world: it processes
// nothing, its timers and messages are handled late, in their original
// order); a client crashed and restarted (new session); bounded clock-rate
// drift per client. Faults stop at the heal time; liveness is checked after.
//
// Invariants, checked after every event:
//   1. at most one client believes it leads a key (holds a scope, its
//      session is not lost, and its local clock is before its local deadline);
//   2. the agent's holder of a key is a live session, and the key's LockIndex
//      grows whenever a new holder takes it;
//   3. the fenced resource never admits two terms with one token, and the
//      tokens it admits never decrease;
//   4. work of one term never follows work of a later term (a deposed,
//      paused or crashed leader's work never overlaps its successor's);
//   5. liveness: after the heal, every key has a leader within a bound.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace tenure::sim {

struct sim_options {
    bool verbose = false;
    // The planted bug: session_fsm::ignore_local_deadline_for_testing() on
    // every client. Expected to break invariant 1 or 4.
    bool planted_bug = false;
    // Largest clock-rate error of a client (0.02: its clock runs 2% fast or slow).
    double max_drift = 0.02;
    // Pauses up to 3x the safety margin instead of 0.9x: safety then rests on
    // the fence alone (invariant 4 is reported, not enforced).
    bool long_pauses = false;
};

struct sim_stats {
    std::uint64_t events = 0;
    std::uint64_t terms = 0;            // elections won
    std::uint64_t work = 0;             // units of work issued
    std::uint64_t late_work = 0;        // work issued past the issuer's local deadline (a pause)
    std::uint64_t overlapping_work = 0; // work after a later term's work (only counted with long_pauses)
    std::uint64_t fence_admitted = 0;
    std::uint64_t fence_refused = 0;    // stale writes the fence turned away
    std::uint64_t lock_delay_refusals = 0;
    std::uint64_t invalidations = 0;
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
