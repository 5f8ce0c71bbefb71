"""A peer answer against the asking node's shared tier (decision 0047, the section of that
name), on real processes: three ``cdn-proxy serve`` edge nodes with a shared tier each,
Valkey, a control plane, an origin, and a stand-in owner (tests/fleet/test_peer_nodes.py's
``StandIn``, a live member of the fleet as node ``fake``).

The asking worker judges an owner's label against its member's applied position, which
moves only once a whole batch is applied. The node's shared tier may hold a purge before
that: another worker of the node wrote it (one writer per node, decision 0048). A fill whose
tier lookup saw that purge stores under a token from after it, so an answer the owner made
before it would be stored as newer, and outlive the purge's 200 there. The label must cover
the tier's fleet mark too (``PurgeStateStore.fleet_written``, ``core/peer.py
covers_written``).

The window is held still by this test acting as that other worker: it writes the next clear
of the fleet, as a batch of the fleet's epoch and number, into the asking node's ``state/``
environment (real LMDB, as a worker of the node writes it) before Valkey has it. The
asking worker has then applied number N; its tier says N + 1. The stand-in answers with
the label N: ``usable`` for the worker, but not covering the tier, so the node must go to
the origin, and store the origin's answer. Without the check it serves the stand-in's
answer and stores it in the tier under a token from after the clear (this test fails so
with ``_covers`` in edge/peer_fill.py made to return True).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import lmdb
import pytest

from benchmarks.peer_fill_latency import NODES, D, PeerCluster, fresh_page, read
from proxy.core.peer import PurgeLabel
from proxy.core.purge.retention import DEFAULT_MAX_BYTES
from proxy.fleet.member import FleetMember
from proxy.store.shared import pages
from proxy.store.shared.node_writes import FleetBatch, NodeWrite
from proxy.store.shared.purge_state import PurgeStateStore
from proxy.store.shared.tier import STAMP_FILE
from proxy.wire.peer import pack_label
from tests.fleet.peer_support import live_stand_in
from tests.fleet.test_peer_nodes import StandIn, clear, origin_asks, peers_ready, valkey_url
from tests.polling import until

pytestmark = pytest.mark.slow  # real processes


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[PeerCluster]:
    """Three edge nodes of one worker, each with a shared tier."""
    started = PeerCluster(tmp_path, domains=(D,), workers=(1, 1, 1), disk=True)
    started.peer_timeout = 3.0  # a loaded machine is slow to answer
    try:
        await started.start()
        yield started
    finally:
        await started.close()


@pytest.fixture
async def stand_in(cluster: PeerCluster) -> AsyncIterator[tuple[StandIn, FleetMember]]:
    """The stand-in owner, a live member of the fleet as node ``fake`` taking peer fills."""
    server = StandIn()
    async with live_stand_in(server, valkey_url(cluster), node="fake", domains=(D,)) as member:
        yield server, member


def write_as_another_worker(directory: Path, batch: FleetBatch) -> None:
    """Write ``batch`` to the node's shared tier at ``directory`` as another worker of the
    node writes it: ``PurgeStateStore.apply_fleet`` on its ``state/`` environment, synced,
    announced in ``state/stamp``."""
    env = lmdb.open(
        str(directory / "state"), map_size=pages.state_map_size(DEFAULT_MAX_BYTES), max_dbs=0
    )
    store = PurgeStateStore(env, directory / "state" / STAMP_FILE)
    try:
        assert store.apply_fleet(batch, 0.0) == 1
        assert store.fleet_written(D).mark == (batch.epoch, batch.seq)
    finally:
        store.close()
        env.close()


async def test_an_owners_answer_must_cover_the_purge_the_asking_nodes_tier_holds(
    cluster: PeerCluster, stand_in: tuple[StandIn, FleetMember]
) -> None:
    server, member = stand_in
    nodes = (*NODES, "fake")
    edge = cluster.edges[0]
    await peers_ready(cluster, nodes, [edge])
    await clear(cluster)  # a purge answered 200: every member, edge0 too, applied it
    epoch, number = member.applied.epoch, member.applied.seq
    assert epoch is not None and number > 0
    # The owner makes its answers at the position edge0's worker applied: usable for the
    # worker. First, edge0 lists the stand-in (peers_ready saw it fill from edge1, which
    # its list may have held before the stand-in joined): a page it owns comes through it.
    server.label = pack_label(PurgeLabel(epoch, number))

    async def through_the_stand_in() -> bool:
        page = fresh_page(owned_by="fake", nodes=nodes)
        return 'detail="peer=fake"' in (await read(edge, page))[2]

    await until(through_the_stand_in, every=0.05)
    # The next clear of the fleet, in edge0's tier before its worker has applied it: the
    # stand-in's label is now older than what the tier holds.
    clear_next = FleetBatch(epoch, number + 1, (NodeWrite(D, number + 1),))
    write_as_another_worker(edge.node.config.parent / "cache", clear_next)
    asked: list[str] = []
    for _ in range(5):  # a node late to renew leaves the others' lists for a moment (0047)
        page = fresh_page(owned_by="fake", nodes=nodes)
        for _ in range(2):  # neither served nor stored: the second read is the origin's copy
            status, body, cache = await read(edge, page)
            assert (status, body) == (200, "1"), cache  # the origin's, not the stand-in's
            assert "peer=fake" not in cache, cache
        asked = [path for path, _ in server.asked if path == f"/{D}/{page}"]
        if asked:
            break
    assert len(asked) == 1, server.asked[-3:]  # asked once, refused, then a local copy
    assert origin_asks(cluster, page) == 1
    # The next clear, made through the API, is written over it (the fleet's numbers are
    # its own, above the one written here): after its 200 the page is the origin's new one.
    version = cluster.origin.bump(D)
    await clear(cluster)
    for _ in range(2):  # a fill, then its copy
        status, body, cache = await read(edge, page)
        assert (status, body) == (200, str(version)), cache
