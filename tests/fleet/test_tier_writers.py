"""One writer per node (decision 0048): the workers of a node share one shared tier, and each
fleet purge is written to it once, not once per worker, in the tier's writer thread; every
worker still acks only once the purge is durable in the tier, and every worker's own copies
are dropped. In process, with a real Valkey and a real tier directory; the workers are
members whose stores share the one tier object (one process opens an LMDB environment once)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import lmdb
import pytest

from benchmarks.fleet_cluster import Cluster
from proxy.core.purge.purges import purge_request
from proxy.fleet.member import FleetMember, node_batch
from proxy.fleet.store import FleetStore
from proxy.store.memory import MemoryStore
from proxy.store.shared import SharedTier
from proxy.store.shared.node_writes import FleetBatch, NodeWrite
from proxy.store.tiered import TieredStore
from tests.fleet.conftest import DOMAINS, Fleet, Node, settings
from tests.fleet.test_tier_fleet import TierNode
from tests.fleet.test_tier_nodes import D0, PLAIN, SAME, api, fill, read

WORKERS = 3


def write_transactions(tier: SharedTier) -> int:
    """The purge state's committed write transactions so far (LMDB's last transaction id)."""
    return int(tier._state_env.info()["last_txnid"])


async def workers(
    fleet: Fleet, tier: SharedTier, count: int, domains: tuple[str, ...] = DOMAINS
) -> list[TierNode]:
    """``count`` started members of node "one", each with a memory tier in front of ``tier``,
    serving ``domains``."""
    started = []
    for _ in range(count):
        tiered = TieredStore(MemoryStore(max_bytes=1 << 20), tier)
        member = FleetMember(
            settings=settings(fleet.server.url), store=tiered, domains=domains, node="one"
        )
        node = Node(member=member, store=FleetStore(tiered, member), relay=None)
        fleet.nodes.append(node)
        await member.start()
        started.append(TierNode(node, tiered))
    return started


@pytest.fixture
async def node_tier(fleet: Fleet, tmp_path: Path) -> SharedTier:
    tier = SharedTier.open_node(tmp_path / "cache", max_bytes=64 << 20)
    fleet.on_close.append(tier.close)
    return tier


async def test_each_fleet_purge_is_written_once_per_node(
    fleet: Fleet, node_tier: SharedTier
) -> None:
    node = await workers(fleet, node_tier, WORKERS)
    purger = fleet.purger()
    await purger.clear_domain("b.test")  # waits out the grace of the test's new epoch
    pages = [f"/p{n}" for n in range(6)]
    for n, target in enumerate(pages):
        await node[n % WORKERS].fill("a.test", target)
        for worker in node:  # every worker holds its own copy in memory
            assert await worker.served("a.test", target) == "fresh"
    before = write_transactions(node_tier)
    for target in pages[:4]:
        await purger.purge("a.test", purge_request("url", [target]))  # acked by every worker
    written = write_transactions(node_tier) - before
    assert 1 <= written <= 4  # one per purge at most; it was one per purge per worker
    for worker in node:
        for target in pages[:4]:
            assert await worker.served("a.test", target) == "gone"
            assert not worker.on_disk("a.test", target)
        for target in pages[4:]:
            assert await worker.served("a.test", target) == "fresh"
    await purger.clear_domain("a.test")
    assert write_transactions(node_tier) - before <= 5
    for worker in node:
        assert await worker.served("a.test", "/p5") == "gone"


async def test_the_tier_is_written_off_the_event_loop(
    fleet: Fleet, node_tier: SharedTier, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[str] = []
    apply = node_tier.purges.apply_fleet

    def recording(batch: FleetBatch, at: float) -> int:
        threads.append(threading.current_thread().name)
        return apply(batch, at)

    monkeypatch.setattr(node_tier.purges, "apply_fleet", recording)
    node = await workers(fleet, node_tier, 1)
    purger = fleet.purger()
    await purger.clear_domain("b.test")
    await node[0].fill("a.test", "/p")
    await purger.purge("a.test", purge_request("url", ["/p"]))
    assert threads and all(name.startswith("shared-tier") for name in threads)
    assert threading.current_thread().name not in threads
    assert await node[0].served("a.test", "/p") == "gone"


def test_a_part_written_by_another_worker_is_skipped_and_a_newer_one_is_not(
    tmp_path: Path,
) -> None:
    """The fleet mark: a batch whose writes of a domain another worker has made (same epoch,
    mark at or above their numbers) commits nothing; one with a newer write commits it."""
    tier = SharedTier.open_node(tmp_path / "cache", max_bytes=64 << 20)
    try:
        url = purge_request("url", ["/a"])
        first = FleetBatch("e1", 7, (NodeWrite("a.test", 5), NodeWrite("a.test", 7, url)))
        before = write_transactions(tier)
        assert tier.apply_fleet(first) == 1
        assert tier.apply_fleet(first) == 0  # the second worker: nothing to write
        assert tier.apply_fleet(FleetBatch("e1", 7, (NodeWrite("a.test", 7, url),))) == 0
        assert write_transactions(tier) - before == 1
        newer = FleetBatch("e1", 9, (NodeWrite("a.test", 9, purge_request("url", ["/b"])),))
        assert tier.apply_fleet(newer) == 1
        other_epoch = FleetBatch("e2", 1, (NodeWrite("a.test", 1),))
        assert tier.apply_fleet(other_epoch) == 1  # a mark of another epoch says nothing
        assert tier.apply_fleet(FleetBatch(None, 1, (NodeWrite("a.test", 1),))) == 1
        every = FleetBatch("e3", 0, (), every="e3 0")
        assert tier.apply_fleet(every) == 1
        assert tier.apply_fleet(every) == 0  # one floor per epoch and number
        assert write_transactions(tier) - before == 5
    finally:
        tier.close()


async def test_concurrent_workers_write_a_batch_once(tmp_path: Path) -> None:
    """Two workers' writer threads with the same batch at once: the second finds the mark
    inside its write transaction, and commits nothing."""
    tier = SharedTier.open_node(tmp_path / "cache", max_bytes=64 << 20)
    try:
        batch = FleetBatch("e1", 3, (NodeWrite("a.test", 3, purge_request("url", ["/a"])),))
        before = write_transactions(tier)
        results = await asyncio.gather(
            *(asyncio.to_thread(tier.apply_fleet, batch) for _ in range(4))
        )
        assert (results.count(1), results.count(0)) == (1, 3)
        assert write_transactions(tier) - before == 1
    finally:
        tier.close()


def test_node_batch_is_what_apply_applies() -> None:
    from proxy.core.lease import Applied, SyncPlan
    from proxy.core.purge.fleet import PurgeRecord, PurgeStep

    url = purge_request("url", ["/a"])
    applied = Applied("e1", 9, {"a.test": 4, "b.test": 0, "c.test": 0})
    plan = SyncPlan(
        clear_all=False,
        clear=("a.test",),
        applied=applied,
        ack=True,
        purges=(
            PurgeStep(6, "b.test", "url", PurgeRecord(6, "b.test", url)),
            PurgeStep(8, "c.test", "url"),
        ),
        unknown=(),
    )
    records = {6: PurgeRecord(6, "b.test", url)}
    batch = node_batch(plan, ("a.test", "c.test"), records)
    assert batch == FleetBatch(
        "e1",
        9,
        (NodeWrite("a.test", 4), NodeWrite("c.test", 8), NodeWrite("b.test", 6, url)),
    )
    new_epoch = SyncPlan(clear_all=True, clear=(), applied=applied, ack=True)
    assert node_batch(new_epoch, DOMAINS, {}) == FleetBatch("e1", 9, (), every="e1 9")


def state_transactions(directory: Path) -> int:
    """The committed write transactions of a node's purge state, read from another process."""
    env = lmdb.open(str(directory / "state"), readonly=True, max_dbs=0)
    try:
        return int(env.info()["last_txnid"])
    finally:
        env.close()


@pytest.mark.slow
async def test_a_node_of_two_worker_processes_writes_each_fleet_purge_once(
    tmp_path: Path,
) -> None:
    """Real processes (benchmarks/fleet_cluster.py): Valkey, a control plane, an edge node of
    two workers on one tier. Each URL purge answered 200 was written to the node's purge
    state once (twice before: once by each worker), and what it covered is fetched anew."""
    cluster = Cluster(tmp_path, domains=(D0,), workers=(2,), disk=True, validated=(SAME,))
    try:
        await cluster.start()
        await fill(cluster, D0, SAME, PLAIN)
        edge = cluster.edges[0]
        before = state_transactions(tmp_path / "edge0" / "cache")
        for n in range(5):
            await api(cluster, "purge", {"domain": D0, "urls": [f"/{D0}/other{n}"]})
        version = cluster.origin.bump(D0, [SAME])
        await api(cluster, "purge", {"domain": D0, "urls": [f"/{D0}/{SAME}"]})
        written = state_transactions(tmp_path / "edge0" / "cache") - before
        assert 1 <= written <= 6, written  # 12 before: each of the 2 workers wrote each
        for _ in range(6):  # either worker, from memory or the tier: never the old one
            assert (await read(edge, D0, SAME))[:2] == (200, str(version))
        assert (await read(edge, D0, PLAIN))[:2] == (200, "1")
    finally:
        await cluster.close()
