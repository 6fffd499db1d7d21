#!/usr/bin/env bash
# Builds tenure with g++'s AddressSanitizer and UndefinedBehaviorSanitizer and
# runs the unit, integration and simulation suites under them (issue #7).
#   SANITIZE_BUILD_DIR=dir   build directory (default: build-asan)
#   extra arguments go to ctest, e.g. `bash scripts/sanitize.sh -R unit`
# Benchmarks, examples, the guide's snippets and the consumer tests are left
# out (they add build time and disk, and no code the suites do not already run). Any sanitizer report stops
# the test that hit it (halt_on_error), so ctest fails.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build_dir=${SANITIZE_BUILD_DIR:-build-asan}
san_flags="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"

started=$(date +%s)
# Debug (-O0): g++ 12 with -fsanitize=undefined at -O2 spends more than
# half an hour on one coroutine-heavy file (src/agent/server.cpp); -O0
# compiles the whole tree in a fraction of that and the suites stay fast.
# -g1 keeps the line tables a report's stack needs at a third of -g's disk.
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-g1 \
  -DCMAKE_CXX_FLAGS="$san_flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DTENURE_BUILD_BENCH=OFF -DTENURE_BUILD_EXAMPLES=OFF -DTENURE_SIM_SHARD=300 -DTENURE_UNITY_TESTS=ON
# Only what the suites run (the integration tests pull in the tenure binary):
# the guide's snippets and the CLI's other users would add a gigabyte of
# ASan binaries and minutes of build for no test of this stage.
cmake --build "$build_dir" -j"$(nproc)" \
  --target tenure_unit_tests tenure_integration_tests tenure_sim tenure_sim_cancel
built=$(date +%s)

# Leak checking needs ptrace-like access some sandboxes refuse; probe it once
# with a tiny leaking program rather than failing every test.
detect_leaks=1
probe_dir=$(mktemp -d)
trap 'rm -rf "$probe_dir"' EXIT
printf 'int main() { new int[4]; return 0; }\n' >"$probe_dir/leak.cpp"
if g++ -fsanitize=address -o "$probe_dir/leak" "$probe_dir/leak.cpp" 2>/dev/null; then
  if ASAN_OPTIONS=detect_leaks=1 "$probe_dir/leak" 2>&1 | grep -q "LeakSanitizer has encountered a fatal error"; then
    echo "sanitize: LeakSanitizer cannot run here; leak detection off"
    detect_leaks=0
  fi
fi

export ASAN_OPTIONS="halt_on_error=1:detect_leaks=${detect_leaks}:abort_on_error=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
status=0
# The simulation's 10 000 schedules run in the plain build; here one shard of
# 300 (TENURE_SIM_SHARD above; 340 s for 1 250 under ASan) and 240 long-pause
# schedules, with the planted-bug and replay tests, keep the stage short.
ctest --test-dir "$build_dir" --output-on-failure -j2 -L 'unit|integration|sim' -E 'sim[.]schedules_[1-7]' "$@" ||
  status=$?
finished=$(date +%s)
echo "sanitize: build $((built - started)) s, tests $((finished - built)) s"
exit "$status"
