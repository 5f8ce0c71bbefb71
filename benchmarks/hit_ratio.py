"""Object and byte miss ratios of the eviction policies on synthetic CDN traces, against
libCacheSim (issue 23 §5, decision 0029).

Run: .venv/bin/python -m benchmarks.hit_ratio [--requests 400000] [--objects 40000] [--seed 23]
     [--alphas 0.7,0.9,1.1] [--sizes 0.01,0.1] [--policies lru,sieve,s3fifo]
     [--shared [--shared-dir /dev/shm]]

Each trace (seeded, so every run sees the same requests):
- ``--objects`` objects requested with Zipf(alpha) popularity (the ranks shuffled over the ids);
- a size per object from a log-normal distribution (median 16 KiB, sigma 1.5: a heavy tail of
  objects in the MiB), clipped to [64 B, 8 MiB] (today's ``max_object_bytes``);
- one-hit wonders: ONE_HIT of the requests are for objects requested once and never again;
- a scan: SCAN of the requests, at the middle of the trace, go to distinct cold objects in a
  row (a crawler, a batch job), each requested once.

The working set is the bytes of every distinct object of the trace; each policy runs at
``--sizes`` fractions of it. For every (trace, size, policy) ours (proxy.store.eviction)
and libCacheSim's implementation of the same algorithm replay the same requests with the
same capacity in bytes (libCacheSim counts object sizes, and metadata not at all); a
request is a hit when the key is held, else a miss that admits it. The table gives both
miss ratios and the difference, relative to the reference. libCacheSim's ARC (and W-TinyLFU
on request), which have no implementation here, follow in a table of their own for
comparison (``--reference-only``).

``--shared`` adds the shared tier itself (proxy.store.shared: S3-FIFO over LMDB and body
files, decision 0030) at the same capacities: each request a ``SharedTier.lookup``, each miss
a ``Fill`` of the object's size (zero bytes), in a temporary directory under
``--shared-dir`` (a tmpfs such as /dev/shm keeps the disk out of it). Its row compares it
with libCacheSim's S3-FIFO: the tier also counts each entry's record and key against its
capacity, and keeps an object too large for the small queue from its second fill (libCacheSim
never keeps it), so it is not the pure policy's figure to the fourth decimal (that equality
is tests/store/shared/test_s3fifo.py's, at the tier's own costs). It writes every missed
byte: about two minutes per trace and size (12 minutes in all, on a loaded machine).

Pure Python replays about a million requests per second per policy, so the default run
(3 traces of 400,000 requests, 2 sizes, 3 policies, both sides) takes about a minute;
``--requests`` scales it.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import time
import timeit
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path

import libcachesim
import numpy as np

from benchmarks.instructions import callgrind_argv, totals
from proxy.core.cache.entry import StoredResponse
from proxy.store.eviction import POLICIES, EvictionPolicy
from proxy.store.shared import Fill, SharedTier
from proxy.store.shared.bodies import CHUNK
from proxy.store.shared.pages import usable_bytes

ONE_HIT = 0.2  # share of the requests that go to one-hit wonders
SCAN = 0.05  # share of the requests in the scan
MEDIAN_SIZE = 16 * 1024
SIZE_SIGMA = 1.5
MIN_SIZE, MAX_SIZE = 64, 8 * 1024 * 1024

# libCacheSim's hash table: 2**20 buckets, not its default 2**24 (128 MiB each, and the
# Python binding does not free a cache's memory when it is dropped)
HASHPOWER = 20

# libCacheSim's implementation of each of ours, given the capacity in bytes
REFERENCES: dict[str, Callable[[int], libcachesim.CacheBase]] = {
    "lru": lambda capacity: libcachesim.LRU(capacity, hashpower=HASHPOWER),
    "sieve": lambda capacity: libcachesim.Sieve(capacity, hashpower=HASHPOWER),
    "s3fifo": lambda capacity: libcachesim.S3FIFO(capacity, hashpower=HASHPOWER),
}

# Algorithms of libCacheSim's with no implementation of ours, run for comparison only.
# W-TinyLFU is not run by default: libCacheSim sizes its frequency sketch by the capacity as
# if it counted objects, so over a capacity in bytes it takes gigabytes (4 GiB at 1 GB).
REFERENCE_ONLY: dict[str, Callable[[int], libcachesim.CacheBase]] = {
    "arc": lambda capacity: libcachesim.ARC(capacity, hashpower=HASHPOWER),
    "w-tinylfu": lambda capacity: libcachesim.WTinyLFU(capacity, hashpower=HASHPOWER),
}


SHARED_ROW = "shared tier (s3fifo)"
SHARED_RESPONSE = StoredResponse(  # what every object of the shared tier's replay stores
    status=200,
    reason="OK",
    headers=(("Content-Type", "application/octet-stream"), ("ETag", '"v1"')),
    body=b"",
    birth=1_000_000.0,
    freshness_lifetime=3600.0,
)


@dataclass(frozen=True)
class Trace:
    name: str
    ids: Sequence[int]
    sizes: Sequence[int]  # per request: the size of its object (one size per object)
    working_set: int  # bytes of the distinct objects

    @property
    def requested_bytes(self) -> int:
        return sum(self.sizes)


@dataclass(frozen=True)
class Ratios:
    objects: float  # misses / requests
    bytes: float  # bytes missed / bytes requested


def zipf_trace(*, alpha: float, requests: int, objects: int, seed: int) -> Trace:
    """The trace described in the module docstring."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, objects + 1, dtype=np.float64) ** alpha
    scan = int(requests * SCAN)
    one_hit = int(requests * ONE_HIT)
    popular = requests - scan - one_hit
    ranks = rng.choice(objects, size=popular, p=weights / weights.sum())
    ids = rng.permutation(objects)[ranks]  # popularity is not in id order
    # One-hit wonders at random places among the popular requests, then the scan in the
    # middle; both use ids above the popular ones, each once.
    unique = np.arange(objects, objects + one_hit + scan)
    mixed = np.insert(ids, rng.integers(0, popular + 1, size=one_hit), unique[:one_hit])
    middle = len(mixed) // 2
    trace_ids = np.concatenate([mixed[:middle], unique[one_hit:], mixed[middle:]])
    every = objects + one_hit + scan
    size_of = np.clip(
        rng.lognormal(np.log(MEDIAN_SIZE), SIZE_SIGMA, size=every), MIN_SIZE, MAX_SIZE
    ).astype(np.int64)
    distinct = np.unique(trace_ids)
    return Trace(
        name=f"zipf {alpha}",
        ids=trace_ids.tolist(),
        sizes=size_of[trace_ids].tolist(),
        working_set=int(size_of[distinct].sum()),
    )


def replay(policy: EvictionPolicy[Hashable], trace: Trace) -> Ratios:
    """Miss ratios of one of our policies over the trace."""
    misses = missed_bytes = 0
    hit, admit = policy.hit, policy.admit
    for key, size in zip(trace.ids, trace.sizes, strict=True):
        if key in policy:
            hit(key)
        else:
            misses += 1
            missed_bytes += size
            admit(key, size)
    return Ratios(misses / len(trace.ids), missed_bytes / trace.requested_bytes)


def replay_shared(trace: Trace, capacity: int, parent: str | None) -> Ratios:
    """Miss ratios of the shared tier over the trace, at ``capacity`` bytes: a lookup per
    request, a fill of the object's size on a miss."""
    misses = missed_bytes = 0
    chunk = bytes(CHUNK)
    with tempfile.TemporaryDirectory(dir=parent, prefix="hit-ratio-") as directory:
        tier = SharedTier.open_node(directory, max_bytes=capacity)
        try:
            for key, size in zip(trace.ids, trace.sizes, strict=True):
                target = f"/{key}"
                found = tier.lookup("example.com", target)
                if found.variants:
                    continue
                misses += 1
                missed_bytes += size
                fill = Fill(tier, "example.com", target, SHARED_RESPONSE, found.token)
                left = size
                while left > 0 and fill.append(chunk[: min(left, CHUNK)]):
                    left -= CHUNK
                fill.commit()
        finally:
            tier.close()
    return Ratios(misses / len(trace.ids), missed_bytes / trace.requested_bytes)


def replay_reference(cache: libcachesim.CacheBase, trace: Trace) -> Ratios:
    """Miss ratios of a libCacheSim cache over the same trace (its get: a hit, or a miss
    that inserts)."""
    request = libcachesim.Request()
    get = cache.get
    misses = missed_bytes = 0
    for clock, (key, size) in enumerate(zip(trace.ids, trace.sizes, strict=True)):
        request.obj_id, request.obj_size, request.clock_time = key, size, clock
        if not get(request):
            misses += 1
            missed_bytes += size
    return Ratios(misses / len(trace.ids), missed_bytes / trace.requested_bytes)


@dataclass(frozen=True)
class Row:
    trace: str
    fraction: float
    capacity: int
    policy: str
    ours: Ratios
    reference: Ratios

    @property
    def object_gap(self) -> float:
        """Our object miss ratio's distance from the reference's, relative to it."""
        return _relative(self.ours.objects, self.reference.objects)

    @property
    def byte_gap(self) -> float:
        return _relative(self.ours.bytes, self.reference.bytes)


def _relative(ours: float, reference: float) -> float:
    return abs(ours - reference) / reference if reference else abs(ours)


def compare(
    trace: Trace,
    fractions: Sequence[float],
    policies: Sequence[str],
    shared_dir: str | None = None,
    shared: bool = False,
) -> list[Row]:
    rows = []
    for fraction in fractions:
        capacity = int(trace.working_set * fraction)
        for name in policies:
            ours = replay(POLICIES[name](capacity), trace)
            reference = replay_reference(REFERENCES[name](capacity), trace)
            rows.append(Row(trace.name, fraction, capacity, name, ours, reference))
        if shared:
            tier = replay_shared(trace, capacity, shared_dir)
            # The tier keeps a reserve of its size for LMDB's freed pages (decision 0041,
            # pages.usable_bytes): the reference gets what the tier's entries may take.
            reference = replay_reference(REFERENCES["s3fifo"](usable_bytes(capacity)), trace)
            rows.append(Row(trace.name, fraction, capacity, SHARED_ROW, tier, reference))
    return rows


def compare_reference_only(
    trace: Trace, fractions: Sequence[float], names: Sequence[str]
) -> list[tuple[str, float, str, Ratios]]:
    """Miss ratios of libCacheSim's algorithms that have no implementation of ours."""
    return [
        (trace.name, fraction, name, replay_reference(REFERENCE_ONLY[name](capacity), trace))
        for fraction in fractions
        for name in names
        for capacity in [int(trace.working_set * fraction)]
    ]


def reference_only_table(rows: Sequence[tuple[str, float, str, Ratios]]) -> str:
    lines = [
        "| trace | cache | algorithm (libCacheSim only) | object miss | byte miss |",
        "|---|---|---|---|---|",
    ]
    for trace, fraction, name, ratios in rows:
        lines.append(
            f"| {trace} | {fraction:.0%} | {name} | {ratios.objects:.4f} | {ratios.bytes:.4f} |"
        )
    return "\n".join(lines)


def table(rows: Sequence[Row]) -> str:
    """The markdown table, with each policy's miss ratios against LRU's (ours) too."""
    lru = {(r.trace, r.fraction): r.ours for r in rows if r.policy == "lru"}
    lines = [
        "| trace | cache | policy | object miss (ours) | object miss (libCacheSim) | diff "
        "| byte miss (ours) | byte miss (libCacheSim) | diff | vs our LRU (object / byte) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        base = lru.get((r.trace, r.fraction))
        versus = (
            "—"
            if base is None or r.policy == "lru"
            else f"{r.ours.objects - base.objects:+.4f} / {r.ours.bytes - base.bytes:+.4f}"
        )
        lines.append(
            f"| {r.trace} | {r.fraction:.0%} | {r.policy} | {r.ours.objects:.4f} "
            f"| {r.reference.objects:.4f} | {r.object_gap:.2%} | {r.ours.bytes:.4f} "
            f"| {r.reference.bytes:.4f} | {r.byte_gap:.2%} | {versus} |"
        )
    return "\n".join(lines)


HIT_KEYS = 10_000  # keys held while hits are timed
HIT_INSTRUCTION_ROUNDS = 10  # rounds over the HIT_KEYS keys counted by callgrind


def hit_cases() -> dict[str, tuple[str, dict[str, object]]]:
    """What a hit costs, as (statement over ``order``, its globals) by label: today's
    ``OrderedDict.move_to_end`` in place, each policy's ``hit`` through a bound method (what
    a store calls), the update alone that SIEVE and S3-FIFO make (a hit inlined in the
    store), and a whole lookup (the index's get and the recency update)."""
    keys = [f"example.com 0 /object/{i}" for i in range(HIT_KEYS)]
    order = random.Random(1).sample(keys, len(keys))
    lru: OrderedDict[str, int] = OrderedDict.fromkeys(keys, 1)
    policies = {name: POLICIES[name](HIT_KEYS) for name in POLICIES}
    for policy in policies.values():
        for key in keys:
            policy.admit(key, 1)
    sieve_slots = policies["sieve"]._slots  # type: ignore[attr-defined]
    sieve_visited = policies["sieve"]._visited  # type: ignore[attr-defined]
    s3fifo_freq = policies["s3fifo"]._freq  # type: ignore[attr-defined]
    cases: dict[str, tuple[str, dict[str, object]]] = {
        "loop alone": ("for k in order: pass", {}),
        "OrderedDict.move_to_end (today)": ("for k in order: move(k)", {"move": lru.move_to_end}),
        **{
            f"{name}.hit": ("for k in order: hit(k)", {"hit": policy.hit})
            for name, policy in policies.items()
        },
        "sieve inlined: visited[slots[k]] = 1": (
            "for k in order: visited[slots[k]] = 1",
            {"slots": sieve_slots, "visited": sieve_visited},
        ),
        "s3fifo inlined: freq[k] += 1": ("for k in order: freq[k] += 1", {"freq": s3fifo_freq}),
        # A whole lookup: the index's get, then the recency update
        "lookup today: get + move_to_end": (
            "for k in order:\n v = get(k)\n move(k)",
            {"get": lru.get, "move": lru.move_to_end},
        ),
        "lookup with sieve: get + sieve.hit": (
            "for k in order:\n v = get(k)\n hit(k)",
            {"get": lru.get, "hit": policies["sieve"].hit},
        ),
        "lookup with s3fifo: get + s3fifo.hit": (
            "for k in order:\n v = get(k)\n hit(k)",
            {"get": lru.get, "hit": policies["s3fifo"].hit},
        ),
    }
    return {label: (code, {"order": order, **names}) for label, (code, names) in cases.items()}


def hit_nanoseconds(repeat: int = 15, number: int = 20) -> dict[str, float]:
    """Nanoseconds per hit of each case, the best of ``repeat`` timings of ``number`` rounds
    over HIT_KEYS held keys in a shuffled order, the loop's own cost subtracted."""
    per_round = {
        label: min(timeit.repeat(code, globals=names, number=number, repeat=repeat))
        for label, (code, names) in hit_cases().items()
    }
    empty = per_round.pop("loop alone")
    return {label: (t - empty) / (number * HIT_KEYS) * 1e9 for label, t in per_round.items()}


def hit_instructions() -> dict[str, float]:
    """Instructions per hit of each case, counted by callgrind (load does not move them): a
    child process runs the case's setup, then 0 or HIT_INSTRUCTION_ROUNDS rounds of hits;
    the difference, per hit, less the loop's own."""

    def count(label: str, rounds: int, tmp: Path) -> int:
        out = tmp / "callgrind.out"
        argv = [sys.executable, "-m", "benchmarks.hit_ratio", "--hit-loop", label, str(rounds)]
        subprocess.run([*callgrind_argv(out), *argv], check=True, capture_output=True)
        return totals(out)

    hits = HIT_INSTRUCTION_ROUNDS * HIT_KEYS
    per_hit = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label in hit_cases():
            extra = count(label, HIT_INSTRUCTION_ROUNDS, Path(tmp)) - count(label, 0, Path(tmp))
            per_hit[label] = extra / hits
    empty = per_hit.pop("loop alone")
    return {label: count - empty for label, count in per_hit.items()}


def _hit_loop(label: str, rounds: int) -> None:
    """Set up one case and run ``rounds`` rounds of it (for callgrind to count)."""
    code, names = hit_cases()[label]
    compiled = compile(code, label, "exec")  # compiled in both runs: it cancels out
    for _ in range(rounds):
        exec(compiled, dict(names))


def _floats(text: str) -> list[float]:
    return [float(part) for part in text.split(",") if part]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.hit_ratio", description=__doc__)
    parser.add_argument("--requests", type=int, default=400_000)
    parser.add_argument("--objects", type=int, default=40_000)
    parser.add_argument("--seed", type=int, default=23)
    parser.add_argument("--alphas", type=_floats, default=[0.7, 0.9, 1.1])
    parser.add_argument("--sizes", type=_floats, default=[0.01, 0.1])
    parser.add_argument("--policies", default="lru,sieve,s3fifo")
    parser.add_argument(
        "--reference-only",
        default="arc",
        help="libCacheSim's algorithms to run for comparison alone ('' for none)",
    )
    parser.add_argument(
        "--shared",
        action="store_true",
        help="also replay each trace through the shared tier (S3-FIFO on LMDB and files)",
    )
    parser.add_argument(
        "--shared-dir",
        default=None,
        help="where the shared tier's temporary directories go (default: the system's temp)",
    )
    parser.add_argument(
        "--hit-cost",
        action="store_true",
        help="what a hit costs instead: ns (timeit) and instructions (callgrind)",
    )
    parser.add_argument("--hit-loop", nargs=2, help=argparse.SUPPRESS)  # callgrind's child
    args = parser.parse_args(argv)
    if args.hit_loop:
        _hit_loop(args.hit_loop[0], int(args.hit_loop[1]))
        return
    if args.hit_cost:
        nanoseconds, instructions = hit_nanoseconds(), hit_instructions()
        print("| hit | ns per hit (timeit) | instructions per hit (callgrind) |\n|---|---|---|")
        for label, cost in nanoseconds.items():
            print(f"| {label} | {cost:.0f} | {instructions[label]:.0f} |")
        return
    policies = [p for p in args.policies.split(",") if p]
    others = [p for p in args.reference_only.split(",") if p]
    unknown = sorted(set(policies) - set(POLICIES)) + sorted(set(others) - set(REFERENCE_ONLY))
    if unknown:
        known = sorted(POLICIES) + sorted(REFERENCE_ONLY)
        parser.error(f"unknown policies {unknown}: choose from {known}")
    started = time.perf_counter()
    rows: list[Row] = []
    extra: list[tuple[str, float, str, Ratios]] = []
    for alpha in args.alphas:
        trace = zipf_trace(
            alpha=alpha, requests=args.requests, objects=args.objects, seed=args.seed
        )
        print(
            f"{trace.name}: {len(trace.ids):,} requests, {len(set(trace.ids)):,} objects, "
            f"working set {trace.working_set / 2**20:,.0f} MiB",
            flush=True,
        )
        rows += compare(trace, args.sizes, policies, args.shared_dir, args.shared)
        extra += compare_reference_only(trace, args.sizes, others)
    print()
    print(table(rows))
    if extra:
        print()
        print(reference_only_table(extra))
    worst = max((max(r.object_gap, r.byte_gap) for r in rows), default=0.0)
    print(f"\nlargest gap to libCacheSim: {worst:.2%}; {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
