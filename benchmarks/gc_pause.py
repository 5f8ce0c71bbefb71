"""How long a full garbage collection stalls the proxy with N objects cached.

Run: .venv/bin/python -m benchmarks.gc_pause [--entries 100000] [--runs 5] [--strategy untrack]
     [--origin-fails]

The service runs in this process (``proxy.process.service.running``, the start-up heap frozen as
``cdn-proxy serve`` freezes it) in front of the benchmark origin. It is filled with
``--entries`` objects of 1 KiB over HTTP, then ``gc.collect()`` is timed ``--runs`` times;
the median is printed with how many objects the collector tracks per cached entry. Every
request waits while a full collection runs, and CPython starts one on its own whenever the
long-lived objects have grown by a quarter: the longest of those during the fill is printed
too.

``--strategy`` picks how stored entries are kept from the collector (decision 0011):
- ``untrack``: what the store does (entries untracked when stored);
- ``none``: entries left tracked, as before decision 0011;
- ``freeze``: entries left tracked, and ``gc.freeze()`` after every full collection (the
  rejected alternative). Anything frozen while alive and in a cycle that later becomes
  garbage is never freed: "leaked" counts what ``gc.unfreeze()`` and a collection at the
  end find unreachable.

``--origin-fails`` stops the origin half way through the fill, so the other half's misses
fail (502): errors make reference cycles (an exception, its traceback and the frames), and
those that span a freeze are the ones it leaks.
"""

from __future__ import annotations

import argparse
import gc
import logging
import statistics
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvloop

from benchmarks import load
from benchmarks.systems import Origin, proxy_config
from proxy.config.model import load_config
from proxy.process.service import running
from proxy.store import memory

STRATEGIES = ("untrack", "none", "freeze")


@dataclass
class Pauses:
    """Every full collection CPython starts by itself, timed (a gc callback): wall-clock and
    CPU milliseconds (the CPU time leaves out what a loaded machine adds by preempting us)."""

    freeze: bool
    millis: list[float] = field(default_factory=list)
    cpu_millis: list[float] = field(default_factory=list)
    started: tuple[float, float] = (0.0, 0.0)

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self.started = (time.perf_counter(), time.process_time())
            return
        wall, cpu = self.started
        self.millis.append((time.perf_counter() - wall) * 1000)
        self.cpu_millis.append((time.process_time() - cpu) * 1000)
        if self.freeze:
            gc.freeze()


@dataclass(frozen=True)
class Result:
    millis: float  # median of the timed full collections
    per_entry: float  # tracked objects per cached entry, frozen ones left out
    automatic: int  # full collections CPython started during the fill
    worst_automatic: float  # the longest of them, ms
    worst_automatic_cpu: float  # the most CPU time one of them took, ms
    median_automatic: float  # ms
    leaked: int  # objects frozen while alive and found unreachable at the end


def _paths(start: int, stop: int) -> Iterator[str]:
    return (f"/o/1024/{i}" for i in range(start, stop))


async def measure(entries: int, runs: int, strategy: str, origin_fails: bool) -> Result:
    if strategy != "untrack":
        # The alternatives: entries stay tracked (put untracks through this name).
        memory.untrack = lambda _: None  # type: ignore[attr-defined]
    with tempfile.TemporaryDirectory(prefix="cdn-proxy-gc-") as name:
        tmp = Path(name)
        origin = Origin(tmp, "0", slow_ms=0.0)
        try:
            config = load_config(proxy_config(tmp, origin.port))
            async with running(config) as service:
                gc.collect()
                gc.freeze()
                port = int(service.edge_url.rsplit(":", 1)[1])
                before = len(gc.get_objects())
                pauses = Pauses(freeze=strategy == "freeze")
                gc.callbacks.append(pauses)
                # Paths made as they are sent: a list of them, alive while the collections are
                # timed, would be visited by each (0.5 ms at 100k).
                half = entries // 2
                try:
                    if origin_fails:
                        logging.disable(logging.WARNING)  # a line for every failed miss
                        await load.fill(port, "a.example", _paths(0, half))
                        origin.stop()
                        await load.fill(port, "a.example", _paths(half, entries))
                    else:
                        filled = await load.fill(port, "a.example", _paths(0, entries))
                        if filled.errors:
                            raise SystemExit(f"{filled.errors} errors while filling")
                finally:
                    gc.callbacks.remove(pauses)
                automatic, automatic_cpu = list(pauses.millis), list(pauses.cpu_millis)
                gc.collect()
                if strategy == "freeze":
                    gc.freeze()
                per_entry = (len(gc.get_objects()) - before) / entries
                times = []
                for _ in range(runs):
                    started = time.perf_counter()
                    gc.collect()
                    times.append((time.perf_counter() - started) * 1000)
                gc.unfreeze()
                leaked = gc.collect()
                return Result(
                    millis=statistics.median(times),
                    per_entry=per_entry,
                    automatic=len(automatic),
                    worst_automatic=max(automatic, default=0.0),
                    worst_automatic_cpu=max(automatic_cpu, default=0.0),
                    median_automatic=statistics.median(automatic) if automatic else 0.0,
                    leaked=leaked,
                )
        finally:
            origin.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--strategy", choices=STRATEGIES, default="untrack")
    parser.add_argument("--origin-fails", action="store_true")
    args = parser.parse_args()
    result = uvloop.run(measure(args.entries, args.runs, args.strategy, args.origin_fails))
    frozen = args.strategy == "freeze"
    print(
        f"full collection with {args.entries:,} entries cached: {result.millis:.2f} ms "
        f"(median of {args.runs}); {result.per_entry:.3f} tracked objects per entry"
    )
    print(
        f"strategy {args.strategy}{' (frozen objects not counted)' * frozen}: "
        f"{result.automatic} automatic full collections during the fill, median "
        f"{result.median_automatic:.2f} ms, the longest {result.worst_automatic:.2f} ms "
        f"(the most CPU {result.worst_automatic_cpu:.2f} ms); {result.leaked} objects leaked"
    )


if __name__ == "__main__":
    main()
