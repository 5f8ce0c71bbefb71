"""A lookup names the URL; the store applies the domain's current generation in the same step
and returns the key it used, under which a fill may store (until the next clear)."""

from __future__ import annotations

import pytest

from proxy.core.cache.entry import StoredResponse
from proxy.store.memory import MemoryStore

DOMAIN = "example.com"


def response(body: bytes) -> StoredResponse:
    return StoredResponse(
        status=200,
        reason="OK",
        headers=(("Cache-Control", "max-age=60"),),
        body=body,
        birth=1_700_000_000.0,
        freshness_lifetime=60.0,
    )


@pytest.mark.slow
async def test_a_lookup_applies_the_current_generation() -> None:
    store = MemoryStore(max_bytes=1 << 20)
    before = await store.lookup(DOMAIN, "/a")
    assert (before.key, tuple(before.variants)) == ((DOMAIN, 0, "/a"), ())
    old = response(b"old")
    assert await store.put(before.key, old)
    assert tuple((await store.lookup(DOMAIN, "/a")).variants) == (old,)
    assert store.peek(DOMAIN, "/a") is old

    await store.clear_domain(DOMAIN)
    after = await store.lookup(DOMAIN, "/a")
    assert (after.key, tuple(after.variants)) == ((DOMAIN, 1, "/a"), ())
    assert store.peek(DOMAIN, "/a") is None
    # A fill that looked up before the clear cannot store what it fetched then.
    assert not await store.put(before.key, response(b"fetched before the clear"))
    new = response(b"new")
    assert await store.put(after.key, new)
    assert store.peek(DOMAIN, "/a") is new
    assert tuple((await store.lookup("other.test", "/a")).variants) == ()
