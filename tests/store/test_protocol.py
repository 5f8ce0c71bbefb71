"""Every store in ``proxy`` honours the ``Store`` protocol's split (proxy/store/base.py): what
decides (``peek``, ``clear_now``, ``purge_now``) never suspends, so it is a plain method in
every store, and a fleet member can apply a batch of clears and purges with no await between
them; the rest is ``async`` everywhere. mypy --strict checks this wherever a store is passed as
a ``Store``; this checks every class in ``proxy`` that has the protocol's methods, at run time,
so a store of a new tier is held to it the day it is written."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import sys

import pytest

import proxy
from proxy.core.cache.entry import StoredResponse
from proxy.core.purge.purges import purge_request
from proxy.fleet.store import FleetStore
from proxy.store.base import Store
from proxy.store.memory import MemoryStore

METHODS = sorted(
    name for name, value in vars(Store).items() if inspect.isfunction(value) and name[0] != "_"
)
SUSPENDS = {name: inspect.iscoroutinefunction(getattr(Store, name)) for name in METHODS}


def stores() -> list[type]:
    """Every class in ``proxy`` (its modules imported, ``__main__`` aside) that has each of
    the protocol's methods."""
    for info in pkgutil.walk_packages(proxy.__path__, "proxy."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)
    found = []
    for name, module in list(sys.modules.items()):
        if name != "proxy" and not name.startswith("proxy."):
            continue
        for cls in vars(module).values():
            if (
                inspect.isclass(cls)
                and cls.__module__ == name
                and cls is not Store
                and all(hasattr(cls, method) for method in METHODS)
            ):
                found.append(cls)
    return found


def mismatches(cls: type) -> list[str]:
    """The protocol's methods that suspend in ``cls`` where the protocol's do not, or the
    other way round."""
    return [m for m in METHODS if inspect.iscoroutinefunction(getattr(cls, m)) != SUSPENDS[m]]


def test_the_protocol_says_what_never_suspends() -> None:
    assert {m for m in METHODS if not SUSPENDS[m]} == {"peek", "clear_now", "purge_now"}
    assert {m for m in METHODS if SUSPENDS[m]} == {
        "lookup",
        "put",
        "invalidate",
        "clear_domain",
        "purge",
        "domain_stats",
        "stats",
    }


def test_every_store_in_proxy_suspends_where_the_protocol_does_and_nowhere_else() -> None:
    found = stores()
    assert {MemoryStore, FleetStore} <= set(found)
    assert {cls.__qualname__: mismatches(cls) for cls in found} == {
        cls.__qualname__: [] for cls in found
    }


def test_a_store_whose_clear_suspends_is_caught() -> None:
    """The check above can fail: a store that made ``clear_now`` a coroutine (a tier that
    waits for its disk before answering) would let a lookup in between a batch's clears."""

    class Suspending(MemoryStore):
        async def clear_now(self, domain: str) -> object:  # type: ignore[override]
            return super().clear_now(domain)

    assert mismatches(Suspending) == ["clear_now"]


def response(body: bytes) -> StoredResponse:
    return StoredResponse(
        status=200,
        reason="OK",
        headers=(("Cache-Control", "max-age=60"),),
        body=body,
        birth=0.0,
        freshness_lifetime=60.0,
    )


async def test_clear_now_says_what_it_made_unservable() -> None:
    store = MemoryStore(max_bytes=1 << 20)
    for target, body in (("/a", b"12345"), ("/b", b"1234567890")):
        found = await store.lookup("a.test", target)
        assert await store.put(found.key, response(body))
    before = await store.domain_stats("a.test")

    cleared = store.clear_now("a.test")

    assert (cleared.entries_dropped, cleared.bytes_dropped) == (2, before.bytes)
    assert before.bytes > 15 and cleared.generation == 1
    assert store.peek("a.test", "/a") is None
    assert (await store.domain_stats("a.test")).entries == 0


@pytest.mark.slow
async def test_purge_now_applies_a_purge_and_refuses_a_dry_run() -> None:
    store = MemoryStore(max_bytes=1 << 20)
    found = await store.lookup("a.test", "/a")
    assert await store.put(found.key, response(b"x"))
    with pytest.raises(ValueError, match="a dry run is a read"):
        store.purge_now("a.test", purge_request("url", ["/a"], dry_run=True))
    assert store.peek("a.test", "/a") is not None

    purged = store.purge_now("a.test", purge_request("url", ["/a"]))

    assert (purged.entries, purged.exact, purged.dry_run) == (1, True, False)
    assert store.peek("a.test", "/a") is None
