"""The RFC 9111 rules of a shared cache, as pure functions returning decisions.

Theory of operation. A request flows through three decisions:

1. ``decide_lookup`` (RFC 9111 §4): given the variants stored under the request's key, pick
   the one whose Vary'd request headers match (§4.1) and say ``Serve`` (fresh, §4.2),
   ``Revalidate`` (stale, or no-cache, §4.3) or ``Forward`` (nothing usable).
2. ``assess_response`` (§3): when the origin answers, decide from the status and headers
   alone, before the body is read, whether the response may be stored. The rule table of
   §3 (method, final status, no-store, private, Authorization §3.5, explicit freshness or
   heuristically cacheable status) and the edge's own stricter rules (no Set-Cookie, no
   Vary: *) live in ``storability``; this module adds what needs a lifetime (no storing
   without explicit freshness unless the domain allows heuristics, nor without a validator
   when the response is stale at once) and reduces freshness to a deadline once (§4.2.1,
   §4.2.3), so a hit never parses Cache-Control again.
3. ``merge_not_modified`` (conditional.py) and ``refreshed`` (§4.3.4, §3.2): a 304 to a
   revalidation updates the stored headers, and the stored body is kept under them.

How long a response is fresh, and the stale windows past that, are freshness.py's
arithmetic (§4.2, RFC 5861). Plus ``serve_while_revalidating`` (RFC 5861 §3) for stale
entries; serving one when the origin fails (§4.2.4) is stale_on_error.py's, what an
unsafe method invalidates (§4.4) invalidation.py's. Conditional requests, the cache's to
its origin and the clients' to the cache (RFC 9110 §13.2.2), are in conditional.py.

Nothing here reads the clock: every time is passed in as ``now``, ``request_time`` or
``response_time`` (wall-clock seconds).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from http import HTTPStatus
from typing import Protocol

from proxy.core.cache.deception import lent_refusal
from proxy.core.cache.entry import StoredResponse, last_field
from proxy.core.cache.freshness import (
    corrected_initial_age,
    explicit_lifetime,
    heuristic_lifetime,
    stale_if_error,
    stale_while_revalidate,
)
from proxy.core.cache.rules import Applied, overridden
from proxy.core.cache.storability import (
    allows_authorized,
    refusal,
    stored_fields,
)
from proxy.core.cache.targeted import targeted_directives
from proxy.core.http.fields import Headers, Lines
from proxy.core.http.headers import not_passed_on_fill
from proxy.core.http.httpdate import (
    Directives,
    delta_seconds,
    field_names,
    parse_cache_control,
    unqualified,
)

# An entry keeps its status and reason for as long as it lives, and the client library makes
# a new int (above 256) and reason string for every response: the standard ones are shared.
_STATUSES = {status: status for status in map(int, HTTPStatus)}
_REASONS = {status.phrase: status.phrase for status in HTTPStatus}


class RequestHeaders(Protocol):
    """The part of a (case-insensitive) header mapping the rules read; CIMultiDict fits."""

    def get(self, key: str, /) -> str | None: ...

    def getall(self, key: str, default: list[str], /) -> list[str]: ...


# -- decisions -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Serve:
    response: StoredResponse


@dataclass(frozen=True, slots=True)
class Revalidate:
    response: StoredResponse
    # RFC 9211 §2.2 fwd=: "stale" when the entry is, "request" when the request's own
    # directives (no-cache, max-age, min-fresh) asked for it.
    reason: str = "stale"


@dataclass(frozen=True, slots=True)
class Forward:
    reason: str  # RFC 9211 fwd= value: uri-miss, vary-miss, request


@dataclass(frozen=True, slots=True)
class Storable:
    """A response that may be stored, once its body has been read."""

    status: int
    reason: str
    headers: Headers
    response_time: float
    corrected_initial_age: float
    freshness_lifetime: float
    revalidate_always: bool
    etag: str | None
    last_modified: str | None
    vary: tuple[str, ...]
    vary_values: tuple[str | None, ...]
    stale_if_error: float | None = None
    stale_while_revalidate: float = 0.0

    def with_body(self, body: bytes, target: str) -> StoredResponse:
        """The entry to store under ``target`` (whose length its counted size includes)."""
        return StoredResponse(
            status=_STATUSES.get(self.status, self.status),
            reason=_REASONS.get(self.reason, self.reason),
            headers=self.headers,
            body=body,
            birth=self.response_time - self.corrected_initial_age,
            freshness_lifetime=self.freshness_lifetime,
            key_size=2 * len(target),
            revalidate_always=self.revalidate_always,
            stale_if_error=self.stale_if_error,
            stale_while_revalidate=self.stale_while_revalidate,
            vary=self.vary,
            vary_values=self.vary_values,
        )


@dataclass(frozen=True, slots=True)
class DontStore:
    reason: str  # short, shown in Cache-Status detail


# -- 1. lookup (§4) ---------------------------------------------------------------------------


def decide_lookup(
    variants: Sequence[StoredResponse],
    request: RequestHeaders,
    now: float,
    accept_encoding: str | None = None,
    *,
    obey_request: bool = True,
) -> Serve | Revalidate | Forward:
    """``accept_encoding``: the request's Accept-Encoding as the domain reads it
    (``encodings.preferred``), which Vary matching uses instead of the header's spelling.
    ``obey_request`` False: a rule's ``ignore_client_no_cache`` (core/cache/rules.py) sets
    the request's directives aside, as nginx and Varnish do by default."""
    if not variants:
        return Forward("uri-miss")
    chosen = select_variant(variants, request, accept_encoding)
    if chosen is None:
        return Forward("vary-miss")
    if not obey_request or (request.get("cache-control") is None and request.get("pragma") is None):
        # The common case: no request directives to weigh.
        return Serve(chosen) if chosen.is_fresh(now) else Revalidate(chosen)
    directives = request_directives(request)
    fresh = chosen.is_fresh(now)
    if "no-cache" in directives:  # §5.2.1.4
        return Revalidate(chosen, "request" if fresh else "stale")
    if not fresh:
        return Revalidate(chosen)
    age = chosen.age(now)
    max_age = delta_seconds(directives, "max-age")  # §5.2.1.1
    if max_age is not None and age > max_age:
        return Revalidate(chosen, "request")
    min_fresh = delta_seconds(directives, "min-fresh")  # §5.2.1.3
    if min_fresh is not None and chosen.freshness_lifetime - age < min_fresh:
        return Revalidate(chosen, "request")
    return Serve(chosen)


def request_directives(request: RequestHeaders) -> Directives:
    """Request Cache-Control; a bare ``Pragma: no-cache`` counts as no-cache (§5.4)."""
    cache_control = request.getall("cache-control", [])
    if cache_control:
        return parse_cache_control(", ".join(cache_control))
    pragma = request.get("pragma")
    if pragma and "no-cache" in parse_cache_control(pragma):
        return {"no-cache": None}
    return {}


def only_if_cached(request: RequestHeaders) -> bool:
    """§5.2.1.7: the client wants a stored response or a 504, never the origin."""
    return request.get("cache-control") is not None and "only-if-cached" in request_directives(
        request
    )


def select_variant(
    variants: Sequence[StoredResponse],
    request: RequestHeaders,
    accept_encoding: str | None = None,
) -> StoredResponse | None:
    """The most recent variant whose Vary'd headers match the request's (§4.1)."""
    for variant in variants:
        if not variant.vary or variant.vary_values == vary_values(
            variant.vary, request, accept_encoding
        ):
            return variant
    return None


def vary_values(
    names: tuple[str, ...], request: RequestHeaders, accept_encoding: str | None = None
) -> tuple[str | None, ...]:
    """The request's values for the Vary'd fields, normalised as §4.1 allows: values of
    repeated fields combined, white space around commas removed; and Accept-Encoding as
    ``accept_encoding`` when given (the one coding the origin was asked for: §4.1 lets a
    cache normalise a field by what it knows of its semantics)."""
    values: list[str | None] = []
    for name in names:
        if name == "accept-encoding" and accept_encoding is not None:
            values.append(accept_encoding)
            continue
        found = request.getall(name, [])
        if not found:
            values.append(None)
        else:
            values.append(",".join(p.strip() for v in found for p in v.split(",")))
    return tuple(values)


# -- 2. storing (§3) ---------------------------------------------------------------------------


def assess_response(
    *,
    method: str,
    request: RequestHeaders,
    status: int,
    reason: str,
    headers: Headers,
    request_time: float,
    response_time: float,
    heuristic: bool,
    surrogate_name: str | None = None,
    accept_encoding: str | None = None,
    rules: Applied | None = None,
) -> Storable | DontStore:
    """Decide from status and headers whether the response may be stored (``storability``),
    and precompute everything a hit will need. ``surrogate_name`` is the name this cache
    advertises in Surrogate-Capability; Surrogate-Control items targeted at it apply.
    ``accept_encoding`` as for ``decide_lookup``: the value the entry is keyed by. ``rules``:
    the domain's cache rules for the request (core/cache/rules.py), explicit inputs that
    set origin fields aside and replace lifetimes, never the headers themselves."""
    lowered = [(name.lower(), value) for name, value in headers]
    origin_directives, origin_obeyed = _obeyed(lowered, surrogate_name)
    directives, obeyed, vary, rule_ttl = origin_directives, origin_obeyed, _vary(lowered), None
    if rules is not None:
        directives, obeyed, vary = overridden(rules, origin_directives, obeyed, vary)
        rule_ttl = rules.lifetime_for(status)
    refused = _refused(
        method, status, request, (directives, origin_directives), obeyed, vary, rule_ttl
    )
    if refused is None and rules is not None and (rule_ttl is not None or rules.ignore_origin):
        origin = (origin_directives, origin_obeyed)
        refused = _not_lent(rules, status, request, lowered, origin, response_time)
    if refused is not None:
        return DontStore(refused)
    if rule_ttl is not None:
        lifetime = _rule_lifetime(rule_ttl, directives, obeyed)
    else:
        lifetime = _kept_lifetime(status, directives, obeyed, request, response_time, heuristic)
    if isinstance(lifetime, DontStore):
        return lifetime
    sie, swr = _stale_windows(directives, rules)
    return Storable(
        status=status,
        reason=reason,
        # The origin's qualified no-cache="..." and private="..." still remove their fields.
        headers=stored_fields(headers, origin_directives),
        response_time=response_time,
        corrected_initial_age=corrected_initial_age(lowered, request_time, response_time),
        freshness_lifetime=lifetime,
        revalidate_always=unqualified(directives, "no-cache"),
        stale_if_error=sie,
        stale_while_revalidate=swr,
        etag=last_field(lowered, "etag"),
        last_modified=last_field(lowered, "last-modified"),
        vary=vary,
        vary_values=vary_values(vary, request, accept_encoding),
    )


def _refused(
    method: str,
    status: int,
    request: RequestHeaders,
    directives: tuple[Directives, Directives],
    obeyed: list[tuple[str, str]],
    vary: tuple[str, ...],
    rule_ttl: float | None,
) -> str | None:
    """``storability.refusal`` for this exchange. ``directives``: those the cache obeys
    (after the rules), then the origin's own."""
    obeyed_directives, origin_directives = directives
    return refusal(
        method=method,
        status=status,
        directives=obeyed_directives,
        fields={name for name, _ in obeyed},
        vary=vary,
        request_no_store=request.get("cache-control") is not None
        and "no-store" in request_directives(request),
        # §3.5 by the origin's own directives, whatever a rule sets aside.
        authorization=request.get("authorization") is not None
        and not allows_authorized(origin_directives),
        not_forwarded=not_passed_on_fill(request.getall("connection", [])),
        rule_lifetime=rule_ttl is not None,
    )


def _not_lent(
    rules: Applied,
    status: int,
    request: RequestHeaders,
    lowered: list[tuple[str, str]],
    origin: tuple[Directives, list[tuple[str, str]]],
    response_time: float,
) -> str | None:
    """Why rules that give a lifetime or set origin fields aside may not store this answer
    (``deception.lent_refusal``), or None. Not asked where the origin's own fields (before
    any rule set them aside) give it a shared lifetime, an explicit one above zero (§4.2.1)
    with neither private nor no-store: a rule then only changes how long (decision 0042)."""
    directives, obeyed = origin
    private = "private" in directives or "no-store" in directives
    if not private and explicit_lifetime(directives, obeyed, response_time):
        return None
    return lent_refusal(
        status=status,
        cookie=request.get("cookie") is not None,
        cache_with_cookies=rules.cache_with_cookies,
        extension=rules.extension,
        content_type=last_field(lowered, "content-type"),
    )


def _rule_lifetime(
    rule_ttl: float, directives: Directives, obeyed: list[tuple[str, str]]
) -> float | DontStore:
    """A rule's lifetime, unless the response must be revalidated on every use and has
    nothing to revalidate with (§5.2.2.4)."""
    has_validator = any(name in ("etag", "last-modified") for name, _ in obeyed)
    if unqualified(directives, "no-cache") and not has_validator:
        return DontStore("no-cache-without-validator")
    return rule_ttl


def _stale_windows(directives: Directives, rules: Applied | None) -> tuple[float | None, float]:
    """stale-if-error and stale-while-revalidate: the origin's, or the rules' where they set
    one, unless the origin forbids stale use (0: §5.2.2.2)."""
    sie, swr = stale_if_error(directives), stale_while_revalidate(directives)
    if rules is not None and sie != 0.0:
        sie = sie if rules.stale_if_error is None else rules.stale_if_error
        swr = swr if rules.stale_while_revalidate is None else rules.stale_while_revalidate
    return sie, swr


def _obeyed(
    lowered: list[tuple[str, str]], surrogate_name: str | None
) -> tuple[Directives, list[tuple[str, str]]]:
    """The response directives this cache obeys, and the fields it reads them with: a
    CDN-targeted field replaces Cache-Control and Expires for this cache (RFC 9213 §2.1)."""
    targeted = targeted_directives(lowered, surrogate_name)
    if targeted is None:
        return parse_cache_control(
            ", ".join(v for n, v in lowered if n == "cache-control")
        ), lowered
    return targeted, [(n, v) for n, v in lowered if n not in ("cache-control", "expires")]


def _vary(lowered: list[tuple[str, str]]) -> tuple[str, ...]:
    """The field names the response's Vary lists (§4.1), lowercased, each once."""
    names = (name for n, v in lowered if n == "vary" for name in field_names(v))
    return tuple(dict.fromkeys(names))


def _kept_lifetime(
    status: int,
    directives: Directives,
    obeyed: list[tuple[str, str]],
    request: RequestHeaders,
    response_time: float,
    heuristic: bool,
) -> float | DontStore:
    """The freshness lifetime of a storable response, or why it is not worth storing: the
    edge keeps only what it can serve fresh for a while or revalidate."""
    has_validator = any(name in ("etag", "last-modified") for name, _ in obeyed)
    no_cache = unqualified(directives, "no-cache")
    lifetime = explicit_lifetime(directives, obeyed, response_time)  # §4.2.1
    if lifetime is None:
        # §4.2.2, only where the domain allows guessing, and never for a request with a
        # Cookie: its answer is likely personal (web cache deception).
        guess = heuristic and request.get("cookie") is None
        lifetime = heuristic_lifetime(status, obeyed, response_time) if guess else None
        if lifetime is None and not no_cache:
            return DontStore("no-explicit-freshness")
    if no_cache and not has_validator:  # §5.2.2.4: revalidated on every use, so needs one
        return DontStore("no-cache-without-validator")
    if not lifetime and not has_validator:  # stale at once, with nothing to revalidate
        return DontStore("stale-without-validator")
    return float(lifetime or 0)


def serve_while_revalidating(
    stored: StoredResponse, request: RequestHeaders, now: float, *, obey_request: bool = True
) -> bool:
    """RFC 5861 §3: a response stale by no more than its stale-while-revalidate may answer at
    once while the cache revalidates it; not when the client asked for validation itself
    (unless a rule sets the request's directives aside: ``obey_request``)."""
    if stored.stale_while_revalidate <= 0 or stored.revalidate_always:
        return False
    if obey_request and (
        request.get("cache-control") is not None or request.get("pragma") is not None
    ):
        asked = request_directives(request)
        if "no-cache" in asked or "max-age" in asked or "min-fresh" in asked:
            return False  # the client wants a validated or fresher answer (§5.2.1)
    return stored.expires_at <= now <= stored.expires_at + stored.stale_while_revalidate


def refreshed(stored: StoredResponse, fresh: Storable) -> StoredResponse:
    """The stored body under the refreshed metadata (after a 304), under the same key."""
    return replace(fresh.with_body(stored.body, ""), key_size=stored.key_size)


def with_lines(entry: StoredResponse, lines: Lines) -> StoredResponse:
    """The entry with the lines of a fresh hit (``respond.hit_lines``). It then keeps its
    fields only as those lines (``entry.py``), and its counted size says so."""
    return replace(entry, hit_lines=lines)
