"""Interim answers from an origin (RFC 9110 §15.2): relayed to the client that waits, before
its final answer, and never kept (decision 0049).

A proxy forwards the 1xx it did not ask for itself (§15.2): here 102 Processing, 103 Early
Hints (RFC 8297) and any other but 100 (the edge reads a request's body before it asks the
origin, so a 100 is the edge's own to send: edge/forward.py) and 101 (a switch: the tunnelled
path, edge/tunnel.py). aiohttp's client reads and drops them; ``InterimResponse`` (the origin
session's response class, in the aiohttp adapter) tells each to the hook ``relayed_to`` sets
for the origin requests made for one client: the forwarded path's and a fill's, not a
background revalidation's, whose client has had its answer.

An interim answer is never stored and never merged into the final one: it goes to the
client's connection as it arrives, and nothing of it reaches the fill. It is sent:

- only before the final answer's head (``head_started``), and while ``relayed_to`` lasts;
- over HTTP/1.1 only to a client of version 1.1 (§15.2: never to an HTTP/1.0 client);
- over HTTP/2 as a HEADERS frame without END_STREAM (RFC 9113 §8.1; edge/h2/stream.py);
- with the origin's fields less the hop-by-hop ones and the domain's tag fields, and this
  proxy's Via (§7.6.3).

A client that has gone is not an origin error: the relay stops, and the fill goes on.

Beyond relaying, a domain with ``early_hints`` on sends a 103 of its own before a stored
answer: the answer's ``Link`` fields of relation preload or preconnect (``preload_links``),
as Cloudflare's Early Hints does. Such a domain's hits take the full path (``Hinted``).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from contextlib import contextmanager
from http import HTTPStatus
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.http import HttpVersion11

from proxy.core.http.fields import Headers
from proxy.core.http.headers import from_origin, via_value
from proxy.core.purge.purges import split_tags
from proxy.edge.aiohttp_adapter import INTERIM, Informational, head_started


def interim_fields(fields: Headers, *, via: str, tag_headers: frozenset[str]) -> Headers:
    """What of an interim answer's fields the client gets: not the hop-by-hop ones, nor the
    domain's tag fields, and this proxy appended to Via."""
    kept, _ = split_tags(from_origin(fields), tag_headers)
    vias = [value for name, value in kept if name.lower() == "via"]
    rest = tuple((name, value) for name, value in kept if name.lower() != "via")
    return (*rest, ("Via", via_value(vias, via)))


def status_line(status: int) -> bytes:
    """An interim answer's HTTP/1.1 status line, with the standard reason (the origin's is
    not repeated: it is free text)."""
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = "Informational"
    return b"HTTP/1.1 %d %s\r\n" % (status, reason.encode("ascii"))


def message(status: int, fields: Headers) -> bytes:
    """An interim answer as HTTP/1.1 bytes: status line, field lines, the empty line."""
    lines = [status_line(status)]
    for name, value in fields:
        lines.append(f"{name}: {value}\r\n".encode("utf-8", "replace"))
    lines.append(b"\r\n")
    return b"".join(lines)


class Relay:
    """Sends one client the interim answers of the origin requests made for it."""

    __slots__ = ("_request", "_tags", "_via", "open", "sent")

    def __init__(self, request: web.BaseRequest, *, via: str, tag_headers: frozenset[str]):
        self._request = request
        self._via = via
        self._tags = tag_headers
        self.open = True
        self.sent = 0  # interim answers relayed; for tests

    async def __call__(self, status: int, fields: tuple[tuple[str, str], ...]) -> None:
        if not self.open:
            return
        writer = self._request.writer
        if head_started(writer):
            self.open = False  # the final answer has begun: too late for any interim one
            return
        relayed = interim_fields(fields, via=self._via, tag_headers=self._tags)
        try:
            await send(self._request, status, relayed)
        except ConnectionError:
            self.open = False  # the client has gone; the origin's answer is read on
            return
        except ValueError:
            return  # a field HTTP/2 cannot carry (CR, LF or NUL): this one is not relayed
        self.sent += 1


async def send(request: web.BaseRequest, status: int, fields: Headers) -> None:
    """One interim answer on the request's writer: an HTTP/2 stream's HEADERS, or HTTP/1.1
    bytes (the caller checks ``relays_to`` and ``head_started``). Raises ConnectionError when
    the client has gone, ValueError for a field HTTP/2 cannot carry."""
    writer = request.writer
    if isinstance(writer, Informational):
        writer.informational(status, fields)
    else:
        await writer.write(message(status, fields))


def relays_to(request: web.BaseRequest) -> bool:
    """Whether the client may be sent interim answers: HTTP/2, or HTTP/1.1 (never 1.0)."""
    return isinstance(request.writer, Informational) or request.version == HttpVersion11


@contextmanager
def relayed_to(
    request: web.BaseRequest, *, via: str, tag_headers: frozenset[str] = frozenset()
) -> Iterator[Relay | None]:
    """Within this, the interim answers to origin requests made in this context go to
    ``request``'s client; after it, none does (a task started within keeps the hook, closed)."""
    if not relays_to(request):
        yield None
        return
    relay = Relay(request, via=via, tag_headers=tag_headers)
    token = INTERIM.set(relay)
    try:
        yield relay
    finally:
        relay.open = False
        INTERIM.reset(token)


# -- Early Hints on hits (a domain's ``early_hints``) -------------------------------------------

# Set by the edge on a request to a domain with ``early_hints`` on (edge/handler.py); read
# where a stored answer is built (respond.from_stored).
EARLY_HINTS = web.RequestKey("early_hints", bool)

# One link-value of a Link field (RFC 8288 §3): <target> then parameters; commas between them.
_LINK = re.compile(r'\s*(<[^>]*>(?:\s*;\s*[^;,=\s]+(?:\s*=\s*(?:"[^"]*"|[^;,]*))?)*)\s*(?:,|$)')
_REL = re.compile(r';\s*rel\s*=\s*(?:"([^"]*)"|([^;,\s]*))', re.IGNORECASE)
HINTED_RELATIONS = frozenset({"preload", "preconnect"})


def preload_links(fields: Headers) -> Headers:
    """The ``Link`` fields a 103 repeats for a stored answer: its link-values whose relation
    is ``preload`` or ``preconnect`` (what browsers act on in a 103), one field each, in
    order. Any other link, or a value that does not parse, is left out."""
    links: list[tuple[str, str]] = []
    for name, value in fields:
        if name.lower() != "link":
            continue
        position = 0
        while position < len(value):
            match = _LINK.match(value, position)
            if match is None or match.end() == position:
                break
            link = match.group(1)
            rel = _REL.search(link)
            relations = (rel.group(1) or rel.group(2) or "").lower().split() if rel else []
            if HINTED_RELATIONS.intersection(relations):
                links.append(("Link", link))
            position = match.end()
    return tuple(links)


class Hinted(web.Response):
    """A stored answer that sends a 103 of its preload links first (``hints``), when the
    client may get one (``relays_to``) and nothing of the answer has gone yet."""

    def __init__(self, *, hints: Headers, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._hints = hints

    async def prepare(self, request: web.BaseRequest) -> AbstractStreamWriter | None:
        if not self.prepared and relays_to(request) and not head_started(request.writer):
            with contextlib.suppress(ValueError):
                await send(request, 103, self._hints)
        return await super().prepare(request)
