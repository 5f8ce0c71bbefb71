"""What the cache keeps for one response (proxy.core.cache.entry): a layout that holds its fields
once and no number it can derive, and that still says exactly what it was given."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, replace

import pytest

from proxy.core.cache.entry import ENTRY_OVERHEAD, HEADER_OVERHEAD, LINE_OVERHEAD, StoredResponse
from proxy.core.http.fields import Headers, line_fields, write_lines

NOW = 1_700_000_000.0
HEADERS: Headers = (("Content-Type", "text/css"), ("Cache-Control", "max-age=60"))
HEAD = (b"HTTP/1.1 200 OK\r\n", b"Content-Type: text/css\r\n", b"Cache-Control: max-age=60\r\n")
TAIL = b"Via: 1.1 cdn-proxy\r\nCache-Status: cdn-proxy; hit\r\n"
LINES = (*HEAD, TAIL)


def entry(
    headers: Headers = HEADERS,
    *,
    hit_lines: tuple[bytes, ...] = (),
    birth: float = NOW,
    freshness_lifetime: float = 60.0,
) -> StoredResponse:
    return StoredResponse(
        status=200,
        reason="OK",
        headers=headers,
        body=b"body",
        birth=birth,
        freshness_lifetime=freshness_lifetime,
        key_size=20,
        hit_lines=hit_lines,
    )


def test_the_lines_are_the_wire_form_of_status_and_fields() -> None:
    assert write_lines(200, "OK", HEADERS) == HEAD
    assert line_fields(HEAD) == HEADERS
    assert write_lines(404, "Not Found", ()) == (b"HTTP/1.1 404 Not Found\r\n",)
    assert line_fields((b"HTTP/1.1 404 Not Found\r\n",)) == ()


@pytest.mark.parametrize(
    "fields",
    [
        (("X-Empty", ""),),
        (("X-Colon", "a: b: c"),),
        (("X-Tab", "a\tb"),),
        (("X-Unicode", "caf\u00e9 \u2603"),),
        (("Set-Cookie", "a=1"), ("Set-Cookie", "b=2")),
        (("x-lower", "v"), ("X-UPPER", "V")),
    ],
)
def test_fields_read_back_exactly_as_written(fields: Headers) -> None:
    lines = write_lines(200, "OK", fields)
    assert lines is not None
    assert line_fields(lines) == fields


@pytest.mark.parametrize(
    ("reason", "fields"),
    [
        ("OK", (("X-Bad", "a\r\nInjected: 1"),)),
        ("OK", (("X-Bad", "a\nb"),)),
        ("OK", (("X-Bad", "a\x00b"),)),
        ("OK", (("X-Bad", "a\x7fb"),)),
        ("OK", (("Bad Name", "v"),)),
        ("OK", (("Bad:Name", "v"),)),
        ("OK", (("", "v"),)),
        ("OK", (("X-Escaped", "\udce9"),)),  # a byte the client could not decode as UTF-8
        ("O\r\nK", ()),
    ],
)
def test_fields_that_cannot_be_written_back_get_no_lines(reason: str, fields: Headers) -> None:
    assert write_lines(200, reason, fields) is None


def test_the_lines_hold_the_headers() -> None:
    """An entry with hit lines keeps its fields only there, and reads them back from them."""
    ready = entry(hit_lines=LINES)
    assert ready.headers == HEADERS
    assert ready.hit_lines == LINES
    assert ready._rare is None  # no copy of the fields as pairs


@pytest.mark.parametrize(
    "hit_lines",
    [
        (),  # no lines: no-cache or Vary, left to the full rules
        (HEAD[0], b"Content-Type: text/html\r\n", HEAD[2], TAIL),
        (b"HTTP/1.1 404 OK\r\n", *HEAD[1:], TAIL),
        (*HEAD[:2], TAIL),
        HEAD,  # the fields, but no tail
    ],
)
def test_lines_that_do_not_say_what_the_entry_says_are_dropped(
    hit_lines: tuple[bytes, ...],
) -> None:
    """The fast path sends the lines as they are: they must never disagree with the entry."""
    stored = entry(hit_lines=hit_lines)
    assert stored.headers == HEADERS
    assert stored.hit_lines == ()


def test_replace_keeps_what_it_is_given() -> None:
    """``dataclasses.replace`` works on every field, ``headers`` included; new fields drop
    the lines (they no longer say what the entry says)."""
    ready = entry(hit_lines=LINES)
    merged: Headers = (("Content-Type", "text/css"), ("Cache-Control", "max-age=600"))
    updated = replace(ready, headers=merged)
    assert updated.headers == merged
    assert updated.hit_lines == ()
    assert replace(entry(), hit_lines=LINES) == ready
    assert replace(ready, key_size=5).headers == HEADERS
    assert replace(ready, key_size=5).hit_lines == LINES
    assert replace(ready) == ready
    assert hash(replace(ready)) == hash(ready)


@pytest.mark.parametrize(
    ("birth", "freshness_lifetime"),
    [(NOW, 60.0), (NOW - 10, 60.0), (NOW + 0.25 - 3600, 86_400.0), (NOW, 0.0)],
)
def test_expiry_and_age_are_read_from_birth_and_lifetime(
    birth: float, freshness_lifetime: float
) -> None:
    """RFC 9111 §4.2: fresh until birth + lifetime; aged now - birth, never below 0."""
    stored = entry(birth=birth, freshness_lifetime=freshness_lifetime)
    assert stored.freshness_lifetime == freshness_lifetime
    assert stored.expires_at == birth + freshness_lifetime
    assert stored.is_fresh(stored.expires_at - 0.5) is (freshness_lifetime > 0)
    assert not stored.is_fresh(stored.expires_at)
    assert stored.age(birth + 7.5) == 7.5
    assert stored.age(birth - 30) == 0.0


@pytest.mark.parametrize(
    ("since_birth", "freshness_lifetime", "expected"),
    [
        (0.0, 60.0, 0.0),
        (59.5, 60.0, 59.5),
        (60.0, 60.0, None),  # an age equal to the lifetime is stale
        (61.0, 60.0, None),
        (-30.0, 60.0, 0.0),  # the clock stepped back: age 0, still fresh
        (0.0, 0.0, None),  # max-age=0 is never fresh...
        (-30.0, 0.0, None),  # ...even when the clock steps back
    ],
)
def test_fresh_age_is_the_age_while_fresh(
    since_birth: float, freshness_lifetime: float, expected: float | None
) -> None:
    """RFC 9111 §4.2: ``response_is_fresh = (freshness_lifetime > current_age)``, with the
    current age never negative (§4.2.3). The fast path and ``is_fresh`` both read it."""
    stored = entry(birth=NOW, freshness_lifetime=freshness_lifetime)
    assert stored.fresh_age(NOW + since_birth) == expected
    assert stored.is_fresh(NOW + since_birth) is (expected is not None)


def test_no_cache_is_never_fresh_though_its_lifetime_runs() -> None:
    """§5.2.2.4: a no-cache response has a lifetime but is validated on every use."""
    stored = replace(entry(birth=NOW, freshness_lifetime=60.0), revalidate_always=True)
    assert stored.fresh_age(NOW + 1) == 1.0
    assert not stored.is_fresh(NOW + 1)


def test_equal_lifetimes_share_one_number() -> None:
    """A site's objects mostly carry one of a few max-ages: an entry does not pay 24 bytes for
    a float equal to another entry's."""
    first = entry(freshness_lifetime=float(int("86400")))
    second = entry(freshness_lifetime=float(int("86400")))
    assert first.freshness_lifetime is second.freshness_lifetime


def test_size_counts_body_fields_key_and_overhead() -> None:
    """The counted size is derived, not stored: the body, the fields as the entry keeps them
    (pairs, or lines once it has them), ENTRY_OVERHEAD and key_size."""
    plain = entry()
    fields = sum(len(n) + len(v) for n, v in HEADERS) + HEADER_OVERHEAD * len(HEADERS)
    assert plain.size == len(b"body") + fields + ENTRY_OVERHEAD + 20
    ready = entry(hit_lines=LINES)
    assert (
        ready.size == len(b"body") + sum(map(len, LINES)) + LINE_OVERHEAD * 4 + ENTRY_OVERHEAD + 20
    )
    assert replace(ready, key_size=120).size == ready.size + 100


@pytest.mark.parametrize("hit_lines", [(), LINES])
def test_validators_are_read_from_the_fields(hit_lines: tuple[bytes, ...]) -> None:
    """ETag and Last-Modified are values of the stored fields, not copies of them; the last
    wins when a field is repeated (as the rules read them)."""
    assert (entry(hit_lines=hit_lines).etag, entry(hit_lines=hit_lines).last_modified) == (
        None,
        None,
    )
    fields: Headers = (
        *HEADERS,
        ("etag", '"a"'),
        ("Last-Modified", "Tue, 14 Nov 2023 22:13:20 GMT"),
        ("ETag", '"b"'),
    )
    lines = write_lines(200, "OK", fields)
    assert lines is not None
    stored = entry(fields, hit_lines=(*lines, TAIL) if hit_lines else ())
    assert bool(stored.hit_lines) is bool(hit_lines)
    assert stored.etag == '"b"'
    assert stored.last_modified == "Tue, 14 Nov 2023 22:13:20 GMT"


@pytest.mark.parametrize("name", ["headers", "status", "hit_lines"])
def test_an_entry_is_frozen(name: str) -> None:
    """Entries are shared by concurrent hits: nothing may change one in place."""
    with pytest.raises(FrozenInstanceError):
        setattr(entry(), name, ())


def test_the_purge_mark_is_written_only_through_set_mark() -> None:
    """Issue 22 item 6: the store wrote ``mark`` with ``object.__setattr__``. It has one
    door, ``set_mark``; assigning it is refused like any other field, and ``replace`` (a new
    entry) starts again from 0."""
    stored = entry()
    assert stored.mark == 0
    with pytest.raises(FrozenInstanceError):
        stored.mark = 3  # type: ignore[misc]
    stored.set_mark(3)
    assert stored.mark == 3
    assert replace(stored, body=b"other").mark == 0


def test_a_copy_replaced_for_one_answer_keeps_the_mark() -> None:
    """Issue 31: the shared tier copied an entry for one answer (a soft purge's shorter
    freshness, a distrusted copy) with ``replace`` and wrote the mark back with
    ``object.__setattr__``. ``copy_with`` is that copy: the changes, the same mark, a new
    entry (the one it came from unchanged)."""
    stored = entry()
    stored.set_mark(7)
    copy = stored.copy_with(freshness_lifetime=0.0, stale_if_error=0.0)
    assert copy is not stored
    assert (copy.mark, copy.freshness_lifetime, copy.stale_if_error) == (7, 0.0, 0.0)
    assert (stored.mark, stored.freshness_lifetime, stored.stale_if_error) == (7, 60.0, None)
    assert copy.body == stored.body and copy.headers == stored.headers


def test_rarely_set_fields_cost_nothing_at_their_defaults() -> None:
    """An entry with lines whose no-cache, Vary and stale fields are all defaults keeps no
    tuple for them; one that sets any keeps all five, and reads each back as given. An entry
    without lines keeps its fields as pairs there too."""
    assert entry()._rare is not None
    assert entry()._rare == (False, None, 0.0, (), (), (), HEADERS)
    plain = entry(hit_lines=LINES)
    assert plain._rare is None
    assert (plain.revalidate_always, plain.vary, plain.vary_values) == (False, (), ())
    assert (plain.stale_if_error, plain.stale_while_revalidate) == (None, 0.0)
    varied = replace(
        plain,
        vary=("accept-encoding",),
        vary_values=("gzip",),
        stale_if_error=0.0,
        stale_while_revalidate=30.0,
        revalidate_always=True,
    )
    assert varied._rare is not None
    assert (varied.vary, varied.vary_values) == (("accept-encoding",), ("gzip",))
    assert (varied.stale_if_error, varied.stale_while_revalidate) == (0.0, 30.0)
    assert varied.revalidate_always is True
    assert replace(varied, vary=(), vary_values=(), stale_if_error=None) != plain
    back = replace(
        varied,
        vary=(),
        vary_values=(),
        stale_if_error=None,
        stale_while_revalidate=0.0,
        revalidate_always=False,
    )
    assert back == plain
    assert back._rare is None


@pytest.mark.parametrize("name", ["vary", "stale_if_error", "revalidate_always"])
def test_rarely_set_fields_are_frozen_too(name: str) -> None:
    with pytest.raises(AttributeError):
        setattr(entry(), name, ())
