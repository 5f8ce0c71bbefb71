"""Hits on 8 workers while the fleet purges 100 URLs a second (issue 31 item 4, decision 0048).

Run: .venv/bin/python -m benchmarks.purge_hits [--workers 8] [--rate 100] [--seconds 10]
     [--rounds 3] [--connections 16] [--root DIR]

A real fleet (benchmarks/fleet_cluster.py): Valkey, a control plane, one edge node of
``--workers`` workers with a shared tier (``cache.disk_path``). Every worker holds
``/d0.test/page0`` in its memory tier. Then ``--rounds`` times, one after the other: wrk
(pinned to CPU 0, ``--connections`` keep-alive connections) hits the page for ``--seconds``
with no purge, then again while a purger sends ``--rate`` URL purges a second of other URLs
of the same domain through ``POST /api/v1/cdn/purge`` (open loop: one sent every 1/rate s,
whatever the answers). Each purge is applied by every worker and written once to the node's
tier (0048); the hits stay hits. Prints each run's hit p50 / p99 and rate, and the purges
answered 200 per second with their latency; the medians over the rounds last. ``--root``
runs the nodes from another checkout's ``proxy`` (its directory first on their path): the
code from before 0048, where every worker wrote every purge to the tier, on its event loop.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

from benchmarks import fleet_cluster, wrk
from benchmarks.fleet_cluster import Cluster

DOMAIN = "d0.test"
PAGE = f"/{DOMAIN}/page0"
MAX_IN_FLIGHT = 256  # purges waiting for the fleet at once, at most


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else 0.0


async def warm(cluster: Cluster, workers: int) -> None:
    """Fill the page, then read it on fresh connections until every worker has served it
    (each connection lands on some worker: a few times the worker count is plenty)."""
    edge = cluster.edges[0]
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session:
        for _ in range(workers * 20):
            async with session.get(edge.url + PAGE, headers={"Host": DOMAIN}) as response:
                await response.read()
                assert response.status == 200, response.status


class Purger:
    """URL purges of DOMAIN at ``rate`` a second, each of a URL no reader asks for."""

    def __init__(self, cluster: Cluster, rate: float) -> None:
        self.cluster = cluster
        self.rate = rate
        self.answered: list[tuple[int | None, float]] = []  # status, seconds
        self._next = 0

    async def run(self, stop: asyncio.Event) -> float:
        """Purge until ``stop``; the seconds it ran."""
        cluster = self.cluster
        headers = {"Authorization": f"Bearer {cluster.token}"}
        timeout = aiohttp.ClientTimeout(total=cluster.timing.clear_timeout + 5)
        slots = asyncio.Semaphore(MAX_IN_FLIGHT)
        tasks: set[asyncio.Task[None]] = set()
        async with aiohttp.ClientSession(headers=headers, timeout=timeout) as session:

            async def one(n: int) -> None:
                body = {"domain": DOMAIN, "urls": [f"/{DOMAIN}/gone/{n}"]}
                started = time.monotonic()
                status: int | None = None
                try:
                    async with session.post(
                        f"{cluster.api_url}/api/v1/cdn/purge", json=body
                    ) as response:
                        await response.read()
                        status = response.status
                except (aiohttp.ClientError, TimeoutError):
                    pass
                finally:
                    slots.release()
                self.answered.append((status, time.monotonic() - started))

            began = time.monotonic()
            due = began
            while not stop.is_set():
                await slots.acquire()
                self._next += 1
                task = asyncio.create_task(one(self._next))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                due += 1 / self.rate
                await asyncio.sleep(max(0.0, due - time.monotonic()))
            ran = time.monotonic() - began
            await asyncio.gather(*tasks)
        return ran


async def hits(cluster: Cluster, seconds: int, connections: int) -> wrk.WrkResult:
    port = int(cluster.edges[0].url.rsplit(":", 1)[1])
    return await wrk.run(wrk.command(port, PAGE, DOMAIN, seconds, connections))


async def measure(args: argparse.Namespace, directory: Path) -> int:
    cluster = Cluster(directory, domains=(DOMAIN,), workers=(args.workers,), disk=True)
    quiet: list[wrk.WrkResult] = []
    loud: list[wrk.WrkResult] = []
    rates: list[float] = []
    try:
        await cluster.start()
        await warm(cluster, args.workers)
        for round_ in range(args.rounds):
            result = await hits(cluster, args.seconds, args.connections)
            quiet.append(result)
            print(f"round {round_ + 1} no purges: {line(result)}", flush=True)
            purger = Purger(cluster, args.rate)
            stop = asyncio.Event()
            purging = asyncio.create_task(purger.run(stop))
            try:
                result = await hits(cluster, args.seconds, args.connections)
            finally:
                stop.set()
                ran = await purging
            loud.append(result)
            ok = [seconds for status, seconds in purger.answered if status == 200]
            rate = len(ok) / ran
            rates.append(rate)
            print(
                f"round {round_ + 1} {args.rate:g} purges/s: {line(result)}; purges answered"
                f" 200 {len(ok)} of {len(purger.answered)} ({rate:.1f}/s), latency p50"
                f" {percentile(ok, 0.5) * 1000:.1f} ms, p99 {percentile(ok, 0.99) * 1000:.1f} ms",
                flush=True,
            )
    finally:
        await cluster.close()
    for name, runs in (("no purges", quiet), (f"{args.rate:g} purges/s", loud)):
        print(
            f"median over {len(runs)} rounds, {name}: hit p50"
            f" {statistics.median(r.p50_ms for r in runs):.2f} ms, p99"
            f" {statistics.median(r.p99_ms for r in runs):.2f} ms,"
            f" {statistics.median(r.rps for r in runs):,.0f} hits/s"
        )
    print(f"purges answered 200 a second, median: {statistics.median(rates):.1f}")
    return 0


def line(result: wrk.WrkResult) -> str:
    return (
        f"hit p50 {result.p50_ms:.2f} ms, p99 {result.p99_ms:.2f} ms, {result.rps:,.0f} hits/s"
        f" ({result.non_2xx} non-2xx, {result.socket_errors} socket errors)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--rate", type=float, default=100.0, help="purges a second")
    parser.add_argument("--seconds", type=int, default=10, help="of each wrk run")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--root", type=Path, help="run the nodes from this checkout")
    args = parser.parse_args(argv)
    if args.root is not None:
        path = fleet_cluster.ENV["PYTHONPATH"]
        fleet_cluster.ENV = {**fleet_cluster.ENV, "PYTHONPATH": f"{args.root.resolve()}:{path}"}
    if wrk.wrk_binary() is None:
        print("wrk is not installed", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="purge-hits-") as scratch:
        return asyncio.run(measure(args, Path(scratch)))


if __name__ == "__main__":
    sys.exit(main())
