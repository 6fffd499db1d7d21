#!/usr/bin/env bash
# A lock hand-off on the embedded agent, shown with curl (the wire protocol
# under the election demo; any Consul client speaks it).
#
# Installs the dependencies, builds, starts `tenure agent` on an ephemeral
# port, and walks through: create a session, acquire a key, park a blocking
# GET on it, release the key, watch the blocking GET return at once with the
# new index and no Session, destroy the session, stop the agent.
#
#   BUILD_DIR=dir   build directory (default: build)
#
# Layout: setup and agent helpers first, then demo_main (the part a later demo
# replaces), then the call.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [[ -z ${TENURE_SKIP_BUILD:-} ]]; then
  bash scripts/setup.sh
  bash scripts/build.sh
fi

BUILD_DIR=${BUILD_DIR:-build}
TENURE="$BUILD_DIR/tenure"

# ---- presentation ---------------------------------------------------------------
if [[ -t 1 ]]; then
  bold=$'\e[1m' dim=$'\e[2m' green=$'\e[32m' reset=$'\e[0m'
else
  bold='' dim='' green='' reset=''
fi

# Quotes an argument for display only when it needs it.
show_arg() {
  if [[ $1 =~ ^[A-Za-z0-9_./:=@%+,-]+$ ]]; then printf '%s' "$1"; else printf "'%s'" "${1//\'/\'\\\'\'}"; fi
}

# step TITLE: a heading.
step() { printf '\n%s== %s%s\n' "$bold" "$1" "$reset"; }

# run CMD...: echoes the command, runs it, prints its output and keeps it in $OUT.
run() {
  local a line="\$"
  for a in "$@"; do line+=" $(show_arg "$a")"; done
  printf '%s%s%s\n' "$green" "$line" "$reset"
  OUT=$("$@")
  printf '%s\n' "$OUT"
}

# json_field FIELD: reads JSON on stdin (an object, or an array of one) and prints FIELD.
json_field() {
  python3 -c '
import json, sys
v = json.load(sys.stdin)
if isinstance(v, list):
    v = v[0] if v else {}
x = v.get(sys.argv[1])
print("" if x is None else x)' "$1"
}

# ---- the agent ------------------------------------------------------------------
workdir=$(mktemp -d /tmp/tenure-demo.XXXXXX)
agent_pid=''
reader_pid=''

cleanup() {
  local rc=$?
  if [[ -n $reader_pid ]] && kill -0 "$reader_pid" 2>/dev/null; then kill "$reader_pid" 2>/dev/null || true; fi
  if [[ -n $agent_pid ]] && kill -0 "$agent_pid" 2>/dev/null; then
    kill -TERM "$agent_pid" 2>/dev/null || true
    wait "$agent_pid" 2>/dev/null || true
  fi
  exec 3<&- 2>/dev/null || true
  if ((rc != 0)) && [[ -s $workdir/agent.log ]]; then
    printf '\n%sagent log:%s\n' "$bold" "$reset" >&2
    cat "$workdir/agent.log" >&2
  fi
  rm -rf "$workdir"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start_agent: runs `tenure agent` on an ephemeral port and sets ADDR from its first stdout line.
start_agent() {
  mkfifo "$workdir/stdout"
  "$TENURE" agent -http-addr 127.0.0.1:0 >"$workdir/stdout" 2>"$workdir/agent.log" &
  agent_pid=$!
  exec 3<"$workdir/stdout"  # kept open: the agent never writes into a closed pipe
  local line
  if ! IFS= read -r -t 15 line <&3; then
    echo "demo: tenure agent did not report its address" >&2
    exit 1
  fi
  if [[ ! $line =~ ^tenure\ agent\ listening\ on\ (http://127\.0\.0\.1:[0-9]+)$ ]]; then
    echo "demo: unexpected first line from tenure agent: $line" >&2
    exit 1
  fi
  ADDR=${BASH_REMATCH[1]}
  printf '%s%s%s  %s(pid %s, log %s)%s\n' "$bold" "$line" "$reset" "$dim" "$agent_pid" "$workdir/agent.log" "$reset"
}

stop_agent() {
  run kill -TERM "$agent_pid"
  local rc=0
  wait "$agent_pid" || rc=$?
  agent_pid=''
  echo "tenure agent exited with status $rc"
  return "$rc"
}

now_ms() { date +%s%3N; }

# ---- the demo -------------------------------------------------------------------
demo_main() {
  local key=service/demo/leader

  step "Start the embedded agent"
  start_agent

  step "Create a session: TTL 15s, lock-delay 1s"
  run curl -sS -X PUT --data '{"Name":"demo-leader","TTL":"15s","LockDelay":"1s"}' "$ADDR/v1/session/create"
  local sid
  sid=$(json_field ID <<<"$OUT")

  step "Acquire $key for the session (body = the leader's value)"
  run curl -sS -X PUT --data 'node-a' "$ADDR/v1/kv/$key?acquire=$sid"
  [[ $OUT == true ]] || { echo "demo: acquire answered '$OUT'" >&2; exit 1; }

  step "Read the key: it is held (Session, LockIndex 1); X-Consul-Index is its ModifyIndex"
  run curl -sS -i "$ADDR/v1/kv/$key"
  local index
  index=$(tr -d '\r' <<<"$OUT" | sed -n 's/^[Xx]-[Cc]onsul-[Ii]ndex: *//p')

  step "In the background, a contender blocks on the key until its index moves past $index"
  printf "%s\$ curl -sS -i '%s' &%s\n" "$green" "$ADDR/v1/kv/$key?index=$index&wait=30s" "$reset"
  curl -sS -i -o "$workdir/blocking" "$ADDR/v1/kv/$key?index=$index&wait=30s" &
  reader_pid=$!
  sleep 0.5  # give the request time to reach the agent (a demo, not a test)
  if kill -0 "$reader_pid" 2>/dev/null; then echo "${dim}(parked: still waiting)$reset"; fi

  step "Release the key (a clean release: no lock-delay)"
  local t0
  t0=$(now_ms)
  run curl -sS -X PUT --data 'node-a' "$ADDR/v1/kv/$key?release=$sid"
  wait "$reader_pid"
  reader_pid=''
  local t1
  t1=$(now_ms)

  step "The blocking GET returned at once, with the new index and no Session"
  local new_index session
  tr -d '\r' <"$workdir/blocking"
  echo
  new_index=$(tr -d '\r' <"$workdir/blocking" | sed -n 's/^[Xx]-[Cc]onsul-[Ii]ndex: *//p')
  session=$(tr -d '\r' <"$workdir/blocking" | sed -n '/^\[/p' | json_field Session)
  echo "completed $((t1 - t0)) ms after the release command started; X-Consul-Index $index -> $new_index; Session: '${session}'"
  if [[ -n $session ]] || ((new_index <= index)); then
    echo "demo: the blocking GET did not see the release" >&2
    exit 1
  fi

  step "Destroy the session"
  run curl -sS -X PUT "$ADDR/v1/session/destroy/$sid"

  step "Stop the agent"
  stop_agent
  printf '\n%sdemo complete%s\n' "$bold" "$reset"
}

demo_main "$@"
