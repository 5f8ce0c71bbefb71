"""What the cache keeps for one response, with everything the hit path needs precomputed.

A ``StoredResponse`` is built once, on a miss, by ``policy.assess_response``; a hit only reads it.
Freshness is reduced at store time to two numbers (``response_time`` and ``expires_at``) so
the hit path does one comparison instead of re-parsing Cache-Control (RFC 9111 §4.2).
"""

from __future__ import annotations

from dataclasses import dataclass

# (domain, generation, request-target as received). A tuple, never a joined string, so no
# Host or path can be spelled to collide with another domain's key.
CacheKey = tuple[str, int, str]

Headers = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class StoredResponse:
    status: int
    reason: str
    headers: Headers  # end-to-end headers as stored: no hop-by-hop, no Age
    body: bytes
    response_time: float  # wall-clock seconds when the response arrived
    corrected_initial_age: float  # RFC 9111 §4.2.3
    freshness_lifetime: float  # RFC 9111 §4.2.1
    expires_at: float  # response_time - corrected_initial_age + freshness_lifetime
    revalidate_always: bool  # no-cache: stored, but validated on every use (§5.2.2.4)
    etag: str | None
    last_modified: str | None
    vary: tuple[str, ...]  # lowercase field names from Vary
    vary_values: tuple[str | None, ...]  # the request's values for them, normalised
    size: int  # bytes counted against cache.max_bytes
    # Seconds past expiry it may be served while the origin fails: 0 forbidden, None the
    # domain's default (policy.stale_if_error).
    stale_if_error: float | None = None
    # Seconds past expiry it may answer while revalidated in the background (RFC 5861 §3).
    stale_while_revalidate: float = 0.0
    # The fields of a fresh hit, ready to send: ``headers`` plus Via and Cache-Status, built
    # once by the edge when it stores the response. Empty until then.
    hit_headers: Headers = ()

    def age(self, now: float) -> float:
        """Current age, RFC 9111 §4.2.3."""
        return self.corrected_initial_age + max(0.0, now - self.response_time)

    def is_fresh(self, now: float) -> bool:
        return not self.revalidate_always and now < self.expires_at
