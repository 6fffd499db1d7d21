#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ with clang-14 (ASan + UBSan) and runs
# each for a bounded time from the seed corpus in fuzz/corpus/<target>/.
#   FUZZ_BUILD_DIR=dir   build directory (default: build-fuzz)
#   FUZZ_SECONDS=N       run time cap per target (default: 60)
#   FUZZ_RUNS=N          inputs per target (default: 300000; 0: until FUZZ_SECONDS)
#   FUZZ_SEED=N          libFuzzer's seed (default: 1, so that a CI run is
#                        repeatable: the same inputs in the same order)
#   FUZZ_TARGETS="a b"   which targets (default: all four)
# New inputs the fuzzer finds stay in <build>/corpus/<target>/ (the repo's
# corpus is only read). A crash leaves its input in <build>/artifacts/ and
# the script prints the command that reproduces it; the exit code is then 1.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build_dir=${FUZZ_BUILD_DIR:-build-fuzz}
seconds=${FUZZ_SECONDS:-60}
runs=${FUZZ_RUNS:-300000}
[ "$runs" = 0 ] && runs=-1  # libFuzzer's "no limit" (its -runs=0 runs only the corpus)
seed=${FUZZ_SEED:-1}
targets=${FUZZ_TARGETS:-"fuzz_agent_http fuzz_agent_bodies fuzz_etcd_codec fuzz_consul_kv_list"}
cxx=${FUZZ_CXX:-clang++-14}

if ! command -v "$cxx" >/dev/null 2>&1; then
  echo "fuzz: $cxx not found (scripts/setup.sh installs clang-14 and libclang-rt-14-dev)" >&2
  exit 1
fi

started=$(date +%s)
cmake -S fuzz -B "$build_dir" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$build_dir" -j"$(nproc)"
built=$(date +%s)

export ASAN_OPTIONS=${ASAN_OPTIONS:-"halt_on_error=1:detect_leaks=1"}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-"halt_on_error=1:print_stacktrace=1"}
status=0
passed=0
failed=0
for t in $targets; do
  work="$build_dir/corpus/$t"
  artifacts="$build_dir/artifacts/$t/"
  mkdir -p "$work" "$artifacts"
  if [ "$runs" = -1 ]; then echo "fuzz: $t for ${seconds}s, seed $seed"; else echo "fuzz: $t, $runs inputs (at most ${seconds}s), seed $seed"; fi
  if ! "$build_dir/$t" -seed="$seed" -runs="$runs" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=16384 \
      -print_final_stats=1 -artifact_prefix="$artifacts" "$work" "fuzz/corpus/$t" >"$build_dir/$t.log" 2>&1; then
    status=1
    failed=$((failed + 1))
    tail -n 60 "$build_dir/$t.log"
    for a in "$artifacts"*; do
      [ -e "$a" ] || continue
      echo "fuzz: $t failed on $a; reproduce with: $build_dir/$t $a"
    done
  else
    passed=$((passed + 1))
    grep -E "^stat::number_of_executed_units|^stat::new_units_added|^Done " "$build_dir/$t.log" | tr '\n' ' '
    echo
  fi
done
finished=$(date +%s)
echo "fuzz: build $((built - started)) s, runs $((finished - built)) s"
echo "fuzz: $passed passed, $failed failed"
exit "$status"
