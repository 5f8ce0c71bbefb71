"""Web cache deception: the attacker lures a logged-in victim to ``/account/x.css`` (or
``;x.css``, ``%0ax.css``, ``%3fx.css``), the origin's framework ignores the suffix and
answers with the victim's account page, and a cache that judges by the path stores it for
the attacker to fetch.

This cache judges by the response and the request alone: a response that is private, sets a
cookie, or answers a request with Authorization is never served to another client, whatever
the path looks like, on a domain with heuristic freshness too.
"""

from __future__ import annotations

import asyncio
from email.utils import formatdate
from urllib.parse import unquote

import pytest
from aiohttp import web

from tests.conftest import EdgeFactory, EdgeUnderTest, Handler
from tests.polling import until
from tests.security.conftest import Site

DECEPTIVE_PATHS = [
    "/account",
    "/account/x.css",
    "/account/..%2fx.css",
    "/account;x.css",
    "/account%0ax.css",
    "/account%3fx.css",
    "/account%23x.css",
    "/account%00x.css",
    "/account.css",
    "/account/x.css?v=1",
]

# How each kind of protected answer is asked for and marked.
PROTECTIONS = {
    "private": ({"Cookie": "session=alice"}, {"Cache-Control": "private, max-age=60"}),
    "set-cookie": (
        {"Cookie": "session=alice"},
        {"Cache-Control": "max-age=60", "Set-Cookie": "session=alice2; HttpOnly"},
    ),
    "authorization": ({"Authorization": "Bearer alice"}, {"Cache-Control": "max-age=60"}),
    "no-store": ({"Cookie": "session=alice"}, {"Cache-Control": "no-store"}),
    "no-freshness": ({"Cookie": "session=alice"}, {}),
}


def framework_route(raw_path: str) -> str:
    """The route a lenient framework dispatches to: decoded, and cut at ';', a line break, a
    '?' or '#' that arrived encoded, or a NUL; anything under /account is the account page."""
    path = unquote(raw_path.partition("?")[0])
    for cut in (";", "\n", "?", "#", "\x00"):
        path = path.split(cut)[0]
    return "/account" if path.startswith("/account") else path


def account_app(protection: str) -> Handler:
    marks = PROTECTIONS[protection][1]

    async def app(request: web.Request) -> web.StreamResponse:
        if framework_route(request.raw_path) != "/account":
            return web.Response(status=404, text="not found")
        cookie = request.headers.get("Cookie", "")
        authorization = request.headers.get("Authorization", "")
        if "alice" in cookie or "alice" in authorization:
            # Last-Modified tempts heuristic freshness where the domain allows it.
            headers = {**marks, "Last-Modified": formatdate(0, usegmt=True)}
            return web.Response(text="account of alice: card 4111-1111", headers=headers)
        return web.Response(text="please log in", headers={"Cache-Control": "no-store"})

    return app


@pytest.mark.parametrize("heuristic", [False, True], ids=["plain", "heuristic"])
@pytest.mark.parametrize("protection", list(PROTECTIONS))
@pytest.mark.parametrize("path", DECEPTIVE_PATHS)
async def test_protected_answer_is_never_served_to_another_client(
    make_edge: EdgeFactory, origin: Site, path: str, protection: str, heuristic: bool
) -> None:
    edge = await make_edge(
        domains=[{"name": "example.com", "origin": origin.url, "heuristic_freshness": heuristic}]
    )
    origin.default = account_app(protection)
    credentials = PROTECTIONS[protection][0]

    victim, body = await edge.get(path, headers=credentials)
    assert body == b"account of alice: card 4111-1111"
    assert "stored" not in victim.headers["Cache-Status"]

    attacker, body = await edge.get(path)
    assert b"alice" not in body
    assert body == b"please log in"
    assert "Set-Cookie" not in attacker.headers
    assert [seen.target for seen in origin.seen] == [path, path]
    assert (await edge.store.stats()).entries == 0


@pytest.mark.slow
@pytest.mark.parametrize("protection", ["private", "set-cookie", "authorization"])
async def test_a_waiter_never_gets_the_leader_s_protected_answer(
    edge: EdgeUnderTest, origin: Site, protection: str
) -> None:
    """Request collapsing: the attacker's request arrives while the victim's fill is at the
    origin, and joins it. The victim's answer must not be handed to the attacker."""
    app = account_app(protection)
    release = asyncio.Event()

    async def held(request: web.Request) -> web.StreamResponse:
        await release.wait()
        return await app(request)

    origin.default = held
    path = "/account/x.css"
    victim = asyncio.create_task(edge.get(path, headers=PROTECTIONS[protection][0]))
    await until(lambda: len(origin.seen) == 1)
    attacker = asyncio.create_task(edge.get(path))
    flight = edge.edge.flights.get(("example.com", 0, path))
    assert flight is not None
    await until(lambda: flight.waiters == 1)
    release.set()

    (_, victim_body), (_, attacker_body) = await asyncio.gather(victim, attacker)
    assert victim_body == b"account of alice: card 4111-1111"
    assert attacker_body == b"please log in"
    assert len(origin.seen) == 2
