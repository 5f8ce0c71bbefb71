"""Range requests on the edge: the 206 or 416 built from the whole response the cache would
send (``proxy.core.http.ranges`` decides which; decision 0021).

Where they are answered (``Edge``):

- from a stored response, whatever made it servable (fresh, revalidated, stale while
  revalidating or on an origin error, a collapsed request's shared fill): the full answer is
  built as for any request, and ``answer`` cuts the range out of it last;
- on a miss, a Range that asks for less than the whole object (``forwarded``) is sent to the
  origin as it is, and its answer relayed, never stored: a one-byte range must not cost the
  origin a whole object (RangeAmp; decision 0031). It joins a fill of the URL already under
  way, though, and is cut from what that fill stores;
- on a miss for ``bytes=0-`` (or a Range the cache ignores), the fill fetches the whole
  object without the Range (``headers.to_origin``) and stores it when it may, then answers as
  above. When the whole object may not be kept,
  ``cut_from_origin`` says what to do: a 200 that is not storable but ends within
  cache.max_object_bytes is read and the range cut from it; one that is larger (by its
  Content-Length, or by what arrived when it had none) is dropped and the origin is asked
  again with the client's Range (``AskOrigin``), so a seek in a large object never streams
  the object from its start.

A Range request never takes the fast path (``core.requests.plain_get``): a plain GET hit pays
nothing for any of this.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import hdrs, web
from multidict import CIMultiDict, CIMultiDictProxy

from proxy.core.http.headers import from_origin
from proxy.core.http.ranges import Part, Whole, decide_range, fetches_whole
from proxy.edge import respond
from proxy.edge.file_body import FilePayload
from proxy.edge.origin import OriginResponse


@dataclass(frozen=True, slots=True)
class AskOrigin:
    """The fill's response is too large to keep: ask the origin for the client's range."""

    reason: str  # Cache-Status detail, as for the response it replaces


def asked(request: web.BaseRequest) -> bool:
    """A GET with a Range: the only request a range is ever cut for (RFC 9110 §14.2)."""
    return request.method == "GET" and hdrs.RANGE in request.headers


def forwarded(request: web.BaseRequest) -> bool:
    """A Range GET that a miss sends to the origin as it is, rather than filling the whole
    object for it (``core.http.ranges.fetches_whole``; decision 0031)."""
    return asked(request) and not fetches_whole(request.headers.getall(hdrs.RANGE))


def answer(request: web.BaseRequest, full: web.Response, body: bytes) -> web.Response:
    """The answer to ``request`` when ``full`` (with ``body``) answers it without its Range:
    ``full`` itself, a 206 with the range's bytes, or a 416."""
    headers = request.headers
    ranges = headers.getall(hdrs.RANGE, [])
    if not ranges:
        return full
    fields = full.headers
    stored = full.body
    # A large object's file (decision 0039): its range is read by seek, not cut from bytes.
    length = stored.file.length if isinstance(stored, FilePayload) else len(body)
    decision = decide_range(
        method=request.method,
        status=full.status,
        ranges=ranges,
        if_range=headers.get(hdrs.IF_RANGE),
        etag=_last(fields, hdrs.ETAG),
        last_modified=_last(fields, hdrs.LAST_MODIFIED),
        length=length,
    )
    if isinstance(decision, Whole):
        return full
    if isinstance(decision, Part):
        part = CIMultiDict(fields)
        part.popall(hdrs.CONTENT_LENGTH, None)  # aiohttp sets the part's
        part[hdrs.CONTENT_RANGE] = decision.content_range
        # The edge answers ranges of everything it stores, whatever the origin said it does.
        part[hdrs.ACCEPT_RANGES] = "bytes"
        if isinstance(stored, FilePayload):
            return web.Response(
                status=206, headers=part, body=stored.part(decision.first, decision.last)
            )
        return web.Response(status=206, headers=part, body=body[decision.first : decision.last + 1])
    unsatisfiable = respond.text(
        416, f"416 Range Not Satisfiable: the representation has {decision.complete_length} bytes"
    )
    for name in (hdrs.AGE, "Cache-Status", hdrs.VIA):
        if name in fields:
            unsatisfiable.headers[name] = fields[name]
    unsatisfiable.headers[hdrs.CONTENT_RANGE] = decision.content_range  # RFC 9110 §15.5.17
    unsatisfiable.headers[hdrs.ACCEPT_RANGES] = "bytes"
    return unsatisfiable


def cut(
    request: web.BaseRequest, origin: OriginResponse, body: bytes, *, via: str, status: str
) -> web.Response:
    """The answer to a Range request from the origin's whole 200 (``body``, read to its end),
    which is not stored: the range cut from it, as from a stored response."""
    fields = respond.relayed_headers(
        from_origin(origin.headers), via=via, status=status, tags=origin.tags
    )
    full = web.Response(status=200, reason=origin.reason, headers=fields, body=body)
    return answer(request, full, body)


def _last(fields: CIMultiDictProxy[str] | CIMultiDict[str], name: str) -> str | None:
    values = fields.getall(name, [])
    return values[-1] if values else None
