"""POST /api/v1/cdn/trace against a real origin and the real edge sharing one store (issue 25
§3, decision 0038): for each case the next real request does what the trace said, and a
trace changes nothing (the origin's request count, /metrics traffic, the store)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from proxy.api.app import create_api_app
from proxy.cli.trace import describe
from proxy.core.auth.tokens import Scope
from proxy.process.service import Service, running
from proxy.state.async_state import AsyncState
from proxy.store.base import LocalPurger
from tests.api.support import START, AiohttpClient
from tests.conftest import EdgeFactory, EdgeUnderTest, Origin, make_config
from tests.edge.origins_support import Refusing
from tests.edge.test_cache_rules import is_hit

RULES: list[dict[str, Any]] = [
    {"name": "site", "query_ignore": ["utm_*"], "query_sort": True, "bypass_cookies": ["sess*"]},
    {"name": "static", "paths": ["/static/*"], "edge_ttl": "1h"},
    {"name": "account", "paths": ["/account/*"], "cache": False},
]


@dataclass
class Traced:
    edge: EdgeUnderTest
    client: Any
    token: str
    other: str  # a token scoped to other.test only

    async def trace(self, url: str, token: str | None = None, **body: Any) -> tuple[int, Any]:
        response = await self.client.post(
            "/api/v1/cdn/trace",
            data=json.dumps({"url": url, **body}),
            headers={
                "Authorization": f"Bearer {token or self.token}",
                "Content-Type": "application/json",
            },
        )
        return response.status, await response.json(content_type=None)


@asynccontextmanager
async def tracing(
    tmp_path: Path,
    make_edge: EdgeFactory,
    aiohttp_client: AiohttpClient,
    domains: list[dict[str, Any]],
) -> AsyncIterator[Traced]:
    """An edge for ``domains`` and the API in front of its store, with a token for every
    domain and one scoped to other.test."""
    edge = await make_edge(domains=domains)
    config = make_config(tmp_path, str(domains[0]["origin"]), domains=domains)
    state = await AsyncState.open(config.api_role()[1].path, audit_max_rows=100)
    try:
        app = create_api_app(
            config=config,
            state=state,
            purger=LocalPurger(edge.store),
            clock=edge.clock,
            telemetry=edge.telemetry,
            inspect=edge.store.inspect,
        )
        client = await aiohttp_client(app)
        token = await state.create_token("ops", Scope.everything(), START)
        other = await state.create_token("other", Scope(False, frozenset({"other.test"})), START)
        yield Traced(edge, client, token, other)
    finally:
        await state.close()


@pytest.fixture
async def traced(
    tmp_path: Path, origin: Origin, make_edge: EdgeFactory, aiohttp_client: AiohttpClient
) -> AsyncIterator[Traced]:
    domains = [
        {"name": "example.com", "origin": origin.url, "read_timeout": 5, "rules": RULES},
        {"name": "other.test", "origin": origin.url, "read_timeout": 5},
    ]
    async with tracing(tmp_path, make_edge, aiohttp_client, domains) as traced:
        yield traced


async def traffic(t: Traced) -> list[str]:
    response = await t.client.get("/metrics")
    text = await response.text()
    return [line for line in text.splitlines() if line.startswith("cdn_proxy_requests")]


async def test_a_stored_object_traces_as_a_hit_and_the_next_request_is_one(
    traced: Traced, origin: Origin
) -> None:
    origin.reply("/static/a.css", b"css")  # no cache headers: stored by the rule's edge_ttl
    status, before = await traced.trace("http://example.com/static/a.css")
    assert status == 200, before
    assert before["outcome"] == "miss" and before["applied"] == ["site", "static"]
    await traced.edge.get("/static/a.css")
    counted, seen = origin.count("/static/a.css"), await traffic(traced)
    assert any(line.endswith(" 1.0") for line in seen), seen  # the one request is counted
    _, after = await traced.trace("http://example.com/static/a.css")
    assert after["outcome"] == "hit"
    assert after["entry"]["lifetime_source"] == "rule"
    assert after["entry"]["freshness_lifetime"] == 3600.0
    rows = {row["name"]: row for row in after["rules"]}
    assert not rows["account"]["matched"] and "/account/*" in rows["account"]["why"]
    assert origin.count("/static/a.css") == counted and await traffic(traced) == seen
    response, _ = await traced.edge.get("/static/a.css")
    assert is_hit(response) and origin.count("/static/a.css") == counted


async def test_a_rule_bypass_and_a_cookie_bypass_agree_with_the_next_request(
    traced: Traced, origin: Origin
) -> None:
    origin.reply("/account/me", b"me", headers={"Cache-Control": "max-age=60"})
    origin.reply("/page", b"page", headers={"Cache-Control": "max-age=60"})
    await traced.edge.get("/page")
    _, account = await traced.trace("http://example.com/account/me")
    assert account["outcome"] == "bypass" and "cache = false" in account["why"]
    _, cookie = await traced.trace("http://example.com/page", headers={"Cookie": "a=1; session=42"})
    assert cookie["outcome"] == "bypass" and "bypass cookie" in cookie["why"]
    for _ in range(2):
        response, _ = await traced.edge.get("/account/me")
        assert not is_hit(response)
    assert origin.count("/account/me") == 2
    response, _ = await traced.edge.get("/page", headers={"Cookie": "a=1; session=42"})
    assert not is_hit(response) and origin.count("/page") == 2


async def test_a_query_normalised_key_traces_as_the_entry_it_maps_to(
    traced: Traced, origin: Origin
) -> None:
    origin.reply("/p?a=1&b=2", b"p", headers={"Cache-Control": "max-age=60"})
    await traced.edge.get("/p?b=2&a=1")
    _, answer = await traced.trace("http://example.com/p?utm_source=x&b=2&a=1")
    assert answer["key"] == "/p?a=1&b=2" and answer["outcome"] == "hit"
    response, _ = await traced.edge.get("/p?utm_source=x&b=2&a=1")
    assert is_hit(response) and origin.count("/p?a=1&b=2") == 1


async def test_a_purged_entry_traces_as_a_miss_naming_the_purge(
    traced: Traced, origin: Origin
) -> None:
    origin.reply("/q", b"q", headers={"Cache-Control": "max-age=60"})
    await traced.edge.get("/q")
    response = await traced.client.post(
        "/api/v1/cdn/purge",
        data=json.dumps({"domain": "example.com", "urls": ["/q"]}),
        headers={"Authorization": f"Bearer {traced.token}", "Content-Type": "application/json"},
    )
    assert response.status == 200
    _, answer = await traced.trace("http://example.com/q")
    assert answer["outcome"] == "miss"
    assert answer["store"]["purges"] == [{"kind": "url", "items": ["/q"], "soft": False}]
    response, _ = await traced.edge.get("/q")
    assert not is_hit(response) and origin.count("/q") == 2


async def test_fetch_asks_the_origin_once_and_stores_nothing(
    traced: Traced, origin: Origin
) -> None:
    origin.reply("/c", b"c", headers={"Cache-Control": "max-age=60", "Set-Cookie": "s=1"})
    _, answer = await traced.trace("http://example.com/c", fetch=True)
    assert answer["fetched"] == {"storable": False, "why_not": "set-cookie"}
    assert origin.count("/c") == 1
    _, again = await traced.trace("http://example.com/c")
    assert again["outcome"] == "miss"


async def test_a_fetch_sends_the_head_a_fill_sends(traced: Traced, origin: Origin) -> None:
    """Issue 30, hole 7: the fetch's head is built as every origin request's is
    (``headers.to_origin``): the trace's fields are a client's, so forwarding claims and
    framing are dropped, and the proxy's own Via and X-Forwarded-* are set. A fill of the
    same URL sends the same fields."""
    origin.reply("/h", b"h", headers={"Cache-Control": "max-age=60"})
    claims = {
        "X-Forwarded-User": "admin",
        "Forwarded": "for=10.0.0.1",
        "X-Real-IP": "10.0.0.1",
        "Content-Length": "5",
        "Transfer-Encoding": "chunked",
        "Accept": "text/html",
    }
    status, _ = await traced.trace("http://example.com/h", headers=claims, fetch=True)
    assert status == 200
    framing = ("Content-Length", "Transfer-Encoding")  # a real client's would frame a body
    await traced.edge.get("/h", headers={k: v for k, v in claims.items() if k not in framing})
    fetch, fill = (seen for seen in origin.seen if seen.target == "/h")
    for seen in (fetch, fill):
        names = {name.lower() for name in seen.headers}
        assert not names & {"x-forwarded-user", "forwarded", "x-real-ip", "transfer-encoding"}
        assert "content-length" not in names and seen.body == b""
        assert seen.headers["Accept"] == "text/html"
        assert seen.headers["Via"] == "1.1 cdn-proxy"
        assert seen.headers["X-Forwarded-Host"] == "example.com"
    assert sorted(name.lower() for name in fetch.headers if name.lower() != "x-forwarded-for") == (
        sorted(name.lower() for name in fill.headers if name.lower() != "x-forwarded-for")
    )


async def test_a_fetch_reads_only_the_answers_head(traced: Traced, origin: Origin) -> None:
    """Issue 32, item 6: the fetch assesses the answer's head and never reads its body, so
    an endless (or 150 MB) object costs the process nothing and the trace answers at once."""
    left = asyncio.Event()

    async def endless(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Cache-Control": "max-age=60"})
        await response.prepare(request)
        try:
            while True:
                await response.write(b"x" * 65536)
        except ConnectionError:
            return response
        finally:  # the edge closed the connection: a write failed, or the handler was cancelled
            left.set()

    origin.route("/endless", endless)
    status, answer = await traced.trace("http://example.com/endless", fetch=True)
    assert status == 200 and answer["fetched"]["storable"] is True
    await asyncio.wait_for(left.wait(), 5)


async def test_scope_and_bad_input(traced: Traced) -> None:
    status, problem = await traced.trace("http://example.com/", token=traced.other)
    assert status == 403 and "trace" in problem["detail"]
    status, _ = await traced.trace("http://other.test/", token=traced.other)
    assert status == 200
    for body in ({"url": "ftp://example.com/"}, {"url": 3}, {"url": "http://example.com:99999/"}):
        status, problem = await traced.trace(**body)
        assert status == 400 and "'url'" in problem["detail"], problem
    status, problem = await traced.trace("http://example.com/", headers={"a": 1})
    assert status == 400 and "'headers'" in problem["detail"]
    status, problem = await traced.trace("http://unknown.test/")
    assert status == 404


async def run_cli(*args: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "proxy",
        "trace",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


@pytest.mark.slow
async def test_the_cli_prints_the_trace_and_its_json(traced: Traced, origin: Origin) -> None:
    origin.reply("/p", b"p", headers={"Cache-Control": "max-age=60"})
    await traced.edge.get("/p")
    api = str(traced.client.make_url("")).rstrip("/")
    code, out, err = await run_cli(
        "http://example.com/p?utm_medium=y", "--api", api, "--token", traced.token
    )
    assert code == 0, err
    assert out.splitlines()[0] == "GET http://example.com/p?utm_medium=y"  # the scheme shown
    assert "outcome: hit (stored and fresh)" in out
    assert "cache key: /p" in out and "lifetime 60.0s from origin" in out
    assert "rule account: skipped: '/p' matches none of its paths ('/account/*')" in out
    code, out, _ = await run_cli(
        "http://example.com/p",
        "-H",
        "Cookie: session=1",
        "--api",
        api,
        "--token",
        traced.token,
        "--json",
    )
    assert code == 0 and json.loads(out)["outcome"] == "bypass"
    code, _, err = await run_cli("http://example.com/p", "--api", api, "--token", traced.other)
    assert code == 1 and "403" in err and "may not trace 'example.com'" in err
    code, _, err = await run_cli("http://example.com/p", "-H", "bad", "--api", api, "--token", "t")
    assert code == 2 and "Name: value" in err
    assert origin.count("/p") == 1


async def service_trace(
    http: aiohttp.ClientSession, service: Service, token: str, url: str
) -> dict[str, Any]:
    """The running service's trace of ``url``."""
    async with http.post(
        service.api_url + "/api/v1/cdn/trace",
        json={"url": url},
        headers={"Authorization": f"Bearer {token}"},
    ) as response:
        assert response.status == 200, await response.text()
        answer: dict[str, Any] = await response.json()
        return answer


async def test_the_running_service_traces_its_own_store_and_origin_health(
    tmp_path: Path, origin: Origin
) -> None:
    """The whole process: the API reads the edge's store (a hit before the edge says so) and
    the edge's view of the origin server."""
    async with (
        running(make_config(tmp_path, origin.url)) as service,
        aiohttp.ClientSession() as http,
    ):
        token = await service.state.create_token("ops", Scope.everything(), START)
        origin.reply("/page", b"v1", headers={"Cache-Control": "max-age=60"})
        host = {"Host": "example.com"}
        async with http.get(service.edge_url + "/page", headers=host) as response:
            assert "stored" in response.headers["Cache-Status"]
        answer = await service_trace(http, service, token, "http://example.com/page")
        assert answer["outcome"] == "hit", answer
        assert answer["origin"]["candidates"] == [origin.url]
        async with http.get(service.edge_url + "/page", headers=host) as response:
            assert response.headers["Cache-Status"].startswith("cdn-proxy; hit")
        assert origin.count("/page") == 1


async def test_the_running_service_traces_why_a_refused_key_holds_nothing(
    tmp_path: Path, origin: Origin
) -> None:
    """Issue 34 §3: without ``fetch``, a trace of an object refused as ``private`` said only
    "0 variants". The edge remembers its refusals (hit-for-miss), and the trace names it."""
    async with (
        running(make_config(tmp_path, origin.url)) as service,
        aiohttp.ClientSession() as http,
    ):
        token = await service.state.create_token("ops", Scope.everything(), START)
        origin.reply("/me", b"yours", headers={"Cache-Control": "private"})
        async with http.get(service.edge_url + "/me", headers={"Host": "example.com"}) as got:
            assert "private" in got.headers["Cache-Status"]
        answer = await service_trace(http, service, token, "http://example.com/me")
        assert answer["scheme"] == "http", answer
        assert answer["store"]["variants"] == 0, answer
        refused = answer["store"]["refused"]
        assert (refused["why_not"], refused["status"]) == ("private", 200), answer


async def test_bad_fields_are_a_400_and_a_fetch_names_the_rule_lifetime(
    traced: Traced, origin: Origin
) -> None:
    for fields in ({"Bad Name": "x"}, {"X": "a\x00b"}, {"": "x"}):
        status, problem = await traced.trace("http://example.com/f", headers=fields, fetch=True)
        assert status == 400 and "'headers'" in problem["detail"], problem
    origin.reply("/static/f", b"f")
    status, answer = await traced.trace("http://example.com/static/f", fetch=True)
    assert status == 200
    assert answer["fetched"]["lifetime_source"] == "rule"
    assert answer["fetched"]["freshness_lifetime"] == 3600.0
    assert origin.count("/f") == 0 and origin.count("/static/f") == 1


async def test_a_fetch_from_an_unreachable_origin_is_worded_as_the_edge_words_it(
    tmp_path: Path, make_edge: EdgeFactory, aiohttp_client: AiohttpClient
) -> None:
    """Not a client library's class name ("ClientConnectorError"): what the edge's own log
    and 502 say."""
    dead = Refusing()
    domains = [{"name": "example.com", "origin": dead.url, "read_timeout": 5}]
    async with tracing(tmp_path, make_edge, aiohttp_client, domains) as traced:
        status, answer = await traced.trace("http://example.com/x", fetch=True)
    assert status == 200
    why = answer["fetched"]["why_not"]
    assert why.startswith(f"origin failed: {dead.url}: origin unreachable ("), why
    assert "Client" not in why


# Accept-Encoding as browsers and curl send it (Chrome and Firefox, Safari, curl --compressed,
# a client asking for gzip only, and one asking for none).
BROWSER_CODINGS = [
    "gzip, deflate, br, zstd",
    "gzip, deflate, br",
    "deflate, gzip, br, zstd",
    "gzip",
    "identity",
]


@pytest.mark.slow
@pytest.mark.parametrize("compress", [["br", "gzip"], []])
async def test_the_trace_reads_accept_encoding_as_the_edge_does(
    tmp_path: Path,
    origin: Origin,
    make_edge: EdgeFactory,
    aiohttp_client: AiohttpClient,
    compress: list[str],
) -> None:
    """Issue 34 B2: on a domain with ``compress`` the trace said ``miss (vary-miss)`` for
    what the next request got as a hit: it matched the raw Accept-Encoding against the
    stored variants, which the edge keys by the one coding it reduces it to. For every
    Accept-Encoding a browser or curl sends, the trace agrees with the next request."""
    page = b"<html>" + b"a page worth compressing " * 40 + b"</html>"
    origin.reply(
        "/page", page, headers={"Cache-Control": "max-age=600", "Content-Type": "text/html"}
    )
    domains = [{"name": "example.com", "origin": origin.url, "compress": compress}]
    async with tracing(tmp_path, make_edge, aiohttp_client, domains) as traced:
        for coding in BROWSER_CODINGS:
            await traced.edge.get("/page", headers={"Accept-Encoding": coding})
            status, answer = await traced.trace(
                "http://example.com/page", headers={"Accept-Encoding": coding}
            )
            assert status == 200, answer
            response, _ = await traced.edge.get("/page", headers={"Accept-Encoding": coding})
            assert is_hit(response), (coding, response.headers.get("Cache-Status"))
            assert (answer["outcome"], answer["why"]) == ("hit", "stored and fresh"), coding


def test_the_cli_names_recent_purges_of_the_url_not_of_the_stored_copy() -> None:
    """The new-operator trial (issue 34): a hit filled after a prefix purge printed
    ``purged by: prefix ['/assets/']``, which reads as if the stored copy were purged. The
    purges listed are the recent ones that cover the URL; a copy stored after them answers."""
    store = {
        "variants": 1,
        "generation": 0,
        "purge_number": 3,
        "purges": [{"kind": "prefix", "items": ["/assets/", "/img/"], "soft": True}],
    }
    answer = {"method": "GET", "scheme": "http", "domain": "example.com", "target": "/a"}
    lines = describe({**answer, "outcome": "hit", "store": store}).splitlines()
    assert "  recent purge of this URL: soft prefix /assets/ /img/" in lines, lines
    assert not any("purged by" in line for line in lines), lines
