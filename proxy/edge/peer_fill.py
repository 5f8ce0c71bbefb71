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
  (``ask_origin``), once. A request costs at most one peer attempt and one origin attempt.
- **Answering** (``Edge.handle`` is ``answer_marked``'s when peer fills are on): a request
  whose CDN-Loop names this cache is a peer's. It takes the full path (never the fast one,
  which has no label), is never sent to a peer again (``MARKED``, read by ``ask``), and
  every answer made from a stored entry (``labelled``: Messages.from_stored, the one place
  such answers are made) carries the label taken when the request arrived, and the entry's
  tags in the domain's tag field, so the asking node's copy is covered by tag purges as the
  owner's is. Answers not made from an entry (relayed, unstored, streamed to the first
  client) carry no label: the asking node goes to the origin for those.

Only https-keyed requests are left to the origin: an owner keys a peer's request by its
own reading of the scheme (the peer is not a trusted proxy of it), which could differ.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Protocol

import aiohttp
from aiohttp import web

from proxy.config.model import DomainConfig
from proxy.core.cache.entry import StoredResponse
from proxy.core.cache.keys import cache_target
from proxy.core.cache.rules import Applied as AppliedRules
from proxy.core.http.fields import Headers
from proxy.core.lease import Applied
from proxy.core.peer import PurgeLabel, Route, owner_of, peer_route, usable
from proxy.core.purge.purges import TAG_HEADERS
from proxy.edge import bodies
from proxy.edge.forward import AskOrigin
from proxy.edge.origin import OriginResponse, origin_request
from proxy.errors import OriginError
from proxy.observe.log_floods import THROTTLED
from proxy.observe.telemetry import error_kind
from proxy.wire.peer import LABEL_HEADER, pack_label, unpack_label

log = logging.getLogger("proxy.peers")

CDN_LOOP = "CDN-Loop"
_LABEL = LABEL_HEADER.lower()


@dataclass(frozen=True, slots=True)
class Marked:
    """A peer's request being answered: the label its answers carry (None before this
    node's first sync: no label, and the asking node goes to the origin), and the field the
    domain's tags are sent in."""

    label: str | None
    tag_field: str | None


# Set while this process answers a peer's request (its own task: aiohttp runs each request
# in one), reset when the handler returns.
MARKED: ContextVar[Marked | None] = ContextVar("peer_marked", default=None)


class PeerView(Protocol):
    """What the fleet member knows (proxy/fleet/member.py): this node's name, the live
    nodes that take peer fills (name -> advertise URL), and the purge position applied."""

    @property
    def node(self) -> str: ...

    @property
    def peers(self) -> Mapping[str, str]: ...

    @property
    def applied(self) -> Applied: ...


class PeerFills:
    """The asking side; ``ask`` replaces ``Messages.ask`` for fills. Figures: requests sent
    to each peer, and its failures by kind (``timeout``, ``unreachable``, ``protocol``,
    ``label``: an answer not usable)."""

    def __init__(self, *, view: PeerView, name: str, timeout: float, ask_origin: AskOrigin) -> None:
        self._view = view
        self._name = name
        self._timeout = timeout
        self._ask_origin = ask_origin
        self._session: aiohttp.ClientSession | None = None
        self.requests: collections.Counter[str] = collections.Counter()
        self.errors: collections.Counter[tuple[str, str]] = collections.Counter()

    def owner(self, domain: str, target: str, headers: list[tuple[str, str]]) -> str | None:
        """The node that owns the fill's key, when it should be asked (None: the origin)."""
        if MARKED.get() is not None:
            return None  # the loop guard: a peer's request never goes to another peer
        view = self._view
        peers = view.peers
        if len(peers) < 2:
            return None
        scheme = _last(headers, "x-forwarded-proto")
        if scheme != "http":
            return None  # https: see the module's docstring
        key = f"{domain}\0{cache_target(target, False)}".encode()
        owner = owner_of(key, peers)
        if peer_route(owner=owner, me=view.node, marked=False) is not Route.PEER:
            return None
        return owner

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
            if method == "GET" and data is None:
                owner = self.owner(domain.name, target, headers)
            if owner is not None:
                answer = await self._from_owner(stack, owner, domain, target, headers)
            if answer is None:
                answer = await stack.enter_async_context(
                    self._ask_origin(domain, method, target, headers, data)
                )
            yield answer

    async def _from_owner(
        self,
        stack: AsyncExitStack,
        owner: str,
        domain: DomainConfig,
        target: str,
        headers: list[tuple[str, str]],
    ) -> OriginResponse | None:
        url = self._view.peers.get(owner)
        if url is None:
            return None
        applied = self._view.applied  # before sending: the label must cover it
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
                        [*headers, (CDN_LOOP, self._name)],
                        server=url,
                    )
                )
        except (OriginError, TimeoutError) as exc:
            await inner.aclose()
            kind = "timeout" if isinstance(exc, TimeoutError) else error_kind(exc)
            self.errors[owner, kind] += 1
            log.info(
                "peer %s (%s) not used for %s: %s", owner, url, domain.name, kind, extra=THROTTLED
            )
            return None
        label = unpack_label(_last(answer.headers, _LABEL))
        if not usable(label, epoch=applied.epoch, applied=applied.seq):
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


def marked_for(view: PeerView, domain: DomainConfig) -> Marked:
    """What a peer's request is answered with, taken when it arrives: the label of this
    node's epoch and applied purge number, and the domain's tag field."""
    applied = view.applied
    label = None
    if applied.epoch is not None:
        label = pack_label(PurgeLabel(applied.epoch, applied.seq))
    tag_field = next((n for n in domain.tag_headers if n.lower() in TAG_HEADERS), None)
    return Marked(label, tag_field)


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
        marked = MARKED.get()
        if marked is not None and marked.label is not None:
            response.headers[LABEL_HEADER] = marked.label
            if marked.tag_field is not None and entry.tags:
                separator = TAG_HEADERS[marked.tag_field.lower()]
                response.headers[marked.tag_field] = separator.join(entry.tags)
        return response

    return answer


def _last(headers: Headers | list[tuple[str, str]], name: str) -> str | None:
    """The last value of the field ``name`` (lowercase)."""
    found = None
    for field, value in headers:
        if field.lower() == name:
            found = value
    return found
