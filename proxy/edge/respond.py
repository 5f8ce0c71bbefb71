"""Building responses on the edge: from a stored entry, relayed from the origin, or errors."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from functools import lru_cache
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.http import SERVER_SOFTWARE
from aiohttp.payload import Payload
from multidict import CIMultiDict

from proxy.core.cache.conditional import NOT_MODIFIED_FIELDS, not_modified
from proxy.core.cache.entry import StoredResponse
from proxy.core.cache.policy import RequestHeaders, with_lines
from proxy.core.http.fields import Headers, Lines, write_lines
from proxy.core.http.headers import via_value
from proxy.edge.aiohttp_adapter import Prewritten
from proxy.edge.file_body import FilePayload
from proxy.edge.interim import EARLY_HINTS, Hinted, preload_links
from proxy.edge.peer_mark import add_peer_fields
from proxy.errors import OriginBusy, OriginError, OriginsDown, RequestBodyError
from proxy.store.shared.large import file_backed

log = logging.getLogger("proxy.edge")


# A body in memory larger than this is handed to the socket a slice at a time, the loop
# turning in between (``SlicedBody``); the fast path leaves it to the full one (``hit_lines``).
SLICE = 256 * 1024


class SlicedBody(Payload):
    """A stored body in memory, written ``SLICE`` bytes per turn of the event loop.

    One write of a whole 1 MiB body is one send: the kernel copies it, and on loopback
    delivers it, before the call returns, up to several milliseconds in which the loop
    answers no one else (issue 32's HTTP/2 soak: a hit's p99 doubled by four such answers
    a second; decision 0057). A slice costs a fraction of that, and other connections' hits
    are answered between two slices. Nothing is copied: each slice is a view of the body."""

    def __init__(self, body: bytes) -> None:
        super().__init__(body, content_type=None)
        self._body = body
        self._size = len(body)

    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return self._body.decode(encoding, errors)

    async def write(self, writer: AbstractStreamWriter) -> None:
        view = memoryview(self._body)
        for start in range(0, len(view), SLICE):
            if start:
                await asyncio.sleep(0)  # the loop's other callbacks run between two slices
            await writer.write(view[start : start + SLICE])

    async def write_with_length(self, writer: AbstractStreamWriter, content_length: Any) -> None:
        await self.write(writer)


def with_via(headers: CIMultiDict[str], via: str) -> None:
    """Append this proxy to the response's Via, after the origin's entries (``via_value``)."""
    headers["Via"] = via_value(headers.popall("Via", ()), via)


def from_stored(
    request: web.BaseRequest,
    entry: StoredResponse,
    *,
    now: float,
    via: str,
    status: str,
    headers: Headers | None = None,
) -> web.Response:
    """Answer from a stored response: Age (RFC 9111 §5.1), Cache-Status (RFC 9211), and a 304
    when the client's own conditions say it already has this representation. ``headers``
    replaces the stored fields (a fill answers with the origin's fields in full)."""
    fields = entry.headers if headers is None else headers
    age = str(int(entry.age(now)))
    request_headers: RequestHeaders = request.headers
    if request.method in ("GET", "HEAD") and not_modified(entry, request_headers):
        not_modified_headers = CIMultiDict(
            (name, value) for name, value in fields if name.lower() in NOT_MODIFIED_FIELDS
        )
        not_modified_headers["Age"] = age
        not_modified_headers["Cache-Status"] = status
        with_via(not_modified_headers, via)
        return web.Response(status=304, headers=not_modified_headers)
    out = CIMultiDict(fields)
    out["Age"] = age
    out["Cache-Status"] = status
    with_via(out, via)
    body: bytes | Payload = entry.body
    file = file_backed(entry)
    if file is not None:  # a large object: sent from its file (decision 0039)
        out.popall("Content-Length", None)  # aiohttp sets the payload's
        body = FilePayload(file)
    elif len(entry.body) > SLICE:  # handed to the socket a slice per turn of the loop (0057)
        out.popall("Content-Length", None)
        body = SlicedBody(entry.body)
    hints = preload_links(fields) if request.get(EARLY_HINTS) else ()
    if hints:  # the domain's early_hints: a 103 of the answer's preloads first (0049)
        return Hinted(hints=hints, status=entry.status, reason=entry.reason, headers=out, body=body)
    return web.Response(status=entry.status, reason=entry.reason, headers=out, body=body)


def prepared(entry: StoredResponse, *, via: str, status: str) -> StoredResponse:
    """The entry as it is stored: its fields shared with other entries where equal
    (``shared_fields``), and a fresh hit's lines precomputed (``hit_lines``) unless the fast
    path must leave it to the full rules: no-cache (validated on every use) and Vary (chosen
    by the request). An entry with those lines keeps its fields only there (``entry.py``)."""
    ready = replace(entry, headers=shared_fields(entry.headers))
    if entry.revalidate_always or entry.vary:
        return ready
    lines = hit_lines(ready, via=via, status=status)
    return ready if lines is None else with_lines(ready, lines)


# Statuses whose answer to GET has a body, framed by Content-Length.
_BODY_STATUSES = range(200, 600)
_NO_BODY_STATUSES = frozenset({204, 304})


def hit_lines(entry: StoredResponse, *, via: str, status: str) -> Lines | None:
    """What a fresh hit on the entry sends, but for Age and the body: the HTTP/1.1 status line
    and the stored fields, a line each (``entry.write_lines``), then the edge's own lines in
    one. Exactly the message ``from_stored`` builds through aiohttp for an HTTP/1.1 keep-alive
    GET (the tests compare the two on the wire), so the fast path writes it as it is. Every
    line is shared with the entries that repeat it (``_shared_line``).

    None when the full path must build the answer: an upstream Via or Cache-Status (merged
    there), no Date (aiohttp adds the time of each answer), a Content-Length that is not the
    body's, a status without a body, or fields that cannot be written back."""
    if entry.status not in _BODY_STATUSES or entry.status in _NO_BODY_STATUSES:
        return None
    if len(entry.body) > SLICE:  # sent a slice at a time (``SlicedBody``)
        return None
    names = {name.lower(): value for name, value in entry.headers}
    if "via" in names or "cache-status" in names or "date" not in names:
        return None
    length = names.get("content-length")
    if length is not None and length != str(len(entry.body)):
        return None
    lines = write_lines(entry.status, entry.reason, entry.headers)
    if lines is None:
        return None
    # What aiohttp's web.Response adds to a message that lacks it.
    extra = ""
    if "content-type" not in names and entry.body:
        extra += "Content-Type: application/octet-stream\r\n"
    if "server" not in names:
        extra += f"Server: {SERVER_SOFTWARE}\r\n"
    if length is None:
        extra += f"Content-Length: {len(entry.body)}\r\n"
    return (*map(_shared_line, lines), _tail(via, status, extra))


@lru_cache(maxsize=64)
def _tail(via: str, status: str, extra: str) -> bytes:
    return f"Via: {via_value((), via)}\r\nCache-Status: {status}\r\n{extra}".encode()


@lru_cache(maxsize=256)
def head_tail(tail: bytes) -> bytes | None:
    """The last of ``hit_lines`` as the full path writes it in answer to a HEAD: Cache-Status
    before Via (``from_stored`` sets Age, then Cache-Status, then Via on the stored fields;
    aiohttp adds the rest, as to the GET), for the hit lane's HEAD (decision 0055), which
    writes Age before it and no body. None when the tail is not ``_tail``'s (the full path
    answers). Cached: most entries share a few tails."""
    via, _, rest = tail.partition(b"\r\n")
    status, _, extra = rest.partition(b"\r\n")
    if not via.startswith(b"Via: ") or not status.startswith(b"Cache-Status: "):
        return None
    return b"%s\r\n%s\r\n%s" % (status, via, extra)


# A fresh hit, sent as it was precomputed: the entry's lines (``hit_lines``), Age, and the
# body, last. It replaces ``web.Response`` on the fast path, which spends most of a hit's time
# rebuilding and re-encoding fields that never change (benchmarks/README.md, decision 0008),
# and reads as the response it sends (status, headers...) to anything that asks. Only for
# HTTP/1.1 requests that keep the connection open (``Edge.handle``).
Hit = Prewritten


def shared_fields(headers: Headers) -> Headers:
    """The same fields, each (name, value) pair swapped for an equal one another stored entry
    already holds, when one was seen lately. Responses of a site repeat most of their fields
    (Content-Type, Cache-Control, Server, Date within the second), and a pair with its value
    string costs about 110 bytes per entry; shared, it costs a pointer. A new pair at least
    shares its name: the client makes a new string for every name it does not know."""
    return tuple(
        _shared_field(field) if len(field[0]) + len(field[1]) <= SHARED_FIELD_CHARS else field
        for field in headers
    )


# The pairs and names seen least recently are forgotten. What the two caches hold is bounded,
# and outside cache.max_bytes: at most about 3 MB, about 1 MB for usual field sizes.
SHARED_FIELDS = 4096
SHARED_FIELD_CHARS = 512
SHARED_NAMES = 1024
SHARED_NAME_CHARS = 64


@lru_cache(maxsize=SHARED_FIELDS)
def _shared_field(field: tuple[str, str]) -> tuple[str, str]:
    name, value = field
    if len(name) > SHARED_NAME_CHARS:
        return field
    shared = _shared_name(name)
    return field if shared is name else (shared, value)


@lru_cache(maxsize=SHARED_NAMES)
def _shared_name(name: str) -> str:
    return name


@lru_cache(maxsize=SHARED_FIELDS)
def _shared_line(line: bytes) -> bytes:
    return line


def relayed_headers(
    origin_headers: Headers, *, via: str, status: str, tags: tuple[str, ...] | None = None
) -> CIMultiDict[str]:
    """The head of an answer relayed from the origin. ``tags``: the response's, when it is
    the origin's answer to this request (a fleet peer's request then gets them, with the
    purge label: edge/peer_mark.py); None for anything else."""
    headers = CIMultiDict(origin_headers)
    if "Age" not in headers:
        headers["Age"] = "0"
    headers["Cache-Status"] = status
    with_via(headers, via)
    if tags is not None:
        add_peer_fields(headers, tags)
    return headers


def text(status: int, message: str, *, cache_status: str | None = None) -> web.Response:
    """A short plain-text answer written by the proxy itself; never stored by anyone."""
    response = web.Response(status=status, text=message + "\n")
    response.headers["Cache-Control"] = "no-store"
    if cache_status is not None:
        response.headers["Cache-Status"] = cache_status
    return response


def origin_failed(exc: OriginError, *, cache_status: str) -> web.Response:
    if not isinstance(exc, OriginBusy | OriginsDown):
        # OriginBusy is counted (origin_busy_total) and not logged: it comes in floods; so
        # does OriginsDown, whose servers' going down was logged once (edge/upstreams.py).
        log.warning("%s", exc)
    return failed(exc, cache_status=cache_status)


def failed(exc: OriginError | RequestBodyError, *, cache_status: str) -> web.Response:
    """The answer to a request the edge could not carry out: its status and public reason."""
    response = text(
        exc.status, f"{exc.status} {exc.reason}: {exc.public}", cache_status=cache_status
    )
    if isinstance(exc, OriginBusy):
        response.headers["Retry-After"] = "1"
    elif isinstance(exc, OriginsDown) and exc.retry_after is not None:
        response.headers["Retry-After"] = str(max(1, round(exc.retry_after)))
    return response


OVER_BUDGET_TEXT = "503 Service Unavailable: too many answers wait for this client; retry later"


def over_budget(status: str) -> web.Response:
    """The answer would pass its connection's or client's budget of answers not yet sent
    (edge/answer_budget.py, decision 0051): refused before anything was sent, counted by
    the budget, not logged (a client can cause it at will)."""
    response = text(503, OVER_BUDGET_TEXT, cache_status=status)
    response.headers["Retry-After"] = "1"
    return response
