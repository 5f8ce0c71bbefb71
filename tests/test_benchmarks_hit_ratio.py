"""benchmarks.hit_ratio on a small trace: the traces are what they say, ours agree with
libCacheSim within 2% for each algorithm, and the command prints its table (decision 0029)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.hit_ratio import (
    HIT_KEYS,
    ONE_HIT,
    SCAN,
    SHARED_ROW,
    compare,
    hit_cases,
    table,
    zipf_trace,
)

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.parametrize("alpha", [0.7, 1.1])
def test_ours_agree_with_libcachesim_within_two_percent(alpha: float) -> None:
    trace = zipf_trace(alpha=alpha, requests=30_000, objects=3_000, seed=5)
    rows = compare(trace, [0.01, 0.1], ["lru", "sieve", "s3fifo"])
    assert [(r.fraction, r.policy) for r in rows] == [
        (f, p) for f in (0.01, 0.1) for p in ("lru", "sieve", "s3fifo")
    ]
    for row in rows:
        assert 0 < row.reference.objects < 1 and 0 < row.reference.bytes < 1, row
        assert row.object_gap <= 0.02 and row.byte_gap <= 0.02, row
    by_policy = {(r.fraction, r.policy): r.ours for r in rows}
    for fraction in (0.01, 0.1):
        lru = by_policy[(fraction, "lru")]
        # the claim decision 0029 rests on, on this trace too: S3-FIFO misses less than LRU
        assert by_policy[(fraction, "s3fifo")].objects < lru.objects
        assert by_policy[(fraction, "s3fifo")].bytes < lru.bytes
    # a bigger cache misses less
    assert by_policy[(0.1, "lru")].objects < by_policy[(0.01, "lru")].objects


@pytest.mark.slow  # about 4 s: 20,000 requests through a real directory
def test_the_shared_tier_misses_within_two_percent_of_libcachesim(tmp_path: Path) -> None:
    """``--shared``: the shared tier itself (S3-FIFO over LMDB and files), replayed on a
    real directory, beside our S3-FIFO and against libCacheSim's."""
    trace = zipf_trace(alpha=0.9, requests=20_000, objects=2_000, seed=5)
    rows = compare(trace, [0.1], ["s3fifo"], str(tmp_path), shared=True)
    assert [r.policy for r in rows] == ["s3fifo", SHARED_ROW]
    policy, tier = rows
    # libCacheSim's S3-FIFO at what the tier's entries may take: its size less the reserve
    # for LMDB's freed pages (decision 0041), which holds no object.
    assert tier.reference.objects >= policy.reference.objects
    assert 0 < tier.ours.objects < 1 and 0 < tier.ours.bytes < 1
    # Within 3%: the tier counts each entry's pages (its record, and a dozen nodes in its
    # other trees: decision 0041, issue 31 item 2), which libCacheSim counts not at all; 2.3%
    # measured at a tenth of the working set (2% before the tier counted pages).
    assert tier.object_gap <= 0.03 and tier.byte_gap <= 0.03, tier
    assert list(tmp_path.iterdir()) == []  # its directory is gone


def test_the_trace_has_its_one_hit_wonders_and_its_scan() -> None:
    trace = zipf_trace(alpha=0.9, requests=20_000, objects=1_000, seed=1)
    assert len(trace.ids) == len(trace.sizes) == 20_000
    counts: dict[int, int] = {}
    for key in trace.ids:
        counts[key] = counts.get(key, 0) + 1
    once = [key for key in counts if key >= 1_000]  # ids past the popular ones
    assert len(once) == int(20_000 * ONE_HIT) + int(20_000 * SCAN)
    assert all(counts[key] == 1 for key in once)
    # the scan: consecutive cold ids, in a row, in the middle of the trace
    start = trace.ids.index(1_000 + int(20_000 * ONE_HIT))
    scan = trace.ids[start : start + int(20_000 * SCAN)]
    assert scan == list(range(scan[0], scan[0] + len(scan)))
    assert 0.4 < start / len(trace.ids) < 0.6
    # one size per object, and the working set is their sum over distinct objects
    size_of = dict(zip(trace.ids, trace.sizes, strict=True))
    assert all(size_of[k] == s for k, s in zip(trace.ids, trace.sizes, strict=True))
    assert trace.working_set == sum(size_of.values())
    # the same seed, the same trace
    assert zipf_trace(alpha=0.9, requests=20_000, objects=1_000, seed=1) == trace


@pytest.mark.slow
def test_the_command_prints_the_table() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.hit_ratio",
            "--requests",
            "5000",
            "--objects",
            "500",
            "--alphas",
            "0.9",
            "--sizes",
            "0.1",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    rows = [line.split(" | ") for line in result.stdout.splitlines()]
    ours = [row for row in rows if row[0] == "| zipf 0.9" and len(row) == 10]
    reference_only = [row for row in rows if row[0] == "| zipf 0.9" and len(row) == 5]
    assert [row[2] for row in ours] == ["lru", "sieve", "s3fifo"]
    assert [row[2] for row in reference_only] == ["arc"]
    assert all(0 < float(row[3]) < 1 for row in ours + reference_only)
    assert "largest gap to libCacheSim: 0.00%" in result.stdout


@pytest.mark.slow
def test_an_unknown_policy_is_refused() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.hit_ratio", "--policies", "lru,nope"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "unknown policies ['nope']" in result.stderr
    assert table([]).count("\n") == 1  # an empty run is a header only


@pytest.mark.slow
def test_every_hit_cost_case_runs_and_hits_held_keys() -> None:
    cases = hit_cases()
    assert "loop alone" in cases and "sieve.hit" in cases and "s3fifo.hit" in cases
    for label, (code, names) in cases.items():
        exec(compile(code, label, "exec"), dict(names))
    # the hit cases hit keys that are held: SIEVE's bits are all set, S3-FIFO's counters 1
    sieve_names = cases["sieve.hit"][1]
    exec(cases["sieve.hit"][0], dict(sieve_names))
    sieve = sieve_names["hit"].__self__  # type: ignore[attr-defined]
    assert len(sieve) == HIT_KEYS and set(sieve._visited) == {1}
