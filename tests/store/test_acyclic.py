"""The store takes entries out of the garbage collector's reach (decision 0011) only when no
reference cycle can run through them: ``holds_no_cycle`` checks every slot of an entry, every
entry the edge builds passes it, and anything else stays with the collector, so a cycle
through it is still freed."""

from __future__ import annotations

import gc
import types
import typing
import weakref
from dataclasses import replace
from enum import IntEnum
from typing import Any, cast

import pytest
from aiohttp import hdrs
from hypothesis import given
from hypothesis import strategies as st
from multidict import CIMultiDict, istr

from proxy.core.cache import entry as entry_module
from proxy.core.cache.entry import StoredResponse, holds_no_cycle
from proxy.core.cache.policy import Storable, assess_response, refreshed
from proxy.core.http.fields import Headers
from proxy.edge import respond
from proxy.store.memory import MemoryStore

NOW = 1_700_000_000.0
DOMAIN = "example.com"
LEAVES = (str, bytes, int, float, bool, types.NoneType)


def plain(**fields: Any) -> StoredResponse:
    defaults: dict[str, Any] = {
        "status": 200,
        "reason": "OK",
        "headers": (("Cache-Control", "max-age=60"),),
        "body": b"body",
        "birth": NOW,
        "freshness_lifetime": 60.0,
    }
    return StoredResponse(**(defaults | fields))


# -- what an entry is declared to hold ----------------------------------------------------------


def declared_leaves(hint: Any) -> bool:
    """True when a type hint admits only LEAVES and tuples of them."""
    if hint in LEAVES:
        return True
    args = [a for a in typing.get_args(hint) if a is not Ellipsis]
    origin = typing.get_origin(hint)
    return origin in (tuple, typing.Union, types.UnionType) and all(map(declared_leaves, args))


def test_every_field_of_an_entry_is_declared_as_leaves_or_tuples_of_them() -> None:
    """The slots hold the fields, and ``_rare`` the rarely set ones: every one of them is
    declared as str, bytes, numbers, None or tuples of them. A new slot fails here until it
    is listed (and ``holds_no_cycle`` checks it at run time in any case)."""
    hints = typing.get_type_hints(StoredResponse)
    slots = set(StoredResponse.__slots__) - {"_rare", "mark"}
    assert slots == {
        "birth",
        "body",
        "freshness_lifetime",
        "hit_lines",
        "key_size",
        "reason",
        "status",
    }
    # ``mark`` is not a field but an int the store writes (declared for type checkers only).
    assert type(plain().mark) is int
    for name in sorted(slots):
        assert declared_leaves(hints[name]), name
    for name in entry_module._RARE_FIELDS:
        (value_hint,) = typing.get_args(hints[name])  # _RarelySet[T]: the field is a T
        assert declared_leaves(value_hint), name
    assert declared_leaves(Headers)  # the last of _rare: the fields as pairs


# -- what the store does with an entry that could be in a cycle -------------------------------


class Status(IntEnum):
    OK = 200


class Reason(str):
    """A str subclass made in Python: it has a __dict__, which can refer to anything."""


NOT_LEAVES = {
    "a list in vary": {"vary": cast(Any, ["accept"]), "vary_values": ("gzip",)},
    "a dict in vary_values": {"vary": ("accept",), "vary_values": cast(Any, ({},))},
    "a list as a field value": {"headers": cast(Any, (("X-A", ["b"]),))},
    "a bytearray body": {"body": cast(Any, bytearray(b"body"))},
    "a str subclass with a __dict__": {"reason": Reason("OK")},
    "an enum status": {"status": Status.OK},
    "an object as a lifetime": {"stale_while_revalidate": cast(Any, object())},
}


@pytest.mark.parametrize("fields", NOT_LEAVES.values(), ids=NOT_LEAVES.keys())
async def test_an_entry_holding_anything_else_stays_with_the_collector(
    fields: dict[str, Any],
) -> None:
    entry = plain(**fields)
    assert not holds_no_cycle(entry)
    store = MemoryStore(max_bytes=1 << 20)
    assert await store.put((DOMAIN, 0, "/a"), entry)
    assert gc.is_tracked(entry)
    assert store.held((DOMAIN, 0, "/a")) is entry  # stored and served as before


class Marker:
    """Something a cycle holds, to see (by a weak reference) whether the cycle is freed."""


@pytest.mark.slow
async def test_a_cycle_through_a_stored_entry_is_freed_once_it_is_dropped() -> None:
    """An entry whose Vary values hold a list that holds the entry: once the store drops it,
    only the collector can free the cycle, and it must still see the entry to do so."""
    holder: list[object] = []
    entry = plain(vary=("accept",), vary_values=cast(Any, (holder,)))
    marker = Marker()
    holder += [entry, marker]
    store = MemoryStore(max_bytes=1 << 20)
    assert await store.put((DOMAIN, 0, "/a"), entry)
    gone = weakref.ref(marker)
    del holder, entry, marker
    assert await store.invalidate(DOMAIN, "/a") == 1
    gc.collect()
    assert gone() is None


async def test_an_entry_stored_twice_is_untracked_once_and_still_served() -> None:
    entry = plain()
    store = MemoryStore(max_bytes=1 << 20)
    assert await store.put((DOMAIN, 0, "/a"), entry)
    assert not gc.is_tracked(entry)
    assert await store.put((DOMAIN, 0, "/b"), entry)
    assert not gc.is_tracked(entry)
    assert store.peek(DOMAIN, "/a") is entry
    assert store.peek(DOMAIN, "/b") is entry


# -- every entry the edge builds passes --------------------------------------------------------

TOKEN = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_!#$.",
    min_size=1,
    max_size=12,
)
# Mostly values a hit can send as lines; now and then one it cannot (kept as pairs).
VALUE = st.text(
    alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E)
    | st.characters(min_codepoint=0xA0, max_codepoint=0x2FFF, blacklist_categories=["Cs"]),
    max_size=40,
) | st.sampled_from(["a\tb", "\x00", "\udc80"])
# aiohttp hands known header names over as its istr constants; others as plain strings.
NAME = st.sampled_from([hdrs.CONTENT_TYPE, hdrs.ETAG, hdrs.LAST_MODIFIED, hdrs.DATE]) | TOKEN
CACHE_CONTROL = st.lists(
    st.sampled_from(
        [
            "max-age=60",
            "s-maxage=5",
            "public",
            "no-cache",
            "must-revalidate",
            "stale-while-revalidate=30",
            "stale-if-error=600",
            "max-age=0",
        ]
    ),
    min_size=1,
    max_size=4,
).map(", ".join)


@st.composite
def responses(draw: st.DrawFn) -> tuple[Headers, CIMultiDict[str], int]:
    """A response's fields, the request's, and its status."""
    headers = [(istr("Cache-Control"), draw(CACHE_CONTROL))]
    if draw(st.integers(0, 3)):  # mostly: without Date a hit is not sent as lines
        headers.append((hdrs.DATE, "Tue, 14 Nov 2023 22:13:20 GMT"))
    headers += draw(st.lists(st.tuples(NAME, VALUE), max_size=6))
    vary: list[str] = []
    if not draw(st.integers(0, 2)):
        vary = draw(
            st.lists(st.sampled_from(["Accept-Encoding", "Accept", "X-Variant"]), max_size=3)
        )
    if vary:
        headers.append((hdrs.VARY, ", ".join(vary)))
    request: CIMultiDict[str] = CIMultiDict()
    for name in vary:
        if draw(st.booleans()):
            request.add(name, draw(VALUE))
    status = draw(st.sampled_from([200, 203, 204, 300, 301, 404, 410, 501]))
    return tuple(headers), request, status


@pytest.mark.slow
@given(response=responses(), body=st.binary(max_size=64), stale_if_error=st.booleans())
async def test_every_entry_the_edge_builds_holds_no_cycle_and_is_untracked(
    response: tuple[Headers, CIMultiDict[str], int], body: bytes, stale_if_error: bool
) -> None:
    """Whatever the origin answers: the entry as a miss stores it (``with_body``, then
    ``respond.prepared``), as a revalidation refreshes it (``refreshed``), and with the
    store's defaults applied all pass ``holds_no_cycle``, and the store untracks them."""
    headers, request, status = response  # about half stored, one in six of those as lines
    verdict = assess_response(
        method="GET",
        request=request,
        status=status,
        reason="Whatever",
        headers=headers,
        request_time=NOW,
        response_time=NOW + 0.5,
        heuristic=True,
    )
    if not isinstance(verdict, Storable):
        return
    built = verdict.with_body(body, "/a?b=c")
    ready = respond.prepared(built, via="1.1 cdn-proxy", status="cdn-proxy; hit")
    again = refreshed(ready, verdict)
    withheld = replace(ready, stale_if_error=600.0 if stale_if_error else None)
    store = MemoryStore(max_bytes=1 << 30)
    for n, entry in enumerate((built, ready, again, withheld)):
        assert holds_no_cycle(entry)
        assert await store.put((DOMAIN, 0, f"/{n}"), entry)
        assert not gc.is_tracked(entry)
