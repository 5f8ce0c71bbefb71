"""The edge request handler: edge → core → store → (origin) → core → store → edge.

``Edge.handle`` routes by Host, then takes one of two paths:

- cacheable (GET or HEAD without a body or Range): look up, then serve a fresh entry, or fill
  it from the origin under request collapsing (``fill``), revalidating a stale one;
- forwarded (every other method, and requests the cache must not answer): sent to the origin
  as they are, streamed back, and for unsafe methods the URL's entries invalidated
  (RFC 9111 §4.4).

A response body is read into memory only up to cache.max_object_bytes. One that ends within
that is sent whole (so a framing error found while reading it still becomes a clean 502);
a larger one is streamed through, never stored, and a framing error in it aborts the client
connection instead of sending a truncated body that looks complete.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import replace

import aiohttp
from aiohttp import hdrs, web
from aiohttp.http import HttpVersion11

from proxy.config import Config, DomainConfig
from proxy.core.domains import host_from_header
from proxy.core.entry import CacheKey, Headers, StoredResponse
from proxy.core.headers import cache_status, from_origin, to_origin
from proxy.core.keys import request_target
from proxy.core.policy import (
    DontStore,
    Revalidate,
    Serve,
    assess_response,
    conditional_headers,
    decide_lookup,
    invalidation_targets,
    may_serve_stale,
    merge_not_modified,
    only_if_cached,
    refreshed,
    select_variant,
    serve_while_revalidating,
)
from proxy.core.requests import CACHEABLE_METHODS, SAFE_METHODS, may_use_cache, plain_get
from proxy.core.targeted import surrogate_capability
from proxy.core.traffic import ERROR, HIT, MISS, outcome_of_fwd
from proxy.edge import respond
from proxy.edge.flights import Flight, FlightResult, Flights
from proxy.edge.origin import OriginResponse, origin_request
from proxy.errors import OriginError
from proxy.store.base import Store
from proxy.telemetry import Telemetry

HOST_SPELLINGS = 256


class Edge:
    def __init__(
        self,
        *,
        config: Config,
        store: Store,
        session: aiohttp.ClientSession,
        clock: Callable[[], float] = time.time,
        telemetry: Telemetry | None = None,
    ) -> None:
        self._domains: Mapping[str, DomainConfig] = config.by_name
        self._name = config.cache.name
        self._capability = surrogate_capability(config.cache.name)
        self._via = config.edge.via
        self._max_object = config.cache.max_object_bytes
        self._store = store
        self._session = session
        self._clock = clock
        self.flights = Flights()
        self._telemetry = telemetry if telemetry is not None else Telemetry()
        self._peek = store.peek
        self._hit_status = cache_status(self._name, hit=True)
        # Host header spellings already routed to a domain (bounded: see _route).
        self._hosts: dict[str, DomainConfig] = {}
        self._background: set[asyncio.Task[web.StreamResponse]] = set()

    def _route(self, host: str | None) -> DomainConfig | None:
        """The domain a Host header names, remembered per exact spelling. Only spellings of
        configured domains are remembered, and only the first HOST_SPELLINGS of them, so junk
        or case-shuffled Host values cannot grow the table."""
        domain = host_from_header(host) if host else None
        config = self._domains.get(domain) if domain else None
        if config is not None and host is not None and len(self._hosts) < HOST_SPELLINGS:
            self._hosts[host] = config
        return config

    def _ready(self, entry: StoredResponse) -> StoredResponse:
        """The entry as it is stored, with its hit fields precomputed (``respond.prepared``).
        An entry that must be revalidated on every use (no-cache) or chosen by Vary never gets
        them, so the fast path never serves it."""
        return respond.prepared(entry, via=self._via, status=self._hit_status)

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        headers = request.headers
        host = headers.get(hdrs.HOST)
        config = self._hosts.get(host) if host is not None else None
        if config is None:
            config = self._route(host)
            if config is None:
                return respond.text(
                    421, "421 Misdirected Request: this edge does not serve that host"
                )
        # The fresh-hit fast path: a plain GET (core.requests) on an HTTP/1.1 keep-alive
        # connection, for a stored response without Vary or no-cache (those have no hit
        # lines), while it is fresh (StoredResponse.fresh_age): the answer the full rules
        # below would give, written from its precomputed lines plus Age (respond.Hit).
        # Anything else takes the full path. Measured in benchmarks/README.md.
        if (
            request.version == HttpVersion11
            and request.keep_alive
            and plain_get(request.method, headers, has_body=request.body_exists)
        ):
            raw = request.raw_path
            entry = self._peek(config.name, raw) if raw[:1] == "/" else None
            if entry is not None and entry.hit_lines:
                now = self._clock()
                age = entry.fresh_age(now)
                if age is not None:
                    self._telemetry.request_at(config.name, HIT, now)
                    age_line = b"Age: %d\r\n\r\n" % age
                    return respond.Hit((*entry.hit_lines, age_line, entry.body))
        target = request_target(request.raw_path, config.name)
        if target is None:
            return respond.text(400, "400 Bad Request: the request-target does not name this host")
        if may_use_cache(request.method, headers, has_body=request.body_exists):
            return await self._cacheable(request, config, target)
        fwd = "method" if request.method not in CACHEABLE_METHODS else "bypass"
        return await self._forward(request, config, target, fwd)

    # -- the cacheable path ----------------------------------------------------------------------

    async def _cacheable(
        self, request: web.BaseRequest, config: DomainConfig, target: str
    ) -> web.StreamResponse:
        now = self._clock()
        found = await self._store.lookup(config.name, target)
        key = found.key
        decision = decide_lookup(found.variants, request.headers, now)
        if isinstance(decision, Serve):
            self._telemetry.request(config.name, HIT)
            return self._from_stored(request, decision.response, now, self._hit_status)
        if only_if_cached(request.headers):
            self._telemetry.request(config.name, MISS)
            status = cache_status(self._name, fwd="miss", detail="only-if-cached")
            return respond.text(504, "504 Gateway Timeout: not in cache", cache_status=status)
        if isinstance(decision, Revalidate):
            stale: StoredResponse | None = decision.response
            fwd = "stale"
            if serve_while_revalidating(decision.response, request.headers, now):
                self._revalidate_later(request, config, key, decision.response)
                self._telemetry.request(config.name, HIT)
                status = cache_status(self._name, hit=True, detail="stale-while-revalidate")
                return self._from_stored(request, decision.response, now, status)
        else:
            stale, fwd = None, decision.reason
        if request.method == "HEAD" and stale is None:
            return await self._forward(request, config, target, fwd)
        flight, leading = self.flights.join(key)
        if leading:
            return await self._fill(request, config, key, stale, fwd, flight)
        result = await flight.wait(config.connect_timeout + config.read_timeout)
        if isinstance(result, OriginError):
            self._telemetry.request(config.name, ERROR)
            return respond.origin_failed(result, cache_status=cache_status(self._name, fwd=fwd))
        if isinstance(result, StoredResponse) and select_variant([result], request.headers):
            self._telemetry.request(config.name, outcome_of_fwd(fwd))
            status = cache_status(self._name, fwd=fwd, collapsed=True)
            return self._from_stored(request, result, self._clock(), status)
        # The leader's answer was not shareable: ask the origin ourselves, uncollapsed.
        return await self._fill(request, config, key, stale, fwd, None)

    async def _fill(
        self,
        request: web.BaseRequest,
        config: DomainConfig,
        key: CacheKey,
        stale: StoredResponse | None,
        fwd: str,
        flight: Flight | None,
        *,
        background: bool = False,
    ) -> web.StreamResponse:
        """Fetch from the origin, store what may be stored, and finish the flight. In the
        ``background`` (stale-while-revalidate) the client has had its answer: nothing is
        relayed to it, whatever the origin says."""
        result: FlightResult = None
        target = key[2]
        headers = self._origin_headers(request, config, cacheable=True)
        if stale is not None:
            headers += conditional_headers(stale)
        try:
            request_time = self._clock()
            async with origin_request(
                self._session, config, "GET", target, headers, telemetry=self._telemetry
            ) as origin:
                response_time = self._clock()
                if stale is not None and origin.status == 304:
                    entry, stored = await self._refresh(
                        request, config, key, stale, origin, request_time, response_time
                    )
                    result = entry
                    status = cache_status(self._name, fwd=fwd, stored=stored)
                    return self._from_stored(request, entry, response_time, status)
                if stale is not None and may_serve_stale(
                    stale,
                    request.headers,
                    response_time,
                    status=origin.status,
                    default_window=config.stale_if_error,
                ):
                    # The origin's 5xx, and the response allows stale-if-error (RFC 5861 §4).
                    origin.close()
                    result = stale
                    status = cache_status(self._name, fwd=fwd, detail="stale-if-error")
                    return self._from_stored(request, stale, response_time, status)
                verdict_headers = from_origin(origin.headers)
                verdict = assess_response(
                    method="GET",
                    target=target,
                    request=request.headers,
                    status=origin.status,
                    reason=origin.reason,
                    headers=verdict_headers,
                    request_time=request_time,
                    response_time=response_time,
                    heuristic=config.heuristic_freshness,
                    surrogate_name=self._name,
                )
                if isinstance(verdict, DontStore):
                    self._land(key, flight, None)
                    status = cache_status(self._name, fwd=fwd, detail=verdict.reason)
                    return await self._relay(request, origin, status, background=background)
                length = origin.content_length
                if length is not None and length > self._max_object:
                    self._land(key, flight, None)
                    status = cache_status(self._name, fwd=fwd, detail="too-large")
                    return await self._relay(request, origin, status, background=background)
                body, complete = await origin.read_up_to(self._max_object)
                if not complete:
                    self._land(key, flight, None)
                    status = cache_status(self._name, fwd=fwd, detail="too-large")
                    return await self._relay(
                        request, origin, status, prefix=body, background=background
                    )
                entry = self._ready(verdict.with_body(body, target))
                stored = await self._store.put(key, entry)
                result = entry
                status = cache_status(self._name, fwd=fwd, stored=stored)
                # This client gets the origin's fields in full; only the stored copy drops
                # those that no-cache="..." or private="..." name (§5.2.2.4, §5.2.2.7).
                return self._from_stored(
                    request, entry, response_time, status, headers=verdict_headers
                )
        except OriginError as exc:
            now = self._clock()
            if stale is not None and may_serve_stale(
                stale, request.headers, now, status=None, default_window=config.stale_if_error
            ):
                # Disconnected from the origin: a stale copy beats an error (RFC 9111 §4.2.4).
                respond.log.warning("%s; served a stale copy", exc)
                result = stale
                status = cache_status(self._name, fwd=fwd, detail="stale-if-error")
                return self._from_stored(request, stale, now, status)
            result = exc
            return respond.origin_failed(exc, cache_status=cache_status(self._name, fwd=fwd))
        finally:
            self._land(key, flight, result)
            outcome = ERROR if isinstance(result, OriginError) else outcome_of_fwd(fwd)
            self._telemetry.request(config.name, outcome)

    async def _refresh(
        self,
        request: web.BaseRequest,
        config: DomainConfig,
        key: CacheKey,
        stale: StoredResponse,
        origin: OriginResponse,
        request_time: float,
        response_time: float,
    ) -> tuple[StoredResponse, bool]:
        """A 304 answered the revalidation: update the stored headers (RFC 9111 §4.3.4)."""
        merged = merge_not_modified(stale, from_origin(origin.headers))
        verdict = assess_response(
            method="GET",
            target=key[2],
            request=request.headers,
            status=stale.status,
            reason=stale.reason,
            headers=merged,
            request_time=request_time,
            response_time=response_time,
            heuristic=config.heuristic_freshness,
            surrogate_name=self._name,
        )
        if isinstance(verdict, DontStore):
            # The origin now forbids storing it: serve the refreshed response once, keep nothing.
            await self._store.invalidate(config.name, key[2])
            return replace(stale, headers=merged), False
        entry = self._ready(refreshed(stale, verdict))
        return entry, await self._store.put(key, entry)

    def _revalidate_later(
        self, request: web.BaseRequest, config: DomainConfig, key: CacheKey, stale: StoredResponse
    ) -> None:
        """Revalidate in the background (RFC 5861 §3), unless a request for the key is already
        at the origin. The task is kept until it ends and cancelled by ``close``."""
        flight, leading = self.flights.join(key)
        if not leading:
            return
        task = asyncio.create_task(
            self._fill(request, config, key, stale, "stale", flight, background=True),
            name="revalidate",
        )
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def close(self) -> None:
        """Cancel background revalidations still running (at shutdown)."""
        tasks = list(self._background)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _land(self, key: CacheKey, flight: Flight | None, result: FlightResult) -> None:
        if flight is not None:
            self.flights.land(key, flight, result)

    # -- the forwarded path ------------------------------------------------------------------------

    async def _forward(
        self, request: web.BaseRequest, config: DomainConfig, target: str, fwd: str
    ) -> web.StreamResponse:
        headers = self._origin_headers(request, config, cacheable=False)
        data = request.content if request.body_exists else None
        status = cache_status(self._name, fwd=fwd)
        try:
            async with origin_request(
                self._session,
                config,
                request.method,
                target,
                headers,
                data,
                telemetry=self._telemetry,
            ) as origin:
                if request.method not in SAFE_METHODS:
                    for stale_target in invalidation_targets(
                        domain=config.name,
                        target=target,
                        status=origin.status,
                        response_headers=origin.headers,
                    ):
                        await self._store.invalidate(config.name, stale_target)
                response = await self._relay(request, origin, status)
                self._telemetry.request(config.name, outcome_of_fwd(fwd))
                return response
        except OriginError as exc:
            self._telemetry.request(config.name, ERROR)
            return respond.origin_failed(exc, cache_status=status)

    async def _relay(
        self,
        request: web.BaseRequest,
        origin: OriginResponse,
        status: str,
        prefix: bytes | None = None,
        *,
        background: bool = False,
    ) -> web.StreamResponse:
        """Send the origin's response on. Raises OriginError only before anything was sent.
        In the background there is no one to send it to: the origin response is dropped."""
        if background:
            origin.close()
            return web.Response(status=origin.status)
        headers = respond.relayed_headers(from_origin(origin.headers), via=self._via, status=status)
        if request.method == "HEAD" or origin.status in (204, 304):
            origin.close()
            response = web.Response(status=origin.status, reason=origin.reason, headers=headers)
            if request.method == "HEAD" and origin.content_length is not None:
                response.headers["Content-Length"] = str(origin.content_length)
            return response
        if prefix is None:
            prefix, complete = await origin.read_up_to(self._max_object)
            if complete:
                return web.Response(
                    status=origin.status, reason=origin.reason, headers=headers, body=prefix
                )
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

    # -- helpers ---------------------------------------------------------------------------

    def _origin_headers(
        self, request: web.BaseRequest, config: DomainConfig, *, cacheable: bool
    ) -> list[tuple[str, str]]:
        headers = to_origin(
            request.headers.items(),
            domain=config.name,
            client_address=request.remote or "",
            scheme=request.scheme,
            via=self._via,
            cacheable=cacheable,
        )
        headers.append(("Surrogate-Capability", self._capability))
        return headers

    def _from_stored(
        self,
        request: web.BaseRequest,
        entry: StoredResponse,
        now: float,
        status: str,
        *,
        headers: Headers | None = None,
    ) -> web.Response:
        return respond.from_stored(
            request, entry, now=now, via=self._via, status=status, headers=headers
        )
