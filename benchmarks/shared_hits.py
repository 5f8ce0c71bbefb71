"""1 MiB hits from cdn-proxy's shared tier against nginx ``proxy_cache`` on disk, same run
(issue 23's benchmarks: cdn-proxy at least 0.9x nginx's req/s, CPU per hit for both).

Run: .venv/bin/python -m benchmarks.shared_hits [--size 1048576] [--runs 3] [--duration 5]

One object of ``--size`` bytes, from the same origin, is cached by each system, then wrk
(``-t1 -c32``, keep-alive, on the load core) asks for it for ``--duration`` seconds per run,
``--runs`` runs per system, the order of systems rotating from run to run. Every server runs
on the server core, one process serving hits:

- cdn-proxy (``workers = 1``) with ``[cache] disk_path``; its memory tier is 4 times the
  object (4 MiB for 1 MiB), and keeps objects up to an eighth of its size, so every hit of
  the object is read from the shared tier
  (checked: ``Cache-Status: ...; hit; detail="disk"`` before and after the runs);
- with ``--memory-row``, for comparison, cdn-proxy whose memory tier keeps the object
  (``Cache-Status: ...; hit`` with no ``detail``);
- nginx with ``sendfile off`` (its default) and nginx with ``sendfile on``, both
  ``proxy_cache`` on a directory (``X-Cache: HIT`` checked).

CPU per hit is the serving process's user+sys time (/proc/PID/stat, all its threads) over a
run divided by the requests wrk made. The origin's request counter is read around the runs:
a hit run that reached the origin fails the benchmark. Figures are medians over the runs;
the ratio is taken run by run (cdn-proxy's req/s over nginx's in the same run), then the
median.

``--read-cost`` times instead, in this process, the shared tier's own reads of one object of
``--size`` bytes: ``lookup``, its body as checked chunks (``read_body``) and as one ``bytes``
(``read_all``, what the two-tier store hands the edge for a disk hit).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks import load, wrk
from benchmarks.disk_peers import (
    HOST,
    Started,
    cpu_seconds,
    origin_counts,
    start_nginx,
    start_origin,
    start_ours,
)
from proxy.core.cache.entry import StoredResponse
from proxy.store.shared import Fill, SharedTier

MEMORY_SHARE = 4  # the memory tier: 4x the object, so it keeps objects up to half of it
DISK_BYTES = 1 << 30
MEMORY_ROW_BYTES = 256 << 20  # --memory-row: a memory tier that keeps the object (up to 32 MiB)


@dataclass
class Measured:
    rates: list[float] = field(default_factory=list)
    cpu_us: list[float] = field(default_factory=list)
    p99_ms: list[float] = field(default_factory=list)


def hit_tier(system: Started, reply: load.Reply) -> str:
    """What says the answer was a hit, and from where; ValueError when it was not one."""
    if system.name.startswith("cdn-proxy"):
        status = reply.headers.get("cache-status", "")
        from_disk = 'detail="disk"' in status
        if "; hit" not in status or from_disk == (system.name == "cdn-proxy memory tier"):
            raise ValueError(f"{system.name} answered Cache-Status: {status!r}")
        return status
    cache = reply.headers.get("x-cache", "")
    if cache != "HIT":
        raise ValueError(f"{system.name} answered X-Cache: {cache!r}, not a hit")
    return f"X-Cache: {cache}"


async def check_hit(system: Started, path: str, size: int) -> str:
    reply = await load.get(system.port, path, HOST)
    if reply.status != 200 or len(reply.body) != size:
        raise ValueError(f"{system.name}: {reply.status}, {len(reply.body)} bytes")
    return hit_tier(system, reply)


def start_all(home: Path, origin_port: int, cpu: str, size: int, memory_row: bool) -> list[Started]:
    started: list[Started] = []
    try:
        for sendfile in (False, True):
            started.append(
                start_ours(
                    home / ("cdn-proxy-sendfile" if sendfile else "cdn-proxy"),
                    origin_port,
                    cpu,
                    memory_bytes=max(64 << 10, size * MEMORY_SHARE),
                    disk_bytes=DISK_BYTES,
                    max_object=16 << 20,
                    sendfile=sendfile,
                )
            )
            started[-1].name = "cdn-proxy sendfile on" if sendfile else "cdn-proxy"

        if memory_row:
            # For comparison: the same object from the memory tier (big enough to keep it).
            memory = start_ours(
                home / "cdn-proxy-memory",
                origin_port,
                cpu,
                memory_bytes=MEMORY_ROW_BYTES,
                disk_bytes=DISK_BYTES,
                max_object=16 << 20,
            )
            memory.name = "cdn-proxy memory tier"
            started.append(memory)
        for sendfile in (False, True):
            name = "nginx sendfile on" if sendfile else "nginx"
            nginx_home = home / name.replace(" ", "-")
            started.append(
                start_nginx(nginx_home, origin_port, cpu, max_size=DISK_BYTES, sendfile=sendfile)
            )
            started[-1].name = name
    except BaseException:
        for system in started:
            system.stop()
        raise
    return started


async def measure(args: argparse.Namespace, home: Path) -> None:
    origin, origin_port = start_origin(home, args.load_cpu)
    systems: list[Started] = []
    try:
        systems = start_all(home, origin_port, args.server_cpu, args.size, args.memory_row)
        path = f"/o/{args.size}/shared-hit"
        for system in systems:
            await load.get(system.port, path, HOST)  # the fill
        samples = {s.name: await check_hit(s, path, args.size) for s in systems}
        before, _ = await origin_counts(origin_port)
        results = {s.name: Measured() for s in systems}
        ratios: list[float] = []
        commands: dict[str, str] = {}
        for number in range(args.runs):
            turn = number % len(systems)
            rates: dict[str, float] = {}
            for system in systems[turn:] + systems[:turn]:
                argv = wrk.command(
                    system.port, path, HOST, args.duration, args.connections, args.load_cpu
                )
                commands[system.name] = shlex.join(argv)
                spent = cpu_seconds(system.hit_pid)
                result = await wrk.run(argv)
                spent = cpu_seconds(system.hit_pid) - spent
                if result.non_2xx or result.socket_errors or not result.requests:
                    raise RuntimeError(f"{system.name}: {result}")
                measured = results[system.name]
                measured.rates.append(result.rps)
                measured.cpu_us.append(spent / result.requests * 1e6)
                measured.p99_ms.append(result.p99_ms)
                rates[system.name] = result.rps
            ratios.append(rates["cdn-proxy"] / rates["nginx"])
        after, _ = await origin_counts(origin_port)
        for system in systems:
            samples[system.name] += " / after: " + await check_hit(system, path, args.size)
        report(args, systems, results, ratios, after - before, samples)
        print("\ncommands:")
        print(origin.command)
        for system in systems:
            print(system.server.command)
            print(commands[system.name])
    finally:
        for system in systems:
            system.stop()
        origin.stop()


def report(
    args: argparse.Namespace,
    systems: list[Started],
    results: dict[str, Measured],
    ratios: list[float],
    origin_requests: int,
    samples: dict[str, str],
) -> None:
    print(
        f"{args.size:,}-byte hits, {args.runs} runs of {args.duration} s per system, "
        f"wrk -t1 -c{args.connections}; server core {args.server_cpu}, load core {args.load_cpu}"
    )
    print("| system | req/s (median) | per run | CPU µs per hit | p99 ms |")
    print("|---|---:|---|---:|---:|")
    for system in systems:
        m = results[system.name]
        runs = ", ".join(f"{r:,.0f}" for r in m.rates)
        print(
            f"| {system.name} | {statistics.median(m.rates):,.0f} | {runs} | "
            f"{statistics.median(m.cpu_us):,.1f} | {statistics.median(m.p99_ms):.2f} |"
        )
    each = ", ".join(f"{r:.2f}" for r in ratios)
    print(f"cdn-proxy ÷ nginx req/s, same run: {statistics.median(ratios):.2f}x (runs: {each})")
    print(f"origin requests during the hit runs: {origin_requests}")
    for name, sample in samples.items():
        print(f"sample answer, {name}: {sample}")


def read_cost(size: int, home: Path, reads: int = 300) -> None:
    """In-process, median µs: the tier's ``lookup`` of one entry of ``size`` bytes, reading
    its body as checked chunks (``read_body``), and as one ``bytes`` (``read_all``: what the
    two-tier store hands the edge for a disk hit)."""
    tier = SharedTier.open_node(home / "read-cost", max_bytes=DISK_BYTES)
    try:
        blank = StoredResponse(
            status=200, reason="OK", headers=(("Content-Type", "application/octet-stream"),),
            body=b"", birth=time.time(), freshness_lifetime=3600.0,
        )  # fmt: skip
        fill = Fill(tier, HOST, "/read-cost", blank, tier.lookup(HOST, "/read-cost").token)
        data = os.urandom(size)
        for start in range(0, size, 1 << 16):
            fill.append(data[start : start + (1 << 16)])
        if not fill.commit():
            raise RuntimeError("the fill was not stored")
        (entry,) = tier.lookup(HOST, "/read-cost").variants
        calls: dict[str, Callable[[], object]] = {
            "lookup": lambda: tier.lookup(HOST, "/read-cost"),
            "read_body (checked chunks)": lambda: list(tier.read_body(entry)),
            "read_all (one bytes)": lambda: tier.read_all(entry),
        }
        for label, call in calls.items():
            times = []
            for _ in range(reads):
                begin = time.perf_counter()
                call()
                times.append(time.perf_counter() - begin)
            print(f"{label}: {statistics.median(times) * 1e6:,.1f} µs (median of {reads})")
    finally:
        tier.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=1 << 20)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--duration", type=int, default=5)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument(
        "--memory-row",
        action="store_true",
        help="also measure cdn-proxy serving the object from its memory tier",
    )
    parser.add_argument(
        "--read-cost",
        action="store_true",
        help="only time the shared tier's reads of one object in this process",
    )
    parser.add_argument("--server-cpu", default="1")
    parser.add_argument("--load-cpu", default="0")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="shared-hits-") as tmp:
        if args.read_cost:
            read_cost(args.size, Path(tmp))
        else:
            asyncio.run(measure(args, Path(tmp)))


if __name__ == "__main__":
    main()
