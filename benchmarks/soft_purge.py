"""Origin requests and client latency after a soft purge against a hard one (issue 15).

Run: .venv/bin/python -m benchmarks.soft_purge [--clients 500] [--objects 100] [--runs 3]

One cdn-proxy (server core) in front of the benchmark origin (load core, every answer 50 ms
late, like an origin across a network). ``--clients`` keep-alive clients (this process, on
the load core) request ``--objects`` hot objects of 16 KiB, each client going through them in
its own order. When every object is a hit and the clients have run for a second, the whole
domain is purged through ``POST /api/v1/cdn/purge`` (``{"all": true}``, with ``"soft":
true`` for a soft purge), and the clients go on for ``--after`` seconds more. Three modes:

- ``hard``: the entries are gone; the next request of each object is a miss.
- ``soft``: the entries are stale; the next request of each is revalidated (``If-None-Match``,
  the origin answers 304), and the clients wait for it, as for a miss.
- ``soft+swr``: the same objects say ``stale-while-revalidate=60``: the stale entry is served
  at once and revalidated behind it.

For each run: what the origin answered after the purge (whole bodies and 304s), and the
latency of the requests that started in the second after the purge (the burst a purge makes).
Medians over ``--runs`` runs; the command line is printed under the table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import load
from benchmarks.systems import (
    DOMAINS,
    Origin,
    Server,
    create_token,
    proxy_addresses,
    proxy_argv,
    proxy_config,
)

SIZE = 16 * 1024
DOMAIN = DOMAINS[0]
MODES = {"hard": ("etag", False), "soft": ("etag", True), "soft+swr": ("swr", True)}


@dataclass
class Run:
    mode: str
    full: int  # whole bodies the origin sent after the purge
    not_modified: int  # 304s it sent after the purge
    requests_after: int  # client requests that started in the second after the purge
    p50_ms: float
    p99_ms: float
    max_ms: float
    purge_ms: float  # the purge request, sent to answered


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


async def purge(api: int, token: str, soft: bool) -> float:
    body = json.dumps({"domain": DOMAIN, "all": True, "soft": soft}).encode()
    conn = await load.Connection.open(api)
    try:
        started = time.perf_counter()
        reply = await conn.request(
            "POST",
            "/api/v1/cdn/purge",
            "127.0.0.1",
            [("Authorization", f"Bearer {token}"), ("Content-Type", "application/json")],
            body,
        )
        elapsed = time.perf_counter() - started
    finally:
        await conn.close()
    if reply.status != 200:
        raise SystemExit(f"purge answered {reply.status}: {reply.body!r}")
    return elapsed * 1000


async def one_run(
    mode: str, edge: int, api: int, token: str, origin: Origin, args: argparse.Namespace
) -> Run:
    kind, soft = MODES[mode]
    run_id = f"{mode.replace('+', '-')}-{random.getrandbits(32):x}"  # new objects every run
    paths = [f"/{kind}/{SIZE}/{run_id}-{i}" for i in range(args.objects)]
    filled = await load.fill(edge, DOMAIN, paths)
    if filled.errors:
        raise SystemExit(f"filling the objects failed: {filled.errors} errors")
    samples: list[tuple[float, float, int]] = []  # (start, seconds, status)
    stop = asyncio.Event()

    async def client(seed: int) -> None:
        order = paths[:]
        random.Random(seed).shuffle(order)
        conn = await load.Connection.open(edge)
        try:
            i = 0
            while not stop.is_set():
                started = time.perf_counter()
                reply = await conn.request("GET", order[i % len(order)], DOMAIN)
                samples.append((started, time.perf_counter() - started, reply.status))
                i += 1
        finally:
            await conn.close()

    clients = [asyncio.create_task(client(n)) for n in range(args.clients)]
    try:
        await asyncio.sleep(args.before)  # the load runs for this long: a duration, not a sync
        await origin.reset()
        purge_at = time.perf_counter()
        purge_ms = await purge(api, token, soft)
        await asyncio.sleep(args.after)
        full, not_modified = await origin_counts(origin)
    finally:
        stop.set()
        await asyncio.gather(*clients, return_exceptions=True)
    bad = [status for _, _, status in samples if status != 200]
    if bad:
        raise SystemExit(f"{len(bad)} answers were not 200 (first: {bad[0]})")
    burst = [s * 1000 for start, s, _ in samples if purge_at <= start < purge_at + 1.0]
    return Run(
        mode=mode,
        full=full,
        not_modified=not_modified,
        requests_after=len(burst),
        p50_ms=statistics.median(burst),
        p99_ms=percentile(burst, 0.99),
        max_ms=max(burst),
        purge_ms=purge_ms,
    )


async def origin_counts(origin: Origin) -> tuple[int, int]:
    reply = await load.get(origin.port, "/__origin/counts", "127.0.0.1")
    full, not_modified = reply.body.split()
    return int(full), int(not_modified)


async def measure(args: argparse.Namespace, home: Path) -> list[Run]:
    origin = Origin(home, args.load_cpu, slow_ms=args.origin_ms)
    config = proxy_config(home, origin.port)
    token = create_token(config)
    server = Server("cdn-proxy", proxy_argv(config), home / "serve.log", args.server_cpu)
    server.start()
    try:
        edge, api = proxy_addresses(server)
        runs = []
        for _ in range(args.runs):
            for mode in args.modes.split(","):
                run = await one_run(mode, edge, api, token, origin, args)
                runs.append(run)
                print(
                    f"  {run.mode:9} origin {run.full:4} full {run.not_modified:4} 304 | "
                    f"{run.requests_after:6} requests in the second after: p50 "
                    f"{run.p50_ms:6.2f} p99 {run.p99_ms:6.2f} max {run.max_ms:6.2f} ms | "
                    f"purge {run.purge_ms:5.2f} ms",
                    flush=True,
                )
        return runs
    finally:
        server.stop()
        origin.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=500)
    parser.add_argument("--objects", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--modes", default="hard,soft,soft+swr")
    parser.add_argument("--before", type=float, default=1.0, help="seconds of load before")
    parser.add_argument("--after", type=float, default=2.0, help="seconds of load after")
    parser.add_argument("--origin-ms", type=float, default=50.0)
    parser.add_argument("--server-cpu", default="1")
    parser.add_argument("--load-cpu", default="0")
    args = parser.parse_args()
    os.sched_setaffinity(0, {int(args.load_cpu)})  # the clients on the load core
    with tempfile.TemporaryDirectory(prefix="cdn-proxy-soft-") as name:
        runs = asyncio.run(measure(args, Path(name)))
    print()
    print("| mode | origin: whole bodies | origin: 304 | p50 ms | p99 ms | max ms | purge ms |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for mode in args.modes.split(","):
        mine = [run for run in runs if run.mode == mode]

        def med(name: str, mine: list[Run] = mine) -> float:
            return statistics.median(getattr(run, name) for run in mine)

        print(
            f"| {mode} | {med('full'):.0f} | {med('not_modified'):.0f} | {med('p50_ms'):.2f} "
            f"| {med('p99_ms'):.2f} | {med('max_ms'):.2f} | {med('purge_ms'):.2f} |"
        )
    print(
        f"\n(medians of {args.runs} runs; python -m benchmarks.soft_purge {' '.join(sys.argv[1:])})"
    )


if __name__ == "__main__":
    main()
