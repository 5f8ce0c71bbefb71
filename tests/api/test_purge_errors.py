"""POST /api/v1/cdn/purge against the clear-cache error matrix: every refusal is a problem+json
4xx (or 503) naming what to fix, changes nothing, and writes one audit record with the
kind, once the body named one (decision 0025)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from proxy.core.purge.purges import MAX_ITEMS, MAX_TARGET_CHARS
from proxy.core.routes import CLEAR_CACHE_PATH
from proxy.errors import ConfigError
from tests.api.purge_support import FAILURES, PURGE, FailingPurger, post_purge
from tests.api.support import (
    CHALLENGE,
    DOMAIN,
    INSUFFICIENT_SCOPE,
    INVALID_REQUEST,
    INVALID_TOKEN,
    ApiFactory,
    ApiUnderTest,
    api_config,
    assert_rejected,
)

URLS = {"domain": DOMAIN, "urls": ["/x"]}

# (body, what the detail says, the kind the audit record names: "unknown" when it named none)
BAD_BODIES: list[tuple[Any, str, str]] = [
    ({}, "the field 'domain' is required", "unknown"),
    ({"urls": ["/x"]}, "the field 'domain' is required", "url"),
    ({"domain": DOMAIN}, "one of the fields 'urls', 'prefixes', 'tags' or 'all'", "unknown"),
    ({"domain": DOMAIN, "urls": ["/x"], "tags": ["t"]}, "not 'urls' and 'tags'", "unknown"),
    ({"domain": DOMAIN, "all": True, "prefixes": ["/"]}, "not 'prefixes' and 'all'", "unknown"),
    ({**URLS, "purge": "now"}, "unknown fields: 'purge'", "url"),
    ({**URLS, "Soft": True}, "unknown fields: 'Soft'", "url"),
    ({"domain": 7, "urls": ["/x"]}, "the field 'domain' must be a string", "url"),
    ({"domain": "", "urls": ["/x"]}, "the field 'domain' must not be empty", "url"),
    ({"domain": "exa mple.com", "urls": ["/x"]}, "is not a host name", "url"),
    ({"domain": DOMAIN, "urls": "/x"}, "the field 'urls' must be a list of strings", "url"),
    ({"domain": DOMAIN, "prefixes": {"/": 1}}, "'prefixes' must be a list", "prefix"),
    ({"domain": DOMAIN, "tags": None}, "'tags' must be a list of strings", "tag"),
    ({"domain": DOMAIN, "urls": []}, "the field 'urls' must not be empty", "url"),
    ({"domain": DOMAIN, "tags": []}, "the field 'tags' must not be empty", "tag"),
    (
        {"domain": DOMAIN, "urls": [f"/{n}" for n in range(MAX_ITEMS + 1)]},
        f"has {MAX_ITEMS + 1} items; at most {MAX_ITEMS}",
        "url",
    ),
    ({"domain": DOMAIN, "urls": [7]}, "url items must be strings, not int", "url"),
    ({"domain": DOMAIN, "urls": [None]}, "url items must be strings", "url"),
    ({"domain": DOMAIN, "urls": ["x"]}, "the field 'urls': url 'x' must be a path", "url"),
    ({"domain": DOMAIN, "urls": ["/a b"]}, "must be a path", "url"),
    ({"domain": DOMAIN, "urls": ["/é"]}, "must be a path", "url"),
    ({"domain": DOMAIN, "urls": ["/" + "a" * MAX_TARGET_CHARS]}, "at most 8190", "url"),
    ({"domain": DOMAIN, "prefixes": ["assets/"]}, "the field 'prefixes': prefix", "prefix"),
    ({"domain": DOMAIN, "prefixes": [""]}, "must be a path", "prefix"),
    ({"domain": DOMAIN, "tags": ["a,b"]}, "the field 'tags': tag 'a,b'", "tag"),
    ({"domain": DOMAIN, "tags": [""]}, "visible ASCII", "tag"),
    ({"domain": DOMAIN, "tags": ["a b"]}, "visible ASCII", "tag"),
    ({"domain": DOMAIN, "tags": ["t" * 257]}, "1-256", "tag"),
    ({"domain": DOMAIN, "all": False}, "the field 'all' must be true", "all"),
    ({"domain": DOMAIN, "all": 1}, "the field 'all' must be true", "all"),
    ({"domain": DOMAIN, "all": "true"}, "the field 'all' must be true", "all"),
    ({**URLS, "soft": "yes"}, "the field 'soft' must be true or false", "url"),
    ({**URLS, "soft": 1}, "the field 'soft' must be true or false", "url"),
    ({**URLS, "dry_run": None}, "the field 'dry_run' must be true or false", "url"),
    ({"domain": DOMAIN, "all": True, "dry_run": 0}, "'dry_run' must be true or false", "all"),
    ([URLS], "the body must be a JSON object", "unknown"),
    ("example.com", "the body must be a JSON object", "unknown"),
]


@pytest.mark.parametrize(("body", "detail", "kind"), BAD_BODIES)
async def test_a_bad_body_is_400_naming_the_field(
    api: ApiUnderTest, body: Any, detail: str, kind: str
) -> None:
    answer = await post_purge(api, json.dumps(body).encode())
    record = await assert_rejected(api, answer, 400, "bad_request", detail=detail)
    assert (record.actor, record.kind, record.receipt) == ("deploy", kind, None)


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        (b"", "the body is empty"),
        (b"  \n", "the body is empty"),
        (b"\xff\xfe", "the body is not UTF-8"),
        (b'{"domain": "example.com", "urls": ["/x"]', "the body is not valid JSON"),
        (b'{"domain": "example.com", "urls": [NaN]}', "the body is not valid JSON"),
        (b'{"domain": "example.com", "all": Infinity}', "the body is not valid JSON"),
        (b'{"domain": "example.com", "urls": ["/a"], "urls": ["/b"]}', "'urls' more than once"),
        (b'{"domain": "example.com", "domain": "other.test", "all": true}', "'domain' more"),
        (b"[" * 100_000, "the body is not valid JSON"),
    ],
)
async def test_a_body_that_is_not_one_json_object_is_400(
    api: ApiUnderTest, body: bytes, detail: str
) -> None:
    answer = await post_purge(api, body)
    await assert_rejected(api, answer, 400, "bad_request", detail=detail)


@pytest.mark.parametrize(
    ("authorization", "status", "outcome", "challenge"),
    [
        (None, 401, "unauthorized", CHALLENGE),
        ("Basic abc", 400, "bad_request", INVALID_REQUEST),
        ("Bearer", 400, "bad_request", INVALID_REQUEST),
        ("Bearer cdnp_wrong", 401, "unauthorized", INVALID_TOKEN),
    ],
)
async def test_authorization_is_checked_before_the_body(
    api: ApiUnderTest,
    authorization: str | None,
    status: int,
    outcome: str,
    challenge: str,
) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    answer = await post_purge(api, token=None, headers=headers)
    record = await assert_rejected(
        api, answer, status, outcome, headers={"WWW-Authenticate": challenge}
    )
    # The body of an unknown caller is not read: no domain, and no kind it named.
    assert (record.actor, record.domain, record.kind) == (None, None, "unknown")


async def test_wrong_tokens_are_throttled_across_clear_and_purge(make_api: ApiFactory) -> None:
    """One limiter for both endpoints: failures on clear-cache count against purges."""
    api = await make_api(auth_failures_allowed=2)
    wrong = {"Authorization": "Bearer cdnp_wrong"}
    assert (await api.post(token=None, headers=wrong)).status == 401
    assert (await post_purge(api, token=None, headers=wrong)).status == 401
    answer = await post_purge(api, token=None, headers=wrong)
    assert answer.status == 429
    assert int(answer.headers["Retry-After"]) > 0
    assert answer.problem()["detail"].startswith("too many failed authentications")
    [record, *_] = await api.audit()
    assert (record.outcome, record.kind) == ("rate_limited", "unknown")
    # A right token still gets through.
    assert (await post_purge(api)).status == 200


async def test_a_scoped_token_may_not_purge_another_domain(api: ApiUnderTest) -> None:
    answer = await post_purge(api, {"domain": DOMAIN, "tags": ["t"]}, token="scoped")
    scope = {"WWW-Authenticate": INSUFFICIENT_SCOPE}
    detail = "this token may not purge 'example.com'"
    record = await assert_rejected(api, answer, 403, "forbidden", headers=scope, detail=detail)
    assert (record.actor, record.domain, record.kind) == ("scoped", DOMAIN, "tag")


async def test_scope_comes_before_the_domain_list(api: ApiUnderTest) -> None:
    answer = await post_purge(api, {"domain": "unknown.example", "all": True}, token="scoped")
    await assert_rejected(api, answer, 403, "forbidden")


async def test_an_unknown_domain_is_404(api: ApiUnderTest) -> None:
    answer = await post_purge(api, {"domain": "Unknown.Example.", "prefixes": ["/"]})
    record = await assert_rejected(
        api, answer, 404, "not_found", detail="'unknown.example' is not a domain of this CDN"
    )
    assert (record.domain, record.kind) == ("unknown.example", "prefix")


@pytest.mark.parametrize(
    ("content_type", "headers", "detail"),
    [
        (None, {}, "Content-Type: application/json"),
        ("text/plain", {}, "Content-Type: application/json"),
        ("application/x-www-form-urlencoded", {}, "Content-Type: application/json"),
        ("application/json", {"Content-Encoding": "gzip"}, "must not be compressed"),
    ],
)
async def test_the_media_type_must_be_plain_json(
    api: ApiUnderTest, content_type: str | None, headers: dict[str, str], detail: str
) -> None:
    answer = await post_purge(
        api, {"domain": DOMAIN, "tags": ["t"]}, content_type=content_type, headers=headers
    )
    record = await assert_rejected(api, answer, 415, "unsupported_media_type", detail=detail)
    if "Content-Encoding" not in headers:
        # As for clears: what a small body named is in the record, though it was not used.
        assert (record.domain, record.kind) == (DOMAIN, "tag")


async def test_a_body_over_the_purge_limit_is_413(make_api: ApiFactory) -> None:
    api = await make_api(max_purge_body_bytes="1KiB")
    body = json.dumps({"domain": DOMAIN, "urls": [f"/{n:04}" for n in range(200)]}).encode()
    answer = await post_purge(api, body)
    await assert_rejected(api, answer, 413, "too_large", detail="at most 1024 bytes")


async def test_a_chunked_body_over_the_limit_is_413_while_read(make_api: ApiFactory) -> None:
    api = await make_api(max_purge_body_bytes="1KiB")

    async def chunks() -> Any:
        yield b'{"domain": "example.com", "urls": ['
        for n in range(200):
            yield f'"/{n:04}", '.encode()

    answer = await post_purge(api, chunks())
    await assert_rejected(api, answer, 413, "too_large")


async def test_the_purge_limit_is_not_the_clear_limit(api: ApiUnderTest) -> None:
    """256 URLs do not fit in clear-cache's 4 KiB; the default purge limit (1 MiB) takes
    256 targets of 4,000 characters."""
    urls = [f"/{n:03}" + "a" * 3996 for n in range(MAX_ITEMS)]
    body = json.dumps({"domain": DOMAIN, "urls": urls}).encode()
    assert 4096 < len(body) < 1024**2
    answer = await post_purge(api, body)
    assert answer.status == 200, answer.body
    [record] = await api.audit()
    receipt = json.loads(record.receipt or "")
    assert receipt["items"] == urls[:20] and receipt["items_total"] == MAX_ITEMS


@pytest.mark.parametrize(
    ("path", "kind"), [(PURGE, "unknown"), (CLEAR_CACHE_PATH, None)], ids=["purge", "clear"]
)
async def test_a_body_that_stops_arriving_is_408_and_closed(
    make_api: ApiFactory, path: str, kind: str | None
) -> None:
    """A purge's and a clear's refusal alike (gate.refusal): the 408 ends the connection."""
    api = await make_api(body_timeout=0.5)
    server = api.client.server
    reader, writer = await asyncio.open_connection(server.host, server.port)
    head = (
        f"POST {path} HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer {api.tokens['deploy']}\r\n"
        "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    )
    writer.write(head.encode() + b'{"domain": "example.com", "tags"')
    try:
        async with asyncio.timeout(5):
            head_in = await reader.readuntil(b"\r\n\r\n")
            length = int(head_in.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            body = await reader.readexactly(length)
    finally:
        writer.close()
        await writer.wait_closed()
    assert head_in.startswith(b"HTTP/1.1 408 "), head_in
    assert b"connection: close" in head_in.lower()
    assert b"did not arrive within 0.5 s" in body
    [record] = await api.audit()
    assert (record.outcome, record.status, record.kind) == ("timed_out", 408, kind)


@pytest.mark.parametrize("failure", sorted(FAILURES))
async def test_a_purge_the_purger_cannot_confirm_is_503(make_api: ApiFactory, failure: str) -> None:
    api = await make_api(purger=FailingPurger(FAILURES[failure]))
    answer = await post_purge(api, {"domain": DOMAIN, "prefixes": ["/assets/"], "soft": True})
    problem = answer.problem()
    assert answer.status == problem["status"] == 503
    assert answer.headers["Cache-Control"] == "no-store"
    outcome = "unconfirmed" if failure == "unconfirmed" else "error"
    retry = {"unavailable": "1", "not_replicated": "1", "unconfirmed": "3", "unsupported": "60"}
    assert answer.headers.get("Retry-After") == retry.get(failure)
    if failure == "unsupported":
        assert problem["detail"] == (
            "the purge of 'example.com' could not be done: 2 live edge processes run a build"
            " that cannot apply purges by URL, prefix or tag, or soft purges; upgrade every"
            " node, or clear the whole domain meanwhile; nothing was purged."
        )
    if failure == "unavailable":
        # The same words as a clear's when the fleet is unavailable, for a purge.
        clear = (await api.post()).problem()["detail"]
        assert (
            clear.replace("cache of", "purge of").replace("cleared", "done") == (problem["detail"])
        )
    [record, *_] = reversed(await api.audit())
    assert (record.outcome, record.status, record.kind, record.receipt) == (
        outcome,
        503,
        "prefix",
        None,
    )
    assert (record.acked, record.live) == ((1, 2) if failure == "unconfirmed" else (None, None))


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, "api.max_purge_body_bytes: must be greater than zero"),
        ("1 PB", "api.max_purge_body_bytes: '1 PB' is not a size"),
        (True, "api.max_purge_body_bytes: must be a size"),
    ],
)
def test_the_purge_body_limit_is_checked_in_the_config(
    tmp_path: Path, value: object, message: str
) -> None:
    with pytest.raises(ConfigError) as error:
        api_config(tmp_path, max_purge_body_bytes=value)
    assert message in str(error.value)
