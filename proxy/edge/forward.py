"""The forwarded path of the edge (edge/handler.py): requests the cache must not answer.

Every method but GET and HEAD, and the requests the rules send past the cache, go to the
origin as they are, and the answer is streamed back. After an unsafe method that did not
fail, the URL's entries are invalidated, and those of the URLs its Location and
Content-Location name on the same host (RFC 9111 §4.4). A request body is read before the
origin is asked, up to
edge.request_buffer_bytes, and a longer one is streamed within the domain's share of
uploads (edge/bodies.py).

``relay`` sends an origin's response on to the client: for this path, and for the
cacheable path's responses that are not stored.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import InitVar, dataclass

from aiohttp import hdrs, web
from multidict import CIMultiDict

from proxy.config.model import Config, DomainConfig
from proxy.core.cache.invalidation import invalidation_targets
from proxy.core.http.headers import cache_status, from_origin
from proxy.core.http.requests import SAFE_METHODS
from proxy.core.observe.traffic import ERROR, outcome_of_fwd
from proxy.core.purge.purges import tag_header_names
from proxy.edge import answer_budget, bodies, interim, origin_asks, respond
from proxy.edge.aiohttp_adapter import answer_and_close, send_continue
from proxy.edge.origin import OriginResponse
from proxy.errors import OriginError, RequestBodyError, RequestBodyTimeout
from proxy.observe.telemetry import Telemetry
from proxy.store.base import Store

# One request to a domain's origin (Edge._ask_origin): the domain, method, target, header
# fields and body.
AskOrigin = Callable[
    [DomainConfig, str, str, list[tuple[str, str]], bytes | bodies.Streamed | None],
    AbstractAsyncContextManager[OriginResponse],
]


@dataclass(eq=False, kw_only=True)
class Forwarder:
    """Sends the requests the cache does not answer to their origin, and their answers back:
    ``config`` gives its domains and limits, the rest is the edge's (edge/handler.py)."""

    config: InitVar[Config]
    name: str  # the cache's, in Cache-Status
    store: Store
    telemetry: Telemetry
    ask_origin: AskOrigin

    def __post_init__(self, config: Config) -> None:
        self._uploads = bodies.UploadShares({})
        self.reconfigure(config)

    def reconfigure(self, config: Config) -> None:
        """The config's domains and limits; a reload's too (proxy/process/reload.py)."""
        self._uploads.reconfigure({d.name: d.origin_connections for d in config.domains})
        self._limits(config)

    def _limits(self, config: Config) -> None:
        edge, cache = config.edge_role()
        self._via = edge.via
        self._bodies = bodies.BodyLimits.of(config)
        # A relayed body is read ahead this far before anything is sent: whole when it ends
        # within it, else streamed at the client's pace (decision 0046).
        self._read_ahead = min(cache.max_object_bytes, edge.answer_buffer_bytes)

    async def forward(
        self,
        request: web.BaseRequest,
        config: DomainConfig,
        target: str,
        headers: list[tuple[str, str]],
        fwd: str,
        detail: str | None = None,
    ) -> web.StreamResponse:
        """Ask the origin, with ``headers`` (the request's, as the origin gets them), and
        answer with what it says; Cache-Status says ``fwd`` (RFC 9211) and ``detail``."""
        status = cache_status(self.name, fwd=fwd, detail=detail)
        if request.method != "HEAD" and answer_budget.blocked(request):
            # Its answer would be refused: the origin is not asked (edge/answer_budget.py).
            self.telemetry.request(config.name, outcome_of_fwd(fwd))
            refused = respond.over_budget(status)
            if request.body_exists:
                refused.force_close()  # its body is left unread
            return refused
        if not request.body_exists:
            return await self._send(request, config, target, headers, None, status, fwd)
        try:
            if _expects_continue(request):
                # The body is read here, before the origin is asked, so the 100 is ours to
                # send, and the origin gets no Expect (RFC 9110 §10.1.1).
                await send_continue(request)
                headers = [(n, v) for n, v in headers if n.lower() != "expect"]
            # What it buffers stays counted in the process's budget until this is answered.
            async with bodies.BodyReader(request, self._bodies) as body:
                data, complete = await body.buffer()
                if complete:
                    return await self._send(request, config, target, headers, data, status, fwd)
                with self._uploads.taken(config.name, request.remote or ""):
                    streamed = body.streamed(data)
                    return await self._send(request, config, target, headers, streamed, status, fwd)
        except bodies.UploadsBusy as exc:
            self.telemetry.origin_busy(config.name, "uploads")
            return self._refused(config, exc, status)
        except RequestBodyError as exc:
            response = self._refused(config, exc, status)
            if isinstance(exc, RequestBodyTimeout):
                # Nothing came for body_timeout: close now, not after lingering on the body.
                self.telemetry.body_timeout(config.name)
                with contextlib.suppress(ConnectionError):
                    await answer_and_close(request, response)
            return response

    def _refused(
        self, config: DomainConfig, exc: RequestBodyError | OriginError, status: str
    ) -> web.StreamResponse:
        """The request's body was not (all) read: answer, and keep the connection no longer
        (aiohttp reads and drops what is still coming, for at most lingering_time)."""
        self.telemetry.request(config.name, ERROR)
        response = respond.failed(exc, cache_status=status)
        response.force_close()
        return response

    async def _send(
        self,
        request: web.BaseRequest,
        config: DomainConfig,
        target: str,
        headers: list[tuple[str, str]],
        data: bytes | bodies.Streamed | None,
        status: str,
        fwd: str,
    ) -> web.StreamResponse:
        """Ask the origin, holding a slot of the request's connection and client address
        (edge/origin_asks.py, decision 0057): one that waited for its slot may find its
        answers' budget spent by then, and is refused before the origin is asked."""
        async with origin_asks.asking(request):
            if request.method != "HEAD" and answer_budget.blocked(request):
                self.telemetry.request(config.name, outcome_of_fwd(fwd))
                refused = respond.over_budget(status)
                if isinstance(data, bodies.Streamed):
                    refused.force_close()  # the rest of its body is unread
                return refused
            return await self._ask(request, config, target, headers, data, status, fwd)

    async def _ask(
        self,
        request: web.BaseRequest,
        config: DomainConfig,
        target: str,
        headers: list[tuple[str, str]],
        data: bytes | bodies.Streamed | None,
        status: str,
        fwd: str,
    ) -> web.StreamResponse:
        tags = tag_header_names(config.tag_headers)
        try:
            with interim.relayed_to(request, via=self._via, tag_headers=tags):
                async with self.ask_origin(config, request.method, target, headers, data) as origin:
                    if request.method not in SAFE_METHODS:
                        for stale_target in invalidation_targets(
                            domain=config.name,
                            target=target,
                            status=origin.status,
                            response_headers=origin.headers,
                        ):
                            await self.store.invalidate(config.name, stale_target)
                    response = await relay(
                        request, origin, status, via=self._via, read_ahead=self._read_ahead
                    )
                    self.telemetry.request(config.name, outcome_of_fwd(fwd))
                    return response
        except OriginError as exc:
            self.telemetry.request(config.name, ERROR)
            response = respond.origin_failed(exc, cache_status=status)
            if isinstance(data, bodies.Streamed):
                response.force_close()  # the rest of the body is unread
            return response


async def relay(
    request: web.BaseRequest,
    origin: OriginResponse,
    status: str,
    *,
    via: str,
    read_ahead: int,
    prefix: bytes | None = None,
) -> web.StreamResponse:
    """Send the origin's response on: whole when its body ends within ``read_ahead`` bytes
    (``prefix``: what was read of it already), else streamed, each piece read once the client
    has taken the last (aiohttp's write waits while the transport's buffer is full), so what
    a client that does not read holds is the read-ahead and the buffers of two sockets, for
    send_timeout at most (decision 0046). Either is charged to the request's connection and
    client address until it is sent (edge/answer_budget.py, decision 0051): past their
    budget it is refused 503 before anything is sent. Raises OriginError only before
    anything was sent; after that, a broken origin aborts the client's connection."""
    if origin.status < 200:
        # A switch (101) or other interim answer as the final one, to a request that asked for
        # no upgrade (or was not tunnelled: core/http/upgrade.py): not HTTP the client can use.
        origin.close()
        respond.log.warning("origin answered %d to a request not tunnelled", origin.status)
        return respond.text(502, "502 Bad Gateway: the origin switched protocols unasked")
    headers = respond.relayed_headers(
        from_origin(origin.headers), via=via, status=status, tags=origin.tags
    )
    if request.method == "HEAD" or origin.status in (204, 304):
        origin.close()
        response = web.Response(status=origin.status, reason=origin.reason, headers=headers)
        if request.method == "HEAD" and origin.content_length is not None:
            response.headers["Content-Length"] = str(origin.content_length)
        return response
    held = answer_budget.charge(request)
    # An answer known to stream (its Content-Length, or a fill's prefix) is charged before a
    # byte of it is read: past the budget it is refused unread.
    length = origin.content_length
    streams = prefix is not None or (length is not None and length > read_ahead)
    if held is not None and streams and not held.grow(read_ahead + answer_budget.STREAM_HELD):
        origin.close()
        origin_asks.answered(request)
        return respond.over_budget(status)
    if prefix is None:
        prefix, complete = await origin.read_up_to(read_ahead)
        # Its answer is charged (below) from here: the request's slot comes back.
        origin_asks.answered(request)
        if complete:
            if held is None:
                return web.Response(
                    status=origin.status, reason=origin.reason, headers=headers, body=prefix
                )
            if not held.size and not held.grow(len(prefix)):
                return respond.over_budget(status)
            return answer_budget.HeldResponse(
                held, status=origin.status, reason=origin.reason, headers=headers, body=prefix
            )
    # Streamed: the read-ahead and the sockets' buffers (a fill's prefix is its own budget's).
    stream_held = read_ahead + answer_budget.STREAM_HELD
    origin_asks.answered(request)  # a fill's prefix: charged from here
    if held is not None and not held.size and not held.grow(stream_held):
        origin.close()
        return respond.over_budget(status)
    try:
        return await _stream(request, origin, headers, prefix)
    finally:
        if held is not None:
            held.give_back()


async def _stream(
    request: web.BaseRequest, origin: OriginResponse, headers: CIMultiDict[str], prefix: bytes
) -> web.StreamResponse:
    stream = web.StreamResponse(status=origin.status, reason=origin.reason, headers=headers)
    if origin.content_length is not None:
        stream.content_length = origin.content_length
    await stream.prepare(request)
    try:
        await stream.write(prefix)
        while chunk := await origin.read_chunk():
            await stream.write(chunk)
    except OriginError as exc:
        respond.log.warning("%s (after the response started; connection aborted)", exc)
        origin.close()
        if request.transport is not None:
            request.transport.abort()
        return stream
    await stream.write_eof()
    return stream


def _expects_continue(request: web.BaseRequest) -> bool:
    expect = request.headers.get(hdrs.EXPECT)
    return expect is not None and expect.lower() == "100-continue" and request.version >= (1, 1)
