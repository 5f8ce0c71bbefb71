"""Repeated failed sign-ins make the next attempt wait, longer each time; waiting is enforced
before any password is checked, so even the right one is refused until the wait is over."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from proxy.state.admins import hash_password
from tests.dashboard.support import (
    ADMIN,
    CHEAP,
    FREE_FAILURES,
    PASSWORD,
    Dashboard,
    Page,
)


def assert_waiting(page: Page, seconds: int) -> None:
    assert page.status == 429
    assert page.headers["Retry-After"] == str(seconds)
    assert f"Too many failed sign-ins. Try again in {seconds} seconds." in page.words
    assert page.cookie("cdnp_session") is None


async def fail(dashboard: Dashboard, times: int, username: str = ADMIN) -> None:
    for _ in range(times):
        assert (await dashboard.sign_in(username, "wrong password")).status == 403


async def test_failures_past_the_allowance_make_each_next_try_wait_longer(
    dashboard: Dashboard,
) -> None:
    await fail(dashboard, FREE_FAILURES)
    assert (await dashboard.sign_in()).status == 303  # the allowance is free
    await dashboard.act("/dashboard/sign-out")

    await fail(dashboard, FREE_FAILURES + 1)  # a success started the count again
    assert_waiting(await dashboard.sign_in(), 1)  # right password, refused while waiting
    dashboard.clock.now += 1
    await fail(dashboard, 1)
    assert_waiting(await dashboard.sign_in(), 2)
    dashboard.clock.now += 2
    await fail(dashboard, 1)
    assert_waiting(await dashboard.sign_in(), 4)
    dashboard.clock.now += 3
    assert_waiting(await dashboard.sign_in(), 1)
    dashboard.clock.now += 1
    assert (await dashboard.sign_in()).status == 303


async def test_the_wait_is_capped(dashboard: Dashboard) -> None:
    await fail(dashboard, FREE_FAILURES + 1)
    for _ in range(12):
        dashboard.clock.now += 60
        await fail(dashboard, 1)
    assert_waiting(await dashboard.sign_in(), 60)  # dashboard.signin_max_delay


async def sign_in_from(dashboard: Dashboard, address: str, username: str, password: str) -> Page:
    """Sign in from another loopback address (Linux routes all of 127.0.0.0/8 locally)."""
    connector = aiohttp.TCPConnector(local_addr=(address, 0))
    jar = aiohttp.CookieJar(unsafe=True)
    async with aiohttp.ClientSession(connector=connector, cookie_jar=jar) as session:
        url = str(dashboard.client.make_url("/dashboard/sign-in"))
        async with session.get(url) as form:
            csrf = Page(form.status, form.headers.copy(), await form.text()).csrf
        async with session.post(
            url,
            data={"csrf": csrf, "username": username, "password": password},
            allow_redirects=False,
        ) as answer:
            return Page(answer.status, answer.headers.copy(), await answer.text())


async def test_a_user_name_is_protected_whatever_the_address(dashboard: Dashboard) -> None:
    """Guesses for one admin spread over many addresses still count against the name."""
    await dashboard.state.admins.create("bob", hash_password(CHEAP, "bob's long password"), 0)
    await fail(dashboard, FREE_FAILURES + 1)  # alice's name, from 127.0.0.1
    assert_waiting(await sign_in_from(dashboard, "127.0.0.2", ADMIN, PASSWORD), 1)
    page = await sign_in_from(dashboard, "127.0.0.2", "bob", "bob's long password")
    assert page.status == 303  # that address has done nothing wrong


@pytest.mark.parametrize("names", [["mallory", "trent", "eve", "oscar"]])
async def test_one_address_guessing_many_names_is_slowed(
    dashboard: Dashboard, names: list[str]
) -> None:
    for name in (names * 2)[: FREE_FAILURES + 1]:
        assert (await dashboard.sign_in(name, "guess")).status == 403
    assert_waiting(await dashboard.sign_in(), 1)


async def test_a_bad_form_does_not_count_as_a_failure(dashboard: Dashboard) -> None:
    for _ in range(FREE_FAILURES + 3):
        page = await dashboard.post(
            "/dashboard/sign-in", {"csrf": "nope", "username": ADMIN, "password": "x"}
        )
        assert page.status == 403
        assert (await dashboard.sign_in(ADMIN, "")).status == 400
    assert (await dashboard.sign_in(ADMIN, PASSWORD)).status == 303


@pytest.mark.slow
async def test_guesses_sent_in_parallel_are_counted_before_they_are_checked(
    dashboard: Dashboard,
) -> None:
    form = await dashboard.get("/dashboard/sign-in")
    guesses = [
        dashboard.post(
            "/dashboard/sign-in",
            {"csrf": form.csrf, "username": ADMIN, "password": f"guess number {i}"},
        )
        for i in range(FREE_FAILURES + 4)
    ]
    statuses = sorted(page.status for page in await asyncio.gather(*guesses))
    assert statuses == [403] * (FREE_FAILURES + 1) + [429] * 3
