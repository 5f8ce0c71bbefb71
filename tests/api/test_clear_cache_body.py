"""The body, scope and existence checks of clear-cache, the routes around it, and the 500 net."""

from __future__ import annotations

import logging

import pytest
from aiohttp import web

from proxy.api import problems
from tests.api.support import (
    DOMAIN,
    INSUFFICIENT_SCOPE,
    OTHER,
    AiohttpClient,
    ApiUnderTest,
    assert_rejected,
)

BAD_BODIES = [
    pytest.param(b"\xff\xfe{}", "not UTF-8", None, id="not-utf8"),
    pytest.param(b"", "empty", None, id="empty"),
    pytest.param(b"  \r\n ", "empty", None, id="blank"),
    pytest.param(b"{", "not valid JSON", None, id="truncated"),
    pytest.param(b'{"domain": "example.com"} x', "not valid JSON", None, id="trailing-junk"),
    pytest.param(b'\xef\xbb\xbf{"domain": "example.com"}', "not valid JSON", None, id="bom"),
    pytest.param(b"[" * 3000, "not valid JSON", None, id="deeply-nested"),
    pytest.param(b'{"domain": NaN}', "not valid JSON", None, id="nan"),
    pytest.param(b"[]", "JSON object", None, id="array"),
    pytest.param(b'"example.com"', "JSON object", None, id="string"),
    pytest.param(b"null", "JSON object", None, id="null"),
    pytest.param(b"{}", "'domain' is required", None, id="no-domain"),
    pytest.param(b'{"Domain": "example.com"}', "'domain' is required", None, id="wrong-case"),
    pytest.param(b'{"domain": 1}', "must be a string", None, id="number"),
    pytest.param(b'{"domain": null}', "must be a string", None, id="domain-null"),
    pytest.param(b'{"domain": ["example.com"]}', "must be a string", None, id="list"),
    pytest.param(b'{"domain": true}', "must be a string", None, id="bool"),
    pytest.param(b'{"domain": ""}', "must not be empty", "", id="empty-string"),
    pytest.param(b'{"domain": " example.com"}', "not a host name", " example.com", id="space"),
    pytest.param(b'{"domain": "example.com:443"}', "not a host name", "example.com:443", id="port"),
    pytest.param(
        b'{"domain": "https://example.com/"}',
        "not a host name",
        "https://example.com/",
        id="url",
    ),
    pytest.param(b'{"domain": "a..b"}', "not a host name", "a..b", id="empty-label"),
    pytest.param(b'{"domain": "*.example.com"}', "not a host name", "*.example.com", id="wild"),
    pytest.param(
        b'{"domain": "\\ud800.example"}', "not a host name", "\\ud800.example", id="surrogate"
    ),
    pytest.param(
        b'{"domain": "' + b"a" * 300 + b'.com"}', "not a host name", "a" * 255, id="too-long"
    ),
    pytest.param(
        b'{"domain": "example.com", "force": true}',
        "unknown fields: 'force'",
        "example.com",  # it named one (issue 14 §8)
        id="extra",
    ),
    pytest.param(
        b'{"domain": "example.com", "domain": "other.test"}',
        "'domain' more than once",
        None,
        id="duplicate",
    ),
]


@pytest.mark.parametrize(("body", "detail", "audited_domain"), BAD_BODIES)
async def test_body_must_name_one_host(
    api: ApiUnderTest, body: bytes, detail: str, audited_domain: str | None
) -> None:
    answer = await api.post(body)
    record = await assert_rejected(api, answer, 400, "bad_request", detail=detail)
    assert "WWW-Authenticate" not in answer.headers  # the token was fine
    assert record.actor == "deploy"
    assert record.domain == audited_domain  # as given (bounded) when it was a string


async def test_scope_that_does_not_cover_the_domain_is_forbidden(api: ApiUnderTest) -> None:
    answer = await api.post(domain="EXAMPLE.COM", token="scoped")
    record = await assert_rejected(
        api,
        answer,
        403,
        "forbidden",
        headers={"WWW-Authenticate": INSUFFICIENT_SCOPE},
        detail="'example.com'",
    )
    assert (record.actor, record.domain) == ("scoped", DOMAIN)


async def test_unknown_domain_is_not_found(api: ApiUnderTest) -> None:
    answer = await api.post(domain="Unknown.Example")
    record = await assert_rejected(api, answer, 404, "not_found", detail="'unknown.example'")
    assert (record.actor, record.domain) == ("deploy", "unknown.example")


async def test_scoped_token_cannot_probe_which_domains_exist(api: ApiUnderTest) -> None:
    answer = await api.post(domain="unknown.example", token="scoped")
    await assert_rejected(
        api, answer, 403, "forbidden", headers={"WWW-Authenticate": INSUFFICIENT_SCOPE}
    )


@pytest.mark.parametrize("method", ["GET", "HEAD", "PUT", "PATCH", "DELETE", "OPTIONS"])
async def test_other_methods_are_not_allowed(api: ApiUnderTest, method: str) -> None:
    token = api.tokens["deploy"]
    answer = await api.send(method, headers={"Authorization": f"Bearer {token}"})

    assert answer.status == 405
    assert answer.headers.getall("Allow") == ["POST"]
    assert answer.headers["Cache-Control"] == "no-store"
    if method != "HEAD":
        assert answer.problem()["status"] == 405
    for domain in (DOMAIN, OTHER):
        assert await api.is_untouched(domain)
    assert await api.audit() == []  # not a clear-cache attempt: the handler never ran


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/api/v1/cdn/clear-cache/",
        "/api/v1/cdn/clear-cache/example.com",
        "/api/v2/cdn/clear-cache",
        "/API/V1/CDN/CLEAR-CACHE",
    ],
)
async def test_unknown_paths_are_problems(api: ApiUnderTest, path: str) -> None:
    answer = await api.send("POST", path, data=b'{"domain": "example.com"}')

    assert answer.status == 404
    assert answer.headers["Cache-Control"] == "no-store"
    assert answer.problem() == {
        "type": "about:blank",
        "title": "Not Found",
        "status": 404,
        "detail": "there is no such resource",
    }
    assert await api.is_untouched(DOMAIN)


async def test_healthz(api: ApiUnderTest) -> None:
    answer = await api.send("GET", "/healthz")
    assert (answer.status, answer.body) == (200, b"ok")
    assert answer.headers["Content-Type"] == "text/plain; charset=utf-8"


async def test_every_answer_says_nosniff(api: ApiUnderTest) -> None:
    for answer in (await api.post(), await api.post(token=None), await api.send("GET", "/x")):
        assert answer.headers["X-Content-Type-Options"] == "nosniff"


async def test_unexpected_errors_become_a_bare_500_problem(
    aiohttp_client: AiohttpClient, caplog: pytest.LogCaptureFixture
) -> None:
    """The safety net itself, on an app with a broken handler (no real input reaches it)."""

    async def broken(request: web.Request) -> web.Response:
        raise RuntimeError("secret internals")

    app = web.Application()
    problems.install(app)
    app.router.add_get("/broken", broken)
    client = await aiohttp_client(app)

    with caplog.at_level(logging.ERROR, logger="proxy.api"):
        async with client.get("/broken") as response:
            body = await response.text()

    assert response.status == 500
    assert response.headers["Content-Type"] == "application/problem+json"
    assert "secret internals" not in body
    assert "Traceback" not in body
    assert "secret internals" in caplog.text  # the operator gets the details
