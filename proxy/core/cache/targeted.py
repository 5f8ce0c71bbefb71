"""Cache directives aimed at CDNs: CDN-Cache-Control (RFC 9213) and Surrogate-Control.

An origin often wants the edge to keep a response longer (or shorter, or not at all) than
browsers. Two fields say so:

- ``CDN-Cache-Control`` (RFC 9213), a Structured Field dictionary (RFC 8941) meant for every
  CDN. When it is present and valid, a CDN uses it instead of Cache-Control and Expires
  (§2.1). An invalid one (not a valid dictionary) is ignored as a whole (§2.1: "as if it
  were not present"); a directive whose value has the wrong type is ignored on its own.
- ``Surrogate-Control`` (W3C Edge Architecture 1.0): ``directive[=value][;target]`` items. An
  item without a target applies to every surrogate; one with a target applies only to the
  surrogate that advertised that name in ``Surrogate-Capability`` (this cache sends its
  ``cache.name``).

CDN-Cache-Control wins over Surrogate-Control, which wins over Cache-Control. Both fields are
passed on to clients unchanged: they are the origin's statement, and a further CDN in front of
this one may need them.
"""

from __future__ import annotations

from collections.abc import Sequence

import http_sf

from proxy.core.http.httpdate import Directives, parse_cache_control

# Directives whose value must be an Integer in CDN-Cache-Control (RFC 9213 §2.1 reuses the
# Cache-Control registry; delta-seconds map to Integer).
_INTEGER_DIRECTIVES = frozenset({"max-age", "s-maxage", "stale-while-revalidate", "stale-if-error"})

# Surrogate-Control replaces Cache-Control only when it says something about storing.
_SURROGATE_CONTROLS = frozenset({"max-age", "no-store"})

_SURROGATE_CAPABILITY = "Surrogate/1.0"


def targeted_directives(
    lowered: Sequence[tuple[str, str]], surrogate_name: str | None
) -> Directives | None:
    """The directives this cache must follow instead of Cache-Control, or None when the
    response has no (valid, applicable) targeted field. ``lowered`` is the response's header
    list with lowercase names."""
    cdn = [value for name, value in lowered if name == "cdn-cache-control"]
    if cdn:
        parsed = cdn_cache_control(", ".join(cdn))
        if parsed is not None:
            return parsed
    surrogate = [value for name, value in lowered if name == "surrogate-control"]
    if surrogate:
        applicable = surrogate_control(", ".join(surrogate), surrogate_name)
        if _SURROGATE_CONTROLS & applicable.keys():
            return applicable
    return None


def cdn_cache_control(value: str) -> Directives | None:
    """Parse CDN-Cache-Control; None when it is not a valid Structured Field dictionary."""
    try:
        parsed = http_sf.parse(value.encode("latin-1"), tltype="dictionary")
    except (http_sf.StructuredFieldError, UnicodeEncodeError, ValueError):
        return None
    if not isinstance(parsed, dict):
        return None
    directives: Directives = {}
    for name, member in parsed.items():
        item = member[0] if isinstance(member, tuple) else member
        if name in _INTEGER_DIRECTIVES:
            if isinstance(item, bool) or not isinstance(item, int):
                continue  # wrong type: this directive is ignored
            directives[name] = str(item) if item >= 0 else "-1"
        elif item is True:
            directives[name] = None
        elif isinstance(item, str):  # String or Token, e.g. no-cache="set-cookie"
            directives[name] = str(item)
        # Other types (False, numbers, byte sequences, inner lists) carry no meaning here.
    return directives


def surrogate_control(value: str, surrogate_name: str | None) -> Directives:
    """The Surrogate-Control directives that apply to this surrogate."""
    kept: list[str] = []
    for item in value.split(","):
        directive, _, target = item.partition(";")
        target = target.strip().lower()
        if target and target != (surrogate_name or "").lower():
            continue
        if directive.strip():
            kept.append(directive.strip())
    return parse_cache_control(", ".join(kept))


def surrogate_capability(surrogate_name: str) -> str:
    """The Surrogate-Capability request field this cache adds on its way to the origin."""
    return f'{surrogate_name}="{_SURROGATE_CAPABILITY}"'
