"""A member applies what a sync brings (clears and purges of several domains) in one step,
against a real Valkey and Redis: a lookup running beside it sees the store as it was before
the batch or as it is after, never half of it (proxy/store/base.py: the store's clear_now
and purge_now never suspend, and the member awaits nothing between them)."""

from __future__ import annotations

import asyncio
from typing import Any

from proxy.core.purge.purges import purge_request
from tests.fleet.conftest import Fleet

# No renewal and no hint during the test: the batch is the sync the test makes.
QUIET: dict[str, Any] = {"hints": False, "lease": 10.0, "renew": 5.0}
TARGETS = (("a.test", "/x"), ("b.test", "/y"), ("b.test", "/z"))


async def test_a_sync_applies_its_clears_and_purges_at_once_to_concurrent_lookups(
    fleet: Fleet,
) -> None:
    node = await fleet.node(**QUIET)
    for domain, target in TARGETS:
        assert await node.fill(domain, target, b"v1")
    scripts = node.member._scripts
    assert scripts is not None
    # Written to Valkey, not yet applied: the clear of a.test, a purge of b.test's /y.
    await scripts.clear("a.test", by="cp-test")
    await scripts.purge("b.test", purge_request("url", ["/y"]), by="cp-test")
    seen: list[tuple[bytes | None, ...]] = []
    stop = asyncio.Event()

    async def look() -> None:  # a lookup at every turn of the event loop
        while not stop.is_set():
            seen.append(tuple(node.read(d, t) for d, t in TARGETS))
            await asyncio.sleep(0)  # a turn, not a wait

    looking = asyncio.create_task(look())
    try:
        assert await node.member.sync()
        await asyncio.sleep(0)  # one more turn: it looks after the sync's ack
    finally:
        stop.set()
        await looking

    before, after = (b"v1", b"v1", b"v1"), (None, None, b"v1")
    assert seen[0] == before and seen[-1] == after  # it looked both while and after
    assert set(seen) == {before, after}
    assert node.member.purges_applied == 1
