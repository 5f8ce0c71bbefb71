"""Issue 24, "Decide": fields a front end writes about the client or the user reach the origin
only from a trusted proxy, and a framing field spelled with '_' never does.

The X-Forwarded-* family beyond the trio the edge writes (X-Forwarded-User, -Email, -Groups,
-Client-Cert: how oauth2-proxy and mTLS terminators name the user to an application) and the
client-address aliases of other proxies are how an application decides who is calling; a
client that could set them through the edge would choose its identity. The origin here
records what it saw; the lists are this test's own, so dropping a name from the proxy's
fails it."""

from __future__ import annotations

import pytest

from tests.conftest import EdgeFactory, EdgeUnderTest, Origin

IDENTITY = {
    "X-Forwarded-User": "admin",
    "X-Forwarded-Email": "admin@example.com",
    "X-Forwarded-Groups": "admins",
    "X-Forwarded-Client-Cert": 'Hash=abc;Subject="CN=admin"',
    "X-Forwarded-Protocol": "https",
    "X-Forwarded": "for=203.0.113.9",
    "Front-End-Https": "on",
    "X-Url-Scheme": "https",
    "CF-Connecting-IP": "203.0.113.9",
    "X-Cluster-Client-IP": "203.0.113.9",
    "Client-IP": "203.0.113.9",
    "X-Originating-IP": "203.0.113.9",
    "X-ProxyUser-Ip": "203.0.113.9",
    "X-Original-Forwarded-For": "203.0.113.9",
    "X-Forwarded-Anything-New": "x",
}
# The edge's own trio, whatever the client sent.
TRIO = {
    "X-Forwarded-For": "127.0.0.1",
    "X-Forwarded-Proto": "http",
    "X-Forwarded-Host": "example.com",
}


def cgi(name: str) -> str:
    """How a CGI/WSGI origin reads a name: '-' and '_' are one."""
    return name.lower().replace("_", "-")


def seen_names(origin: Origin, target: str) -> set[str]:
    [seen] = [s for s in origin.seen if s.target == target]
    return {cgi(name) for name, _ in seen.header_items}


@pytest.mark.parametrize("method", ["GET", "POST"])
@pytest.mark.parametrize("spelling", ["dash", "underscore"])
async def test_a_client_cannot_name_itself_or_its_user_to_the_origin(
    edge: EdgeUnderTest, origin: Origin, method: str, spelling: str
) -> None:
    target = f"/who-{method}-{spelling}"
    origin.reply(target, b"page", headers={"Cache-Control": "max-age=60"})
    sent = {
        (name.replace("-", "_") if spelling == "underscore" else name): value
        for name, value in IDENTITY.items()
    }
    response, body = await edge.get(target, method=method, headers=sent)
    assert (response.status, body) == (200, b"page")
    names = seen_names(origin, target)
    leaked = names & {cgi(name) for name in IDENTITY}
    assert not leaked, leaked
    [seen] = [s for s in origin.seen if s.target == target]
    for name, value in TRIO.items():
        assert seen.headers[name] == value


async def test_a_trusted_proxy_names_the_user_to_the_origin(
    make_edge: EdgeFactory, origin: Origin
) -> None:
    """From a trusted proxy (the front end the operator configured) the fields pass as sent;
    the trio is still the edge's own, walked from X-Forwarded-For."""
    edge = await make_edge(
        edge={"listen": "127.0.0.1:0", "shutdown_timeout": 5, "trusted_proxies": ["127.0.0.1"]}
    )
    origin.reply("/me", b"you", headers={"Cache-Control": "private"})
    response, _ = await edge.get("/me", headers={**IDENTITY, "X-Forwarded-For": "198.51.100.4"})
    assert response.status == 200
    [seen] = [s for s in origin.seen if s.target == "/me"]
    for name, value in IDENTITY.items():
        assert seen.headers[name] == value, name
    assert seen.headers["X-Forwarded-For"] == "198.51.100.4"


@pytest.mark.slow
@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_framing_fields_spelled_with_an_underscore_are_dropped(
    edge: EdgeUnderTest, origin: Origin, method: str
) -> None:
    """``Content_Length`` and ``Transfer_Encoding`` would frame the request at an origin
    that reads '_' as '-'; the origin gets neither, and the body it gets is the real one."""
    target = f"/framing-{method}"
    origin.reply(target, b"ok", headers={"Cache-Control": "no-store"})
    data = b"body" if method == "POST" else None
    headers = {"Content_Length": "0", "Transfer_Encoding": "chunked"}
    response, _ = await edge.get(target, method=method, headers=headers, data=data)
    assert response.status == 200
    [seen] = [s for s in origin.seen if s.target == target]
    names = {name.lower() for name, _ in seen.header_items}
    assert not names & {"content_length", "transfer_encoding"}
    assert seen.body == (data or b"")
