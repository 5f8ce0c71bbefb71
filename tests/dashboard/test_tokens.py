"""The Tokens page: a row per token, create, regenerate, revoke; a new token shown once."""

from __future__ import annotations

import logging

import pytest

from proxy.core.auth.tokens import Scope
from tests.dashboard.support import START, Dashboard


async def test_a_row_per_token_with_its_scope_and_times(signed_in: Dashboard) -> None:
    await signed_in.state.create_token("deploy", Scope.everything(), START)
    await signed_in.state.create_token("blog", Scope.only(["other.test", "example.com"]), START)
    await signed_in.state.authenticate(
        await signed_in.state.regenerate_token("blog", START + 60), START + 120
    )
    page = await signed_in.get("/dashboard/tokens")
    assert page.status == 200
    rows = page.html.find_all("tr", data_token=None)
    assert [row.attrs["data-token"] for row in rows] == ["blog", "deploy"]
    blog, deploy = ([cell.text for cell in row.find_all("td")] for row in rows)
    assert "example.com, other.test" in blog
    assert "2023-11-14 22:14:20 UTC" in blog  # created (regenerated) at START + 60
    assert "2023-11-14 22:15:20 UTC" in blog  # last used at START + 120
    assert "all domains" in deploy
    assert "never" in deploy
    for row in rows:
        buttons = row.find_all("button", type="submit")
        assert [button.text for button in buttons] == ["Regenerate", "Revoke"]
        assert len(row.find_all(data_confirm=None)) == 2  # both ask before they act
    assert "No tokens yet." not in page.words
    assert page.new_token is None


async def test_a_created_token_is_shown_once_and_works_at_once(
    signed_in: Dashboard, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    page = await signed_in.act("/dashboard/tokens", {"name": "deploy", "scope": "*"})
    assert page.status == 200
    assert page.headers["Cache-Control"] == "no-store"
    token = page.new_token
    assert token is not None and token.startswith("cdnp_")
    assert page.html.find_all("button", data_copy="new-token")
    assert await signed_in.clear_via_api(token) == 200

    again = await signed_in.get("/dashboard/tokens")
    assert again.new_token is None
    assert token not in again.text
    assert again.html.find_all("tr", data_token="deploy")
    assert all(token not in record.getMessage() for record in caplog.records)
    assert any("created token 'deploy'" in record.getMessage() for record in caplog.records)


@pytest.mark.parametrize(
    ("scopes", "described"),
    [
        (["example.com"], "example.com"),
        (["EXAMPLE.com.", "other.test"], "example.com, other.test"),
        (["bücher.example"], "xn--bcher-kva.example"),
    ],
)
async def test_a_token_can_be_scoped_to_some_domains(
    signed_in: Dashboard, scopes: list[str], described: str
) -> None:
    csrf = await signed_in.csrf()
    page = await signed_in.post(
        "/dashboard/tokens", [("csrf", csrf), ("name", "scoped")] + [("scope", s) for s in scopes]
    )
    assert page.status == 200
    [record] = await signed_in.state.list_tokens()
    assert record.scope.describe() == described
    token = page.new_token
    assert token is not None
    allowed = "example.com" in described
    assert await signed_in.clear_via_api(token, "example.com") == (200 if allowed else 403)


@pytest.mark.parametrize(
    ("fields", "status", "message"),
    [
        ([("name", ""), ("scope", "*")], 400, "A token name is 1 to 64"),
        ([("name", "has space"), ("scope", "*")], 400, "A token name is 1 to 64"),
        ([("name", "x" * 65), ("scope", "*")], 400, "A token name is 1 to 64"),
        ([("name", "ok")], 400, "Choose the domains"),
        ([("name", "ok"), ("scope", "*"), ("scope", "example.com")], 400, "not both"),
        ([("name", "ok"), ("scope", "elsewhere.test")], 400, "not a domain of this CDN"),
        ([("name", "ok"), ("scope", "bad host!")], 400, "is not a domain name"),
        ([("name", "deploy"), ("scope", "*")], 409, "already exists"),
    ],
)
async def test_bad_create_forms_are_refused_and_kept(
    signed_in: Dashboard, fields: list[tuple[str, str]], status: int, message: str
) -> None:
    await signed_in.state.create_token("deploy", Scope.everything(), START)
    page = await signed_in.post("/dashboard/tokens", [("csrf", await signed_in.csrf()), *fields])
    assert page.status == status
    assert message in page.words
    assert page.new_token is None
    assert [t.name for t in await signed_in.state.list_tokens()] == ["deploy"]
    name = dict(fields)["name"][:64]
    # what was typed stays in the form
    assert page.html.find("input", name="name").attrs["value"] == name


async def test_regenerate_shows_the_new_token_once_and_the_old_one_stops(
    signed_in: Dashboard,
) -> None:
    old = await signed_in.state.create_token("deploy", Scope.everything(), START)
    signed_in.clock.now += 60
    page = await signed_in.act("/dashboard/tokens/deploy/regenerate")
    assert page.status == 200
    new = page.new_token
    assert new is not None and new != old
    assert await signed_in.clear_via_api(old) == 401
    assert await signed_in.clear_via_api(new) == 200
    [record] = await signed_in.state.list_tokens()
    assert record.created_at == START + 60
    assert (await signed_in.get("/dashboard/tokens")).new_token is None


async def test_revoke_removes_the_token_and_says_so(signed_in: Dashboard) -> None:
    token = await signed_in.state.create_token("deploy", Scope.everything(), START)
    page = await signed_in.act("/dashboard/tokens/deploy/revoke")
    assert page.status == 303
    assert page.location == "/dashboard/tokens?revoked=deploy"
    assert await signed_in.state.list_tokens() == []
    assert await signed_in.clear_via_api(token) == 401
    shown = await signed_in.get(page.location)
    assert "Token “deploy” revoked." in shown.words
    assert "No tokens yet." in shown.words


@pytest.mark.slow
async def test_the_revoked_notice_only_ever_names_a_token(signed_in: Dashboard) -> None:
    page = await signed_in.get("/dashboard/tokens", params={"revoked": "<b>all your base</b>"})
    assert page.status == 200
    assert "revoked." not in page.text  # anywhere, markup too
    assert "all your base" not in page.text  # anywhere, markup too
