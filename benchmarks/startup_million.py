"""Start-up with 1,000,000 objects in the shared tier: ``cdn-proxy serve`` from exec to its
first hit over HTTP (issue 23 §3: within 2 s, and no growth with the cache).

Run: .venv/bin/python -m benchmarks.startup_million [--entries 1000000] [--runs 3]

1. **A real entry.** ``cdn-proxy serve`` with ``[cache] disk_path`` fills one object of
   ``--size`` bytes from the origin (benchmarks/origin.py) over HTTP and is stopped
   (SIGTERM: the tier is closed clean). The entry its fill wrote is read back through the
   tier's own ``lookup``: the response as the edge stored it, with its hit lines.
2. **The other entries.** The tier is opened as the node (``SharedTier.open_node``) and
   ``--entries`` entries of the same response are stored under other URLs of the domain with
   the tier's own writer (``Fill``: a record, its place in the eviction order and the
   totals), a batch of them per LMDB write transaction (``Fill`` commits one per
   transaction; a million commits would take minutes). Then the tier is closed clean.
3. **Start-ups.** ``--runs`` times: exec ``cdn-proxy serve`` (server core), read its output
   until it prints its edge address, then ask for one of the million URLs, a different one
   each run (load core): the answer must be 200, the stored body, and
   ``Cache-Status: ...; hit; detail="disk"``. Timed from before the exec to the end of that
   answer, and to the address line (listening); the process is then stopped with SIGTERM.
   The same is done on a tier of one entry, for comparison, and the time a Python takes
   to import what ``serve`` runs, and exit, is printed beside them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks import load
from benchmarks.disk_peers import HOST, start_origin, start_ours
from benchmarks.systems import CHILD_ENV, PYTHON, ROOT
from proxy.core.cache.entry import StoredResponse
from proxy.store.shared import Fill, SharedTier

BATCH = 20_000  # entries per write transaction
DISK_BYTES = 4 << 30


@dataclass(frozen=True)
class Start:
    listening: float  # seconds from exec to the edge address line
    first_hit: float  # seconds from exec to the end of the first hit's answer
    status: str  # the hit's Cache-Status


def target(i: int, size: int) -> str:
    return f"/o/{size}/m{i}"


async def template(home: Path, origin_port: int, size: int, cpu: str) -> None:
    """Fill one object through a real ``cdn-proxy serve``, then stop it (a clean close)."""
    ours = start_ours(
        home, origin_port, cpu, memory_bytes=64 << 20, disk_bytes=DISK_BYTES, max_object=1 << 20
    )
    try:
        for _ in range(2):
            reply = await load.get(ours.port, target(0, size), HOST)
        if "hit" not in reply.headers.get("cache-status", ""):
            raise RuntimeError(f"no hit after the fill: {reply.headers}")
    finally:
        ours.stop()


def fill_million(directory: Path, entries: int, size: int) -> tuple[float, StoredResponse]:
    """Store ``entries`` copies of the filled entry under other URLs; seconds taken."""
    tier = SharedTier.open_node(directory, max_bytes=DISK_BYTES)
    try:
        found = tier.lookup(HOST, target(0, size))
        if len(found.variants) != 1:
            raise RuntimeError(f"the filled entry is not in the tier: {found}")
        (entry,) = found.variants
        response, body = entry.response, entry.response.body
        start = time.perf_counter()
        for base in range(1, entries, BATCH):
            batch = []
            for i in range(base, min(entries, base + BATCH)):
                fill = Fill(tier, HOST, target(i, size), response, found.token)
                fill.append(body)
                batch.append(fill)
            if Fill.commit_all(tier, batch) != len(batch):  # a batch per transaction
                raise RuntimeError("the tier refused part of a batch")
        seconds = time.perf_counter() - start
    finally:
        tier.close()
    return seconds, response


async def start_once(config: Path, path: str, size: int, cpu: str) -> Start:
    argv = ["taskset", "-c", cpu, PYTHON, "-m", "proxy", "serve", "--config", str(config)]
    start = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        cwd=ROOT,
        env=CHILD_ENV,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        port = 0
        while not port:
            line = (await asyncio.wait_for(process.stdout.readline(), 60)).decode()
            if not line:
                raise RuntimeError("cdn-proxy serve exited before it listened")
            if line.startswith("edge http://"):
                port = int(line.rsplit(":", 1)[1])
        listening = time.perf_counter() - start
        reply = await load.get(port, path, HOST)
        first_hit = time.perf_counter() - start
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        await asyncio.wait_for(process.wait(), 30)
    status = reply.headers.get("cache-status", "")
    if reply.status != 200 or len(reply.body) != size:
        raise RuntimeError(f"{path}: {reply.status}, {len(reply.body)} bytes")
    return Start(listening, first_hit, status)


# What serve imports with one process (no fleet); os._exit skips the interpreter's teardown,
# as serve's own exit does.
IMPORTS = "import proxy.cli.main, proxy.process.service, os; os._exit(0)"


def import_seconds(cpu: str) -> float:
    """Seconds from exec to exit of a Python that only imports what ``serve`` runs (and exits
    without its teardown): the part of a start that the cache's size cannot change."""
    start = time.perf_counter()
    subprocess.run(
        ["taskset", "-c", cpu, PYTHON, "-c", IMPORTS], check=True, cwd=ROOT, env=CHILD_ENV
    )
    return time.perf_counter() - start


def summary(label: str, starts: list[Start]) -> str:
    listen = statistics.median(s.listening for s in starts) * 1000
    hit = statistics.median(s.first_hit for s in starts) * 1000
    runs = ", ".join(f"{s.first_hit * 1000:.0f}" for s in starts)
    return f"| {label} | {listen:,.0f} | {hit:,.0f} | {runs} |"


async def measure(args: argparse.Namespace, home: Path) -> None:
    origin, origin_port = start_origin(home, args.load_cpu)
    rows: list[str] = []
    try:
        empty_home = home / "empty"
        await template(empty_home, origin_port, args.size, args.server_cpu)
        # The empty tier's comparison: its one object is the only entry.
        empty = [
            await start_once(
                empty_home / "proxy.toml", target(0, args.size), args.size, args.server_cpu
            )
            for _ in range(args.runs)
        ]
        million = home / "million"
        await template(million, origin_port, args.size, args.server_cpu)
        seconds, _ = fill_million(million / "cache", args.entries, args.size)
        used = sum(f.stat().st_size for f in (million / "cache" / "entries").iterdir())
        print(
            f"stored {args.entries:,} entries of {args.size} B in {seconds:.1f} s "
            f"(LMDB file {used / 2**20:,.0f} MiB)"
        )
        picks = random.Random(23).sample(range(1, args.entries), args.runs)
        full = [
            await start_once(
                million / "proxy.toml", target(i, args.size), args.size, args.server_cpu
            )
            for i in picks
        ]
        rows = [summary("1 entry", empty), summary(f"{args.entries:,} entries", full)]
        imports = [import_seconds(args.server_cpu) for _ in range(args.runs)]
        statuses = {s.status for s in empty + full}
    finally:
        origin.stop()
    print(f"cdn-proxy serve, exec to first hit over HTTP, median of {args.runs} starts")
    print("| shared tier holds | exec to listening ms | exec to first hit ms | per start ms |")
    print("|---|---:|---:|---:|")
    print("\n".join(rows))
    print(f"Cache-Status of the first hits: {', '.join(sorted(statuses))}")
    each = ", ".join(f"{seconds * 1000:.0f}" for seconds in imports)
    print(
        f"imports alone (python -c {IMPORTS!r}): "
        f"{statistics.median(imports) * 1000:,.0f} ms median ({each})"
    )
    if any('detail="disk"' not in s or "; hit" not in s for s in statuses):
        raise SystemExit("a first answer was not a hit from the shared tier")
    print(
        f"command: taskset -c {args.server_cpu} {PYTHON} -m proxy serve --config "
        f"{home}/million/proxy.toml (a temporary directory)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=200, help="body bytes of each entry")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--server-cpu", default="1")
    parser.add_argument("--load-cpu", default="0")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="startup-million-") as tmp:
        asyncio.run(measure(args, Path(tmp)))


if __name__ == "__main__":
    main()
