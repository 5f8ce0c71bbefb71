"""Fencing (0014 "Fencing"): a member cut off from Valkey stops serving from its cache by
its lease deadline, the clear answers only after that, and the member serves from cache
again only after a sync, having applied every clear it missed. The member reaches Valkey
through a relay that drops (closes) or black-holes (accepts, never forwards) its traffic."""

from __future__ import annotations

import time

import pytest

from benchmarks.fleet_relay import BLACKHOLE, DROP
from proxy.fleet.store import FENCED
from tests.fleet.conftest import Fleet
from tests.polling import until


@pytest.mark.slow
@pytest.mark.parametrize("fault", [DROP, BLACKHOLE])
async def test_a_cut_off_member_is_fenced_before_the_clear_answers(
    fleet: Fleet, fault: str
) -> None:
    """Protection: the fence (peek, lookup and put check the lease deadline per request).
    Without it, the cut-off member would still serve v1 after the 200."""
    purger = fleet.purger()
    cut = await fleet.node(relayed=True)
    other = await fleet.node()
    await purger.clear_domain("b.test")  # waits out the grace of the test's epoch
    for node in (cut, other):
        assert await node.fill("a.test", "/x", b"v1")
        assert await node.fill("b.test", "/x", b"v1")
    assert cut.relay is not None
    cut.relay.drop() if fault == DROP else cut.relay.blackhole()

    result = await purger.clear_domain("a.test")

    assert time.monotonic() >= cut.member.deadline  # answered only once it was fenced
    assert (result.acked, result.live) == (1, 1)
    assert cut.read("a.test", "/x") is None  # fenced: serves nothing from its cache...
    assert cut.read("b.test", "/x") is None  # ...not even the domain that was not cleared
    lookup = await cut.store.lookup("b.test", "/x")
    assert (lookup.variants, lookup.bypass) == ((), FENCED)
    assert not await cut.fill("b.test", "/y", b"v1")  # and stores nothing
    assert cut.member.renew_failures > 0
    assert other.read("a.test", "/x") is None and other.read("b.test", "/x") == b"v1"


@pytest.mark.slow
@pytest.mark.parametrize("fault", [DROP, BLACKHOLE])
async def test_a_healed_member_applies_the_clears_it_missed(fleet: Fleet, fault: str) -> None:
    """Protection: a fenced member serves from cache again only after a sync, which reads
    every generation. After the partition heals, the domain cleared while it was cut off is
    gone, and the domain that was not cleared is served again."""
    purger = fleet.purger()
    cut = await fleet.node(relayed=True)
    assert cut.relay is not None
    await purger.clear_domain("b.test")
    assert await cut.fill("a.test", "/x", b"v1")
    assert await cut.fill("b.test", "/x", b"v1")
    cut.relay.drop() if fault == DROP else cut.relay.blackhole()
    result = await purger.clear_domain("a.test")
    assert cut.member.fenced
    synced_before = cut.member.syncs

    cut.relay.heal()
    await until(lambda: cut.member.syncs > synced_before and not cut.member.fenced, every=0.01)

    assert cut.member.applied.generations["a.test"] == result.generation
    assert cut.read("a.test", "/x") is None  # the clear it missed is applied
    assert cut.read("b.test", "/x") == b"v1"  # the rest of its cache is trusted again
    assert await cut.fill("a.test", "/x", b"v2")
    assert cut.read("a.test", "/x") == b"v2"


async def test_a_member_that_never_synced_serves_nothing(fleet: Fleet) -> None:
    """A process whose first sync failed starts fenced (deadline -inf)."""
    node = await fleet.node(relayed=True, start=False)
    assert node.relay is not None
    node.relay.drop()
    await node.member.start()
    assert node.member.fenced and node.member.renew_failures == 1
    assert not await node.fill("a.test", "/x", b"v1")
    node.relay.heal()
    await until(lambda: not node.member.fenced, every=0.01)
    assert await node.fill("a.test", "/x", b"v1")
    assert node.read("a.test", "/x") == b"v1"


@pytest.mark.slow
async def test_a_stopped_member_is_fenced_on_its_first_request(fleet: Fleet) -> None:
    """Protection: the fence is a clock comparison per request, not a timer. A member whose
    loop does not run (SIGSTOP; here its tasks are stopped) is fenced on the first request
    after its deadline, with nothing having run in between."""
    node = await fleet.node()
    assert await node.fill("a.test", "/x", b"v1")
    await node.member.close()  # nothing of the member runs any more
    assert node.read("a.test", "/x") == b"v1"
    await until(lambda: time.monotonic() >= node.member.deadline, every=0.01)
    assert node.read("a.test", "/x") is None
