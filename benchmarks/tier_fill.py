"""The shared tier filled far past its size with small objects (issue 31, "benchmarks"): every
fill is stored, and the tier's use of the disk stays within ``disk_max_bytes``.

Run: .venv/bin/python -m benchmarks.tier_fill [--max-bytes 1GiB] [--object 1024] [--times 10]
         [--batch 1] [--cpu 1]

The tier is opened as the node (``SharedTier.open_node``) on a new directory, and objects of
``--object`` bytes (a body and the headers of a plain 200) are stored under new URLs, each
looked up first (its token) and stored by the tier's own writer (``Fill``: one LMDB commit
each with ``--batch 1``, the edge's way; more share a transaction, as a bulk load does),
until the bodies written add up to ``--times`` the tier's size. Every ``--every`` fills, and
at the end, it measures:

- **fills that failed**: a commit that stored nothing (``Fill.commit`` False, or a batch that
  stored fewer than it was given) or counted a fault;
- **disk use in pages**: the pages the entries environment's trees hold (``env`` stat of every
  database) times the page size, plus the body files rounded up to blocks: what the tier
  itself measures (store/shared/pages.py), against ``disk_max_bytes``;
- **the directory on disk**: the blocks its files take (``st_blocks``), the LMDB map's file
  included (it keeps its high-water mark: freed pages are reused, never returned).

It prints one line per measure and a summary (the highest of each, the fills per second).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from proxy.core.cache.entry import StoredResponse
from proxy.store.shared import Fill, SharedTier
from proxy.store.shared.pages import BLOCK, PAGE, pages_in_use

DOMAIN = "example.com"


@dataclass
class Measure:
    fills: int
    failed: int
    pages_bytes: int  # the tier's measure: pages in use and body files
    directory_bytes: int  # blocks of every file under the directory
    entries: int
    evictions: int


def response(size: int) -> StoredResponse:
    return StoredResponse(
        status=200,
        reason="OK",
        headers=(("Content-Type", "text/plain"), ("Cache-Control", "max-age=3600")),
        body=b"x" * size,
        birth=time.time(),
        freshness_lifetime=3600.0,
    )


def measure(tier: SharedTier, fills: int, failed: int) -> Measure:
    with tier.reading() as txn:
        pages = pages_in_use(txn, tier.trees)
        files = txn.get(b"files", db=tier.db_meta)
    body_bytes = 0 if files is None else int.from_bytes(files, "big")
    used = pages * PAGE + -(-body_bytes // BLOCK) * BLOCK
    on_disk = sum(
        path.stat().st_blocks * 512 for path in tier.directory.rglob("*") if path.is_file()
    )
    stats = tier.stats()
    return Measure(fills, failed, used, on_disk, stats.entries, stats.evictions)


def fill_tier(
    directory: Path,
    *,
    max_bytes: int,
    object_bytes: int,
    times: float,
    batch: int = 1,
    every: int = 0,
    report: bool = False,
) -> list[Measure]:
    """Fill a new tier at ``directory`` to ``times`` its size; the measures taken."""
    tier = SharedTier.open_node(directory, max_bytes=max_bytes)
    template = response(object_bytes)
    total = int(times * max_bytes // object_bytes)
    every = every or max(1, total // 20)
    measures: list[Measure] = []
    failed = 0
    faults = tier.health.status().faults
    try:
        started = time.perf_counter()
        pending: list[Fill] = []
        for index in range(total):
            target = f"/o/{index}"
            fill = Fill(tier, DOMAIN, target, template, tier.lookup(DOMAIN, target).token)
            fill.append(template.body)
            if batch == 1:
                failed += not fill.commit()
            else:
                pending.append(fill)
                if len(pending) == batch:
                    failed += batch - Fill.commit_all(tier, pending)
                    pending = []
            if (index + 1) % every == 0 or index + 1 == total:
                if pending:
                    failed += len(pending) - Fill.commit_all(tier, pending)
                    pending = []
                now = tier.health.status().faults
                failed, faults = failed + now - faults, now
                measures.append(measure(tier, index + 1, failed))
                if report:
                    m = measures[-1]
                    rate = (index + 1) / (time.perf_counter() - started)
                    print(
                        f"fills {m.fills:>10,}  failed {m.failed}  pages+files "
                        f"{m.pages_bytes / 2**20:8.1f} MiB  directory "
                        f"{m.directory_bytes / 2**20:8.1f} MiB  entries {m.entries:,}  "
                        f"evicted {m.evictions:,}  ({rate:,.0f} fills/s)",
                        flush=True,
                    )
    finally:
        tier.close()
    return measures


def _size(text: str) -> int:
    for unit, factor in {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}.items():
        if text.endswith(unit):
            return int(text.removesuffix(unit)) * factor
    return int(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tier_fill", description=__doc__)
    parser.add_argument("--max-bytes", type=_size, default=1 << 30, help="disk_max_bytes")
    parser.add_argument("--object", type=_size, default=1024, help="body bytes of each object")
    parser.add_argument("--times", type=float, default=10.0, help="bodies written / max-bytes")
    parser.add_argument("--batch", type=int, default=1, help="fills per LMDB transaction")
    parser.add_argument("--every", type=int, default=0, help="fills between measures")
    parser.add_argument("--cpu", type=int, default=None, help="pin to this core")
    parser.add_argument("--dir", type=Path, default=None, help="where (default: a temp dir)")
    args = parser.parse_args(argv)
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    with tempfile.TemporaryDirectory(prefix="tier-fill-", dir=args.dir) as home:
        started = time.perf_counter()
        measures = fill_tier(
            Path(home) / "cache",
            max_bytes=args.max_bytes,
            object_bytes=args.object,
            times=args.times,
            batch=args.batch,
            every=args.every,
            report=True,
        )
        seconds = time.perf_counter() - started
    last = measures[-1]
    print(
        f"\n{last.fills:,} fills of {args.object:,} B into a tier of {args.max_bytes / 2**20:,.0f}"
        f" MiB in {seconds:,.0f} s ({last.fills / seconds:,.0f} fills/s): failed "
        f"{last.failed}; pages+files highest {max(m.pages_bytes for m in measures) / 2**20:,.1f}"
        f" MiB; directory highest {max(m.directory_bytes for m in measures) / 2**20:,.1f} MiB;"
        f" disk_max_bytes {args.max_bytes / 2**20:,.0f} MiB"
    )
    over = max(m.pages_bytes for m in measures) > args.max_bytes
    return 1 if last.failed or over else 0


if __name__ == "__main__":
    raise SystemExit(main())
