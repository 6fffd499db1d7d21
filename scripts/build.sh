#!/usr/bin/env bash
# Configures (Ninja, RelWithDebInfo) and builds tenure, its tests, tools and benchmarks.
#   BUILD_DIR=dir   build directory (default: build)
#   BUILD_TARGETS="a b"  build only these targets (default: all)
#   extra arguments are passed to the CMake configure step, e.g. -DTENURE_BUILD_BENCH=OFF
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build_dir=${BUILD_DIR:-build}
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@"
targets=()
for t in ${BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build_dir" -j"$(nproc)" "${targets[@]}"
