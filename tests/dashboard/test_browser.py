"""The dashboard in a real browser: Debian's Chromium driven by Playwright against the whole
service (``proxy.process.service.running``) with a real origin behind the edge.

What a test sees is what an operator sees: labels, buttons and links by their names. What
the server did is checked from outside: real HTTP calls to the API and the edge, and what the
origin received. Waiting is Playwright's auto-waiting ``expect``; there are no sleeps.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright

from proxy.core.auth.tokens import Scope
from tests.dashboard.live import ADMIN, IDLE, PASSWORD, Live, launch, live_service

# slow: a real Chromium; not in the quick subset (README)
pytestmark = pytest.mark.slow

CACHEABLE = {"Cache-Control": "max-age=300"}
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1, no proxy


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with live_service(tmp_path_factory.mktemp("live")) as running:
        yield running


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    expect.set_options(timeout=15_000)  # a loaded 2-core machine; passing tests never wait
    with sync_playwright() as playwright:
        chromium = launch(playwright)
        yield chromium
        chromium.close()


@pytest.fixture
def context(browser: Browser, live: Live) -> Iterator[BrowserContext]:
    """A fresh browser profile (no cookies) per test, with the clock back at real time."""
    live.clock.offset = 0.0
    context = browser.new_context(base_url=live.api_url)
    context.set_default_timeout(15_000)
    yield context
    context.close()
    live.clock.offset = 0.0


@pytest.fixture
def page(context: BrowserContext) -> Page:
    return context.new_page()


def sign_in(page: Page, username: str = ADMIN, password: str = PASSWORD) -> None:
    page.goto("/dashboard/sign-in")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()


def signed_in(page: Page) -> Page:
    sign_in(page)
    expect(page.get_by_role("heading", name="Overview")).to_be_visible()
    return page


def clear_via_api(live: Live, token: str, domain: str = "example.com") -> int:
    request = urllib.request.Request(
        live.api_url + "/api/v1/cdn/clear-cache",
        data=json.dumps({"domain": domain}).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with _DIRECT.open(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        exc.close()
        return exc.code


def edge_get(live: Live, path: str) -> str:
    request = urllib.request.Request(live.edge_url + path, headers={"Host": "example.com"})
    with _DIRECT.open(request, timeout=10) as response:
        return str(response.headers["Cache-Status"])


def confirm(page: Page) -> None:
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    dialog.get_by_role("button", name="Confirm").click()


def test_sign_in_refuses_a_wrong_password_then_lets_the_admin_in(page: Page, live: Live) -> None:
    page.goto("/dashboard/tokens")
    expect(page).to_have_url(re.compile(r"/dashboard/sign-in\?next=/dashboard/tokens$"))

    page.get_by_label("Username").fill(ADMIN)
    page.get_by_label("Password").fill("not the password at all")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_have_text("Wrong username or password.")
    expect(page.get_by_role("link", name="Tokens")).to_have_count(0)

    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(re.compile(r"/dashboard/tokens$"))  # back where it was going
    for name in ("Tokens", "Domains", "History"):
        expect(page.get_by_role("link", name=name)).to_be_visible()
    expect(page.get_by_text(f"Signed in as {ADMIN}")).to_be_visible()

    page.get_by_role("link", name="Overview").click()
    expect(page.get_by_test_id("chart")).to_be_visible()

    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("status")).to_have_text("You have signed out.")
    page.goto("/dashboard")
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()


def test_create_regenerate_and_revoke_a_token(
    context: BrowserContext, page: Page, live: Live
) -> None:
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live.api_url)
    signed_in(page).get_by_role("link", name="Tokens").click()

    page.get_by_label("Name").fill("deploy")
    page.get_by_label("All domains").check()
    page.get_by_role("button", name="Create token").click()
    shown = page.get_by_test_id("new-token")
    expect(shown).to_have_text(re.compile(r"^cdnp_[A-Za-z0-9_-]{43}$"))
    first = shown.inner_text()
    page.get_by_role("button", name="Copy").click()
    expect(page.get_by_role("button", name="Copied")).to_be_visible()
    assert page.evaluate("navigator.clipboard.readText()") == first
    assert clear_via_api(live, first) == 200

    row = page.locator("tr", has_text="deploy")
    expect(row).to_contain_text("all domains")
    page.goto("/dashboard/tokens")  # shown once: never again
    expect(page.locator("tr", has_text="deploy")).to_be_visible()
    expect(page.get_by_test_id("new-token")).to_have_count(0)
    assert first not in page.content()

    page.locator("tr", has_text="deploy").get_by_role("button", name="Regenerate").click()
    confirm(page)
    expect(page.get_by_test_id("new-token")).to_have_text(re.compile(r"^cdnp_"))
    second = page.get_by_test_id("new-token").inner_text()
    assert second != first
    assert clear_via_api(live, first) == 401  # the old token is refused at once
    assert clear_via_api(live, second) == 200

    page.locator("tr", has_text="deploy").get_by_role("button", name="Revoke").click()
    confirm(page)
    expect(page.get_by_role("status")).to_have_text("Token “deploy” revoked.")
    expect(page.locator("tr", has_text="deploy")).to_have_count(0)
    assert clear_via_api(live, second) == 401


def test_cancelling_the_confirmation_changes_nothing(page: Page, live: Live) -> None:
    token = live.call(live.service.state.create_token("keep", Scope.everything(), live.clock()))
    signed_in(page).goto("/dashboard/tokens")
    page.locator("tr", has_text="keep").get_by_role("button", name="Revoke").click()
    page.get_by_role("dialog").get_by_role("button", name="Cancel").click()
    expect(page.get_by_role("dialog")).to_be_hidden()
    page.reload()
    expect(page.locator("tr", has_text="keep")).to_be_visible()
    assert clear_via_api(live, token) == 200


def test_clearing_a_domain_empties_the_edge_and_shows_in_history(page: Page, live: Live) -> None:
    live.origin.reply("/article", b"v1", headers=CACHEABLE)
    assert "stored" in edge_get(live, "/article")
    assert "hit" in edge_get(live, "/article")
    assert live.origin.count("/article") == 1

    signed_in(page).get_by_role("link", name="Domains").click()
    row = page.locator("tr", has_text="example.com")
    expect(row.get_by_test_id("entries")).not_to_have_text("0")
    expect(row.get_by_test_id("hit-ratio")).to_contain_text("%")
    row.get_by_role("button", name="Clear cache").click()
    confirm(page)
    expect(page.get_by_role("status")).to_have_text("Cache cleared for example.com.")
    expect(page.locator("tr", has_text="example.com").get_by_test_id("entries")).to_have_text("0")

    assert "fwd=uri-miss" in edge_get(live, "/article")  # the cached copy is gone
    assert live.origin.count("/article") == 2  # so the origin was asked again

    page.get_by_role("link", name="History").click()
    page.get_by_label("Domain").fill("example.com")
    page.get_by_label("Outcome").select_option("cleared")
    page.get_by_role("button", name="Filter").click()
    newest = page.locator("table.history tbody tr").first
    expect(newest).to_contain_text(f"admin:{ADMIN}")
    expect(newest).to_contain_text("example.com")
    expect(newest).to_contain_text("cleared")

    page.get_by_role("link", name="Overview").click()
    expect(page.get_by_test_id("total-clears")).not_to_have_text("0")


def test_a_form_posted_from_another_site_is_refused(page: Page, live: Live) -> None:
    """A page on another origin (another port) posts the Create token form: the browser
    sends the session cookie (same site), but the form has no CSRF token."""
    live.origin.reply(
        "/forged",
        f"""<!doctype html><form method="post" action="{live.api_url}/dashboard/tokens">
        <input name="name" value="forged"><input name="scope" value="*">
        <button>Win a prize</button></form>""".encode(),
        headers={"Content-Type": "text/html"},
    )
    signed_in(page).goto(live.origin.url + "/forged")
    page.get_by_role("button", name="Win a prize").click()
    expect(page.get_by_role("heading", name="403 Forbidden")).to_be_visible()
    expect(page.get_by_role("alert")).to_contain_text("CSRF token is missing or wrong")
    names = [t.name for t in live.call(live.service.state.list_tokens())]
    assert "forged" not in names


def test_an_idle_session_ends(page: Page, live: Live) -> None:
    signed_in(page)
    live.clock.advance(IDLE - 120)
    page.get_by_role("link", name="Domains").click()  # in time: the session lives on
    expect(page.get_by_role("heading", name="Domains")).to_be_visible()

    live.clock.advance(IDLE + 1)
    page.get_by_role("link", name="Tokens").click()
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    expect(page.get_by_role("status")).to_have_text("Your session has ended. Sign in again.")
    page.get_by_label("Username").fill(ADMIN)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Tokens")).to_be_visible()  # where it was going


def test_no_page_needs_inline_script_or_style(page: Page, live: Live) -> None:
    """The CSP forbids inline script and style; a violation would show in the console. And
    no page asks for something that is not there."""
    problems: list[str] = []
    failed: list[str] = []  # and nothing the pages load (style, script) is missing
    page.on("console", lambda message: problems.append(message.text))
    page.on("response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    signed_in(page)
    for path in ("/dashboard/tokens", "/dashboard/domains", "/dashboard/history"):
        page.goto(path)
        expect(page.get_by_role("link", name="History")).to_be_visible()
    assert not [p for p in problems if "Content Security Policy" in p], problems
    assert failed == []
