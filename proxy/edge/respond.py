"""Building responses on the edge: from a stored entry, relayed from the origin, or errors."""

from __future__ import annotations

import logging
from functools import lru_cache

from aiohttp import web
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


def hit_block(headers: Headers, *, via: str, status: str) -> Headers:
    """The fields of a fresh hit, minus Age: computed once per stored response so a hit only
    adds Age. Without an upstream Via (the usual case) the stored pairs are reused as they
    are and the two added pairs are shared by every entry (cached below), so the block costs
    one tuple per entry."""
    if any(name.lower() in ("via", "cache-status") for name, _ in headers):
        out = CIMultiDict(headers)
        out["Cache-Status"] = status
        with_via(out, via)
        return tuple(out.items())
    return headers + _tail(via, status)


@lru_cache(maxsize=16)
def _tail(via: str, status: str) -> Headers:
    return (("Via", f"1.1 {via}"), ("Cache-Status", status))


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
