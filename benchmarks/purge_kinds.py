"""Purges beyond a whole domain, in the memory store (decision 0024): what each kind costs at
purge time with 1k to 1M entries in the domain, and what a hit costs in the store with
outstanding prefix bans and with tags.

Run: taskset -c 1 .venv/bin/python -m benchmarks.purge_kinds [--sizes 1000,1000000]
     [--bans 0,100,10000] [--runs 5]

- Purge latency: ``MemoryStore.purge`` alone (the API adds its HTTP and audit cost), median of
  ``--runs``, each on a freshly filled store: 10 URLs hard and soft, one prefix, one tag,
  soft all, hard all (the clear), and a dry run of the prefix (a read of every key).
  Entries are 64-byte bodies; every 100th carries 5 tags.
- Hit cost in the store: ``MemoryStore.peek`` per call, in ns (median of 5 rounds of 100k
  calls over 1,000 keys), with 0, 100 and 10,000 prefix bans outstanding that cover none of
  them, after each entry has been checked once (steady state), and the one-time check of an
  entry stored before all of them (with the collector off while timing: a collection landing
  in a loop of 1,000 would be most of what it times). The rest of a hit (parsing, writing)
  does not change with bans: ``benchmarks.instructions`` counts it.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time
from collections.abc import Callable

from proxy.core.cache.entry import StoredResponse
from proxy.core.purge.purges import Purge, purge_request
from proxy.store.memory import MemoryStore

DOMAIN = "a.example"
BODY = b"x" * 64


def entry(tags: tuple[str, ...] = ()) -> StoredResponse:
    return StoredResponse(
        status=200,
        reason="OK",
        headers=(("Content-Type", "text/plain"),),
        body=BODY,
        birth=time.time(),
        freshness_lifetime=3600.0,
        tags=tags,
    )


async def filled(count: int) -> MemoryStore:
    """A store holding ``count`` entries of the domain. Entries are shared objects (as in
    benchmarks/clear_cost.py), so a million fit in memory; purges never copy them but for
    soft URL purges, which copy the few they name."""
    store = MemoryStore(max_bytes=count * 2000)
    plain, tagged = entry(), entry(("t-1", "t-2", "t-3", "t-4", "t-5"))
    token = (await store.lookup(DOMAIN, "/")).key[1]
    for i in range(count):
        shared = tagged if i % 100 == 0 else plain
        await store.put((DOMAIN, token, f"/d{i % 10}/object/{i}"), shared)
    gc.collect()
    return store


PURGES: dict[str, Callable[[int], Purge]] = {
    "10 urls": lambda n: purge_request("url", [f"/d{i % 10}/object/{i}" for i in range(10)]),
    "10 urls, soft": lambda n: purge_request(
        "url", [f"/d{i % 10}/object/{i}" for i in range(10)], soft=True
    ),
    "prefix": lambda n: purge_request("prefix", ["/d3/"]),
    "tag": lambda n: purge_request("tag", ["t-3"]),
    "all, soft": lambda n: purge_request("all", soft=True),
    "all (the clear)": lambda n: purge_request("all"),
    "prefix, dry run": lambda n: purge_request("prefix", ["/d3/"], dry_run=True),
}


async def purge_latency(sizes: list[int], runs: int) -> None:
    print("purge latency, microseconds (median of runs)")
    print(f"{'kind':<18}" + "".join(f"{n:>14,}" for n in sizes))
    rows: dict[str, list[float]] = {name: [] for name in PURGES}
    for count in sizes:
        for name, make in PURGES.items():
            times = []
            for _ in range(runs):
                store = await filled(count)
                start = time.perf_counter_ns()
                result = await store.purge(DOMAIN, make(count))
                times.append((time.perf_counter_ns() - start) / 1000)
                assert result.kind == make(count).kind
                del store
            rows[name].append(statistics.median(times))
    for name, values in rows.items():
        print(f"{name:<18}" + "".join(f"{v:>14,.1f}" for v in values))


async def hit_cost(bans: list[int], tags: bool) -> None:
    label = "5 tags" if tags else "untagged"
    print(f"\npeek per call, ns, {label} entries, with outstanding prefix bans covering none")
    print(f"{'bans':>8}{'steady':>10}{'first check':>14}")
    for count in bans:
        store = MemoryStore(max_bytes=1 << 30)
        token = (await store.lookup(DOMAIN, "/")).key[1]
        targets = [f"/hit/{i}" for i in range(1000)]
        for target in targets:
            made = entry(("t-1", "t-2", "t-3", "t-4", "t-5") if tags else ())
            await store.put((DOMAIN, token, target), made)
        for i in range(count):
            await store.purge(DOMAIN, purge_request("prefix", [f"/nothing/{i}/"]))
        gc.collect()  # a collection landing in the loop would be most of what it times
        gc.disable()
        start = time.perf_counter_ns()
        for target in targets:  # each entry checked against every ban, once
            assert store.peek(DOMAIN, target) is not None
        first = (time.perf_counter_ns() - start) / len(targets)
        rounds = []
        for _ in range(5):
            start = time.perf_counter_ns()
            for _ in range(100):
                for target in targets:
                    store.peek(DOMAIN, target)
            rounds.append((time.perf_counter_ns() - start) / (100 * len(targets)))
        gc.enable()
        print(f"{count:>8,}{statistics.median(rounds):>10.0f}{first:>14,.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="1000,1000000")
    parser.add_argument("--bans", default="0,100,10000")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    bans = [int(b) for b in args.bans.split(",")]
    asyncio.run(purge_latency(sizes, args.runs))
    asyncio.run(hit_cost(bans, tags=False))
    asyncio.run(hit_cost(bans, tags=True))


if __name__ == "__main__":
    main()
