"""Peer fills, the I/O (issue 33, decision 0047): a miss on a node that does not own the key
asks the owner before the origin, and an owner labels what it answers a peer.

The rules are core's (proxy/core/peer.py: ``owner_of``, ``peer_route``, ``loop_marked``,
``usable``) and the label's wire form is proxy/wire/peer.py's. This module does the I/O:

- **Asking** (``PeerFills.ask``: the same shape as ``Messages.ask``, which the Filler calls
  for a fill): the owner is chosen from the live peer nodes (``PeerView.peers``, read by the
  fleet member at each renewal) by the cache key after normalisation: the domain, and the
  fill's target marked with the scheme the origin is told (X-Forwarded-Proto, last in the
  head ``to_origin`` builds). When ``peer_route`` says PEER, the fill's head plus
  ``CDN-Loop: <cache name>`` is sent to the owner's advertise URL through a keep-alive
  session of this module's own (``origin_request``, so the answer is an ``OriginResponse``
  as from an origin), after this node's applied purge position is taken. An owner that
  cannot be reached, gives no head within ``peer_timeout``, or answers without a ``usable``
  label, costs that one attempt: its answer is closed and the origin is asked
  (``ask_origin``), once. A request costs at most one peer attempt that reached a node and
  one origin attempt: an owner where nothing listens (a dead node) is passed over, and the
  key's next owner asked instead (``_from_next``), so a dead owner's key costs the origin
  one request for the fleet, not one per node that found it dead.
- **Answering** (``Edge.handle`` is ``answer_marked``'s when peer fills are on): a request
  whose CDN-Loop names this cache is a peer's. It takes the full path (never the fast one,
  which has no label), is never sent to a peer again (``MARKED``, read by ``ask``), and
  every answer made from a stored entry (``labelled``: Messages.from_stored, the one place
  such answers are made) carries the label taken when the request arrived, and the entry's
  tags in the domain's tag field, so the asking node's copy is covered by tag purges as the
  owner's is; so does every answer relayed from the owner's own origin request (not
  stored, streamed to its first client: edge/peer_mark.py), so such an answer costs the
  origin one request, not two. The owner's own answers (errors, refusals) carry none:
  the asking node goes to the origin for those.

- **The scheme.** The key carries the scheme (decision 0041), which the owner cannot read
  from a peer's connection (plain HTTP, from a node that is no trusted proxy of it). The
  asking node says it, with the fleet's peer key (``CDN-Proxy-Peer-Scheme``; the key is
  read from Valkey, never sent to an origin), and the owner keys, fills and tells its
  origin that scheme (``PeerAnswers``: the request is cloned with it). A claim without
  the key (a client's, or a peer's of another epoch) is refused with a 403, which the
  asking node takes for an answer not usable: it goes to the origin. Before the key is
  read, an https-keyed miss goes to the origin.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import replace
from typing import Protocol

import aiohttp
from aiohttp import hdrs, web
from multidict import CIMultiDictProxy

from proxy.config.model import DomainConfig
from proxy.core.cache.entry import StoredResponse
from proxy.core.cache.keys import cache_target
from proxy.core.cache.rules import Applied as AppliedRules
from proxy.core.http.fields import Headers
from proxy.core.lease import Applied
from proxy.core.peer import (
    PeerScheme,
    PurgeLabel,
    Route,
    believed_scheme,
    covers_written,
    loop_marked,
    owner_of,
    peer_route,
    usable,
)
from proxy.core.purge.purges import TAG_HEADERS
from proxy.edge import bodies, respond
from proxy.edge.flights import Flight
from proxy.edge.forward import AskOrigin
from proxy.edge.origin import OriginResponse, origin_request
from proxy.edge.peer_mark import MARKED, Marked, add_peer_fields
from proxy.errors import OriginError
from proxy.observe.log_floods import THROTTLED
from proxy.observe.telemetry import error_kind
from proxy.store.shared.purge_state import FleetWritten
from proxy.wire.peer import (
    LABEL_HEADER,
    SCHEME_HEADER,
    pack_label,
    pack_scheme,
    unpack_label,
    unpack_scheme,
)

log = logging.getLogger("proxy.peers")

CDN_LOOP = "CDN-Loop"
_LABEL = LABEL_HEADER.lower()


class PeerView(Protocol):
    """What the fleet member knows (proxy/fleet/member.py): this node's name, the live
    nodes that take peer fills (name -> advertise URL), and the purge position applied."""

    @property
    def node(self) -> str: ...

    @property
    def peers(self) -> Mapping[str, str]: ...

    @property
    def applied(self) -> Applied: ...

    @property
    def peer_key(self) -> str | None: ...


class PeerFills:
    """The asking side; ``ask`` replaces ``Messages.ask`` for fills. Figures: requests sent
    to each peer, and its failures by kind (``timeout``, ``unreachable``, ``protocol``,
    ``label``: an answer not usable); the peers' requests this node answered as their
    owner, and the bytes of those answers (counted by ``PeerAnswers``); and the body bytes
    this process read from origin servers (``origin_bytes``: for the origin offload)."""

    def __init__(
        self,
        *,
        view: PeerView,
        name: str,
        timeout: float,
        ask_origin: AskOrigin,
        origin_bytes: Callable[[], int] = lambda: 0,
        hold: float = 0.0,
        written: Callable[[str], FleetWritten] | None = None,
    ) -> None:
        self._view = view
        # With a shared tier: what it holds of the fleet for a domain, read at the answer
        # (after the fill's lookup), which the owner's label must cover too.
        self._written = written
        # Owners that could not be reached (a refused connection: a dead node), until when
        # they are passed over (``hold``: the fleet's lease, within which a dead node leaves
        # the list). Their keys go to the next owner by rendezvous, the same on every node
        # that saw it.
        self._hold = hold
        self._down: dict[str, float] = {}
        self._name = name
        self._timeout = timeout
        self._ask_origin = ask_origin
        self._session: aiohttp.ClientSession | None = None
        self.requests: collections.Counter[str] = collections.Counter()
        self.errors: collections.Counter[tuple[str, str]] = collections.Counter()
        self.answers = 0
        self.answer_bytes = 0
        self.origin_bytes = origin_bytes

    def owner(self, domain: str, target: str, scheme: str | None) -> str | None:
        """The node that owns the fill's key, when it should be asked (None: the origin)."""
        if MARKED.get() is not None:
            return None  # the loop guard: a peer's request never goes to another peer
        view = self._view
        peers = view.peers
        if self._down:
            peers = self._reachable(peers)
        if len(peers) < 2 or scheme not in ("http", "https"):
            return None
        if scheme == "https" and view.peer_key is None:
            return None  # the owner could not believe the scheme yet
        key = f"{domain}\0{cache_target(target, scheme == 'https')}".encode()
        owner = owner_of(key, peers)
        if peer_route(owner=owner, me=view.node, marked=False) is not Route.PEER:
            return None
        return owner

    def _reachable(self, peers: Mapping[str, str]) -> Mapping[str, str]:
        """``peers`` without the owners passed over for now."""
        now = time.monotonic()
        for node, until in list(self._down.items()):
            if until <= now or node not in peers:
                del self._down[node]
        if not self._down:
            return peers
        return {node: url for node, url in peers.items() if node not in self._down}

    @asynccontextmanager
    async def ask(
        self,
        domain: DomainConfig,
        method: str,
        target: str,
        headers: list[tuple[str, str]],
        data: bytes | bodies.Streamed | None = None,
    ) -> AsyncIterator[OriginResponse]:
        """The owner's answer when it may be used, else the origin's. Raises OriginError
        (the origin's only: the owner's failures are counted and logged)."""
        async with AsyncExitStack() as stack:
            answer = None
            owner = None
            # The scheme the key was made with: the one the origin is told, last in the
            # head to_origin builds.
            scheme = _last(headers, "x-forwarded-proto")
            if method == "GET" and data is None:
                owner = self.owner(domain.name, target, scheme)
            if owner is not None and scheme is not None:
                answer = await self._from_owner(stack, owner, domain, target, headers, scheme)
                if answer is None and owner in self._down:
                    answer = await self._from_next(stack, owner, domain, target, headers, scheme)
            if answer is None:
                answer = await stack.enter_async_context(
                    self._ask_origin(domain, method, target, headers, data)
                )
            yield answer

    async def _from_next(
        self,
        stack: AsyncExitStack,
        dead: str,
        domain: DomainConfig,
        target: str,
        headers: list[tuple[str, str]],
        scheme: str,
    ) -> OriginResponse | None:
        """Nothing listened at the owner (a dead node, now passed over): the key's next owner
        by rendezvous, which every node that finds the owner dead asks too, is asked at once.
        So the key costs the origin one request, not one per node that found its owner dead.
        The attempt that found nothing listening reached no node, so this is still one peer
        attempt that did; the next owner's failure goes to the origin."""
        owner = self.owner(domain.name, target, scheme)
        if owner is None or owner == dead:
            return None
        return await self._from_owner(stack, owner, domain, target, headers, scheme)

    async def _from_owner(
        self,
        stack: AsyncExitStack,
        owner: str,
        domain: DomainConfig,
        target: str,
        headers: list[tuple[str, str]],
        scheme: str,
    ) -> OriginResponse | None:
        url = self._view.peers.get(owner)
        if url is None:
            return None
        applied = self._view.applied  # before sending: the label must cover it
        marks = [(CDN_LOOP, self._name)]
        key = self._view.peer_key
        if key is not None:  # the scheme the key was made with, which the owner keys by
            marks.append((SCHEME_HEADER, pack_scheme(PeerScheme(scheme, key))))
        self.requests[owner] += 1
        timeout = self._timeout
        # The owner is reached within peer_timeout; its body, once its head came, at the
        # domain's read_timeout, as an origin's.
        peer = replace(domain, connect_timeout=timeout, origin_queue_timeout=timeout)
        inner = AsyncExitStack()
        try:
            async with asyncio.timeout(timeout):
                answer = await inner.enter_async_context(
                    origin_request(
                        self._client(),
                        peer,
                        "GET",
                        target,
                        [*headers, *marks],
                        server=url,
                    )
                )
        except (OriginError, TimeoutError) as exc:
            await inner.aclose()
            kind = "timeout" if isinstance(exc, TimeoutError) else error_kind(exc)
            self.errors[owner, kind] += 1
            if kind == "unreachable":  # not "timeout": a slow origin makes a slow owner
                self._down[owner] = time.monotonic() + self._hold
            log.info(
                "peer %s (%s) not used for %s: %s", owner, url, domain.name, kind, extra=THROTTLED
            )
            return None
        label = unpack_label(_last(answer.headers, _LABEL))
        if not usable(label, epoch=applied.epoch, applied=applied.seq) or not self._covers(
            label, domain.name
        ):
            answer.close()
            await inner.aclose()
            self.errors[owner, "label"] += 1
            log.info(
                "peer %s answered %s without a usable label: the origin",
                owner,
                target,
                extra=THROTTLED,
            )
            return None
        answer.headers = tuple((n, v) for n, v in answer.headers if n.lower() != _LABEL)
        answer.peer = owner
        stack.push_async_callback(inner.aclose)
        return answer

    def _covers(self, label: PurgeLabel | None, domain: str) -> bool:
        """Whether ``label`` covers what the node's shared tier holds of the fleet for
        ``domain`` (no tier: nothing more to cover)."""
        if self._written is None or label is None:
            return True
        written = self._written(domain)
        return covers_written(label, written.floor, written.mark)

    def _client(self) -> aiohttp.ClientSession:
        """The keep-alive session to the peers, made at the first peer request (within the
        running loop) and closed by ``close``."""
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=256,
                    limit_per_host=0,
                    # Below the owners' edge.keepalive_timeout (30 s by default), so no
                    # request goes out on a connection the owner is closing.
                    keepalive_timeout=10.0,
                    enable_cleanup_closed=True,
                ),
                cookie_jar=aiohttp.DummyCookieJar(),
                auto_decompress=False,
                skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
                timeout=aiohttp.ClientTimeout(total=None),
                raise_for_status=False,
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def marked_for(view: PeerView, domain: DomainConfig, scheme: str | None = None) -> Marked:
    """What a peer's request is answered with, taken when it arrives: the label of this
    node's epoch and applied purge number, the domain's tag field, and the scheme."""
    position = position_of(view)
    label = None
    if position is not None:
        label = pack_label(PurgeLabel(*position))
    tag_field = next((n for n in domain.tag_headers if n.lower() in TAG_HEADERS), None)
    return Marked(label, tag_field, scheme, position)


def position_of(view: PeerView) -> tuple[str, int] | None:
    """The fleet purge position this node has applied: its epoch and purge number (None
    before its first sync)."""
    applied = view.applied
    return None if applied.epoch is None else (applied.epoch, applied.seq)


Handler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]
FullPath = Callable[
    [web.BaseRequest, DomainConfig, CIMultiDictProxy[str]], Awaitable[web.StreamResponse]
]


class PeerAnswers:
    """The answering side, an owner's: ``handle`` and ``https`` replace the Edge's with peer
    fills on (edge/handler.py sets them once, so with the feature off the code is the same).

    A request whose CDN-Loop names this cache is a peer's: it takes the full path (never the
    fast one, which has no label) under ``MARKED``; with a scheme claim, keyed by the claimed
    scheme when the peer key proves it, else refused."""

    def __init__(
        self,
        *,
        view: PeerView,
        name: str,
        plain: Handler,
        route: Callable[[str | None], DomainConfig | None],
        full: FullPath,
        https: Callable[[web.BaseRequest], bool],
        counts: PeerFills,
    ) -> None:
        self._counts = counts
        self._view = view
        self._name = name
        self._plain = plain
        self._route = route
        self._full = full
        self._https = https

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        headers = request.headers
        if CDN_LOOP not in headers or not loop_marked(headers.getall(CDN_LOOP), self._name):
            return await self._plain(request)
        config = self._route(headers.get(hdrs.HOST))
        if config is None:
            return respond.text(421, "421 Misdirected Request: this edge does not serve that host")
        scheme = None
        claim = headers.get(SCHEME_HEADER)
        if claim is not None:
            scheme = believed_scheme(unpack_scheme(claim), self._view.peer_key)
            if scheme is None:
                log.info("a peer request's scheme was refused (no valid peer key)")
                return respond.text(403, "403 Forbidden: not a peer of this fleet")
            # The origin is told this scheme too (Messages.headers reads the request's).
            request = request.clone(scheme=scheme)
        token = MARKED.set(marked_for(self._view, config, scheme))
        try:
            response = await self._full(request, config, headers)
        finally:
            MARKED.reset(token)
        # The owner's load. A response sent already (streamed) has its length; another, the
        # body it will be sent with.
        counts = self._counts
        counts.answers += 1
        if response.prepared:
            counts.answer_bytes += response.body_length
        elif isinstance(response, web.Response) and isinstance(response.body, bytes):
            counts.answer_bytes += len(response.body)
        return response

    def https(self, request: web.BaseRequest) -> bool:
        """Whether the request is keyed as https: a peer's by the scheme it proved."""
        marked = MARKED.get()
        if marked is not None and marked.scheme is not None:
            return marked.scheme == "https"
        return self._https(request)


def may_follow(flight: Flight) -> bool:
    """Whether this task may take the answer of ``flight``, a fill of its key that began
    before it arrived: any request may, but a peer's only when the flight began at the
    position its label says (no purge applied in between: the flight's origin request
    then came after every purge the label names). Otherwise its result may predate a purge
    the label covers, and a flight shares its result even when a purge made it
    unstorable: the peer's request fills by itself."""
    marked = MARKED.get()
    if marked is None:
        return True
    return marked.position is not None and flight.position == marked.position


FromStored = Callable[..., web.Response]


def labelled(from_stored: FromStored) -> FromStored:
    """``Messages.from_stored`` that, while a peer's request is answered, adds the label and
    the entry's tags (a peer fills its copy from this answer: the tags are what a tag purge
    finds it by there)."""

    def answer(
        request: web.BaseRequest,
        entry: StoredResponse,
        now: float,
        status: str,
        *,
        headers: Headers | None = None,
        rules: AppliedRules | None = None,
    ) -> web.Response:
        response = from_stored(request, entry, now, status, headers=headers, rules=rules)
        add_peer_fields(response.headers, entry.tags)
        return response

    return answer


def _last(headers: Headers | list[tuple[str, str]], name: str) -> str | None:
    """The last value of the field ``name`` (lowercase)."""
    found = None
    for field, value in headers:
        if field.lower() == name:
            found = value
    return found
