"""Unkeyed and cloaked query parameters, and fat GET requests.

The origin parses the query like the lenient frameworks of the parameter-cloaking research:
it decodes before splitting, splits on both '&' and ';', and lets the last value win; for a
GET it also reads form parameters from the body (Tornado, some Rails set-ups). It reflects
``callback`` into a JSONP body. A cache that keys on less than the whole target (dropping
utm_* parameters, splitting only on '&', ignoring the body) lets an attacker store
``evil(...)`` under a victim's key.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

import pytest
from aiohttp import web

from tests.conftest import EdgeUnderTest
from tests.security.conftest import Site
from tests.security.support import CACHEABLE, exchange


def lenient_params(text: str) -> dict[str, str]:
    params: dict[str, str] = {}
    for pair in re.split("[&;]", unquote(text)):
        name, _, value = pair.partition("=")
        if name:
            params[name] = value
    return params


async def jsonp(request: web.Request) -> web.StreamResponse:
    path, _, query = request.raw_path.partition("?")
    params = lenient_params(query)
    params.update(lenient_params(path.partition(";")[2]))  # matrix parameters
    if request.method == "GET" and request.body_exists:
        params.update(lenient_params((await request.read()).decode("latin-1")))
    callback = params.get("callback", "cb")
    return web.Response(text=f"{callback}({{}})", headers={"Cache-Control": CACHEABLE})


# (what the attacker sends, what the victim asks for)
CLOAKED = [
    ("/jsonp?utm_content=x;callback=evil", "/jsonp"),
    ("/jsonp?utm_content=x;callback=evil", "/jsonp?utm_content=x"),
    ("/jsonp?callback=cb&utm_content=x;callback=evil", "/jsonp?callback=cb"),
    ("/jsonp?callback=cb;callback=evil", "/jsonp?callback=cb"),
    ("/jsonp?callback=cb&callback=evil", "/jsonp?callback=cb"),
    ("/jsonp?callback=cb%26callback=evil", "/jsonp?callback=cb"),
    ("/jsonp?callback=cb%3bcallback=evil", "/jsonp?callback=cb"),
    ("/jsonp?callback=evil", "/jsonp"),
    ("/jsonp?Callback=x&callback=evil", "/jsonp?Callback=x"),
    ("/jsonp;callback=evil", "/jsonp"),
    ("/jsonp;callback=evil?callback=cb", "/jsonp?callback=cb"),
    ("/jsonp?callback=cb#;callback=evil", "/jsonp?callback=cb"),
]


@pytest.mark.parametrize(("attack", "victim"), CLOAKED)
async def test_cloaked_parameters_never_reach_another_key(
    edge: EdgeUnderTest, origin: Site, attack: str, victim: str
) -> None:
    origin.default = jsonp
    await edge.get(attack)

    response, body = await edge.get(victim)
    assert response.status == 200
    assert body == b"cb({})"
    # Whether it was a hit or not, the answer came from an origin request for exactly the
    # victim's target (a fragment never reaches the origin, so "#..." may share the entry).
    assert victim in [seen.target for seen in origin.seen]
    response, body = await edge.get(victim)
    assert body == b"cb({})"
    assert "hit" in response.headers["Cache-Status"]


FORM = {"Content-Type": "application/x-www-form-urlencoded"}


async def test_fat_get_is_not_stored_under_the_bodiless_key(
    edge: EdgeUnderTest, origin: Site
) -> None:
    origin.default = jsonp
    attack, body = await edge.get("/jsonp", data=b"callback=evil", headers=FORM)
    assert body == b"evil({})"  # the attacker's own answer, from the origin
    assert "stored" not in attack.headers["Cache-Status"]
    assert edge.store.held(("example.com", 0, "/jsonp")) is None

    _, body = await edge.get("/jsonp")
    assert body == b"cb({})"
    assert origin.seen[-1].body == b""
    assert "hit" in (await edge.get("/jsonp"))[0].headers["Cache-Status"]


async def test_fat_get_does_not_replace_a_stored_entry(edge: EdgeUnderTest, origin: Site) -> None:
    origin.default = jsonp
    await edge.get("/jsonp")
    await edge.get("/jsonp", data=b"callback=evil", headers=FORM)
    victim, body = await edge.get("/jsonp")
    assert body == b"cb({})"
    assert "hit" in victim.headers["Cache-Status"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "framing",
    [
        b"Content-Length: 13\r\n\r\ncallback=evil",
        b"Transfer-Encoding: chunked\r\n\r\nd\r\ncallback=evil\r\n0\r\n\r\n",
    ],
)
async def test_fat_get_over_the_wire(edge: EdgeUnderTest, origin: Site, framing: bytes) -> None:
    """Both framings of a GET body, as a raw client sends them."""
    origin.default = jsonp
    head = b"GET /jsonp HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n"
    answer = await exchange(edge.url, head + framing)
    [response] = answer.responses
    assert response.status == 200
    assert edge.store.held(("example.com", 0, "/jsonp")) is None
    _, body = await edge.get("/jsonp")
    assert body == b"cb({})"
