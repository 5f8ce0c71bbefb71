"""The five scenarios of issue 4. Each returns plain data (rows and the commands that made
them) for benchmarks/report.py; none of them prints a verdict itself.

The runner process sits on the load core; every server is on the server core. Systems run
one after another within a run, and the order rotates from run to run, so a ratio is always
taken between measurements made minutes apart at most, under the same background noise.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import statistics
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks import load, wrk
from benchmarks.systems import (
    PYTHON,
    ROOT,
    Nginx,
    Origin,
    Ours,
    System,
    rss_bytes,
    tree_cpu_seconds,
)

Row = dict[str, Any]

# Stored by a cache as headers: everything but the hop-by-hop fields and Content-Length.
NOT_STORED = frozenset({"content-length", "connection", "keep-alive", "transfer-encoding"})


@dataclass(frozen=True)
class Profile:
    """How big and how long: the full run, or the smoke run CI uses."""

    name: str
    runs: int = 5
    duration: int = 5
    warmup: int = 1
    connections: int = 32
    hit_sizes: tuple[int, ...] = (1024, 102400)
    inproc_clear_sizes: tuple[int, ...] = (1000, 10_000, 100_000, 1_000_000)
    inproc_clear_runs: int = 5
    http_clear_sizes: tuple[int, ...] = (1000, 10_000, 100_000)
    clear_runs: int = 3
    # Fill caps for slow peers: filling them over HTTP would take minutes per run.
    http_clear_caps: dict[str, int] = field(default_factory=lambda: {"client-cache": 10_000})
    during_fill: int = 10_000
    clears_per_second: float = 100.0
    memory_objects: int = 100_000
    memory_warmup: int = 2_000
    settle: float = 1.0  # seconds before reading RSS
    burst_clients: int = 500
    burst_objects: int = 100
    burst_runs: int = 3
    slow_ms: float = 50.0


FULL = Profile(name="full")
SMOKE = Profile(
    name="smoke",
    runs=1,
    duration=1,
    warmup=0,
    inproc_clear_sizes=(1000, 10_000),
    inproc_clear_runs=1,
    http_clear_sizes=(100, 500),
    clear_runs=1,
    http_clear_caps={},
    during_fill=200,
    memory_objects=1000,
    memory_warmup=100,
    settle=0.2,
    burst_runs=1,
)


@dataclass
class Context:
    profile: Profile
    origin: Origin
    load_cpu: str
    server_cpu: str
    log: Any = print  # progress lines


def rotated(items: Sequence[System], run: int) -> list[System]:
    shift = run % len(items) if items else 0
    return [*items[shift:], *items[:shift]]


def _add(commands: list[str], command: str) -> None:
    if command not in commands:
        commands.append(command)


async def _prime(system: System, host: str, path: str, requests: int = 2) -> None:
    """GETs, each on a new connection: the first may be a miss, the others must be answered.
    With several processes on one port, enough of them reach every process (the kernel
    spreads connections by their addresses), so each has the object cached."""
    for _ in range(requests):
        reply = await load.get(system.port, path, host)
        if reply.status != 200:
            raise RuntimeError(f"{system.name}: GET {host}{path} answered {reply.status}")


# -- 1. hit throughput and latency (and 6, on the whole machine) ------------------------------

PRIME_MACHINE = 16  # connections: all miss a process with odds of 2**-15 with two processes


async def hits(ctx: Context, systems: Sequence[System], machine: bool = False) -> Row:
    """wrk -t1 -c32 on one cached object per size; origin requests during each run counted.
    ``machine``: wrk -t2 with twice the connections, on the servers' cores too (scenario 6)."""
    p = ctx.profile
    host = "h.example"
    rows: list[Row] = []
    commands: list[str] = []
    cpu = ctx.server_cpu if machine else ctx.load_cpu
    threads = 2 if machine else 1
    for size in p.hit_sizes:
        path = f"/o/{size}/0"
        for system in systems:
            await _prime(system, host, path, requests=PRIME_MACHINE if machine else 2)
            if p.warmup:
                warmup = wrk.command(system.port, path, host, p.warmup, cpu=cpu, threads=threads)
                await wrk.run(warmup)
        for run in range(p.runs):
            for system in rotated(systems, run):
                argv = wrk.command(
                    system.port,
                    path,
                    host,
                    p.duration,
                    p.connections * threads,
                    cpu=cpu,
                    threads=threads,
                )
                _add(commands, shlex.join(argv))
                before = await ctx.origin.count()
                cpu_before = tree_cpu_seconds(system.server.pid)
                result = await wrk.run(argv)
                cpu_us = (tree_cpu_seconds(system.server.pid) - cpu_before) * 1e6
                origin_requests = await ctx.origin.count() - before
                # The server's CPU (its whole process tree) over the run, per request answered.
                per_hit = cpu_us / result.requests if result.requests else 0.0
                ctx.log(
                    f"  hit {size} B run {run + 1} {system.name}: {result.rps:,.0f} req/s "
                    f"p50 {result.p50_ms:.2f} ms p99 {result.p99_ms:.2f} ms "
                    f"CPU {per_hit:.1f} µs a hit"
                )
                rows.append(
                    {
                        "size": size,
                        "run": run,
                        "system": system.name,
                        "origin_requests": origin_requests,
                        "cpu_us_per_hit": per_hit,
                        **result.as_dict(),
                    }
                )
    return {"rows": rows, "commands": commands}


# -- 2. clearing a domain -----------------------------------------------------------------------


def clear_in_process(ctx: Context) -> Row:
    """benchmarks/clear_cost.py in a subprocess on the server core: MemoryStore.clear_domain."""
    p = ctx.profile
    argv = ["taskset", "-c", ctx.server_cpu, PYTHON, "-m", "benchmarks.clear_cost"]
    argv += ["--sizes", ",".join(str(n) for n in p.inproc_clear_sizes)]
    argv += ["--runs", str(p.inproc_clear_runs), "--json"]
    ctx.log(f"  {shlex.join(argv)}")
    out = subprocess.run(argv, check=True, capture_output=True, text=True, cwd=ROOT)
    data: Row = json.loads(out.stdout)
    data["command"] = shlex.join(argv)
    return data


async def clear_over_http(ctx: Context, systems: Sequence[System]) -> Row:
    """Fill a domain with N objects, clear it, time the clear as its client sees it, and check
    that the next request for a cleared object goes to the origin."""
    p = ctx.profile
    host = "c.example"
    rows: list[Row] = []
    commands: list[str] = []
    skipped: list[str] = []
    for run in range(p.clear_runs):
        for size in p.http_clear_sizes:
            for system in rotated(systems, run):
                cap = p.http_clear_caps.get(system.name)
                if cap is not None and size > cap:
                    note = f"{system.name}: {size:,} entries not filled (capped at {cap:,})"
                    if note not in skipped:
                        skipped.append(note)
                    continue
                paths = [f"/o/1024/r{run}n{size}-{i}" for i in range(size)]
                filled = await load.fill(system.port, host, paths)
                if filled.errors:
                    raise RuntimeError(f"{system.name}: fill failed {filled.statuses}")
                await asyncio.sleep(0.2)  # let the fill's last responses settle
                seconds = await system.clear(host)
                if seconds is None:
                    raise RuntimeError(f"{system.name} cannot clear a domain")
                before = await ctx.origin.count()
                await load.get(system.port, paths[0], host)
                verified = await ctx.origin.count() - before == 1
                command = system.clear_command(host)
                if command:
                    _add(commands, f"{system.name}: {command}")
                ctx.log(
                    f"  clear {size:,} run {run + 1} {system.name}: {seconds * 1000:.3f} ms "
                    f"(fill {filled.rate:,.0f}/s, miss after clear: {verified})"
                )
                rows.append(
                    {
                        "system": system.name,
                        "method": system.clear_method,
                        "entries": size,
                        "run": run,
                        "clear_ms": seconds * 1000,
                        "verified": verified,
                        "fill_rate": filled.rate,
                    }
                )
                if isinstance(system, Ours):
                    await asyncio.sleep(0.5)  # the background reclaim of the old generation
    return {"rows": rows, "commands": commands, "skipped": skipped}


# -- 3. hits on one domain while another is cleared 100 times a second ------------------------


async def during_clears(ctx: Context, ours: Ours) -> Row:
    p = ctx.profile
    hot_host, cleared = "b.example", "a.example"
    path = "/o/1024/0"
    await _prime(ours, hot_host, path)
    argv = wrk.command(ours.port, path, hot_host, p.duration, p.connections, cpu=ctx.load_cpu)
    rows: list[Row] = []
    for run in range(p.runs):
        modes = ("quiet", "clearing") if run % 2 == 0 else ("clearing", "quiet")
        for mode in modes:
            fill_paths = [f"/o/1024/{mode}{run}-{i}" for i in range(p.during_fill)]
            await load.fill(ours.port, cleared, fill_paths)
            await asyncio.sleep(0.2)
            stop = asyncio.Event()
            loop_task = None
            if mode == "clearing":
                headers, body = ours.clear_request(cleared)
                loop_task = asyncio.create_task(
                    load.clear_loop(
                        ours.api_port,
                        "/api/v1/cdn/clear-cache",
                        "127.0.0.1",
                        headers,
                        body,
                        p.clears_per_second,
                        stop,
                    )
                )
            try:
                result = await wrk.run(argv)
            finally:
                stop.set()
            clears = await loop_task if loop_task is not None else None
            row: Row = {"run": run, "mode": mode, **result.as_dict()}
            if clears is not None:
                row["clears_sent"] = clears.sent
                row["clears_ok"] = clears.ok
                row["clear_p50_ms"] = statistics.median(clears.latencies_ms)
                row["clears_per_s"] = clears.rate
            ctx.log(
                f"  {mode} run {run + 1}: {result.rps:,.0f} req/s p50 {result.p50_ms:.2f} ms "
                f"p99 {result.p99_ms:.2f} ms"
                + (f", {clears.ok}/{clears.sent} clears ok" if clears else "")
            )
            rows.append(row)
    clear_command = ours.clear_command(cleared)
    return {
        "rows": rows,
        "commands": [
            shlex.join(argv),
            f"during 'clearing' runs, {p.clears_per_second:.0f}/s on a fixed schedule from the "
            f"runner (core {ctx.load_cpu}, a pool of 4 keep-alive connections): {clear_command}",
        ],
        "fill": p.during_fill,
    }


# -- 4. memory per cached object ----------------------------------------------------------------


async def header_bytes(ctx: Context) -> int:
    """Bytes of the header fields a cache keeps for one benchmark object (names + values)."""
    reply = await load.get(ctx.origin.port, "/o/1024/probe", "m.example")
    return sum(len(n) + len(v) for n, v in reply.headers.items() if n not in NOT_STORED)


async def memory(ctx: Context, systems: Sequence[System]) -> Row:
    p = ctx.profile
    host = "m.example"
    body = 1024
    headers = await header_bytes(ctx)
    rows: list[Row] = []
    for system in systems:
        pid = system.cache_pid()
        await load.fill(system.port, host, (f"/o/1024/w{i}" for i in range(p.memory_warmup)))
        await asyncio.sleep(p.settle)
        before = rss_bytes(pid)
        started = await ctx.origin.count()
        filled = await load.fill(
            system.port, host, (f"/o/1024/{i}" for i in range(p.memory_objects))
        )
        fetched = await ctx.origin.count() - started
        await asyncio.sleep(p.settle)
        after = rss_bytes(pid)
        # Still cached? Re-read a sample; any origin request means something was not kept.
        check = await ctx.origin.count()
        step = max(1, p.memory_objects // 100)
        await load.fill(
            system.port, host, (f"/o/1024/{i}" for i in range(0, p.memory_objects, step))
        )
        kept = await ctx.origin.count() == check
        per_object = (after - before) / p.memory_objects
        row: Row = {
            "system": system.name,
            "objects": p.memory_objects,
            "rss_before": before,
            "rss_after": after,
            "per_object": per_object,
            "body_plus_headers": body + headers,
            "overhead": per_object - body - headers,
            "origin_fetches": fetched,
            "kept": kept,
            "errors": filled.errors,
            "pid_note": "worker process" if isinstance(system, Nginx) else "",
        }
        if isinstance(system, Nginx):
            row["disk_per_object"] = system.disk_bytes(host) / p.memory_objects
        ctx.log(
            f"  memory {system.name}: {per_object:,.0f} B/object RSS "
            f"({(after - before) / 1e6:,.1f} MB over {p.memory_objects:,}), kept: {kept}"
        )
        rows.append(row)
    return {
        "rows": rows,
        "header_bytes": headers,
        "commands": [
            f"fill: GET http://127.0.0.1:PORT/o/1024/{{0..{p.memory_objects - 1}}} Host: {host}, "
            "32 keep-alive connections from the runner (benchmarks/load.py fill); "
            "VmRSS from /proc/PID/status before and after"
        ],
    }


# -- 5. origin protection after a clear ---------------------------------------------------------


async def origin_protection(ctx: Context, systems: Sequence[System]) -> Row:
    p = ctx.profile
    host = "p.example"
    paths = [f"/slow/1024/{i}" for i in range(p.burst_objects)]
    asked = [paths[i % len(paths)] for i in range(p.burst_clients)]
    rows: list[Row] = []
    commands: list[str] = []
    for run in range(p.burst_runs):
        for system in rotated(systems, run):
            await load.fill(system.port, host, paths, concurrency=len(paths))
            await system.clear(host)
            command = system.clear_command(host)
            if command:
                _add(commands, f"{system.name}: {command}")
            await ctx.origin.reset()
            result = await load.burst(system.port, host, asked)
            requests = await ctx.origin.count()
            ctx.log(
                f"  burst run {run + 1} {system.name}: {requests} origin requests for "
                f"{p.burst_objects} objects, {result.ok}/{result.clients} ok, connect "
                f"{result.connect_seconds * 1000:.0f} ms, answers {result.seconds * 1000:.0f} ms"
            )
            rows.append(
                {
                    "system": system.name,
                    "run": run,
                    "clients": result.clients,
                    "objects": p.burst_objects,
                    "origin_requests": requests,
                    "ok": result.ok,
                    "seconds": result.seconds,
                    "connect_seconds": result.connect_seconds,
                }
            )
    commands.append(
        f"{p.burst_clients} connections opened first, then GET /slow/1024/{{i % "
        f"{p.burst_objects}}} Host: {host} sent on all at once (benchmarks/load.py burst); "
        f"the origin answers /slow/ after {p.slow_ms:.0f} ms and counts requests"
    )
    return {"rows": rows, "commands": commands}
