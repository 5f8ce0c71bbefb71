"""What every write of the control plane passes before it acts: who asks, and for which domain.

``POST /api/v1/cdn/clear-cache`` (clear_cache.py) and ``POST /api/v1/cdn/purge`` (purge.py)
share these steps, in this order, cheapest and least revealing first, and the body is not
read until the caller is known:

1. Authorization: missing → 401, malformed → 400 (RFC 6750 §3.1). Both count as failures.
2. Unknown, regenerated or revoked token → 401 invalid_token, a failure too; or 429 with
   Retry-After once this address has failed too often recently. Only failed attempts are
   throttled: a valid token is never refused because of its address's failures.
3. Content-Type not application/json, or a compressed body → 415.
4. Body over the endpoint's limit (Content-Length, then counted while reading) → 413; not
   all there within ``api.body_timeout`` → 408.
5. Body not a UTF-8 JSON object (no duplicate fields, no NaN/Infinity) → 400; what each
   endpoint reads from it is its own (``BodyReader``).
6. Token scope does not cover the domain → 403 insufficient_scope, before 7 so a scoped
   token cannot probe which domains exist.
7. Domain not configured → 404.

A refusal is a ``Rejected`` exception with the outcome the audit log records.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from proxy.api.problems import problem
from proxy.config.model import Config
from proxy.core.auth.ratelimit import FailureThrottle
from proxy.core.auth.tokens import (
    BearerToken,
    MalformedCredentials,
    NoCredentials,
    Scope,
    parse_authorization,
)
from proxy.core.domains import normalise_domain
from proxy.errors import (
    ClearNotConfirmed,
    FleetUnavailable,
    NotReplicated,
    PurgeUnsupported,
    StateError,
)
from proxy.observe.telemetry import Telemetry
from proxy.state.async_state import AsyncState
from proxy.state.sqlite import AuditRecord, TokenRecord
from proxy.store.base import Purger

if TYPE_CHECKING:
    from proxy.core.purge.purges import Purge

CHALLENGE = 'Bearer realm="cdn-proxy"'
ADMIN_ACTOR = "admin:"  # + the admin's name: who cleared from the dashboard, in the audit log

log = logging.getLogger("proxy.api")


@dataclass(slots=True)
class PurgeContext:
    """Everything the clear and purge handlers need, kept in the app under
    PURGE_CONTEXT. Not frozen: a config reload replaces ``config`` (``reconfigure``), so
    that clears are accepted for the domains configured now, and the dashboard (which reads it
    from here) lists them."""

    config: Config
    state: AsyncState
    purger: Purger
    limiter: FailureThrottle  # one for both endpoints: a wrong token is wrong on either
    clock: Callable[[], float]
    telemetry: Telemetry | None = None  # counts and times every attempt, by outcome

    def reconfigure(self, config: Config) -> None:
        """Take a reloaded config (proxy/process/reload.py): one attribute, read per request."""
        self.config = config

    @property
    def max_body_bytes(self) -> int:
        return self.config.api_role()[0].max_body_bytes

    @property
    def max_purge_body_bytes(self) -> int:
        return self.config.api_role()[0].max_purge_body_bytes

    @property
    def body_timeout(self) -> float:
        return self.config.api_role()[0].body_timeout


PURGE_CONTEXT = web.AppKey("purge_context", PurgeContext)


class Rejected(Exception):
    """The attempt ends here with this status; ``outcome`` goes to the audit log."""

    def __init__(
        self, outcome: str, status: int, detail: str, headers: Mapping[str, str] | None
    ) -> None:
        super().__init__(outcome)
        self.outcome = outcome
        self.status = status
        self.detail = detail
        self.headers: Mapping[str, str] = headers or {}


def refusal(status: int, detail: str, headers: Mapping[str, str]) -> web.Response:
    """A refused clear's or purge's answer, a problem; after a 408 (body too slow) the
    connection ends, as the rest of that body may still come."""
    response = problem(status, detail, headers=headers)
    if status == 408:
        response.force_close()
    return response


def reject(
    outcome: str, status: int, detail: str, headers: dict[str, str] | None = None
) -> NoReturn:
    raise Rejected(outcome, status, detail, headers)


@dataclass(slots=True)
class Attempt:
    """What is known so far about an attempt, for its audit record."""

    actor: str | None = None
    domain: str | None = None
    entries_dropped: int = 0
    acked: int | None = None  # with a fleet: edge processes that applied the clear in time
    live: int | None = None  # of those whose lease was live
    kind: str | None = None  # a purge's kind, once the body names one (None: a clear)


@dataclass(frozen=True, slots=True)
class Grant:
    """Who may act on what, and which domain they named (as given, not yet checked); for
    the purge endpoint, the purge its body asked for."""

    scope: Scope
    domain: str
    purge: Purge | None = None


# Says who asks and for what (steps 1-5) at ``now``, raising Rejected when it cannot.
Authorise = Callable[[Attempt, float], Awaitable[Grant]]
# Reads an endpoint's body (step 5) for a caller with this scope.
BodyReader = Callable[[bytes, Scope, Attempt], Grant]


def audit_record(
    ctx: PurgeContext,
    attempt: Attempt,
    outcome: str,
    status: int,
    *,
    at: float,
    client: str | None,
    started: float,
    receipt: str | None = None,
) -> AuditRecord:
    """The audit record of an attempt that began at ``started`` (perf_counter) and ended
    now, with ``outcome`` and ``status``."""
    return AuditRecord(
        at=at,
        actor=attempt.actor,
        client=client,
        domain=attempt.domain,
        outcome=outcome,
        status=status,
        entries_dropped=attempt.entries_dropped,
        duration_ms=(time.perf_counter() - started) * 1000.0,
        acked=attempt.acked,
        live=attempt.live,
        answered_by=ctx.purger.name,
        kind=attempt.kind,
        receipt=receipt,
    )


def as_admin(name: str, domain: str) -> Authorise:
    """The dashboard's caller: a signed-in admin, who may act on every configured domain."""

    async def authorise(attempt: Attempt, now: float) -> Grant:
        attempt.actor = ADMIN_ACTOR + name
        attempt.domain = domain
        return Grant(Scope.everything(), domain)

    return authorise


async def authorise_bearer(
    request: web.Request,
    ctx: PurgeContext,
    attempt: Attempt,
    now: float,
    *,
    limit: int,
    read: BodyReader,
) -> Grant:
    """Steps 1-5 for a request with a Bearer token and a JSON body of at most ``limit``."""
    client = request.remote or "unknown"
    token = _bearer_token(request, ctx.limiter, client, now)
    record = await _authenticate(ctx, token, client, now)
    attempt.actor = record.name

    try:
        _check_media_type(request)
    except Rejected:
        await _note_body(
            request, ctx, attempt, limit, lambda body: read(body, record.scope, attempt)
        )
        raise
    body = await _read_body(request, limit, ctx.body_timeout)
    return read(body, record.scope, attempt)


async def _note_body(
    request: web.Request,
    ctx: PurgeContext,
    attempt: Attempt,
    limit: int,
    read: Callable[[bytes], object],
) -> None:
    """For the audit record of a known caller's request refused for its Content-Type (curl's
    -d sends a form type): what its body names, when it is a small uncompressed JSON body
    whose length was announced. Only for the record: the answer stays 415."""
    length = request.content_length
    if length is None or length > limit or "Content-Encoding" in request.headers:
        return
    with contextlib.suppress(Rejected):
        read(await _read_body(request, length, ctx.body_timeout))


def check_domain(ctx: PurgeContext, attempt: Attempt, grant: Grant, verb: str) -> str:
    """Steps 5-7 for a caller already known: the domain as a host name, the scope, the
    configured domains. ``verb`` says what the token may not do, in the 403."""
    attempt.domain = grant.domain
    if not grant.domain:
        reject("bad_request", 400, "the field 'domain' must not be empty")
    try:
        domain = normalise_domain(grant.domain)
    except ValueError as exc:  # InvalidDomain, and anything idna lets through
        reject("bad_request", 400, f"the field 'domain' is not a host name: {exc}")
    attempt.domain = domain

    if not grant.scope.allows(domain):
        reject(
            "forbidden",
            403,
            f"this token may not {verb} {domain!r}",
            {"WWW-Authenticate": f'{CHALLENGE}, error="insufficient_scope"'},
        )
    if domain not in ctx.config.by_name:
        reject("not_found", 404, f"{domain!r} is not a domain of this CDN")
    return domain


@contextlib.contextmanager
def purger_failures(attempt: Attempt, domain: str, *, action: str, failed: str) -> Iterator[None]:
    """What the purger raises, as the attempt's 503 (step 8 of a clear or a purge).
    ``action`` names it ("clear"), ``failed`` says what did not happen ("the cache of
    'example.com' could not be cleared")."""
    try:
        yield
    except ClearNotConfirmed as exc:
        # Recorded in the fleet, but not every live edge process could be shown to have
        # applied it in time: no 200 (decision 0014). Retrying is safe.
        log.warning("%s", exc)
        attempt.acked, attempt.live = exc.acked, exc.live
        reject(
            "unconfirmed",
            503,
            f"the {action} of {domain!r} is recorded and was applied by {exc.acked} of"
            f" {exc.live} live edge processes in time; the others apply it when they next"
            " reach the fleet, or stop serving from their cache within"
            f" {exc.retry_after} s. Retrying is safe.",
            {"Retry-After": str(exc.retry_after)},
        )
    except PurgeUnsupported as exc:
        # Some edge processes run a build that would ack the purge without applying it:
        # refused before anything was recorded (decision 0026). Not worth a quick retry.
        log.warning("%s: %s", failed, exc)
        reject("error", 503, f"{failed}: {exc}; nothing was purged.", {"Retry-After": "60"})
    except FleetUnavailable as exc:
        log.warning("%s: %s", failed, exc)
        why = "the fleet's Valkey did not answer"
        if isinstance(exc, NotReplicated):
            why = "too few of the fleet's Valkey replicas confirmed it in time"
        reject(
            "error",
            503,
            f"{failed}: {why}; nothing is confirmed. Retrying is safe.",
            {"Retry-After": "1"},
        )
    except Exception:
        # Nothing was confirmed, so say so plainly and let the caller retry; the audit log
        # records the failure.
        log.exception("%s", failed)
        reject("error", 503, f"{failed}; try again")


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
            reject(
                "unauthorized",
                401,
                "an Authorization header with a Bearer token is required",
                {"WWW-Authenticate": CHALLENGE},
            )
        case MalformedCredentials(reason=reason):
            limiter.record_failure(client, now)
            reject(
                "bad_request",
                400,
                reason,
                {"WWW-Authenticate": f'{CHALLENGE}, error="invalid_request"'},
            )


async def _authenticate(ctx: PurgeContext, token: str, client: str, now: float) -> TokenRecord:
    try:
        record = await ctx.state.authenticate(token, now)
    except StateError as exc:
        log.error("token lookup failed: %s", exc)
        reject("error", 503, "the token database is unavailable; try again")
    if record is None:
        # Only a wrong token is throttled: refusing a right one because of other clients'
        # failures at the same address (a CI NAT, a proxy) would block every purge behind
        # it. A guess that comes back 429 rather than 401 still learns only "wrong", and
        # with 256 random bits no rate of guessing can find a token (decision 0006).
        wait = ctx.limiter.retry_after(client, now)
        if wait is not None:
            reject(
                "rate_limited",
                429,
                f"too many failed authentications from this address; retry in {wait} s",
                {"Retry-After": str(wait)},
            )
        ctx.limiter.record_failure(client, now)
        reject(
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
        reject(
            "unsupported_media_type",
            415,
            "the body must be sent as Content-Type: application/json",
            {"Accept-Post": "application/json"},
        )
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding != "identity":
        # A compressed body could expand past the limit before it is counted.
        reject("unsupported_media_type", 415, "the body must not be compressed")


async def _read_body(request: web.Request, limit: int, within: float) -> bytes:
    too_large = f"the body must be at most {limit} bytes"
    if request.content_length is not None and request.content_length > limit:
        reject("too_large", 413, too_large)
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
                    reject("too_large", 413, too_large)
    except TimeoutError:
        reject(
            "timed_out",
            408,
            f"the body did not arrive within {within:g} s",
        )
    except (HttpProcessingError, ConnectionError):
        reject("bad_request", 400, "the body could not be read")
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


def json_object(body: bytes, example: str) -> dict[str, object]:
    """The body as a JSON object, or 400 saying why not; ``example`` shows what to send."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        reject("bad_request", 400, "the body is not UTF-8")
    if not text.strip():
        reject("bad_request", 400, f"the body is empty; send {example}")
    try:
        data = json.loads(text, object_pairs_hook=_unique_fields, parse_constant=_no_constants)
    except _DuplicateField as exc:
        reject("bad_request", 400, f"the body has the field {exc.args[0]!r} more than once")
    except (ValueError, RecursionError):
        reject("bad_request", 400, "the body is not valid JSON")
    if not isinstance(data, dict):
        reject("bad_request", 400, f"the body must be a JSON object: {example}")
    return data
