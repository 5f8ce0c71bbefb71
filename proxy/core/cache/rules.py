"""Cache rules per domain: what is cached, for how long, and under which key (issue 25 §1).

Theory of operation. A domain has an ordered list of ``Rule``s, compiled once when the config
is loaded (proxy/config/rules.py) into a ``RuleSet``. For each request the edge asks the set
once, with the request's path (no query): ``RuleSet.match`` returns the merge of every rule
whose path globs hold (``Applied``), or None when none does, which the edge reads as "no
rules": a domain without rules, or a path no rule names, takes exactly today's path. Globs
match the path as an origin reads it (``deception.rule_path``: decoded, dot segments and
';' parameters gone, slashes merged), never as it was spelt (decision 0042).

Merging follows Cloudflare's Cache Rules: every matching rule applies, in order, and a field
set by a later rule replaces the same field of an earlier one. ``query_ignore`` and
``query_only`` are one field (the query filter): a later rule's either replaces an earlier
rule's either. An empty list lifts the field: ``bypass_cookies = []`` bypasses for no cookie,
``query_ignore = []`` or ``query_only = []`` leaves the query as it came (issue 34 B6).

What a rule may override, and what it never can (the README's "Caching rules" says the same):

- freshness (RFC 9111 §4.2.1, §4.2.2): ``edge_ttl`` / ``edge_ttl_by_status`` replace the
  origin's lifetime, and make a response without one storable (§3 ¶2.7);
- ``ignore_origin``: the named response fields are disregarded by the cache — Cache-Control
  (with CDN-Cache-Control and Surrogate-Control: every directive source), Expires, Vary (but
  for Accept-Encoding, which the edge itself keys by: decision 0023), Set-Cookie;
- the request's own no-cache / Pragma / max-age / min-fresh (§5.2.1) with
  ``ignore_client_no_cache``; never no-store (§5.2.1.5) nor only-if-cached;
- stale-while-revalidate and stale-if-error (RFC 5861), unless the origin forbids stale use
  (must-revalidate, proxy-revalidate, s-maxage, no-cache) and Cache-Control is not ignored.

Never, whatever a rule says: a stored copy or a hit carrying Set-Cookie (``storability``'s
NOT_STORED); a response to a request with Authorization stored or served under a rule's
overrides unless the origin said public, s-maxage or must-revalidate (§3.5, ``may_share``);
partial content or 304s stored (§3 ¶2.2); a Vary: * response stored unless Vary is ignored;
request no-store. Nor is a lifetime the origin did not give lent to an answer for a request
with a Cookie (unless ``cache_with_cookies``), nor to a success whose Content-Type does not
fit the path's extension (``deception.lent_refusal``, decision 0042).

No I/O, no clock: ``match`` memoises per path (bounded), which is what keeps 20 rules cheap
on the hit path (benchmarks/README.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol
from urllib.parse import unquote

from proxy.core.cache.deception import (
    cookie_names,
    extension_of,
    folded_name,
    glob_normalised,
    never_matched_spelling,
    rule_path,
)
from proxy.core.http.fields import Headers
from proxy.core.http.httpdate import Directives

# The statuses an ``edge_ttl`` applies to (RFC 9110 §15.1's heuristically cacheable 2xx/3xx
# successes); any other status needs ``edge_ttl_by_status`` to be named.
EDGE_TTL_STATUSES = frozenset({200, 203, 204, 206, 300, 301, 308})
# Response fields ``ignore_origin`` may name (lowercased).
IGNORABLE = frozenset({"cache-control", "expires", "set-cookie", "vary"})
# Statuses that are never stored, whatever a rule says (§3 ¶2.2): interim, partial, 304.
NEVER_STORED_STATUSES = frozenset({206, 304})

_MEMO_LIMIT = 4096  # distinct paths remembered per rule set before it starts again


def glob_pattern(globs: tuple[str, ...]) -> str:
    """One regular expression for a list of globs: ``*`` is any run of characters (``/``
    included), ``?`` any one character; everything else is literal."""
    parts = []
    for glob in globs:
        parts.append("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in glob))
    return "(?s:" + "|".join(parts) + ")"


def never_matches(glob: str) -> str | None:
    """Why a path glob can never match a request path, or None. A path starts with '/' and
    holds no white space, control character or '#' (RFC 9112 §3.2, RFC 3986 §3.3)."""
    if not glob:
        return "is empty"
    if glob[0] not in "/*?":
        return f"{glob!r} can never match: a path starts with '/' (write '/{glob}' or '*{glob}')"
    bad = next((c for c in glob if c.isspace() or ord(c) < 32 or ord(c) == 127 or c == "#"), None)
    if bad is not None:
        return f"{glob!r} can never match: a path holds no {bad!r}"
    spelling = never_matched_spelling(glob_normalised(glob))
    if spelling is not None:
        return f"{glob!r} can never match: {spelling} (decision 0042)"
    return None


@dataclass(frozen=True, slots=True)
class Rule:
    """One ``[[domains.rules]]`` table as checked: None is "not set by this rule"."""

    name: str
    paths: tuple[str, ...] = ()  # globs; () is every path
    bypass_cookies: tuple[str, ...] | None = None
    cache_with_cookies: bool | None = None
    ignore_client_no_cache: bool | None = None
    query_ignore: tuple[str, ...] | None = None
    query_only: tuple[str, ...] | None = None
    query_sort: bool | None = None
    edge_ttl: float | None = None
    edge_ttl_by_status: tuple[tuple[int, float], ...] | None = None
    ignore_origin: frozenset[str] | None = None  # lowercased names from IGNORABLE
    browser_ttl: float | None = None
    stale_while_revalidate: float | None = None
    stale_if_error: float | None = None
    cache: bool | None = None
    matcher: re.Pattern[str] | None = field(default=None, compare=False, repr=False)

    @staticmethod
    def compiled(**fields: object) -> Rule:
        rule = Rule(**fields)  # type: ignore[arg-type]
        if not rule.paths:
            return rule
        globs = tuple(glob_normalised(glob) for glob in rule.paths)  # as rule_path spells
        return replace(rule, matcher=re.compile(glob_pattern(globs)))

    def key_part(self) -> tuple[object, ...]:
        """What of the rule decides cache keys (a reload compares it: decision 0033): its
        query normalisation, and the paths it applies to; nothing for a rule without one."""
        query = (self.query_ignore, self.query_only, self.query_sort)
        return () if query == (None, None, None) else (self.paths, *query)


@dataclass(frozen=True, slots=True)
class QueryRule:
    """How a query is normalised for the key and the origin request."""

    keep: re.Pattern[str] | None  # query_only: names kept (fullmatch); None: no such filter
    drop: re.Pattern[str] | None  # query_ignore: names dropped (fullmatch)
    sort: bool


class RequestFields(Protocol):
    """A request's fields, read case-insensitively (aiohttp's headers, the trace's)."""

    def get(self, key: str, /) -> str | None: ...

    def getall(self, key: str, default: list[str], /) -> list[str]: ...


@dataclass(frozen=True, slots=True)
class Applied:
    """The merge of the rules that matched one path: what the edge does differently."""

    names: tuple[str, ...]
    cache: bool = True
    bypass: re.Pattern[str] | None = None  # cookie names (folded) that send it uncached
    cache_with_cookies: bool = False  # a rule's lifetime lent to a request with a Cookie
    ignore_client_no_cache: bool = False
    query: QueryRule | None = None
    edge_ttl: float | None = None
    edge_ttl_by_status: Mapping[int, float] = field(default_factory=dict)
    ignore_origin: frozenset[str] = frozenset()
    browser_ttl: float | None = None
    stale_while_revalidate: float | None = None
    stale_if_error: float | None = None
    # The request path's extension (deception.extension_of): its answers' Content-Type is
    # checked before a rule's lifetime is lent to them (deception.lent_refusal).
    extension: str | None = None

    @property
    def detail(self) -> str:
        """The Cache-Status ``detail`` (RFC 9211 §2.8) naming the rules that applied."""
        return "rules=" + ",".join(self.names)

    @property
    def overrides_storage(self) -> bool:
        """Whether the rules change what is stored or for how long (§3, §4.2)."""
        return bool(self.edge_ttl is not None or self.edge_ttl_by_status or self.ignore_origin)

    @property
    def fast(self) -> bool:
        """Whether a fresh hit may take the edge's fast path as it is: the answer's fields
        are the stored ones (no browser_ttl) and the cache may answer (not cache = false).
        The request's own part (a bypass cookie, a query to normalise) the edge checks."""
        return self.cache and self.browser_ttl is None

    def lifetime_for(self, status: int) -> float | None:
        """The rules' freshness lifetime for a response of ``status``, or None: the
        origin's (§4.2.1) then applies."""
        by_status = self.edge_ttl_by_status.get(status)
        if by_status is not None:
            return by_status
        if self.edge_ttl is not None and status in EDGE_TTL_STATUSES:
            return self.edge_ttl
        return None

    def bypass_kind(self, headers: RequestFields) -> str | None:
        """Why these rules send a cacheable request to the origin uncached, or None: the one
        rule the edge and the trace both ask. "cache-false", "bypass-cookie", or
        "authorization" where the rules override what is stored (the origin's own §3.5
        consent is checked only on a response, and a hit has none)."""
        if not self.cache:
            return "cache-false"
        if self.bypass is not None and self.bypassed(headers.getall("cookie", [])):
            return "bypass-cookie"
        if self.overrides_storage and headers.get("authorization") is not None:
            return "authorization"
        return None

    def bypassed(self, cookies: list[str]) -> bool:
        """Whether a request with these Cookie fields goes to the origin uncached: one of
        its names, as any origin may read it (``deception.cookie_names``), is a bypass
        cookie's (its glob folded the same way)."""
        if self.bypass is None or not cookies:
            return False
        return any(self.bypass.fullmatch(name) for name in cookie_names(cookies))


NO_QUERY = QueryRule(keep=None, drop=None, sort=False)


def normalised_target(target: str, query: QueryRule | None) -> str:
    """The request-target with its query normalised: parameters dropped by ``query_ignore``
    or not kept by ``query_only`` (names compared percent-decoded), then sorted by name when
    ``query_sort`` (stable: repeated names keep their order). Each kept parameter keeps its
    spelling; empty ones go; a query left empty goes with its '?'."""
    if query is None:
        return target
    path, sep, raw = target.partition("?")
    if not sep:
        return target
    kept: list[tuple[str, str]] = []
    for param in raw.split("&"):
        if not param:
            continue
        name = unquote(param.partition("=")[0].replace("+", " "))
        if query.keep is not None and not query.keep.fullmatch(name):
            continue
        if query.drop is not None and query.drop.fullmatch(name):
            continue
        kept.append((name, param))
    if query.sort:
        kept.sort(key=lambda pair: pair[0])
    if not kept:
        return path
    return path + "?" + "&".join(param for _, param in kept)


@dataclass(frozen=True, slots=True)
class RuleSet:
    """A domain's rules, in order. ``match`` is what the edge calls per request."""

    rules: tuple[Rule, ...]
    _memo: dict[str, Applied | None] = field(
        default_factory=dict, compare=False, repr=False, hash=False
    )

    def match(self, path: str) -> Applied | None:
        """The merged rules for a request path (no query), or None when no rule matches.
        Globs match the path as ``deception.rule_path`` reads it (decoded, dot segments and
        parameters gone); the memo is by the path as sent, so a hit pays for neither."""
        memo = self._memo
        try:
            return memo[path]
        except KeyError:
            pass
        normal = rule_path(path)
        matched = tuple(r for r in self.rules if r.matcher is None or r.matcher.fullmatch(normal))
        applied = merged(matched, extension_of(normal)) if matched else None
        if len(memo) >= _MEMO_LIMIT:
            memo.clear()
        memo[path] = applied
        return applied

    def key_part(self) -> tuple[object, ...]:
        return tuple(part for rule in self.rules if (part := rule.key_part()))


def merged(rules: tuple[Rule, ...], extension: str | None = None) -> Applied:
    """Every field from the last rule that sets it (Cloudflare's order). ``extension``: the
    request path's, for ``Applied.extension``."""
    values: dict[str, object] = {}
    query_filter: tuple[str, tuple[str, ...]] | None = None
    sort = False
    for rule in rules:
        for name in _PLAIN:
            value = getattr(rule, name)
            if value is not None:
                values[name] = value
        if rule.query_ignore is not None:
            query_filter = ("drop", rule.query_ignore)
        if rule.query_only is not None:
            query_filter = ("keep", rule.query_only)
        if rule.query_sort is not None:
            sort = rule.query_sort
    if query_filter is not None and not query_filter[1]:
        query_filter = None  # query_ignore = [] or query_only = []: lifts an earlier filter
    bypass = values.pop("bypass_cookies", None)  # () lifts an earlier rule's
    by_status = values.pop("edge_ttl_by_status", ())
    query = None
    if query_filter is not None or sort:
        pattern = re.compile(glob_pattern(query_filter[1])) if query_filter else None
        keep = pattern if query_filter and query_filter[0] == "keep" else None
        drop = pattern if query_filter and query_filter[0] == "drop" else None
        query = QueryRule(keep=keep, drop=drop, sort=sort)
    return Applied(
        names=tuple(rule.name for rule in rules),
        bypass=_cookie_pattern(bypass),  # type: ignore[arg-type]
        extension=extension,
        query=query,
        edge_ttl_by_status=dict(by_status),  # type: ignore[call-overload]
        **values,  # type: ignore[arg-type]
    )


def _cookie_pattern(globs: tuple[str, ...] | None) -> re.Pattern[str] | None:
    """The bypass cookies' globs, folded as the names they are matched with."""
    if not globs:
        return None
    return re.compile(glob_pattern(tuple(folded_name(glob) for glob in globs)))


_PLAIN = (
    "bypass_cookies",
    "cache_with_cookies",
    "ignore_client_no_cache",
    "edge_ttl",
    "edge_ttl_by_status",
    "ignore_origin",
    "browser_ttl",
    "stale_while_revalidate",
    "stale_if_error",
    "cache",
)


_DIRECTIVE_FIELDS = frozenset({"cache-control", "cdn-cache-control", "surrogate-control"})


def overridden(
    applied: Applied,
    directives: Directives,
    obeyed: list[tuple[str, str]],
    vary: tuple[str, ...],
) -> tuple[Directives, list[tuple[str, str]], tuple[str, ...]]:
    """The directives, obeyed fields (lowercased) and Vary names the cache reads once the
    rules' ``ignore_origin`` has set fields aside (``policy.assess_response``). Cache-Control
    sets aside every directive source (RFC 9213's targeted fields too); Vary keeps
    Accept-Encoding, which the edge keys by itself (decision 0023)."""
    ignored = applied.ignore_origin
    if not ignored:
        return directives, obeyed, vary
    dropped: set[str] = set()
    if "cache-control" in ignored:
        directives = {}
        dropped |= _DIRECTIVE_FIELDS
    if "expires" in ignored:
        dropped.add("expires")
    if "set-cookie" in ignored:  # stored anyway: never kept (storability.NOT_STORED)
        dropped |= {"set-cookie", "set-cookie2"}
    if "vary" in ignored:
        vary = tuple(name for name in vary if name == "accept-encoding")
    return directives, [(n, v) for n, v in obeyed if n not in dropped], vary


def purge_targets(rules: RuleSet | None, targets: tuple[str, ...]) -> tuple[str, ...]:
    """The request-targets a URL purge covers: each as the client sends it, and the target
    its key is normalised to (so a purge of ``/p?utm_source=x`` purges ``/p``)."""
    if rules is None:
        return targets
    covered: dict[str, None] = {}
    for target in targets:
        covered[target] = None
        applied = rules.match(target.partition("?")[0])
        if applied is not None:
            covered[normalised_target(target, applied.query)] = None
    return tuple(covered)


def browser_fields(fields: Headers, applied: Applied) -> Headers:
    """The fields a client gets under ``browser_ttl``: Cache-Control replaced by
    ``max-age=N`` and Expires dropped (a browser would read it only without max-age). The
    stored response keeps the origin's."""
    if applied.browser_ttl is None:
        return fields
    kept = tuple((n, v) for n, v in fields if n.lower() not in ("cache-control", "expires"))
    return (*kept, ("Cache-Control", f"max-age={int(applied.browser_ttl)}"))
