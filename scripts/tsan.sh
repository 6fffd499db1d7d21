#!/usr/bin/env bash
# Builds the integration tests with g++'s ThreadSanitizer and runs the
# election, semaphore and campaign suites (Consul and etcd) with their
# io_context on four threads, as a user following the library's threading
# rule runs it: every object of one client on one strand (issue #19 item 8;
# tests/integration/run_on.hpp, TENURE_TEST_THREADS).
#   TSAN_BUILD_DIR=dir      build directory (default: build-tsan)
#   TENURE_TEST_THREADS=N   threads per io_context (default: 4)
#   extra arguments go to ctest, e.g. `bash scripts/tsan.sh --repeat until-fail:5`
# Only tenure_integration_tests, of the four files that hold those suites,
# and the `tenure` binary it starts are built (benchmarks, examples, docs and
# the other suites add build time and run no threads). The agents the tests start are that TSan-built binary too. Any
# report, from the test process or an agent, fails the stage.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build_dir=${TSAN_BUILD_DIR:-build-tsan}
threads=${TENURE_TEST_THREADS:-4}
suites='election_core|release_retry|semaphore_core|fencing|etcd_election|etcd_semaphore'
# The files that hold those suites: the binary is built from them alone.
suite_files='election_test.cpp;semaphore_test.cpp;etcd_election_test.cpp;etcd_semaphore_test.cpp'
# -Wno-tsan: Asio's fenced_block uses std::atomic_thread_fence, which TSan
# does not model and g++ warns about in every file that includes Asio. Those
# fences only back up the scheduler's mutex, which TSan does see.
tsan_flags="-fsanitize=thread -Wno-tsan"

# TSan needs the address-space layout it was built for; some kernels'
# mmap randomization breaks that ("FATAL: ThreadSanitizer: unexpected memory
# mapping"), and running without ASLR (setarch -R) is the workaround. Probe
# once with a tiny racy program: it must run and report its race.
probe_dir=$(mktemp -d)
trap 'rm -rf "$probe_dir"' EXIT
cat >"$probe_dir/race.cpp" <<'EOF'
#include <thread>
int shared;
int main() { std::thread t([] { ++shared; }); ++shared; t.join(); }
EOF
g++ -fsanitize=thread -g -pthread -o "$probe_dir/race" "$probe_dir/race.cpp"
reports_race() { local out; out=$("$@" 2>&1 || true); grep -q "WARNING: ThreadSanitizer: data race" <<<"$out"; }
run=()
if ! reports_race "$probe_dir/race"; then
  if reports_race setarch "$(uname -m)" -R "$probe_dir/race"; then
    echo "tsan: ThreadSanitizer needs ASLR off here; running the tests under setarch -R"
    run=(setarch "$(uname -m)" -R)
  else
    echo "tsan: ThreadSanitizer does not work here (the probe reported no race):" >&2
    { "$probe_dir/race" 2>&1 || true; } | head -5 >&2
    exit 1
  fi
fi

started=$(date +%s)
# Debug (-O0 -g): the cold build is the cost of this stage, and -O0 compiles
# fastest (src/agent/server.cpp alone: 24 s at -O0, 41 s at -O1, 54 s at
# -O2 with TSan, g++ 12); the suites are bound by the agent's replies, not
# by the code's speed. -g1: line tables for the reports' stacks, less disk.
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-g1 \
  -DCMAKE_CXX_FLAGS="$tsan_flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" \
  -DTENURE_BUILD_TESTS=ON -DTENURE_BUILD_TOOLS=ON \
  -DTENURE_BUILD_BENCH=OFF -DTENURE_BUILD_EXAMPLES=OFF -DTENURE_BUILD_DOCS=OFF \
  "-DTENURE_INTEGRATION_TESTS=$suite_files" -DTENURE_UNITY_TESTS=ON
cmake --build "$build_dir" -j"$(nproc)" --target tenure_integration_tests
built=$(date +%s)

# Reports go to files (log_path), one per process: an agent's stderr is a
# file the test never shows, and its report must fail the stage too.
reports="$build_dir/tsan-reports"
rm -rf "$reports"
mkdir -p "$reports"
reports=$(cd "$reports" && pwd)
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 log_path=$reports/report"
status=0
TENURE_TEST_THREADS=$threads "${run[@]}" ctest --test-dir "$build_dir" -L integration \
  -R "^integration\.agent\.($suites)\$" --output-on-failure -j2 "$@" || status=$?
finished=$(date +%s)
if compgen -G "$reports/report.*" >/dev/null; then
  echo "tsan: ThreadSanitizer reports:"
  cat "$reports"/report.*
  status=1
fi
echo "tsan: build $((built - started)) s, tests $((finished - built)) s"
exit "$status"
