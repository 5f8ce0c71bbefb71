"""Conditional requests, both ways: the cache's own to its origin when an entry is stale
(revalidation, RFC 9111 §4.3: the validators sent, the 304 merged into the entry), and the
clients' to the cache (RFC 9110 §13.2.2: when a 304 answers them from an entry).
"""

from __future__ import annotations

from proxy.core.cache.entry import StoredResponse
from proxy.core.cache.policy import RequestHeaders
from proxy.core.cache.storability import NOT_STORED
from proxy.core.http.fields import Headers
from proxy.core.http.httpdate import parse_http_date

# -- 3. revalidation (§4.3) -------------------------------------------------------------------


def conditional_headers(stored: StoredResponse) -> list[tuple[str, str]]:
    """Validators to send to the origin when revalidating (§4.3.1)."""
    headers: list[tuple[str, str]] = []
    if stored.etag is not None:
        headers.append(("If-None-Match", stored.etag))
    if stored.last_modified is not None:
        headers.append(("If-Modified-Since", stored.last_modified))
    return headers


# §3.2: fields a 304 does not update, because they describe the stored body itself (its
# length, coding, range, digest) or the validator the 304 was matched against.
_NOT_UPDATED = frozenset(
    {"content-length", "content-encoding", "content-range", "content-md5", "etag"}
)


def merge_not_modified(stored: StoredResponse, not_modified: Headers) -> Headers:
    """§3.2, §4.3.4: the 304's fields replace the stored ones, except those describing the
    stored body (``_NOT_UPDATED``) and fields never stored."""
    replaced = {
        name.lower()
        for name, _ in not_modified
        if name.lower() not in NOT_STORED and name.lower() not in _NOT_UPDATED
    }
    kept = [(n, v) for n, v in stored.headers if n.lower() not in replaced]
    added = [(n, v) for n, v in not_modified if n.lower() in replaced]
    return tuple(kept + added)


# -- clients' own conditional requests (RFC 9110 §13.2.2) --------------------------------------


def not_modified(stored: StoredResponse, request: RequestHeaders) -> bool:
    """True when a 304 answers the client's conditional GET/HEAD from this response."""
    if_none_match = request.getall("if-none-match", [])
    if if_none_match:
        wanted = {_opaque(tag) for value in if_none_match for tag in value.split(",")}
        if "*" in wanted:
            return True  # RFC 9110 §13.1.2: "*" matches any current representation
        return stored.etag is not None and _opaque(stored.etag) in wanted  # weak comparison
    since = parse_http_date(request.get("if-modified-since"))
    modified = parse_http_date(stored.last_modified)
    return since is not None and modified is not None and modified <= since


def _opaque(tag: str) -> str:
    tag = tag.strip()
    return tag[2:] if tag.startswith("W/") else tag


NOT_MODIFIED_FIELDS = frozenset(
    {"cache-control", "content-location", "date", "etag", "expires", "vary", "last-modified"}
)
