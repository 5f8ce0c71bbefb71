"""What the cache keeps for one response (proxy.core.entry): a layout that holds one header
tuple and no number it can derive, and that still says exactly what it was given."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, replace

import pytest

from proxy.core.entry import Headers, StoredResponse

NOW = 1_700_000_000.0
HEADERS: Headers = (("Content-Type", "text/css"), ("Cache-Control", "max-age=60"))
TAIL: Headers = (("Via", "1.1 cdn-proxy"), ("Cache-Status", "cdn-proxy; hit"))


def entry(
    headers: Headers = HEADERS,
    *,
    hit_headers: Headers = (),
    response_time: float = NOW,
    corrected_initial_age: float = 0.0,
    freshness_lifetime: float = 60.0,
) -> StoredResponse:
    return StoredResponse(
        status=200,
        reason="OK",
        headers=headers,
        body=b"body",
        response_time=response_time,
        corrected_initial_age=corrected_initial_age,
        freshness_lifetime=freshness_lifetime,
        expires_at=response_time - corrected_initial_age + freshness_lifetime,
        revalidate_always=False,
        etag=None,
        last_modified=None,
        vary=(),
        vary_values=(),
        size=100,
        hit_headers=hit_headers,
    )


def test_the_hit_block_holds_the_headers() -> None:
    """The usual block is the stored fields plus the edge's two: the entry keeps that one
    tuple, and its headers are the block's own pairs."""
    ready = entry(hit_headers=HEADERS + TAIL)
    assert ready.headers == HEADERS
    assert all(a is b for a, b in zip(ready.headers, ready.hit_headers, strict=False))
    assert ready.hit_headers == HEADERS + TAIL


@pytest.mark.parametrize(
    "hit_headers",
    [
        (),  # no block: no-cache or Vary, left to the full rules
        (("Content-Type", "text/css"), ("Via", "1.0 upstream, 1.1 cdn-proxy"), TAIL[1]),
        HEADERS + TAIL[:1],  # not the stored fields plus two
        (("Content-Type", "text/html"), HEADERS[1], *TAIL),  # another value
    ],
)
def test_headers_are_kept_apart_from_a_block_that_does_not_hold_them(
    hit_headers: Headers,
) -> None:
    stored = entry(hit_headers=hit_headers)
    assert stored.headers == HEADERS
    assert stored.hit_headers == hit_headers


def test_replace_keeps_what_it_is_given() -> None:
    """``dataclasses.replace`` works on every field, ``headers`` included."""
    ready = entry(hit_headers=HEADERS + TAIL)
    merged: Headers = (("Content-Type", "text/css"), ("Cache-Control", "max-age=600"))
    updated = replace(ready, headers=merged)
    assert updated.headers == merged
    assert updated.hit_headers == ready.hit_headers
    assert replace(entry(), hit_headers=HEADERS + TAIL) == ready
    assert replace(ready, size=5).headers == HEADERS
    assert replace(ready) == ready
    assert hash(replace(ready)) == hash(ready)


@pytest.mark.parametrize(
    ("response_time", "corrected_initial_age", "freshness_lifetime"),
    [(NOW, 0.0, 60.0), (NOW, 10.0, 60.0), (NOW + 0.25, 3600.0, 86_400.0), (NOW, 0.0, 0.0)],
)
def test_freshness_lifetime_is_implied_by_expires_at(
    response_time: float, corrected_initial_age: float, freshness_lifetime: float
) -> None:
    """RFC 9111 §4.2.1: the lifetime the entry was stored with, not kept as a number of its own."""
    stored = entry(
        response_time=response_time,
        corrected_initial_age=corrected_initial_age,
        freshness_lifetime=freshness_lifetime,
    )
    assert stored.freshness_lifetime == freshness_lifetime


@pytest.mark.parametrize("name", ["headers", "status", "hit_headers"])
def test_an_entry_is_frozen(name: str) -> None:
    """Entries are shared by concurrent hits: nothing may change one in place."""
    with pytest.raises(FrozenInstanceError):
        setattr(entry(), name, ())
