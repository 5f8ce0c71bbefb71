"""Cache rules per domain (issue 25 §1, decision 0033), every field against a real origin."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import http_sf
import pytest
from aiohttp import web

from tests.conftest import EdgeFactory, EdgeUnderTest, Origin, make_config
from tests.edge.access_support import get, keep_alive_get, lines_of
from tests.nodes import Node, start, write_config


async def with_rules(
    make_edge: EdgeFactory, origin: Origin, *rules: dict[str, Any]
) -> EdgeUnderTest:
    """An edge whose example.com has ``rules``; other.test, on the same origin, has none."""
    return await make_edge(
        domains=[
            {"name": "example.com", "origin": origin.url, "read_timeout": 5, "rules": list(rules)},
            {"name": "other.test", "origin": origin.url, "read_timeout": 5},
        ]
    )


def status_of(response: Any) -> dict[str, object]:
    """The Cache-Status member's parameters (RFC 9211), parsed as RFC 8941 says."""
    parsed: Any = http_sf.parse(response.headers["Cache-Status"].encode(), tltype="list")
    params: dict[str, object] = parsed[-1][1]
    return {name: str(value) if isinstance(value, str) else value for name, value in params.items()}


def is_hit(response: Any) -> bool:
    return status_of(response).get("hit") is True


async def test_edge_ttl_caches_an_origin_that_sends_no_cache_headers(
    make_edge: EdgeFactory, origin: Origin
) -> None:
    """A WordPress-like page with no Cache-Control: stored for edge_ttl, then fetched again;
    the same origin on a domain without rules is never stored (no explicit freshness)."""
    origin.reply("/page", b"anonymous page")
    edge = await with_rules(make_edge, origin, {"name": "pages", "edge_ttl": "1m"})
    first, _ = await edge.get("/page")
    assert status_of(first) == {"fwd": "uri-miss", "stored": True, "detail": "rules=pages"}
    second, body = await edge.get("/page")
    assert body == b"anonymous page" and is_hit(second)
    assert status_of(second)["detail"] == "rules=pages"
    assert origin.count("/page") == 1
    edge.clock.advance(61)
    third, _ = await edge.get("/page")
    assert not is_hit(third) and origin.count("/page") == 2
    await edge.get("/page", host="other.test")
    await edge.get("/page", host="other.test")
    assert origin.count("/page") == 4


async def test_private_is_overridden_only_when_cache_control_is_ignored(
    make_edge: EdgeFactory, origin: Origin
) -> None:
    """RFC 9111 §5.2.2.7: private stays private under an edge_ttl; ignore_origin naming
    Cache-Control is what lets the edge store it."""
    origin.reply("/p", b"x", headers={"Cache-Control": "private, max-age=60"})
    origin.reply("/q", b"y", headers={"Cache-Control": "private, no-store"})
    edge = await with_rules(
        make_edge,
        origin,
        {"name": "ttl", "edge_ttl": "1h"},
        {"name": "ignore", "paths": ["/q"], "ignore_origin": ["Cache-Control"]},
    )
    for _ in range(2):
        response, _ = await edge.get("/p")
        assert status_of(response)["detail"] == "private; rules=ttl"
    assert origin.count("/p") == 2
    await edge.get("/q")
    response, body = await edge.get("/q")
    assert is_hit(response) and body == b"y"
    assert status_of(response)["detail"] == "rules=ttl,ignore"
    assert origin.count("/q") == 1


async def test_set_cookie_is_never_replayed_to_another_client(
    make_edge: EdgeFactory, origin: Origin
) -> None:
    """Security: a response with Set-Cookie is stored only when the rule ignores Set-Cookie,
    and then the stored copy and every hit carry none. Two clients, one cookie: the second
    never sees it."""
    origin.reply("/s", b"page", headers={"Set-Cookie": "sessionid=alice-secret"})
    origin.reply("/t", b"page", headers={"Set-Cookie": "sessionid=alice-secret"})
    edge = await with_rules(
        make_edge,
        origin,
        {"edge_ttl": "1h"},
        {"name": "strip", "paths": ["/s"], "ignore_origin": ["Set-Cookie"]},
    )
    alice, _ = await edge.get("/s")
    assert alice.headers["Set-Cookie"] == "sessionid=alice-secret"  # her own answer
    bob, body = await edge.get("/s")
    assert is_hit(bob) and body == b"page"
    assert "Set-Cookie" not in bob.headers
    stored = edge.store.peek("example.com", "/s")
    assert stored is not None
    assert all(name.lower() != "set-cookie" for name, _ in stored.headers)
    # Without Set-Cookie in ignore_origin, the edge_ttl alone does not store it.
    await edge.get("/t")
    bob, _ = await edge.get("/t")
    assert status_of(bob)["detail"] == "set-cookie; rules=rules[0]"
    assert origin.count("/t") == 2


async def test_a_bypass_cookie_goes_to_the_origin_uncached(
    make_edge: EdgeFactory, origin: Origin
) -> None:
    """bypass_cookies: a logged-in user (a cookie matching a glob) is never served from
    the cache, even on the fast path, and what they get is never stored."""
    served = {"n": 0}

    async def page(request: web.Request) -> web.Response:
        served["n"] += 1
        user = "admin" if "wordpress_logged_in_" in request.headers.get("Cookie", "") else "anon"
        return web.Response(text=f"{user} {served['n']}")

    origin.route("/post", page)
    origin.route("/fresh", page)
    edge = await with_rules(
        make_edge,
        origin,
        {
            "name": "wp",
            "edge_ttl": "1h",
            "bypass_cookies": ["wordpress_logged_in_*", "sessionid"],
            "cache_with_cookies": True,  # _ga does not make a page personal (decision 0042)
        },
    )
    _, anonymous = await edge.get("/post", headers={"Cookie": "_ga=1"})
    assert anonymous == b"anon 1"
    hit, body = await edge.get("/post")
    assert is_hit(hit) and body == b"anon 1"
    logged_in = {"Cookie": "_ga=1; wordpress_logged_in_abc=token"}
    response, body = await edge.get("/post", headers=logged_in)
    assert body == b"admin 2"
    assert status_of(response) == {"fwd": "bypass", "detail": "bypass-cookie; rules=wp"}
    _, body = await edge.get("/post", headers={"Cookie": "sessionid=x"})
    assert body == b"anon 3"  # the origin answered; and nothing of it was stored:
    assert (await edge.get("/post"))[1] == b"anon 1"
    # A logged-in first visit is never stored for the next anonymous one.
    _, body = await edge.get("/fresh", headers=logged_in)
    assert body == b"admin 4"
    response, body = await edge.get("/fresh")
    assert body == b"anon 5" and not is_hit(response)


async def test_an_empty_bypass_cookies_lifts_a_catch_all_for_static_files(
    make_edge: EdgeFactory, origin: Origin
) -> None:
    """Issue 34 B6: a later rule's ``bypass_cookies = []`` lifts the catch-all's, so a
    logged-in user's stylesheet is a hit; their pages still go to the origin."""
    origin.reply("/static/app.css", b"css", headers={"Cache-Control": "max-age=600"})
    origin.reply("/post", b"post", headers={"Cache-Control": "max-age=600"})
    edge = await with_rules(
        make_edge,
        origin,
        {"name": "wp", "bypass_cookies": ["wordpress_logged_in_*"]},
        {"name": "static", "paths": ["/static/*"], "bypass_cookies": []},
    )
    logged_in = {"Cookie": "wordpress_logged_in_abc=alice"}
    for _ in range(2):
        await edge.get("/static/app.css", headers=logged_in)
        await edge.get("/post", headers=logged_in)
    response, body = await edge.get("/static/app.css", headers=logged_in)
    assert is_hit(response) and body == b"css"
    assert origin.count("/static/app.css") == 1
    response, _ = await edge.get("/post", headers=logged_in)
    assert status_of(response)["fwd"] == "bypass"
    assert origin.count("/post") == 3


async def test_cache_false_is_never_stored_nor_served(
    make_edge: EdgeFactory, origin: Origin
) -> None:
    """cache = false, after a catch-all that would store it: the later rule wins."""
    origin.reply("/account/me", b"me", headers={"Cache-Control": "max-age=600"})
    origin.reply("/cart", b"cart", headers={"Cache-Control": "max-age=600"})
    edge = await with_rules(
        make_edge,
        origin,
        {"name": "all", "edge_ttl": "1h"},
        {"name": "private", "paths": ["/account/*", "/cart*"], "cache": False},
    )
    for target in ("/account/me", "/cart", "/account/me", "/cart"):
        response, _ = await edge.get(target)
        assert status_of(response) == {"fwd": "bypass", "detail": "cache-false; rules=all,private"}
    assert origin.count("/account/me") == 2 and origin.count("/cart") == 2


async def test_query_ignore_only_and_sort_make_one_entry_at_the_origin(
    make_edge: EdgeFactory, origin: Origin
) -> None:
    """query_ignore drops tracking parameters from the key and the origin request;
    query_only keeps only the named ones; query_sort orders them. One origin request each."""
    for target in ("/p?b=1", "/sorted?a=2&b=1", "/only?page=2"):
        origin.reply(target, target.encode(), headers={"Cache-Control": "max-age=60"})
    edge = await with_rules(
        make_edge,
        origin,
        {"name": "utm", "query_ignore": ["utm_*", "fbclid", "gclid"], "query_sort": True},
        {"name": "only", "paths": ["/only"], "query_only": ["page"]},
    )
    for target in ("/p?utm_source=a&b=1", "/p?b=1&utm_medium=x&fbclid=9", "/p?gclid=1&b=1"):
        _, body = await edge.get(target)
        assert body == b"/p?b=1"
    for target in ("/sorted?b=1&a=2", "/sorted?a=2&b=1", "/sorted?utm_x=1&a=2&b=1"):
        _, body = await edge.get(target)
        assert body == b"/sorted?a=2&b=1"
    for target in ("/only?page=2&x=1", "/only?y=3&page=2"):
        response, body = await edge.get(target)
        assert body == b"/only?page=2"
    assert status_of(response)["detail"] == "rules=utm,only"
    assert [seen.target for seen in origin.seen] == ["/p?b=1", "/sorted?a=2&b=1", "/only?page=2"]


async def test_browser_ttl_is_the_clients_max_age_and_the_entry_keeps_its_own(
    make_edge: EdgeFactory, origin: Origin
) -> None:
    """browser_ttl replaces the Cache-Control clients get, on the miss and on hits; the
    stored response keeps the origin's lifetime (60 s here, not the browser's hour)."""
    origin.reply("/static/app.css", b"body{}", headers={"Cache-Control": "public, max-age=60"})
    edge = await with_rules(
        make_edge, origin, {"name": "css", "paths": ["*.css"], "browser_ttl": "1h"}
    )
    miss, _ = await edge.get("/static/app.css")
    hit, _ = await edge.get("/static/app.css")
    assert miss.headers.getall("Cache-Control") == ["max-age=3600"]
    assert hit.headers.getall("Cache-Control") == ["max-age=3600"] and is_hit(hit)
    stored = edge.store.peek("example.com", "/static/app.css")
    assert stored is not None and ("Cache-Control", "public, max-age=60") in stored.headers
    edge.clock.advance(61)
    stale, _ = await edge.get("/static/app.css")
    assert not is_hit(stale) and origin.count("/static/app.css") == 2


async def test_ignore_client_no_cache_makes_a_browser_reload_a_hit(
    make_edge: EdgeFactory, origin: Origin
) -> None:
    """A reload sends Cache-Control: max-age=0 (or no-cache, or Pragma). Without the rule
    it is forwarded, labelled fwd=request (RFC 9211 §2.2); with it, a hit."""
    origin.reply("/r", b"x", headers={"Cache-Control": "max-age=600"})
    edge = await with_rules(make_edge, origin, {"name": "reloads", "ignore_client_no_cache": True})
    await edge.get("/r")
    for asked in (
        {"Cache-Control": "max-age=0"},
        {"Cache-Control": "no-cache"},
        {"Pragma": "no-cache"},
    ):
        response, _ = await edge.get("/r", headers=asked)
        assert is_hit(response), asked
    assert origin.count("/r") == 1
    await edge.get("/r", host="other.test")
    response, _ = await edge.get("/r", host="other.test", headers={"Cache-Control": "max-age=0"})
    assert status_of(response)["fwd"] == "request"
    assert origin.count("/r") == 3


async def test_edge_ttl_by_status_stores_a_404(make_edge: EdgeFactory, origin: Origin) -> None:
    """A 404 with no cache headers: edge_ttl alone leaves it to the origin (not stored);
    edge_ttl_by_status names it, and it is kept for that long."""
    edge = await with_rules(
        make_edge,
        origin,
        {"name": "ttl", "edge_ttl": "1h"},
        {"name": "missing", "paths": ["/gone/*"], "edge_ttl_by_status": {"404": "1m"}},
    )
    for _ in range(2):
        await edge.get("/nothing")
    assert origin.count("/nothing") == 2
    await edge.get("/gone/x")
    response, _ = await edge.get("/gone/x")
    assert response.status == 404 and is_hit(response)
    edge.clock.advance(61)
    await edge.get("/gone/x")
    assert origin.count("/gone/x") == 2


async def test_authorization_is_never_served_from_an_entry_a_rule_stored(
    make_edge: EdgeFactory, origin: Origin
) -> None:
    """RFC 9111 §3.5: the rule stored the anonymous page; a request with Authorization
    still goes to the origin, and its answer is not stored."""
    served = {"n": 0}

    async def page(request: web.Request) -> web.Response:
        served["n"] += 1
        return web.Response(text=f"{request.headers.get('Authorization', 'anon')} {served['n']}")

    origin.route("/doc", page)
    edge = await with_rules(make_edge, origin, {"name": "ttl", "edge_ttl": "1h"})
    assert (await edge.get("/doc"))[1] == b"anon 1"
    assert (await edge.get("/doc"))[1] == b"anon 1"
    response, body = await edge.get("/doc", headers={"Authorization": "Bearer t"})
    assert body == b"Bearer t 2"
    assert status_of(response)["detail"] == "authorization; rules=ttl"
    assert (await edge.get("/doc"))[1] == b"anon 1"


async def test_stale_overrides_apply_unless_the_origin_forbids_stale(
    make_edge: EdgeFactory, origin: Origin
) -> None:
    """stale_while_revalidate from the rule: a stale entry answers at once while it is
    revalidated; not for one whose origin said must-revalidate."""
    origin.reply("/a", b"a", headers={"Cache-Control": "max-age=10"})
    origin.reply("/b", b"b", headers={"Cache-Control": "max-age=10, must-revalidate"})
    edge = await with_rules(make_edge, origin, {"name": "swr", "stale_while_revalidate": "1m"})
    await edge.get("/a")
    await edge.get("/b")
    edge.clock.advance(20)
    response, _ = await edge.get("/a")
    assert status_of(response) == {"hit": True, "detail": "stale-while-revalidate; rules=swr"}
    response, _ = await edge.get("/b")
    assert not is_hit(response) and status_of(response)["fwd"] == "stale"


@pytest.mark.slow
async def test_the_json_access_log_names_the_rules_of_misses_and_fast_hits(
    tmp_path: Path, origin: Origin, nodes: list[Node]
) -> None:
    """Decision 0033: the access log can show the rules that applied (JSON's "rules"),
    for a fast-path hit too; none for a request no rule matched."""
    origin.reply("/page", b"p")
    origin.reply("/other", b"o", headers={"Cache-Control": "max-age=60"})
    config = write_config(
        tmp_path,
        origin.url,
        edge='access_log = "access.log"\naccess_log_format = "json"',
        extra='[[domains.rules]]\nname = "pages"\npaths = ["/page"]\nedge_ttl = "1m"\n',
    )
    node = await start(nodes, config)
    await get(node.edge + "/page")
    await keep_alive_get(node.edge, "/page", 1)  # the fast path
    await get(node.edge + "/other")
    lines = [json.loads(line) for line in await lines_of(tmp_path / "access.log", 3)]
    assert [(line["cache"], line["rules"]) for line in lines] == [
        ("MISS", "pages"),
        ("HIT", "pages"),
        ("MISS", None),
    ]


async def test_a_reload_applies_new_rules(
    make_edge: EdgeFactory, origin: Origin, tmp_path: Path
) -> None:
    """Edge.reconfigure (SIGHUP): the new rules apply to the next request; a TTL change
    applies to new fills, an entry stored before keeps its own lifetime."""
    origin.reply("/a", b"a")
    origin.reply("/b", b"b")
    edge = await with_rules(make_edge, origin, {"name": "short", "edge_ttl": "10s"})
    await edge.get("/a")
    new = make_config(
        tmp_path,
        origin.url,
        domains=[
            {
                "name": "example.com",
                "origin": origin.url,
                "rules": [{"name": "long", "edge_ttl": "1h"}, {"paths": ["/c"], "cache": False}],
            }
        ],
    )
    edge.edge.reconfigure(new)
    await edge.get("/b")
    edge.clock.advance(11)
    response, _ = await edge.get("/b")
    assert is_hit(response) and status_of(response)["detail"] == "rules=long"
    response, _ = await edge.get("/a")  # stored under the old 10 s
    assert not is_hit(response) and status_of(response)["detail"] == "rules=long"
    origin.reply("/c", b"c", headers={"Cache-Control": "max-age=60"})
    response, _ = await edge.get("/c")
    assert status_of(response)["detail"] == "cache-false; rules=long,rules[1]"


async def test_the_readmes_wordpress_example(make_edge: EdgeFactory, origin: Origin) -> None:
    """Issue 25 "Done when" 1: a WordPress-like origin (no cache headers, session cookies,
    utm_ links) behind the README's rules: hits for anonymous pages, whatever the campaign
    link; never for a logged-in user; never for wp-admin; a page setting a cookie unstored."""
    served = {"n": 0}

    async def wordpress(request: web.Request) -> web.Response:
        served["n"] += 1
        logged_in = "wordpress_logged_in_" in request.headers.get("Cookie", "")
        headers = {"Set-Cookie": "comment_author_x=1"} if request.path == "/form/" else {}
        who = "admin bar" if logged_in else "anonymous"
        return web.Response(text=f"{who} {served['n']}", headers=headers)

    origin.default = wordpress
    edge = await with_rules(
        make_edge,
        origin,
        {
            "name": "wp",
            "bypass_cookies": ["wordpress_logged_in_*", "wp-postpass_*", "comment_author_*"],
            "cache_with_cookies": True,  # other cookies (_ga) are not a session's
            "query_ignore": ["utm_*", "fbclid", "gclid"],
            "query_sort": True,
            "edge_ttl": "5m",
            "ignore_client_no_cache": True,
        },
        {"name": "assets", "paths": ["/wp-content/*", "/wp-includes/*"], "edge_ttl": "1d"},
        {"name": "admin", "paths": ["/wp-admin/*", "/wp-login.php*"], "cache": False},
    )
    for target in ("/hello/?utm_source=news", "/hello/", "/hello/?fbclid=1&utm_medium=x"):
        _, body = await edge.get(target, headers={"Cookie": "_ga=GA1"})
        assert body == b"anonymous 1"
    admin = {"Cookie": "wordpress_logged_in_abc=alice"}
    for _ in range(2):
        response, body = await edge.get("/hello/", headers=admin)
        assert body.startswith(b"admin bar") and not is_hit(response)
    assert (await edge.get("/hello/", headers={"Cache-Control": "max-age=0"}))[1] == b"anonymous 1"
    await edge.get("/wp-admin/edit.php")
    response, _ = await edge.get("/wp-admin/edit.php")
    assert status_of(response)["fwd"] == "bypass"
    await edge.get("/form/")
    response, _ = await edge.get("/form/")
    assert "Set-Cookie" in response.headers and not is_hit(response)
    assert [seen.target for seen in origin.seen].count("/hello/") == 3


@pytest.mark.slow
async def test_rules_apply_to_every_compressed_copy(make_edge: EdgeFactory, origin: Origin) -> None:
    """With edge compression (decision 0035), a page with no cache headers is stored by the
    rule's edge_ttl once per coding; each client's copy is a hit naming the rule."""
    origin.reply("/page", b"hello world " * 200, headers={"Content-Type": "text/html"})
    edge = await make_edge(
        domains=[
            {
                "name": "example.com",
                "origin": origin.url,
                "compress": ["gzip"],
                "rules": [{"name": "pages", "edge_ttl": "1m"}],
            }
        ]
    )
    first, _ = await edge.get("/page", headers={"Accept-Encoding": "gzip"})
    assert status_of(first)["detail"] == "rules=pages" and status_of(first)["stored"] is True
    for coding in ("gzip", "identity"):
        response, _ = await edge.get("/page", headers={"Accept-Encoding": coding})
        assert is_hit(response) and status_of(response)["detail"] == "rules=pages"
        assert response.headers.get("Content-Encoding", "identity") == coding
    assert origin.count("/page") == 1
