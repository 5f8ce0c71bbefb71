"""Property: whatever arrives, clear-cache answers 200 or a 4xx problem, never a 500, and a 200
clears exactly the domain the body named (after normalisation), and only when allowed."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.core.domains import InvalidDomain, normalise_domain
from tests.api.support import DOMAINS, OTHER, ApiFactory, ApiUnderTest

HEADER_TEXT = st.text(
    alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E)
    | st.characters(min_codepoint=0xA0, max_codepoint=0x2FFF, blacklist_categories=["Cs"]),
    max_size=80,
)
KNOWN_ISH = st.sampled_from(
    [*DOMAINS, "EXAMPLE.COM.", "bücher.example", "unknown.example", "example.com:80", ""]
)
DOMAIN_TEXT = KNOWN_ISH | st.text(max_size=40)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=10,
)


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    """Mostly well-formed requests for a known-looking domain, then ever worse ones."""
    kind = draw(st.integers(0, 5))  # small numbers are drawn most often
    if kind == 5:
        return draw(st.binary(max_size=5000))
    if kind == 4:
        value: Any = draw(JSON_VALUES)
    else:
        domain = draw(KNOWN_ISH if kind < 2 else DOMAIN_TEXT | JSON_VALUES)
        value = {"domain": domain}
        if kind == 3:
            value.update(draw(st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=2)))
    return json.dumps(value, ensure_ascii=draw(st.booleans())).encode("utf-8", "surrogatepass")


@st.composite
def authorizations(draw: st.DrawFn) -> tuple[str, ...]:
    """Templates: "{deploy}" and "{scoped}" stand for the real tokens, filled in per test.

    Mostly real tokens, so most examples get past authentication to the body checks."""
    if draw(st.integers(0, 3)) < 3:  # hypothesis favours small numbers: 0-2 is common
        return (draw(st.sampled_from(["Bearer {deploy}", "bearer {scoped}"])),)
    header = draw(
        st.sampled_from(["Bearer {deploy} x", "Basic {deploy}", "Bearer {deploy}"])
        | HEADER_TEXT
        | HEADER_TEXT.map(lambda text: "Bearer " + text)
    )
    return draw(st.sampled_from([(), (header,), (header, header)]))


JSON_TYPES = ("application/json", "application/json; charset=utf-8")
CONTENT_TYPES = st.sampled_from(JSON_TYPES) | HEADER_TEXT
MAX_BODY = 4096  # the default api.max_body_bytes


def _not_json(constant: str) -> None:
    raise ValueError(f"{constant} is not JSON")


def allowed_domain(body: bytes, authorization: tuple[str, ...]) -> str | None:
    """The domain a request may clear, worked out independently of the app."""
    if len(authorization) != 1:
        return None
    token = {"Bearer {deploy}": "deploy", "bearer {scoped}": "scoped"}.get(authorization[0])
    if len(body) > MAX_BODY:
        return None
    try:
        data = json.loads(body.decode("utf-8"), parse_constant=_not_json)
        assert isinstance(data, dict) and list(data) == ["domain"]
        assert isinstance(data["domain"], str)
        domain = normalise_domain(data["domain"])
    except (ValueError, AssertionError, TypeError, InvalidDomain):
        return None
    if token == "deploy" and domain in DOMAINS:
        return domain
    if token == "scoped" and domain == OTHER:
        return domain
    return None


@pytest.fixture
async def fuzz_api(make_api: ApiFactory) -> ApiUnderTest:
    """Created once per test, so shared by all its examples (the limiter must not block)."""
    return await make_api(auth_failures_allowed=1_000_000_000)


def _fill(template: str, tokens: dict[str, str]) -> str:
    for name, token in tokens.items():
        template = template.replace("{" + name + "}", token)
    return template


@pytest.mark.slow
@settings(
    max_examples=300,
    deadline=None,
    # One app for all examples on purpose: state carried between examples is part of the test.
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    body=bodies(),
    authorization=authorizations(),
    content_type=st.integers(0, 3).flatmap(
        lambda n: st.just("application/json") if n < 3 else CONTENT_TYPES
    ),
)
async def test_any_request_gets_200_or_4xx_and_clears_only_what_it_may(
    fuzz_api: ApiUnderTest,
    body: bytes,
    authorization: tuple[str, ...],
    content_type: str,
) -> None:
    api = fuzz_api
    before = {domain: (await api.store.lookup(domain, "/")).key for domain in DOMAINS}
    headers = [("Content-Type", content_type)]
    headers += [("Authorization", _fill(value, api.tokens)) for value in authorization]

    answer = await api.send("POST", data=body, headers=headers)

    after = {domain: (await api.store.lookup(domain, "/")).key for domain in DOMAINS}
    changed = {domain for domain in DOMAINS if after[domain] != before[domain]}
    expected = allowed_domain(body, authorization)
    if expected is not None and content_type in JSON_TYPES:
        assert answer.status == 200, answer.body  # and nothing that should pass is refused
    if answer.status == 200:
        assert answer.body == b"Cache cleared"
        assert changed == {expected}
    else:
        assert 400 <= answer.status < 500, answer.body
        assert answer.problem()["status"] == answer.status
        assert changed == set()
