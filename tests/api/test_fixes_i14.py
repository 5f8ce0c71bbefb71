"""Fixes found while trying the control plane as an operator (issue 14 §8): the purge
client's options, and the domain that the audit history shows for refused requests."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tests.api.support import DOMAIN
from tests.nodes import cli

ServerFactory = Callable[..., Awaitable[TestServer]]


async def recording_api(aiohttp_server: ServerFactory, seen: list[str]) -> str:
    """A stand-in API that records every request it gets and clears nothing."""

    async def record(request: web.Request) -> web.Response:
        seen.append(f"{request.method} {request.host}{request.path}")
        return web.Response(text="Cache cleared")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    server = await aiohttp_server(app)
    return str(server.make_url("")).rstrip("/")


@pytest.mark.parametrize("option", ["--url", "--token"])
async def test_purge_refuses_an_option_given_twice(
    aiohttp_server: ServerFactory, option: str
) -> None:
    """``purge --url A --url B`` sent one request, to B, and printed success: the second
    value silently replaced the first. Now the repetition is refused, and nothing is sent."""
    seen: list[str] = []
    first = await recording_api(aiohttp_server, seen)
    second = await recording_api(aiohttp_server, seen)
    values = [first, second] if option == "--url" else ["token-a", "token-b"]
    args = ["purge", DOMAIN, option, values[0], option, values[1]]
    if option == "--token":
        args += ["--url", first]
    else:
        args += ["--token", "t"]
    code, out, err = await cli(*args)
    assert code == 2
    assert out == ""
    assert f"{option} given more than once" in err
    assert "Traceback" not in err
    assert seen == []


async def test_purge_says_it_clears_domains_not_urls(aiohttp_server: ServerFactory) -> None:
    seen: list[str] = []
    url = await recording_api(aiohttp_server, seen)
    code, _, err = await cli("purge", "https://example.com/page", "--url", url, "--token", "t")
    assert code == 2
    assert err.strip() == (
        "cdn-proxy: 'https://example.com/page' is not a domain: purge clears a whole domain's "
        "cache (clearing single URLs is not supported yet)"
    )
    assert seen == []
