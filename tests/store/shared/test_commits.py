"""A write transaction that aborts changes nothing outside LMDB either (issue 31 §5, "aborted
commits"): S3-FIFO's hit counters are as they were, and the dead entries readers handed it are
removed by the next write. Entries doomed by readers while the writer commits are never lost."""

from __future__ import annotations

import threading
from pathlib import Path

import lmdb

from proxy.store.shared import SharedTier
from proxy.store.shared.evict import Admission
from proxy.store.shared.s3fifo import S3FifoEvictor
from tests.store.shared.actor import body, fill

DOMAIN = "example.com"
DEAD = "dead.example"


class FailingEvictor(S3FifoEvictor):
    """S3-FIFO whose next admission is followed by a fault of the transaction (as a disk
    that fails the record's write after the policy chose its victims)."""

    fail = False

    def admit(self, txn: lmdb.Transaction, key: bytes, sequence: int, cost: int) -> Admission:
        admission = super().admit(txn, key, sequence, cost)
        if self.fail:
            self.fail = False
            raise lmdb.DiskError("injected: the record's write failed")
        return admission


def counters(tier: SharedTier, targets: list[str]) -> list[int]:
    evictor = tier.evictor
    assert isinstance(evictor, S3FifoEvictor) and evictor.counters is not None
    got = evictor.counters
    return [got.get(e.sequence) for t in targets for e in tier.inspect(DOMAIN, t).variants]


def test_an_aborted_commit_changes_no_counter_and_loses_no_dead_entry(tmp_path: Path) -> None:
    evictor = FailingEvictor()
    tier = SharedTier.open_node(tmp_path / "cache", max_bytes=2 << 20, evictor=evictor)
    try:
        targets = [f"/o/{index}" for index in range(700)]
        for index, target in enumerate(targets):
            fill(tier, DOMAIN, target, body(index, 1000))
        held = [target for target in targets if tier.inspect(DOMAIN, target).variants]
        assert len(held) < len(targets)  # full: the next admission evicts
        for target in held:  # a hit each, twice for some: the eviction lowers these
            tier.lookup(DOMAIN, target)
        for target in held[::3]:
            tier.lookup(DOMAIN, target)
        assert fill(tier, DEAD, "/dead", b"dead")
        tier.clear_domain(DEAD)
        assert tier.lookup(DEAD, "/dead").variants == ()  # doomed for the next write
        before = counters(tier, held)

        evictor.fail = True
        assert not fill(tier, DOMAIN, "/new", body(9999, 1000))
        assert counters(tier, held) == before
        assert tier.holds(DEAD, "/dead")

        assert fill(tier, DOMAIN, "/next", body(9998, 1000))  # removes it
        assert not tier.holds(DEAD, "/dead")
    finally:
        tier.close()


def test_entries_doomed_during_commits_are_all_removed(tmp_path: Path) -> None:
    """Readers doom entries (a cleared domain's) while the writer commits fills: after one
    more commit, none of them is still stored."""
    tier = SharedTier.open_node(tmp_path / "cache", max_bytes=64 << 20)
    try:
        dead = [f"/d/{index}" for index in range(2000)]
        for index, target in enumerate(dead):
            assert fill(tier, DEAD, target, body(index, 200))
        tier.clear_domain(DEAD)
        done = threading.Event()

        def read() -> None:
            for target in dead:
                tier.lookup(DEAD, target)
            done.set()

        reader = threading.Thread(target=read)
        reader.start()
        index = 0
        while not done.is_set():
            fill(tier, DOMAIN, f"/live/{index % 50}", body(index, 200))
            index += 1
        reader.join()
        assert fill(tier, DOMAIN, "/last", b"last")
        assert [target for target in dead if tier.holds(DEAD, target)] == []
        assert tier.doomed_count() == 0
    finally:
        tier.close()
