"""A fleet member's ``close()`` ends its tasks, wherever a cancellation finds them.

A sync loop that outlived ``close()`` kept renewing a closed member's lease (the others kept
it in their peer lists), and the event loop's shutdown then waited for it for ever. The
cause: the Valkey client sent each command through ``asyncio.wait_for`` (it does when given
a socket timeout), which on Python 3.11 swallows a cancellation that comes as the send
completes. The test cancels a sync at each of its suspension points in turn, so that one of
them is the send.
"""

from __future__ import annotations

import asyncio

from proxy.fleet.member import FleetMember
from proxy.store.memory import MemoryStore
from tests.fleet.conftest import DOMAINS, Fleet, settings

# More turns of the event loop than one sync takes on loopback (a sync's calls to Valkey,
# and the reads of the peer list, each cost a few turns).
TURNS = 60


async def test_a_sync_cancelled_at_any_point_ends_cancelled(fleet: Fleet) -> None:
    member = FleetMember(
        settings=settings(fleet.server.url, peer_fill=True),
        store=MemoryStore(max_bytes=1 << 20),
        domains=DOMAINS,
        node="edge-1",
        advertise="http://127.0.0.1:8001",
    )
    await member.start()
    try:
        outcomes: list[str] = []
        for turns in range(TURNS):

            async def syncing() -> None:
                while True:
                    await member.sync()

            task = asyncio.create_task(syncing())
            for _ in range(turns):
                await asyncio.sleep(0)  # one turn of the loop: the cancel lands further in
            task.cancel()
            done, _ = await asyncio.wait([task], timeout=2.0)
            outcomes.append("cancelled" if task in done and task.cancelled() else "kept running")
            if task not in done:
                task.cancel()
                await asyncio.wait([task], timeout=2.0)
        assert member.syncs > TURNS // 4  # the cancels did land inside syncs
        assert outcomes == ["cancelled"] * TURNS, outcomes
    finally:
        await member.close()
    left = [t for t in asyncio.all_tasks() if t.get_name().startswith("fleet-")]
    assert left == [] or all(t.done() for t in left), left
