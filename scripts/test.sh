#!/usr/bin/env bash
# Installs the dependencies, builds, and runs the whole test suite through CTest.
#   BUILD_DIR=dir   build directory (default: build)
#   extra arguments go to ctest, e.g. `bash scripts/test.sh -R integration`
# Without extra arguments (CI) three more stages follow the suite: the unit,
# integration and simulation suites again under ASan + UBSan
# (scripts/sanitize.sh, a Debug build of its own), the election, semaphore
# and campaign integration suites under ThreadSanitizer on a 4-thread
# io_context (scripts/tsan.sh, another Debug build) and a bounded, repeatable
# fuzzing run (scripts/fuzz.sh). TENURE_SKIP_SANITIZE=1 / TENURE_SKIP_TSAN=1 /
# TENURE_SKIP_FUZZ=1 skip them. The exit code is the first failing stage's.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
script_started=$(date +%s)

bash scripts/setup.sh
# Everything on, whatever an earlier scripts/demo.sh left in the cache.
# -g1 (line tables only) instead of RelWithDebInfo's -g: the suite needs no
# more than a stack's file:line, and full DWARF for coroutine-heavy code is a
# fifth of the build's compile time (consul_client_test.cpp: 69 s at -g,
# 55 s at -g1, g++ 12 -O2). A build directory only scripts/build.sh configured keeps -g.
# The integration tests compile in unity groups (tests/integration/CMakeLists.txt).
bash scripts/build.sh -DTENURE_BUILD_TESTS=ON -DTENURE_BUILD_TOOLS=ON -DTENURE_BUILD_BENCH=ON \
  -DTENURE_BUILD_EXAMPLES=ON -DTENURE_BUILD_DOCS=ON "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG" \
  -DTENURE_UNITY_TESTS=ON
if (($#)); then
  exec ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j2 "$@"
fi
# Each stage's wall time goes to the log, so that a slow CI run says where.
stage_started=$script_started
stage() {
  local now
  now=$(date +%s)
  echo "test.sh: $1 took $((now - stage_started)) s (at $((now - script_started)) s)"
  stage_started=$now
}
stage "set-up and build"
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j2
stage "the suite"
if [[ -z "${TENURE_SKIP_SANITIZE:-}" ]]; then bash scripts/sanitize.sh; stage "ASan + UBSan"; fi
if [[ -z "${TENURE_SKIP_TSAN:-}" ]]; then bash scripts/tsan.sh; stage "TSan"; fi
if [[ -z "${TENURE_SKIP_FUZZ:-}" ]]; then bash scripts/fuzz.sh; stage "fuzzing"; fi
