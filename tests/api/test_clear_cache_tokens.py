"""Tokens changed by another process take effect at once; failures are rate limited per address;
a failing database or purger is a clean 503, never a 500."""

from __future__ import annotations

import aiohttp
import pytest

from proxy.core.auth.tokens import Scope
from proxy.state.sqlite import StateDB
from proxy.store.base import ClearResult
from tests.api.support import (
    CHALLENGE,
    DOMAIN,
    INVALID_TOKEN,
    START,
    ApiFactory,
    ApiUnderTest,
    assert_rejected,
)

UNKNOWN = {"Authorization": "Bearer cdnp_unknown"}


async def test_regenerated_token_stops_working_at_once(api: ApiUnderTest) -> None:
    old = api.tokens["deploy"]
    assert (await api.post(domain="other.test")).status == 200  # the old value worked

    # A separate connection to the same file, as the `token regenerate` command makes.
    with StateDB(api.state_path) as cli:
        new = cli.regenerate_token("deploy", START + 1)

    answer = await api.post(token=None, headers={"Authorization": f"Bearer {old}"})
    assert answer.status == 401
    assert answer.headers["WWW-Authenticate"] == INVALID_TOKEN
    assert await api.is_untouched(DOMAIN)

    answer = await api.post(token=None, headers={"Authorization": f"Bearer {new}"})
    assert (answer.status, answer.body) == (200, b"Cache cleared")
    assert await api.is_cleared(DOMAIN)
    assert new != old


async def test_revoked_token_stops_working_at_once(api: ApiUnderTest) -> None:
    with StateDB(api.state_path) as cli:
        cli.revoke_token("deploy")

    answer = await api.post()
    await assert_rejected(
        api, answer, 401, "unauthorized", headers={"WWW-Authenticate": INVALID_TOKEN}
    )


async def test_token_created_by_another_process_works_at_once(api: ApiUnderTest) -> None:
    with StateDB(api.state_path) as cli:
        api.tokens["ci"] = cli.create_token("ci", Scope.only([DOMAIN]), START)

    answer = await api.post(token="ci")
    assert answer.status == 200
    await api.state.flush()  # the last use is written behind the answer
    with StateDB(api.state_path) as cli:
        used = {record.name: record.last_used_at for record in cli.list_tokens()}
    assert used == {"ci": START, "deploy": None, "scoped": None}


async def test_repeated_failures_are_rate_limited_until_the_window_passes(
    make_api: ApiFactory,
) -> None:
    api = await make_api(auth_failures_allowed=3, auth_failure_window=60)
    for _ in range(3):
        assert (await api.post(headers=UNKNOWN)).status == 401

    answer = await api.post(headers=UNKNOWN)
    assert answer.status == 429
    assert answer.headers["Retry-After"] == "60"
    assert answer.headers["Cache-Control"] == "no-store"
    assert answer.problem()["status"] == 429
    assert "WWW-Authenticate" not in answer.headers
    record = (await api.audit())[0]
    assert (record.outcome, record.status, record.actor) == ("rate_limited", 429, None)

    api.clock.now += 20
    answer = await api.post(headers=UNKNOWN)
    assert (answer.status, answer.headers["Retry-After"]) == (429, "40")

    api.clock.now += 40  # the first failure leaves the window; 429s did not extend it
    assert (await api.post(headers=UNKNOWN)).status == 401


async def test_a_valid_token_is_never_refused_for_its_address_s_failures(
    make_api: ApiFactory,
) -> None:
    """Only failures are throttled: a CI NAT or a proxy in front of the API must not block
    every purge behind it because one client there is misconfigured (issue 13, failure 5).
    A guess still learns only "wrong", and 256 random bits cannot be guessed at any rate."""
    api = await make_api(auth_failures_allowed=3, auth_failure_window=60)
    for _ in range(4):
        await api.post(headers=UNKNOWN)
    assert (await api.post(headers=UNKNOWN)).status == 429

    answer = await api.post()
    assert (answer.status, answer.body) == (200, b"Cache cleared")
    assert (await api.audit())[0].outcome == "cleared"
    # ...and a success does not lift the throttle for the wrong tokens beside it.
    assert (await api.post(headers=UNKNOWN)).status == 429


async def test_missing_and_malformed_credentials_count_as_failures(make_api: ApiFactory) -> None:
    api = await make_api(auth_failures_allowed=3, auth_failure_window=60)
    assert (await api.post(token=None)).status == 401
    assert (await api.post(token=None, headers={"Authorization": "Basic eDp5"})).status == 400
    assert (await api.post(token=None, headers={"Authorization": "Bearer a b"})).status == 400

    answer = await api.post(headers=UNKNOWN)
    assert answer.status == 429
    # Still answered in the documented order: a missing header is a 401 even when blocked.
    answer = await api.post(token=None)
    assert (answer.status, answer.headers["WWW-Authenticate"]) == (401, CHALLENGE)


async def test_refusals_with_a_valid_token_are_not_failures(make_api: ApiFactory) -> None:
    api = await make_api(auth_failures_allowed=2, auth_failure_window=60)
    assert (await api.post(token="scoped")).status == 403
    assert (await api.post(domain="unknown.example")).status == 404
    assert (await api.post(b"{}")).status == 400
    assert (await api.post(content_type="text/plain")).status == 415
    assert (await api.post()).status == 200


async def test_rate_limit_is_per_client_address(make_api: ApiFactory) -> None:
    api = await make_api(auth_failures_allowed=1, auth_failure_window=60)
    assert (await api.post(headers=UNKNOWN)).status == 401
    assert (await api.post(headers=UNKNOWN)).status == 429

    # Linux routes all of 127.0.0.0/8 to lo, so a second source address needs no setup.
    connector = aiohttp.TCPConnector(local_addr=("127.0.0.2", 0))
    async with (
        aiohttp.ClientSession(connector=connector) as other,
        other.post(
            api.client.make_url("/api/v1/cdn/clear-cache"),
            json={"domain": DOMAIN},
            headers=UNKNOWN,
        ) as response,
    ):
        assert response.status == 401  # a failure of its own, not yet throttled
    assert (await api.audit())[0].client == "127.0.0.2"


async def test_unavailable_database_is_a_503_not_a_500(api: ApiUnderTest) -> None:
    await api.state.close()

    answer = await api.post()

    assert answer.status == 503
    assert answer.headers["Cache-Control"] == "no-store"
    assert answer.problem()["detail"] == "the token database is unavailable; try again"
    assert await api.is_untouched(DOMAIN)


class BrokenPurger:
    """A purger whose backend is down, as a fleet purger's Valkey can be."""

    name = None  # one process, no fleet

    async def clear_domain(self, domain: str) -> ClearResult:
        raise ConnectionError("backend down")


@pytest.mark.slow
async def test_failed_purge_is_a_503_and_is_audited(
    make_api: ApiFactory, caplog: pytest.LogCaptureFixture
) -> None:
    api = await make_api(purger=BrokenPurger())

    answer = await api.post()

    assert answer.status == 503
    assert "could not be cleared" in answer.problem()["detail"]
    assert "backend down" not in answer.body.decode()
    assert "backend down" in caplog.text
    [record] = await api.audit()
    assert (record.outcome, record.status, record.actor, record.domain) == (
        "error",
        503,
        "deploy",
        DOMAIN,
    )
