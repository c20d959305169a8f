#!/usr/bin/env bash
# Profiles the example server's steady state at a fixed request rate: where a build's CPU
# goes, and how much of it its timers take.
# Usage: scripts/profile-server.sh BUILD [connections] [rate]  (BUILD as in --timers)
# Needs the release build and the generator (`make bench-server` makes both) and perf
# (`apt-get install linux-perf`). Prints the generator's report, the share of samples per
# thread, then the rows of the call-graph report (children included) for the timer code of
# every build (an async function has a row per fragment). The idle handlers' channelRead is
# left out: its children are the whole pipeline after it.
set -euo pipefail
build=${1:?a build, as keepalive-server --help lists them}
connections=${2:-1000}
rate=${3:-10000}
cd "$(dirname "$0")/.."
server=Benchmarks/Examples/KeepAliveServer/.build/release/keepalive-server
load=Benchmarks/Examples/KeepAliveServer/.build/open-loop
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ulimit -n "$(ulimit -Hn)"

"$server" --timers "$build" --port 0 --idle-timeout-ms 3000 >"$work/server.out" &
pid=$!
until [ -s "$work/server.out" ]; do sleep 0.1; done
port=$(python3 -c 'import json, sys; print(json.loads(sys.stdin.readline())["listening"])' <"$work/server.out")
"$load" -p "$port" -c "$connections" -r "$rate" -w 2 -d 12 >"$work/load.out" &
loader=$!
# Samples the measured window only: past the ramp and the warm-up, over before the end.
until grep -q '"measure"' "$work/load.out"; do sleep 0.1; done
perf record -q -F 999 -g -p "$pid" -o "$work/perf.data" -- sleep 10 2>/dev/null
wait "$loader"
kill -TERM "$pid"
wait "$pid"

tail -n 1 "$work/load.out"
echo "samples: $(perf script -i "$work/perf.data" -F comm 2>/dev/null | wc -l)"
perf report -i "$work/perf.data" --no-children --sort comm -g none -q 2>/dev/null | grep .
echo "timer code (children, self):"
perf report -i "$work/perf.data" --children --sort sym -g none -q 2>/dev/null | swift demangle --simplified |
    grep -E "Deadlines?\.|Deadline\.run|withTimeout|withEngineDeadline|IdleStateHandler\.(makeReadTimeoutTask|write|channelReadComplete)|ExpiringValue|_prepareToSchedule|scheduleCallback|Scheduled\.cancel|EngineClock|SafeDispatchTimer|ExpirySet|TimerCore\.|mtr_" |
    sort -rn | head -20
