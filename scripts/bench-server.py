#!/usr/bin/env python3
"""Drives the example keep-alive server (Benchmarks/Examples/KeepAliveServer) at a fixed request rate.

For each round and each build (`keepalive-server --timers BUILD`, builds alternating in
order) it starts the server on loopback, opens the idle clients (one request each, then
silence; none for the floor builds, which have no idle timeout), and runs the open-loop
generator (Benchmarks/Examples/KeepAliveServer/OpenLoop/open-loop.c): every connection
opened and answered once (the ramp), a warm-up, then the measured window, all at one
offered rate, latencies timed from each request's intended send time. Then it waits for
the idle clients' closes, stops the server with SIGTERM and reads its final counters.

Each row: p50/p99/p99.9 latency over the window, the server's CPU per request over the
same window (utime + stime of the whole process), its resident memory at the window's end
and its peak, the ramp (first connect to every connection answered once: it bounds the
server's accept span) and the listen-queue overflows during the run, and the idle closes
on both sides: none before the timeout, and how many came later than timeout + leeway +
slack. The summary row per build is its median round by CPU per request, whole.
`--smoke` asserts behaviour only (no figure) and exits 1 on a violation.
"""

import argparse
import asyncio
import json
import os
import platform
import resource
import signal
import sys

# The helper module sits beside this script: no bytecode cache in the source tree.
sys.dont_write_bytecode = True
from idle_clients import open_idle_clients, summarize  # noqa: E402

BUILDS = "floor,metronome,nio,metronome-group,nio-group,floor-loop,metronome-loop,nio-loop"
# How late an idle close may come after its timeout: Metronome's ExpiringValue shares one
# engine timer per millisecond, so it closes up to 1 ms late; IdleStateHandler fires at the
# instant. SLACK_MS is for the loop reaching the expiry and the client seeing the close.
LEEWAY_MS = {"metronome": 1, "nio": 0}
SLACK_MS = 250


def arguments():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", required=True, help="the keepalive-server executable")
    parser.add_argument("--load", required=True, help="the open-loop generator executable")
    parser.add_argument("--smoke", action="store_true", help="a short run of every build that asserts behaviour only")
    parser.add_argument("--builds", default=BUILDS, help=f"comma-separated, of: {BUILDS}")
    parser.add_argument("--connections", type=int, help="keep-alive connections of the generator")
    parser.add_argument("--rate", type=int, help="requests per second offered, over all connections")
    parser.add_argument("--warmup", type=int, help="seconds after the ramp left out of the figures")
    parser.add_argument("--duration", type=int, help="seconds measured")
    parser.add_argument("--idle", type=int, help="idle clients per run")
    parser.add_argument("--idle-timeout-ms", type=int)
    parser.add_argument("--deadline-ms", type=int)
    parser.add_argument("--rounds", type=int, help="runs of each build")
    options = parser.parse_args()
    # Smoke: a second per build and a few dozen connections; an idle timeout and a deadline
    # long enough that a stalled VM neither closes a connection waiting for its answer nor
    # turns a request into a 503.
    defaults = (
        dict(connections=50, rate=500, warmup=0, duration=1, idle=20, idle_timeout_ms=2000, deadline_ms=10000,
             rounds=1)
        if options.smoke
        else dict(connections=1000, rate=4000, warmup=2, duration=10, idle=100, idle_timeout_ms=3000,
                  deadline_ms=1000, rounds=5)
    )
    for name, value in defaults.items():
        if getattr(options, name) is None:
            setattr(options, name, value)
    options.builds = options.builds.split(",")
    # A loaded connection sends every connections / rate seconds, and waits out the ramp
    # before its first: that must stay well inside the idle timeout, or the server rightly
    # closes loaded connections as idle.
    if options.connections / options.rate * 1000 * 2 > options.idle_timeout_ms:
        parser.error(f"{options.connections} connections at {options.rate} requests/s send every "
                     f"{options.connections / options.rate * 1000:.0f} ms each: raise --idle-timeout-ms past twice that")
    return options


def library(build):
    return build.split("-")[0]


def raise_descriptor_limit():
    """Ten thousand connections need ten thousand descriptors in the generator and the server."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def cpu_seconds(pid):
    """utime + stime of the whole process, from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory_mb(pid):
    """VmHWM (peak) and VmRSS (now) in MB, from /proc/<pid>/status."""
    values = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            key, _, rest = line.partition(":")
            if key in ("VmHWM", "VmRSS"):
                values[key] = int(rest.split()[0]) / 1024
    return values["VmHWM"], values["VmRSS"]


def listen_overflows():
    """The kernel's count of connections its accept queues dropped (all listeners, so a
    neighbour's server counts too): a storm beyond the backlog shows up here and in the ramp."""
    with open("/proc/net/netstat") as netstat:
        names, values = [line.split() for line in netstat if line.startswith("TcpExt:")][:2]
    return int(values[names.index("ListenOverflows")])


def load_average():
    return "/".join(f"{value:.2f}" for value in os.getloadavg())


async def run_load(port, pid, options):
    """Runs the generator; the server's CPU is read at the measured window's start and end."""
    load = await asyncio.create_subprocess_exec(
        options.load, "-p", str(port), "-c", str(options.connections), "-r", str(options.rate),
        "-w", str(options.warmup), "-d", str(options.duration), stdout=asyncio.subprocess.PIPE)
    marks = {}
    async for line in load.stdout:
        report = json.loads(line)
        if "phase" in report:
            marks[report["phase"]] = cpu_seconds(pid)
            if report["phase"] == "end":
                marks["memory"] = memory_mb(pid)
        else:
            break
    await load.wait()
    if load.returncode != 0 or "open_loop" not in report:
        raise RuntimeError(f"open-loop failed with status {load.returncode}")
    end = marks.get("end", cpu_seconds(pid))
    report["cpu_s"] = end - marks.get("measure", end)
    report["peak_mb"], report["resident_mb"] = marks.get("memory", memory_mb(pid))
    return report


async def run_once(build, options):
    server = await asyncio.create_subprocess_exec(
        options.binary, "--timers", build, "--port", "0",
        "--idle-timeout-ms", str(options.idle_timeout_ms), "--deadline-ms", str(options.deadline_ms),
        stdout=asyncio.subprocess.PIPE)
    try:
        ready = json.loads(await asyncio.wait_for(server.stdout.readline(), 120))
        port = ready["listening"]
        overflows_before = listen_overflows()
        idle = await open_idle_clients(port, 0 if library(build) == "floor" else options.idle)
        waiting = [asyncio.ensure_future(client.wait_closed()) for client in idle]
        load = await run_load(port, server.pid, options)
        overflows = listen_overflows() - overflows_before
        # Every idle client is closed one idle timeout after its request, whatever the load:
        # a generous bound, only so that a server that never closes them ends the run.
        if waiting:
            await asyncio.wait(waiting, timeout=options.idle_timeout_ms / 1000 + 60)
        server.send_signal(signal.SIGTERM)
        final = json.loads(await asyncio.wait_for(server.stdout.readline(), 120))
        await server.wait()
    finally:
        if server.returncode is None:
            server.kill()
            await server.wait()
    late_after_s = (options.idle_timeout_ms + LEEWAY_MS.get(library(build), 0) + SLACK_MS) / 1000
    row = dict(build=build, load=load, overflows=overflows, server=final, exit_status=server.returncode,
               **summarize(idle, options.idle_timeout_ms / 1000, late_after_s))
    row["cpu_us_per_request"] = load["cpu_s"] / max(load["measured"], 1) * 1e6
    return row


def violations(row):
    """What the run did wrong: behaviour only, never a figure."""
    server, load = row["server"], row["load"]
    found = []
    if row["exit_status"] != 0:
        found.append(f"server exited with status {row['exit_status']}")
    if load["ramp_failed"] or load["closed"] or load["lost"] or load["timed_out"] or load["non_200"]:
        found.append(f"generator: {load['ramp_failed']} connections failed in the ramp, {load['closed']} closed, "
                     f"{load['lost']} requests lost, {load['timed_out']} unanswered, {load['non_200']} not 200")
    if server["deadlines_exceeded"]:
        found.append(f"{server['deadlines_exceeded']} requests over their deadline")
    if row["idle_answered"] != row["idle_left"] or row["idle_errors"]:
        found.append(f"idle clients: {row['idle_answered']} of {row['idle_left']} answered, {row['idle_errors']}")
    if row["idle_seen_closed"] != row["idle_left"]:
        found.append(f"{row['idle_left'] - row['idle_seen_closed']} idle clients never closed")
    if row["idle_early"]:
        found.append(f"{row['idle_early']} idle clients closed before the idle timeout")
    if server["idle_closed"] != row["idle_left"]:
        found.append(f"server closed {server['idle_closed']} connections as idle, {row['idle_left']} were left idle")
    if server.get("engine_armed", 0) != 0:
        found.append(f"{server['engine_armed']} engine timers still armed at exit")
    if server["requests_answered"] < load["answered"] + load["connections"] + row["idle_left"]:
        found.append(f"server answered {server['requests_answered']}, clients got "
                     f"{load['answered'] + load['connections'] + row['idle_left']}")
    return found


HEADER = ("build            round  p50 ms  p99 ms  p99.9 ms  CPU µs/req  VmRSS MB  VmHWM MB  ramp ms  overflows  "
          "idle: left  closed  early  late  first ms  last ms  armed at exit")


def format_row(row, round):
    server, load = row["server"], row["load"]
    return (f"{row['build']:<16} {round:>5} {load['p50_us'] / 1000:>7.2f} {load['p99_us'] / 1000:>7.2f} "
            f"{load['p999_us'] / 1000:>9.2f} {row['cpu_us_per_request']:>11.1f} {load['resident_mb']:>9.1f} "
            f"{load['peak_mb']:>9.1f} {load['ramp_ms']:>8.0f} {row['overflows']:>10} "
            f"{row['idle_left']:>11} {server['idle_closed']:>7} {row['idle_early']:>6} {row['idle_late']:>5} "
            f"{row['idle_first_close_ms']!s:>9} {row['idle_last_close_ms']!s:>8} "
            f"{server.get('engine_armed', '-')!s:>14}")


async def main():
    options = arguments()
    limit = raise_descriptor_limit()
    print(f"kernel {platform.release()}, {os.cpu_count()} CPUs, descriptor limit {limit}, "
          f"load average {load_average()} (1/5/15 min) at the start")
    print(f"open-loop: {options.connections} keep-alive connections on 127.0.0.1 at {options.rate} requests/s, "
          f"{options.warmup} s warm-up after the ramp, {options.duration} s measured; idle clients: "
          f"{options.idle} per run (none on the floors), idle timeout {options.idle_timeout_ms} ms, late after "
          f"timeout + leeway (metronome {LEEWAY_MS['metronome']} ms, nio 0) + {SLACK_MS} ms; request deadline "
          f"{options.deadline_ms} ms (never reached: the work is a digest of the path)"
          + (f"; {options.rounds} rounds, builds alternating" if options.rounds > 1 else ""))
    print(HEADER)
    failed = False
    results = {}
    for round in range(1, options.rounds + 1):
        # Each build goes first in every other round, so a drift of the shared host
        # does not favour one of them.
        for build in options.builds if round % 2 == 1 else reversed(options.builds):
            row = await run_once(build, options)
            results.setdefault(build, []).append((round, row))
            print(format_row(row, round), flush=True)
            for violation in violations(row):
                print(f"  VIOLATION ({build}): {violation}", flush=True)
                failed = True
            # Counted, not a fault: a host that stalls the server stalls its expiries too,
            # and the round's p99 shows the stall.
            if row["idle_late"]:
                print(f"  late ({build}): {row['idle_late']} idle closes after timeout + leeway + {SLACK_MS} ms, "
                      f"the last {row['idle_last_close_ms']} ms after its request", flush=True)
    if options.rounds > 1:
        print("\nmedian round per build (by CPU per request):")
        print(HEADER)
        for build in options.builds:
            rounds = sorted(results[build], key=lambda entry: entry[1]["cpu_us_per_request"])
            round, row = rounds[(len(rounds) - 1) // 2]
            print(format_row(row, round))
    print(f"load average {load_average()} at the end")
    if options.smoke and not failed:
        print(f"smoke-server: {len(options.builds)} builds, every request answered, every idle connection closed by "
              "its timeout and none before, no timer armed at exit")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
