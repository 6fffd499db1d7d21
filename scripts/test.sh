#!/usr/bin/env bash
# Installs the dependencies, builds, and runs the whole test suite through CTest.
#   BUILD_DIR=dir   build directory (default: build)
#   extra arguments go to ctest, e.g. `bash scripts/test.sh -R integration`
# The exit code is ctest's.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh
bash scripts/build.sh
exec ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j2 "$@"
