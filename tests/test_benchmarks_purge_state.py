"""benchmarks.purge_state runs, and its memory columns say what a process holds: the parsed
URL purges grow with their number and are larger than what the purge state counts; once
retired (decision 0059), both fall to the domain's small record."""

from __future__ import annotations

from benchmarks.purge_state import measure


def test_the_purge_state_benchmark_measures_time_and_memory() -> None:
    small, large = measure(100, 2), measure(2000, 2)
    assert len(large.purges) == len(large.cpu) == len(large.lookups) == 2
    assert all(value > 0 for value in (*large.purges, *large.lookups))
    assert 0 < small.parsed_mb < large.parsed_mb
    assert 0 < large.counted_mb < large.parsed_mb
    assert large.retire_s > 0 and large.longest_pass_ms > 0
    assert large.parsed_after_mb < small.parsed_mb
    assert large.counted_after_mb < 0.001
