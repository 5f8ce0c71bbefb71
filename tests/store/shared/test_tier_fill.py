"""benchmarks/tier_fill.py at a small scale (issue 31, "benchmarks"): a tier filled with 1 KiB
objects to ten times its size never fails a fill, keeps storing new objects, and its use of
the disk, counted in pages and in the directory's blocks, stays within ``disk_max_bytes``."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.tier_fill import DOMAIN, fill_tier
from proxy.store.shared import SharedTier

pytestmark = pytest.mark.slow  # 20,000 commits

MAX_BYTES = 2 << 20


def test_a_tier_filled_ten_times_over_stays_within_its_size(tmp_path: Path) -> None:
    measures = fill_tier(tmp_path / "cache", max_bytes=MAX_BYTES, object_bytes=1024, times=10)
    assert measures[-1].fills == 10 * MAX_BYTES // 1024
    assert [m.failed for m in measures] == [0] * len(measures)
    assert max(m.pages_bytes for m in measures) <= MAX_BYTES
    assert max(m.directory_bytes for m in measures) <= MAX_BYTES
    assert measures[-1].evictions > 9 * measures[-1].entries  # it went round many times
    tier = SharedTier.open_node(tmp_path / "cache", max_bytes=MAX_BYTES)
    try:
        last = f"/o/{measures[-1].fills - 1}"
        (entry,) = tier.lookup(DOMAIN, last).variants  # the newest is stored
        assert tier.read_all(entry) == b"x" * 1024
    finally:
        tier.close()
