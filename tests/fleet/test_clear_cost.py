"""What a clear costs each member (decision 0026, "The cost of a clear"; decision 0053),
against a real Valkey and Redis: applied from its hint, its ack carries the figures of what
it dropped (its copies: the clear's audit record sums them, issue 31 §5), counted from the
clear itself (no read of the domain's size first); a hard purge of ``all`` (the same
script) asks every member for its figures too, and gets them."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from proxy.core.purge.purges import purge_request
from proxy.fleet import lua
from tests.fleet.conftest import Fleet, Node
from tests.polling import until

# Syncs far apart: the clears below are applied from their hints (a sync cannot tell a
# plain clear from a purge of all, so it reports figures for both).
SLOW_RENEW: dict[str, Any] = {"lease": 10.0, "renew": 4.0}


def record_acks(node: Node) -> list[tuple[int, int, tuple[object, ...]]]:
    """Each ack script call the member makes: the number acked, how many keys went with
    it, and the figures (the call itself goes through to Valkey unchanged)."""
    calls: list[tuple[int, int, tuple[object, ...]]] = []
    fleet_scripts = node.member._scripts
    assert fleet_scripts is not None
    call = fleet_scripts._call

    async def recording(script: lua.Script[...], args: Any, **options: Any) -> Any:
        if script is lua.ACK:
            keys = script.keys_for(figures=options.get("figures", False))
            calls.append((int(args[2]), len(keys), tuple(args[3:])))
        return await call(script, args, **options)

    fleet_scripts._call = recording  # type: ignore[method-assign]
    return calls


def synced(node: Node, count: int) -> bool:
    return node.member.syncs >= count


@pytest.mark.slow
async def test_a_clear_and_a_purge_of_all_are_acked_with_their_figures(
    fleet: Fleet,
) -> None:
    nodes = [await fleet.node(**SLOW_RENEW) for _ in range(3)]
    for node in nodes:  # the listener's first subscription is followed by a sync
        await until(functools.partial(synced, node, 2), every=0.01)
        assert await node.fill("a.test", "/page", b"v1")
    acks = [record_acks(node) for node in nodes]
    purger = fleet.purger()  # its lease is the grace a new epoch's first clear waits out

    cleared = await purger.clear_domain("a.test")

    assert (cleared.acked, cleared.live) == (3, 3)
    assert cleared.entries_dropped == 3 and cleared.bytes_dropped > 0  # one copy each
    for node, calls in zip(nodes, acks, strict=True):
        assert node.read("a.test", "/page") is None
        assert node.member.hints_applied == 1 and node.member.syncs == 2
        [(number, keys, figures)] = calls
        assert (number, keys, figures[:2]) == (cleared.generation, len(lua.KEYS), (number, 1))
        calls.clear()
        assert await node.fill("a.test", "/page", b"v2")

    purged = await purger.purge("a.test", purge_request("all", ()))

    assert (purged.acked, purged.reported, purged.exact) == (3, 3, True)
    assert purged.entries == 3 and purged.bytes > 0
    for node, calls in zip(nodes, acks, strict=True):
        assert node.read("a.test", "/page") is None
        assert node.member.hints_applied == 2 and node.member.syncs == 2
        [(number, keys, figures)] = calls
        assert (number, keys, figures[:2]) == (purged.number, len(lua.KEYS), (number, 1))
