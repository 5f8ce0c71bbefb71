"""How long a full garbage collection stalls the proxy with N objects cached.

Run: .venv/bin/python -m benchmarks.gc_pause [--entries 100000] [--runs 5]

The service runs in this process (``proxy.service.running``, the start-up heap frozen as
``cdn-proxy serve`` freezes it) in front of the benchmark origin. It is filled with
``--entries`` objects of 1 KiB over HTTP, then ``gc.collect()`` is timed ``--runs`` times;
the median is printed with how many objects the collector tracks per cached entry. Every
request waits while a full collection runs, and CPython starts one on its own whenever the
long-lived objects have grown by a quarter.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import tempfile
import time
from pathlib import Path

import uvloop

from benchmarks import load
from benchmarks.systems import Origin, proxy_config
from proxy.config import load_config
from proxy.service import running


async def measure(entries: int, runs: int) -> tuple[float, float]:
    """(median milliseconds of a full collection, tracked objects per entry)."""
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
                filled = await load.fill(
                    port, "a.example", (f"/o/1024/{i}" for i in range(entries))
                )
                if filled.errors:
                    raise SystemExit(f"{filled.errors} errors while filling")
                gc.collect()
                per_entry = (len(gc.get_objects()) - before) / entries
                times = []
                for _ in range(runs):
                    started = time.perf_counter()
                    gc.collect()
                    times.append((time.perf_counter() - started) * 1000)
                return statistics.median(times), per_entry
        finally:
            origin.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    millis, per_entry = uvloop.run(measure(args.entries, args.runs))
    print(
        f"full collection with {args.entries:,} entries cached: {millis:.2f} ms "
        f"(median of {args.runs}); {per_entry:.3f} tracked objects per entry"
    )


if __name__ == "__main__":
    main()
