"""POST /api/v1/cdn/purge: purge URLs, prefixes, tags or all of a domain, and answer a receipt.

The same gate as clear-cache (proxy/api/gate.py: Bearer token, throttling, media type, body
size and time, scope, configured domain), with its own body and its own limit
(``api.max_purge_body_bytes``). The body is a JSON object (decision 0025)::

    {"domain": "example.com", "urls": ["/a", "/b?x=1"], "soft": false, "dry_run": false}

with exactly one of ``urls``, ``prefixes``, ``tags`` (each a non-empty list of at most 256
strings, checked by ``proxy.core.purge.purges.purge_request``) or ``all: true``. Anything else is a
400 naming the field, before the scope (403) and the domain (404) are checked.

The answer is 200 with the receipt (proxy/core/purge/receipts.py) once the purger says the purge
is in effect: after it, no request gets content the purge covers. ``audited_purge`` is the
one path every purge takes, the API's and the dashboard's, and writes exactly one audit
record per attempt, with the purge's kind and its receipt.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from aiohttp import web

from proxy.api import gate
from proxy.core.auth.tokens import Scope
from proxy.core.cache.rules import purge_targets
from proxy.core.purge.purges import MAX_ITEMS, InvalidPurge, Purge, purge_request
from proxy.core.purge.receipts import audit_text, receipt

EXAMPLE = '{"domain": "<cdn domain>", "urls": ["/path?query"]}'
# The body's list fields, and the kind each asks for; "all" is the fourth kind.
LISTS = {"urls": "url", "prefixes": "prefix", "tags": "tag"}
KIND_FIELDS = (*LISTS, "all")
OPTIONS = ("soft", "dry_run")
UNKNOWN_KIND = "unknown"  # the kind (metrics, audit) of an attempt whose body named none


@dataclass(frozen=True, slots=True)
class PurgeAnswer:
    """How a purge attempt ended: 200 with the receipt (outcome ``purged``, or ``dry_run``
    for a dry run), or the status and what to fix."""

    outcome: str
    status: int
    detail: str
    domain: str | None
    kind: str | None = None
    receipt: Mapping[str, object] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def purged(self) -> bool:
        """True for a 200: a purge in effect, or a dry run answered."""
        return self.receipt is not None


async def audited_purge(
    ctx: gate.PurgeContext,
    *,
    client: str | None,
    authorise: gate.Authorise,
    purge: Purge | None = None,
) -> PurgeAnswer:
    """The one path every purge takes: authorise, check the domain, purge, audit.

    The API's ``authorise`` reads the purge from the request body (``gate.Grant.purge``); the
    dashboard passes ``authorise=as_admin(name, domain)`` and the ``Purge`` it built from
    its form (``purge_request``). Returns a ``PurgeAnswer``: its ``receipt`` (the API's 200
    body) when the purge is in effect, else the status and detail of a 4xx/503."""
    started = time.perf_counter()  # duration from a monotonic clock, not the wall clock
    now = ctx.clock()
    attempt = gate.Attempt()
    try:
        grant = await authorise(attempt, now)
        wanted = grant.purge or purge
        if wanted is None:
            gate.reject("bad_request", 400, "no purge was given")
        attempt.kind = wanted.kind
        fields = await _purge(ctx, attempt, grant, wanted, started)
        outcome = "dry_run" if wanted.dry_run else "purged"
        answer = PurgeAnswer(outcome, 200, "", attempt.domain, wanted.kind, fields)
    except gate.Rejected as rejected:
        answer = PurgeAnswer(
            rejected.outcome,
            rejected.status,
            rejected.detail,
            attempt.domain,
            attempt.kind,
            headers=rejected.headers,
        )
    kept = audit_text(answer.receipt) if answer.receipt is not None else None
    if attempt.kind is None:
        # A purge whose body named no kind: History must not show it as a clear (no kind).
        attempt.kind = UNKNOWN_KIND
    record = gate.audit_record(
        ctx,
        attempt,
        answer.outcome,
        answer.status,
        at=now,
        client=client,
        started=started,
        receipt=kept,
    )
    if ctx.telemetry is not None:
        ctx.telemetry.purge(attempt.kind, answer.outcome, record.duration_ms / 1000.0)
    # In the audit journal before the answer, as a clear's (clear_cache.audited_clear).
    await ctx.state.record_audit(record)
    return answer


async def purge(request: web.Request) -> web.Response:
    ctx = request.app[gate.PURGE_CONTEXT]

    async def authorise(attempt: gate.Attempt, now: float) -> gate.Grant:
        return await gate.authorise_bearer(
            request, ctx, attempt, now, limit=ctx.max_purge_body_bytes, read=read_purge
        )

    answer = await audited_purge(ctx, client=request.remote, authorise=authorise)
    if answer.receipt is None:
        return gate.refusal(answer.status, answer.detail, answer.headers)
    body = json.dumps(answer.receipt, ensure_ascii=True).encode("ascii")
    response = web.Response(body=body, content_type="application/json")
    response.headers["Cache-Control"] = "no-store"
    return response


async def _purge(
    ctx: gate.PurgeContext,
    attempt: gate.Attempt,
    grant: gate.Grant,
    wanted: Purge,
    started: float,
) -> dict[str, object]:
    """Steps 5-8 for a caller already known: the domain, the scope, the purge."""
    domain = gate.check_domain(ctx, attempt, grant, "purge")
    what = "dry run" if wanted.dry_run else "purge"
    failed = f"the {what} of {domain!r} could not be done"
    rules = ctx.config.by_name[domain].rules
    if wanted.kind == "url" and rules is not None:
        # Targets as clients send them, and as the domain's rules key them (decision 0033).
        wanted = dataclasses.replace(wanted, items=purge_targets(rules, wanted.items))
    with gate.purger_failures(attempt, domain, action="purge", failed=failed):
        result = await ctx.purger.purge(domain, wanted)
    if not wanted.dry_run:
        attempt.entries_dropped = result.entries
    attempt.acked, attempt.live = result.acked, result.live
    return receipt(result, time.perf_counter() - started)


# -- the body --------------------------------------------------------------------------------


def read_purge(body: bytes, scope: Scope, attempt: gate.Attempt) -> gate.Grant:
    """The domain (as given) and the purge the body asks for, or 400 naming the field.
    The domain and the kind go in the attempt's audit record as soon as they are known,
    even if the body is refused for another field."""
    data = gate.json_object(body, EXAMPLE)
    kinds = [name for name in KIND_FIELDS if name in data]
    if len(kinds) == 1:
        attempt.kind = LISTS.get(kinds[0], "all")
    if "domain" not in data:
        gate.reject("bad_request", 400, "the field 'domain' is required")
    if isinstance(data["domain"], str):
        attempt.domain = data["domain"]
    extra = sorted(name for name in data if name not in ("domain", *KIND_FIELDS, *OPTIONS))
    if extra:
        gate.reject("bad_request", 400, f"unknown fields: {', '.join(map(repr, extra))}")
    raw = data["domain"]
    if not isinstance(raw, str):
        gate.reject("bad_request", 400, "the field 'domain' must be a string")
    if not kinds:
        gate.reject(
            "bad_request",
            400,
            "one of the fields 'urls', 'prefixes', 'tags' or 'all' is required",
        )
    if len(kinds) > 1:
        named = " and ".join(map(repr, kinds))
        gate.reject(
            "bad_request", 400, f"only one of 'urls', 'prefixes', 'tags', 'all': not {named}"
        )
    options = {name: _flag(data, name) for name in OPTIONS}
    name = kinds[0]
    if name == "all":
        if data["all"] is not True:
            gate.reject(
                "bad_request",
                400,
                "the field 'all' must be true (to purge the whole domain), or left out",
            )
        wanted = purge_request("all", soft=options["soft"], dry_run=options["dry_run"])
    else:
        items = _items(data, name)
        try:
            wanted = purge_request(
                LISTS[name], items, soft=options["soft"], dry_run=options["dry_run"]
            )
        except InvalidPurge as exc:
            gate.reject("bad_request", 400, f"the field {name!r}: {exc}")
    return gate.Grant(scope, raw, wanted)


def _flag(data: Mapping[str, object], name: str) -> bool:
    value = data.get(name, False)
    if type(value) is not bool:  # 1 and "true" are not booleans
        gate.reject("bad_request", 400, f"the field {name!r} must be true or false")
    return value


def _items(data: Mapping[str, object], name: str) -> list[object]:
    value = data[name]
    if not isinstance(value, list):
        gate.reject("bad_request", 400, f"the field {name!r} must be a list of strings")
    if not value:
        gate.reject("bad_request", 400, f"the field {name!r} must not be empty")
    if len(value) > MAX_ITEMS:
        gate.reject(
            "bad_request",
            400,
            f"the field {name!r} has {len(value)} items; at most {MAX_ITEMS} per purge",
        )
    return value
