"""POST /api/v1/cdn/trace: explain how the edge would answer one URL (issue 25 §3, decision 0038).

The same gate as a purge (proxy/api/gate.py: Bearer token, throttling, media type, body size
and time), and the token's scope must cover the URL's domain (else 403). The body::

    {"url": "https://example.com/p?utm_source=x", "headers": {"Cookie": "a=1"}, "fetch": false}

The answer is the JSON of ``core.cache.trace.trace``. A trace changes nothing: the store is
read with ``inspect`` (no recency, no purge mark, no counter), no fill happens, no audit
record is written, and the origin is asked only with ``"fetch": true``: then one GET whose
answer is assessed (``policy.assess_response``) and dropped, never stored.

Where the store lives in other processes, a node's control process asks its edge workers
(proxy/api/trace_workers.py), or reads its shared tier when it has one (``inspect``); a
control process with neither (a fleet's API-only node) answers ``unknown`` unless the rules
alone decide (a bypass). On a fleet with peer fills the answer names the key's owner and
whether it answered (proxy/api/trace_owner.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web
from aiohttp.helpers import ChainMapProxy

from proxy.api import gate
from proxy.api.problems import problem
from proxy.api.readiness import READINESS
from proxy.api.trace_owner import PeerDirectory, owner_word
from proxy.api.trace_workers import ASK_WORKERS, AskWorkers, traced_by_workers
from proxy.config.model import CacheConfig, Config, DomainConfig, EdgeConfig
from proxy.core.auth.tokens import Scope
from proxy.core.cache.policy import DontStore, Storable, assess_response
from proxy.core.cache.rules import Applied
from proxy.core.cache.targeted import surrogate_capability
from proxy.core.cache.trace import Held, Server, TraceHeaders, trace
from proxy.core.domains import normalise_domain
from proxy.core.http.compression import codings_of
from proxy.core.http.encodings import preferred
from proxy.core.http.headers import to_origin
from proxy.edge.origin import origin_error
from proxy.errors import FleetUnavailable
from proxy.store.base import Positioned

EXAMPLE = '{"url": "https://<cdn domain>/path?query", "headers": {"Cookie": "a=1"}}'
FIELDS = ("url", "headers", "fetch", "method")
# RFC 9110 §5.1 field names (tokens) and §5.5 values (no controls but tab)
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
# The name in Via of a node without an edge (an API-only node): the edge's default.
DEFAULT_VIA: str = EdgeConfig.__dataclass_fields__["via"].default  # type: ignore[assignment]
# The edges' cache name (CDN-Loop) on a node without [cache]: the default.
DEFAULT_NAME: str = CacheConfig.__dataclass_fields__["name"].default  # type: ignore[assignment]
FETCH_TIMEOUT = 10.0  # seconds for the one origin request of a fetch


@dataclass(frozen=True, slots=True)
class TraceRequest:
    domain: str
    target: str
    https: bool
    method: str
    headers: tuple[tuple[str, str], ...]
    fetch: bool


Inspect = Callable[[str, str], Held]
# What the store holds for a URL, read changing nothing; absent: no store in this process.
INSPECT: web.AppKey[Inspect] = web.AppKey("trace_inspect")
# The fleet's live nodes that take peer fills and its peer key, for the key's owner;
# absent: no fleet.
PEER_NODES: web.AppKey[PeerDirectory] = web.AppKey("trace_peer_nodes")


async def trace_route(request: web.Request) -> web.Response:
    ctx = request.app[gate.PURGE_CONTEXT]
    attempt = gate.Attempt()
    wanted: list[TraceRequest] = []

    def read(body: bytes, scope: Scope, attempt: gate.Attempt) -> gate.Grant:
        wanted.append(read_trace(body))
        return gate.Grant(scope, wanted[0].domain)

    try:
        grant = await gate.authorise_bearer(
            request, ctx, attempt, ctx.clock(), limit=ctx.max_purge_body_bytes, read=read
        )
        domain = gate.check_domain(ctx, attempt, grant, "trace")
    except gate.Rejected as rejected:
        return problem(rejected.status, rejected.detail, headers=rejected.headers)
    asked = wanted[0]
    config = ctx.config.by_name[domain]
    inspect = request.app.get(INSPECT)
    peers = request.app.get(PEER_NODES)
    answer = await traced(
        request.app,
        config,
        asked,
        inspect,
        ctx.clock,
        client_address=request.remote or "",
        via=via_of(ctx.config),
    )
    if isinstance(ctx.purger, Positioned):
        await in_fleet_numbers(answer, ctx.purger, domain)
    await with_owner(answer, peers, ctx.config, config)
    body = json.dumps(answer, ensure_ascii=True).encode("ascii")
    response = web.Response(body=body, content_type="application/json")
    response.headers["Cache-Control"] = "no-store"
    return response


async def with_owner(
    answer: dict[str, object], peers: PeerDirectory | None, config: Config, domain: DomainConfig
) -> None:
    """Add the key's owner to the trace ``answer`` (``owner``: trace_owner.py) when the
    fleet's nodes take peer fills (``peers``, the API app's ``PEER_NODES``): the trace
    endpoint's and the dashboard's trace form's one way to it."""
    if peers is None:
        return
    name = config.cache.name if config.cache is not None else DEFAULT_NAME
    owner = await owner_word(peers, domain.name, str(answer["key_target"]), name=name)
    if owner is not None:
        answer["owner"] = owner


async def traced(
    app: web.Application | ChainMapProxy,
    config: DomainConfig,
    asked: TraceRequest,
    inspect: Inspect | None,
    clock: Callable[[], float],
    *,
    client_address: str,
    via: str,
) -> dict[str, object]:
    """The trace of ``asked`` with this process's store and origin states; a fetch is sent
    as from ``client_address`` (whoever asked for the trace) through a proxy named ``via``."""
    path = asked.target.partition("?")[0]
    applied = None if config.rules is None else config.rules.match(path)
    # The request as the edge would see it, traced twice: first alone (for its key), then
    # with what the store holds under that key, the origins and the fetch.
    explain = partial(
        trace,
        domain=config.name,
        rules=config.rules,
        asked=asked,
        codings=codings_of(config.encodings, config.compress),
    )
    probe = explain(held=None, now=clock())
    key_target = str(probe["key_target"])
    held = None if inspect is None else inspect(config.name, key_target)
    ask = app.get(ASK_WORKERS)
    if held is not None and held.refused is None and ask is not None:
        # A node's shared tier, read here: its workers remember what they did not store.
        held = await refused_by_workers(ask, held, config.name, key_target)
    servers = _servers(app, config)
    fetched = None
    if asked.fetch:
        fetched = await _fetch(
            config,
            asked,
            str(probe["key"]),
            servers,
            applied,
            clock,
            client_address=client_address,
            via=via,
        )
    answer = explain(
        held=held, now=clock(), servers=servers, balance=config.balance, fetched=fetched
    )
    if held is None and answer["outcome"] != "bypass":
        workers = None
        if ask is not None:
            workers = await traced_by_workers(
                ask,
                config.name,
                key_target,
                lambda held: explain(
                    held=held, now=clock(), servers=servers, balance=config.balance, fetched=fetched
                ),
            )
        if workers is not None:
            return workers
        answer.update(outcome="unknown", why="the store is not in this process", entry=None)
    return answer


async def refused_by_workers(ask: AskWorkers, held: Held, domain: str, target: str) -> Held:
    """``held`` with the latest refusal of the key any worker remembers (hit-for-miss)."""
    answers = await ask(domain, target)
    refusals = [one.refused for one in answers.values() if one is not None and one.refused]
    if not refusals:
        return held
    return replace(held, refused=max(refusals, key=lambda refusal: refusal[2]))


async def in_fleet_numbers(answer: dict[str, object], fleet: Positioned, domain: str) -> None:
    """With a fleet, its numbers in the store's row: each edge process and the shared tier
    number purges in a count of their own, which is not the series of the receipts (issue
    34 B3). ``purge_number`` becomes the fleet's latest number (every live edge process
    applied every purge up to it), ``generation`` the number of the domain's last clear.
    Valkey out of reach: both are null, and ``numbers`` says why."""
    store = answer.get("store")
    if not isinstance(store, dict):
        return
    try:
        position = await fleet.position(domain)
    except FleetUnavailable as exc:
        store.update(generation=None, purge_number=None, numbers=f"unknown: {exc}")
        return
    store.update(
        generation=position.generation, purge_number=position.number, numbers="the fleet's"
    )


def _servers(app: web.Application | ChainMapProxy, config: DomainConfig) -> list[Server]:
    """The domain's origin servers as the edge sees them (its health), or as configured."""
    states = app[READINESS].edge_states
    rows = [r for r in (states() if states is not None else []) if r.get("domain") == config.name]
    if rows:
        return [
            Server(
                str(r["origin"]),
                bool(r["backup"]),
                bool(r["up"]),
                None if r.get("last_failure") is None else str(r["last_failure"]),
            )
            for r in rows
        ]
    primary = [Server(url, False, True) for url in config.origins or (config.origin,)]
    return primary + [Server(url, True, True) for url in config.backup_origins]


def fill_head(
    config: DomainConfig, asked: TraceRequest, *, client_address: str, via: str
) -> list[tuple[str, str]]:
    """The head a fill of ``asked`` sends the origin, built as the edge builds every origin
    request's (``to_origin``): the trace's fields are a client's, never a trusted proxy's, so
    forwarding claims, framing and hop-by-hop fields are dropped and the proxy's own set."""
    codings = codings_of(config.encodings, config.compress)
    asked_codings = [value for name, value in asked.headers if name.lower() == "accept-encoding"]
    head = to_origin(
        asked.headers,
        domain=config.name,
        client_address=client_address,
        scheme="https" if asked.https else "http",
        via=via,
        cacheable=True,
        accept_encoding=preferred(asked_codings, codings),
    )
    head.append(("Surrogate-Capability", surrogate_capability(config.name)))
    return head


async def _fetch(
    config: DomainConfig,
    asked: TraceRequest,
    key: str,
    servers: list[Server],
    applied: Applied | None,
    clock: Callable[[], float],
    *,
    client_address: str,
    via: str,
) -> Storable | DontStore:
    """One GET to the first up origin server, assessed as a fill would be, never stored."""
    server = next((s for s in servers if s.up), servers[0] if servers else None)
    if server is None:
        return DontStore("no origin server")
    fields = fill_head(config, asked, client_address=client_address, via=via)
    timeout = aiohttp.ClientTimeout(total=FETCH_TIMEOUT)
    started = clock()
    try:
        async with (
            aiohttp.ClientSession(auto_decompress=False, timeout=timeout) as session,
            session.get(server.url + key, headers=fields, allow_redirects=False) as response,
        ):
            # Only the answer's head is assessed: its body is never read (the connection is
            # closed with it unread), so a trace holds no object in memory, however large.
            status, reason = response.status, response.reason or ""
            got = tuple(response.headers.items())
    except ValueError:  # a field the client library would not send
        return DontStore("origin not asked: a request field cannot be sent")
    except (aiohttp.ClientError, TimeoutError) as exc:  # worded as the edge words it
        return DontStore(f"origin failed: {origin_error(exc, server.url)}")
    return assess_response(
        method="GET",
        request=TraceHeaders(asked.headers),
        status=status,
        reason=reason,
        headers=got,
        request_time=started,
        response_time=clock(),
        heuristic=config.heuristic_freshness,
        rules=applied,
    )


def via_of(config: Config) -> str:
    """The name this node's edge gives itself in Via (the default on an API-only node)."""
    return DEFAULT_VIA if config.edge is None else config.edge.via


# -- the body --------------------------------------------------------------------------------


def read_trace(body: bytes) -> TraceRequest:
    """The trace the body asks for, or 400 naming the field."""
    data = gate.json_object(body, EXAMPLE)
    extra = sorted(name for name in data if name not in FIELDS)
    if extra:
        gate.reject("bad_request", 400, f"unknown fields: {', '.join(map(repr, extra))}")
    url = data.get("url")
    if not isinstance(url, str) or not url:
        gate.reject("bad_request", 400, "the field 'url' is required: an http(s) URL")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError as exc:
        gate.reject("bad_request", 400, f"the field 'url' is not a URL: {exc}")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        gate.reject("bad_request", 400, "the field 'url' must be an http:// or https:// URL")
    try:
        domain = normalise_domain(parts.hostname)
    except ValueError as exc:
        gate.reject("bad_request", 400, f"the field 'url' has no valid host name: {exc}")
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    method = data.get("method", "GET")
    if not isinstance(method, str) or not method.isalpha() or not method.isupper():
        gate.reject("bad_request", 400, "the field 'method' must be a method such as GET")
    fetch = data.get("fetch", False)
    if type(fetch) is not bool:
        gate.reject("bad_request", 400, "the field 'fetch' must be true or false")
    return TraceRequest(domain, target, parts.scheme == "https", method, _headers(data), fetch)


def _headers(data: Mapping[str, object]) -> tuple[tuple[str, str], ...]:
    raw = data.get("headers", {})
    if not isinstance(raw, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in raw.items()
    ):
        gate.reject("bad_request", 400, "the field 'headers' must map field names to strings")
    bad = next((k for k, v in raw.items() if not _TOKEN.fullmatch(k) or _CONTROL.search(v)), None)
    if bad is not None:
        gate.reject("bad_request", 400, f"the field 'headers' has a bad field {bad!r}")
    return tuple(raw.items())
