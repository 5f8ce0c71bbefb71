"""The shared tier's purge state as URL purges pile up on one domain (issue 31 item 3, 0048).

Run: taskset -c 1 .venv/bin/python -m benchmarks.purge_state [--sizes 1000,10000,100000]
     [--samples 50] [--root DIR]

For each size N: a fresh tier (a real directory, its synced ``state/`` environment), N URL
purges of distinct 60-character paths on one domain written in one transaction (the state a
domain reaches after N purges, without waiting for N fsyncs), then ``--samples`` more URL
purges through ``SharedTier.purge`` (each synced, as the API makes it). Timed: each purge, and
the first ``SharedTier.lookup`` of the domain after it (the reader's catch-up; every process
of the node pays it once per purge). Prints p50 and p99 of both, and the p99 of a purge's CPU
time (its cost without the fsync's wait, which a busy disk makes noisy), in milliseconds. ``--root``
runs another checkout (its ``proxy`` package first on the path), to compare layouts.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
import tempfile
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DOMAIN = "news.example"


def path_of(n: int) -> str:
    head = f"/articles/{n}/"
    return head + "x" * (60 - len(head))


def populate(tier: Any, count: int) -> None:
    """``count`` URL purges on DOMAIN in one write transaction, in whichever layout the
    checkout has: the URL log (0048) or the one JSON record per domain (before it)."""
    from proxy.core.purge.purges import Purge

    store = tier.purges
    if hasattr(store, "add_many"):
        store.add_many(DOMAIN, [Purge("url", (path_of(n),)) for n in range(count)], time.time())
        return
    state_module = importlib.import_module("proxy.store.shared.purge_state")
    key = DOMAIN.encode()
    with store._env.begin(write=True) as txn:
        state = state_module.DomainState()
        for n in range(count):
            state.add(Purge("url", (path_of(n),)), time.time())
        txn.put(key, state.to_bytes())


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


@dataclass(frozen=True)
class Measured:
    """Each purge's time, its CPU time (without the fsync's wait: what the purge state costs
    to rewrite), and the first lookup's after it, in milliseconds; what a process holds of the
    domain's state once parsed, and what the purge state counts against its budget, in MB."""

    purges: list[float]
    cpu: list[float]
    lookups: list[float]
    parsed_mb: float
    counted_mb: float
    retire_s: float = 0.0
    longest_pass_ms: float = 0.0
    parsed_after_mb: float = 0.0
    counted_after_mb: float = 0.0


def measure(count: int, samples: int) -> Measured:
    """One size: see ``Measured``."""
    from proxy.core.purge.purges import Purge
    from proxy.store.shared import SharedTier

    with tempfile.TemporaryDirectory(prefix="purge-state-") as directory:
        tier = SharedTier.open_node(
            Path(directory) / "cache", max_bytes=64 << 20, purge_max_bytes=1 << 40
        )
        try:
            populate(tier, count)
            tracemalloc.start()
            tier.lookup(DOMAIN, "/warm")  # the first lookup parses the domain's URL purges
            parsed = tracemalloc.get_traced_memory()[0] / 1e6
            tracemalloc.stop()
            counted = tier.purges.usage()[0] / 1e6
            purges, cpu, lookups = [], [], []
            for n in range(samples):
                started, on_cpu = time.perf_counter(), time.process_time()
                assert tier.purge(DOMAIN, Purge("url", (path_of(count + n),))) is not None
                purged, cpu_done = time.perf_counter(), time.process_time()
                tier.lookup(DOMAIN, "/other")
                looked = time.perf_counter()
                purges.append((purged - started) * 1000)
                cpu.append((cpu_done - on_cpu) * 1000)
                lookups.append((looked - purged) * 1000)
            return Measured(purges, cpu, lookups, parsed, counted, *retire_all(tier))
        finally:
            tier.close()


def retire_all(tier: Any) -> tuple[float, float, float, float]:
    """Retire every URL purge record: seconds in all, the longest pass in ms, then MB held
    parsed by a fresh reader of the domain and MB counted (zeros without retire.py)."""
    try:
        retire_module = importlib.import_module("proxy.store.shared.retire")
    except ImportError:
        return 0.0, 0.0, 0.0, 0.0
    later = time.time() + 3600
    passes: list[float] = []
    while True:
        started = time.perf_counter()
        retired = retire_module.retire(tier, later)
        passes.append(time.perf_counter() - started)
        if not retired:
            break
    tier.purges.parsed.clear()  # a process that had not read the domain yet
    tracemalloc.start()
    tier.lookup(DOMAIN, "/warm")
    parsed = tracemalloc.get_traced_memory()[0] / 1e6
    tracemalloc.stop()
    return sum(passes), max(passes) * 1000, parsed, tier.purges.usage()[0] / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--samples", type=int, default=50)
    parser.add_argument("--root", type=Path, default=None)
    args = parser.parse_args()
    if args.root is not None:
        sys.path.insert(0, str(args.root.resolve()))
    print(
        f"{'URL purges':>10}  {'purge p50':>9}  {'purge p99':>9}  {'CPU p99':>9}  "
        f"{'lookup p50':>10}  {'lookup p99':>10}  (ms, {args.samples} samples)  "
        "parsed MB  counted MB  | retired: ms  longest pass ms  parsed MB  counted MB"
    )
    for size in (int(s) for s in args.sizes.split(",")):
        m = measure(size, args.samples)
        print(
            f"{size:>10}  {statistics.median(m.purges):9.2f}  {percentile(m.purges, 0.99):9.2f}  "
            f"{percentile(m.cpu, 0.99):9.2f}  "
            f"{statistics.median(m.lookups):10.2f}  {percentile(m.lookups, 0.99):10.2f}  "
            f"{m.parsed_mb:>27.1f}  {m.counted_mb:>10.1f}  | {m.retire_s * 1000:11.1f}  "
            f"{m.longest_pass_ms:15.1f}  {m.parsed_after_mb:9.2f}  {m.counted_after_mb:10.4f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
