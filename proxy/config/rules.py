"""The ``[[domains.rules]]`` tables: checked and compiled once, at load, into a core RuleSet.

Every key is checked as every other config key is (``config/values.py``): one line naming
the key (``domains[0].rules[1].edge_ttl: '1y' is not a duration ...``). What this adds:
durations with units, globs that could never match (a path glob not starting with '/' or
'*', a cookie or parameter name glob with a character a name cannot hold), and rules that
contradict themselves (query_ignore and query_only together). Decision 0033.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from proxy.config import values as check
from proxy.core.cache.rules import IGNORABLE, NEVER_STORED_STATUSES, Rule, RuleSet, never_matches
from proxy.errors import ConfigError

_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([a-z]*)\s*$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
_MAX_RULES = 256
# Characters no cookie name (RFC 6265 §4.1.1: a token) nor query parameter name can hold.
_NOT_IN_NAMES = frozenset(' \t;=,&"#')
_IGNORE_SPELLINGS = {
    name.lower(): name for name in ("Cache-Control", "Expires", "Set-Cookie", "Vary")
}


def duration(key: str, value: object) -> float:
    """Seconds from a number or a string such as "30s", "5m", "1h", "1d", "2w"; > 0."""
    if isinstance(value, bool) or value is None:
        raise ConfigError(key, 'must be a duration such as "30s", "5m", "1h" or "1d"')
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and (match := _DURATION.match(value)):
        unit = _UNITS.get(match.group(2))
        if unit is None:
            raise ConfigError(
                key, f"{value!r} has an unknown unit {match.group(2)!r} (use s, m, h, d or w)"
            )
        seconds = float(match.group(1)) * unit
    else:
        raise ConfigError(key, f"{value!r} is not a duration (such as 30s, 5m, 1h, 1d)")
    if not 0 < seconds <= 10 * 365 * 86_400:
        raise ConfigError(key, "must be a duration greater than zero and at most 10 years")
    return seconds


# What each list of names holds, and an example of it, for its error (issue 34 B6).
_NAME_LISTS = {
    "bypass_cookies": 'cookie names such as ["wordpress_logged_in_*"]',
    "query_ignore": 'query parameter names such as ["utm_*", "fbclid"]',
    "query_only": 'query parameter names such as ["page", "q"]',
}


def _globs(key: str, value: object, *, paths: bool) -> tuple[str, ...]:
    listed = isinstance(value, list) and all(isinstance(v, str) for v in value)
    if paths and not (listed and value):
        raise ConfigError(key, 'must be a non-empty list of strings such as ["/static/*"]')
    if not isinstance(value, list) or not listed:
        names = _NAME_LISTS.get(key.rpartition(".")[2], "names")
        raise ConfigError(
            key, f"must be a list of {names} ([] lifts what an earlier rule set for these paths)"
        )
    for index, glob in enumerate(value):
        where = f"{key}[{index}]"
        if paths:
            why = never_matches(glob)
        elif not glob:
            why = "is empty"
        else:
            bad = next((c for c in glob if c in _NOT_IN_NAMES or ord(c) < 32), None)
            why = None if bad is None else f"{glob!r} can never match: a name holds no {bad!r}"
        if why is not None:
            raise ConfigError(where, why)
    return tuple(dict.fromkeys(value))


def _path_globs(key: str, value: object) -> tuple[str, ...]:
    return _globs(key, value, paths=True)


def _name_globs(key: str, value: object) -> tuple[str, ...]:
    return _globs(key, value, paths=False)


def _by_status(key: str, value: object) -> tuple[tuple[int, float], ...]:
    if not isinstance(value, dict) or not value:
        raise ConfigError(key, 'must be a table such as { 404 = "1m", 301 = "1h" }')
    pairs = []
    for raw, ttl in value.items():
        status = int(raw) if isinstance(raw, str) and raw.isdigit() and len(raw) == 3 else 0
        if not 200 <= status <= 599 or status in NEVER_STORED_STATUSES:
            raise ConfigError(
                f"{key}.{raw}", "must be a status from 200 to 599 (not 206 nor 304: never stored)"
            )
        pairs.append((status, duration(f"{key}.{raw}", ttl)))
    return tuple(sorted(pairs))


def _ignore_origin(key: str, value: object) -> frozenset[str]:
    allowed = ", ".join(_IGNORE_SPELLINGS.values())
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(key, f"must be a list of field names from: {allowed}")
    names = frozenset(v.lower() for v in value)
    unknown = sorted(v for v in value if v.lower() not in IGNORABLE)
    if unknown:
        raise ConfigError(key, f"{unknown[0]!r} cannot be ignored (one of: {allowed})")
    return names


def _name(key: str, value: object) -> str:
    return check.token_text(key, value)


_CHECKS: Mapping[str, Callable[[str, object], object]] = {
    "name": _name,
    "paths": _path_globs,
    "bypass_cookies": _name_globs,
    "cache_with_cookies": check.flag,
    "ignore_client_no_cache": check.flag,
    "query_ignore": _name_globs,
    "query_only": _name_globs,
    "query_sort": check.flag,
    "edge_ttl": duration,
    "edge_ttl_by_status": _by_status,
    "ignore_origin": _ignore_origin,
    "browser_ttl": duration,
    "stale_while_revalidate": duration,
    "stale_if_error": duration,
    "cache": check.flag,
}


def rules(key: str, value: object) -> RuleSet | None:
    """The check of ``domains[i].rules``: None when absent (the domain has no rules)."""
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise ConfigError(key, "must be [[domains.rules]] tables")
    if len(value) > _MAX_RULES:
        raise ConfigError(key, f"at most {_MAX_RULES} rules per domain, not {len(value)}")
    compiled: list[Rule] = []
    names: set[str] = set()
    for index, table in enumerate(value):
        rule = _rule(f"{key}[{index}]", table, index)
        if rule.name in names:
            raise ConfigError(f"{key}[{index}].name", f"{rule.name!r} names two rules")
        names.add(rule.name)
        compiled.append(rule)
    return RuleSet(tuple(compiled)) if compiled else None


def _rule(where: str, table: Mapping[str, object], index: int) -> Rule:
    fields: dict[str, object] = {}
    for name, raw in table.items():
        checked = _CHECKS.get(name)
        if checked is None:
            expected = ", ".join(sorted(_CHECKS))
            raise ConfigError(f"{where}.{name}", f"unknown key (expected one of: {expected})")
        fields[name] = checked(f"{where}.{name}", raw)
    if "query_ignore" in fields and "query_only" in fields:
        raise ConfigError(f"{where}.query_only", "cannot be given with query_ignore in one rule")
    if len(fields.keys() - {"name", "paths"}) == 0:
        raise ConfigError(where, "sets nothing: give it at least one key besides name and paths")
    fields.setdefault("name", f"rules[{index}]")
    return Rule.compiled(**fields)
