"""Property: whatever arrives, the purge endpoint answers 200 or a 4xx problem, never a 500;
a 200 purges exactly the domain the body named, and only when the token may; a dry run and
every refusal change nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from proxy.core.domains import InvalidDomain, normalise_domain
from proxy.core.purge.purges import InvalidPurge, purge_request
from tests.api.purge_support import PURGE
from tests.api.support import DOMAINS, OTHER, ApiFactory, ApiUnderTest
from tests.api.test_clear_cache_fuzz import (
    JSON_VALUES,
    KNOWN_ISH,
    _fill,
    authorizations,
)

KIND_FIELDS = {"urls": "url", "prefixes": "prefix", "tags": "tag"}
ITEM = st.sampled_from(["/", "/x", "/a?b=1", "/x", "tag", "a,b", "", " /x", "/é", "t" * 257])
ITEMS = st.lists(ITEM | st.text(max_size=12) | JSON_VALUES, max_size=4) | JSON_VALUES
OPTION = st.booleans() | JSON_VALUES
PATHS = st.sampled_from(["/", "/x", "/a?b=1", "/assets/", "/%7E"])
TAGS = st.sampled_from(["t", "page", "A-1", "x" * 256])
OPTIONS = {"soft": st.booleans(), "dry_run": st.booleans()}


@st.composite
def well_formed(draw: st.DrawFn) -> dict[str, Any]:
    """One kind with good items, boolean options, a known-looking domain."""
    name = draw(st.sampled_from([*KIND_FIELDS, "all"]))
    good = TAGS if name == "tags" else PATHS
    items = True if name == "all" else draw(st.lists(good, min_size=1, max_size=3))
    options = draw(st.fixed_dictionaries({}, optional=OPTIONS))
    return {"domain": draw(KNOWN_ISH), name: items, **options}


@st.composite
def shaky(draw: st.DrawFn) -> dict[str, Any]:
    """Any number of kinds and options, with doubtful values, and maybe unknown fields."""
    value: dict[str, Any] = {"domain": draw(KNOWN_ISH | JSON_VALUES)}
    for name in draw(st.lists(st.sampled_from([*KIND_FIELDS, "all"]), max_size=2)):
        value[name] = draw(st.booleans() if name == "all" else ITEMS)
    for name in draw(st.lists(st.sampled_from(["soft", "dry_run"]), max_size=2)):
        value[name] = draw(OPTION)
    value.update(draw(st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=2)))
    return value


def encoded(value: Any, ascii_only: bool, duplicate: bool) -> bytes:
    text = json.dumps(value, ensure_ascii=ascii_only)
    if duplicate:
        text = text.replace("}", ', "domain": "example.com"}', 1)  # a field twice
    return text.encode("utf-8", "surrogatepass")


# Well-formed purges, shaky ones, any JSON, any bytes: a quarter each.
BODIES = st.one_of(
    st.builds(encoded, well_formed(), st.booleans(), st.just(False)),
    st.builds(encoded, shaky(), st.booleans(), st.booleans()),
    st.builds(encoded, JSON_VALUES, st.booleans(), st.just(False)),
    st.binary(max_size=3000),
)


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    names = [name for name, _ in pairs]
    assert len(names) == len(set(names))
    return dict(pairs)


def _not_json(constant: str) -> None:
    raise ValueError(constant)


def allowed(body: bytes, authorization: tuple[str, ...]) -> tuple[str, bool] | None:
    """The domain a request may purge and whether it is a dry run, worked out apart from
    the app (the purge's own rules are core/purges.py's)."""
    token = {"Bearer {deploy}": "deploy", "bearer {scoped}": "scoped"}.get(
        authorization[0] if len(authorization) == 1 else ""
    )
    try:
        data = json.loads(body.decode("utf-8"), object_pairs_hook=_pairs, parse_constant=_not_json)
        assert isinstance(data, dict) and isinstance(data.get("domain"), str)
        assert set(data) <= {"domain", *KIND_FIELDS, "all", "soft", "dry_run"}
        kinds = [name for name in [*KIND_FIELDS, "all"] if name in data]
        assert len(kinds) == 1
        options = [data.get(name, False) for name in ("soft", "dry_run")]
        assert all(type(value) is bool for value in options)
        if kinds[0] == "all":
            assert data["all"] is True
        else:
            assert isinstance(data[kinds[0]], list)
            purge_request(KIND_FIELDS[kinds[0]], data[kinds[0]])
        domain = normalise_domain(data["domain"])
    except (ValueError, AssertionError, TypeError, InvalidDomain, InvalidPurge, RecursionError):
        return None
    if domain in DOMAINS and (token == "deploy" or (token == "scoped" and domain == OTHER)):
        return domain, options[1]
    return None


@pytest.fixture
async def purge_api(make_api: ApiFactory) -> ApiUnderTest:
    """One app for all of a test's examples: no limit on wrong tokens, so none blocks."""
    return await make_api(auth_failures_allowed=1_000_000_000)


@pytest.mark.slow
@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    body=BODIES,
    authorization=authorizations(),
    content_type=st.sampled_from(["application/json"] * 5 + ["text/plain", ""]),
)
async def test_any_purge_request_gets_200_or_4xx_and_purges_only_what_it_may(
    purge_api: ApiUnderTest, body: bytes, authorization: tuple[str, ...], content_type: str
) -> None:
    api = purge_api
    before = {domain: (await api.store.lookup(domain, "/x")).key for domain in DOMAINS}
    headers = [("Content-Type", content_type)]
    headers += [("Authorization", _fill(value, api.tokens)) for value in authorization]

    answer = await api.send("POST", PURGE, data=body, headers=headers)
    event(f"status {answer.status}")

    after = {domain: (await api.store.lookup(domain, "/x")).key for domain in DOMAINS}
    changed = {domain for domain in DOMAINS if after[domain] != before[domain]}
    expected = allowed(body, authorization) if content_type == "application/json" else None
    if expected is not None:
        assert answer.status == 200, answer.body  # nothing that should pass is refused
    if answer.status == 200:
        assert expected is not None, body
        receipt = json.loads(answer.body)
        domain, dry_run = expected
        assert (receipt["domain"], receipt["dry_run"]) == (domain, dry_run)
        assert changed == (set() if dry_run else {domain})
    else:
        assert 400 <= answer.status < 500, answer.body
        assert answer.problem()["status"] == answer.status
        assert changed == set()
