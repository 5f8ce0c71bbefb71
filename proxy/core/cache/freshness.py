"""How long a response is fresh, and how long past that it may still be served: the
arithmetic of RFC 9111 §4.2 and RFC 5861, as pure functions of its directives and fields.

- ``explicit_lifetime`` (§4.2.1): s-maxage, then max-age, then Expires minus Date;
- ``heuristic_lifetime`` (§4.2.2): a fraction of the time since Last-Modified, for the
  statuses that allow it, when a domain turns heuristics on;
- ``corrected_initial_age`` (§4.2.3): the response's age when it arrived;
- ``stale_if_error`` and ``stale_while_revalidate`` (RFC 5861): the windows past expiry.

``policy.assess_response`` reduces these to a deadline once, at store time. Nothing here
reads the clock: ``response_time`` and ``request_time`` are passed in.
"""

from __future__ import annotations

from collections.abc import Sequence

from proxy.core.cache.entry import last_field
from proxy.core.cache.storability import HEURISTICALLY_CACHEABLE
from proxy.core.http.httpdate import (
    Directives,
    age_seconds,
    delta_seconds,
    parse_http_date,
    unqualified,
)

HEURISTIC_FRACTION = 0.1  # §4.2.2: "a typical setting of this fraction might be 10%"
HEURISTIC_MAX = 86_400.0


def explicit_lifetime(
    cc: Directives, lowered: Sequence[tuple[str, str]], response_time: float
) -> float | None:
    """§4.2.1: s-maxage, then max-age, then Expires minus Date. Invalid means stale (0)."""
    for name in ("s-maxage", "max-age"):
        seconds = delta_seconds(cc, name)
        if seconds is not None:
            return float(max(seconds, 0))
    expires_values = [v for n, v in lowered if n == "expires"]
    if not expires_values:
        return None
    expires = parse_http_date(expires_values[0]) if len(expires_values) == 1 else None
    if expires is None:
        return 0.0  # §5.3: an invalid Expires means "already expired"
    date = parse_http_date(last_field(lowered, "date"))
    return max(0.0, expires - (date if date is not None else response_time))


def heuristic_lifetime(
    status: int, lowered: Sequence[tuple[str, str]], response_time: float
) -> float | None:
    """§4.2.2: a fraction of the time since Last-Modified, for heuristically cacheable
    statuses only; never for error statuses outside that list."""
    if status not in HEURISTICALLY_CACHEABLE or status >= 400:  # errors: cache-poisoned DoS
        return None
    last_modified = parse_http_date(last_field(lowered, "last-modified"))
    if last_modified is None:
        return None
    date = parse_http_date(last_field(lowered, "date"))
    since = (date if date is not None else response_time) - last_modified
    if since <= 0:
        return None
    return min(since * HEURISTIC_FRACTION, HEURISTIC_MAX)


def corrected_initial_age(
    lowered: Sequence[tuple[str, str]], request_time: float, response_time: float
) -> float:
    """§4.2.3."""
    age_value = float(age_seconds([v for n, v in lowered if n == "age"]))
    date = parse_http_date(last_field(lowered, "date"))
    apparent_age = max(0.0, response_time - date) if date is not None else 0.0
    response_delay = max(0.0, response_time - request_time)
    return max(apparent_age, age_value + response_delay)


def stale_if_error(cc: Directives) -> float | None:
    """How long past expiry the response may be served when the origin fails (RFC 5861 §4,
    RFC 9111 §4.2.4): 0 when the origin forbids serving it stale (must-revalidate,
    proxy-revalidate, s-maxage, no-cache: §5.2.2.2, §5.2.2.8, §5.2.2.10, §5.2.2.4), the
    stale-if-error value when given, and None to leave it to the domain's configuration."""
    if "must-revalidate" in cc or "proxy-revalidate" in cc or "s-maxage" in cc:
        return 0.0
    if unqualified(cc, "no-cache"):
        return 0.0
    seconds = delta_seconds(cc, "stale-if-error")
    if seconds is not None:
        return float(max(seconds, 0))
    return None


def stale_while_revalidate(cc: Directives) -> float:
    """How long past expiry the response may be served while it is revalidated in the
    background (RFC 5861 §3); 0 when absent or when the origin forbids stale use."""
    if stale_if_error(cc) == 0.0:
        return 0.0  # must-revalidate, proxy-revalidate, s-maxage, no-cache
    seconds = delta_seconds(cc, "stale-while-revalidate")
    return float(seconds) if seconds is not None and seconds > 0 else 0.0
