"""URL purge records retiring on a big tier (decision 0059): how long the entries writer lock
is held when the records still cover many stored entries.

Run: PYTHONPATH=$PWD taskset -c 1 .venv/bin/python -m benchmarks.retire_big
     [--entries 1000000] [--purges 100000]

A tier of 8 GiB in a temporary directory gets ``--entries`` small entries (100-byte bodies,
one domain, ``/articles/N``), written in bulk; then ``--purges`` URL purges of the first of
those paths are added in one transaction (so none of their entries was removed at purge time,
as after a worker's kill between a purge and its removal); then every record is retired by
the node's passes. Printed: the passes, their total and longest time (the longest is what a
pass holds the entries writer lock, at most), the entries left, the purge state's bytes, and a
lookup of a purged and of a kept URL.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from proxy.core.cache.entry import StoredResponse
from proxy.core.purge.purges import Purge
from proxy.store.shared import Fill, SharedTier
from proxy.store.shared.retire import retire

DOMAIN = "news.example"
BATCH = 50_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--purges", type=int, default=100_000)
    args = parser.parse_args()
    stored = StoredResponse(
        status=200,
        reason="OK",
        headers=(("Content-Type", "text/plain"),),
        body=b"",
        birth=time.time(),
        freshness_lifetime=3600.0,
    )
    with tempfile.TemporaryDirectory(prefix="retire-big-") as directory:
        tier = SharedTier.open_node(
            Path(directory) / "cache", max_bytes=8 << 30, purge_max_bytes=1 << 40
        )
        try:
            started = time.perf_counter()
            for first in range(0, args.entries, BATCH):
                fills = []
                for n in range(first, min(first + BATCH, args.entries)):
                    fill = Fill(tier, DOMAIN, f"/articles/{n}", stored, 0)
                    fill.append(b"x" * 100)
                    fills.append(fill)
                Fill.commit_all(tier, fills)
            print(f"entries {tier.stats().entries} in {time.perf_counter() - started:.0f} s")
            purges = [Purge("url", (f"/articles/{n}",)) for n in range(args.purges)]
            tier.purges.add_many(DOMAIN, purges, 1000.0)
            passes, later = [], time.time() + 3600
            while True:
                started = time.perf_counter()
                retired = retire(tier, later)
                passes.append(time.perf_counter() - started)
                if not retired:
                    break
            stats = tier.stats()
            print(
                f"passes {len(passes) - 1}, {sum(passes):.2f} s in all, longest "
                f"{max(passes) * 1000:.0f} ms; entries left {stats.entries}; purge state "
                f"{stats.purge_state_bytes} bytes; faults {stats.status.faults}"
            )
            tier.purges.parsed.clear()
            started = time.perf_counter()
            purged = len(tier.lookup(DOMAIN, "/articles/0").variants)
            took = (time.perf_counter() - started) * 1000
            kept = len(tier.lookup(DOMAIN, f"/articles/{args.purges}").variants)
            print(f"a purged URL: {purged} variants ({took:.2f} ms); a kept one: {kept}")
        finally:
            tier.close()


if __name__ == "__main__":
    main()
