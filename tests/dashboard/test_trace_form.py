"""The Domains page's Trace form against a real origin and the real edge sharing one store
(issue 25 §3): a stored object traces as a hit, a bypassed one names its reason, the origin's
answer is assessed with "fetch from the origin"; bad input is a 400 with the form again, a
post without the session's CSRF token is refused, and what was typed is echoed escaped."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from proxy.api.app import create_api_app
from proxy.state.admins import hash_password
from proxy.state.async_state import AsyncState
from proxy.store.base import LocalPurger
from tests.conftest import EdgeFactory, EdgeUnderTest, Origin, make_config
from tests.dashboard.support import ADMIN, CHEAP, PASSWORD, START, AiohttpClient, Page
from tests.edge.test_cache_rules import is_hit

TRACE = "/dashboard/domains/trace"
RULES: list[dict[str, Any]] = [
    {"name": "site", "query_ignore": ["utm_*"], "bypass_cookies": ["sess*"]},
    {"name": "static", "paths": ["/static/*"], "edge_ttl": "1h"},
    {"name": "account", "paths": ["/account/*"], "cache": False},
]


@dataclass
class Traced:
    """The signed-in dashboard's client (its session cookie) and the edge behind it."""

    client: TestClient[web.Request, web.Application]
    edge: EdgeUnderTest

    async def get(self, path: str) -> Page:
        async with self.client.get(path, allow_redirects=False) as response:
            return Page(response.status, response.headers.copy(), await response.text())

    async def post(self, path: str, data: dict[str, str]) -> Page:
        async with self.client.post(path, data=data, allow_redirects=False) as response:
            return Page(response.status, response.headers.copy(), await response.text())

    async def csrf(self) -> str:
        return (await self.get("/dashboard/domains")).csrf

    async def trace(self, url: str, headers: str = "", *, fetch: bool = False) -> Page:
        fields = {"url": url, "headers": headers, **({"fetch": "1"} if fetch else {})}
        return await self.post(TRACE, {"csrf": await self.csrf(), **fields})


@pytest.fixture
async def traced(
    tmp_path: Path, origin: Origin, make_edge: EdgeFactory, aiohttp_client: AiohttpClient
) -> AsyncIterator[Traced]:
    """The API app with its dashboard, its trace reading the edge's store; alice signed in."""
    domains = [{"name": "example.com", "origin": origin.url, "read_timeout": 5, "rules": RULES}]
    edge = await make_edge(domains=domains)
    config = make_config(tmp_path, origin.url, domains=domains)
    state = await AsyncState.open(config.api_role()[1].path)
    app = create_api_app(
        config=config,
        state=state,
        purger=LocalPurger(edge.store),
        clock=edge.clock,
        telemetry=edge.telemetry,
        store=edge.store,
        password_hasher=CHEAP,
        inspect=edge.store.inspect,
    )
    await state.admins.create(ADMIN, hash_password(CHEAP, PASSWORD), START)
    dashboard = Traced(await aiohttp_client(app), edge)
    form = await dashboard.get("/dashboard/sign-in")
    fields = {"csrf": form.csrf, "username": ADMIN, "password": PASSWORD}
    assert (await dashboard.post("/dashboard/sign-in", fields)).status == 303
    yield dashboard
    await state.close()


def shown(page: Page, testid: str) -> str:
    return page.html.find(data_testid=testid).text


def rules_table(page: Page) -> list[list[str]]:
    rows = page.html.find("table", data_testid="rules").find("tbody").find_all("tr")
    return [[cell.text for cell in row.find_all("td")] for row in rows]


async def test_the_domains_page_has_the_trace_form(traced: Traced) -> None:
    page = await traced.get("/dashboard/domains")
    form = page.html.find("form", action=TRACE)
    assert form.attrs["method"] == "post"
    assert form.find("input", name="csrf").attrs["value"] == page.csrf
    assert form.find("input", name="url").attrs["value"] == ""
    assert form.find("textarea", name="headers").text == ""
    assert form.find("input", name="fetch").attrs["type"] == "checkbox"


async def test_a_stored_object_shows_hit_with_its_rule_lifetime(
    traced: Traced, origin: Origin
) -> None:
    origin.reply("/static/a.css", b"css")  # no cache headers: stored by the rule's edge_ttl
    before = await traced.trace("http://example.com/static/a.css?utm_source=x")
    assert before.status == 200, before.text
    assert shown(before, "outcome") == "miss"
    assert shown(before, "key") == "/static/a.css"
    await traced.edge.get("/static/a.css")
    page = await traced.trace("http://example.com/static/a.css?utm_source=x")
    assert page.status == 200 and shown(page, "outcome") == "hit"
    assert shown(page, "why") == "stored and fresh"
    assert shown(page, "applied") == "site, static"
    assert shown(page, "lifetime") == "3600.0 s" and shown(page, "lifetime-source") == "rule"
    assert rules_table(page)[1][1:3] == ["static", "applied"]
    assert rules_table(page)[2][1:3] == ["account", "skipped"]
    assert "'/account/*'" in rules_table(page)[2][3]
    assert shown(page, "candidates") == origin.url
    assert origin.count("/static/a.css") == 1  # the traces asked the origin nothing
    response, _ = await traced.edge.get("/static/a.css?utm_source=x")
    assert is_hit(response) and origin.count("/static/a.css") == 1


async def test_a_bypassed_request_shows_the_reason(traced: Traced, origin: Origin) -> None:
    origin.reply("/page", b"page", headers={"Cache-Control": "max-age=60"})
    await traced.edge.get("/page")
    plain = await traced.trace("http://example.com/page")
    assert shown(plain, "outcome") == "hit"
    page = await traced.trace("http://example.com/page", "Accept: */*\r\nCookie: session=42\r\n")
    assert page.status == 200
    assert shown(page, "outcome") == "bypass"
    assert shown(page, "why").startswith("a bypass cookie")
    account = await traced.trace("http://example.com/account/me")
    assert shown(account, "outcome") == "bypass" and "cache = false" in shown(account, "why")
    response, _ = await traced.edge.get("/page", headers={"Cookie": "session=42"})
    assert not is_hit(response) and origin.count("/page") == 2


async def test_fetch_from_the_origin_shows_why_an_answer_is_not_stored(
    traced: Traced, origin: Origin
) -> None:
    origin.reply("/private", b"mine", headers={"Cache-Control": "private, max-age=60"})
    page = await traced.trace("http://example.com/private", fetch=True)
    assert page.status == 200, page.text
    assert shown(page, "storable") == "no"
    assert "private" in shown(page, "why-not")
    assert origin.count("/private") == 1  # the one fetch, and nothing stored from it
    assert shown(await traced.trace("http://example.com/private"), "outcome") == "miss"
    assert page.html.find("input", name="fetch").attrs.get("checked") == ""
    unfetched = await traced.trace("http://example.com/private")
    assert unfetched.html.find_all(data_testid="fetched") == []
    assert origin.count("/private") == 1


@pytest.mark.parametrize(
    ("url", "headers", "message"),
    [
        ("http://example.com/p", "Cookie session=1", "Header line 1 is not “Name: value”"),
        ("http://example.com/p", "Accept: */*\nBad Name: x", "the headers has a bad field"),
        ("http://example.com/p", "Accept : */*", "no space may come before the colon"),
        ("http://example.com/p", "X-A: a\x01b", "the headers has a bad field"),
        ("", "", "The URL is required"),
        ("ftp://example.com/p", "", "The URL must be an http:// or https:// URL"),
        ("http://example.com:99999/", "", "The URL is not a URL"),
        ("http://unknown.test/p", "", "unknown.test is not a domain of this edge"),
    ],
)
async def test_bad_input_shows_the_form_again_with_an_error(
    traced: Traced, origin: Origin, url: str, headers: str, message: str
) -> None:
    page = await traced.trace(url, headers, fetch=True)
    assert page.status == 400, page.text
    assert message.lower() in shown(page, "trace-error").lower()
    assert page.html.find("input", name="url").attrs["value"] == url
    assert page.html.find("textarea", name="headers").text == " ".join(headers.split())
    assert page.html.find_all(data_testid="trace-report") == []
    assert origin.seen == []  # nothing was fetched


async def test_a_post_without_the_csrf_token_is_refused(traced: Traced, origin: Origin) -> None:
    origin.reply("/x", b"x", headers={"Cache-Control": "max-age=60"})
    for fields in ({}, {"csrf": "forged"}):
        page = await traced.post(TRACE, {"url": "http://example.com/x", "fetch": "1", **fields})
        assert page.status == 403
        assert "CSRF" in page.words and page.html.find_all(data_testid="trace-report") == []
    assert origin.seen == []


async def test_signed_out_the_trace_is_refused(traced: Traced) -> None:
    csrf = await traced.csrf()
    await traced.post("/dashboard/sign-out", {"csrf": csrf})
    page = await traced.post(TRACE, {"csrf": csrf, "url": "http://example.com/x"})
    assert page.status == 403 and "not signed in" in page.words


@pytest.mark.slow
async def test_a_script_url_and_headers_are_echoed_escaped(traced: Traced) -> None:
    url = "http://example.com/<script>alert(1)</script>?q=\"'><img src=x>"
    page = await traced.trace(url, "X-Test: <script>alert(2)</script>")
    assert page.status == 200, page.text
    assert "<script>alert" not in page.text and "<img src=x>" not in page.text
    assert page.html.find_all("script", src=None) == page.html.find_all("script")
    assert page.html.find("input", name="url").attrs["value"] == url
    assert shown(page, "target") == f"GET {url.removeprefix('http://example.com')}"
    bad = await traced.trace("http://example.com/p", "<script>alert(3)</script>")
    assert bad.status == 400 and "<script>alert(3)" not in bad.text
    assert "<script>alert(3)</script>" in shown(bad, "trace-error")
