#!/usr/bin/env bash
# Profiles the example server under wrk: where a build's CPU goes, and how much of it its
# timers take. Usage: scripts/profile-server.sh metronome|nio [connections]
# Needs a release build (`make bench-server` makes one) and perf (`apt-get install
# linux-perf`). Prints the share of samples per thread, then the rows of the call-graph
# report (children included) for the timer code of both builds.
set -euo pipefail
build=${1:?metronome or nio}
connections=${2:-10000}
cd "$(dirname "$0")/.."
server=Benchmarks/Examples/KeepAliveServer/.build/release/keepalive-server
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ulimit -n "$(ulimit -Hn)"

"$server" --timers "$build" --port 0 --idle-timeout-ms 3000 >"$work/server.out" &
pid=$!
until [ -s "$work/server.out" ]; do sleep 0.1; done
port=$(python3 -c 'import json, sys; print(json.loads(sys.stdin.readline())["listening"])' <"$work/server.out")
wrk -t2 -c"$connections" -d14s --timeout 10s --latency "http://127.0.0.1:$port/" >"$work/wrk.out" &
wrk=$!
# Past wrk's connection storm, and over before its end.
sleep 2
perf record -q -F 999 -g -p "$pid" -o "$work/perf.data" -- sleep 10 2>/dev/null
wait "$wrk"
kill -TERM "$pid"
wait "$pid"

grep -E "Requests/sec|^ +(50|99)%" "$work/wrk.out"
echo "samples: $(perf script -i "$work/perf.data" -F comm 2>/dev/null | wc -l)"
perf report -i "$work/perf.data" --no-children --sort comm -g none -q 2>/dev/null | grep .
echo "timer code (children, self):"
perf report -i "$work/perf.data" --children --sort sym -g none -q 2>/dev/null | swift demangle --simplified |
    grep -E "NIOTimers|MetronomeTimers|IdleStateHandler\.makeReadTimeoutTask|_prepareToSchedule|Scheduled\.cancel|EngineClock\.sleep|ExpirySet|TimerCore\.|mtr_fire" |
    sort -rn | head -12
