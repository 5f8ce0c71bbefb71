"""The trace in core (core/cache/trace.py, decision 0038): rules matched and why not, the
normalised key, bypasses, the lookup decision and the lifetime's source, with what a real
MemoryStore holds, read changing nothing (``MemoryStore.inspect``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from proxy.core.cache.entry import StoredResponse
from proxy.core.cache.keys import cache_target
from proxy.core.cache.rules import Rule, RuleSet
from proxy.core.cache.trace import Held, Server, lifetime_source, trace
from proxy.core.purge.purges import purge_request
from proxy.store.memory import MemoryStore

NOW = 1_700_000_000.0
DOMAIN = "example.com"


def rule_set(*rules: dict[str, Any]) -> RuleSet:
    return RuleSet(tuple(Rule.compiled(**r) for r in rules))


def entry(headers: tuple[tuple[str, str], ...] = (), lifetime: float = 60.0) -> StoredResponse:
    return StoredResponse(
        status=200,
        reason="OK",
        headers=headers,
        body=b"x",
        birth=NOW - 10,
        freshness_lifetime=lifetime,
    )


RULES = rule_set(
    {"name": "all", "query_ignore": ("utm_*",), "query_sort": True, "bypass_cookies": ("sess*",)},
    {"name": "static", "paths": ("/static/*",), "edge_ttl": 86400.0},
    {"name": "account", "paths": ("/account/*",), "cache": False},
)


@dataclass(frozen=True, slots=True)
class Asked:
    """A request as the API's TraceRequest carries it (core.cache.trace.Asked)."""

    method: str
    target: str
    headers: tuple[tuple[str, str], ...] = ()
    https: bool = False


def traced(target: str, held: Held | None, headers: tuple[tuple[str, str], ...] = ()) -> Any:
    return trace(
        domain=DOMAIN,
        rules=RULES,
        asked=Asked("GET", target, headers),
        held=held,
        now=NOW,
        servers=(
            Server("http://127.0.0.1:1", False, False, "refused"),
            Server("http://127.0.0.1:2", False, True),
        ),
    )


def test_rules_matched_and_why_the_others_did_not() -> None:
    answer = traced("/static/a.css", None)
    assert answer["applied"] == ["all", "static"]
    rows = {row["name"]: row for row in answer["rules"]}
    assert rows["all"]["matched"] and rows["static"]["matched"]
    assert not rows["account"]["matched"]
    assert "'/static/a.css' matches none of its paths ('/account/*')" in rows["account"]["why"]
    assert answer["origin"]["candidates"] == ["http://127.0.0.1:2"]


def test_rules_are_traced_on_the_path_they_match() -> None:
    """Decision 0042: globs match the normalised path, and the trace says which it read."""
    answer = traced("/%61ccount;x/a.css", None)
    assert answer["applied"] == ["all", "account"]
    rows = {row["name"]: row for row in answer["rules"]}
    assert rows["account"]["why"] == "'/%61ccount;x/a.css (read as /account/a.css)' matches a glob"
    assert answer["outcome"] == "bypass"


def test_the_key_is_normalised_and_a_stored_entry_is_a_hit_with_its_lifetime_source() -> None:
    held = Held(variants=(entry((("Cache-Control", "max-age=60"),)),), generation=0, purge_number=0)
    answer = traced("/p?utm_source=x&b=2&a=1", held)
    assert answer["key"] == "/p?a=1&b=2"
    assert answer["outcome"] == "hit"
    assert answer["entry"]["age"] == 10.0
    assert answer["entry"]["lifetime_source"] == "origin"


def test_bypasses_cookie_and_cache_false_and_method() -> None:
    held = Held(variants=(entry(),), generation=0, purge_number=0)
    cookie = traced("/p", held, (("Cookie", "a=1; session=x"),))
    assert cookie["outcome"] == "bypass" and "bypass cookie" in cookie["why"]
    assert traced("/p", held, (("Cookie", "a=1"),))["outcome"] == "hit"
    assert traced("/account/x", held)["outcome"] == "bypass"
    post = trace(domain=DOMAIN, rules=None, asked=Asked("POST", "/p"), held=held, now=NOW)
    assert post["outcome"] == "bypass" and "method" in str(post["why"])


def test_lifetime_sources() -> None:
    static = RULES.match("/static/x")
    assert lifetime_source(entry(), static) == "rule"
    assert lifetime_source(entry((("Expires", "Thu, 01 Jan 2099 00:00:00 GMT"),)), None) == "origin"
    assert (
        lifetime_source(entry((("Last-Modified", "Thu, 01 Jan 2015 00:00:00 GMT"),)), None)
        == "heuristic"
    )


async def test_inspect_changes_nothing_and_reports_the_purges() -> None:
    store = MemoryStore(max_bytes=1024**2)
    for target in ("/a", "/b"):
        key = (await store.lookup(DOMAIN, target)).key
        assert await store.put(key, entry((("Cache-Control", "max-age=60"),)))
    before = await store.stats()
    held = store.inspect(DOMAIN, "/a")  # /a is not marked visited (SIEVE)
    assert len(held.variants) == 1
    assert await store.stats() == before
    assert not store._visited[store._slots[f"{DOMAIN} 0 /a"]]  # still not visited
    assert (await store.purge(DOMAIN, purge_request("url", ["/a"]))).entries == 1
    gone = store.inspect(DOMAIN, "/a")
    assert gone.variants == ()
    assert gone.purges == (("url", ("/a",), False),)
    assert traced("/a", gone)["outcome"] == "miss"
    assert traced("/a", gone)["store"]["purges"] == [
        {"kind": "url", "items": ["/a"], "soft": False}
    ]


@pytest.mark.slow
def test_the_scheme_of_the_request_asked_is_in_its_key_target() -> None:
    """A request over TLS has its own key (keys.cache_target): the trace says which."""
    plain = trace(domain=DOMAIN, rules=None, asked=Asked("GET", "/k"), held=None, now=NOW)
    tls = trace(domain=DOMAIN, rules=None, asked=Asked("GET", "/k", https=True), held=None, now=NOW)
    assert plain["key_target"] == cache_target("/k", False) == "/k"
    assert tls["key_target"] == cache_target("/k", True) != "/k"
