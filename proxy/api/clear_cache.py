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

Steps 1-7 are shared with the purge endpoint (proxy/api/gate.py); steps 1-5 say who asks
and for which domain, and are the API's own. Steps 5 (the host-name check) to 8, and the
audit record, are ``audited_clear``, which the dashboard's "Clear cache" button calls too,
with an admin as the caller: one path, one set of rules, one audit log.

Every attempt writes exactly one audit record, whatever its outcome. The actor is the token's
name for the API and ``admin:<name>`` for the dashboard (neither kind of name has a colon).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from aiohttp import web

from proxy.api.gate import (
    PURGE_CONTEXT,
    Attempt,
    Authorise,
    Grant,
    PurgeContext,
    Rejected,
    as_admin,
    audit_record,
    authorise_bearer,
    check_domain,
    json_object,
    purger_failures,
    refusal,
    reject,
)
from proxy.core.auth.tokens import Scope

__all__ = [
    "CONFIRMATION",
    "OUTCOMES",
    "PURGE_CONTEXT",
    "Attempt",
    "Authorise",
    "ClearAnswer",
    "Grant",
    "PurgeContext",
    "as_admin",
    "audited_clear",
    "clear_cache",
]

CONFIRMATION = "Cache cleared"
EXAMPLE = '{"domain": "<cdn domain>"}'
# Every outcome an audit record can have, for the dashboard's History filter: a clear's,
# then a purge's (proxy/api/purge.py).
OUTCOMES = (
    "cleared",
    "purged",
    "dry_run",
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


async def audited_clear(
    ctx: PurgeContext, *, client: str | None, authorise: Authorise
) -> ClearAnswer:
    """The one path every clear takes: authorise, check the domain, clear, audit."""
    started = time.perf_counter()  # duration from a monotonic clock, not the wall clock
    now = ctx.clock()
    attempt = Attempt()
    try:
        grant = await authorise(attempt, now)
        entries = await _clear(ctx, attempt, grant)
        answer = ClearAnswer("cleared", 200, CONFIRMATION, attempt.domain, entries)
    except Rejected as rejected:
        answer = ClearAnswer(
            rejected.outcome,
            rejected.status,
            rejected.detail,
            attempt.domain,
            headers=rejected.headers,
        )
    record = audit_record(
        ctx, attempt, answer.outcome, answer.status, at=now, client=client, started=started
    )
    if ctx.telemetry is not None:
        ctx.telemetry.clear(attempt.domain, answer.outcome, record.duration_ms / 1000.0)
    # In the audit journal before the answer, so no crash can lose the record of a clear
    # already confirmed; in SQLite behind it (state.journal). If it cannot be written, the
    # answer stands: after a clear the cache *is* cleared, and saying otherwise would make a
    # deploy hook retry for nothing. The operator sees the lost record in the log.
    await ctx.state.record_audit(record)
    return answer


async def clear_cache(request: web.Request) -> web.Response:
    ctx = request.app[PURGE_CONTEXT]

    async def authorise(attempt: Attempt, now: float) -> Grant:
        return await authorise_bearer(
            request, ctx, attempt, now, limit=ctx.max_body_bytes, read=_read_clear
        )

    answer = await audited_clear(ctx, client=request.remote, authorise=authorise)
    if not answer.cleared:
        return refusal(answer.status, answer.detail, answer.headers)
    response = web.Response(text=CONFIRMATION, content_type="text/plain", charset="utf-8")
    response.headers["Cache-Control"] = "no-store"
    return response


async def _clear(ctx: PurgeContext, attempt: Attempt, grant: Grant) -> int:
    """Steps 5-8 for a caller already known: the domain, the scope, the clear."""
    domain = check_domain(ctx, attempt, grant, "clear")
    started = time.perf_counter()
    with purger_failures(
        attempt, domain, action="clear", failed=f"the cache of {domain!r} could not be cleared"
    ):
        result = await ctx.purger.clear_domain(domain)
    attempt.entries_dropped = result.entries_dropped
    attempt.acked, attempt.live = result.acked, result.live
    if result.live is not None and ctx.telemetry is not None:
        ctx.telemetry.purge_acknowledged(time.perf_counter() - started)
    return result.entries_dropped


def _read_clear(body: bytes, scope: Scope, attempt: Attempt) -> Grant:
    """The domain string the body names, as given. Once the body is known to name one, it
    goes in the attempt's audit record, even if the body is refused for another field."""
    data = json_object(body, EXAMPLE)
    if "domain" not in data:
        reject("bad_request", 400, "the field 'domain' is required")
    if isinstance(data["domain"], str):
        attempt.domain = data["domain"]
    extra = sorted(name for name in data if name != "domain")
    if extra:
        reject("bad_request", 400, f"unknown fields: {', '.join(map(repr, extra))}")
    raw = data["domain"]
    if not isinstance(raw, str):
        reject("bad_request", 400, "the field 'domain' must be a string")
    return Grant(scope, raw)  # checked as a host name by _clear, on the path the dashboard shares
