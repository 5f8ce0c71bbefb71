"""Web cache deception through cache rules (issue 30 items 6 and 9, decision 0042).

The sample config's rules (config/proxy.toml): ``static`` gives ``/static/*``, ``*.css``,
``*.js`` and ``*.woff2`` a day's lifetime whatever the origin says, and ``account`` keeps
``/account/*`` and ``/cart*`` out of the cache. Behind them, a PHP-like origin that routes
leniently: it decodes the path, cuts it at ';', and answers anything under ``/account`` (and
``/account.php/...``, PATH_INFO) with the account page of the session the request carries,
in text/html and with no cache headers.

A victim lured to such a path must never have their page stored and served to the next
client. Three defences each close part of it (core/cache/deception.py); each has its own
test below, then the attack as the issue reproduced it, against the real service.
"""

from __future__ import annotations

import asyncio
import posixpath
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import aiohttp
import pytest
from aiohttp import web
from yarl import URL

from proxy.process.service import Service, running
from tests.conftest import EdgeFactory, EdgeUnderTest, make_config
from tests.polling import until
from tests.security.conftest import Site

STATIC = {
    "name": "static",
    "paths": ["/static/*", "*.css", "*.js", "*.woff2"],
    "edge_ttl": "1d",
}
ACCOUNT = {"name": "account", "paths": ["/account/*", "/cart*"], "cache": False}
VICTIM = {"Cookie": "PHPSESSID=alice-session"}
ALICE = b"<h1>account of alice</h1> card 4111-1111"
LOG_IN = b"<h1>please log in</h1>"


def lenient_route(raw_path: str) -> str:
    """The route a PHP front controller or a lenient framework dispatches to: decoded, cut
    at ';', slashes merged, dot segments resolved, and ``/account.php/anything`` is
    ``/account.php`` (PATH_INFO)."""
    path = unquote(raw_path.partition("?")[0]).split(";")[0]
    path = posixpath.normpath(re.sub("/+", "/", path))
    return "/account" if path.startswith("/account") else path


async def php_site(request: web.Request) -> web.StreamResponse:
    route = lenient_route(request.raw_path)
    if route == "/account":
        mine = "alice" in request.headers.get("Cookie", "")
        return web.Response(body=ALICE if mine else LOG_IN, content_type="text/html")
    if route.startswith("/static/"):
        return web.Response(body=b"body { color: red }", content_type="text/css")
    return web.Response(status=404, text="not found")


def domains(origin: Site, *rules: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"name": "example.com", "origin": origin.url, "read_timeout": 5, "rules": list(rules)}]


async def fetch(service: Service, path: str, headers: dict[str, str] | None = None) -> Any:
    """One GET of ``path`` as sent (no client-side normalisation): (response, body)."""
    async with aiohttp.ClientSession() as session:
        url = URL(service.edge_url + path, encoded=True)
        async with session.get(url, headers={"Host": "example.com", **(headers or {})}) as got:
            return got, await got.read()


@pytest.fixture
async def service(tmp_path: Path, origin: Site, hit_lane: bool) -> AsyncIterator[Service]:
    """`cdn-proxy serve`'s process, with the sample config's static and account rules (the
    hit lane on and off: tests/security/conftest.py)."""
    origin.default = php_site
    edge = {"listen": "127.0.0.1:0", "shutdown_timeout": 5, "hit_lane": hit_lane}
    config = make_config(tmp_path, origin.url, edge=edge, domains=domains(origin, STATIC, ACCOUNT))
    async with running(config) as running_service:
        yield running_service


# -- the attack as issue 30 reproduced it ---------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/account.php/x.css",  # PATH_INFO: the rule matches, the origin runs account.php
        "/account;x.css",  # a path parameter: the origin cuts it, the raw glob matched
        "/%61ccount/x.css",  # an escape: the origin decodes it, cache = false did not
        "/account/x.css",
        "/static/..%2F..%2Faccount.php/x.css",
        "/static/%2e%2e/account/x.css",
        "//account/x.css",
        "/account;jsessionid=1/x.js",
    ],
)
async def test_a_victims_page_is_never_stored_for_another_client(
    service: Service, origin: Site, path: str
) -> None:
    victim, body = await fetch(service, path, VICTIM)
    assert body == ALICE
    assert "stored" not in victim.headers["Cache-Status"]

    _, body = await fetch(service, path)
    assert body == LOG_IN, victim.headers["Cache-Status"]
    assert [seen.target for seen in origin.seen] == [path, path]
    assert (await service.store.stats()).entries == 0


# -- each defence on its own ----------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/%61ccount/x.css",
        "/%61%63%63%6F%75%6E%74/x.css",
        "/static/%2e%2e/account/x.css",
        "/static/%2E%2E/%2e/account/x.css",
        "/static/x/../../account/x.css",
        "//account//x.css",
        "/account;v=2/x.css",
        "/c%61rt",
    ],
)
async def test_rules_match_the_decoded_normalised_path(
    make_edge: EdgeFactory, origin: Site, path: str
) -> None:
    """cache = false on /account/* catches every spelling an origin reads as /account/...,
    even with an answer the other defences would let through (text/css, no Cookie)."""
    origin.reply(path, b"body {}", headers={"Content-Type": "text/css"})
    edge = await make_edge(domains=domains(origin, STATIC, ACCOUNT))
    names = "static,account" if path.endswith(".css") else "account"
    for _ in range(2):
        response, _ = await edge.get(path)
        status = response.headers["Cache-Status"]
        assert status == f'cdn-proxy; fwd=bypass; detail="cache-false; rules={names}"'

    assert origin.count(path) == 2


@pytest.mark.parametrize("path", ["/account;x.css", "/account;.css", "/p;a=b.js"])
async def test_a_path_parameter_does_not_make_a_path_match_an_extension(
    make_edge: EdgeFactory, origin: Site, path: str
) -> None:
    """``/account;x.css`` is ``/account`` to Tomcat, Jetty, Spring and PHP-style routers: no
    ``*.css`` rule applies to it, whatever it answers."""
    origin.reply(path, b"body {}", headers={"Content-Type": "text/css"})
    edge = await make_edge(domains=domains(origin, STATIC))
    for _ in range(2):
        response, _ = await edge.get(path)
        assert "rules=" not in response.headers["Cache-Status"]
        assert "stored" not in response.headers["Cache-Status"]
    assert origin.count(path) == 2
    origin.reply("/x.css;v=1", b"body {}", headers={"Content-Type": "text/css"})
    await edge.get("/x.css;v=1")  # the parameter of the last segment goes too
    response, _ = await edge.get("/x.css;v=1")
    assert response.headers["Cache-Status"].endswith('hit; detail="rules=static"')


async def stored_twice(edge: EdgeUnderTest, origin: Site, path: str, **headers: str) -> bool:
    """Whether the second of two requests with ``headers`` is a hit."""
    await edge.get(path, headers=headers)
    response, _ = await edge.get(path, headers=headers)
    return "hit" in response.headers["Cache-Status"]


async def test_a_rule_lifetime_is_not_lent_to_a_request_with_a_cookie(
    make_edge: EdgeFactory, origin: Site
) -> None:
    """As the heuristic lifetime: an answer to a request with a Cookie, which the origin
    gave no shared lifetime, is likely that user's; ``cache_with_cookies`` says it is not."""
    origin.reply("/static/a.css", b"a {}", headers={"Content-Type": "text/css"})
    origin.reply("/static/b.css", b"b {}", headers={"Content-Type": "text/css"})
    origin.reply(
        "/static/c.css", b"c {}", headers={"Content-Type": "text/css", "Cache-Control": "max-age=9"}
    )
    with_cookies = {**STATIC, "name": "b", "paths": ["/static/b.css"], "cache_with_cookies": True}
    edge = await make_edge(domains=domains(origin, STATIC, with_cookies))

    response, _ = await edge.get("/static/a.css", headers=VICTIM)
    assert response.headers["Cache-Status"].endswith('detail="request-cookie; rules=static"')
    assert not await stored_twice(edge, origin, "/static/a.css", Cookie="_ga=1")
    assert await stored_twice(edge, origin, "/static/a.css")  # no cookie: stored
    _, body = await edge.get("/static/a.css", headers=VICTIM)  # and served to every client
    assert body == b"a {}" and origin.count("/static/a.css") == 4

    assert await stored_twice(edge, origin, "/static/b.css", Cookie="_ga=1")
    # The origin's own max-age=9 shares it: the rule only says for how long.
    assert await stored_twice(edge, origin, "/static/c.css", Cookie="_ga=1")


async def test_authorization_is_never_lent_a_rule_lifetime(
    make_edge: EdgeFactory, origin: Site
) -> None:
    """RFC 9111 §3.5 on the origin's own directives, cache_with_cookies or not."""
    origin.reply("/static/a.css", b"a {}", headers={"Content-Type": "text/css"})
    rule = {**STATIC, "cache_with_cookies": True}
    edge = await make_edge(domains=domains(origin, rule))
    assert not await stored_twice(edge, origin, "/static/a.css", Authorization="Bearer alice")
    assert origin.count("/static/a.css") == 2


@pytest.mark.parametrize(
    ("path", "content_type", "stored"),
    [
        ("/account.php/x.css", "text/html", False),
        ("/account.php/x.css", "text/html; charset=utf-8", False),
        ("/api/me/x.js", "application/json", False),
        ("/static/logo.woff2", "text/html", False),
        ("/static/a.css", "text/css; charset=utf-8", True),
        ("/static/a.js", "text/javascript", True),
        ("/static/a.js", "application/javascript", True),
        ("/static/f.woff2", "font/woff2", True),
        ("/static/a.css", "application/octet-stream", True),  # a download, never shown
        ("/static/page", "text/html", True),  # no extension: nothing to check
        ("/static/page.html", "text/html", True),
    ],
)
async def test_an_extension_rule_checks_the_content_type(
    make_edge: EdgeFactory, origin: Site, path: str, content_type: str, stored: bool
) -> None:
    """Cloudflare's Cache Deception Armor: under a rule's lifetime, a success whose
    Content-Type does not fit the path's extension is not stored."""
    origin.reply(path, b"a {}", headers={"Content-Type": content_type})
    edge = await make_edge(domains=domains(origin, STATIC))
    response, _ = await edge.get(path)
    if not stored:
        assert 'detail="content-type-mismatch; rules=static"' in response.headers["Cache-Status"]
    assert await stored_twice(edge, origin, path) is stored


async def test_an_error_page_under_an_extension_rule_is_still_stored(
    make_edge: EdgeFactory, origin: Site
) -> None:
    """edge_ttl_by_status shields the origin from a missing asset's 404, an HTML page as
    most are: only successes are checked for their type."""
    origin.reply(
        "/static/gone.css", b"<h1>404</h1>", status=404, headers={"Content-Type": "text/html"}
    )
    rule = {**STATIC, "edge_ttl_by_status": {"404": "1m"}}
    edge = await make_edge(domains=domains(origin, rule))
    assert await stored_twice(edge, origin, "/static/gone.css")


# -- cookie names the origin reads differently (issue 30 item 9) ----------------------------


@pytest.mark.parametrize(
    "cookie",
    [
        "session_id=alice",
        "session%5Fid=alice",  # PHP decodes the name
        "session%5fid=alice",
        "session.id=alice",  # PHP reads '.' and ' ' as '_'
        "session id=alice",
        "session+id=alice",
        "SESSION_ID=alice",  # frameworks that ignore case
        "a=1, session_id=alice",  # Rack and SimpleCookie split at ','
        "a=1,session_id=alice",
        "a=1 session_id=alice",  # SimpleCookie also splits at white space
        "_ga=1; Session.Id=alice",
        "PHPSESS%49D=alice",
    ],
)
async def test_a_bypass_cookie_is_found_however_it_is_spelt(
    make_edge: EdgeFactory, origin: Site, cookie: str
) -> None:
    """A request carrying a bypass cookie in any spelling an origin reads as that cookie
    goes to the origin, is never answered from the public entry, and is never stored."""
    served = {"n": 0}

    async def page(request: web.Request) -> web.StreamResponse:
        served["n"] += 1
        who = "alice" if "alice" in request.headers.get("Cookie", "") else "anonymous"
        return web.Response(text=f"{who} {served['n']}")

    origin.route("/page", page)
    rule = {
        "name": "site",
        "edge_ttl": "5m",
        "bypass_cookies": ["session_id", "PHPSESSID"],
        "cache_with_cookies": True,
    }
    edge = await make_edge(domains=domains(origin, rule))
    assert (await edge.get("/page"))[1] == b"anonymous 1"
    assert "hit" in (await edge.get("/page"))[0].headers["Cache-Status"]

    response, body = await edge.get("/page", headers={"Cookie": cookie})
    assert body == b"alice 2"
    assert response.headers["Cache-Status"] == (
        'cdn-proxy; fwd=bypass; detail="bypass-cookie; rules=site"'
    )
    # Its answer was not stored: the public entry still answers everyone else.
    assert (await edge.get("/page", headers={"Cookie": "session_idx=1"}))[1] == b"anonymous 1"
    assert origin.count("/page") == 2


async def test_a_waiter_never_gets_the_victims_page_under_a_rule(
    make_edge: EdgeFactory, origin: Site
) -> None:
    """Request collapsing under a rule's lifetime: the attacker's request joins the victim's
    fill at the origin; the victim's page is not lent the lifetime, so not handed over."""
    release = asyncio.Event()

    async def held(request: web.Request) -> web.StreamResponse:
        await release.wait()
        return await php_site(request)

    origin.default = held
    edge = await make_edge(domains=domains(origin, STATIC, ACCOUNT))
    path = "/account.php/x.css"
    victim = asyncio.create_task(edge.get(path, headers=VICTIM))
    await until(lambda: len(origin.seen) == 1)
    attacker = asyncio.create_task(edge.get(path))
    flight = edge.edge.flights.get(("example.com", 0, path))
    assert flight is not None
    await until(lambda: flight.waiters == 1)
    release.set()

    (_, victim_body), (_, attacker_body) = await asyncio.gather(victim, attacker)
    assert (victim_body, attacker_body) == (ALICE, LOG_IN)
    assert len(origin.seen) == 2
