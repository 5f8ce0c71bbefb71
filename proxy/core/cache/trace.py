"""The trace: why one request would be a hit, a miss or a bypass (issue 25 §3, decision 0038).

Theory of operation. ``trace`` answers, for one request as the edge would see it, every
question the edge asks on its way to an answer, in the edge's order (edge/handler.py
``_answer``): which rules match the path (and why each other one does not), the cache key
after the rules' query normalisation, whether the request may use the cache at all (method,
``cache = false``, a bypass cookie, Authorization under storage overrides), what the store
holds under the key (``Held``, read without touching recency, purge marks or counters) and
what ``policy.decide_lookup`` would decide with it, which purges apply, and which origin
server a miss would go to. With an assessed origin answer (``fetched``: the API's
``fetch``), it adds whether that answer would be stored, and if not the refusal reason
``storability.refusal`` gives (through ``policy.assess_response``).

Pure: no I/O and no clock. The caller reads the store (``MemoryStore.inspect``), the origin
pool's servers and the clock, and passes them in; the answer is a JSON-ready dict.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from proxy.core.cache.deception import rule_path
from proxy.core.cache.entry import StoredResponse
from proxy.core.cache.freshness import explicit_lifetime
from proxy.core.cache.keys import cache_target
from proxy.core.cache.policy import (
    DontStore,
    Forward,
    Revalidate,
    Serve,
    Storable,
    _obeyed,
    decide_lookup,
)
from proxy.core.cache.rules import Applied, RuleSet, normalised_target
from proxy.core.http.encodings import preferred
from proxy.core.http.requests import CACHEABLE_METHODS


class TraceHeaders:
    """Request fields as ``policy.RequestHeaders`` reads them (case-insensitive)."""

    def __init__(self, pairs: Sequence[tuple[str, str]]) -> None:
        self._pairs = [(name.lower(), value) for name, value in pairs]

    def get(self, key: str, /) -> str | None:
        found = self.getall(key, [])
        return found[0] if found else None

    def getall(self, key: str, default: list[str], /) -> list[str]:
        lowered = key.lower()
        found = [value for name, value in self._pairs if name == lowered]
        return found if found else default


class Asked(Protocol):
    """The request traced, as the client sends it: ``target`` in origin-form, ``https``
    whether it came over TLS (the API's TraceRequest has this shape)."""

    @property
    def method(self) -> str: ...

    @property
    def target(self) -> str: ...

    @property
    def headers(self) -> Sequence[tuple[str, str]]: ...

    @property
    def https(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class Held:
    """What the store holds for one key, read changing nothing (``MemoryStore.inspect``):
    the variants a lookup would find, the domain's generation and purge number, and the
    remembered purges that cover the key's target."""

    variants: tuple[StoredResponse, ...]
    generation: int
    purge_number: int
    # the remembered purges covering the target: (kind, items, soft)
    purges: tuple[tuple[str, tuple[str, ...], bool], ...] = ()
    pending: int = 0  # variants an outstanding lazy purge drops at the next lookup
    # The key's last fill was not stored, recently: why, the origin's status, and when
    # (wall clock). Remembered by the edge process (proxy/edge/refusals.py: hit-for-miss).
    refused: tuple[str, int, float] | None = None


@dataclass(frozen=True, slots=True)
class Server:
    """One origin server as the trace reports it (``balance.ServerState``'s part)."""

    url: str
    backup: bool
    up: bool
    last_failure: str | None = None


def rule_rows(rules: RuleSet | None, path: str) -> list[dict[str, object]]:
    """Each rule in order: its name, whether it matched the path, and why (not). Globs
    match the path as ``deception.rule_path`` reads it, which the words name when it
    differs from the path as sent."""
    rows: list[dict[str, object]] = []
    normal = rule_path(path)
    shown = path if normal == path else f"{path} (read as {normal})"
    for rule in () if rules is None else rules.rules:
        if rule.matcher is None:
            rows.append({"name": rule.name, "matched": True, "why": "no paths: every path"})
        elif rule.matcher.fullmatch(normal):
            rows.append({"name": rule.name, "matched": True, "why": f"{shown!r} matches a glob"})
        else:
            globs = ", ".join(map(repr, rule.paths))
            why = f"{shown!r} matches none of its paths ({globs})"
            rows.append({"name": rule.name, "matched": False, "why": why})
    return rows


def bypass_reason(applied: Applied | None, request: TraceHeaders, method: str) -> str | None:
    """Why the edge sends this request to the origin uncached, or None (as the edge's
    ``may_use_cache`` and ``Applied.bypass_kind``). A trace has no body: none is assumed."""
    if method not in CACHEABLE_METHODS:
        return f"method: {method} is never answered from the cache"
    if applied is None:
        return None
    kind = applied.bypass_kind(request)
    return None if kind is None else f"{_BYPASS_WORDS[kind]} ({applied.detail})"


# Applied.bypass_kind's answers, for people.
_BYPASS_WORDS = {
    "cache-false": "cache = false",
    "bypass-cookie": "a bypass cookie",
    "authorization": "Authorization, and the rules override what is stored",
}


def lifetime_source(entry: StoredResponse, applied: Applied | None) -> str:
    """Where the stored lifetime came from: a rule, the origin's fields, or the heuristic."""
    if applied is not None and applied.lifetime_for(entry.status) is not None:
        return "rule"
    lowered = [(name.lower(), value) for name, value in entry.headers]
    directives, obeyed = _obeyed(lowered, None)
    if explicit_lifetime(directives, obeyed, entry.birth) is not None:
        return "origin"
    return "heuristic"


def _entry_row(entry: StoredResponse, applied: Applied | None, now: float) -> dict[str, object]:
    return {
        "status": entry.status,
        "age": round(entry.age(now), 3),
        "freshness_lifetime": entry.freshness_lifetime,
        "lifetime_source": lifetime_source(entry, applied),
        "fresh": entry.is_fresh(now),
        "vary": list(entry.vary),
        "tags": list(entry.tags),
    }


def _lookup(
    held: Held | None,
    request: TraceHeaders,
    applied: Applied | None,
    now: float,
    codings: tuple[str, ...] | None,
) -> tuple[str, str, dict[str, object] | None]:
    """The edge's decision with what is held: (``hit``/``revalidate``/``miss``, why, the
    entry it would use). ``codings``: the domain's (``codings_of``): Accept-Encoding is read
    as the edge reads it, reduced to the one coding its variants are keyed by (issue 34 B2:
    the raw field never matches a variant of a domain that compresses)."""
    obey = applied is None or not applied.ignore_client_no_cache
    variants = () if held is None else held.variants
    coding = None if codings is None else preferred(request.getall("accept-encoding", []), codings)
    decision = decide_lookup(variants, request, now, coding, obey_request=obey)
    if isinstance(decision, Serve):
        return "hit", "stored and fresh", _entry_row(decision.response, applied, now)
    if isinstance(decision, Revalidate):
        why = f"stored but must be revalidated ({decision.reason})"
        return "revalidate", why, _entry_row(decision.response, applied, now)
    assert isinstance(decision, Forward)
    return "miss", decision.reason, None


def _origin(servers: Sequence[Server], balance: str) -> dict[str, object]:
    """Which servers a miss may go to: the up ones of the first tier that has any."""
    for backup in (False, True):
        up = [s.url for s in servers if s.up and s.backup is backup]
        if up:
            return {"balance": balance, "candidates": up, "backup": backup}
    rows = [{"origin": s.url, "last_failure": s.last_failure} for s in servers]
    return {"balance": balance, "candidates": [], "down": rows}


def trace(
    *,
    domain: str,
    rules: RuleSet | None,
    asked: Asked,
    held: Held | None,
    now: float,
    servers: Sequence[Server] = (),
    balance: str = "round_robin",
    fetched: Storable | DontStore | None = None,
    codings: tuple[str, ...] | None = None,
) -> dict[str, object]:
    """The trace of the request ``asked`` (see the module's docstring). ``held``: what the
    store holds under the normalised key; ``codings``: the domain's content codings
    (``compression.codings_of``), which its variants are keyed by."""
    method, target = asked.method, asked.target
    request = TraceHeaders(asked.headers)
    path = target.partition("?")[0]
    applied = None if rules is None else rules.match(path)
    key = target if applied is None else normalised_target(target, applied.query)
    answer: dict[str, object] = {
        "domain": domain,
        "method": method,
        "scheme": "https" if asked.https else "http",
        "target": target,
        "rules": rule_rows(rules, path),
        "applied": [] if applied is None else list(applied.names),
        "key": key,
        "key_target": cache_target(key, asked.https),
    }
    bypass = bypass_reason(applied, request, method)
    if bypass is not None:
        outcome, why, entry = "bypass", bypass, None
    else:
        outcome, why, entry = _lookup(held, request, applied, now, codings)
    answer.update(outcome=outcome, why=why, entry=entry)
    if held is not None:
        answer["store"] = _store_row(held, now)
    answer["origin"] = _origin(servers, balance)
    if fetched is not None:
        answer["fetched"] = _fetched_row(fetched, applied)
    return answer


def _store_row(held: Held, now: float) -> dict[str, object]:
    refused = None
    if held.refused is not None:
        reason, status, at = held.refused
        refused = {"why_not": reason, "status": status, "age": round(max(0.0, now - at), 1)}
    return {
        "variants": len(held.variants),
        "generation": held.generation,
        "purge_number": held.purge_number,
        "numbers": "the store's",  # with a fleet, the API gives the fleet's (api/trace.py)
        "pending_purges": held.pending,
        "purges": [
            {"kind": kind, "items": list(items), "soft": soft} for kind, items, soft in held.purges
        ],
        "refused": refused,
    }


def _fetched_row(fetched: Storable | DontStore, applied: Applied | None) -> dict[str, object]:
    """What the edge would do with the origin's answer: store it (for how long, from which
    source) or not, and why not (``storability.refusal``)."""
    if isinstance(fetched, DontStore):
        return {"storable": False, "why_not": fetched.reason}
    rule = None if applied is None else applied.lifetime_for(fetched.status)
    source = None if rule is None else "rule"
    return {
        "storable": True,
        "status": fetched.status,
        "freshness_lifetime": fetched.freshness_lifetime,
        "lifetime_source": source or "origin or heuristic",
    }
