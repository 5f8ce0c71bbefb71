"""The checker of issue 12 with a shared tier on every edge node (issue 23 §4, decision 0040):
every fault of benchmarks/fleet_checker.py, until at least 2,000 clears and purges have been
answered 200, and no read after a 200 returns what it covered.

With a disk tier the faults test more than the fence: a node killed while purges are answered
restarts with its tier full of what it stored before them, and must apply them before it
serves from it; after Valkey's restart without persistence, the tiers' entries are distrusted
and revalidated (``page0`` has an ETag: 304s; ``page1`` none: misses). A member that skipped
what its first sync read passes the checker without a disk tier (its cache is empty anyway) and
fails it with one (benchmarks/README.md, "Fleet checker with a shared tier").
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.fleet_checker import FAULTS, KILL_EDGE, Checker, disk_cluster, disk_report
from tests.fleet.test_checker import assert_sound

# slow: real processes under every fault, about a minute and a half
pytestmark = pytest.mark.slow

PURGES = 2000


async def test_every_fault_with_a_disk_tier_on_every_node(tmp_path: Path) -> None:
    cluster = disk_cluster(tmp_path)
    try:
        await cluster.start()
        checker = Checker(cluster, seed=11)
        history = await checker.run(FAULTS, min_clears=PURGES)
    finally:
        await cluster.close()
    print(history.report())
    print(disk_report(checker))
    assert_sound(history, FAULTS)
    assert history.confirmed >= PURGES
    # Nodes were restarted after missing purges (answered 200 while they were dead), and
    # served from their tier after the restart.
    killed = [fault for fault in history.faults if fault.kind == KILL_EDGE]
    assert any(
        clear.status == 200 and fault.start < clear.start and clear.end < fault.end
        for fault in killed
        for clear in history.clears
    ), "no purge was answered while a node was dead"
    assert any(
        node == fault.target and start > fault.end
        for fault in killed
        for node, start in checker.disk_hits
    ), "no restarted node served from its tier"
    # After Valkey's restarts, distrusted entries of unchanged pages came back with a 304.
    assert any(status == 304 for _, _, status in cluster.origin.seen), disk_report(checker)
