#!/usr/bin/env bash
# Checks the Debian package on a fresh Debian bookworm: builds the .deb
# (`cpack -G DEB`), debootstraps a minimal bookworm root into a temporary
# folder, installs the package there with apt (so its Depends are resolved
# from the archive), starts `tenure agent` inside the root on 127.0.0.1:<free
# port> and checks that it answers GET /v1/status/leader and
# PUT /v1/session/create. Cleans up (unmounts, removes the root) on any exit.
#
#   bash scripts/check_deb.sh            as root (debootstrap and chroot need it)
#
#   BUILD_DIR=dir    where the package is built (default: build-deb; library and
#                    CLI only, no tests, examples, benchmarks or docs)
#   DEB=file         check this .deb instead of building one
#   MIRROR=url       Debian mirror (default: the host's, else http://deb.debian.org/debian)
#   CACHE_DIR=dir    keeps the debootstrap tarball and apt's downloaded packages
#                    between runs (default: ~/.cache/tenure/check_deb); the root
#                    itself is always unpacked fresh. CACHE_DIR= disables it.
#   KEEP_ROOT=1      leave the root in place for inspection
#   DEMO=1           instead of the package: copy this checkout (git archive
#                    HEAD) into the fresh root, run `bash scripts/demo.sh` there
#                    as a new user would, and print the time from its start to
#                    the demo's first line (the README records the figure)
#
# Exits 0 when every check passed. Not part of .ci/run (a cold run downloads
# about 100 MB of packages); see its duration in the last line it prints.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
started=$SECONDS

say() { echo "check_deb: [$((SECONDS - started)) s] $*"; }
die() { echo "check_deb: FAIL: $*" >&2; exit 1; }

((EUID == 0)) || die "run as root (debootstrap and chroot need it)"
for tool in debootstrap curl python3; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    say "installing $tool"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$tool" >/dev/null </dev/null ||
      { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$tool" >/dev/null </dev/null; } ||
      die "cannot install $tool"
  fi
done

# ---- 1. the package ----------------------------------------------------------
if [[ "${DEMO:-0}" == 1 ]]; then
  say "demo mode: no package"
elif [[ -z "${DEB:-}" ]]; then
  build_dir=${BUILD_DIR:-build-deb}
  say "building the package in $build_dir"
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DTENURE_BUILD_TESTS=OFF -DTENURE_BUILD_EXAMPLES=OFF -DTENURE_BUILD_BENCH=OFF -DTENURE_BUILD_DOCS=OFF \
    -DTENURE_BUILD_TOOLS=ON >/dev/null
  cmake --build "$build_dir" -j"$(nproc)"
  rm -f "$build_dir"/tenure_*.deb
  (cd "$build_dir" && cpack -G DEB >/dev/null)
  DEB=$(ls "$build_dir"/tenure_*.deb)
fi
if [[ "${DEMO:-0}" != 1 ]]; then
  [[ -f "$DEB" ]] || die "no package at $DEB"
  DEB=$(realpath "$DEB")
  say "package $DEB ($(du -h "$DEB" | cut -f1))"
  dpkg-deb -f "$DEB" Depends | sed 's/^/check_deb: Depends: /'
fi

# ---- 2. a fresh bookworm root -------------------------------------------------
if [[ -z "${MIRROR:-}" ]]; then
  MIRROR=$(sed -n 's/^URIs: *\(http[^ ]*debian\)\/*$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n1)
  MIRROR=${MIRROR:-http://deb.debian.org/debian}
fi
cache_dir=${CACHE_DIR-${HOME:-/root}/.cache/tenure/check_deb}
root=$(mktemp -d /tmp/tenure-check-deb.XXXXXX)
agent_pid=""
mounted=()

cleanup() {
  local status=$?
  if [[ -n "$agent_pid" ]] && kill -0 "$agent_pid" 2>/dev/null; then
    kill "$agent_pid" 2>/dev/null || true
    wait "$agent_pid" 2>/dev/null || true
  fi
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    umount "${mounted[i]}" 2>/dev/null || umount -l "${mounted[i]}" 2>/dev/null || true
  done
  if [[ "${KEEP_ROOT:-0}" == 1 ]]; then
    say "root kept at $root"
  elif [[ -n "$root" && -d "$root" ]]; then
    # Never follow a mount that is still there into the host.
    if grep -q " $root/" /proc/mounts; then
      say "mounts remain under $root; not removing it"
    else
      rm -rf --one-file-system "$root"
    fi
  fi
  exit $status
}
trap cleanup EXIT
trap 'exit 130' INT TERM

tarball=""
if [[ -n "$cache_dir" ]]; then
  mkdir -p "$cache_dir/archives/partial"
  tarball=$cache_dir/bookworm-minbase.tgz
fi
if [[ -n "$tarball" && ! -f "$tarball" ]]; then
  say "downloading a bookworm minbase into $tarball (once)"
  debootstrap --variant=minbase --make-tarball="$tarball.part" bookworm "$root/tmp-tarball" "$MIRROR" >/dev/null ||
    die "debootstrap --make-tarball failed"
  mv "$tarball.part" "$tarball"
  rm -rf "$root/tmp-tarball"
fi
say "debootstrap bookworm minbase into $root ($MIRROR)"
if [[ -n "$tarball" ]]; then
  debootstrap --variant=minbase --unpack-tarball="$tarball" bookworm "$root" "$MIRROR" >"$root.log" 2>&1 ||
    { tail -20 "$root.log"; die "debootstrap failed"; }
else
  debootstrap --variant=minbase bookworm "$root" "$MIRROR" >"$root.log" 2>&1 ||
    { tail -20 "$root.log"; die "debootstrap failed"; }
fi
rm -f "$root.log"

mount -t proc proc "$root/proc" && mounted+=("$root/proc")
mount --bind /dev "$root/dev" && mounted+=("$root/dev")
if [[ -n "$cache_dir" ]]; then
  mount --bind "$cache_dir/archives" "$root/var/cache/apt/archives" && mounted+=("$root/var/cache/apt/archives")
fi
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
cat >"$root/etc/apt/sources.list" <<EOF
deb $MIRROR bookworm main
deb $MIRROR bookworm-updates main
EOF
in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "$@"; }

# ---- 3a. demo mode: the README's first command on the fresh root ----------------
if [[ "${DEMO:-0}" == 1 ]]; then
  mkdir -p "$root/root/tenure"
  git archive HEAD | tar -x -C "$root/root/tenure"
  say "bash scripts/demo.sh inside the root (installs, builds, runs)"
  demo_start=$SECONDS
  first_line=""
  # The demo program's own lines start after the build's; its first line is
  # the first one printed once the cron_three_nodes binary runs.
  while IFS= read -r line; do
    echo "  [$((SECONDS - demo_start)) s] $line"
    if [[ -z "$first_line" && "$line" == "demo: running"* ]]; then first_line=pending; continue; fi
    if [[ "$first_line" == pending ]]; then first_line=$((SECONDS - demo_start)); fi
  done < <(in_root bash -c 'cd /root/tenure && bash scripts/demo.sh' 2>&1; echo "demo: exit $?")
  [[ "$first_line" =~ ^[0-9]+$ ]] || die "the demo printed no line of its own"
  say "time to the demo's first line on a fresh bookworm root: ${first_line} s"
  exit 0
fi

# ---- 3. install the package with apt ------------------------------------------
cp "$DEB" "$root/tmp/"
deb_name=$(basename "$DEB")
say "apt-get install ./$deb_name inside the root"
in_root apt-get update -q >/dev/null || die "apt-get update failed inside the root"
in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "/tmp/$deb_name" \
  >"$root/tmp/apt.log" 2>&1 || { tail -30 "$root/tmp/apt.log"; die "apt-get install of the package failed"; }
say "installed: $(in_root dpkg-query -W -f='${Package} ${Version} (${Status})' tenure)"
in_root test -x /usr/bin/tenure || die "/usr/bin/tenure is missing"
in_root test -f /usr/include/tenure/election.hpp || die "the headers are missing"
in_root sh -c 'find /usr/lib -path "*/cmake/tenure/tenureConfig.cmake" | grep -q .' || die "the CMake package files are missing"

# ---- 4. run tenure agent inside the root ---------------------------------------
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
say "starting tenure agent on 127.0.0.1:$port inside the root"
# chroot and env exec, so $! is the agent's own pid (a backgrounded function
# would be a subshell's).
chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
  /usr/bin/tenure agent -http-addr "127.0.0.1:$port" -log-level warn >"$root/tmp/agent.out" 2>"$root/tmp/agent.err" &
agent_pid=$!
for _ in $(seq 100); do
  grep -q "listening on" "$root/tmp/agent.out" 2>/dev/null && break
  kill -0 "$agent_pid" 2>/dev/null || { cat "$root/tmp/agent.err"; die "tenure agent exited"; }
  sleep 0.1
done
grep -q "listening on http://127.0.0.1:$port" "$root/tmp/agent.out" ||
  { cat "$root/tmp/agent.err"; die "tenure agent did not report listening on 127.0.0.1:$port"; }

leader=$(curl -sf "http://127.0.0.1:$port/v1/status/leader") || die "GET /v1/status/leader failed"
[[ "$leader" == \"*\" ]] || die "GET /v1/status/leader answered $leader"
say "GET /v1/status/leader -> $leader"
created=$(curl -sf -X PUT -d '{"Name":"check_deb","TTL":"15s"}' "http://127.0.0.1:$port/v1/session/create") ||
  die "PUT /v1/session/create failed"
id=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["ID"])' "$created") ||
  die "PUT /v1/session/create answered $created"
say "PUT /v1/session/create -> $created"
info=$(curl -sf "http://127.0.0.1:$port/v1/session/info/$id") || die "GET /v1/session/info failed"
[[ "$info" == *"\"check_deb\""* ]] || die "GET /v1/session/info/$id answered $info"

kill -TERM "$agent_pid"
wait "$agent_pid" || die "tenure agent exited with $? after SIGTERM (expected 0)"
agent_pid=""
say "PASS in $((SECONDS - started)) s: the package installs on a fresh bookworm and its tenure agent answers"
