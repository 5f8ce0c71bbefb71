"""The checker of issue 12 with a shared tier on every edge node (issue 23 §4, decision 0040):
every fault of benchmarks/fleet_checker.py, at least twice and on until at least 500 clears and
purges have been answered 200 and the history holds what is asserted below (at most five
rounds; issue 34: the suite's time; the benchmark's own run, ``--disk --clears 2000``, goes on
to 2,000), and no read after a 200 returns what it covered.

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
from benchmarks.fleet_cluster import Cluster
from benchmarks.fleet_history import History
from tests.fleet.test_checker import assert_sound, run_until

# slow: real processes under every fault, about half a minute
pytestmark = pytest.mark.slow

PURGES = 500


def answered_while_dead(history: History) -> bool:
    """A purge was answered 200 while a node was dead (killed, not yet restarted)."""
    return any(
        clear.status == 200 and fault.start < clear.start and clear.end < fault.end
        for fault in history.faults
        if fault.kind == KILL_EDGE
        for clear in history.clears
    )


def served_after_restart(history: History, checker: Checker) -> bool:
    """A restarted node served from its tier after its restart."""
    return any(
        node == fault.target and start > fault.end
        for fault in history.faults
        if fault.kind == KILL_EDGE
        for node, start in checker.disk_hits
    )


def revalidated(cluster: Cluster) -> bool:
    """After Valkey's restarts, distrusted entries of unchanged pages came back with a 304."""
    return any(status == 304 for _, _, status in cluster.origin.seen)


async def test_every_fault_with_a_disk_tier_on_every_node(tmp_path: Path) -> None:
    cluster = disk_cluster(tmp_path)
    try:
        await cluster.start()
        checker = Checker(cluster, seed=11)
        history = await run_until(
            checker,
            min_clears=PURGES,
            seen=lambda history: (
                answered_while_dead(history)
                and served_after_restart(history, checker)
                and revalidated(cluster)
            ),
        )
    finally:
        await cluster.close()
    print(history.report())
    print(disk_report(checker))
    assert_sound(history, FAULTS)
    assert history.confirmed >= PURGES
    # Nodes were restarted after missing purges (answered 200 while they were dead), and
    # served from their tier after the restart.
    assert answered_while_dead(history), "no purge was answered while a node was dead"
    assert served_after_restart(history, checker), "no restarted node served from its tier"
    assert revalidated(cluster), disk_report(checker)
