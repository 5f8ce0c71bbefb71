"""Cache poisoning through unkeyed request headers.

The origin here behaves like the applications these attacks were found on: it builds its
links, its preload header and its redirects from X-Forwarded-Host and kin, and it routes by
X-Original-URL / X-Rewrite-URL. It reads headers CGI-style (``HTTP_X_FORWARDED_HOST``), so
``X_Forwarded_Host`` means the same to it as ``X-Forwarded-Host`` (Django's CVE-2015-0219
class). Whatever an attacker sends, the victim's copy must be the one the proxy's own
forwarding headers produce, and the origin must never see a client's forwarding header.
"""

from __future__ import annotations

import pytest
from aiohttp import web

from tests.conftest import EdgeUnderTest, Seen
from tests.security.conftest import Site
from tests.security.support import CACHEABLE

# The edge's own view of a test request: what the origin may be told, and nothing else.
PROXY_SET = {
    "x-forwarded-for": "127.0.0.1",
    "x-forwarded-proto": "http",
    "x-forwarded-host": "example.com",
}
# Every forwarding field an application is known to trust, spelled as this test suite's own
# list (not the proxy's, so removing a name from the proxy's list fails these tests).
FORWARDING = frozenset(
    {
        "forwarded",
        "x-forwarded-for",
        "x-forwarded-host",
        "x-forwarded-proto",
        "x-forwarded-port",
        "x-forwarded-server",
        "x-forwarded-scheme",
        "x-forwarded-ssl",
        "x-forwarded-prefix",
        "x-forwarded-uri",
        "x-forwarded-path",
        "x-host",
        "x-http-host-override",
        "x-original-url",
        "x-original-uri",
        "x-original-host",
        "x-rewrite-url",
        "x-real-ip",
        "x-client-ip",
        "true-client-ip",
    }
)
MARKERS = ("evil", "31337")


def environ(request: web.Request) -> dict[str, str]:
    """Request headers as CGI/WSGI sees them: HTTP_ + upper case, '-' and '_' conflated.
    The first field of a name wins."""
    env: dict[str, str] = {}
    for name, value in request.headers.items():
        env.setdefault("HTTP_" + name.upper().replace("-", "_"), value)
    return env


def forwarded_pairs(value: str) -> dict[str, str]:
    pairs = (item.split("=", 1) for item in value.replace(",", ";").split(";") if "=" in item)
    return {key.strip().lower(): val.strip().strip('"') for key, val in pairs}


async def vulnerable_app(request: web.Request) -> web.StreamResponse:
    """Trusts every forwarding header it knows, as the apps in the published attacks do."""
    env = environ(request)
    forwarded = forwarded_pairs(env.get("HTTP_FORWARDED", ""))
    host = (
        env.get("HTTP_X_FORWARDED_HOST")
        or env.get("HTTP_X_HOST")
        or env.get("HTTP_X_FORWARDED_SERVER")
        or env.get("HTTP_X_HTTP_HOST_OVERRIDE")
        or env.get("HTTP_X_ORIGINAL_HOST")
        or forwarded.get("host")
        or request.host
    )
    scheme = (
        env.get("HTTP_X_FORWARDED_SCHEME")
        or env.get("HTTP_X_FORWARDED_PROTO")
        or forwarded.get("proto")
        or "http"
    )
    port = env.get("HTTP_X_FORWARDED_PORT")
    prefix = env.get("HTTP_X_FORWARDED_PREFIX", "")
    base = f"{scheme}://{host}" + (f":{port}" if port else "") + prefix
    path = (
        env.get("HTTP_X_ORIGINAL_URL")
        or env.get("HTTP_X_REWRITE_URL")
        or env.get("HTTP_X_ORIGINAL_URI")
        or env.get("HTTP_X_FORWARDED_URI")
        or env.get("HTTP_X_FORWARDED_PATH")
        or request.raw_path
    )
    client = env.get("HTTP_X_REAL_IP") or env.get("HTTP_X_FORWARDED_FOR", "")
    headers = {"Cache-Control": CACHEABLE, "Link": f"<{base}/static/app.js>; rel=preload"}
    if path == "/login":
        return web.Response(status=301, headers={**headers, "Location": f"{base}/account"})
    body = f'page {path} for {client}\n<script src="{base}/static/app.js"></script>\n'
    return web.Response(text=body, headers=headers)


def clean_page(path: str) -> bytes:
    return (
        f'page {path} for 127.0.0.1\n<script src="http://example.com/static/app.js"></script>\n'
    ).encode()


def assert_not_told(seen: Seen) -> None:
    """The origin heard about the client only from the proxy."""
    assert seen.headers["Host"] == "example.com"
    for name, value in seen.header_items:
        canonical = name.lower().replace("_", "-")
        if canonical in FORWARDING:
            assert name.lower() in PROXY_SET, f"origin received the client's {name}: {value}"
            assert value == PROXY_SET[name.lower()], f"{name}: {value}"
        for marker in MARKERS:
            assert marker not in value, f"origin received {name}: {value}"


ATTACKS = [
    ("X-Forwarded-Host", "evil.example"),
    ("x-forwarded-host", "evil.example"),
    ("X_Forwarded_Host", "evil.example"),
    ("X-Forwarded_Host", "evil.example"),
    ("X-Host", "evil.example"),
    ("X_Host", "evil.example"),
    ("X-Forwarded-Server", "evil.example"),
    ("X-HTTP-Host-Override", "evil.example"),
    ("X-Original-Host", "evil.example"),
    ("X-Forwarded-Scheme", "evil"),
    ("X-Forwarded-Proto", "evil"),
    ("X-Forwarded-Port", "31337"),
    ("X-Forwarded-Prefix", "/evil"),
    ("X-Original-URL", "/evil"),
    ("X_Original_URL", "/evil"),
    ("X-Rewrite-URL", "/evil"),
    ("X-Original-URI", "/evil"),
    ("X-Forwarded-Uri", "/evil"),
    ("X-Forwarded-Path", "/evil"),
    ("Forwarded", "for=192.0.2.1;host=evil.example;proto=https"),
    ("Forwarded", 'host="evil.example"'),
    ("X-Forwarded-For", "evil"),
    ("X-Real-IP", "evil"),
]


@pytest.mark.parametrize(("name", "value"), ATTACKS)
async def test_forwarding_header_never_poisons_the_page(
    edge: EdgeUnderTest, origin: Site, name: str, value: str
) -> None:
    origin.default = vulnerable_app
    attack, _ = await edge.get("/page", headers={name: value})
    assert "stored" in attack.headers["Cache-Status"]

    victim, body = await edge.get("/page")
    assert victim.status == 200
    assert "hit" in victim.headers["Cache-Status"]
    assert body == clean_page("/page")
    assert victim.headers["Link"] == "<http://example.com/static/app.js>; rel=preload"
    for seen in origin.seen:
        assert_not_told(seen)


@pytest.mark.parametrize(("name", "value"), ATTACKS)
async def test_forwarding_header_never_poisons_a_redirect(
    edge: EdgeUnderTest, origin: Site, name: str, value: str
) -> None:
    origin.default = vulnerable_app
    await edge.get("/login", headers={name: value})
    victim, _ = await edge.get("/login")
    assert victim.status == 301
    assert victim.headers["Location"] == "http://example.com/account"
    for seen in origin.seen:
        assert_not_told(seen)


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "OPTIONS"])
async def test_forwarding_headers_are_dropped_on_forwarded_methods(
    edge: EdgeUnderTest, origin: Site, method: str
) -> None:
    origin.default = vulnerable_app
    await edge.get("/form", method=method, data=b"x=1", headers=dict(ATTACKS[:12]))
    [seen] = origin.seen
    assert seen.method == method
    assert_not_told(seen)


async def test_connection_cannot_strip_the_proxy_s_own_forwarding_headers(
    edge: EdgeUnderTest, origin: Site
) -> None:
    """RFC 9110 §7.6.1 makes the proxy drop what Connection names; it must drop only the
    client's fields, never the ones it sets itself."""
    origin.default = vulnerable_app
    hop = "close, X-Forwarded-Host, X-Forwarded-For, X-Forwarded-Proto, Host, Via"
    await edge.get("/conn", headers={"Connection": hop, "X-Forwarded-Host": "evil.example"})
    [seen] = origin.seen
    assert_not_told(seen)
    received = {name.lower(): value for name, value in seen.header_items}
    for name, value in PROXY_SET.items():
        assert received[name] == value
    assert received["via"] == "1.1 cdn-proxy"


@pytest.mark.slow
async def test_a_field_named_in_connection_cannot_poison_a_variant(
    edge: EdgeUnderTest, origin: Site
) -> None:
    """Hop-by-hop abuse: the attacker names Accept-Language in Connection, so the origin never
    sees it and answers with its default variant. Stored as the attacker's "fr" variant, that
    would be served to every French reader."""

    async def by_language(request: web.Request) -> web.StreamResponse:
        language = request.headers.get("Accept-Language", "en")
        return web.Response(
            text=f"page in {language}",
            headers={"Cache-Control": CACHEABLE, "Vary": "Accept-Language"},
        )

    origin.default = by_language
    await edge.get(
        "/v", headers={"Accept-Language": "fr", "Connection": "keep-alive, Accept-Language"}
    )
    assert "Accept-Language" not in origin.seen[0].headers

    _, body = await edge.get("/v", headers={"Accept-Language": "fr"})
    assert body == b"page in fr"
    assert origin.seen[-1].headers["Accept-Language"] == "fr"
    # A normal request still fills and shares the variant.
    again, body = await edge.get("/v", headers={"Accept-Language": "fr"})
    assert body == b"page in fr"
    assert "hit" in again.headers["Cache-Status"]
