"""The checker of issue 12 with peer fills on every edge node (issue 33, decision 0047): every
fault of benchmarks/fleet_checker.py twice, with and without a shared tier, and on until at
least 500 clears and purges have been answered 200 (issue 34: the suite's time; the benchmark's
own run, ``--peer-fill --clears 2000``, goes on to 2,000), and no read after a 200 returns what
it covered.

With peer fills a miss asks the key's owner first, so the faults hit owners too: an owner
killed, stopped, cut off from Valkey, or of another epoch after Valkey's restart. The purge
label is what keeps a purge true with no second purge: an answer made before a purge the
asking node applied is neither served nor stored. An owner that labelled its answers with
the position it reached later (at the answer, not at the request), or an asking node that
kept an unlabelled answer, fails this checker.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.fleet_checker import FAULTS, Checker, checker_cluster, disk_report
from tests.fleet.test_checker import assert_sound, run_until

# slow: real processes under every fault, about twenty seconds each
pytestmark = pytest.mark.slow

PURGES = 500


@pytest.mark.parametrize("disk", [False, True], ids=["memory", "disk"])
async def test_every_fault_with_peer_fills(tmp_path: Path, disk: bool) -> None:
    cluster = checker_cluster(tmp_path, disk=disk, peer_fill=True)
    try:
        await cluster.start()
        checker = Checker(cluster, seed=13)
        history = await run_until(
            checker, min_clears=PURGES, seen=lambda history: len(checker.peer_fills) > 100
        )
    finally:
        await cluster.close()
    print(history.report())
    print(disk_report(checker))
    assert_sound(history, FAULTS)
    assert history.confirmed >= PURGES
    # Misses were filled through their owners, throughout.
    assert len(checker.peer_fills) > 100, len(checker.peer_fills)
