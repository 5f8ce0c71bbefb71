"""The memory store's purge state within cache.purge_state_max_bytes (decision 0037): a flood
of purges of one domain folds that domain's state only, and never so that a purged response
could be served or stored again."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.cache.entry import StoredResponse
from proxy.core.purge.purges import purge_request
from proxy.core.purge.retention import ban_bytes, purge_bytes, target
from proxy.store.memory import MemoryStore

NOW = 1_700_000_000.0
FLOOD = "a.test"
OTHER = "b.test"
MiB = 1024 * 1024
BUDGET = 256 * 1024
LONG = "x" * 4000


def entry(body: bytes = b"body") -> StoredResponse:
    return StoredResponse(
        status=200,
        reason="OK",
        headers=(("Cache-Control", "max-age=60"),),
        body=body,
        birth=NOW,
        freshness_lifetime=60.0,
    )


def make_store() -> MemoryStore:
    return MemoryStore(max_bytes=MiB, clock=lambda: NOW, purge_max_bytes=BUDGET)


async def filled(store: MemoryStore, domain: str, target: str, body: bytes = b"body") -> None:
    assert await store.put((await store.lookup(domain, target)).key, entry(body))


async def served(store: MemoryStore, domain: str, target: str) -> list[bytes]:
    return [v.body for v in (await store.lookup(domain, target)).variants]


def counted(store: MemoryStore) -> int:
    """The purge state's bytes, counted afresh from what each domain holds."""
    total = 0
    for state in store._purges.values():
        total += sum(purge_bytes(purge) for _, purge in state.recent)
        total += sum(map(ban_bytes, state.bans.by_prefix)) + sum(map(ban_bytes, state.tags))
    return total


async def flood_urls(store: MemoryStore, rounds: int, *, start: int = 0) -> None:
    for n in range(start, start + rounds):
        paths = [f"/{n}/{i}/{LONG}" for i in range(16)]
        await store.purge(FLOOD, purge_request("url", paths))
        assert store.purge_budget.held <= BUDGET
        assert store.purge_budget.held == counted(store)


async def test_a_flood_of_url_purges_stays_within_the_budget_and_folds_only_its_domain() -> None:
    store = make_store()
    await store.purge(OTHER, purge_request("url", ["/b-purged"]))
    other_before = store._purges[OTHER].held
    await flood_urls(store, 40)  # 40 x 64 KB: 10 times the budget
    assert store.purge_budget.forgotten > 0
    assert store.purge_budget.cleared == 0
    assert store._purges[OTHER].held == other_before
    assert len(store._purges[OTHER].recent) == 1
    stats = await store.stats()
    assert stats.purge_state_bytes == store.purge_budget.held <= BUDGET
    assert stats.purge_state_max_bytes == BUDGET
    assert stats.purges_forgotten == store.purge_budget.forgotten


async def test_the_other_domain_still_tells_fills_in_flight_from_purged_ones() -> None:
    store = make_store()
    before = (await store.lookup(OTHER, "/kept")).key
    purged = (await store.lookup(OTHER, "/b-purged")).key
    await store.purge(OTHER, purge_request("url", ["/b-purged"]))
    await flood_urls(store, 40)
    assert await store.put(before, entry(b"kept"))  # its purge is remembered: not covered
    assert not await store.put(purged, entry(b"purged"))


async def test_a_fill_from_before_a_forgotten_purge_is_refused() -> None:
    store = make_store()
    key = (await store.lookup(FLOOD, "/page")).key
    await flood_urls(store, 40)
    assert store.purge_budget.forgotten > 0
    assert not await store.put(key, entry(b"from before"))  # it may have been covered
    await filled(store, FLOOD, "/page", b"after")
    assert await served(store, FLOOD, "/page") == [b"after"]


async def test_bans_of_a_domain_holding_nothing_are_retired_not_cleared() -> None:
    store = make_store()
    await filled(store, OTHER, "/b", b"b")
    for n in range(30):
        await store.purge(FLOOD, purge_request("prefix", [f"/{n}/{i}/{LONG}" for i in range(4)]))
        assert store.purge_budget.held <= BUDGET
    assert store.purge_budget.retired > 0
    assert store.purge_budget.cleared == 0
    assert store.purge_budget.held == counted(store)
    assert await served(store, OTHER, "/b") == [b"b"]


async def test_outstanding_bans_over_the_share_fold_into_a_clear_of_their_domain() -> None:
    store = make_store()
    await filled(store, FLOOD, "/0/kept", b"a")
    await filled(store, OTHER, "/b", b"b")
    in_flight = (await store.lookup(FLOOD, "/page")).key
    await store.purge(FLOOD, purge_request("prefix", ["/0/"]))  # covers /0/kept
    for n in range(1, 30):  # no walk runs between them: the bans stay outstanding
        await store.purge(FLOOD, purge_request("prefix", [f"/{n}/{i}/{LONG}" for i in range(4)]))
        assert store.purge_budget.held <= BUDGET
        assert store.purge_budget.held == counted(store)
    assert store.purge_budget.cleared >= 1
    assert await served(store, FLOOD, "/0/kept") == []  # the clear dropped more, never less
    assert not await store.put(in_flight, entry(b"from before"))
    assert await served(store, OTHER, "/b") == [b"b"]
    assert (await store.domain_stats(OTHER)).entries == 1


async def test_a_ban_covering_a_stored_entry_outlives_forgetting() -> None:
    store = make_store()
    await filled(store, FLOOD, "/static/app.js", b"old")
    await store.purge(FLOOD, purge_request("prefix", ["/static/"]))
    await flood_urls(store, 40)  # forgets remembered purges, the ban's among them
    assert store.purge_budget.forgotten > 0
    assert await served(store, FLOOD, "/static/app.js") == []


async def test_the_walker_retiring_bans_gives_their_bytes_back() -> None:
    store = make_store()
    await filled(store, FLOOD, "/a", b"a")
    await store.purge(FLOOD, purge_request("prefix", ["/a", "/b"]))
    await store.purge(FLOOD, purge_request("tag", ["t1"]))
    assert store._purges[FLOOD].outstanding == ban_bytes("/a") + ban_bytes("/b") + ban_bytes("t1")
    while store.pending_settle:
        store.settle(100)
    assert store._purges[FLOOD].outstanding == 0
    assert store.purge_budget.held == counted(store) > 0  # the remembered purges remain
    await store.clear_domain(FLOOD)
    assert store.purge_budget.held == counted(store) == 0


async def test_past_the_budget_the_state_folds_to_its_target() -> None:
    store = make_store()
    await flood_urls(store, 3)
    while store.purge_budget.held <= BUDGET - 70_000:
        await flood_urls(store, 1, start=1000 + len(store._purges[FLOOD].recent))
    forgotten = store.purge_budget.forgotten
    await flood_urls(store, 3, start=5000)
    assert store.purge_budget.forgotten > forgotten
    assert store.purge_budget.held <= target(BUDGET) + 70_000


# -- the safety property, over random histories ------------------------------------------------

TARGETS = ("/a", "/a/b", "/c")
PREFIXES = ("/a", "/a/", "/c", "/", "/b", "/d", "/e")  # some cover nothing, and still cost

_domain = st.sampled_from((FLOOD, FLOOD, OTHER))
_fill = st.tuples(st.just("fill"), _domain, st.sampled_from(TARGETS))
_bans = st.tuples(
    st.just("prefix"),
    _domain,
    st.lists(st.sampled_from(PREFIXES), min_size=1, max_size=6),
    st.booleans(),
)
_read = st.tuples(st.just("read"), _domain, st.sampled_from(TARGETS))
# Fills, bans and reads weigh more: a fold matters where entries and bans meet.
_op = st.one_of(
    st.tuples(st.just("begin"), _domain, st.sampled_from(TARGETS)),
    st.tuples(st.just("finish"), st.integers(0, 20)),
    _fill,
    _fill,
    _fill,
    st.tuples(
        st.just("url"), _domain, st.lists(st.sampled_from(TARGETS), min_size=1), st.booleans()
    ),
    _bans,
    _bans,
    st.tuples(st.just("clear"), _domain),
    st.tuples(st.just("settle"), st.integers(1, 8)),
    _read,
    _read,
)


@dataclass
class Model:
    """When each fill began, and when each URL was last purged hard (or its domain cleared):
    a response whose fetch began before that must never be served again."""

    began: dict[bytes, int] = field(default_factory=dict)
    killed: dict[tuple[str, str], int] = field(default_factory=dict)

    def kill(self, domain: str, targets: Iterable[str], at: int) -> None:
        for killed in targets:
            self.killed[(domain, killed)] = at

    def dead(self, domain: str, url: str, body: bytes) -> bool:
        return self.began[body] < self.killed.get((domain, url), -1)


async def replay(ops: list[tuple[Any, ...]], budget: int) -> None:
    bounded = MemoryStore(max_bytes=MiB, clock=lambda: NOW, purge_max_bytes=budget)
    unbounded = MemoryStore(max_bytes=MiB, clock=lambda: NOW, purge_max_bytes=1 << 40)
    model = Model()
    pending: list[tuple[str, str, bytes, Any, Any]] = []
    for at, op in enumerate(ops):
        if op[0] in ("begin", "fill"):
            body = str(at).encode()
            model.began[body] = at
            keys = [(await s.lookup(op[1], op[2])).key for s in (bounded, unbounded)]
            pending.append((op[1], op[2], body, *keys))
        if op[0] in ("finish", "fill") and pending:
            _, _, body, key_b, key_u = pending.pop(
                op[1] % len(pending) if op[0] == "finish" else -1
            )
            stored_b = await bounded.put(key_b, entry(body))
            stored_u = await unbounded.put(key_u, entry(body))
            assert stored_u or not stored_b  # the bounded store refuses at least as much
        elif op[0] in ("url", "prefix"):
            purge = purge_request(op[0], op[2], soft=op[3])
            for store in (bounded, unbounded):
                await store.purge(op[1], purge)
            if not op[3]:
                covered = [t for t in TARGETS if t in op[2] or any(t.startswith(p) for p in op[2])]
                model.kill(op[1], covered if op[0] == "prefix" else op[2], at)
            assert bounded.purge_budget.held <= budget
            assert bounded.purge_budget.held == counted(bounded)
        elif op[0] == "clear":
            for store in (bounded, unbounded):
                await store.clear_domain(op[1])
            model.kill(op[1], TARGETS, at)
        elif op[0] == "settle":
            for store in (bounded, unbounded):
                store.settle(op[1])
            assert bounded.purge_budget.held == counted(bounded)
        elif op[0] == "read":
            for store in (bounded, unbounded):
                for body in await served(store, op[1], op[2]):
                    assert not model.dead(op[1], op[2], body), (op, body)


@pytest.mark.slow
@settings(max_examples=1000, deadline=None)
@given(st.lists(_op, min_size=10, max_size=60), st.sampled_from([400, 700, 1500]))
def test_no_history_serves_what_a_hard_purge_covered(
    ops: list[tuple[Any, ...]], budget: int
) -> None:
    """Whatever folds the budget forces (forgetting, retiring, clearing), a response stored
    before a hard purge that covers it, or whose fetch began before that purge, is never
    served again; and the bounded store never stores a fill the unbounded one refuses."""
    asyncio.run(replay(ops, budget))  # budgets of a few purges: every fold happens often
