"""POST /api/v1/cdn/clear-cache: authenticate, check the body, clear one domain, audit.

The checks run in a fixed order, cheapest and least revealing first, and the body is not read
until the caller is known:

1. Authorization: missing → 401, malformed → 400 (RFC 6750 §3.1). Both count as failures.
2. Unknown, regenerated or revoked token → 401 invalid_token, a failure too; or 429 with
   Retry-After once this address has failed too often recently. Only failed attempts are
   throttled: a valid token is never refused because of its address's failures.
3. Content-Type not application/json, or a compressed body → 415.
4. Body over ``api.max_body_bytes`` (Content-Length, then counted while reading) → 413; not
   all there within ``api.body_timeout`` → 408.
5. Body not a UTF-8 JSON object with exactly one field, ``domain``, a host name → 400.
6. Token scope does not cover the domain → 403 insufficient_scope. This comes before 7 so a
   scoped token cannot probe which domains exist.
7. Domain not configured → 404.
8. Clear, and answer 200 ``Cache cleared`` only once the purger says the clear is in effect.

Steps 1-5 say who asks and for which domain; they are the API's own. Steps 5 (the host-name
check) to 8, and the audit record, are ``audited_clear``, which the dashboard's "Clear cache"
button calls too, with an admin as the caller: one path, one set of rules, one audit log.

Every attempt writes exactly one audit record, whatever its outcome. The actor is the token's
name for the API and ``admin:<name>`` for the dashboard (neither kind of name has a colon).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import NoReturn

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from proxy.api.problems import problem
from proxy.config import Config
from proxy.core.domains import normalise_domain
from proxy.core.ratelimit import FailureThrottle
from proxy.core.tokens import (
    BearerToken,
    MalformedCredentials,
    NoCredentials,
    Scope,
    parse_authorization,
)
from proxy.errors import ClearNotConfirmed, FleetUnavailable, NotReplicated, StateError
from proxy.state.sqlite import AsyncState, AuditRecord, TokenRecord
from proxy.store.base import Purger
from proxy.telemetry import Telemetry

CONFIRMATION = "Cache cleared"
CHALLENGE = 'Bearer realm="cdn-proxy"'
ADMIN_ACTOR = "admin:"  # + the admin's name: who cleared from the dashboard, in the audit log
# Every outcome an audit record can have, for the dashboard's History filter.
OUTCOMES = (
    "cleared",
    "bad_request",
    "unauthorized",
    "forbidden",
    "not_found",
    "too_large",
    "timed_out",
    "unsupported_media_type",
    "rate_limited",
    "unconfirmed",
    "error",
)

log = logging.getLogger("proxy.api")


@dataclass(slots=True)
class ClearCacheContext:
    """Everything the handler needs, kept in the app under CLEAR_CACHE_CONTEXT. Not frozen:
    a config reload replaces ``config`` (``reconfigure``), so that clears are accepted for
    the domains configured now, and the dashboard (which reads it from here) lists them."""

    config: Config
    state: AsyncState
    purger: Purger
    limiter: FailureThrottle
    clock: Callable[[], float]
    telemetry: Telemetry | None = None  # counts and times every attempt, by outcome

    def reconfigure(self, config: Config) -> None:
        """Take a reloaded config (proxy/reload.py): one attribute, read per request."""
        self.config = config

    @property
    def max_body_bytes(self) -> int:
        return self.config.api_role()[0].max_body_bytes

    @property
    def body_timeout(self) -> float:
        return self.config.api_role()[0].body_timeout


CLEAR_CACHE_CONTEXT = web.AppKey("clear_cache_context", ClearCacheContext)


class _Rejected(Exception):
    """The attempt ends here with this status; ``outcome`` goes to the audit log."""

    def __init__(
        self, outcome: str, status: int, detail: str, headers: Mapping[str, str] | None
    ) -> None:
        super().__init__(outcome)
        self.outcome = outcome
        self.status = status
        self.detail = detail
        self.headers: Mapping[str, str] = headers or {}


@dataclass(slots=True)
class Attempt:
    """What is known so far about an attempt, for its audit record."""

    actor: str | None = None
    domain: str | None = None
    entries_dropped: int = 0
    acked: int | None = None  # with a fleet: edge processes that applied the clear in time
    live: int | None = None  # of those whose lease was live


@dataclass(frozen=True, slots=True)
class Grant:
    """Who may clear what, and which domain they named (as given, not yet checked)."""

    scope: Scope
    domain: str


@dataclass(frozen=True, slots=True)
class ClearAnswer:
    """How an attempt ended: 200 with the confirmation, or the status and what to fix."""

    outcome: str
    status: int
    detail: str
    domain: str | None
    entries_dropped: int = 0
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def cleared(self) -> bool:
        return self.outcome == "cleared"


# Says who asks and for what (steps 1-5) at ``now``, raising _Rejected when it cannot.
Authorise = Callable[[Attempt, float], Awaitable[Grant]]


def _reject(
    outcome: str, status: int, detail: str, headers: dict[str, str] | None = None
) -> NoReturn:
    raise _Rejected(outcome, status, detail, headers)


async def audited_clear(
    ctx: ClearCacheContext, *, client: str | None, authorise: Authorise
) -> ClearAnswer:
    """The one path every clear takes: authorise, check the domain, clear, audit."""
    started = time.perf_counter()  # duration from a monotonic clock, not the wall clock
    now = ctx.clock()
    attempt = Attempt()
    try:
        grant = await authorise(attempt, now)
        entries = await _clear(ctx, attempt, grant)
        answer = ClearAnswer("cleared", 200, CONFIRMATION, attempt.domain, entries)
    except _Rejected as rejected:
        answer = ClearAnswer(
            rejected.outcome,
            rejected.status,
            rejected.detail,
            attempt.domain,
            headers=rejected.headers,
        )
    record = AuditRecord(
        at=now,
        actor=attempt.actor,
        client=client,
        domain=attempt.domain,
        outcome=answer.outcome,
        status=answer.status,
        entries_dropped=answer.entries_dropped,
        duration_ms=(time.perf_counter() - started) * 1000.0,
        acked=attempt.acked,
        live=attempt.live,
        answered_by=ctx.purger.name,
    )
    if ctx.telemetry is not None:
        ctx.telemetry.clear(attempt.domain, answer.outcome, record.duration_ms / 1000.0)
    # In the audit journal before the answer, so no crash can lose the record of a clear
    # already confirmed; in SQLite behind it (state.journal). If it cannot be written, the
    # answer stands: after a clear the cache *is* cleared, and saying otherwise would make a
    # deploy hook retry for nothing. The operator sees the lost record in the log.
    await ctx.state.record_audit(record)
    return answer


def as_admin(name: str, domain: str) -> Authorise:
    """The dashboard's caller: a signed-in admin, who may clear every configured domain."""

    async def authorise(attempt: Attempt, now: float) -> Grant:
        attempt.actor = ADMIN_ACTOR + name
        attempt.domain = domain
        return Grant(Scope.everything(), domain)

    return authorise


async def clear_cache(request: web.Request) -> web.Response:
    ctx = request.app[CLEAR_CACHE_CONTEXT]

    async def authorise(attempt: Attempt, now: float) -> Grant:
        return await _authorise_bearer(request, ctx, attempt, now)

    answer = await audited_clear(ctx, client=request.remote, authorise=authorise)
    if not answer.cleared:
        response = problem(answer.status, answer.detail, headers=answer.headers)
        if answer.status == 408:
            response.force_close()  # the rest of that body may still come: end the connection
        return response
    response = web.Response(text=CONFIRMATION, content_type="text/plain", charset="utf-8")
    response.headers["Cache-Control"] = "no-store"
    return response


async def _authorise_bearer(
    request: web.Request, ctx: ClearCacheContext, attempt: Attempt, now: float
) -> Grant:
    client = request.remote or "unknown"
    token = _bearer_token(request, ctx.limiter, client, now)
    record = await _authenticate(ctx, token, client, now)
    attempt.actor = record.name

    try:
        _check_media_type(request)
    except _Rejected:
        await _note_domain(request, ctx, attempt)
        raise
    body = await _read_body(request, ctx.max_body_bytes, ctx.body_timeout)
    return Grant(record.scope, _domain_from_body(body, attempt))


async def _note_domain(request: web.Request, ctx: ClearCacheContext, attempt: Attempt) -> None:
    """For the audit record of a known caller's request refused for its Content-Type (curl's
    -d sends a form type): the domain its body names, when it is a small uncompressed JSON
    body whose length was announced. Only for the record: the answer stays 415."""
    length = request.content_length
    if length is None or length > ctx.max_body_bytes or "Content-Encoding" in request.headers:
        return
    with contextlib.suppress(_Rejected):
        _domain_from_body(await _read_body(request, length, ctx.body_timeout), attempt)


async def _clear(ctx: ClearCacheContext, attempt: Attempt, grant: Grant) -> int:
    """Steps 5-8 for a caller already known: the domain, the scope, the clear."""
    attempt.domain = grant.domain
    if not grant.domain:
        _reject("bad_request", 400, "the field 'domain' must not be empty")
    try:
        domain = normalise_domain(grant.domain)
    except ValueError as exc:  # InvalidDomain, and anything idna lets through
        _reject("bad_request", 400, f"the field 'domain' is not a host name: {exc}")
    attempt.domain = domain

    if not grant.scope.allows(domain):
        _reject(
            "forbidden",
            403,
            f"this token may not clear {domain!r}",
            {"WWW-Authenticate": f'{CHALLENGE}, error="insufficient_scope"'},
        )
    if domain not in ctx.config.by_name:
        _reject("not_found", 404, f"{domain!r} is not a domain of this CDN")

    started = time.perf_counter()
    try:
        result = await ctx.purger.clear_domain(domain)
    except ClearNotConfirmed as exc:
        # Recorded in the fleet, but not every live edge process could be shown to have
        # applied it in time: no 200 (decision 0014). Retrying is safe.
        log.warning("%s", exc)
        attempt.acked, attempt.live = exc.acked, exc.live
        _reject(
            "unconfirmed",
            503,
            f"the clear of {domain!r} is recorded and was applied by {exc.acked} of {exc.live}"
            " live edge processes in time; the others apply it when they next reach the fleet,"
            f" or stop serving from their cache within {exc.retry_after} s. Retrying is safe.",
            {"Retry-After": str(exc.retry_after)},
        )
    except FleetUnavailable as exc:
        log.warning("clearing %s: %s", domain, exc)
        why = "the fleet's Valkey did not answer"
        if isinstance(exc, NotReplicated):
            why = "too few of the fleet's Valkey replicas confirmed it in time"
        _reject(
            "error",
            503,
            f"the cache of {domain!r} could not be cleared: {why}; nothing is confirmed."
            " Retrying is safe.",
            {"Retry-After": "1"},
        )
    except Exception:
        # Nothing was confirmed, so say so plainly and let the caller retry; the audit log
        # records the failure.
        log.exception("clearing %s failed", domain)
        _reject("error", 503, f"the cache of {domain!r} could not be cleared; try again")
    attempt.entries_dropped = result.entries_dropped
    attempt.acked, attempt.live = result.acked, result.live
    if result.live is not None and ctx.telemetry is not None:
        ctx.telemetry.purge_acknowledged(time.perf_counter() - started)
    return result.entries_dropped


def _bearer_token(request: web.Request, limiter: FailureThrottle, client: str, now: float) -> str:
    values = request.headers.getall("Authorization", [])
    credentials = (
        MalformedCredentials("more than one Authorization header")
        if len(values) > 1
        else parse_authorization(values[0] if values else None)
    )
    match credentials:
        case BearerToken(token=token):
            return token
        case NoCredentials():
            limiter.record_failure(client, now)
            _reject(
                "unauthorized",
                401,
                "an Authorization header with a Bearer token is required",
                {"WWW-Authenticate": CHALLENGE},
            )
        case MalformedCredentials(reason=reason):
            limiter.record_failure(client, now)
            _reject(
                "bad_request",
                400,
                reason,
                {"WWW-Authenticate": f'{CHALLENGE}, error="invalid_request"'},
            )


async def _authenticate(ctx: ClearCacheContext, token: str, client: str, now: float) -> TokenRecord:
    try:
        record = await ctx.state.authenticate(token, now)
    except StateError as exc:
        log.error("token lookup failed: %s", exc)
        _reject("error", 503, "the token database is unavailable; try again")
    if record is None:
        # Only a wrong token is throttled: refusing a right one because of other clients'
        # failures at the same address (a CI NAT, a proxy) would block every purge behind
        # it. A guess that comes back 429 rather than 401 still learns only "wrong", and
        # with 256 random bits no rate of guessing can find a token (decision 0006).
        wait = ctx.limiter.retry_after(client, now)
        if wait is not None:
            _reject(
                "rate_limited",
                429,
                f"too many failed authentications from this address; retry in {wait} s",
                {"Retry-After": str(wait)},
            )
        ctx.limiter.record_failure(client, now)
        _reject(
            "unauthorized",
            401,
            "the token is not valid (it may have been regenerated or revoked)",
            {"WWW-Authenticate": f'{CHALLENGE}, error="invalid_token"'},
        )
    return record


def _check_media_type(request: web.Request) -> None:
    types = request.headers.getall("Content-Type", [])
    media_type = types[0].split(";", 1)[0].strip().lower() if len(types) == 1 else ""
    if media_type != "application/json":
        _reject(
            "unsupported_media_type",
            415,
            "the body must be sent as Content-Type: application/json",
            {"Accept-Post": "application/json"},
        )
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding != "identity":
        # A compressed body could expand past max_body_bytes before it is counted.
        _reject("unsupported_media_type", 415, "the body must not be compressed")


async def _read_body(request: web.Request, limit: int, within: float) -> bytes:
    too_large = f"the body must be at most {limit} bytes"
    if request.content_length is not None and request.content_length > limit:
        _reject("too_large", 413, too_large)
    body = bytearray()
    try:
        # The whole body within `within` seconds: it is at most `limit` bytes, so a client still
        # sending after that (or one that announced more than it sends) is stalling, and
        # would otherwise hold this request open for as long as it keeps the connection.
        async with asyncio.timeout(within):
            # Counted as it arrives: a chunked body has no Content-Length to check up front.
            while chunk := await request.content.read(limit + 1 - len(body)):
                body += chunk
                if len(body) > limit:
                    _reject("too_large", 413, too_large)
    except TimeoutError:
        _reject(
            "timed_out",
            408,
            f"the body did not arrive within {within:g} s",
        )
    except (HttpProcessingError, ConnectionError):
        _reject("bad_request", 400, "the body could not be read")
    return bytes(body)


class _DuplicateField(ValueError):
    pass


def _unique_fields(pairs: list[tuple[str, object]]) -> dict[str, object]:
    # Two "domain" fields would be read differently by different parsers; refuse both.
    fields: dict[str, object] = {}
    for name, value in pairs:
        if name in fields:
            raise _DuplicateField(name)
        fields[name] = value
    return fields


def _no_constants(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")  # NaN and Infinity are Python's, not RFC 8259's


def _domain_from_body(body: bytes, attempt: Attempt) -> str:
    """The domain string the body names, as given. Once the body is known to name one, it
    goes in the attempt's audit record, even if the body is refused for another field."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        _reject("bad_request", 400, "the body is not UTF-8")
    if not text.strip():
        _reject("bad_request", 400, 'the body is empty; send {"domain": "<cdn domain>"}')
    try:
        data = json.loads(text, object_pairs_hook=_unique_fields, parse_constant=_no_constants)
    except _DuplicateField as exc:
        _reject("bad_request", 400, f"the body has the field {exc.args[0]!r} more than once")
    except (ValueError, RecursionError):
        _reject("bad_request", 400, "the body is not valid JSON")
    if not isinstance(data, dict):
        _reject("bad_request", 400, 'the body must be a JSON object: {"domain": "<cdn domain>"}')
    if "domain" not in data:
        _reject("bad_request", 400, "the field 'domain' is required")
    if isinstance(data["domain"], str):
        attempt.domain = data["domain"]
    extra = sorted(name for name in data if name != "domain")
    if extra:
        _reject("bad_request", 400, f"unknown fields: {', '.join(map(repr, extra))}")
    raw = data["domain"]
    if not isinstance(raw, str):
        _reject("bad_request", 400, "the field 'domain' must be a string")
    return raw  # checked as a host name by _clear, on the path the dashboard shares
