"""The fill: one origin request for a cacheable request that missed, or whose stored response
must be revalidated, and what becomes of the answer. ``Edge`` (edge/handler.py) leads it under
request collapsing (edge/flights.py) and counts it; ``Filler.fetch`` does the rest:

- a 304 to a revalidation refreshes the stored response (RFC 9111 §4.3.4);
- an origin error, or a 5xx the response allows it for, serves the stale copy (RFC 9111
  §4.2.4, RFC 5861 §4);
- a storable response whose body ends within cache.max_object_bytes is stored and served:
  read whole when it ends within ``whole_max``, else, with a shared tier, streamed to the
  client and into the tier's body file at once (edge/stream_fill.py; decision 0039);
- anything else is passed on unstored (``_pass_on``): relayed, or for a Range request cut
  from the whole 200 when it ends within the limit. Past the limit (by its Content-Length, or
  by what arrived of a chunked body) nothing more is read for the cache: ``bytes=0-`` is
  relayed as the 200 it is, and a range of part of it is asked of the origin
  (``ranges.AskOrigin``), once the first connection is let go (decision 0031).

What fills read whole counts against the process's fill budget (edge/fill_budget.py): past
it, the answer is passed on (``fill-budget``) or streamed into the tier. A relay reads ahead
``read_ahead`` bytes (edge.answer_buffer_bytes), then streams at its client's pace; copies in
other codings are made by the compression queue (edge/compress.py; decision 0046).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace

from aiohttp import hdrs, web
from multidict import CIMultiDict

from proxy.config.model import DomainConfig
from proxy.core.cache.conditional import conditional_headers, merge_not_modified, not_modified
from proxy.core.cache.entry import CacheKey, StoredResponse
from proxy.core.cache.policy import (
    DontStore,
    Storable,
    assess_response,
    refreshed,
    vary_values,
    with_lines,
)
from proxy.core.cache.rules import Applied, browser_fields
from proxy.core.cache.stale_on_error import may_serve_stale
from proxy.core.http.compression import (
    IDENTITY,
    codings_of,
    encoded_fields,
    skip_reason,
    with_vary,
)
from proxy.core.http.encodings import preferred
from proxy.core.http.fields import Headers
from proxy.core.http.headers import cache_status, from_origin
from proxy.core.purge.purges import tag_header_names, tagged
from proxy.edge import interim, ranges, respond, stream_fill
from proxy.edge.compress import Compressions
from proxy.edge.fill_budget import FillBudget, Held
from proxy.edge.flights import Flight, FlightResult
from proxy.edge.forward import AskOrigin, relay
from proxy.edge.origin import OriginResponse
from proxy.edge.refusals import Refusals
from proxy.errors import OriginError
from proxy.store.base import Store
from proxy.store.shared.large import BodyFile, FileBacked, file_backed, replaced
from proxy.store.tiered import TieredStore

# With a shared tier, bodies up to this (or the memory tier's share for one object, if
# larger) are read whole; larger ones are streamed into the tier (decision 0039).
STREAM_AT = 1 << 20
# A body up to this is compressed before its first client is answered (a few milliseconds);
# a larger one is answered as sent, and its copies are stored once made (decision 0046).
COMPRESS_FIRST = 64 * 1024


# Messages.headers and Messages.from_stored (edge/messages.py), Edge._ready and
# Edge._end_flight: what the fill shares with the edge's other paths.
OriginHeaders = Callable[..., list[tuple[str, str]]]
FromStored = Callable[..., web.Response]
Ready = Callable[[StoredResponse, Applied | None], StoredResponse]
Land = Callable[[CacheKey, Flight | None, FlightResult], None]


@dataclass(frozen=True, slots=True)
class Fill:
    """One origin fetch for a cacheable request: what it was for, and who waits on it."""

    request: web.BaseRequest
    config: DomainConfig
    key: CacheKey  # from the lookup: the store refuses it once the domain is cleared
    target: str  # the request-target asked of the origin (the key's is marked for https)
    stale: StoredResponse | None  # the stored response it revalidates, if any
    fwd: str  # Cache-Status fwd= (RFC 9211)
    flight: Flight | None  # None when it leads no collapsed requests
    rules: Applied | None = None  # the domain's cache rules for it (core/cache/rules.py)
    # stale-while-revalidate: the client has had its answer; nothing is relayed.
    background: bool = False
    # Cache-Status detail of the fill itself: "lock-timeout" when it waited for another
    # worker's fill of the key past [cache] lock_timeout (edge/node_fills.py).
    note: str | None = None

    def detail(self, reason: str | None = None) -> str | None:
        """Cache-Status ``detail``: the reason, the fill's note, then the rules that applied."""
        rules = None if self.rules is None else self.rules.detail
        parts = [part for part in (reason, self.note, rules) if part is not None]
        return "; ".join(parts) if parts else None


@dataclass(frozen=True, slots=True)
class Filled:
    response: web.StreamResponse  # for the client
    result: FlightResult  # for the waiters: the stored response, the origin error, or None


class Filler:
    """Fetches and decides for ``Fill`` jobs; the edge's shared parts are passed in."""

    def __init__(
        self,
        *,
        name: str,
        via: str,
        store: Store,
        clock: Callable[[], float],
        max_object: int,
        read_ahead: int = 64 * 1024,
        fill_budget: int = 128 * 1024**2,
        compress_queue: int = 16 * 1024**2,
        ask_origin: AskOrigin,
        origin_headers: OriginHeaders,
        from_stored: FromStored,
        ready: Ready,
        end_flight: Land,
        refusals: Refusals | None = None,
    ) -> None:
        self._name = name
        self._via = via
        self._store = store
        self._clock = clock
        self.max_object = max_object  # cache.max_object_bytes; a reload sets it
        self.read_ahead = read_ahead  # edge.answer_buffer_bytes: what a relay reads ahead
        self.budget = FillBudget(fill_budget)  # edge.fill_buffer_total_bytes
        self.compressions = Compressions(compress_queue)  # edge.compress_queue_bytes
        # A store with a shared tier streams large objects into it (decision 0039); a fleet
        # member's store wraps it (FleetStore.local), and is asked for its lease at commit.
        local = getattr(store, "local", store)
        self._tiered = local if isinstance(local, TieredStore) else None
        self._ask_origin = ask_origin
        self._origin_headers = origin_headers
        self._from_stored = from_stored
        self._ready = ready
        self._end_flight = end_flight
        self._refusals = refusals  # what was not stored, by key (edge/refusals.py)

    async def close(self) -> None:
        """Stop making copies (at shutdown): those queued are dropped, unstored."""
        await self.compressions.close()

    @property
    def whole_max(self) -> int:
        """The largest body read whole into memory: max_object_bytes, or with a shared tier
        the memory tier's share for one object (at least STREAM_AT); a larger one streams."""
        tiered = self._tiered
        if tiered is None:
            return self.max_object
        return min(self.max_object, max(tiered.memory_object_max, STREAM_AT))

    async def fetch(self, job: Fill) -> Filled:
        """Ask the origin for the job's response and decide what becomes of it. Waiters on
        the job's flight are released as soon as its answer is known not to be shareable."""
        headers = self._origin_headers(
            job.request, job.config, cacheable=True, coding=coding_of(job.request, job.config)
        )
        if job.stale is not None:
            headers += conditional_headers(job.stale)
        request_time = self._clock()
        held = Held(self.budget)
        try:
            with self._interim(job):
                async with self._ask_origin(job.config, "GET", job.target, headers, None) as origin:
                    if job.flight is not None:
                        job.flight.progress()  # the headers: waiters now follow the body's pace
                    if origin.peer is not None:  # the key's owner answered (decision 0047)
                        peer = f"peer={origin.peer}"
                        job = replace(job, note=peer if job.note is None else f"{job.note}; {peer}")
                    filled = await self._answered(job, origin, request_time, self._clock(), held)
                if isinstance(filled, ranges.AskOrigin):
                    # Once the whole response's connection is let go (a second one held at
                    # once could wait on the domain's connection slots).
                    return await self._range_from_origin(job, filled.reason)
            return filled
        except OriginError as exc:
            return self._origin_failed(job, exc)
        finally:
            held.give_back()

    def _interim(self, job: Fill) -> AbstractContextManager[object]:
        """The origin's interim answers go to the job's client (edge/interim.py): not to
        a background revalidation's, which has had its answer."""
        if job.background:
            return nullcontext()
        tags = tag_header_names(job.config.tag_headers)
        return interim.relayed_to(job.request, via=self._via, tag_headers=tags)

    async def _range_from_origin(self, job: Fill, reason: str) -> Filled:
        """Relay the origin's answer to the client's Range request as it is sent (the whole
        object is too large to keep: ranges.AskOrigin). Raises OriginError."""
        headers = self._origin_headers(job.request, job.config, cacheable=False)
        status = cache_status(self._name, fwd=job.fwd, detail=reason)
        async with self._ask_origin(job.config, "GET", job.target, headers, None) as origin:
            relayed = await relay(
                job.request, origin, status, via=self._via, read_ahead=self.read_ahead
            )
            return Filled(relayed, None)

    async def _answered(
        self,
        job: Fill,
        origin: OriginResponse,
        request_time: float,
        response_time: float,
        held: Held,
    ) -> Filled | ranges.AskOrigin:
        """The origin answered: refresh the stale entry, serve it instead of an error, store
        the response, or pass it on unstored."""
        stale = job.stale
        if stale is not None and origin.status == 304:
            return await self._refresh(job, stale, origin, request_time, response_time)
        if stale is not None and may_serve_stale(
            stale,
            job.request.headers,
            response_time,
            status=origin.status,
            default_window=job.config.stale_if_error,
        ):
            # The origin's 5xx, and the response allows stale-if-error (RFC 5861 §4).
            origin.close()
            return self._stale_if_error(job, stale, response_time)
        fields = from_origin(origin.headers)
        verdict = self._assess(
            job, origin.status, origin.reason, fields, request_time, response_time
        )
        if isinstance(verdict, DontStore):
            return await self._pass_on(job, origin, verdict.reason, held)
        if origin.tags is None:  # a tag purge could miss it (decision 0024)
            return await self._pass_on(job, origin, "tags-over-limit", held)
        length = origin.content_length
        if length is not None and length > self.max_object:
            return await self._pass_on(job, origin, "too-large", held)
        if length is not None and length > self.whole_max:  # streamed from its first byte
            streamed = await self._streamed(job, verdict, fields, origin, b"", response_time)
            if streamed is not None:
                return streamed
            # The tier does not take it now: mostly its eviction's refusal of a first fill of
            # over half the tier (remembered: the next is kept), else a stopped tier.
            return await self._pass_on(job, origin, "not-admitted", held)
        progress = job.flight.progress if job.flight is not None else None
        body, complete, over = await held.read_whole(origin, self.whole_max, progress)
        if not complete and len(body) <= self.max_object:
            streamed = await self._streamed(job, verdict, fields, origin, body, response_time)
            if streamed is not None:
                return streamed
        if not complete:
            reason = "fill-budget" if over else "too-large"
            return await self._pass_on(job, origin, reason, held, prefix=body)
        config = job.config
        if config.compress and not skip_reason(
            origin.status,
            fields,
            len(body),
            config.compress_types,
            config.compress_min_bytes,
            config.compress_max_bytes,
        ):
            return await self._compressed(job, verdict, fields, body, origin.tags, response_time)
        entry = self._ready(tagged(verdict.with_body(body, job.key[2]), origin.tags), job.rules)
        stored = await self._store.put(job.key, entry)
        # This client gets the origin's fields in full (its own Set-Cookie included); only
        # the stored copy drops those that no-cache="..." or private="..." name (§5.2.2.4,
        # §5.2.2.7) and Set-Cookie, so no hit or collapsed waiter ever gets them.
        return self._filled(job, entry, stored, response_time, fields)

    async def _streamed(
        self,
        job: Fill,
        verdict: Storable,
        fields: Headers,
        origin: OriginResponse,
        prefix: bytes,
        response_time: float,
    ) -> Filled | None:
        """Stream a large object to the client and into the shared tier (stored as it came:
        not compressed); None when the tier cannot take it (it is then passed on)."""
        entry = self._ready(
            tagged(verdict.with_body(b"", job.key[2]), origin.tags or ()), job.rules
        )
        entry = with_lines(entry, ())  # its body is not in hand: never a fast hit
        fenced = bool(getattr(self._store, "fenced", False))  # FleetStore: past its lease
        length = origin.content_length  # when known: a body the tier would refuse is not written
        tiered = None if fenced else self._tiered
        sink = None if tiered is None else tiered.stream(job.key, entry, length)
        if sink is None:
            return None
        # Cache-Status is sent before the body: ``stored`` is said when the body's length is
        # known to fit (a fill dropped after all, by a disk fault, is counted by the tier);
        # a chunked body may still pass max_object_bytes, so it is not said of one.
        known = origin.content_length is not None
        status = cache_status(self._name, fwd=job.fwd, stored=known, detail=job.detail())
        request, rules = job.request, job.rules
        headers = self._first_headers(job, entry, fields, status, response_time)
        flight = job.flight
        teed = await stream_fill.tee(
            request,
            origin,
            prefix,
            sink,
            headers=headers,
            limit=self.max_object,
            progress=flight.progress if flight is not None else _nothing,
            give_up=lambda: self._end_flight(job.key, flight, None),
            fenced=lambda: bool(getattr(self._store, "fenced", False)),
            landed=lambda stored: self._end_flight(job.key, flight, stored),
        )
        if teed.client is not None:
            return Filled(teed.client, teed.stored)
        if teed.stored is not None:
            answer = self._from_stored(request, teed.stored, response_time, status, rules=rules)
            return Filled(answer, teed.stored)
        if job.background:
            return Filled(web.Response(status=origin.status), None)
        failed = cache_status(self._name, fwd=job.fwd, detail=job.detail("not-stored"))
        return Filled(self._from_stored(request, entry, response_time, failed, rules=rules), None)

    def _first_headers(
        self,
        job: Fill,
        entry: StoredResponse,
        fields: Headers,
        status: str,
        response_time: float,
    ) -> CIMultiDict[str] | None:
        """The head a streamed fill's first client is sent with: the origin's fields in full,
        as a fill answers (but a Range is answered with the whole 200: RFC 9110 §14.2 allows
        it). None for a HEAD, a revalidation in the background or a client that has it
        already: each is answered once it is stored."""
        request, rules = job.request, job.rules
        if request.method != "GET" or job.background or not_modified(entry, request.headers):
            return None
        if rules is not None and rules.browser_ttl is not None:
            fields = browser_fields(fields, rules)
        headers = respond.relayed_headers(fields, via=self._via, status=status, tags=entry.tags)
        headers[hdrs.AGE] = str(int(entry.age(response_time)))
        return headers

    async def _compressed(
        self,
        job: Fill,
        verdict: Storable,
        fields: Headers,
        body: bytes,
        tags: tuple[str, ...],
        response_time: float,
    ) -> Filled:
        """Store the response once per coding the domain compresses to, and as it came, each
        a variant under Vary: Accept-Encoding (decision 0035). A small body is compressed
        first, and the request answered with the copy it reads as; a larger one is stored and
        answered as it came, and its copies are stored once made, in the background. With no
        room in the compression queue, or its copies being made already, only the body as it
        came is stored (decision 0046)."""
        vary = (
            verdict.vary
            if "accept-encoding" in verdict.vary
            else (*verdict.vary, "accept-encoding")
        )

        def entry(coding: str, copy: bytes) -> StoredResponse:
            variant = replace(
                verdict,
                headers=encoded_fields(verdict.headers, coding, len(copy)),
                vary=vary,
                vary_values=vary_values(vary, job.request.headers, coding),
            )
            return self._ready(tagged(variant.with_body(copy, job.key[2]), tags), job.rules)

        made = None
        if not self.compressions.busy(job.key):
            made = self.compressions.submit(body, job.config.compress)
        if made is not None and len(body) <= COMPRESS_FIRST:
            encoded = await made
            wanted = coding_of(job.request, job.config)
            kept: list[tuple[str, StoredResponse, bool]] = []
            for coding, copy in [(IDENTITY, body), *encoded.items()]:
                variant = entry(coding, copy)
                kept.append((coding, variant, await self._store.put(job.key, variant)))
            coding, first, stored = next((k for k in kept if k[0] == wanted), kept[0])
            out = encoded_fields(fields, coding, len(first.body))
            return self._filled(job, first, stored, response_time, out)
        first = entry(IDENTITY, body)
        stored = await self._store.put(job.key, first)
        if made is not None:
            # Under the fill's key: a clear or purge since its lookup refuses the copies as
            # it would the fill (decisions 0003, 0024).
            self.compressions.later(
                job.key, made, lambda coding, copy: self._store.put(job.key, entry(coding, copy))
            )
        out = encoded_fields(fields, IDENTITY, len(body))
        return self._filled(job, first, stored, response_time, out)

    async def _refresh(
        self,
        job: Fill,
        stale: StoredResponse,
        origin: OriginResponse,
        request_time: float,
        response_time: float,
    ) -> Filled:
        """A 304 answered the revalidation: update the stored headers (RFC 9111 §4.3.4)."""
        merged = merge_not_modified(stale, from_origin(origin.headers))
        if "accept-encoding" in stale.vary:
            merged = with_vary(merged)  # a 304's own Vary keeps the copies apart (0035)
        verdict = self._assess(job, stale.status, stale.reason, merged, request_time, response_time)
        if isinstance(verdict, DontStore) or origin.tags is None:
            # The origin now forbids storing it (or tags it over the bounds: decision 0024):
            # serve the refreshed response once, keep nothing.
            await self._store.invalidate(job.config.name, job.target)
            entry, stored = replaced(stale, headers=merged), False
        else:
            # Tags as the 304 sets them, else as stored (decision 0024).
            entry = self._ready(
                tagged(refreshed(stale, verdict), origin.tags or stale.tags), job.rules
            )
            file = file_backed(stale)
            if file is None:
                stored = await self._store.put(job.key, entry)
            else:
                entry, stored = await self._relink(job.key, entry, file)
        return self._filled(job, entry, stored, response_time)

    def _filled(
        self,
        job: Fill,
        entry: StoredResponse,
        stored: bool,
        response_time: float,
        fields: Headers | None = None,
    ) -> Filled:
        """The fill's answer from ``entry``, with ``fields`` in place of its stored ones when
        given; Cache-Status says whether it was ``stored``."""
        status = cache_status(self._name, fwd=job.fwd, stored=stored, detail=job.detail())
        response = self._from_stored(
            job.request, entry, response_time, status, headers=fields, rules=job.rules
        )
        return Filled(response, entry)

    async def _relink(
        self, key: CacheKey, entry: StoredResponse, file: BodyFile
    ) -> tuple[StoredResponse, bool]:
        """A large object refreshed by a 304: the new entry takes the body file it had (a hard
        link: decision 0039). Served from that file even when it cannot be stored."""
        entry = with_lines(entry, ())  # its body is not in hand: never a fast hit
        tiered = self._tiered
        if tiered is not None and not getattr(self._store, "fenced", False):
            kept = await tiered.relink(key, entry, file)
            if kept is not None:
                return kept, True
        return FileBacked(entry, file), False

    async def _pass_on(
        self,
        job: Fill,
        origin: OriginResponse,
        reason: str,
        held: Held,
        prefix: bytes | None = None,
    ) -> Filled | ranges.AskOrigin:
        """Relay a response that is not stored. Its waiters are released first (each asks the
        origin itself), not kept until the relay ends; the key's next misses do not wait."""
        self._end_flight(job.key, job.flight, None)
        if self._refusals is not None and not job.background:
            domain, _, target = job.key
            self._refusals.refused(domain, target, reason, origin.status, self._clock())
        if job.stale is not None and origin.status == 200:
            # A new 200 replaced the stored response, and is not kept: the old one is neither
            # served again nor revalidated again (each time costing the origin up to
            # max_object_bytes of a chunked body: decision 0031), as after a 304 (_refresh).
            await self._store.invalidate(job.config.name, job.target)
        if job.background:  # there is no one to send it to: the origin response is dropped
            origin.close()
            return Filled(web.Response(status=origin.status), None)
        status = cache_status(self._name, fwd=job.fwd, detail=job.detail(reason))
        if origin.status == 200 and ranges.asked(job.request):
            # Cut from the whole 200 when it ends within max_object_bytes. A larger one (by
            # its Content-Length, or by what arrived) is not read further: a range of part of
            # it goes to the origin (AskOrigin), while for bytes=0- it is what the client
            # asked for, and is relayed (decision 0031).
            length = origin.content_length
            whole_max = self.whole_max
            if prefix is None and (length is None or length <= whole_max):
                prefix, complete, _ = await held.read_whole(origin, whole_max)
                if complete:
                    cut = ranges.cut(job.request, origin, prefix, via=self._via, status=status)
                    return Filled(cut, None)
            if ranges.forwarded(job.request):
                origin.close()
                return ranges.AskOrigin(reason)
        relayed = await relay(
            job.request,
            origin,
            status,
            via=self._via,
            read_ahead=self.read_ahead,  # read whole up to this; a larger body streams
            prefix=prefix,
        )
        return Filled(relayed, None)

    def _origin_failed(self, job: Fill, exc: OriginError) -> Filled:
        now = self._clock()
        stale = job.stale
        if stale is not None and may_serve_stale(
            stale, job.request.headers, now, status=None, default_window=job.config.stale_if_error
        ):
            # Disconnected from the origin: a stale copy beats an error (RFC 9111 §4.2.4).
            respond.log.warning("%s; served a stale copy", exc)
            return self._stale_if_error(job, stale, now)
        status = cache_status(self._name, fwd=job.fwd, detail=job.detail())
        return Filled(respond.origin_failed(exc, cache_status=status), exc)

    def _stale_if_error(self, job: Fill, stale: StoredResponse, now: float) -> Filled:
        status = cache_status(self._name, fwd=job.fwd, detail=job.detail("stale-if-error"))
        return Filled(self._from_stored(job.request, stale, now, status, rules=job.rules), stale)

    def _assess(
        self,
        job: Fill,
        status: int,
        reason: str,
        fields: Headers,
        request_time: float,
        response_time: float,
    ) -> Storable | DontStore:
        return assess_response(
            method="GET",
            request=job.request.headers,
            status=status,
            reason=reason,
            headers=fields,
            request_time=request_time,
            response_time=response_time,
            heuristic=job.config.heuristic_freshness,
            surrogate_name=self._name,
            accept_encoding=coding_of(job.request, job.config),
            rules=job.rules,
        )


def _nothing() -> None:
    pass


def coding_of(request: web.BaseRequest, config: DomainConfig) -> str:
    """The request's Accept-Encoding as the domain reads it: the key of its variant and what
    a fill asks the origin for (core.encodings; decision 0023), against the codings it
    compresses to when it does (decision 0035)."""
    codings = codings_of(config.encodings, config.compress)
    return preferred(request.headers.getall(hdrs.ACCEPT_ENCODING, ()), codings)
