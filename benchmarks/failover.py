"""Failover (issue 25 §2, decision 0034): client errors and latency while one of two origin
servers is killed, with 100 clients.

Run: taskset -c 1 .venv/bin/python -m benchmarks.failover [--seconds 6] [--clients 100]

cdn-proxy (one process) and two benchmark origins (benchmarks/origin.py) run on core 0, this
load generator on core 1. Every request asks a distinct 1 KiB object, so each one is a miss
that goes through origin selection. A third of the way through, origin A is killed with
SIGKILL (its open connections die with it); the run goes on to the end on origin B. Two modes:

- ``passive``: no health check: the first connection failure marks A down (nginx's
  max_fails=1), the failed request is retried on B;
- ``probed``: ``[domains.health_check]`` every second as well (fails = 2, passes = 2).

For each mode it prints the requests and client errors (any answer but 200, or a failed
connection) before and after the kill, and p50/p99/max latency of each phase; and the same
for the first second after the kill, where a failover shows if anywhere.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from benchmarks.systems import PYTHON, Server, free_port, proxy_addresses, wait_for_port

HEALTH = """
[domains.health_check]
path = "/__origin/count"
interval = "1s"
timeout = "500ms"
fails = 2
passes = 2
"""


@dataclass
class Phase:
    latencies: list[float] = field(default_factory=list)
    errors: int = 0

    def line(self, name: str) -> str:
        n = len(self.latencies)
        if n == 0:
            return f"{name:<14} requests 0"
        ordered = sorted(self.latencies)
        p99 = ordered[min(n - 1, int(n * 0.99))]
        return (
            f"{name:<14} requests {n:>6}  errors {self.errors:>3}  "
            f"p50 {statistics.median(ordered) * 1000:6.1f} ms  p99 {p99 * 1000:6.1f} ms  "
            f"max {ordered[-1] * 1000:6.1f} ms"
        )


@dataclass
class Run:
    before: Phase = field(default_factory=Phase)
    after: Phase = field(default_factory=Phase)
    first_second: Phase = field(default_factory=Phase)
    killed_at: float | None = None


def config(home: Path, ports: list[int], probed: bool) -> Path:
    path = home / "proxy.toml"
    origins = ", ".join(f'"http://127.0.0.1:{p}"' for p in ports)
    path.write_text(
        '[edge]\nlisten = "127.0.0.1:0"\n\n[api]\nlisten = "127.0.0.1:0"\n\n'
        '[cache]\nmax_bytes = "2GiB"\n\n[state]\npath = "state.db"\n\n'
        f'[[domains]]\nname = "example.com"\norigins = [{origins}]\n' + (HEALTH if probed else "")
    )
    return path


async def client(
    session: aiohttp.ClientSession, edge: str, number: int, until: float, run: Run
) -> None:
    i = 0
    while (now := time.monotonic()) < until:
        i += 1
        started = time.perf_counter()
        ok = False
        try:
            url = f"{edge}/o/1024/c{number}-{i}"
            async with session.get(url, headers={"Host": "example.com"}) as response:
                await response.read()
                ok = response.status == 200
        except aiohttp.ClientError:
            pass
        took = time.perf_counter() - started
        killed = run.killed_at
        phases = [run.before] if killed is None or now < killed else [run.after]
        if killed is not None and killed <= now < killed + 1:
            phases.append(run.first_second)
        for phase in phases:
            phase.latencies.append(took)
            phase.errors += not ok


async def measure(edge: str, victim: Server, seconds: float, clients: int) -> Run:
    run = Run()
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector) as session:
        until = time.monotonic() + seconds
        load = [asyncio.create_task(client(session, edge, n, until, run)) for n in range(clients)]
        await asyncio.sleep(seconds / 3)  # the kill comes at a chosen moment of the run
        os.killpg(victim.pid, signal.SIGKILL)
        run.killed_at = time.monotonic()
        await asyncio.gather(*load)
    return run


def one_mode(probed: bool, seconds: float, clients: int) -> None:
    with tempfile.TemporaryDirectory(prefix="failover-") as tmp:
        home = Path(tmp)
        ports = [free_port(), free_port()]
        origins = [
            Server(
                f"origin-{n}",
                [PYTHON, "-m", "benchmarks.origin", "--port", str(p)],
                home / f"origin-{n}.log",
                "0",
            )
            for n, p in zip("ab", ports, strict=True)
        ]
        proxy = Server(
            "cdn-proxy",
            [PYTHON, "-m", "proxy", "serve", "--config", str(config(home, ports, probed))],
            home / "proxy.log",
            "0",
        )
        try:
            for origin, port in zip(origins, ports, strict=True):
                origin.start()
                wait_for_port(origin, port)
            proxy.start()
            edge_port, _ = proxy_addresses(proxy)
            run = asyncio.run(
                measure(f"http://127.0.0.1:{edge_port}", origins[0], seconds, clients)
            )
            with urllib.request.urlopen(f"http://127.0.0.1:{ports[1]}/__origin/count") as answer:
                at_b = int(answer.read())
        finally:
            for server in [proxy, *origins]:
                server.stop()
    mode = "probed" if probed else "passive"
    print(f"{mode}: {clients} clients, {seconds:g} s, origin A killed at {seconds / 3:g} s")
    print("  " + run.before.line("before kill"))
    print("  " + run.after.line("after kill"))
    print("  " + run.first_second.line("first second"))
    total = len(run.before.latencies) + len(run.after.latencies)
    print(f"  origin B answered {at_b} of {total} requests (A the rest, until it was killed)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--modes", default="passive,probed")
    args = parser.parse_args()
    for mode in args.modes.split(","):
        one_mode(mode == "probed", args.seconds, args.clients)


if __name__ == "__main__":
    main()
