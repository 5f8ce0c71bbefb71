"""Origin bytes for one Zipf trace: cdn-proxy's shared tier against nginx ``proxy_cache``, both
holding C bytes on disk (issue 23's benchmarks: cdn-proxy's origin bytes must be <= nginx's).

Run: .venv/bin/python -m benchmarks.shared_replay [--requests 20000] [--objects 5000]
     [--alpha 0.9] [--fraction 0.1]

The trace is benchmarks/hit_ratio.py's (Zipf popularity over ``--objects`` objects, one-hit
wonders and a scan, sizes log-normal around 16 KiB, one size per object); C is ``--fraction``
of its working set. Each request ``/o/{size}/{id}`` is sent in the trace's order, one at a
time on one keep-alive connection, to:

- **cdn-proxy**: ``workers = 1``, ``disk_path`` with ``disk_max_bytes = C``; its memory tier is
  64 KiB (it keeps objects up to 8 KiB: a capacity beside C of 0.2% of it at the default
  sizes), so what decides is the shared tier's eviction. It evicts as it commits a fill: it
  never holds more than C.
- **nginx, max_size = C**: nginx's cache manager evicts lazily. While the cache is under
  ``max_size`` it sleeps until the next ``inactive`` expiry, 10 s at most; when it wakes over
  ``max_size`` it removes least recently used files until it is under again. So between its
  passes nginx holds more than C (a short replay may end before its first pass, holding
  everything). The replay samples the cache directory every ``--sample-every`` requests (the
  files' sizes rounded up to 4 KiB blocks, as nginx counts them) and reports the largest and
  the mean size it saw.
- **nginx, held to C**: the same nginx, but the replay keeps it to the capacity it was given.
  Whenever a sample finds nginx holding more than ``(1 + --slack) x C``, the replay stops
  sending and waits (polling the directory) until nginx's manager has brought the cache under
  ``max_size`` again, then goes on. So nginx never holds more than about ``1.1 C`` (at the
  default slack) and cdn-proxy never more than C: the same capacity, with nginx given the
  slack. The pauses change when nginx evicts, never what it is asked or in what order.
  (Waiting after every miss, with no slack, would take up to 10 s a miss.)
- **cdn-proxy, disk_max_bytes = nginx's mean**: the other way to compare at the bytes each
  really held: cdn-proxy replays the trace again with its tier as large as the mean that the
  unheld nginx held.

Each system counts C its own way: nginx in file-system blocks of its cache files (each file
starts with a header of the key and the response's fields, and is rounded up to 4 KiB);
cdn-proxy as the key, the body and its record (and 4 bytes per 64 KiB of a body in a file).

The origin (benchmarks/origin.py) counts the requests and body bytes it served to each.
Every answer is checked: status 200 and the object's length.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from benchmarks import load
from benchmarks.disk_peers import (
    HOST,
    Started,
    disk_usage,
    origin_counts,
    start_nginx,
    start_origin,
    start_ours,
)
from benchmarks.hit_ratio import Trace, zipf_trace

MEMORY_BYTES = 64 << 10
NGINX = "nginx, max_size = C"
FAIR = "cdn-proxy, nginx's mean"
HELD = "nginx, held to C"


@dataclass
class Replayed:
    name: str
    origin_requests: int
    origin_bytes: int
    seconds: float
    largest: int  # the largest size of the cache seen (sampled), bytes
    mean: int  # the mean of the sizes sampled
    note: str = ""


async def replay(
    system: Started, trace: Trace, sample: Callable[[int, load.Reply], Awaitable[None]]
) -> float:
    """Send the trace, one request at a time; ``await sample(i, reply)`` after each. Seconds
    taken, pauses in ``sample`` included."""
    conn = await load.Connection.open(system.port)
    start = time.perf_counter()
    try:
        for i, (key, size) in enumerate(zip(trace.ids, trace.sizes, strict=True)):
            reply = await conn.request("GET", f"/o/{size}/{key}", HOST)
            if reply.status != 200 or len(reply.body) != size:
                raise RuntimeError(f"{system.name}: {reply.status}, {len(reply.body)} of {size}")
            await sample(i, reply)
    finally:
        await conn.close()
    return time.perf_counter() - start


async def tier_bytes(api_port: int) -> tuple[int, int]:
    """cdn-proxy's shared tier: (bytes, evictions) from /metrics."""
    text = (await load.get(api_port, "/metrics", "127.0.0.1")).body.decode()
    found = dict(re.findall(r"^(cdn_proxy_shared_tier_\w+) ([\d.e+]+)$", text, re.MULTILINE))
    return int(float(found["cdn_proxy_shared_tier_bytes"])), int(
        float(found["cdn_proxy_shared_tier_evictions_total"])
    )


async def run_system(
    system: Started, trace: Trace, origin_port: int, capacity: int, args: argparse.Namespace
) -> Replayed:
    conn = await load.Connection.open(origin_port)
    await conn.request("POST", "/__origin/reset", "127.0.0.1")
    await conn.close()
    sizes: list[int] = []
    every, held = args.sample_every, system.name == HELD
    pauses: list[float] = []

    async def sample(i: int, reply: load.Reply) -> None:
        if not system.name.startswith("nginx"):
            return
        if i % every == 0 or i == len(trace.ids) - 1:
            sizes.append(disk_usage(system.cache_dir))
            if held and sizes[-1] > capacity * (1 + args.slack):
                pauses.append(await manager_pass(system.cache_dir, capacity))

    seconds = await replay(system, trace, sample)
    requests, sent = await origin_counts(origin_port)
    if system.name.startswith("cdn-proxy"):
        held, evictions = await tier_bytes(system.api_port)
        note = f"its own count of the tier's bytes at the end; {evictions:,} evictions"
        return Replayed(system.name, requests, sent, seconds, held, held, note)
    note = f"sampled every {every} requests ({len(sizes)} samples)"
    if held:
        note += f"; {len(pauses)} waits for its manager, {sum(pauses):.0f} s in all"
    mean = sum(sizes) // len(sizes)
    return Replayed(system.name, requests, sent, seconds, max(sizes), mean, note)


async def manager_pass(cache_dir: Path, capacity: int) -> float:
    """Wait until nginx's cache manager has brought its cache under ``capacity`` (its
    ``max_size``); seconds waited. Its manager wakes at least every 10 s."""
    start = time.perf_counter()
    while disk_usage(cache_dir) > capacity:
        if time.perf_counter() - start > 60:
            raise RuntimeError("nginx's cache manager did not evict within 60 s")
        await asyncio.sleep(0.2)
    return time.perf_counter() - start


async def measure(args: argparse.Namespace, home: Path) -> None:
    trace = zipf_trace(alpha=args.alpha, requests=args.requests, objects=args.objects, seed=23)
    capacity = int(trace.working_set * args.fraction)
    print(
        f"trace: zipf {args.alpha}, {len(trace.ids):,} requests over {args.objects:,} popular "
        f"objects ({len(set(trace.ids)):,} distinct), working set {trace.working_set:,} B, "
        f"requested {trace.requested_bytes:,} B; C = {args.fraction:g} x working set = "
        f"{capacity:,} B"
    )
    origin, origin_port = start_origin(home, args.load_cpu)
    rows: list[Replayed] = []
    commands = [origin.command]
    try:
        max_size = {"cdn-proxy": capacity, NGINX: capacity, HELD: capacity}
        for name in ("cdn-proxy", NGINX, FAIR, HELD):
            if name == FAIR:
                max_size[name] = max(capacity, rows[-1].mean)
            system = start_system(name, home, origin_port, max_size[name], args.server_cpu)
            try:
                commands.append(system.server.command)
                rows.append(await run_system(system, trace, origin_port, capacity, args))
            finally:
                system.stop()
    finally:
        origin.stop()
    report(rows, max_size, capacity, trace)
    print("\ncommands:")
    print("\n".join(commands))


def start_system(name: str, home: Path, origin_port: int, capacity: int, cpu: str) -> Started:
    directory = home / re.sub(r"\W+", "-", name).strip("-")
    if name.startswith("cdn-proxy"):
        ours = start_ours(
            directory,
            origin_port,
            cpu,
            memory_bytes=MEMORY_BYTES,
            disk_bytes=capacity,
            max_object=min(capacity, 16 << 20),
        )
        ours.name = name
        return ours
    # One directory level: the replay sizes the directory often.
    started = start_nginx(directory, origin_port, cpu, max_size=capacity, levels="levels=1")
    started.name = name
    return started


def report(rows: list[Replayed], max_size: dict[str, int], capacity: int, trace: Trace) -> None:
    print(
        "| system | size limit | origin requests | origin bytes | ÷ nginx's "
        "| largest held ÷ C | mean held ÷ C | s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    ours, nginx, fair, held = (row.origin_bytes for row in rows)
    for row in rows:
        print(
            f"| {row.name} | {max_size[row.name]:,} | {row.origin_requests:,} | "
            f"{row.origin_bytes:,} | {row.origin_bytes / nginx:.3f} | "
            f"{row.largest / capacity:.3f} | {row.mean / capacity:.3f} | {row.seconds:.1f} |"
        )
    for row in rows:
        print(f"{row.name}: held: {row.note}")
    ratios = ", ".join(f"{r.name} {r.origin_bytes / trace.requested_bytes:.3f}" for r in rows)
    print(f"byte miss ratios: {ratios}")
    for label, bytes_, theirs in (
        ("both at max_size C, nginx unheld", ours, nginx),
        ("at the bytes the unheld nginx held", fair, nginx),
        ("both held to C (nginx with the slack)", ours, held),
    ):
        verdict = "met" if bytes_ <= theirs else "not met"
        print(f"cdn-proxy's origin bytes <= nginx's, {label}: {verdict} ({bytes_ / theirs:.3f}x)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--objects", type=int, default=5_000)
    parser.add_argument("--alpha", type=float, default=0.9)
    parser.add_argument("--fraction", type=float, default=0.1, help="C over the working set")
    parser.add_argument("--sample-every", type=int, default=20)
    parser.add_argument(
        "--slack", type=float, default=0.1, help="how far over C the held nginx may go"
    )
    parser.add_argument("--server-cpu", default="1")
    parser.add_argument("--load-cpu", default="0")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="shared-replay-") as tmp:
        asyncio.run(measure(args, Path(tmp)))


if __name__ == "__main__":
    main()
