"""How long clearing a domain takes with 1k to 1M entries cached, and what reclaim costs.

Run: taskset -c 1 .venv/bin/python -m benchmarks.clear_cost [--sizes 1000,10000,100000,1000000]
     [--runs 5] [--json]

The clear is timed around ``MemoryStore.clear_domain`` alone (the API adds its own HTTP and
audit cost on top). Each size is filled fresh and cleared ``--runs`` times; the median is
printed with the ratio to the smallest size, measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import time
from dataclasses import replace

from proxy.core.cache.entry import StoredResponse
from proxy.process.service import RECLAIM_SLICE, RECLAIM_SLICE_SECONDS
from proxy.store.memory import MemoryStore

BODY = b"x" * 64


def entry(size: int) -> StoredResponse:
    """An entry whose counted size is ``size`` (its key_size makes up the difference)."""
    plain = StoredResponse(
        status=200,
        reason="OK",
        headers=(("Content-Type", "text/plain"),),
        body=BODY,
        birth=0.0,
        freshness_lifetime=60.0,
    )
    return replace(plain, key_size=size - plain.size)


async def measure(count: int, runs: int, slice_keys: int) -> tuple[float, float, float]:
    """Median clear time, median and worst reclaim-slice time, in microseconds."""
    clears: list[float] = []
    slices: list[float] = []
    shared = entry(200)
    for _ in range(runs):
        store = MemoryStore(max_bytes=count * 400)
        generation = (await store.lookup("a.example", "/")).key[1]
        for i in range(count):
            await store.put(("a.example", generation, f"/object/{i}"), shared)
        gc.collect()  # so a collection over the fill's objects does not land inside the clear
        start = time.perf_counter_ns()
        await store.clear_domain("a.example")
        clears.append((time.perf_counter_ns() - start) / 1000)
        while store.pending_reclaim:
            start = time.perf_counter_ns()
            store.reclaim(slice_keys, seconds=RECLAIM_SLICE_SECONDS)  # as the service runs it
            slices.append((time.perf_counter_ns() - start) / 1000)
    return statistics.median(clears), statistics.median(slices), max(slices)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="1000,10000,100000,1000000")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--slice", type=int, default=RECLAIM_SLICE, help="keys per reclaim slice")
    parser.add_argument("--json", action="store_true", help="print JSON (for benchmarks.run)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    results = {n: asyncio.run(measure(n, args.runs, args.slice)) for n in sizes}
    if args.json:
        rows = [
            {"entries": n, "clear_us": c, "slice_median_us": m, "slice_worst_us": w}
            for n, (c, m, w) in results.items()
        ]
        print(json.dumps({"runs": args.runs, "slice": args.slice, "sizes": rows}))
        return
    base = results[sizes[0]][0]
    print(f"reclaim slice: {args.slice} keys or {RECLAIM_SLICE_SECONDS * 1e6:.0f} µs")
    print("| entries | clear median (µs) | ratio to smallest | reclaim slice median / worst (µs) |")
    print("|---:|---:|---:|---:|")
    for n, (clear, mid_slice, worst_slice) in results.items():
        print(
            f"| {n:,} | {clear:.1f} | {clear / base:.2f}x | {mid_slice:.0f} / {worst_slice:.0f} |"
        )


if __name__ == "__main__":
    main()
