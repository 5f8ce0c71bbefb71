"""The memory store's purges by URL, prefix, tag and all, hard and soft, and dry runs
(decision 0024): what each covers, that nothing else changes, and that the lazy ones are
checked once per entry and retired."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from proxy.core.cache.entry import StoredResponse
from proxy.core.cache.keys import cache_target
from proxy.core.purge.purges import Purge, purge_request
from proxy.store.memory import MemoryStore

NOW = 1_700_000_000.0
PURGED_AT = NOW + 10.0
DOMAIN = "example.com"
OTHER = "other.test"
MiB = 1024 * 1024


def entry(
    body: bytes = b"body",
    *,
    tags: tuple[str, ...] = (),
    vary: tuple[str, ...] = (),
    vary_values: tuple[str | None, ...] = (),
    swr: float = 0.0,
) -> StoredResponse:
    return StoredResponse(
        status=200,
        reason="OK",
        headers=(("Cache-Control", "max-age=60"),),
        body=body,
        birth=NOW,
        freshness_lifetime=60.0,
        tags=tags,
        vary=vary,
        vary_values=vary_values,
        stale_while_revalidate=swr,
    )


async def filled(store: MemoryStore, domain: str, target: str, *entries: StoredResponse) -> None:
    """Store the entries under the URL, as fills after a lookup do."""
    for stored in entries:
        assert await store.put((await store.lookup(domain, target)).key, stored)


async def make_store() -> MemoryStore:
    """A store with /assets/a.css, /assets/b.js (tag "assets"), /page (tags "page" and
    "p-1", two variants) and /other, in example.com, and /assets/a.css in other.test."""
    store = MemoryStore(max_bytes=MiB, clock=lambda: PURGED_AT)
    await filled(store, DOMAIN, "/assets/a.css", entry(b"a"))
    await filled(store, DOMAIN, "/assets/b.js", entry(b"b", tags=("assets",)))
    gz = entry(b"gz", tags=("page", "p-1"), vary=("accept-encoding",), vary_values=("gzip",))
    br = entry(b"br", tags=("page", "p-1"), vary=("accept-encoding",), vary_values=("br",))
    await filled(store, DOMAIN, "/page", gz, br)
    await filled(store, DOMAIN, "/other", entry(b"o"))
    await filled(store, OTHER, "/assets/a.css", entry(b"x"))
    return store


def fresh(store: MemoryStore, domain: str, target: str) -> bool | None:
    """Whether the URL's variants are all fresh at PURGED_AT (None: nothing stored)."""
    found = store.items()
    variants = [
        v
        for (d, _, t), held in found
        if (d, t) == (domain, target)
        for v in ([held] if isinstance(held, StoredResponse) else held)
    ]
    if not variants:
        return None
    return all(v.is_fresh(PURGED_AT) for v in variants)


async def served(store: MemoryStore, domain: str, target: str) -> list[bytes]:
    """The bodies a lookup finds, fresh at PURGED_AT ("stale:" before the stale ones)."""
    found = await store.lookup(domain, target)
    return [v.body if v.is_fresh(PURGED_AT) else b"stale:" + v.body for v in found.variants]


EVERYTHING = {
    (DOMAIN, "/assets/a.css"): [b"a"],
    (DOMAIN, "/assets/b.js"): [b"b"],
    (DOMAIN, "/page"): [b"br", b"gz"],
    (DOMAIN, "/other"): [b"o"],
    (OTHER, "/assets/a.css"): [b"x"],
}


async def everything(store: MemoryStore) -> dict[tuple[str, str], list[bytes]]:
    return {url: await served(store, *url) for url in EVERYTHING}


# Each kind, and what it covers of make_store's URLs.
KINDS: list[tuple[Purge, set[tuple[str, str]]]] = [
    (purge_request("url", ["/page", "/missing"]), {(DOMAIN, "/page")}),
    (
        purge_request("prefix", ["/assets/", "/nothing/"]),
        {(DOMAIN, "/assets/a.css"), (DOMAIN, "/assets/b.js")},
    ),
    (purge_request("tag", ["p-1", "assets"]), {(DOMAIN, "/page"), (DOMAIN, "/assets/b.js")}),
    (purge_request("all"), {url for url in EVERYTHING if url[0] == DOMAIN}),
]
IDS = ["url", "prefix", "tag", "all"]


@pytest.mark.parametrize(("purge", "covered"), KINDS, ids=IDS)
async def test_a_hard_purge_drops_what_it_covers_and_nothing_else(
    purge: Purge, covered: set[tuple[str, str]]
) -> None:
    store = await make_store()
    result = await store.purge(DOMAIN, purge)
    after = await everything(store)
    for url, bodies in EVERYTHING.items():
        assert after[url] == ([] if url in covered else bodies), url
        if url[0] == DOMAIN and url not in covered and len(bodies) == 1:
            peeked = store.peek(*url)
            assert peeked is not None and peeked.body == bodies[0], url
        if url in covered:
            assert store.peek(*url) is None
    assert (result.kind, result.items, result.soft, result.dry_run) == (
        purge.kind,
        purge.items,
        False,
        False,
    )
    stats = await store.stats()
    kept = sum(len(bodies) for url, bodies in EVERYTHING.items() if url not in covered)
    if purge.kind == "all":  # the old generation's keys wait for the reclaimer, variants and all
        assert (stats.entries, stats.pending_reclaim) == (kept + 5, len(covered))
    else:  # dropped at once (url), or when the lookups above met them (prefix, tag)
        assert (stats.entries, stats.pending_reclaim) == (kept, 0)
    if purge.kind in ("url", "all"):
        assert result.exact
        assert result.entries == sum(len(EVERYTHING[url]) for url in covered)


@pytest.mark.parametrize(("purge", "covered"), KINDS, ids=IDS)
async def test_a_soft_purge_makes_what_it_covers_stale_and_nothing_else(
    purge: Purge, covered: set[tuple[str, str]]
) -> None:
    """RFC 9111 §4.2: a soft purge ends the covered entries' freshness at its time: they
    stay (to be revalidated), stale; the rest stays fresh."""
    store = await make_store()
    soft = Purge(purge.kind, purge.items, soft=True)
    result = await store.purge(DOMAIN, soft)
    assert result.soft
    after = await everything(store)
    for url, bodies in EVERYTHING.items():
        expected = [b"stale:" + b for b in bodies] if url in covered else bodies
        assert after[url] == expected, url
        if len(bodies) == 1:
            peeked = store.peek(*url)
            assert peeked is not None  # still there, for revalidation
            assert peeked.is_fresh(PURGED_AT) is (url not in covered), url
    assert result.generation == 0  # soft never moves the generation


@pytest.mark.parametrize(("purge", "covered"), KINDS, ids=IDS)
async def test_a_dry_run_counts_what_would_be_covered_and_changes_nothing(
    purge: Purge, covered: set[tuple[str, str]]
) -> None:
    store = await make_store()
    before_items = store.items()
    before_stats = await store.stats()
    dry = Purge(purge.kind, purge.items, dry_run=True)
    result = await store.purge(DOMAIN, dry)
    assert store.items() == before_items  # same entries, same order
    assert await store.stats() == before_stats
    assert await everything(store) == EVERYTHING
    expected = [v for (d, _, t), held in before_items if (d, t) in covered for v in _all(held)]
    assert result.exact and result.dry_run
    assert result.entries == len(expected)
    assert result.bytes == sum(v.size for v in expected)
    assert set(result.sample) == {t for _, t in covered}
    # ... and the real purge then covers what the dry run said.
    real = await store.purge(DOMAIN, purge)
    if real.exact:
        assert (real.entries, real.bytes) == (result.entries, result.bytes)


def _all(held: StoredResponse | list[StoredResponse]) -> list[StoredResponse]:
    return [held] if isinstance(held, StoredResponse) else held


async def test_a_dry_run_sample_names_at_most_20_keys() -> None:
    store = MemoryStore(max_bytes=MiB)
    for i in range(50):
        await filled(store, DOMAIN, f"/p/{i}", entry())
    result = await store.purge(DOMAIN, purge_request("prefix", ["/p/"], dry_run=True))
    assert result.entries == 50
    assert len(result.sample) == 20


async def test_entries_stored_after_a_lazy_purge_are_served() -> None:
    store = await make_store()
    await store.purge(DOMAIN, purge_request("prefix", ["/assets/"]))
    await store.purge(DOMAIN, purge_request("tag", ["page"]))
    await filled(store, DOMAIN, "/assets/a.css", entry(b"new"))
    await filled(store, DOMAIN, "/page", entry(b"new page", tags=("page",)))
    assert await served(store, DOMAIN, "/assets/a.css") == [b"new"]
    assert await served(store, DOMAIN, "/page") == [b"new page"]


@pytest.mark.parametrize(
    ("purge", "target", "tags"),
    [
        (purge_request("url", ["/x"]), "/x", ()),
        (purge_request("prefix", ["/x"]), "/x/1", ()),
        (purge_request("tag", ["t"]), "/y", ("t",)),
        (purge_request("all", soft=True), "/y", ()),
        (purge_request("url", ["/x"], soft=True), "/x", ()),
    ],
)
async def test_a_fill_that_looked_up_before_a_purge_covering_it_is_not_stored(
    purge: Purge, target: str, tags: tuple[str, ...]
) -> None:
    """The key carries the domain's purge number at the lookup: a response fetched before a
    purge that covers it is refused, one it does not cover is stored (as a clear refuses
    every fill that looked up before it, decision 0003)."""
    store = MemoryStore(max_bytes=MiB)
    covered_key = (await store.lookup(DOMAIN, target)).key
    other_key = (await store.lookup(DOMAIN, "/elsewhere")).key
    await store.purge(DOMAIN, purge)
    assert (await store.lookup(DOMAIN, target)).key != covered_key  # no collapsing across it
    assert await store.put(covered_key, entry(tags=tags)) is False
    assert await store.put(other_key, entry()) is (purge.kind != "all")
    assert await store.put((await store.lookup(DOMAIN, target)).key, entry(tags=tags)) is True


async def test_a_fill_from_before_a_clear_is_refused_whatever_came_after() -> None:
    store = MemoryStore(max_bytes=MiB)
    await store.purge(DOMAIN, purge_request("tag", ["t"]))
    old = (await store.lookup(DOMAIN, "/a")).key
    await store.clear_domain(DOMAIN)
    await store.purge(DOMAIN, purge_request("tag", ["u"]))
    assert await store.put(old, entry()) is False
    new = (await store.lookup(DOMAIN, "/a")).key
    assert new[1] > old[1]  # numbers only grow
    assert await store.put(new, entry()) is True


async def test_a_lazily_purged_entry_is_checked_once() -> None:
    store = await make_store()
    await store.purge(DOMAIN, purge_request("prefix", ["/nothing/"]))
    state = store._purges[DOMAIN]
    held = store.held((DOMAIN, 0, "/other"))
    assert isinstance(held, StoredResponse) and held.mark < state.top  # stored before
    assert store.peek(DOMAIN, "/other") is held
    assert held.mark == state.number  # checked, not covered, and marked: not checked again


async def test_the_walker_retires_bans_and_peek_takes_the_fast_path_again() -> None:
    """Bans are retired once every entry stored before them has been checked, and the
    domain's hits then pay nothing for them."""
    store = await make_store()
    for i in range(100):
        await store.purge(DOMAIN, purge_request("prefix", [f"/nothing/{i}"]))
    await store.purge(DOMAIN, purge_request("prefix", ["/assets/"]))
    await store.purge(DOMAIN, purge_request("tag", ["page"]))
    assert store.pending_settle
    assert DOMAIN not in store._prefixes
    stats = await store.stats()
    while store.pending_settle:
        store.settle(2)
    state = store._purges[DOMAIN]
    assert (len(state.bans), state.tags, state.top) == (0, {}, 0)
    # The covered entries were dropped by the walk, and counted out of the store.
    after = await store.stats()
    assert after.entries == stats.entries - 4
    assert after.bytes == sum(v.size for _, held in store.items() for v in _all(held))
    assert await everything(store) == {
        **EVERYTHING,
        (DOMAIN, "/assets/a.css"): [],
        (DOMAIN, "/assets/b.js"): [],
        (DOMAIN, "/page"): [],
    }
    assert store.peek(DOMAIN, "/other") is not None
    assert DOMAIN in store._prefixes  # clean again: the unchecked fast path


async def test_the_walker_restarts_after_its_bucket_is_compacted() -> None:
    store = MemoryStore(max_bytes=MiB)
    for i in range(600):
        await filled(store, DOMAIN, f"/k/{i}", entry())
    await store.purge(DOMAIN, purge_request("prefix", ["/k/1"]))
    store.settle(100)
    for i in range(600):  # invalidated and stored again: the bucket's list compacts
        await store.invalidate(DOMAIN, f"/k/{i}")
        await filled(store, DOMAIN, f"/k/{i}", entry())
    while store.pending_settle:
        store.settle(50)
    assert store._purges[DOMAIN].top == 0
    stats = await store.stats()
    assert stats.bytes == sum(v.size for _, held in store.items() for v in _all(held))


async def test_memory_is_accounted_through_soft_and_hard_purges() -> None:
    store = await make_store()
    for purge in [
        purge_request("url", ["/other"], soft=True),
        purge_request("tag", ["p-1"], soft=True),
        purge_request("prefix", ["/assets/a"]),
        purge_request("all", soft=True),
    ]:
        await store.purge(DOMAIN, purge)
    for url in EVERYTHING:
        await store.lookup(*url)
    while store.pending_settle:
        store.settle(1)
    stats = await store.stats()
    assert stats.entries == sum(len(_all(held)) for _, held in store.items())
    assert stats.bytes == sum(v.size for _, held in store.items() for v in _all(held))


async def test_a_hard_purge_of_all_is_the_clear() -> None:
    """``all`` without soft is clear_domain: the generation moves, as POST /clear-cache."""
    store = await make_store()
    result = await store.purge(DOMAIN, purge_request("all"))
    assert result.generation == 1
    assert (await store.lookup(DOMAIN, "/other")).key[1] == 1
    assert store.pending_reclaim == 4  # keys; /page holds two variants


@pytest.mark.parametrize("make", [lambda: purge_request("prefix", ["/"])])
async def test_stale_while_revalidate_counts_from_a_soft_purge(
    make: Callable[[], Purge],
) -> None:
    store = MemoryStore(max_bytes=MiB, clock=lambda: PURGED_AT)
    await filled(store, DOMAIN, "/a", entry(swr=30.0))
    await store.purge(DOMAIN, Purge(make().kind, make().items, soft=True))
    found = await store.lookup(DOMAIN, "/a")
    (stale,) = found.variants
    assert stale.expires_at == PURGED_AT
    assert stale.stale_while_revalidate == 30.0


@pytest.mark.parametrize(
    ("purge", "gone"),
    [
        (purge_request("url", ["/s/a"]), {"/s/a"}),
        (purge_request("prefix", ["/s/"]), {"/s/a", "/s/b"}),
        (purge_request("tag", ["t"]), {"/s/b"}),
        (purge_request("all", []), {"/s/a", "/s/b", "/x"}),
    ],
    ids=["url", "prefix", "tag", "all"],
)
async def test_each_kind_covers_a_targets_entries_of_both_schemes(
    purge: Purge, gone: set[str]
) -> None:
    """An https request's key target is marked (core/keys.py); purges name request-targets
    and cover both schemes' entries, and nothing else."""
    store = MemoryStore(max_bytes=MiB, clock=lambda: PURGED_AT)
    for target, tags in (("/s/a", ()), ("/s/b", ("t",)), ("/x", ())):
        for https in (False, True):
            await filled(store, DOMAIN, cache_target(target, https), entry(tags=tags))
    dry = await store.purge(DOMAIN, Purge(purge.kind, purge.items, dry_run=True))
    assert (dry.entries, sorted(dry.sample)) == (2 * len(gone), sorted(gone))
    await store.purge(DOMAIN, purge)
    for target in ("/s/a", "/s/b", "/x"):
        for https in (False, True):
            held = store.peek(DOMAIN, cache_target(target, https))
            assert (held is None) == (target in gone), (target, https)


@pytest.mark.slow
async def test_an_invalidation_drops_both_schemes_entries_and_a_fill_of_either_is_refused() -> None:
    store = MemoryStore(max_bytes=MiB, clock=lambda: PURGED_AT)
    await filled(store, DOMAIN, "/p", entry())
    await filled(store, DOMAIN, cache_target("/p", True), entry())
    assert await store.invalidate(DOMAIN, "/p") == 2
    assert store.peek(DOMAIN, "/p") is None and store.peek(DOMAIN, cache_target("/p", True)) is None
    looked_up = await store.lookup(DOMAIN, cache_target("/p", True))
    await store.purge(DOMAIN, purge_request("url", ["/p"]))
    assert not await store.put(looked_up.key, entry())  # fetched before the purge
