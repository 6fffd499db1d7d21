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

bash scripts/setup.sh
# Everything on, whatever an earlier scripts/demo.sh left in the cache.
bash scripts/build.sh -DTENURE_BUILD_TESTS=ON -DTENURE_BUILD_TOOLS=ON -DTENURE_BUILD_BENCH=ON \
  -DTENURE_BUILD_EXAMPLES=ON -DTENURE_BUILD_DOCS=ON
if (($#)); then
  exec ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j2 "$@"
fi
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j2
[[ -n "${TENURE_SKIP_SANITIZE:-}" ]] || bash scripts/sanitize.sh
[[ -n "${TENURE_SKIP_TSAN:-}" ]] || bash scripts/tsan.sh
[[ -n "${TENURE_SKIP_FUZZ:-}" ]] || bash scripts/fuzz.sh
