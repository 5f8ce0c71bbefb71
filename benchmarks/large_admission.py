"""Object and byte miss ratios of the pure S3-FIFO under the shared tier's large-object rule
(decision 0029, "Large objects"): LARGE_AT_ONCE = 0 (an object as large as the small queue is
kept from its second fill) against 0.5 (kept from its first, up to half the tier).

    PYTHONPATH=$PWD taskset -c 1 .venv/bin/python -m benchmarks.large_admission

A Zipf(0.9) trace of 200,000 requests over 20,000 objects (40 of them 400 kB, the rest 100 B to
20 kB), a fifth of the requests one-hit wonders (700 B, or 400 kB for the share given), at
caches of 1% and 10% of the working set.
"""

from __future__ import annotations

import random

import proxy.store.eviction.s3fifo as s3fifo

Trace = list[tuple[str, int]]


def trace(
    requests: int, popular: int, seed: int, large: int, large_size: int, onehit_large: float
) -> Trace:
    rng = random.Random(seed)
    weights = [1 / (r + 1) ** 0.9 for r in range(popular)]
    sizes = [rng.choice([100, 400, 1_500, 4_000, 20_000]) for _ in range(popular)]
    for n in rng.sample(range(popular), large):
        sizes[n] = large_size
    t = [(f"/{n}", sizes[n]) for n in rng.choices(range(popular), weights, k=requests)]
    for n in rng.sample(range(len(t)), len(t) // 5):
        t[n] = (f"/once/{n}", large_size if rng.random() < onehit_large else 700)
    return t


def replay(requests: Trace, capacity: int, at_once: float) -> tuple[float, float]:
    """Object and byte miss ratios of the tier's S3-FIFO rule with LARGE_AT_ONCE = at_once."""
    default = s3fifo.LARGE_AT_ONCE
    s3fifo.LARGE_AT_ONCE = at_once
    try:
        policy = s3fifo.S3FIFO[str](capacity, remember_large=True)
        misses = missed = total = 0
        for key, size in requests:
            total += size
            if key in policy:
                policy.hit(key)
            else:
                misses, missed = misses + 1, missed + size
                policy.admit(key, size)
    finally:
        s3fifo.LARGE_AT_ONCE = default
    return misses / len(requests), missed / total


def main() -> None:
    for onehit_large in (0.0, 0.01, 0.05):
        for share in (0.01, 0.1):
            requests = trace(200_000, 20_000, 7, 40, 400_000, onehit_large)
            capacity = int(sum(dict(requests).values()) * share)
            row = []
            for at_once in (0.0, 0.5):
                objects, size = replay(requests, capacity, at_once)
                row.append(f"at_once={at_once}: objects {objects:.4f} bytes {size:.4f}")
            print(
                f"one-hit large {onehit_large:.2f}, cache {share:.0%} ({capacity} B):",
                " | ".join(row),
            )


if __name__ == "__main__":
    main()
