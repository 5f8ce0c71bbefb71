"""The edge request handler: edge → core → store → (origin) → core → store → edge.

``Edge.handle`` routes by Host, then takes one of two paths:

- cacheable (GET or HEAD without a body): look up, then serve a fresh entry, or fill it from
  the origin under request collapsing (``_fill``; what the origin's answer becomes is
  edge/fill.py's), revalidating a stale one. A Range GET is answered from the whole
  response, and on a miss a range of part of an object is forwarded (edge/ranges.py);
- forwarded (every other method, and requests the cache must not answer): sent to the origin
  as they are, streamed back, and for unsafe methods the URL's entries invalidated
  (RFC 9111 §4.4); edge/forward.py, which also relays the cacheable path's responses that
  are not stored;
- tunnelled (a request to switch protocols, as WebSocket's: core/upgrade.py): passed to the
  origin both ways, never cached (edge/tunnel.py).

A response body is read into memory only up to cache.max_object_bytes. One that ends within
that is sent whole (so a framing error found while reading it still becomes a clean 502);
a larger one is streamed through, never stored, and a framing error in it aborts the client
connection instead of sending a truncated body that looks complete.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from time import perf_counter

import aiohttp
from aiohttp import hdrs, web
from aiohttp.http import HttpVersion11
from multidict import CIMultiDictProxy

from proxy.config.model import Config, DomainConfig
from proxy.core.cache.entry import CacheKey, StoredResponse
from proxy.core.cache.keys import cache_target, request_target
from proxy.core.cache.policy import (
    Revalidate,
    Serve,
    decide_lookup,
    only_if_cached,
    select_variant,
    serve_while_revalidating,
)
from proxy.core.cache.rules import Applied, normalised_target
from proxy.core.cache.trace import Held
from proxy.core.domains import host_from_header
from proxy.core.http.forwarded import request_client
from proxy.core.http.headers import cache_status
from proxy.core.http.lane import Fields, fast_hit
from proxy.core.http.requests import CACHEABLE_METHODS, SAFE_METHODS, may_use_cache
from proxy.core.http.upgrade import tunnel_protocols
from proxy.core.observe.traffic import ERROR, HIT, MISS, outcome_of_fwd
from proxy.edge import answer_budget, origin_asks, ranges, respond
from proxy.edge.access_log import trusted_proxies
from proxy.edge.aiohttp_adapter import request_head
from proxy.edge.aiohttp_h2 import HTTP2
from proxy.edge.cache_rules import bypass_reason, fast_under_rules
from proxy.edge.disk_hits import DiskHits, FastCounts
from proxy.edge.fill import Fill, Filled, Filler, coding_of
from proxy.edge.fill_budget import AnswerCollector
from proxy.edge.flights import Flight, FlightResult, Flights
from proxy.edge.forward import Forwarder
from proxy.edge.interim import EARLY_HINTS
from proxy.edge.messages import Messages
from proxy.edge.node_fills import (
    LOCK_TIMEOUT_DETAIL,
    WAIT_LIMIT,
    Renewal,
    wait_for_worker,
)
from proxy.edge.origin import REQUEST_STARTED
from proxy.edge.peer_fill import (
    CDN_LOOP,
    PeerAnswers,
    PeerFills,
    PeerView,
    labelled,
    may_follow,
    position_of,
)
from proxy.edge.refusals import Refusals, with_refusals
from proxy.edge.tls import EdgeTls
from proxy.edge.tunnel import Tunnels
from proxy.edge.upstreams import Upstreams
from proxy.errors import OriginError
from proxy.observe.telemetry import PREFIX, Telemetry
from proxy.store.base import Store
from proxy.store.tiered import TieredStore

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
        peers: PeerView | None = None,
    ) -> None:
        self._domains: Mapping[str, DomainConfig] = config.by_name
        edge, cache = config.edge_role()
        self._name = cache.name
        self._via = edge.via
        self._trusted = trusted_proxies(config)  # whose X-Forwarded-For is believed
        # Whether a request can be https (a TLS listener, or a proxy believed to say so):
        # read per request, so a plain-HTTP edge skips the scheme (core/keys.py).
        self._tls_listener = edge.tls_listen is not None
        self._keyed_by_scheme = self._tls_listener or bool(self._trusted)
        self._upgrades = edge.upgrade_protocols
        self._store = store
        self._session = session
        self._clock = clock
        self.flights = Flights()
        # Keys whose last answer was not stored: their misses skip the waiting list, and a
        # trace names the reason (hit-for-miss, edge/refusals.py).
        self.refusals = Refusals()
        # One fill per key for the node, across workers (issue 23 §2): the shared tier's
        # markers, and the markers this process holds, by key. A fleet's store wraps its own.
        local = getattr(store, "local", store)
        self._tiered = local if isinstance(local, TieredStore) else None
        self._lock_timeout = cache.lock_timeout
        self._marked: dict[CacheKey, Renewal] = {}
        self._telemetry = telemetry if telemetry is not None else Telemetry()
        self._peek = store.peek
        self._figures = FastCounts(self._telemetry.responses)  # each domain's, for fast hits
        # Hits read from the shared tier (edge/disk_hits.py), by the fast path unless fenced.
        self._disk, self._disk_fast = DiskHits.of(
            store, config, self._telemetry, self._figures, clock, lambda: self._domains
        )
        self._hit_status = cache_status(self._name, hit=True)
        self.lane_answered = 0  # hits the HTTP/1.1 hit lane answered (decision 0050)
        # A hit from the node's shared tier (RFC 9211 §2.8: detail is the cache's own text).
        self._disk_hit_status = cache_status(self._name, hit=True, detail="disk")
        # Host header spellings already routed to a domain (bounded: see _route).
        self._hosts: dict[str, DomainConfig] = {}
        self._background: set[asyncio.Task[web.StreamResponse]] = set()
        # Certificates for the TLS listener and how each https:// origin is verified.
        self.tls = EdgeTls(config)
        # Each domain's origin servers: choice, retries, health probes (decision 0034).
        self.upstreams = Upstreams(config, session=session, telemetry=self._telemetry, tls=self.tls)
        self.upstreams.start()
        self.tunnels = Tunnels(
            config=config, telemetry=self._telemetry, upstreams=self.upstreams, tls=self.tls
        )
        # Peer fills (decision 0047): only a fleet member's edge with [fleet] peer_fill.
        fleet = config.fleet
        self._peers = peers if fleet is not None and fleet.peer_fill else None
        self.peer_fills: PeerFills | None  # and the owner's side: set by _paths
        self._filler, self._forwarder = self._paths(config)
        self._answers = AnswerCollector(
            self._filler.budget, self._filler.compressions, PREFIX, lambda: self.lane_answered
        )  # decision 0046; the lane's answers, 0050
        self._telemetry.registry.register(self._answers)
        self._telemetry.answers = self._answers  # an edge worker's report (decision 0051)

    def _paths(self, config: Config) -> tuple[Filler, Forwarder]:
        """The fill (edge/fill.py) and forwarded (edge/forward.py) paths, which ask the origin
        through ``_messages``; with peer fills, a fill asks the key's owner first, and a
        peer's request is answered labelled (edge/peer_fill.py)."""
        self._messages = messages = Messages(
            name=self._name, via=self._via, trusted=self._trusted, upstreams=self.upstreams
        )
        self._from_stored = messages.from_stored
        ask_fill = messages.ask
        self.peer_fills = None
        if self._peers is not None:
            assert config.fleet is not None
            self.peer_fills = PeerFills(
                view=self._peers,
                name=self._name,
                timeout=config.fleet.peer_timeout,
                ask_origin=messages.ask,
                origin_bytes=lambda: self.upstreams.received,
                hold=config.fleet.lease,
                written=None if self._tiered is None else self._tiered.tier.purges.fleet_written,
            )
            ask_fill = self.peer_fills.ask
            self._from_stored = labelled(messages.from_stored)
            answers = PeerAnswers(  # the owner's side: set once, so with peer fills off the
                view=self._peers,  # hit path is the same code
                name=self._name,
                plain=self.handle,
                route=self._route,
                full=self._full,
                https=self._https,
                counts=self.peer_fills,
            )
            self.handle, self._https = answers.handle, answers.https  # type: ignore[method-assign]
        filler = Filler(
            name=self._name,
            via=self._via,
            store=self._store,
            clock=self._clock,
            max_object=config.edge_role()[1].max_object_bytes,
            read_ahead=config.edge_role()[0].answer_buffer_bytes,
            fill_budget=config.edge_role()[0].fill_buffer_total_bytes,
            compress_queue=config.edge_role()[0].compress_queue_bytes,
            ask_origin=ask_fill,
            origin_headers=messages.headers,
            from_stored=self._from_stored,
            ready=self._ready,
            end_flight=self._end_flight,
            refusals=self.refusals,
        )
        forwarder = Forwarder(
            config=config,
            name=self._name,
            store=self._store,
            telemetry=self._telemetry,
            ask_origin=messages.ask,
        )
        return filler, forwarder

    def reconfigure(self, config: Config) -> None:
        """Apply a reloaded config (proxy/process/reload.py): the domains, and the limits that
        proxy/config/diff.py names as reloadable. Synchronous, so no request sees half of it.
        Requests already routed finish with the DomainConfig they took; the routing memo
        starts again. The caller clears the domains removed or re-pointed."""
        edge, cache = config.edge_role()
        # First, as it may refuse (ConfigError: a certificate unreadable since the file was
        # checked) before anything has changed.
        self.tls.reconfigure(config)
        self._trusted = self._messages.trusted = trusted_proxies(config)
        self._keyed_by_scheme = self._tls_listener or bool(self._trusted)
        self._upgrades = edge.upgrade_protocols
        self._domains = config.by_name
        self._hosts = {}
        self.upstreams.reconfigure(config)
        self._filler.max_object = cache.max_object_bytes
        self._filler.read_ahead = edge.answer_buffer_bytes
        self._filler.budget.limit = edge.fill_buffer_total_bytes
        self._filler.compressions.max_bytes = edge.compress_queue_bytes
        self.tunnels.reconfigure(config)
        self._forwarder.reconfigure(config)

    def _route(self, host: str | None) -> DomainConfig | None:
        """The domain a Host header names, remembered per exact spelling. Only spellings of
        configured domains are remembered, and only the first HOST_SPELLINGS of them, so junk
        or case-shuffled Host values cannot grow the table."""
        domain = host_from_header(host) if host else None
        config = self._domains.get(domain) if domain else None
        if config is not None and host is not None and len(self._hosts) < HOST_SPELLINGS:
            self._hosts[host] = config
        return config

    def _ready(self, entry: StoredResponse, rules: Applied | None = None) -> StoredResponse:
        """The entry as it is stored, with its hit fields precomputed (``respond.prepared``).
        An entry that must be revalidated on every use (no-cache) or chosen by Vary never gets
        them, so the fast path never serves it; nor one whose rules rewrite its answer's
        Cache-Control (browser_ttl). The rules' names are in its Cache-Status."""
        if rules is None:
            return respond.prepared(entry, via=self._via, status=self._hit_status)
        if rules.browser_ttl is not None:
            return entry
        status = cache_status(self._name, hit=True, detail=rules.detail)
        return respond.prepared(entry, via=self._via, status=status)

    def _https(self, request: web.BaseRequest) -> bool:
        """Whether the request is keyed as https (core/keys.py): the scheme the origin is
        told, the listener's or what a trusted proxy says (X-Forwarded-Proto, Forwarded)."""
        if not self._keyed_by_scheme:
            return False  # no TLS listener, no trusted proxy: every request is http
        return request_client(self._trusted, request).scheme == "https"

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        head = request_head(request)  # its fields, not the request's reified properties
        headers = head.headers
        host = headers.get(hdrs.HOST)
        config = self._hosts.get(host) if host is not None else None
        if config is None:
            config = self._route(host)
            if config is None:
                return respond.text(
                    421, "421 Misdirected Request: this edge does not serve that host"
                )
        # The fresh-hit fast path: a plain GET (core.requests) on an HTTP/1.1 keep-alive
        # connection or an HTTP/2 stream (which sends the Hit as HEADERS and DATA from the
        # same parts: proxy/edge/h2/stream.py, decision 0036), for a stored response without
        # Vary or no-cache (those have no hit lines), while it is fresh
        # (StoredResponse.fresh_age): the answer the full rules below would give, written from
        # its precomputed lines plus Age (respond.Hit); from the memory tier, else the shared
        # tier (edge/disk_hits.py). Anything else takes the full path (benchmarks/README.md).
        if fast_hit(
            head.method,
            headers,
            keep_alive=(head.version == HttpVersion11 and not head.should_close)
            or head.version == HTTP2,
            has_body=request.body_exists,
            early_hints=config.early_hints,
        ) and (config.rules is None or fast_under_rules(config.rules, head.path, headers)):
            started = perf_counter()
            raw = head.path
            origin_form = raw[:1] == "/"  # what core.keys needs of a target to key it
            if self._keyed_by_scheme and origin_form:
                raw = cache_target(raw, self._https(request))
            entry = self._peek(config.name, raw) if origin_form else None
            if entry is not None and entry.hit_lines:
                now = self._clock()
                age = entry.fresh_age(now)
                if age is not None:
                    self._telemetry.request_at(config.name, HIT, now)
                    parts = (*entry.hit_lines, b"Age: %d\r\n\r\n" % age, entry.body)
                    return respond.Hit(parts, self._figures[config.name], started)
            elif entry is None and self._disk_fast is not None and origin_form:
                hit = await self._disk_fast.hit(config, raw, head.path, started)
                if hit is not None:
                    return hit
        return await self._full(request, config, headers)

    def lane_hit(
        self, method: str, target: str, fields: Fields, host: str, *, tls: bool, peer: str | None
    ) -> tuple[tuple[bytes, ...], list[float]] | None:
        """The hit lane's question (proxy/edge/hit_lane.py, decision 0050): the parts of the
        answer ``handle``'s fast path would give a request the lane read (HTTP/1.1, kept
        open, no body), with the domain's response figures; for a HEAD, the head the full
        path writes for it (``respond.head_tail``: its order differs), from memory only
        (decision 0055); None when the full path must
        answer it (an unknown Host, a miss, a stale entry, the shared tier's, a peer's
        request...). A hit is counted here, as ``handle`` counts one."""
        config = self._hosts.get(host)
        if config is None:
            config = self._route(host)
            if config is None:
                return None
        # A HEAD is answered as the GET it asks about would be, but for its head's order
        # and the body (decision 0055): the same question of its fields.
        head = method == "HEAD"
        if not fast_hit(
            "GET" if head else method,
            fields,
            keep_alive=True,
            has_body=False,
            early_hints=config.early_hints,
        ):
            return None
        if config.rules is not None and not fast_under_rules(config.rules, target, fields):  # type: ignore[arg-type]
            return None
        if self._peers is not None and CDN_LOOP in fields:
            return None  # perhaps a peer's: _handle_peers decides
        raw = target
        if self._keyed_by_scheme:
            https = tls
            if self._trusted:
                https = (
                    self._trusted.client(
                        peer or "",
                        "https" if tls else "http",
                        forwarded_for=fields.getall(hdrs.X_FORWARDED_FOR, ()),
                        forwarded_proto=fields.getall(hdrs.X_FORWARDED_PROTO, ()),
                        forwarded=fields.getall(hdrs.FORWARDED, ()),
                    ).scheme
                    == "https"
                )
            raw = cache_target(raw, https)
        entry = self._peek(config.name, raw)
        if entry is None:  # the shared tier's, when there is one (edge/disk_hits.py)
            if self._disk_fast is None or head:
                return None
            hit = self._disk_fast.lane_hit(config, raw, target)
            if hit is not None:
                self.lane_answered += 1
            return hit
        lines = entry.hit_lines
        if not lines:
            return None
        now = self._clock()
        age = entry.fresh_age(now)
        if age is None:
            return None
        if head:
            tail = respond.head_tail(lines[-1])
            if tail is None:
                return None
            parts = (*lines[:-1], b"Age: %d\r\n" % age, tail, b"\r\n", b"")
        else:
            parts = (*lines, b"Age: %d\r\n\r\n" % age, entry.body)
        self._telemetry.request_at(config.name, HIT, now)
        self.lane_answered += 1
        return parts, self._figures[config.name]

    async def _full(
        self, request: web.BaseRequest, config: DomainConfig, headers: CIMultiDictProxy[str]
    ) -> web.StreamResponse:
        """Every request the fast path did not answer."""
        if config.early_hints:
            request[EARLY_HINTS] = True  # read by respond.from_stored (proxy/edge/interim.py)
        REQUEST_STARTED.set(perf_counter())  # the access log's time (proxy/edge/origin.py)
        target = request_target(request.raw_path, config.name)
        if target is None:
            return respond.text(400, "400 Bad Request: the request-target does not name this host")
        if hdrs.UPGRADE in headers:
            return await self._upgrade(request, config, target, headers)
        return await self._answer(request, config, target)

    async def _upgrade(
        self,
        request: web.BaseRequest,
        config: DomainConfig,
        target: str,
        headers: CIMultiDictProxy[str],
    ) -> web.StreamResponse:
        """A request with Upgrade: tunnelled if it may switch protocols (core/http/upgrade.py),
        else answered as any request."""
        protocols = tunnel_protocols(
            method=request.method,
            version=request.version,
            has_body=request.body_exists,
            connection=headers.getall(hdrs.CONNECTION, ()),
            upgrade=headers.getall(hdrs.UPGRADE),
            allowed=self._upgrades,
        )
        if protocols is not None:
            return await self._tunnel(request, config, target, protocols)
        # Answered as any request, then the connection is closed: aiohttp dropped what
        # followed this head in its read (core/http/upgrade.py), so a request pipelined
        # behind it is refused visibly, never lost without an answer.
        response = await self._answer(request, config, target)
        response.force_close()
        return response

    async def _answer(
        self, request: web.BaseRequest, config: DomainConfig, target: str
    ) -> web.StreamResponse:
        rules = None
        if config.rules is not None:  # asked once per request (core/cache/rules.py)
            rules = config.rules.match(target.partition("?")[0])
            if rules is not None:
                target = normalised_target(target, rules.query)
        if may_use_cache(request.method, request.headers, has_body=request.body_exists):
            if rules is not None:
                bypass = bypass_reason(rules, request.headers)
                if bypass is not None:
                    return await self._forward(request, config, target, "bypass", bypass)
            return await self._cacheable(request, config, target, self._https(request), rules)
        fwd = "method" if request.method not in CACHEABLE_METHODS else "bypass"
        return await self._forward(request, config, target, fwd)

    # -- the cacheable path ----------------------------------------------------------------------

    async def _cacheable(
        self,
        request: web.BaseRequest,
        config: DomainConfig,
        target: str,
        https: bool,
        rules: Applied | None = None,
    ) -> web.StreamResponse:
        now = self._clock()
        detail = None if rules is None else rules.detail
        found = await self._store.lookup(config.name, cache_target(target, https))
        if found.bypass is not None:
            # The store cannot answer for now (a fleet member whose lease ran out: decision
            # 0014): the origin answers, and nothing is stored.
            return await self._forward(request, config, target, "bypass", found.bypass)
        key = found.key
        coding = coding_of(request, config)
        obey = rules is None or not rules.ignore_client_no_cache
        decision = decide_lookup(found.variants, request.headers, now, coding, obey_request=obey)
        if isinstance(decision, Serve):
            self._telemetry.request(config.name, HIT)
            if rules is None:
                status = self._hit_status if found.tier is None else self._disk_hit_status
                return self._from_stored(request, decision.response, now, status)
            if found.tier is not None:  # the tier that answered, then the rules' detail
                detail = f"{found.tier}; {detail}" if detail else found.tier
            status = cache_status(self._name, hit=True, detail=detail)
            return self._from_stored(request, decision.response, now, status, rules=rules)
        if only_if_cached(request.headers):
            self._telemetry.request(config.name, MISS)
            status = cache_status(self._name, fwd="miss", detail="only-if-cached")
            return respond.text(504, "504 Gateway Timeout: not in cache", cache_status=status)
        if isinstance(decision, Revalidate):
            stale: StoredResponse | None = decision.response
            fwd = decision.reason  # RFC 9211 §2.2: "stale", or "request" when it asked
            if serve_while_revalidating(decision.response, request.headers, now, obey_request=obey):
                self._revalidate_later(request, config, key, target, decision.response, rules)
                self._telemetry.request(config.name, HIT)
                swr = "stale-while-revalidate" + ("" if detail is None else f"; {detail}")
                status = cache_status(self._name, hit=True, detail=swr)
                return self._from_stored(request, decision.response, now, status, rules=rules)
        else:
            stale, fwd = None, decision.reason
        if request.method == "HEAD" and stale is None:
            return await self._forward(request, config, target, fwd)
        # A request that asks the origin holds a slot of its connection and client address
        # while it does (edge/origin_asks.py, decision 0057), waiting for one if need be.
        async with origin_asks.asking(request):
            if answer_budget.blocked(request):
                # Its answer would be refused (edge/answer_budget.py): before the origin is asked,
                # and before a flight is led that others would wait on.
                self._telemetry.request(config.name, outcome_of_fwd(fwd))
                return respond.over_budget(cache_status(self._name, fwd=fwd, detail=detail))
            # A range of part of an object: sent to the origin as it is, unless a fill of the
            # URL is under way (decision 0031: a small range never costs the origin an object).
            partial = stale is None and ranges.forwarded(request)
            if partial and self.flights.get(key) is None:
                return await self._forward(request, config, target, fwd, "range")
            if not partial and self.refusals.recent(key[0], key[2], now) is not None:
                # Its last answer was not stored: no leader's answer to wait for, most likely.
                return await self._fill(Fill(request, config, key, target, stale, fwd, None, rules))
            flight, leading = self.flights.join(key)
            if leading:
                if self._peers is not None:
                    flight.position = position_of(self._peers)
                job = Fill(request, config, key, target, stale, fwd, flight, rules)
                if (stale is None or fwd == "stale") and not partial and self._tiered is not None:
                    return await self._fill_for_node(job, coding, obey)
                return await self._fill(job)
            job = Fill(request, config, key, target, stale, fwd, None, rules)
            if self._peers is not None and not may_follow(flight):
                # A peer's request takes the answer of a fill that began before it arrived only
                # when no purge was applied in between (decision 0047).
                return await self._fill(job)
            return await self._follow(job, flight, https, partial, coding)

    async def _follow(
        self, job: Fill, flight: Flight, https: bool, partial: bool, coding: str | None
    ) -> web.StreamResponse:
        """A request collapsed behind another for the same key: served the leader's answer
        if it may be shared, else sent to the origin itself, uncollapsed (``job``)."""
        request, config, target, fwd = job.request, job.config, job.target, job.fwd
        rules = job.rules
        detail = None if rules is None else rules.detail
        result = await flight.wait(
            connect_timeout=config.connect_timeout, read_timeout=config.read_timeout
        )
        if isinstance(result, OriginError):
            # The leader's error: logged and counted once, by the leader, for the one origin
            # request they shared; this client's answer is counted as a request.
            self._telemetry.request(config.name, ERROR)
            return respond.failed(result, cache_status=cache_status(self._name, fwd=fwd))
        shared = result if isinstance(result, StoredResponse) else None
        if shared is not None and not select_variant([shared], request.headers, coding):
            shared = None
            if config.compress:  # the leader stored every coding, this one too (decision 0035)
                found = await self._store.lookup(config.name, cache_target(target, https))
                shared = select_variant(found.variants, request.headers, coding)
        if shared is not None:
            self._telemetry.request(config.name, outcome_of_fwd(fwd))
            status = cache_status(self._name, fwd=fwd, collapsed=True, detail=detail)
            return self._from_stored(request, shared, self._clock(), status, rules=rules)
        # The leader's answer was not shareable: ask the origin ourselves, uncollapsed.
        if partial:
            return await self._forward(request, config, target, fwd, "range")
        return await self._fill(job)

    async def _fill(self, job: Fill) -> web.StreamResponse:
        """Fetch from the origin, store what may be stored, and finish the flight.

        The request is counted once, here, when its outcome is known. A background
        revalidation (stale-while-revalidate) answers no client, so it counts nothing: the
        client it started for was counted when its stale hit was served."""
        filled: Filled | None = None
        try:
            filled = await self._filler.fetch(job)
        finally:
            # Waiters are released however the fetch ends, a client gone away included.
            self._end_flight(job.key, job.flight, None if filled is None else filled.result)
        if isinstance(filled.result, StoredResponse):  # cacheable (again): collapsed again
            self.refusals.stored(job.key[0], job.key[2])
        if not job.background:
            failed = isinstance(filled.result, OriginError)
            self._telemetry.request(job.config.name, ERROR if failed else outcome_of_fwd(job.fwd))
        return filled.response

    async def _fill_for_node(self, job: Fill, coding: str, obey: bool) -> web.StreamResponse:
        """Lead the key's fill or revalidation for the node, or wait for the worker that leads
        it and serve its entry (edge/node_fills.py). The marker goes when the flight lands."""
        tiered = self._tiered
        assert tiered is not None
        domain, _, target = job.key
        claimed = tiered.markers.claim(domain, target, self._lock_timeout)
        if claimed is None:
            waited = await wait_for_worker(
                store=self._store,
                markers=tiered.markers,
                domain=domain,
                target=target,
                headers=job.request.headers,
                coding=coding,
                obey=obey,
                clock=self._clock,
                limit=WAIT_LIMIT * self._lock_timeout,
            )
            if waited.response is not None:
                tiered.collapsed += 1
                self._end_flight(job.key, job.flight, waited.response)
                self._telemetry.request(job.config.name, outcome_of_fwd(job.fwd))
                detail = "disk" if job.rules is None else f"disk; {job.rules.detail}"
                status = cache_status(self._name, fwd=job.fwd, collapsed=True, detail=detail)
                return self._from_stored(
                    job.request, waited.response, self._clock(), status, rules=job.rules
                )
            if waited.timed_out:
                job = replace(job, note=LOCK_TIMEOUT_DETAIL)
            return await self._fill(job)  # by itself, unmarked
        self._marked[job.key] = Renewal(
            tiered.markers, job.key, claimed, self._lock_timeout, job.flight
        )
        return await self._fill(job)

    def _revalidate_later(
        self,
        request: web.BaseRequest,
        config: DomainConfig,
        key: CacheKey,
        target: str,
        stale: StoredResponse,
        rules: Applied | None,
    ) -> None:
        """Revalidate in the background (RFC 5861 §3), unless a request for the key is already
        at the origin. The task is kept until it ends and cancelled by ``close``."""
        flight, leading = self.flights.join(key)
        if not leading:
            return
        task = asyncio.create_task(
            self._fill(
                Fill(request, config, key, target, stale, "stale", flight, rules, background=True)
            ),
            name="revalidate",
        )
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def traced(self, inspect: Callable[[str, str], Held]) -> Callable[[str, str], Held]:
        """``inspect`` (a store's read for a trace) with this edge's recent refusal of the
        key: why its last fill was not stored (hit-for-miss)."""
        return with_refusals(inspect, self.refusals, self._clock)

    async def close(self) -> None:
        """Cancel background revalidations still running (at shutdown)."""
        tasks = list(self._background)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self._filler.close()
        with contextlib.suppress(KeyError):
            self._telemetry.registry.unregister(self._answers)
        await self.upstreams.close()
        if self.peer_fills is not None:
            await self.peer_fills.close()

    def _end_flight(self, key: CacheKey, flight: Flight | None, result: FlightResult) -> None:
        if flight is not None:
            self.flights.land(key, flight, result)
        marked = self._marked.pop(key, None)
        if marked is not None:  # after the fill's commit, if any
            marked.release()

    # -- the tunnelled path ----------------------------------------------------------------------

    async def _tunnel(
        self, request: web.BaseRequest, config: DomainConfig, target: str, protocols: str
    ) -> web.StreamResponse:
        if request.method not in SAFE_METHODS:
            # As for a forwarded request (RFC 9111 §4.4), before the origin is asked, whatever
            # it answers: the tunnel's answer is never seen by the cache.
            await self._store.invalidate(config.name, target)
        fields = self._messages.headers(request, config, cacheable=False)
        return await self.tunnels.open(request, config, target, fields, protocols)

    # -- the forwarded path (edge/forward.py) -------------------------------------------------

    async def _forward(
        self,
        request: web.BaseRequest,
        config: DomainConfig,
        target: str,
        fwd: str,
        detail: str | None = None,
    ) -> web.StreamResponse:
        headers = self._messages.headers(request, config, cacheable=False)
        return await self._forwarder.forward(request, config, target, headers, fwd, detail)
