#!/usr/bin/env bash
# Installs the dependencies, builds, and runs the whole test suite through CTest.
#   BUILD_DIR=dir   build directory (default: build)
#   extra arguments go to ctest, e.g. `bash scripts/test.sh -R integration`
# Without extra arguments (CI) a bounded fuzzing run (scripts/fuzz.sh) follows
# the suite (TENURE_SKIP_FUZZ=1 skips it). TENURE_SANITIZE=1 also runs the
# suites again under ASan + UBSan (scripts/sanitize.sh; not yet in CI: its
# cold build alone takes tens of minutes on 2 cores).
# The exit code is the first failing stage's.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh
bash scripts/build.sh
if (($#)); then
  exec ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j2 "$@"
fi
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j2
[[ -z "${TENURE_SANITIZE:-}" ]] || bash scripts/sanitize.sh
[[ -n "${TENURE_SKIP_FUZZ:-}" ]] || bash scripts/fuzz.sh
