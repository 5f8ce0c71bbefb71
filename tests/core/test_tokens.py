"""Bearer credentials (RFC 6750 §2.1, RFC 9110 §11), token hashes and scopes."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.core.auth.tokens import (
    BearerToken,
    Credentials,
    MalformedCredentials,
    NoCredentials,
    Scope,
    digests_equal,
    hash_token,
    is_valid_token_name,
    parse_authorization,
)

TOKEN = "cdnp_AbC-123_xyz"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, NoCredentials()),
        (f"Bearer {TOKEN}", BearerToken(TOKEN)),
        # RFC 9110 §11.1: the scheme is case-insensitive.
        (f"bearer {TOKEN}", BearerToken(TOKEN)),
        (f"BEARER {TOKEN}", BearerToken(TOKEN)),
        (f"bEaReR {TOKEN}", BearerToken(TOKEN)),
        # RFC 9110 §11.4: 1*SP between scheme and credentials.
        (f"Bearer   {TOKEN}", BearerToken(TOKEN)),
        # token68 allows these characters, and trailing "=" padding.
        ("Bearer a-._~+/Z9", BearerToken("a-._~+/Z9")),
        ("Bearer abc==", BearerToken("abc==")),
    ],
)
def test_well_formed_values(value: str | None, expected: Credentials) -> None:
    assert parse_authorization(value) == expected


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("", "empty"),
        ("Bearer", "missing"),
        ("Bearer ", "missing"),
        ("Bearer    ", "missing"),
        ("Basic dXNlcjpwYXNz", "must be Bearer"),
        ("Token abc", "must be Bearer"),
        ("Bearerabc", "must be Bearer"),
        (f"Bearer\t{TOKEN}", "must be Bearer"),
        (f" Bearer {TOKEN}", "must be Bearer"),
        (f"Bearer {TOKEN} extra", "more than one"),
        (f"Bearer {TOKEN} ", "more than one"),
        ("Bearer a, b", "more than one"),
        ("Bearer abc!", "token68"),
        ('Bearer "abc"', "token68"),
        ("Bearer a=b", "token68"),  # padding only at the end
        ("Bearer =abc", "token68"),
        ("Bearer abc,", "token68"),
        ("Bearer abc\n", "token68"),
        ("Bearer tökén", "non-ASCII"),
        ("Bearer \uff41\uff42\uff43", "non-ASCII"),  # fullwidth "abc" is not ALPHA
        ("Bearer \ud800", "non-ASCII"),
        ("Bearer " + "a" * 1025, "too long"),
    ],
)
def test_malformed_values(value: str, reason: str) -> None:
    result = parse_authorization(value)
    assert isinstance(result, MalformedCredentials)
    assert reason in result.reason


@given(st.text() | st.none())
def test_parse_authorization_never_raises(value: str | None) -> None:
    result = parse_authorization(value)
    assert isinstance(result, NoCredentials | MalformedCredentials | BearerToken)
    if isinstance(result, BearerToken):
        assert value is not None and value.endswith(result.token)
        assert result.token.isascii() and " " not in result.token


@pytest.mark.slow
@given(st.from_regex(r"[A-Za-z0-9._~+/-]{1,100}={0,3}", fullmatch=True))
def test_every_token68_is_accepted(token: str) -> None:
    assert parse_authorization(f"Bearer {token}") == BearerToken(token)


def test_hash_is_sha256_hex() -> None:
    assert hash_token(TOKEN) == hashlib.sha256(TOKEN.encode()).hexdigest()
    assert len(hash_token("")) == 64


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [("abc", "abc", True), ("abc", "abd", False), ("abc", "abcd", False), ("", "", True)],
)
def test_digests_equal(a: str, b: str, equal: bool) -> None:
    assert digests_equal(a, b) is equal


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("deploy", True),
        ("ci.main_2-a", True),
        ("x" * 64, True),
        ("", False),
        ("x" * 65, False),
        ("with space", False),
        ("slash/name", False),
        ("ünïcode", False),
        ("name\n", False),
    ],
)
def test_token_names(name: str, valid: bool) -> None:
    assert is_valid_token_name(name) is valid


@pytest.mark.parametrize(
    ("scope", "domain", "allowed"),
    [
        (Scope.everything(), "example.com", True),
        (Scope.everything(), "anything.test", True),
        (Scope.only(["example.com"]), "example.com", True),
        (Scope.only(["example.com"]), "other.test", False),
        (Scope.only(["example.com"]), "sub.example.com", False),  # no implicit subdomains
        (Scope.only(["example.com", "other.test"]), "other.test", True),
    ],
)
def test_scope_allows(scope: Scope, domain: str, allowed: bool) -> None:
    assert scope.allows(domain) is allowed


@pytest.mark.parametrize(
    ("scope", "stored", "described"),
    [
        (Scope.everything(), "*", "all domains"),
        (Scope.only(["example.com"]), "example.com", "example.com"),
        (
            Scope.only(["other.test", "example.com"]),
            "example.com,other.test",
            "example.com, other.test",
        ),
        (Scope.only(["xn--bcher-kva.example"]), "xn--bcher-kva.example", "xn--bcher-kva.example"),
    ],
)
def test_scope_round_trips_through_its_stored_form(
    scope: Scope, stored: str, described: str
) -> None:
    assert scope.to_stored() == stored
    assert Scope.from_stored(stored) == scope
    assert scope.describe() == described


@pytest.mark.parametrize(
    "stored", ["", ",", "example.com,", "EXAMPLE.com", "*,example.com", "exa mple.com", "a..b"]
)
def test_damaged_stored_scope_is_refused(stored: str) -> None:
    with pytest.raises(ValueError):
        Scope.from_stored(stored)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("all_domains", "domains"),
    [(True, frozenset({"example.com"})), (False, frozenset())],
)
def test_scope_is_all_or_a_list(all_domains: bool, domains: frozenset[str]) -> None:
    with pytest.raises(ValueError):
        Scope(all_domains=all_domains, domains=domains)
