"""Purges of every kind through the fleet (decision 0026), against a real Valkey and Redis.

Each member has its own memory store. After ``FleetPurger.purge`` returns, every member
either has applied the purge (a hard purge: the covered entries are gone; a soft one: they
are stale, so the edge revalidates them) or can no longer serve from its cache; entries the
purge does not cover are still fresh hits on every member."""

from __future__ import annotations

import time

import pytest

from proxy.core.purge.purges import Purge, purge_request
from proxy.errors import FleetUnavailable, PurgeUnsupported
from proxy.fleet import scripts
from tests.fleet.conftest import Fleet, Node, response
from tests.polling import until

# target -> its tags; what each kind's purge below covers of them
PAGES = {"/assets/a.css": ("t-a",), "/assets/b.css": ("t-b",), "/index.html": ("t-index",)}
COVERING = {
    "url": (("/assets/a.css",), {"/assets/a.css"}),
    "prefix": (("/assets/",), {"/assets/a.css", "/assets/b.css"}),
    "tag": (("t-a", "t-index"), {"/assets/a.css", "/index.html"}),
    "all": ((), set(PAGES)),
}


async def fill_pages(node: Node, domain: str = "a.test", body: bytes = b"v1") -> None:
    for target, tags in PAGES.items():
        found = await node.store.lookup(domain, target)
        assert await node.store.put(found.key, response(body, tags))


def served(node: Node, domain: str, target: str) -> str:
    """What a read finds: "fresh" (a hit as stored), "stale" (kept, to be revalidated) or
    "gone" (a miss)."""
    entry = node.store.peek(domain, target)
    if entry is None:
        return "gone"
    return "fresh" if time.time() - entry.birth < entry.freshness_lifetime else "stale"


def assert_applied_everywhere(nodes: list[Node], number: int) -> None:
    """The 200's promise for a purge, member by member: applied (its number or a later one
    acked), or fenced."""
    for node in nodes:
        assert node.member.fenced or node.member.applied.seq >= number, node.member.name


@pytest.mark.parametrize("soft", [False, True], ids=["hard", "soft"])
@pytest.mark.parametrize("kind", ["url", "prefix", "tag", "all"])
async def test_each_kind_is_applied_by_every_member_before_it_returns(
    fleet: Fleet, kind: str, soft: bool
) -> None:
    """Covered entries are gone (hard) or stale (soft) on every member when purge returns;
    the others, and the other domain, are still fresh hits everywhere."""
    nodes = [await fleet.node() for _ in range(3)]
    for node in nodes:
        await fill_pages(node)
        await fill_pages(node, "b.test")
    items, covered = COVERING[kind]
    purge = purge_request(kind, items, soft=soft)
    result = await fleet.purger().purge("a.test", purge)

    assert (result.acked, result.live, result.reported) == (3, 3, 3)
    assert (result.kind, result.items, result.soft, result.dry_run) == (kind, items, soft, False)
    assert_applied_everywhere(nodes, result.number)
    for node in nodes:
        for target in PAGES:
            expected = ("stale" if soft else "gone") if target in covered else "fresh"
            assert served(node, "a.test", target) == expected, (node.member.name, target)
            assert served(node, "b.test", target) == "fresh"
    if kind == "url" or (kind == "all" and not soft):
        assert (result.entries, result.exact) == (3 * len(covered), True)  # summed, exact
    if kind == "all" and not soft:
        assert result.generation == result.number  # a hard all is a clear
        assert all(n.member.applied.generations["a.test"] == result.number for n in nodes)
    else:
        assert all(n.member.purges_applied == 1 for n in nodes)


async def test_members_without_hints_apply_purges_at_their_sync(fleet: Fleet) -> None:
    """Protection: the sync returns the records above the member's applied number. Members
    that take no hints learn of the purge only at a renewal; the purger waits for it."""
    nodes = [await fleet.node(hints=False) for _ in range(2)]
    for node in nodes:
        await fill_pages(node)
    result = await fleet.purger(hints=False).purge("a.test", purge_request("prefix", ["/assets/"]))
    assert (result.acked, result.live) == (2, 2)
    assert_applied_everywhere(nodes, result.number)
    for node in nodes:
        assert served(node, "a.test", "/assets/a.css") == "gone"
        assert served(node, "a.test", "/index.html") == "fresh"  # applied, not a clear


@pytest.mark.slow
async def test_a_member_cut_off_syncs_the_purges_it_missed(fleet: Fleet) -> None:
    """A member whose link to Valkey is cut misses the hints; the purge waits until its
    lease has run out (it is fenced meanwhile). Healed, it syncs, applies the purges in
    order, and serves what they do not cover from its cache again."""
    alive = await fleet.node()
    cut = await fleet.node(relayed=True)
    purger = fleet.purger()
    await purger.clear_domain("b.test")  # waits out the grace of the test's new epoch
    for node in (alive, cut):
        await fill_pages(node)
    assert cut.relay is not None
    cut.relay.drop()
    first = await purger.purge("a.test", purge_request("url", ["/assets/a.css"]))
    second = await purger.purge("a.test", purge_request("tag", ["t-b"], soft=True))
    assert cut.member.fenced and served(cut, "a.test", "/index.html") == "gone"  # fenced
    cut.relay.heal()
    await until(lambda: not cut.member.fenced, every=0.01)
    assert cut.member.applied.seq >= second.number > first.number
    for node in (alive, cut):
        assert served(node, "a.test", "/assets/a.css") == "gone"
        assert served(node, "a.test", "/assets/b.css") == "stale"
        assert served(node, "a.test", "/index.html") == "fresh"
    assert cut.member.purges_applied == 2


@pytest.mark.slow
async def test_a_member_that_needs_a_dropped_record_clears_the_domain(
    fleet: Fleet, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Protection: the floor. Valkey keeps 2 records here; a member cut off during 3 purges
    of a.test cannot read the first, so it clears a.test (over-purging is safe), and keeps
    b.test, whose records it did not miss."""
    monkeypatch.setattr(scripts, "KEPT_RECORDS", 2)
    cut = await fleet.node(relayed=True)
    purger = fleet.purger()
    await purger.clear_domain("b.test")  # waits out the grace of the test's new epoch
    await fill_pages(cut)
    await fill_pages(cut, "b.test")
    assert cut.relay is not None
    cut.relay.drop()
    for target in ("/assets/a.css", "/assets/b.css", "/nothing"):
        await purger.purge("a.test", purge_request("url", [target]))
    floors = await fleet.client().hgetall("{cdn}:floors")  # type: ignore[misc]
    assert list(floors) == [b"a.test"]
    cut.relay.heal()
    await until(lambda: not cut.member.fenced, every=0.01)
    assert served(cut, "a.test", "/index.html") == "gone"  # the domain was cleared
    assert served(cut, "b.test", "/index.html") == "fresh"
    assert await fleet.client().zcard("{cdn}:purges") == 2


async def test_a_dry_run_counts_every_members_cache_and_changes_nothing(fleet: Fleet) -> None:
    """Each member has its own cache: the receipt sums what each would purge."""
    nodes = [await fleet.node() for _ in range(3)]
    purger = fleet.purger()
    await purger.clear_domain("b.test")  # waits out the grace of the test's new epoch
    await fill_pages(nodes[0])
    await nodes[1].fill("a.test", "/assets/a.css", b"v1")
    seq = await fleet.client().get("{cdn}:seq")
    result = await purger.purge("a.test", purge_request("prefix", ["/assets/"], dry_run=True))
    assert result.dry_run and result.answered_by is None
    assert (result.entries, result.exact, result.live, result.reported) == (3, True, 3, 3)
    assert sorted(result.sample) == ["/assets/a.css", "/assets/b.css"]
    assert result.acked is None  # not a fleet operation
    assert await fleet.client().get("{cdn}:seq") == seq  # no number taken
    assert all(served(nodes[0], "a.test", target) == "fresh" for target in PAGES)
    assert served(nodes[1], "a.test", "/assets/a.css") == "fresh"


@pytest.mark.slow
async def test_a_dry_run_stops_waiting_for_a_member_whose_lease_ran_out(fleet: Fleet) -> None:
    """A member cut off without a word (its packets go nowhere) cannot answer; once its
    lease has run out it serves nothing from its cache, and the dry run answers without it,
    long before ``clear_timeout``."""
    answering = await fleet.node()
    silent = await fleet.node(relayed=True)
    purger = fleet.purger(clear_timeout=30.0)
    await purger.clear_domain("b.test")  # waits out the grace: both are live, not fenced
    for node in (answering, silent):
        await fill_pages(node)
    assert silent.relay is not None
    silent.relay.blackhole()
    started = time.monotonic()
    result = await purger.purge("a.test", purge_request("url", ["/index.html"], dry_run=True))
    assert time.monotonic() - started < 10.0  # the lease is 0.6 s
    assert (result.entries, result.exact, result.live, result.reported) == (1, True, 1, 1)


@pytest.mark.slow
async def test_a_dry_run_asks_a_member_whose_info_cannot_be_read(fleet: Fleet) -> None:
    """Decision 0027: a live member whose info is not JSON (registered by the real sync
    script) is asked too, as one whose fencing is unknown; it does not answer, and the dry
    run answers with the others' count once ``clear_timeout`` is over (before: a 500)."""
    node = await fleet.node()
    purger = fleet.purger(clear_timeout=1.0)
    await purger.clear_domain("b.test")  # waits out the grace of the test's new epoch
    await fill_pages(node)
    odd = scripts.FleetScripts(fleet.client(), timeout=1.0)
    await odd.sync(member="odd", lease_ms=60_000, epoch=None, applied=0, info="{", domains=[])
    result = await purger.purge("a.test", purge_request("url", ["/index.html"], dry_run=True))
    assert (result.entries, result.exact, result.live, result.reported) == (1, False, 2, 1)


async def test_a_dry_run_with_no_member_is_unavailable(fleet: Fleet) -> None:
    with pytest.raises(FleetUnavailable):
        await fleet.purger().purge("a.test", Purge("all", dry_run=True))


async def test_the_log_and_the_hint_name_the_kind(fleet: Fleet) -> None:
    """The hint stays small whatever the items: ``epoch previous number domain kind``. The
    purge carries 2 MB of targets: its calls get more than the fixture's 0.2 s each (on a
    busy machine one call took longer than that, connection included)."""
    await fleet.node(timeout=2.0)
    pubsub = fleet.client().pubsub()
    await pubsub.subscribe("{cdn}:clears")
    try:
        long_targets = [f"/{i:03d}/" + "x" * 8000 for i in range(256)]
        purger = fleet.purger(timeout=2.0)
        result = await purger.purge("a.test", purge_request("url", long_targets))
        hint = None
        while hint is None:
            hint = await pubsub.get_message(True, timeout=1.0)
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call]
    parts = hint["data"].decode().split(" ")
    assert parts[2:] == [str(result.number), "a.test", "url"]
    [(_, fields)] = await fleet.client().xrange("{cdn}:log")
    assert (fields[b"kind"], fields[b"soft"], fields[b"by"]) == (b"url", b"0", b"cp-test")


async def test_a_purge_is_refused_while_a_live_member_cannot_apply_purge_records(
    fleet: Fleet,
) -> None:
    """A member of a build before decision 0026 syncs with info that does not say it applies
    purge records: it would ack a purge unapplied. Its lease is registered here by the real
    sync script with such info; the purge is refused and nothing is recorded."""
    node = await fleet.node()
    await fill_pages(node)
    old = scripts.FleetScripts(fleet.client(), timeout=1.0)
    reply = await old.sync(
        member="old-build",
        lease_ms=60_000,
        epoch=None,
        applied=0,
        info='{"node":"old","worker":0,"fenced":false,"applied":0}',
        domains=["a.test"],
    )
    assert reply is not None
    log_before = await fleet.client().xlen("{cdn}:log")
    with pytest.raises(PurgeUnsupported) as refused:
        await fleet.purger().purge("a.test", purge_request("prefix", ["/assets/"], soft=True))
    assert refused.value.count == 1
    assert await fleet.client().xlen("{cdn}:log") == log_before  # nothing recorded
    assert await fleet.client().zcard("{cdn}:purges") == 0
    assert all(served(node, "a.test", target) == "fresh" for target in PAGES)
