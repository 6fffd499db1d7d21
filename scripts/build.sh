#!/usr/bin/env bash
# Configures (Ninja, RelWithDebInfo) and builds tenure, its tests, tools and benchmarks.
#   BUILD_DIR=dir   build directory (default: build)
#   extra arguments are passed to the CMake configure step, e.g. -DTENURE_BUILD_BENCH=OFF
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build_dir=${BUILD_DIR:-build}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
cmake --build "$build_dir" -j"$(nproc)"
