"""What an unsafe method invalidates (RFC 9111 §4.4): its own URI, and the Location and
Content-Location it answers with when they name the same host. Pure: the edge
(edge/forward.py) removes what is listed here."""

from __future__ import annotations

from urllib.parse import urljoin, urlsplit

from proxy.core.domains import host_from_header
from proxy.core.http.fields import Headers


def invalidation_targets(
    *, domain: str, target: str, status: int, response_headers: Headers
) -> list[str]:
    """Targets to invalidate after an unsafe method: its own URI, and Location and
    Content-Location when they point at the same host. Only for non-error responses."""
    if not 200 <= status < 400:
        return []
    targets = [target]
    for name, value in response_headers:
        if name.lower() in ("location", "content-location"):
            other = _same_host_target(domain, target, value)
            if other is not None and other not in targets:
                targets.append(other)
    return targets


def _same_host_target(domain: str, base_target: str, reference: str) -> str | None:
    """The request-target a Location-style reference names on this domain, or None."""
    parts = urlsplit(reference)
    if parts.scheme or parts.netloc:
        if parts.scheme not in ("http", "https") or host_from_header(parts.netloc) != domain:
            return None
        path = parts.path or "/"
    else:
        resolved = urlsplit(urljoin(base_target, reference))
        path = resolved.path or "/"
        parts = resolved
    return path + (f"?{parts.query}" if parts.query else "")
