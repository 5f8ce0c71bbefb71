"""Signing in and out, the session cookie, and what the database keeps of a session."""

from __future__ import annotations

import hashlib
import sqlite3

import pytest

from proxy.state.admins import hash_password
from tests.dashboard.support import (
    ADMIN,
    CHEAP,
    IDLE,
    LIFETIME,
    PASSWORD,
    START,
    Dashboard,
    DashboardFactory,
)

PAGES = ["/dashboard", "/dashboard/tokens", "/dashboard/domains", "/dashboard/history"]


@pytest.mark.parametrize("path", PAGES)
async def test_a_signed_out_visit_goes_to_the_sign_in_page(dashboard: Dashboard, path: str) -> None:
    page = await dashboard.get(path)
    assert page.status == 303
    assert page.location == f"/dashboard/sign-in?next={path}"


async def test_the_sign_in_page_has_labelled_fields_and_a_form_secret(
    dashboard: Dashboard,
) -> None:
    page = await dashboard.get("/dashboard/sign-in")
    assert page.status == 200
    form = page.html.find("form", method="post")
    assert form.find("label", for_="username").text == "Username"
    assert form.find("input", id="username").attrs["name"] == "username"
    assert form.find("label", for_="password").text == "Password"
    password = form.find("input", id="password")
    assert (password.attrs["name"], password.attrs["type"]) == ("password", "password")
    assert form.find("button", type="submit").text == "Sign in"
    cookie = page.cookie("cdnp_signin")
    assert cookie is not None
    assert cookie["httponly"] == "True"
    assert cookie["samesite"] == "Strict"
    assert cookie["path"] == "/dashboard"
    assert cookie["value"] not in page.text  # the form carries a token derived from it


async def test_signing_in_opens_a_session_whose_id_the_database_never_holds(
    dashboard: Dashboard,
) -> None:
    page = await dashboard.sign_in()
    assert page.status == 303
    assert page.location == "/dashboard"
    cookie = page.cookie("cdnp_session")
    assert cookie is not None
    assert (cookie["httponly"], cookie["samesite"], cookie["path"]) == (
        "True",
        "Strict",
        "/dashboard",
    )
    assert "secure" not in cookie  # the listener is plain HTTP
    assert "max-age" not in cookie and "expires" not in cookie  # ends with the browser

    session_id = cookie["value"]
    with sqlite3.connect(dashboard.config.api_role()[1].path) as db:
        rows = db.execute("SELECT id_sha256, admin FROM sessions").fetchall()
        dump = "\n".join(db.iterdump())
    assert rows == [(hashlib.sha256(session_id.encode()).hexdigest(), ADMIN)]
    assert session_id not in dump

    overview = await dashboard.get("/dashboard")
    assert overview.status == 200
    assert f"Signed in as {ADMIN}" in overview.words
    [admin] = await dashboard.state.admins.list_admins()
    assert admin.last_sign_in_at == START


async def test_the_cookie_is_secure_when_the_dashboard_is_behind_https(
    make_dashboard: DashboardFactory,
) -> None:
    dashboard = await make_dashboard(secure_cookie=True)
    page = await dashboard.get("/dashboard/sign-in")
    signin_cookie = page.cookie("cdnp_signin")
    assert signin_cookie is not None
    assert signin_cookie["secure"] == "True"
    # The test client speaks plain HTTP, so it would not send a Secure cookie back: post the
    # form secret by hand.
    answer = await dashboard.post(
        "/dashboard/sign-in",
        {"csrf": page.csrf, "username": ADMIN, "password": PASSWORD},
        cookies={"cdnp_signin": signin_cookie["value"]},
    )
    session_cookie = answer.cookie("cdnp_session")
    assert session_cookie is not None
    assert session_cookie["secure"] == "True"


@pytest.mark.parametrize(
    ("username", "password"),
    [
        (ADMIN, "not the password"),
        ("mallory", PASSWORD),
        ("no such name!", PASSWORD),
        (ADMIN, "x" * 5000),  # longer than any password: refused without hashing
    ],
)
async def test_wrong_credentials_are_refused_alike(
    dashboard: Dashboard, username: str, password: str
) -> None:
    page = await dashboard.sign_in(username, password)
    assert page.status == 403
    assert "Wrong username or password." in page.words
    assert page.cookie("cdnp_session") is None
    assert (await dashboard.get("/dashboard")).status == 303


async def test_empty_fields_are_a_400(dashboard: Dashboard) -> None:
    page = await dashboard.sign_in(ADMIN, "")
    assert page.status == 400
    assert "Enter your username and password." in page.words
    assert page.html.find("input", name="username").attrs["value"] == ADMIN  # kept


async def test_a_sign_in_form_posted_from_elsewhere_is_refused(dashboard: Dashboard) -> None:
    """Login CSRF: without the form secret's cookie, or with a made-up token, no session."""
    no_cookie = await dashboard.post(
        "/dashboard/sign-in", {"csrf": "0" * 64, "username": ADMIN, "password": PASSWORD}
    )
    assert no_cookie.status == 403
    assert no_cookie.cookie("cdnp_session") is None
    await dashboard.get("/dashboard/sign-in")  # now the browser has the cookie...
    wrong_token = await dashboard.post(
        "/dashboard/sign-in", {"csrf": "0" * 64, "username": ADMIN, "password": PASSWORD}
    )
    assert wrong_token.status == 403  # ...but the attacker's form cannot know the token
    assert "The sign-in form had expired" in wrong_token.words
    assert wrong_token.cookie("cdnp_session") is None


@pytest.mark.parametrize(
    ("next_page", "location"),
    [
        ("/dashboard/history", "/dashboard/history"),
        ("/dashboard/domains", "/dashboard/domains"),
        ("https://evil.example/", "/dashboard"),
        ("//evil.example/dashboard", "/dashboard"),
        ("/dashboard/../api", "/dashboard"),
        ("/healthz", "/dashboard"),
    ],
)
async def test_sign_in_returns_only_to_dashboard_pages(
    dashboard: Dashboard, next_page: str, location: str
) -> None:
    form = await dashboard.get("/dashboard/sign-in", params={"next": next_page})
    page = await dashboard.post(
        "/dashboard/sign-in",
        {"csrf": form.csrf, "username": ADMIN, "password": PASSWORD, "next": next_page},
    )
    assert page.status == 303
    assert page.location == location


async def test_a_session_id_set_before_sign_in_is_not_adopted(dashboard: Dashboard) -> None:
    planted = "A" * 43
    dashboard.client.session.cookie_jar.update_cookies({"cdnp_session": planted})
    page = await dashboard.sign_in()
    cookie = page.cookie("cdnp_session")
    assert cookie is not None
    assert cookie["value"] != planted


async def test_a_signed_in_visit_to_the_sign_in_page_goes_to_the_dashboard(
    signed_in: Dashboard,
) -> None:
    page = await signed_in.get("/dashboard/sign-in")
    assert page.status == 303
    assert page.location == "/dashboard"


async def test_signing_out_ends_the_session_for_good(signed_in: Dashboard) -> None:
    session_id = signed_in.session_cookie()
    assert session_id is not None
    page = await signed_in.act("/dashboard/sign-out")
    assert page.status == 303
    assert page.location == "/dashboard/sign-in?signed_out=1"
    cleared = page.cookie("cdnp_session")
    assert cleared is not None and cleared["value"] == ""
    assert await signed_in.state.admins.session_count(ADMIN) == 0

    # Replaying the old cookie gets nowhere.
    replay = await signed_in.get("/dashboard", cookies={"cdnp_session": session_id})
    assert replay.status == 303
    assert replay.location.startswith("/dashboard/sign-in")
    signed_out = await signed_in.get("/dashboard/sign-in?signed_out=1")
    assert "You have signed out." in signed_out.words


async def test_signing_out_needs_the_csrf_token(signed_in: Dashboard) -> None:
    page = await signed_in.post("/dashboard/sign-out", {})
    assert page.status == 403
    assert (await signed_in.get("/dashboard")).status == 200  # still signed in


# -- expiry, with the clock moved by hand ------------------------------------------------------


async def test_an_idle_session_ends(signed_in: Dashboard) -> None:
    signed_in.clock.now += IDLE - 1
    assert (await signed_in.get("/dashboard")).status == 200  # used: idle time restarts
    signed_in.clock.now += IDLE - 1
    assert (await signed_in.get("/dashboard")).status == 200
    signed_in.clock.now += IDLE
    page = await signed_in.get("/dashboard/tokens")
    assert page.status == 303
    assert page.location == "/dashboard/sign-in?next=/dashboard/tokens&ended=1"
    cleared = page.cookie("cdnp_session")
    assert cleared is not None and cleared["value"] == ""
    assert await signed_in.state.admins.session_count(ADMIN) == 0
    notice = await signed_in.get(page.location)
    assert "Your session has ended. Sign in again." in notice.words


async def test_a_busy_session_still_ends_after_its_lifetime(signed_in: Dashboard) -> None:
    for _ in range(int(LIFETIME // (IDLE / 2)) - 1):
        signed_in.clock.now += IDLE / 2
        assert (await signed_in.get("/dashboard")).status == 200
    signed_in.clock.now += IDLE / 2
    assert (await signed_in.get("/dashboard")).status == 303


async def test_an_expired_session_cannot_post_either(signed_in: Dashboard) -> None:
    csrf = await signed_in.csrf()
    signed_in.clock.now += LIFETIME
    page = await signed_in.post("/dashboard/tokens", {"csrf": csrf, "name": "x", "scope": "*"})
    assert page.status == 403
    assert "your session has ended" in page.words
    assert await signed_in.state.list_tokens() == []


async def test_expired_sessions_are_deleted_at_the_next_sign_in(
    make_dashboard: DashboardFactory,
) -> None:
    dashboard = await make_dashboard()
    await dashboard.sign_in()
    dashboard.client.session.cookie_jar.clear()
    dashboard.clock.now += IDLE  # the first session is left to expire, never used again
    await dashboard.sign_in()
    assert await dashboard.state.admins.session_count(ADMIN) == 1


async def test_removing_an_admin_or_changing_the_password_ends_their_sessions(
    signed_in: Dashboard,
) -> None:
    await signed_in.state.admins.set_password(ADMIN, hash_password(CHEAP, "a new password!"), 0)
    assert (await signed_in.get("/dashboard")).status == 303
    assert (await signed_in.sign_in(ADMIN, PASSWORD)).status == 403
    assert (await signed_in.sign_in(ADMIN, "a new password!")).status == 303
    await signed_in.state.admins.remove(ADMIN)
    assert (await signed_in.get("/dashboard")).status == 303


@pytest.mark.slow
@pytest.mark.parametrize("value", ["", "short", "A" * 43 + ";", "é" * 43, "A" * 44])
async def test_malformed_session_cookies_are_not_looked_up(
    dashboard: Dashboard, value: str
) -> None:
    page = await dashboard.get("/dashboard", cookies={"cdnp_session": value})
    assert page.status == 303
    assert page.location.startswith("/dashboard/sign-in")
