#!/usr/bin/env bash
# Installs what tenure needs to build, test and run its demo on Debian bookworm.
#
#   bash scripts/setup.sh         everything: build, tests, docs, fuzzing
#   bash scripts/setup.sh demo    only what building the library, the CLI and the
#                                 examples needs (scripts/demo.sh)
#
# Idempotent: packages already installed are detected with `dpkg -s`, and
# nothing (not even `apt-get update`) runs when none is missing. Run as root,
# or as a user with sudo.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git curl libssl-dev
  # Boost 1.81 by name: bookworm's default Boost (1.74) lacks the newer Asio and JSON pieces.
  libboost1.81-dev libboost-json1.81-dev libboost-url1.81-dev
  libboost-test1.81-dev libboost-program-options1.81-dev
  etcd-server etcd-client
  gnuplot-nox python3 procps netcat-openbsd
  # the agent UI's browser test (tests/ui): headless Chromium driven over WebDriver
  chromium chromium-driver
  # the reference docs (docs target, docs.reference test)
  doxygen
  # Fuzzing (scripts/fuzz.sh): clang 14, its libFuzzer/sanitizer runtimes, llvm-symbolizer.
  clang-14 libclang-rt-14-dev llvm-14
)

if [[ "${1:-}" == demo ]]; then
  packages=(
    build-essential cmake ninja-build ccache pkg-config libssl-dev
    libboost1.81-dev libboost-json1.81-dev libboost-url1.81-dev libboost-program-options1.81-dev
  )
elif (($#)); then
  echo "setup: unknown profile '$1' (expected: demo, or nothing for everything)" >&2
  exit 2
fi

missing=()
for pkg in "${packages[@]}"; do
  if ! dpkg -s "$pkg" 2>/dev/null | grep -q '^Status: install ok installed'; then
    missing+=("$pkg")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} packages already installed"
  exit 0
fi

if ((EUID == 0)); then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  echo "setup: missing packages (${missing[*]}); run this script as root or install sudo" >&2
  exit 1
fi

echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
"${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
echo "setup: done"
