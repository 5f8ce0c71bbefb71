"""A fleet clear (0014 "Clear" and "Wait for the fleet"), against a real Valkey and Redis.

After ``FleetPurger.clear_domain`` returns, the invariant of 0014 is checked directly: every
member either has applied the clear (its cache no longer holds the domain's old entries) or
can no longer serve from its cache (its lease deadline has passed)."""

from __future__ import annotations

import asyncio
import json
import logging
import time

import pytest

from proxy.errors import ClearNotConfirmed, FleetUnavailable
from proxy.fleet import lua
from proxy.fleet.purger import FleetPurger
from proxy.fleet.scripts import ACKED, CLEARS
from proxy.fleet.settings import FleetSettings
from tests.fleet.conftest import LEASE, Fleet, Node
from tests.polling import until


def assert_true_everywhere(nodes: list[Node], domain: str, number: int) -> None:
    """The 200's promise, member by member: applied, or fenced."""
    for node in nodes:
        member = node.member
        if member.fenced:
            continue
        assert member.applied.generations.get(domain, 0) >= number, member.name
        assert node.read(domain, "/x") is None, member.name


async def test_clear_waits_for_every_live_members_ack(fleet: Fleet) -> None:
    """Protection: the purger waits for each live member's ack. The members take no hints,
    so they learn of the clear only at their next renewal; a purger that answered without
    waiting would return while they still serve the old version."""
    nodes = [await fleet.node(hints=False) for _ in range(3)]
    for node in nodes:
        assert await node.fill("a.test", "/x", b"v1")
        assert await node.fill("b.test", "/x", b"v1")
    result = await fleet.purger().clear_domain("a.test")
    assert (result.acked, result.live) == (3, 3)
    assert_true_everywhere(nodes, "a.test", result.generation)
    assert all(node.read("a.test", "/x") is None for node in nodes)
    assert all(node.read("b.test", "/x") == b"v1" for node in nodes)  # only the domain


@pytest.mark.slow
async def test_hints_make_the_ack_fast(fleet: Fleet) -> None:
    """With hints, a clear does not wait for a renewal: members sync on the published
    number and ack at once (the purger is woken by the ack hint)."""
    nodes = [await fleet.node(renew=0.6, lease=0.9) for _ in range(3)]
    purger = fleet.purger(poll_interval=1.0, lease=0.9)
    await purger.clear_domain("b.test")  # waits out the grace of the test's new epoch
    started = time.monotonic()
    result = await purger.clear_domain("a.test")
    assert (result.acked, result.live) == (3, 3)
    assert time.monotonic() - started < 0.3  # neither a renewal nor a poll was needed
    assert_true_everywhere(nodes, "a.test", result.generation)


async def test_lost_hints_only_cost_latency(fleet: Fleet) -> None:
    """Protection: renewal (members) and polling (purger) regardless of pub/sub. Neither side
    subscribes at all, as if every hint were lost: the clear still completes, true."""
    nodes = [await fleet.node(hints=False) for _ in range(2)]
    for node in nodes:
        assert await node.fill("a.test", "/x", b"v1")
    result = await fleet.purger(hints=False).clear_domain("a.test")
    assert (result.acked, result.live) == (2, 2)
    assert_true_everywhere(nodes, "a.test", result.generation)


async def test_a_member_resubscribes_after_losing_its_hint_connection(fleet: Fleet) -> None:
    """Protection: the listener subscribes again after a lost connection (else every later
    clear waits for a renewal)."""
    nodes = [await fleet.node() for _ in range(2)]
    client = fleet.client()
    await until(lambda: all(n.member.syncs >= 2 for n in nodes), every=0.01)
    await client.client_kill_filter(_type="pubsub")

    subscribers = [0]

    async def count() -> bool:
        reply = await client.pubsub_numsub("{cdn}:clears")
        subscribers[0] = reply[0][1]
        return subscribers[0] >= 2

    await until(count, within=5.0, every=0.02)
    assert subscribers[0] == 2


async def test_a_killed_member_is_waited_for_until_its_lease_expires(fleet: Fleet) -> None:
    """Protection: a member that stops renewing (kill -9) still holds a live lease; the clear
    answers only once that lease has expired, and so after the member's own deadline."""
    alive = await fleet.node()
    killed = await fleet.node()
    assert await killed.fill("a.test", "/x", b"v1")
    await killed.member.close()  # no goodbye: its lease stays in Valkey
    result = await fleet.purger().clear_domain("a.test")
    assert time.monotonic() >= killed.member.deadline  # not before its lease ran out
    assert killed.member.fenced and killed.read("a.test", "/x") is None
    assert (result.acked, result.live) == (1, 1)  # the killed one was dropped, not counted
    assert_true_everywhere([alive], "a.test", result.generation)


async def test_clear_timeout_answers_not_confirmed_with_counts(fleet: Fleet) -> None:
    """Protection: the purger never answers 200 when it cannot make it true: with a stopped
    member whose lease outlives clear_timeout, it raises ClearNotConfirmed with the counts,
    and the clear is recorded (the live member has applied it)."""
    alive = await fleet.node()
    stopped = await fleet.node()
    await fleet.purger().clear_domain("b.test")  # waits out the grace of the test's epoch
    await stopped.member.close()  # its lease has at least 0.6 - 0.15 s to run
    assert await alive.fill("a.test", "/x", b"v1")
    purger = fleet.purger(clear_timeout=0.25)
    with pytest.raises(ClearNotConfirmed) as raised:
        await purger.clear_domain("a.test")
    error = raised.value
    assert (error.acked, error.live) == (1, 2)
    assert error.retry_after == 1  # the stopped member's lease runs out within 0.6 s
    assert alive.read("a.test", "/x") is None
    assert alive.member.applied.generations["a.test"] == error.number


@pytest.mark.slow
async def test_clear_without_valkey_is_unavailable() -> None:
    """A clear that cannot be recorded says so (FleetUnavailable), fast."""
    url = "redis://127.0.0.1:9/0"  # the discard port: nothing listens there
    purger = FleetPurger(settings=FleetSettings(url=url, timeout=0.2), name="cp")
    try:
        with pytest.raises(FleetUnavailable):
            await purger.clear_domain("a.test")
    finally:
        await purger.aclose()


@pytest.mark.parametrize("delay", [0.0, 0.001, 0.005, 0.02])
async def test_a_member_registering_during_a_clear(fleet: Fleet, delay: float) -> None:
    """Protection: a sync registers and reads in one script, so a member starting while a
    clear runs is either waited for or has read the clear's generation."""
    slow = await fleet.node(hints=False)  # keeps the clear waiting for a renewal
    purger = fleet.purger()
    clearing = asyncio.create_task(purger.clear_domain("a.test"))
    await asyncio.sleep(delay)
    newcomer = await fleet.node(hints=False)
    result = await clearing
    assert_true_everywhere([slow, newcomer], "a.test", result.generation)


async def test_the_log_records_each_clear_and_who_answered(fleet: Fleet) -> None:
    await fleet.node()
    result = await fleet.purger().clear_domain("a.test")
    entries = await fleet.client().xrange("{cdn}:log")
    assert len(entries) == 1
    fields = entries[0][1]
    assert fields[b"domain"] == b"a.test"
    assert fields[b"by"] == b"cp-test"
    assert int(fields[b"number"]) == result.generation


async def test_members_view_for_the_nodes_page(fleet: Fleet) -> None:
    """Each live member with its lease and the info of its last sync. A member is fenced
    until a sync succeeds in time (at the start of a new epoch, or when a sync is slow on a
    busy machine), and says so at its next sync: the view is read until both say they are
    not."""
    nodes = [await fleet.node() for _ in range(2)]
    purger = fleet.purger()
    fenced: list[bool] = []
    for _ in range(100):
        view = await purger.members()
        assert sorted(row.member for row in view.members) == sorted(n.member.name for n in nodes)
        for row in view.members:
            assert row.expires_ms > view.now_ms
            assert row.expires_ms <= view.now_ms + LEASE * 1000
        fenced = [json.loads(row.info)["fenced"] for row in view.members]
        if fenced == [False, False]:
            break
        await nodes[0].member.wait_synced()
    assert fenced == [False, False]


@pytest.mark.slow
async def test_members_apply_hints_and_ack_without_a_sync(fleet: Fleet) -> None:
    """0014 "Applying hints": a hint that continues the member's chain of applied clears is
    applied and acked at once, with no sync (no renewal, no read of every generation).
    Renewals are rare here (0.9 s), so that none falls due just as the hint arrives (the
    member then syncs instead, which is right but not what this test shows)."""
    nodes = [await fleet.node(lease=2.0, renew=0.9) for _ in range(3)]
    for node in nodes:
        assert await node.fill("a.test", "/x", b"v1")
    purger = fleet.purger(lease=2.0)
    await purger.clear_domain("b.test")  # waits out the grace of the test's new epoch
    before = [node.member.hints_applied for node in nodes]
    result = await purger.clear_domain("a.test")
    assert (result.acked, result.live) == (3, 3)
    assert [node.member.hints_applied for node in nodes] == [n + 1 for n in before]
    assert_true_everywhere(nodes, "a.test", result.generation)


async def test_a_lost_hint_makes_the_member_sync(fleet: Fleet) -> None:
    """Protection: the chain check of 0014 "Applying hints". The hint of a clear of a.test
    is lost (the clear script runs with its hint sent nowhere); the hint of the next clear,
    of b.test, names a.test's clear as the one before it. The member must sync and so clear
    a.test too: acking b.test's number after applying only its hint would claim a clear it
    never saw, and the 200 of b.test's clear would cover a.test's old entries."""
    node = await fleet.node(renew=0.5)
    purger = fleet.purger(poll_interval=1.0)
    await purger.clear_domain("b.test")  # waits out the grace of the test's new epoch
    assert await node.fill("a.test", "/x", b"v1")
    syncs = node.member.syncs
    client = fleet.client()
    lost = client.register_script(lua.CLEAR.source())
    args = lua.CLEAR.args(
        domain="a.test",
        fresh_epoch="unused",
        by="cp-test",
        log_cap=100,
        channel="{cdn}:nowhere",
        figures="0",
    )
    reply = await lost(keys=lua.CLEAR.keys_for(), args=args)
    await purger.clear_domain("b.test")
    assert node.member.syncs > syncs  # the hint did not continue the chain: it synced
    assert node.read("a.test", "/x") is None
    assert_true_everywhere([node], "a.test", int(reply[0]))


@pytest.mark.slow
async def test_a_hint_that_cannot_be_read_is_logged_and_the_member_goes_on(
    fleet: Fleet, caplog: pytest.LogCaptureFixture
) -> None:
    """Decision 0027: garbage on the hint channel, and a hint of a later version, are each
    logged and make the member sync; it goes on applying and acking the clears after them."""
    node = await fleet.node(lease=2.0, renew=0.9)
    purger = fleet.purger(lease=2.0)
    await purger.clear_domain("b.test")  # waits out the grace of the test's new epoch
    client = fleet.client()

    def said() -> list[str]:
        return [r.getMessage() for r in caplog.records if " syncs: " in r.getMessage()]

    with caplog.at_level(logging.INFO, logger="proxy.fleet"):
        epoch = node.member.applied.epoch
        for text in ("garbage", f"hint/2 {epoch} 1 2 a.test url 7"):
            assert await client.publish(CLEARS, text) == 1  # the member listens
        await until(lambda: len(said()) == 2)
    assert "not a hint: 1 parts, not 4 or 5: 'garbage'" in said()[0]
    assert "hint of version 2: this build reads version 1" in said()[1]
    assert await node.fill("a.test", "/x", b"v1")
    result = await purger.clear_domain("a.test")
    assert (result.acked, result.live) == (1, 1)
    assert_true_everywhere([node], "a.test", result.generation)


async def test_one_ack_hint_per_clear(fleet: Fleet) -> None:
    """The control plane hears one ack hint per clear, from the ack that completes it, not
    one per member: the number of the clear every member it waited for has applied."""
    nodes = [await fleet.node() for _ in range(3)]
    purger = fleet.purger()
    await purger.clear_domain("b.test")  # waits out the grace of the test's new epoch
    pubsub = fleet.client().pubsub()
    await pubsub.subscribe(ACKED)
    try:
        result = await purger.clear_domain("a.test")
        assert_true_everywhere(nodes, "a.test", result.generation)
        hints = []
        quiet_until = time.monotonic() + 0.3  # long enough for any later hint to arrive
        while (left := quiet_until - time.monotonic()) > 0:
            message = await pubsub.get_message(True, timeout=left)
            if message is not None:
                hints.append(message["data"])
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call]
    assert hints == [str(result.generation).encode()]


@pytest.mark.slow
async def test_the_purger_resubscribes_after_losing_its_ack_connection(fleet: Fleet) -> None:
    """Protection: the control plane's one ack subscription is made again after it breaks
    (else every later clear waits a poll interval for want of the hint)."""
    nodes = [await fleet.node() for _ in range(2)]
    purger = fleet.purger(poll_interval=1.0)
    await purger.clear_domain("b.test")  # waits out the grace; subscribes
    client = fleet.client()
    await client.client_kill_filter(_type="pubsub")

    async def subscribed() -> bool:
        acked = dict(await client.pubsub_numsub(ACKED))
        clears = dict(await client.pubsub_numsub(CLEARS))
        return bool(acked[ACKED.encode()] == 1 and clears[CLEARS.encode()] == 2)

    await until(subscribed, within=5.0, every=0.02)  # another process's state: no event
    await until(lambda: all(n.member.syncs >= 1 for n in nodes), every=0.01)
    started = time.monotonic()
    result = await purger.clear_domain("a.test")
    assert time.monotonic() - started < 0.5  # not a poll interval
    assert_true_everywhere(nodes, "a.test", result.generation)
