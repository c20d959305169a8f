#!/usr/bin/env python3
"""Drives the example keep-alive server (Benchmarks/Examples/KeepAliveServer) with wrk.

For each connection count and each build (`--timers nio|metronome`) it starts the server on
loopback, opens the idle clients (one request each, then silence), runs wrk with that many
open connections, waits for the server to close the idle clients, stops the server with
SIGTERM and reads its final counters. It prints one row per run: requests per second,
p50/p99 latency, the server's CPU per request and resident memory, and what the idle
timeouts did; with several rounds, then the median of each build's rows. `--smoke` asserts behaviour only (no performance threshold) and exits 1 on a
violation: every request answered, each idle client closed by its timeout and not before,
and no engine timer armed at exit.
"""

import argparse
import asyncio
import json
import os
import platform
import resource
import signal
import statistics
import sys

# The helper module sits beside this script: no bytecode cache in the source tree.
sys.dont_write_bytecode = True
from idle_clients import open_idle_clients, summarize  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def arguments():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", required=True, help="the keepalive-server executable")
    parser.add_argument("--smoke", action="store_true", help="a short run that asserts behaviour only")
    parser.add_argument("--builds", help="comma-separated: nio,metronome")
    parser.add_argument("--connections", help="comma-separated wrk connection counts")
    parser.add_argument("--duration", type=int, help="seconds per wrk run")
    parser.add_argument("--idle", type=int, help="idle clients per run")
    parser.add_argument("--idle-timeout-ms", type=int)
    parser.add_argument("--deadline-ms", type=int)
    parser.add_argument("--rounds", type=int, help="runs of each build per connection count")
    parser.add_argument("--wrk-threads", type=int, default=2)
    options = parser.parse_args()
    # Smoke: seconds and a few hundred connections; an idle timeout and a deadline long
    # enough that a stalled VM neither closes a connection waiting for its answer nor turns
    # a request into a 503.
    defaults = (
        dict(builds="metronome", connections="200", rounds=1, duration=3, idle=50, idle_timeout_ms=5000,
             deadline_ms=10000)
        if options.smoke
        else dict(builds="nio,metronome", connections="1000,10000", rounds=3, duration=10, idle=100, idle_timeout_ms=3000,
                  deadline_ms=1000)
    )
    for name, value in defaults.items():
        if getattr(options, name) is None:
            setattr(options, name, value)
    options.builds = options.builds.split(",")
    options.connections = [int(n) for n in options.connections.split(",")]
    return options


def raise_descriptor_limit():
    """Ten thousand connections need ten thousand descriptors in wrk and in the server."""
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
    """The kernel's count of connections its accept queues dropped (all listeners): a
    connection storm beyond the listen backlog shows up here and in the latency tail."""
    with open("/proc/net/netstat") as netstat:
        names, values = [line.split() for line in netstat if line.startswith("TcpExt:")][:2]
    return int(values[names.index("ListenOverflows")])


async def run_wrk(port, connections, options):
    wrk = await asyncio.create_subprocess_exec(
        "wrk", "-t", str(min(options.wrk_threads, connections)), "-c", str(connections),
        "-d", f"{options.duration}s", "--timeout", "10s", "--latency",
        "-s", os.path.join(HERE, "wrk-report.lua"), f"http://127.0.0.1:{port}/",
        stdout=asyncio.subprocess.PIPE)
    output, _ = await wrk.communicate()
    for line in output.decode().splitlines():
        if line.startswith('{"wrk"'):
            return json.loads(line)
    raise RuntimeError(f"wrk printed no report (status {wrk.returncode}):\n{output.decode()}")


async def run_once(build, connections, options):
    server = await asyncio.create_subprocess_exec(
        options.binary, "--timers", build, "--port", "0",
        "--idle-timeout-ms", str(options.idle_timeout_ms), "--deadline-ms", str(options.deadline_ms),
        stdout=asyncio.subprocess.PIPE)
    try:
        ready = json.loads(await asyncio.wait_for(server.stdout.readline(), 120))
        port = ready["listening"]
        overflows_before = listen_overflows()
        idle = await open_idle_clients(port, options.idle)
        waiting = [asyncio.ensure_future(client.wait_closed()) for client in idle]
        cpu_before = cpu_seconds(server.pid)
        wrk = await run_wrk(port, connections, options)
        cpu = cpu_seconds(server.pid) - cpu_before
        overflows = listen_overflows() - overflows_before
        peak_mb, resident_mb = memory_mb(server.pid)
        # Every idle client is closed one idle timeout after its request, whatever the load:
        # a generous bound, only so that a server that never closes them ends the run.
        await asyncio.wait(waiting, timeout=options.idle_timeout_ms / 1000 + 60)
        server.send_signal(signal.SIGTERM)
        final = json.loads(await asyncio.wait_for(server.stdout.readline(), 120))
        await server.wait()
    finally:
        if server.returncode is None:
            server.kill()
            await server.wait()
    row = dict(build=build, connections=connections, **summarize(idle, options.idle_timeout_ms / 1000))
    row.update(
        requests_per_s=wrk["requests"] / (wrk["duration_us"] / 1e6),
        p50_ms=wrk["p50_us"] / 1000, p99_ms=wrk["p99_us"] / 1000,
        cpu_us_per_request=cpu / max(wrk["requests"], 1) * 1e6,
        peak_mb=peak_mb, resident_mb=resident_mb,
        wrk_errors="/".join(str(wrk[k]) for k in ("connect", "read", "write", "status", "timeout")),
        overflows=overflows,
        wrk_requests=wrk["requests"], server=final, exit_status=server.returncode)
    return row


def violations(row):
    """What the run did wrong: behaviour only, never a figure."""
    server = row["server"]
    found = []
    if row["exit_status"] != 0:
        found.append(f"server exited with status {row['exit_status']}")
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
    if server["requests_answered"] < row["wrk_requests"] + row["idle_left"]:
        found.append(f"server answered {server['requests_answered']}, clients got {row['wrk_requests'] + row['idle_left']}")
    return found


HEADER = ("build      connections  requests/s  p50 ms  p99 ms  CPU µs/req  VmHWM MB  VmRSS MB  accept overflows  "
          "wrk errors c/r/w/s/t  accepted  deadline 503s  idle left  idle closed  closed early  min close ms  armed at exit")


def format_row(row):
    server = row["server"]
    return (f"{row['build']:<10} {row['connections']:>11} {row['requests_per_s']:>11.0f} {row['p50_ms']:>7.2f} "
            f"{row['p99_ms']:>7.2f} {row['cpu_us_per_request']:>11.1f} {row['peak_mb']:>9.1f} {row['resident_mb']:>9.1f} "
            f"{row['overflows']:>17} {row['wrk_errors']:>21} {server['connections_accepted']:>9} "
            f"{server['deadlines_exceeded']:>14} {row['idle_left']:>10} "
            f"{server['idle_closed']:>12} {row['idle_early']:>13} {row['idle_min_close_ms']!s:>13} "
            f"{server.get('engine_armed', '-')!s:>14}")


MEDIAN_HEADER = "build      connections  rounds  requests/s  p50 ms  p99 ms  CPU µs/req  VmHWM MB  VmRSS MB"


def format_median(build, connections, rows):
    def median(key):
        return statistics.median(row[key] for row in rows)
    return (f"{build:<10} {connections:>11} {len(rows):>7} {median('requests_per_s'):>11.0f} {median('p50_ms'):>7.2f} "
            f"{median('p99_ms'):>7.2f} {median('cpu_us_per_request'):>11.1f} {median('peak_mb'):>9.1f} "
            f"{median('resident_mb'):>9.1f}")


async def main():
    options = arguments()
    limit = raise_descriptor_limit()
    print(f"kernel {platform.release()}, {os.cpu_count()} CPUs, descriptor limit {limit}, "
          f"load average {os.getloadavg()[0]:.2f} at the start")
    print(f"wrk -t{options.wrk_threads} -d{options.duration}s --latency on 127.0.0.1; {options.idle} idle clients "
          f"per run; idle timeout {options.idle_timeout_ms} ms; request deadline {options.deadline_ms} ms"
          + (f"; {options.rounds} rounds, builds alternating" if options.rounds > 1 else ""))
    print(HEADER)
    failed = False
    results = {}
    for connections in options.connections:
        for round in range(options.rounds):
            # Each build goes first in every other round, so a drift of the shared host
            # does not favour one of them.
            for build in options.builds if round % 2 == 0 else reversed(options.builds):
                row = await run_once(build, connections, options)
                results.setdefault((build, connections), []).append(row)
                print(format_row(row), flush=True)
                found = violations(row)
                # A smoke run also needs every wrk request answered with a 200.
                if options.smoke and (row["wrk_errors"] != "0/0/0/0/0" or row["server"]["deadlines_exceeded"]):
                    found.append(
                        f"wrk errors {row['wrk_errors']}, deadlines exceeded {row['server']['deadlines_exceeded']}")
                for violation in found:
                    print(f"  VIOLATION ({build}, {connections}): {violation}", flush=True)
                failed = failed or bool(found)
    if options.rounds > 1:
        print()
        print(MEDIAN_HEADER)
        for connections in options.connections:
            for build in options.builds:
                print(format_median(build, connections, results[(build, connections)]))
    if options.smoke and not failed:
        print("smoke-server: every request answered, every idle connection closed by its timeout and none "
              "before, no timer armed at exit")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
