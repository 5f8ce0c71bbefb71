"""Serving a stale entry when the origin fails (RFC 9111 §4.2.4, RFC 5861 §4): pure, as
policy.py; the edge's fill (edge/fill.py) asks it."""

from __future__ import annotations

from proxy.core.cache.entry import StoredResponse
from proxy.core.cache.policy import RequestHeaders, request_directives
from proxy.core.http.httpdate import delta_seconds

STALE_IF_ERROR_STATUSES = frozenset({500, 502, 503, 504})


def may_serve_stale(
    stored: StoredResponse,
    request: RequestHeaders,
    now: float,
    *,
    status: int | None,
    default_window: float,
) -> bool:
    """May ``stored`` answer instead of the origin's failure? ``status`` is the origin's
    status (only 500, 502, 503 and 504 are failures, as RFC 5861 §4 says), or None when it
    could not be reached at all ("disconnected", RFC 9111 §4.2.4). The window is the
    response's stale-if-error, else the domain's ``default_window``, for both kinds of
    failure alike; a request's own stale-if-error may widen it. must-revalidate and its kin
    forbid it in every case."""
    if status is not None and status not in STALE_IF_ERROR_STATUSES:
        return False
    allowed = stored.stale_if_error
    if allowed == 0.0:
        return False
    if allowed is None:
        allowed = default_window
    if request.get("cache-control") is not None:
        asked = delta_seconds(request_directives(request), "stale-if-error")  # RFC 5861 §4
        if asked is not None and asked > 0:
            allowed = max(allowed, float(asked))
    if allowed <= 0:
        return False
    return now - stored.expires_at <= allowed
