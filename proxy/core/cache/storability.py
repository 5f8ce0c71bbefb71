"""May a shared cache store this response, and which of its fields? (RFC 9111 §3)

Theory of operation. ``refusal`` is the rule table: it walks the edge's own rules (about the
request, and stricter than the RFC), then the conditions of RFC 9111 §3, and names the first
one the exchange breaks, as the short reason shown in Cache-Status ``detail``; None means
the response may be stored. Each rule is one ``if`` with its section beside it.
``stored_fields`` then removes the fields a stored response may not keep (§3.1, §5.2.2.4,
§5.2.2.7).

What this module does not decide is freshness: a response the table allows is still not kept
without a lifetime or a validator to revalidate it with (``policy.assess_response``).

The directives it reads are the ones this cache obeys: Cache-Control, or the CDN-targeted
field that replaces it (RFC 9213 §2.1), as ``policy`` parsed them.
"""

from __future__ import annotations

from collections.abc import Collection

from proxy.core.http.fields import Headers
from proxy.core.http.httpdate import Directives, delta_seconds, field_names, unqualified

# RFC 9110 §15.1: "a response with a heuristically cacheable status code" (§3 ¶2.7).
HEURISTICALLY_CACHEABLE = frozenset({200, 203, 204, 300, 301, 308, 404, 405, 410, 414, 501})
# Statuses whose caching semantics this cache implements, for must-understand (§5.2.2.3).
# Not 206 (no partial content is stored) nor 304 (it updates a stored response, §4.3.4).
_UNDERSTOOD_STATUSES = HEURISTICALLY_CACHEABLE | {302, 303, 307, 400, 403, 451, 500, 502, 503, 504}

# Never stored, whatever the origin says: they describe one connection or one exchange.
NOT_STORED = frozenset(
    {
        # §3.1: the connection-specific fields of RFC 9110 §7.6.1.
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "proxy-authenticate",
        "proxy-authentication-info",
        "proxy-authorization",
        "age",  # §4.2.3: recomputed on every use from the corrected initial age
        # One user's: a response carrying it is not stored (``refusal``), nor is a 304's
        # merged into a stored response (``conditional.merge_not_modified``).
        "set-cookie",
        "cache-status",  # RFC 9211 §2: each cache adds its own member; the origin's is dropped
    }
)


def refusal(
    *,
    method: str,
    status: int,
    directives: Directives,
    fields: Collection[str],
    vary: Collection[str],
    request_no_store: bool,
    authorization: bool,
    not_forwarded: Collection[str],
    rule_lifetime: bool = False,
) -> str | None:
    """Why the response may not be stored, or None. ``fields`` are the lowercased names of
    the response's fields this cache obeys (no Expires under a CDN-targeted field), ``vary``
    the field names its Vary lists; ``not_forwarded`` names the request fields the origin did
    not see as the client sent them (``headers.not_passed_on_fill``). ``rule_lifetime``: a
    cache rule gives the response a lifetime (core/cache/rules.py), which counts as an
    explicit one for §3 ¶2.7. ``authorization``: the request had one and the origin's own
    directives do not allow sharing it (§3.5, ``allows_authorized``), whatever a rule sets
    aside; ``directives`` and ``fields`` are those a rule left the cache to obey."""
    # The request's part, and the edge's own rules, stricter than the RFC.
    if method != "GET":  # §3 ¶2.1: the only method whose responses this cache stores
        return "method"
    if request_no_store:  # §5.2.1.5: the request asks that nothing of the exchange be kept
        return "request-no-store"
    if "set-cookie" in fields or "set-cookie2" in fields:  # one user's session, never shared
        return "set-cookie"
    if "*" in vary:  # §4.1: Vary: * never matches, so the entry could never be used
        return "vary-star"
    if any(name in not_forwarded for name in vary):
        # Chosen by a value the request did not carry to the origin: it would be served to
        # every client sending the value it was stored under (Connection: Accept-Language).
        return "vary-not-forwarded"
    # The response's directives, then its status (§3's list).
    must_understand = "must-understand" in directives
    if must_understand and status not in _UNDERSTOOD_STATUSES:  # §3 ¶2.3, §5.2.2.3
        return "must-understand"
    # §5.2.2.3: a cache that understands the status ignores no-store beside must-understand.
    if "no-store" in directives and not must_understand:  # §3 ¶2.4, §5.2.2.5
        return "no-store"
    if unqualified(directives, "private"):  # §3 ¶2.5, §5.2.2.7 (private= is handled below)
        return "private"
    if status // 100 == 1 or status in (206, 304):  # §3 ¶2.2 (final), ¶2.3 (understood)
        return "status"
    if authorization and not allows_authorized(directives):  # §3 ¶2.6, §3.5
        return "authorization"
    if not rule_lifetime and not _says_storable(directives, fields, status):  # §3 ¶2.7
        return "not-storable"
    return None


def allows_authorized(directives: Directives) -> bool:
    """§3.5: the response directives that let a shared cache store an answer to a request
    with Authorization. An s-maxage counts only when it is a valid delta-seconds: one user's
    answer is shared only when the origin clearly said so."""
    if "public" in directives or "must-revalidate" in directives:
        return True
    seconds = delta_seconds(directives, "s-maxage")
    return seconds is not None and seconds >= 0


def _says_storable(directives: Directives, fields: Collection[str], status: int) -> bool:
    """§3 ¶2.7: the response says it may be cached, explicitly or by its status. (``private``
    counts only for private caches; no cache extension here allows more.)"""
    return (
        "public" in directives  # §5.2.2.9
        or "expires" in fields  # §5.3
        or "max-age" in directives  # §5.2.2.1
        or "s-maxage" in directives  # §5.2.2.10: this cache is shared
        or status in HEURISTICALLY_CACHEABLE  # §4.2.2
    )


def stored_fields(headers: Headers, directives: Directives) -> Headers:
    """The response's fields a shared cache keeps: not those of ``NOT_STORED``, nor the fields
    a qualified ``no-cache="..."`` (§5.2.2.4) or ``private="..."`` (§5.2.2.7) names. The
    origin's (name, value) pairs themselves, not copies: the stored entry keeps them."""
    unkept = NOT_STORED | _qualified(directives, "no-cache") | _qualified(directives, "private")
    return tuple(field for field in headers if field[0].lower() not in unkept)


def _qualified(directives: Directives, name: str) -> frozenset[str]:
    """The field names a qualified directive lists (lowercased); none when it is absent or
    unqualified (an unqualified no-cache revalidates every use; private is not stored)."""
    if unqualified(directives, name):
        return frozenset()
    return frozenset(field_names(directives.get(name)))
