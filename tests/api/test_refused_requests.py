"""Refused requests, as an operator met them (issue 14 §8): the purge client refuses an option
given twice and a URL for a domain, and the audit history names the domain of a refused clear."""

from __future__ import annotations

import json

import pytest

from tests.api.support import DOMAIN, ApiUnderTest, ServerFactory, assert_rejected, recording_api
from tests.nodes import cli


@pytest.mark.slow
@pytest.mark.parametrize("option", ["--api", "--token"])
async def test_purge_refuses_an_option_given_twice(
    aiohttp_server: ServerFactory, option: str
) -> None:
    """``purge --url A --url B`` sent one request, to B, and printed success: the second
    value silently replaced the first. Now the repetition is refused, and nothing is sent.
    (The base URL has since moved to --api: issue 15.)"""
    seen: list[str] = []
    first = await recording_api(aiohttp_server, seen)
    second = await recording_api(aiohttp_server, seen)
    values = [first, second] if option == "--api" else ["token-a", "token-b"]
    args = ["purge", DOMAIN, option, values[0], option, values[1]]
    if option == "--token":
        args += ["--api", first]
    else:
        args += ["--token", "t"]
    code, out, err = await cli(*args)
    assert code == 2
    assert out == ""
    assert f"{option} given more than once" in err
    assert "Traceback" not in err
    assert seen == []


async def test_purge_says_a_url_is_not_a_domain(aiohttp_server: ServerFactory) -> None:
    seen: list[str] = []
    url = await recording_api(aiohttp_server, seen)
    code, _, err = await cli("purge", "https://example.com/page", "--api", url, "--token", "t")
    assert code == 2
    assert err.strip() == (
        "cdn-proxy: 'https://example.com/page' is not a domain: give the domain, and the path "
        "with --url (cdn-proxy purge example.com --url /page)"
    )
    assert seen == []


async def test_a_body_with_the_wrong_content_type_still_names_its_domain_in_history(
    api: ApiUnderTest,
) -> None:
    """``curl -d '{"domain": ...}'`` sends a form Content-Type: refused 415, and the history
    showed "—" although the body named a domain. The known caller's small body is read for
    the record only."""
    body = json.dumps({"domain": DOMAIN}).encode()
    answer = await api.post(body, content_type="application/x-www-form-urlencoded")
    record = await assert_rejected(api, answer, 415, "unsupported_media_type")
    assert (record.actor, record.domain) == ("deploy", DOMAIN)


async def test_a_compressed_body_is_not_read_for_the_record(api: ApiUnderTest) -> None:
    answer = await api.post(headers={"Content-Encoding": "gzip"})
    record = await assert_rejected(api, answer, 415, "unsupported_media_type")
    assert record.domain is None


@pytest.mark.parametrize(
    ("named", "recorded"),
    [
        ("evil\n.example", "evil\\n.example"),
        ("\x1b[31mred.example", "\\x1b[31mred.example"),
        ("x" * 1000, "x" * 255),
    ],
)
async def test_a_named_domain_is_recorded_bounded_and_escaped(
    api: ApiUnderTest, named: str, recorded: str
) -> None:
    """As given, but at most 255 characters and with control characters escaped: the
    history shows what was asked for, and it cannot forge lines where the log is read."""
    answer = await api.post(json.dumps({"domain": named, "force": True}).encode())
    record = await assert_rejected(api, answer, 400, "bad_request")
    assert record.domain == recorded
