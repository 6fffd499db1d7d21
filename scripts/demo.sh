#!/usr/bin/env bash
# The tenure demo: a "nightly report" that must run on exactly one of three
# nodes. Installs the dependencies, builds, then runs examples/cron_three_nodes:
# an embedded agent and three node processes; the leader is SIGKILLed midway
# (takeover after TTL detection and lock-delay), then the next leader shuts
# down cleanly (takeover at once); the agent serves its web UI (-ui) and the
# demo prints its URL. The demo verifies that no two nodes ever
# ran the report at once and that fencing tokens only grew; its exit code says so.
#   BUILD_DIR=dir   build directory (default: build)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Only what the demo runs: the packages to build it, the `tenure` binary and the
# example (not the tests, benchmarks or docs).
bash scripts/setup.sh demo
BUILD_TARGETS="tenure_cli cron_three_nodes" bash scripts/build.sh \
  -DTENURE_BUILD_TESTS=OFF -DTENURE_BUILD_BENCH=OFF -DTENURE_BUILD_DOCS=OFF -DTENURE_BUILD_EXAMPLES=ON

BUILD_DIR=${BUILD_DIR:-build}
echo "demo: running examples/cron_three_nodes"
exec "$BUILD_DIR/examples/cron_three_nodes" --tenure "$BUILD_DIR/tenure"
