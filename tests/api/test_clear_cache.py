"""POST /api/v1/cdn/clear-cache against the real app, store and state database.

Success, then the rejections in the order they are checked: Authorization, media type, size.
The body, scope and routing rejections are in test_clear_cache_body.py.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from multidict import CIMultiDict

from tests.api.support import (
    CHALLENGE,
    DOMAIN,
    DOMAINS,
    IDN,
    INVALID_REQUEST,
    INVALID_TOKEN,
    OTHER,
    START,
    ApiUnderTest,
    assert_rejected,
)

# -- success ------------------------------------------------------------------------------------


async def test_clear_answers_cache_cleared_after_the_domain_is_cleared(api: ApiUnderTest) -> None:
    answer = await api.post(domain=DOMAIN)

    assert answer.status == 200
    assert answer.body == b"Cache cleared"
    assert answer.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert answer.headers["Cache-Control"] == "no-store"
    assert await api.is_cleared(DOMAIN)
    assert await api.is_untouched(OTHER)
    assert await api.is_untouched(IDN)
    [record] = await api.audit()
    assert record.outcome == "cleared"
    assert (record.status, record.entries_dropped) == (200, 1)
    assert (record.actor, record.client, record.domain) == ("deploy", "127.0.0.1", DOMAIN)
    assert record.at == START
    assert record.duration_ms >= 0


@pytest.mark.parametrize(
    ("given", "cleared"),
    [
        ("EXAMPLE.com", DOMAIN),
        ("example.com.", DOMAIN),
        ("Other.Test.", OTHER),
        ("bücher.example", IDN),
        ("BÜCHER.example", IDN),
        (IDN, IDN),
    ],
)
async def test_domain_is_normalised_once_and_used_throughout(
    api: ApiUnderTest, given: str, cleared: str
) -> None:
    answer = await api.post(domain=given)

    assert (answer.status, answer.body) == (200, b"Cache cleared")
    for domain in DOMAINS:
        assert await api.is_cleared(domain) == (domain == cleared)
    [record] = await api.audit()
    assert record.domain == cleared


@pytest.mark.parametrize("authorization", ["bearer {token}", "BEARER {token}", "Bearer   {token}"])
async def test_scheme_is_case_insensitive(api: ApiUnderTest, authorization: str) -> None:
    header = authorization.format(token=api.tokens["deploy"])
    answer = await api.post(token=None, headers={"Authorization": header})
    assert (answer.status, answer.body) == (200, b"Cache cleared")


@pytest.mark.parametrize(
    "content_type",
    ["application/json; charset=utf-8", "Application/JSON", "application/json;charset=UTF-8"],
)
async def test_content_type_parameters_are_allowed(api: ApiUnderTest, content_type: str) -> None:
    answer = await api.post(content_type=content_type)
    assert (answer.status, answer.body) == (200, b"Cache cleared")


async def test_scoped_token_clears_its_own_domain(api: ApiUnderTest) -> None:
    answer = await api.post(domain=OTHER, token="scoped")
    assert answer.status == 200
    assert await api.is_cleared(OTHER)
    assert await api.is_untouched(DOMAIN)
    [record] = await api.audit()
    assert record.actor == "scoped"


async def test_body_of_exactly_the_limit_is_accepted(api: ApiUnderTest) -> None:
    body = json.dumps({"domain": DOMAIN}).encode()
    body += b" " * (api.config.api_role()[0].max_body_bytes - len(body))
    answer = await api.post(body)
    assert answer.status == 200


async def test_chunked_body_is_accepted(api: ApiUnderTest) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"domain": '
        yield b'"example.com"}'

    answer = await api.post(chunks())  # type: ignore[arg-type]
    assert answer.status == 200
    assert await api.is_cleared(DOMAIN)


async def test_a_second_clear_drops_nothing_and_still_succeeds(api: ApiUnderTest) -> None:
    assert (await api.post()).status == 200
    assert (await api.post()).status == 200
    newest, first = await api.audit()
    assert (first.entries_dropped, newest.entries_dropped) == (1, 0)


# -- rejections, in the order they are checked ---------------------------------------------------


@dataclass(frozen=True)
class Case:
    body: bytes | None = None
    token: str | None = "deploy"
    content_type: str | None = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


UNKNOWN_TOKEN = "cdnp_" + "A" * 43

AUTHORIZATION_CASES = [
    pytest.param(Case(token=None), 401, "unauthorized", CHALLENGE, id="missing"),
    pytest.param(
        Case(headers={"Authorization": ""}), 400, "bad_request", INVALID_REQUEST, id="empty"
    ),
    pytest.param(
        Case(headers={"Authorization": "Basic dXNlcjpwYXNz"}),
        400,
        "bad_request",
        INVALID_REQUEST,
        id="basic-scheme",
    ),
    pytest.param(
        Case(headers={"Authorization": "Bearer"}),
        400,
        "bad_request",
        INVALID_REQUEST,
        id="no-token",
    ),
    pytest.param(
        Case(headers={"Authorization": "Bearer abc def"}),
        400,
        "bad_request",
        INVALID_REQUEST,
        id="two-tokens",
    ),
    pytest.param(
        Case(headers={"Authorization": "Bearer abc!def"}),
        400,
        "bad_request",
        INVALID_REQUEST,
        id="not-token68",
    ),
    pytest.param(
        Case(headers={"Authorization": "Bearer tökén"}),
        400,
        "bad_request",
        INVALID_REQUEST,
        id="non-ascii",
    ),
    pytest.param(
        Case(headers={"Authorization": "Bearer\tabc"}),
        400,
        "bad_request",
        INVALID_REQUEST,
        id="tab-separator",
    ),
    pytest.param(
        Case(headers={"Authorization": f"Bearer {UNKNOWN_TOKEN}"}),
        401,
        "unauthorized",
        INVALID_TOKEN,
        id="unknown-token",
    ),
    pytest.param(
        Case(headers={"Authorization": "bearer nope"}),
        401,
        "unauthorized",
        INVALID_TOKEN,
        id="unknown-token-lowercase-scheme",
    ),
    # Authorization is checked before anything about the body.
    pytest.param(
        Case(token=None, content_type="text/plain", body=b"\xff" * 10_000),
        401,
        "unauthorized",
        CHALLENGE,
        id="missing-before-body-checks",
    ),
    pytest.param(
        Case(headers={"Authorization": f"Bearer {UNKNOWN_TOKEN}"}, content_type=None),
        401,
        "unauthorized",
        INVALID_TOKEN,
        id="unknown-before-content-type",
    ),
]


@pytest.mark.parametrize(("case", "status", "outcome", "challenge"), AUTHORIZATION_CASES)
async def test_authorization_is_required_and_checked_first(
    api: ApiUnderTest, case: Case, status: int, outcome: str, challenge: str
) -> None:
    answer = await api.post(
        case.body, token=case.token, content_type=case.content_type, headers=case.headers
    )
    record = await assert_rejected(
        api, answer, status, outcome, headers={"WWW-Authenticate": challenge}
    )
    assert record.actor is None
    assert record.domain is None  # the body of an unknown caller is never read


async def test_two_authorization_headers_are_malformed(api: ApiUnderTest) -> None:
    token = api.tokens["deploy"]
    headers = CIMultiDict(
        [
            ("Authorization", f"Bearer {token}"),
            ("Authorization", f"Bearer {token}"),
            ("Content-Type", "application/json"),
        ]
    )
    answer = await api.send("POST", data=b'{"domain": "example.com"}', headers=headers)
    await assert_rejected(
        api,
        answer,
        400,
        "bad_request",
        headers={"WWW-Authenticate": INVALID_REQUEST},
        detail="more than one",
    )


MEDIA_TYPE_CASES = [
    pytest.param(Case(content_type=None), {"Accept-Post": "application/json"}, id="missing"),
    pytest.param(Case(content_type="text/plain"), {"Accept-Post": "application/json"}, id="text"),
    pytest.param(Case(content_type="application/jsonp"), {}, id="jsonp"),
    pytest.param(Case(content_type="application/problem+json"), {}, id="problem-json"),
    pytest.param(Case(content_type="application/x-www-form-urlencoded"), {}, id="form"),
    pytest.param(Case(content_type="json"), {}, id="no-slash"),
    pytest.param(Case(headers={"Content-Encoding": "gzip"}), {}, id="compressed"),
    # Content-Type is checked before the size.
    pytest.param(Case(content_type="text/plain", body=b"x" * 10_000), {}, id="before-size"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("case", "headers"), MEDIA_TYPE_CASES)
async def test_body_must_be_json(api: ApiUnderTest, case: Case, headers: dict[str, str]) -> None:
    answer = await api.post(case.body, content_type=case.content_type, headers=case.headers)
    record = await assert_rejected(api, answer, 415, "unsupported_media_type", headers=headers)
    assert record.actor == "deploy"


async def test_body_over_the_limit_is_refused_by_content_length(api: ApiUnderTest) -> None:
    body = json.dumps({"domain": DOMAIN}).encode()
    body += b" " * (api.config.api_role()[0].max_body_bytes + 1 - len(body))
    answer = await api.post(body)
    await assert_rejected(api, answer, 413, "too_large", detail="at most 4096 bytes")


async def test_chunked_body_over_the_limit_is_refused_while_reading(api: ApiUnderTest) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"domain": "example.com"'
        for _ in range(100):
            yield b" " * 100
        yield b"}"

    answer = await api.post(chunks())  # type: ignore[arg-type]
    await assert_rejected(api, answer, 413, "too_large")
