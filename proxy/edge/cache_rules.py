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
    """Why the rules send a cacheable request to the origin uncached (``Applied.bypass_kind``),
    as Cache-Status says it, or None."""
    kind = rules.bypass_kind(headers)
    return None if kind is None else f"{kind}; {rules.detail}"
