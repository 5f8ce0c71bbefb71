"""Data loss in Valkey (0014 "Numbers never go back", the epoch and its grace): a restart
without persistence or a FLUSHALL starts a new epoch; every member drops its whole cache;
a clear in the first lease of the new epoch waits until it is one lease old; and clear
numbers and local generations never go back."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.fleet.conftest import LEASE, Fleet
from tests.polling import until

RESTART, FLUSH = "restart", "flushall"


async def lose_data(fleet: Fleet, how: str) -> None:
    if how == RESTART:
        fleet.server.stop()
        fleet.server.start()
    else:
        await fleet.client().flushall()


async def valkey_ms(fleet: Fleet) -> int:
    seconds, micros = await fleet.client().time()
    return int(seconds) * 1000 + int(micros) // 1000


@pytest.mark.parametrize("how", [RESTART, FLUSH])
async def test_members_drop_everything_on_a_new_epoch(fleet: Fleet, how: str) -> None:
    """Protection: the epoch. After the loss, the generations Valkey returns are all 0 again
    and look like nothing was ever cleared; only the epoch change makes members drop the
    cache they filled under the lost data set."""
    nodes = [await fleet.node() for _ in range(2)]
    for node in nodes:
        assert await node.fill("a.test", "/x", b"v1")
    old = nodes[0].member.applied.epoch
    await lose_data(fleet, how)
    await until(lambda: all(n.member.applied.epoch not in (None, old) for n in nodes), every=0.01)
    for node in nodes:
        assert node.read("a.test", "/x") is None
        assert await node.fill("a.test", "/x", b"v2")  # and caches again under the new epoch
        assert node.read("a.test", "/x") == b"v2"


@pytest.mark.parametrize("how", [RESTART, FLUSH])
async def test_a_clear_in_a_new_epoch_waits_for_the_grace(fleet: Fleet, how: str) -> None:
    """Protection: the grace. A member cut off while Valkey lost its data still holds a
    cache and a lease that the new data set knows nothing of; a clear right after the loss
    must not answer before that member's deadline. Without the grace it would answer at
    once (no member it knows of is pending) while the cut-off member still serves v1."""
    purger = fleet.purger()
    cut = await fleet.node(relayed=True)
    live = await fleet.node()
    assert await cut.fill("a.test", "/x", b"v1")
    assert cut.relay is not None
    cut.relay.blackhole()
    await lose_data(fleet, how)

    result = await purger.clear_domain("a.test")

    assert time.monotonic() >= cut.member.deadline
    assert cut.read("a.test", "/x") is None
    born = int(await fleet.client().execute_command("HGET", "{cdn}:epoch", "born"))  # type: ignore[no-untyped-call]
    assert await valkey_ms(fleet) >= born + LEASE * 1000  # the epoch was a lease old
    assert result.live == result.acked == 1
    await until(
        lambda: live.member.applied.generations.get("a.test") == result.generation, every=0.01
    )


@pytest.mark.slow
@pytest.mark.parametrize("how", [RESTART, FLUSH])
async def test_numbers_never_go_back(fleet: Fleet, how: str) -> None:
    """Protection: clear numbers start from Valkey's clock in microseconds. Without it, the
    first clear after a loss would get number 1 again (a number a member may have applied),
    and a member's local generation must still only grow."""
    node = await fleet.node()
    purger = fleet.purger()
    first = await purger.clear_domain("a.test")
    local_before = (await node.store.lookup("a.test", "/x")).key[1]
    await lose_data(fleet, how)
    second = await purger.clear_domain("a.test")
    assert second.generation > first.generation
    await until(
        lambda: node.member.applied.generations.get("a.test") == second.generation, every=0.01
    )
    local_after = (await node.store.lookup("a.test", "/x")).key[1]
    assert local_after > local_before


@pytest.mark.slow
async def test_an_epoch_change_during_the_wait(fleet: Fleet) -> None:
    """An epoch change while a clear waits, end to end: the live member adopts the new epoch
    (dropping its cache) and is counted once it acks in it; the grace and the cut-off
    member's lease both run out before the answer. (The rule that any ack in a new epoch
    counts, whatever its number, matters only when the new server's clock is behind the
    old one's, which one server cannot show: tests/core/test_lease.py covers it.)"""
    purger = fleet.purger()
    cut = await fleet.node(relayed=True)
    live = await fleet.node(hints=False)
    await purger.clear_domain("b.test")  # waits out the grace of the test's epoch
    assert await cut.fill("a.test", "/x", b"v1")
    assert await live.fill("a.test", "/x", b"v1")
    assert cut.relay is not None
    cut.relay.blackhole()  # keeps the clear waiting until its lease runs out
    old = live.member.applied.epoch
    clearing = asyncio.create_task(purger.clear_domain("a.test"))
    await until(lambda: cut.member.renew_failures > 0, every=0.01)
    await lose_data(fleet, FLUSH)
    result = await clearing
    assert time.monotonic() >= cut.member.deadline
    assert live.member.applied.epoch != old  # it adopted the new epoch...
    assert live.read("a.test", "/x") is None  # ...and dropped its cache
    assert (result.acked, result.live) == (1, 1)
