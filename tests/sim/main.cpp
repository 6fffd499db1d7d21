// tenure_sim: runs randomized schedules of the deterministic simulation.
//
//   tenure_sim [--schedules N] [--base-seed S]   N schedules, seeds S, S+1, ... (default 10000 from 1)
//   tenure_sim --seed N [--verbose]              one schedule; --verbose prints its trace
//   --planted-bug        disable the clients' local deadline (session_fsm's test-only switch)
//   --expect-violation   succeed only if some schedule breaks an invariant (for the planted bug)
//   --max-drift X        largest clock-rate error of a client (default 0.02)
//   --long-pauses        pauses beyond the safety margin: only the fence protects the resource
//   --soak SECONDS       schedules from the base seed on until SECONDS of wall time have passed
//
// Exit code: 0 when every schedule passed (or, with --expect-violation, when
// one failed), 1 otherwise. A failure prints its seed and the command that
// replays it.
#include "simulation.hpp"

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

void usage() {
    std::fprintf(stderr,
                 "usage: tenure_sim [--schedules N] [--base-seed S] [--seed N] [--verbose] [--planted-bug]\n"
                 "                  [--expect-violation] [--max-drift X] [--long-pauses] [--soak SECONDS]\n");
}

}  // namespace

int main(int argc, char** argv) {
    tenure::sim::sim_options opt;
    std::uint64_t schedules = 10000;
    std::uint64_t base_seed = 1;
    bool single = false;
    bool expect_violation = false;
    double soak_seconds = 0;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto value = [&]() -> char const* {
            if (i + 1 >= argc) {
                usage();
                std::exit(2);
            }
            return argv[++i];
        };
        if (a == "--schedules") schedules = std::strtoull(value(), nullptr, 10);
        else if (a == "--base-seed") base_seed = std::strtoull(value(), nullptr, 10);
        else if (a == "--seed") {
            base_seed = std::strtoull(value(), nullptr, 10);
            schedules = 1;
            single = true;
        } else if (a == "--verbose") opt.verbose = true;
        else if (a == "--planted-bug") opt.planted_bug = true;
        else if (a == "--expect-violation") expect_violation = true;
        else if (a == "--max-drift") opt.max_drift = std::strtod(value(), nullptr);
        else if (a == "--long-pauses") opt.long_pauses = true;
        else if (a == "--soak") {
            soak_seconds = std::strtod(value(), nullptr);
            schedules = UINT64_MAX;
        }
        else {
            usage();
            return 2;
        }
    }
    if (opt.max_drift < 0 || opt.max_drift >= 0.5) {
        std::fprintf(stderr, "tenure_sim: --max-drift must be in [0, 0.5)\n");
        return 2;
    }

    auto const started = std::chrono::steady_clock::now();
    tenure::sim::sim_stats total;
    std::uint64_t passed = 0, failed = 0;
    for (std::uint64_t i = 0; i < schedules; ++i) {
        if (soak_seconds > 0 &&
            std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count() >= soak_seconds)
            break;
        std::uint64_t seed = base_seed + i;
        auto r = tenure::sim::run_schedule(seed, opt);
        total.events += r.stats.events;
        total.terms += r.stats.terms;
        total.work += r.stats.work;
        total.late_work += r.stats.late_work;
        total.overlapping_work += r.stats.overlapping_work;
        total.fence_admitted += r.stats.fence_admitted;
        total.fence_refused += r.stats.fence_refused;
        total.lock_delay_refusals += r.stats.lock_delay_refusals;
        total.invalidations += r.stats.invalidations;
        total.agent_restarts += r.stats.agent_restarts;
        total.virtual_seconds += r.stats.virtual_seconds;
        if (r.ok) {
            ++passed;
            continue;
        }
        ++failed;
        std::printf("VIOLATION (seed %" PRIu64 "): %s\n  schedule: %s\n  replay: tenure_sim --seed %" PRIu64
                    " --verbose%s%s%s\n",
                    seed, r.violation.c_str(), r.summary.c_str(), seed, opt.planted_bug ? " --planted-bug" : "",
                    opt.long_pauses ? " --long-pauses" : "",
                    opt.max_drift != 0.02 ? (" --max-drift " + std::to_string(opt.max_drift)).c_str() : "");
        if (expect_violation || single) break;
    }
    double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::printf("tenure_sim: %" PRIu64 " schedules (%.0f virtual s) in %.2f s wall: %" PRIu64 " requests, %" PRIu64
                " terms, %" PRIu64 " units of work (%" PRIu64 " past a local deadline after a pause, %" PRIu64
                " overlapping), fence admitted %" PRIu64 " / refused %" PRIu64 " stale, %" PRIu64
                " lock-delay refusals, %" PRIu64 " invalidations, %" PRIu64 " agent crashes and restarts\n",
                passed + failed, total.virtual_seconds, wall, total.events, total.terms, total.work, total.late_work,
                total.overlapping_work, total.fence_admitted, total.fence_refused, total.lock_delay_refusals,
                total.invalidations, total.agent_restarts);
    if (expect_violation) {
        if (failed > 0) {
            std::printf("expected violation found: the simulation catches the planted bug\n");
            return 0;
        }
        std::printf("no violation found, but one was expected\n");
        return 1;
    }
    return failed == 0 ? 0 : 1;
}
