"""Concurrent misses of a key the origin answers ``private``: do they wait on each other?

    .venv/bin/python -m benchmarks.hit_for_miss [--root DIR] [--clients 20] [--rounds 30]
        [--slow-ms 50]

Issue 34 §3 asked it, after Varnish: its waiting list serialised such requests, and its
hit-for-miss objects are the cure. ``cdn-proxy serve`` (one process, on core 1) fronts the
benchmark origin (core 0), whose ``/private/`` objects come after ``--slow-ms`` with
``Cache-Control: private``. One request first (so the key has been refused once), then
``--rounds`` rounds of ``--clients`` concurrent GETs of the same URL, each on a fresh
connection. Printed: the median, 90th percentile and maximum time of a request, in units of
the origin's delay. One origin round trip is 1.0; a request that waited for a leader and
then asked the origin itself takes about 2.0. ``--root`` runs cdn-proxy from another
checkout (``git archive``) to compare with the code before.
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

from benchmarks.systems import DOMAINS, PYTHON, ROOT, Origin, Server, proxy_addresses

TARGET = "/private/1024/one"


def config(home: Path, origin_port: int) -> Path:
    path = home / "proxy.toml"
    path.write_text(
        '[edge]\nlisten = "127.0.0.1:0"\n[api]\nlisten = "127.0.0.1:0"\n'
        '[cache]\nmax_bytes = "64MiB"\n[state]\npath = "state.db"\n'
        f'[[domains]]\nname = "{DOMAINS[0]}"\norigin = "http://127.0.0.1:{origin_port}"\n'
    )
    return path


async def one(session: aiohttp.ClientSession, url: str) -> float:
    started = time.perf_counter()
    async with session.get(url, headers={"Host": DOMAINS[0]}) as response:
        await response.read()
        assert response.status == 200, response.status
    return time.perf_counter() - started


async def measure(root: Path, clients: int, rounds: int, slow_ms: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="hit-for-miss-") as name:
        home = Path(name)
        origin = Origin(home, "0", slow_ms=slow_ms)
        argv = [PYTHON, "-m", "proxy", "serve", "--config", str(config(home, origin.port))]
        server = Server("cdn-proxy", argv, home / "proxy.log", "1", cwd=root)
        try:
            server.start()
            edge_port, _ = proxy_addresses(server)
            url = f"http://127.0.0.1:{edge_port}{TARGET}"
            connector = aiohttp.TCPConnector(force_close=True, limit=0)
            async with aiohttp.ClientSession(connector=connector) as session:
                await one(session, url)  # refused once: private
                await origin.reset()
                times: list[float] = []
                for _ in range(rounds):
                    times += await asyncio.gather(*(one(session, url) for _ in range(clients)))
            asked = await origin.count()
            server.check_alive()
        finally:
            server.stop()
            origin.server.stop()
    unit = slow_ms / 1000
    ordered = sorted(times)
    return {
        "median": statistics.median(ordered) / unit,
        "p90": ordered[int(len(ordered) * 0.9)] / unit,
        "max": ordered[-1] / unit,
        "origin_requests_per_request": asked / len(times),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--slow-ms", type=float, default=50.0)
    args = parser.parse_args()
    figures = asyncio.run(measure(args.root.resolve(), args.clients, args.rounds, args.slow_ms))
    print(f"root={args.root} clients={args.clients} rounds={args.rounds} slow_ms={args.slow_ms}")
    for key, value in figures.items():
        print(f"  {key}: {value:.2f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
