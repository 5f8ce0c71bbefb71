"""How a domain's cache rules (core/cache/rules.py) read a request at the edge: whether a
plain GET may still take the fast hit path, and why a cacheable request is sent to the origin
uncached (edge/handler.py)."""

from __future__ import annotations

from aiohttp import hdrs
from multidict import CIMultiDictProxy

from proxy.core.cache.rules import Applied, RuleSet


def fast_under_rules(rules: RuleSet, raw: str, headers: CIMultiDictProxy[str]) -> bool:
    """Whether a plain GET on a domain with rules may still take the fast path: no rule
    matches its path, or those that do change nothing a stored answer would show."""
    applied = rules.match(raw.partition("?")[0])
    if applied is None:
        return True
    if not applied.fast or (applied.query is not None and "?" in raw):
        return False
    if applied.bypass is not None and hdrs.COOKIE in headers:
        return False
    return hdrs.AUTHORIZATION not in headers or not applied.overrides_storage


def bypass_reason(rules: Applied, headers: CIMultiDictProxy[str]) -> str | None:
    """Why the rules send a cacheable request to the origin uncached, or None: cache =
    false, a bypass cookie, or Authorization where the rules override what is stored (the
    origin's own §3.5 consent is checked only on a response, and a hit has none)."""
    if not rules.cache:
        return f"cache-false; {rules.detail}"
    if rules.bypass is not None and rules.bypassed(headers.getall(hdrs.COOKIE, [])):
        return f"bypass-cookie; {rules.detail}"
    if rules.overrides_storage and hdrs.AUTHORIZATION in headers:
        return f"authorization; {rules.detail}"
    return None
