"""Purge-to-return latency per kind through the fleet (decision 0026), N edge workers.

Run: .venv/bin/python -m benchmarks.fleet_purge [--workers 2] [--purges 200] [--warmup 20]
         [--server-cpu 1] [--load-cpu 0] [--json]

A real node is started as an operator would (``python -m proxy serve`` with ``[edge] workers
= N``, so the control process starts the embedded Valkey on a Unix socket and N worker
processes), pinned with ``taskset`` to ``--server-cpu``. This process, pinned to
``--load-cpu``, holds a ``FleetPurger`` on that Valkey (as the purge API's control plane
does: the API itself is not measured here) and sends purges one after another, the kinds
taking turns (url, prefix, tag, all; each hard and soft) so that the machine's noise falls
on all of them alike. Each is timed from the call to its return: recorded, published,
applied by every worker (a url/prefix/tag record read and applied, a hard all cleared) and
acked, then the members' figures read. Anything but a return stops the run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.fleet_clear import DOMAIN, node_config, percentile, pin, wait_for_workers
from benchmarks.systems import Server, proxy_addresses, proxy_argv
from proxy.core.purge.fleet import KEPT_RECORDS
from proxy.core.purge.purges import Purge, purge_request
from proxy.fleet.purger import FleetPurger
from proxy.fleet.settings import FleetSettings

KINDS: dict[str, Purge] = {
    "url": purge_request("url", ["/assets/app.js?v=1"]),
    "url soft": purge_request("url", ["/assets/app.js?v=1"], soft=True),
    "prefix": purge_request("prefix", ["/assets/"]),
    "prefix soft": purge_request("prefix", ["/assets/"], soft=True),
    "tag": purge_request("tag", ["product-42"]),
    "tag soft": purge_request("tag", ["product-42"], soft=True),
    "all": purge_request("all"),
    "all soft": purge_request("all", soft=True),
}


async def purge_times(home: Path, warmup: int, purges: int) -> dict[str, list[float]]:
    """Milliseconds per purge, by kind, one purge at a time; warm-up not kept."""
    url = f"unix://{home / 'fleet-valkey.sock'}"
    purger = FleetPurger(settings=FleetSettings(url=url), name="bench")
    times: dict[str, list[float]] = {kind: [] for kind in KINDS}
    try:
        for i in range(warmup + purges * len(KINDS)):
            kind = list(KINDS)[i % len(KINDS)]
            start = time.perf_counter()
            result = await purger.purge(DOMAIN, KINDS[kind])
            elapsed = (time.perf_counter() - start) * 1000
            if result.acked != result.live:
                raise RuntimeError(f"purge {i} returned with {result.acked}/{result.live} acks")
            if i >= warmup:
                times[kind].append(elapsed)
    finally:
        await purger.aclose()
    return times


def measure(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    home = tmp / f"w{args.workers}"
    home.mkdir()
    config = node_config(home, args.workers)
    server = Server("cdn-proxy", proxy_argv(config), home / "serve.log", args.server_cpu)
    server.start()
    try:
        proxy_addresses(server, timeout=60)
        asyncio.run(wait_for_workers(home, args.workers))
        times = asyncio.run(purge_times(home, args.warmup, args.purges))
        server.check_alive()
    finally:
        server.stop()
    return {
        "workers": args.workers,
        "kept_records": KEPT_RECORDS,
        "kinds": {
            kind: {
                "purges": len(values),
                "p50_ms": statistics.median(values),
                "p99_ms": percentile(values, 0.99),
                "max_ms": max(values),
            }
            for kind, values in times.items()
        },
        "command": server.command,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--purges", type=int, default=200, help="per kind")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--server-cpu", default="1")
    parser.add_argument("--load-cpu", default="0")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    pin(args)
    with tempfile.TemporaryDirectory(prefix="fleet-purge-") as tmp:
        result = measure(args, Path(tmp))
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{args.workers} workers, embedded Valkey; node: {result['command']}")
    print("| kind | purges | p50 ms | p99 ms | max ms |\n|---|---|---|---|---|")
    for kind, row in result["kinds"].items():
        print(
            f"| {kind} | {row['purges']} | {row['p50_ms']:.2f} | {row['p99_ms']:.2f}"
            f" | {row['max_ms']:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
