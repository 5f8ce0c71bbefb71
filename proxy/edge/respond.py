"""Building responses on the edge: from a stored entry, relayed from the origin, or errors."""

from __future__ import annotations

import logging
from dataclasses import replace
from functools import lru_cache

from aiohttp import hdrs, web
from multidict import CIMultiDict

from proxy.core.entry import Headers, StoredResponse
from proxy.core.policy import NOT_MODIFIED_FIELDS, RequestHeaders, not_modified
from proxy.errors import OriginError

log = logging.getLogger("proxy.edge")


def with_via(headers: CIMultiDict[str], via: str) -> None:
    """Append this proxy to Via (RFC 9110 §7.6.3), keeping the origin's entries first."""
    previous = headers.getall("Via", [])
    if previous:
        del headers["Via"]
    headers["Via"] = ", ".join([*previous, f"1.1 {via}"])


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
    return web.Response(status=entry.status, reason=entry.reason, headers=out, body=entry.body)


def prepared(entry: StoredResponse, *, via: str, status: str) -> StoredResponse:
    """The entry as it is stored: its fields shared with other entries where equal
    (``shared_fields``), and the block of a fresh hit precomputed (``hit_block``) unless the
    fast path must leave it to the full rules: no-cache (validated on every use) and Vary
    (chosen by the request). It then keeps one header tuple, the block (``entry.py``)."""
    headers = shared_fields(entry.headers)
    # The validators are values of those fields: keep the shared strings, not a second copy
    # (one Last-Modified is often on every file of a site).
    etag = _same_text(headers, entry.etag)
    last_modified = _same_text(headers, entry.last_modified)
    if entry.revalidate_always or entry.vary:
        return replace(entry, headers=headers, etag=etag, last_modified=last_modified)
    block = hit_block(headers, via=via, status=status)
    return replace(
        entry, headers=headers, hit_headers=block, etag=etag, last_modified=last_modified
    )


def _same_text(headers: Headers, text: str | None) -> str | None:
    if text is None:
        return None
    return next((value for _, value in headers if value == text), text)


def hit_block(headers: Headers, *, via: str, status: str) -> Headers:
    """The fields of a fresh hit, minus Age: computed once per stored response so a hit only
    adds Age. Without an upstream Via (the usual case) the stored pairs are reused as they
    are and the two added pairs are shared by every entry (cached below), so the block costs
    one tuple per entry, and the entry keeps its ``headers`` inside it (``entry.py``)."""
    if any(name.lower() in ("via", "cache-status") for name, _ in headers):
        out = CIMultiDict(headers)
        out["Cache-Status"] = status
        with_via(out, via)
        return tuple(out.items())
    return headers + _tail(via, status)


@lru_cache(maxsize=16)
def _tail(via: str, status: str) -> Headers:
    # istr names, as the client's own header names are: aiohttp copies them into the
    # response's CIMultiDict without case-folding them again, on every hit.
    return ((hdrs.VIA, f"1.1 {via}"), (hdrs.CACHE_STATUS, status))


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


def relayed_headers(origin_headers: Headers, *, via: str, status: str) -> CIMultiDict[str]:
    headers = CIMultiDict(origin_headers)
    if "Age" not in headers:
        headers["Age"] = "0"
    headers["Cache-Status"] = status
    with_via(headers, via)
    return headers


def text(status: int, message: str, *, cache_status: str | None = None) -> web.Response:
    """A short plain-text answer written by the proxy itself; never stored by anyone."""
    response = web.Response(status=status, text=message + "\n")
    response.headers["Cache-Control"] = "no-store"
    if cache_status is not None:
        response.headers["Cache-Status"] = cache_status
    return response


def origin_failed(exc: OriginError, *, cache_status: str) -> web.Response:
    log.warning("%s", exc)
    return text(exc.status, f"{exc.status} {exc.reason}: {exc.public}", cache_status=cache_status)
