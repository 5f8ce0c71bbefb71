"""What every dashboard response carries, CSRF on every state-changing form, and bad input
answered with a clear 4xx page, never a 500."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from proxy.api.dashboard.pages import SECURITY_HEADERS
from proxy.core.auth.tokens import Scope
from tests.dashboard.support import ADMIN, START, Dashboard, Page

CSP = SECURITY_HEADERS["Content-Security-Policy"]


def assert_protected(page: Page) -> None:
    for name, value in SECURITY_HEADERS.items():
        assert page.headers.getall(name) == [value], name


def test_the_policy_allows_nothing_inline_and_no_framing() -> None:
    directives = dict(part.strip().split(" ", 1) for part in CSP.split(";"))
    assert directives["default-src"] == "'self'"
    assert directives["script-src"] == "'self'"
    assert directives["style-src"] == "'self'"
    assert directives["frame-ancestors"] == "'none'"
    assert directives["form-action"] == "'self'"
    assert "unsafe" not in CSP
    assert SECURITY_HEADERS["X-Frame-Options"] == "DENY"
    assert SECURITY_HEADERS["Cache-Control"] == "no-store"
    assert SECURITY_HEADERS["Referrer-Policy"] == "no-referrer"


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/dashboard", 303),
        ("GET", "/dashboard/tokens", 303),
        ("GET", "/dashboard/sign-in", 200),
        ("POST", "/dashboard/sign-in", 415),
        ("POST", "/dashboard/tokens", 403),
        ("GET", "/dashboard/static/dashboard.js", 200),
        ("GET", "/dashboard/static/dashboard.css", 200),
        ("GET", "/dashboard/static/favicon.svg", 200),
        ("GET", "/dashboard/nothing-here", 404),
        ("DELETE", "/dashboard/tokens", 405),
        ("GET", "/dashboard/", 303),
    ],
)
async def test_every_response_is_protected(
    dashboard: Dashboard, method: str, path: str, status: int
) -> None:
    async with dashboard.client.request(method, path, allow_redirects=False) as response:
        page = Page(response.status, response.headers.copy(), await response.text())
    assert page.status == status
    assert_protected(page)


@pytest.mark.parametrize(
    "path", ["/dashboard", "/dashboard/tokens", "/dashboard/domains", "/dashboard/history"]
)
async def test_every_page_is_protected_when_signed_in(signed_in: Dashboard, path: str) -> None:
    page = await signed_in.get(path)
    assert page.status == 200
    assert page.headers["Content-Type"] == "text/html; charset=utf-8"
    assert_protected(page)


async def test_every_page_names_an_icon_that_is_served(dashboard: Dashboard) -> None:
    """Issue 22 item 8: the browser asked for /favicon.ico and got a 404. Each page names
    the dashboard's own icon, and it is served (an SVG, as package data)."""
    page = await dashboard.get("/dashboard/sign-in")
    [icon] = page.html.find_all("link", rel="icon")
    async with dashboard.client.get(icon.attrs["href"]) as response:
        assert response.status == 200
        assert response.content_type == "image/svg+xml"
        assert (await response.text()).startswith("<svg ")


async def test_the_api_keeps_its_own_headers(dashboard: Dashboard) -> None:
    page = await dashboard.get("/healthz")
    assert page.status == 200
    assert "Content-Security-Policy" not in page.headers


def _templates() -> list[tuple[str, str]]:
    folder = resources.files("proxy.api.dashboard").joinpath("templates")
    return [(item.name, item.read_text("utf-8")) for item in folder.iterdir()]


@pytest.mark.parametrize(("name", "text"), _templates())
def test_templates_have_no_inline_script_style_or_handlers(name: str, text: str) -> None:
    assert re.findall(r"<script(?![^>]*\bsrc=)", text) == []
    assert re.findall(r"<style", text) == []
    assert re.findall(r"\sstyle=", text) == []
    assert re.findall(r"\son[a-z]+=", text) == []
    assert "javascript:" not in text
    assert "|safe" not in text.replace(" ", "")  # everything is autoescaped


# -- CSRF --------------------------------------------------------------------------------------

ACTIONS = [
    ("/dashboard/tokens", {"name": "forged", "scope": "*"}),
    ("/dashboard/tokens/deploy/regenerate", {}),
    ("/dashboard/tokens/deploy/revoke", {}),
    ("/dashboard/domains/clear", {"domain": "example.com"}),
    ("/dashboard/sign-out", {}),
]


@pytest.fixture
async def with_token(signed_in: Dashboard) -> Dashboard:
    await signed_in.state.create_token("deploy", Scope.everything(), START)
    return signed_in


async def _nothing_changed(dashboard: Dashboard) -> None:
    [token] = await dashboard.state.list_tokens()
    assert (token.name, token.created_at) == ("deploy", START)
    assert await dashboard.audit() == []
    assert (await dashboard.get("/dashboard")).status == 200  # still signed in


@pytest.mark.parametrize(("path", "fields"), ACTIONS)
@pytest.mark.parametrize(
    "csrf",
    [None, "", "0" * 64, "the token of another session"],
    ids=["missing", "empty", "wrong", "other-session"],
)
async def test_a_form_without_the_sessions_csrf_token_is_refused(
    with_token: Dashboard, path: str, fields: dict[str, str], csrf: str | None
) -> None:
    if csrf == "the token of another session":
        other = await with_token.state.admins.session_count(ADMIN)
        assert other == 1
        csrf = await _csrf_of_another_session(with_token)
    data = dict(fields) if csrf is None else {"csrf": csrf, **fields}
    page = await with_token.post(path, data)
    assert page.status == 403
    assert "CSRF token is missing or wrong" in page.words
    assert_protected(page)
    await _nothing_changed(with_token)


async def _csrf_of_another_session(dashboard: Dashboard) -> str:
    mine = dashboard.session_cookie()
    dashboard.client.session.cookie_jar.clear()
    await dashboard.sign_in()
    theirs = await dashboard.csrf()
    dashboard.client.session.cookie_jar.clear()
    dashboard.client.session.cookie_jar.update_cookies({"cdnp_session": mine or ""})
    assert theirs != ""
    return theirs


@pytest.mark.parametrize(("path", "fields"), ACTIONS)
async def test_a_form_without_a_session_is_refused(
    with_token: Dashboard, path: str, fields: dict[str, str]
) -> None:
    csrf = await with_token.csrf()
    mine = with_token.session_cookie()
    with_token.client.session.cookie_jar.clear()
    page = await with_token.post(path, {"csrf": csrf, **fields})
    assert page.status == 403
    assert "You are not signed in" in page.words
    with_token.client.session.cookie_jar.update_cookies({"cdnp_session": mine or ""})
    await _nothing_changed(with_token)


# -- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "headers", "status"),
    [
        ('{"name": "x"}', {"Content-Type": "application/json"}, 415),
        ("name=x", {"Content-Type": "text/plain"}, 415),
        ("name=" + "x" * 20_000, {"Content-Type": "application/x-www-form-urlencoded"}, 413),
        (
            "--b\r\nContent-Disposition: form-data; name=name\r\n\r\nx\r\n",  # never ends
            {"Content-Type": "multipart/form-data; boundary=b"},
            400,
        ),
    ],
)
async def test_malformed_posts_get_a_clear_4xx(
    signed_in: Dashboard, data: str, headers: dict[str, str], status: int
) -> None:
    page = await signed_in.post("/dashboard/tokens", data, headers=headers)
    assert page.status == status
    assert page.html.find("h1").text  # an error page that says what went wrong
    assert_protected(page)
    assert await signed_in.state.list_tokens() == []


@pytest.mark.parametrize(
    "query",
    [
        {"page": "0"},
        {"page": "-1"},
        {"page": "abc"},
        {"page": "\u0661"},  # a digit (Arabic-Indic one), but not an ASCII one
        {"page": "99999999999999999999"},
        {"outcome": "nonsense"},
        {"domain": "x" * 300},
    ],
)
async def test_bad_history_filters_get_a_400(signed_in: Dashboard, query: dict[str, str]) -> None:
    page = await signed_in.get("/dashboard/history", params=query)
    assert page.status == 400
    assert page.html.find(role="alert").text


@pytest.mark.parametrize(
    "path", ["/dashboard/tokens/no-such/regenerate", "/dashboard/tokens/a%20b/revoke"]
)
async def test_unknown_tokens_are_a_404(signed_in: Dashboard, path: str) -> None:
    page = await signed_in.act(path)
    assert page.status == 404
    assert "There is no token" in page.words


@pytest.mark.slow
async def test_a_failing_state_database_is_a_503_page(signed_in: Dashboard) -> None:
    await signed_in.state.close()
    page = await signed_in.get("/dashboard/tokens")
    assert page.status == 503
    assert "The state database is unavailable" in page.words
    assert_protected(page)
