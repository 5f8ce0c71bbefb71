"""``[[domains.rules]]`` at load (decision 0033): one-line errors naming the key, and a loader
that never crashes on any rule table; what a reload says when rules change keys."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.config.diff import diff
from proxy.config.model import Config, parse_config
from proxy.errors import ConfigError

ORIGIN = "http://127.0.0.1:9000"


def config(*rules: object, base_dir: Path = Path("/srv"), origin: str = ORIGIN) -> Config:
    domain: dict[str, Any] = {"name": "example.com", "origin": origin, "rules": list(rules)}
    return parse_config(
        {
            "edge": {"listen": "127.0.0.1:8080"},
            "api": {"listen": "127.0.0.1:8081"},
            "cache": {"max_bytes": "16MiB"},
            "state": {"path": "state.db"},
            "domains": [domain],
        },
        base_dir=base_dir,
    )


def test_the_issue_example_loads_with_its_durations_and_order() -> None:
    rules = (
        config(
            {
                "bypass_cookies": ["sessionid", "wordpress_logged_in_*"],
                "ignore_client_no_cache": True,
                "query_ignore": ["utm_*", "fbclid", "gclid"],
                "query_sort": True,
            },
            {
                "name": "static",
                "paths": ["/static/*", "*.css", "*.js", "*.woff2"],
                "edge_ttl": "1d",
                "edge_ttl_by_status": {"404": "1m", "301": "1h"},
                "ignore_origin": ["Cache-Control", "Expires", "Set-Cookie", "Vary"],
                "browser_ttl": "1h",
                "stale_while_revalidate": "30s",
                "stale_if_error": "1d",
            },
            {"paths": ["/account/*", "/cart*"], "cache": False},
        )
        .by_name["example.com"]
        .rules
    )
    assert rules is not None
    assert [rule.name for rule in rules.rules] == ["rules[0]", "static", "rules[2]"]
    static = rules.match("/static/app.css")
    assert static is not None
    assert static.edge_ttl == 86_400 and static.browser_ttl == 3600
    assert static.lifetime_for(404) == 60 and static.lifetime_for(301) == 3600
    assert static.lifetime_for(500) is None and static.lifetime_for(200) == 86_400
    cart = rules.match("/cart/items")
    assert cart is not None and not cart.cache and cart.names == ("rules[0]", "rules[2]")
    assert rules.match("/x") is not None  # the catch-all


BAD = [
    ({"edge_ttl": "1y"}, "domains[0].rules[0].edge_ttl: '1y' has an unknown unit 'y'"),
    ({"edge_ttl": "soon"}, "domains[0].rules[0].edge_ttl: 'soon' is not a duration"),
    ({"edge_ttl": 0}, "domains[0].rules[0].edge_ttl: must be a duration greater than zero"),
    ({"browser_ttl": True}, "domains[0].rules[0].browser_ttl: must be a duration"),
    (
        {"paths": ["static/*"], "cache": False},
        "domains[0].rules[0].paths[0]: 'static/*' can never match: a path starts with '/'",
    ),
    (
        {"paths": ["/a b"], "cache": False},
        "domains[0].rules[0].paths[0]: '/a b' can never match: a path holds no ' '",
    ),
    ({"paths": [], "cache": False}, "domains[0].rules[0].paths: must be a non-empty list"),
    (
        {"bypass_cookies": ["a=b"]},
        "domains[0].rules[0].bypass_cookies[0]: 'a=b' can never match: a name holds no '='",
    ),
    (
        {"query_ignore": ["a&b"]},
        "domains[0].rules[0].query_ignore[0]: 'a&b' can never match: a name holds no '&'",
    ),
    (
        {"query_ignore": ["a"], "query_only": ["b"]},
        "domains[0].rules[0].query_only: cannot be given with query_ignore in one rule",
    ),
    ({"ignore_origin": ["Age"]}, "domains[0].rules[0].ignore_origin: 'Age' cannot be ignored"),
    (
        {"edge_ttl_by_status": {"304": "1m"}},
        "domains[0].rules[0].edge_ttl_by_status.304: must be a status from 200 to 599",
    ),
    (
        {"edge_ttl_by_status": {"404": "1q"}},
        "domains[0].rules[0].edge_ttl_by_status.404: '1q' has an unknown unit 'q'",
    ),
    ({"cache": "no"}, "domains[0].rules[0].cache: must be true or false"),
    (
        {"cache_with_cookies": "yes", "edge_ttl": "1h"},
        "domains[0].rules[0].cache_with_cookies: must be true or false",
    ),
    (
        {"paths": ["/account;*"], "cache": False},
        "domains[0].rules[0].paths[0]: '/account;*' can never match: a path parameter (';...')"
        " is cut before rules match (decision 0042)",
    ),
    (
        {"paths": ["/a//b"], "cache": False},
        "domains[0].rules[0].paths[0]: '/a//b' can never match: repeated slashes are merged",
    ),
    ({"ttl": "1h"}, "domains[0].rules[0].ttl: unknown key (expected one of: browser_ttl"),
    ({"paths": ["/a"]}, "domains[0].rules[0]: sets nothing"),
    ({"name": "a b", "cache": False}, "domains[0].rules[0].name: must be 1-64 letters"),
]


@pytest.mark.parametrize(("rule", "message"), BAD, ids=[m.split(": ")[0] + repr(r) for r, m in BAD])
def test_a_bad_rule_is_one_line_naming_the_key(rule: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        config(rule)
    text = str(raised.value)
    assert text.startswith(message)
    assert "\n" not in text


@pytest.mark.parametrize(
    ("key", "example"),
    [
        ("bypass_cookies", '["wordpress_logged_in_*"]'),
        ("query_ignore", '["utm_*", "fbclid"]'),
        ("query_only", '["page", "q"]'),
    ],
)
def test_a_name_list_error_shows_names_not_a_path(key: str, example: str) -> None:
    """Issue 34 B6: the error for a cookie or parameter list showed ``["/static/*"]``."""
    with pytest.raises(ConfigError) as raised:
        config({key: "utm_source"})
    text = str(raised.value)
    assert text.startswith(f"domains[0].rules[0].{key}: must be a list of")
    assert example in text and "/static/" not in text
    assert "[] lifts" in text


def test_an_empty_name_list_lifts_what_an_earlier_rule_set() -> None:
    """Issue 34 B6: ``bypass_cookies = []`` in a later rule lifts a catch-all's bypass for
    static files; ``query_ignore = []`` or ``query_only = []`` lifts a query filter."""
    rules = (
        config(
            {"name": "wp", "bypass_cookies": ["wordpress_logged_in_*"], "query_ignore": ["utm_*"]},
            {"name": "static", "paths": ["/static/*"], "bypass_cookies": [], "query_only": []},
        )
        .domains[0]
        .rules
    )
    assert rules is not None
    page = rules.match("/post")
    assert page is not None and page.bypassed(["wordpress_logged_in_1=a"])
    assert page.query is not None
    static = rules.match("/static/app.css")
    assert static is not None and static.names == ("wp", "static")
    assert static.bypass is None and not static.bypassed(["wordpress_logged_in_1=a"])
    assert static.query is None


def test_two_rules_of_one_name_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"rules\[1\].name: 'a' names two rules"):
        config({"name": "a", "cache": False}, {"name": "a", "edge_ttl": 5})


def test_a_reload_that_changes_keys_says_so_and_one_that_changes_ttls_keeps_entries() -> None:
    """Decision 0033: query normalisation changes keys, so the domain's old entries are
    made unreachable (cleared) and the message says so; a TTL applies to new fills."""
    before = config({"query_ignore": ["utm_*"], "edge_ttl": "1h"})
    retimed = diff(before, config({"query_ignore": ["utm_*"], "edge_ttl": "2h"}))
    assert retimed.retuned == ("example.com",) and retimed.cleared == ()
    rekeyed = diff(before, config({"query_ignore": ["utm_*", "fbclid"], "edge_ttl": "1h"}))
    assert rekeyed.cleared == ("example.com",)
    # Issue 34 B7: no origin changed, so the line says why the domain was cleared, once.
    assert rekeyed.summary() == (
        "cleared (its rules changed the cache keys) example.com; 0 domains unchanged"
    )
    # Another origin and other keys: re-pointed, which says it all.
    elsewhere = config({"query_ignore": ["fbclid"]}, origin="http://127.0.0.1:9001")
    assert diff(before, elsewhere).summary() == (
        "re-pointed (cleared) example.com; 0 domains unchanged"
    )
    # A rule without query normalisation changes no key, whatever its paths.
    moved = diff(
        config({"paths": ["/a/*"], "cache": False}), config({"paths": ["/b/*"], "cache": False})
    )
    assert moved.retuned == ("example.com",)


_globs = st.lists(st.text(min_size=0, max_size=6), max_size=3)
_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 100_000),
    st.floats(allow_nan=True),
    st.text(max_size=6),
    st.sampled_from(["1h", "30s", "2d", "1w", "5m", "0s", "1.5h", "1y"]),
    _globs,
    st.lists(st.sampled_from(["Cache-Control", "Expires", "Set-Cookie", "Vary", "Age"])),
    st.dictionaries(st.sampled_from(["200", "404", "206", "999", "x"]), st.sampled_from(["1m", 3])),
)
_keys = st.sampled_from(
    [
        "name",
        "paths",
        "bypass_cookies",
        "ignore_client_no_cache",
        "query_ignore",
        "query_only",
        "query_sort",
        "edge_ttl",
        "edge_ttl_by_status",
        "ignore_origin",
        "browser_ttl",
        "stale_while_revalidate",
        "stale_if_error",
        "cache",
        "bogus",
    ]
)
_tables = st.lists(
    st.dictionaries(_keys, _values, max_size=5).map(
        lambda d: {k: v for k, v in d.items() if v is not None}
    ),
    max_size=4,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables=_tables, path=st.text(max_size=12).map(lambda text: "/" + text))
def test_the_loader_never_crashes_on_random_rules(tables: list[dict[str, Any]], path: str) -> None:
    """Any rule table is a ConfigError naming a rules key, or rules that match any path."""
    try:
        loaded = config(*tables)
    except ConfigError as exc:
        assert exc.key.startswith("domains[0].rules")
        assert "\n" not in str(exc)
        return
    rules = loaded.by_name["example.com"].rules
    if rules is not None:
        rules.match(path)
