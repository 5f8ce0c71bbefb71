"""Cache rules in core (core/cache/rules.py, decision 0033): matching, merging, the query
normalisation, purge targets, and what a rule may make storable (RFC 9111 §3, §4.2)."""

from __future__ import annotations

from email.utils import formatdate
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from multidict import CIMultiDict

from proxy.core.cache.policy import DontStore, Storable, assess_response, decide_lookup
from proxy.core.cache.rules import (
    Applied,
    Rule,
    RuleSet,
    browser_fields,
    normalised_target,
    purge_targets,
)
from proxy.core.http.httpdate import parse_cache_control

NOW = 1_700_000_000.0


def rule_set(*rules: dict[str, Any]) -> RuleSet:
    return RuleSet(tuple(Rule.compiled(name=f"r{i}", **r) for i, r in enumerate(rules)))


def applied(**fields: Any) -> Applied:
    result = rule_set(fields).match("/")
    assert result is not None
    return result


@pytest.mark.parametrize(
    ("globs", "path", "matches"),
    [
        (("/static/*",), "/static/a/b.css", True),
        (("/static/*",), "/staticx", False),
        (("*.css",), "/a/b.css", True),
        (("*.css",), "/a/b.css.map", False),
        (("/cart*",), "/cart", True),
        (("/cart*",), "/carts/1", True),
        (("/a?c",), "/abc", True),
        (("/a.c",), "/abc", False),  # '.' is literal
        (("/x", "/y"), "/y", True),
    ],
)
def test_path_globs(globs: tuple[str, ...], path: str, matches: bool) -> None:
    """'*' is any run of characters, '/' included; '?' one character; the rest literal."""
    assert (rule_set({"paths": list(globs), "cache": False}).match(path) is not None) is matches


def test_later_rules_win_and_every_matching_rule_is_named() -> None:
    """Cloudflare's order: every matching rule applies; a later field replaces an earlier."""
    rules = rule_set(
        {"edge_ttl": 60.0, "browser_ttl": 10.0, "query_ignore": ("utm_*",)},
        {"paths": ("/static/*",), "edge_ttl": 3600.0, "query_only": ("v",)},
        {"paths": ("/none",), "cache": False},
    )
    static = rules.match("/static/x")
    assert static is not None
    assert static.names == ("r0", "r1") and static.detail == "rules=r0,r1"
    assert static.edge_ttl == 3600.0 and static.browser_ttl == 10.0 and static.cache
    assert normalised_target("/static/x?utm_a=1&v=2&w=3", static.query) == "/static/x?v=2"
    other = rules.match("/other")
    assert other is not None and other.edge_ttl == 60.0
    assert normalised_target("/other?utm_a=1&w=3", other.query) == "/other?w=3"
    assert rule_set({"paths": ("/a",), "cache": False}).match("/b") is None


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("/p", "/p"),
        ("/p?", "/p"),
        ("/p?utm_source=x", "/p"),
        ("/p?b=1&a=2", "/p?a=2&b=1"),
        ("/p?a=2&b=1&utm_x=&fbclid=3", "/p?a=2&b=1"),
        ("/p?b=1&a=2&a=1", "/p?a=2&a=1&b=1"),  # stable: repeated names keep their order
        ("/p?%75tm_source=x&c", "/p?c"),  # names compared percent-decoded
        ("/p?&&c=1&&", "/p?c=1"),
        ("/p?c=%20x", "/p?c=%20x"),  # values keep their spelling
    ],
)
def test_query_normalisation(target: str, expected: str) -> None:
    query = applied(query_ignore=("utm_*", "fbclid"), query_sort=True).query
    assert normalised_target(target, query) == expected


def test_bypass_cookies_by_glob() -> None:
    rules = applied(bypass_cookies=("wordpress_logged_in_*", "sessionid"))
    assert rules.bypassed(["_ga=1; wordpress_logged_in_abc=x"])
    assert rules.bypassed(["a=1", "sessionid=2"])
    assert not rules.bypassed(["sessionid_other=1; wordpress_test_cookie=1"])
    assert not rules.bypassed([])


def test_purge_targets_map_through_the_key_normalisation() -> None:
    """A URL purge names targets as clients send them (issue 25 §1)."""
    rules = rule_set({"query_ignore": ("utm_*",)})
    assert purge_targets(rules, ("/p?utm_source=x", "/q")) == ("/p?utm_source=x", "/p", "/q")
    assert purge_targets(None, ("/p?utm_source=x",)) == ("/p?utm_source=x",)


def test_browser_fields_replace_cache_control_and_expires() -> None:
    fields = (("Cache-Control", "private"), ("Expires", "0"), ("ETag", '"1"'))
    assert browser_fields(fields, applied(browser_ttl=90.0)) == (
        ("ETag", '"1"'),
        ("Cache-Control", "max-age=90"),
    )


def test_ignore_client_no_cache_serves_a_reload_and_fwd_request_labels_it() -> None:
    """RFC 9211 §2.2: a forward the request's directives caused is fwd=request."""
    stored = assess_response(
        method="GET",
        request=CIMultiDict(),
        status=200,
        reason="OK",
        headers=(("Date", formatdate(NOW, usegmt=True)), ("Cache-Control", "max-age=60")),
        request_time=NOW,
        response_time=NOW,
        heuristic=False,
    )
    assert isinstance(stored, Storable)
    entry = stored.with_body(b"x", "/")
    reload = CIMultiDict([("Cache-Control", "max-age=0")])
    decision = decide_lookup([entry], reload, NOW + 1)
    assert type(decision).__name__ == "Revalidate" and decision.reason == "request"  # type: ignore[union-attr]
    assert type(decide_lookup([entry], reload, NOW + 1, obey_request=False)).__name__ == "Serve"
    late = decide_lookup([entry], reload, NOW + 61)
    assert late.reason == "stale"  # type: ignore[union-attr]


# -- what a rule may make storable ------------------------------------------------------------

_FIELDS = st.lists(
    st.sampled_from(
        [
            ("Cache-Control", "private"),
            ("Cache-Control", "no-store"),
            ("Cache-Control", "no-cache"),
            ("Cache-Control", "max-age=60"),
            ("Cache-Control", "public"),
            ("Cache-Control", "must-revalidate"),
            ("Cache-Control", "s-maxage=30"),
            ("CDN-Cache-Control", "no-store"),
            ("Expires", "0"),
            ("Set-Cookie", "sid=1"),
            ("Vary", "*"),
            ("Vary", "Accept-Encoding"),
            ("ETag", '"v"'),
        ]
    ),
    max_size=5,
)
_RULES = st.fixed_dictionaries(
    {},
    optional={
        "edge_ttl": st.sampled_from([1.0, 3600.0]),
        "edge_ttl_by_status": st.sampled_from([((404, 60.0),), ((500, 5.0), (200, 1.0))]),
        "ignore_origin": st.frozensets(
            st.sampled_from(["cache-control", "expires", "set-cookie", "vary"])
        ),
        "stale_if_error": st.just(100.0),
    },
)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(
    fields=_FIELDS,
    rules=_RULES,
    status=st.sampled_from([200, 206, 304, 404, 500]),
    authorization=st.booleans(),
    request_no_store=st.booleans(),
)
def test_a_rule_never_stores_what_the_rfc_forbids_beyond_what_it_names(
    fields: list[tuple[str, str]],
    rules: dict[str, Any],
    status: int,
    authorization: bool,
    request_no_store: bool,
) -> None:
    """RFC 9111 §3: whatever a rule says, a response is stored only if each prohibition it
    breaks is one the rule names; and what is stored never keeps Set-Cookie."""
    request = CIMultiDict[str]()
    if authorization:
        request["Authorization"] = "Bearer t"
    if request_no_store:
        request["Cache-Control"] = "no-store"
    headers = (("Date", formatdate(NOW, usegmt=True)), *fields)
    result = assess_response(
        method="GET",
        request=request,
        status=status,
        reason="X",
        headers=headers,
        request_time=NOW,
        response_time=NOW,
        heuristic=False,
        rules=applied(**rules) if rules else None,
    )
    if isinstance(result, DontStore):
        return
    ignored = rules.get("ignore_origin", frozenset())
    directives = parse_cache_control(", ".join(v for n, v in fields if n == "Cache-Control"))
    assert status not in (206, 304)  # §3 ¶2.2
    assert not request_no_store  # §5.2.1.5
    assert all(name.lower() != "set-cookie" for name, _ in result.headers)
    if any(n == "Set-Cookie" for n, _ in fields):
        assert "set-cookie" in ignored
    if "private" in directives or "no-store" in directives:  # §5.2.2.5, §5.2.2.7
        assert "cache-control" in ignored
    if any(n == "CDN-Cache-Control" for n, _ in fields):  # RFC 9213: no-store
        assert "cache-control" in ignored
    if ("Vary", "*") in fields:
        assert "vary" in ignored
    if authorization:  # §3.5, by the origin's own directives only
        assert {"public", "must-revalidate", "s-maxage"} & directives.keys()
