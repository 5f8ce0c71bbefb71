"""API tokens: parsing the Authorization header, hashing, scopes. No I/O.

Only the SHA-256 of a token is ever stored. A token carries at least 256 random bits, so a
plain (unsalted, fast) hash is enough: there is nothing to brute-force, and a fast hash lets
the state database find a token by its hash with one indexed lookup.

``parse_authorization`` follows RFC 6750 §2.1 (``Bearer`` + token68, RFC 9110 §11.4/§11.2).
It never raises: every input is one of three values, and the API maps each to one status.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Iterable
from dataclasses import dataclass

from proxy.core.domains import InvalidDomain, normalise_domain

# A prefix, not a secret (S105): it makes leaked tokens easy for secret scanners to spot.
TOKEN_PREFIX = "cdnp_"  # noqa: S105
TOKEN_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
MAX_TOKEN_LENGTH = 1024  # far above a real token; bounds what is hashed per request

# RFC 9110 §11.2: token68 = 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"="
_TOKEN68 = re.compile(r"[A-Za-z0-9._~+/-]+=*")
_ALL_DOMAINS = "*"


def hash_token(token: str) -> str:
    """The SHA-256 hex digest of a token: what the state database stores."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def digests_equal(a: str, b: str) -> bool:
    """Compare two digests in constant time, so timing leaks nothing about either."""
    return hmac.compare_digest(a.encode("utf-8"), b.encode("utf-8"))


def is_valid_token_name(name: str) -> bool:
    """Token names are 1-64 of ``[A-Za-z0-9._-]``: safe to print, log and put in a table."""
    return TOKEN_NAME.fullmatch(name) is not None


@dataclass(frozen=True, slots=True)
class Scope:
    """The domains a token may clear: every configured one, or a fixed set."""

    all_domains: bool
    domains: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.all_domains and self.domains:
            raise ValueError("a scope is either all domains or a list, not both")
        if not self.all_domains and not self.domains:
            raise ValueError("a scope needs at least one domain")
        for domain in self.domains:
            try:
                normal = normalise_domain(domain)
            except InvalidDomain as exc:
                raise ValueError(f"{domain!r} is not a host name: {exc}") from None
            if normal != domain:
                raise ValueError(f"{domain!r} is not in normal form ({normal!r})")

    @classmethod
    def everything(cls) -> Scope:
        return cls(all_domains=True)

    @classmethod
    def only(cls, domains: Iterable[str]) -> Scope:
        """A scope of the given domains, which must already be normalised."""
        return cls(all_domains=False, domains=frozenset(domains))

    def allows(self, domain: str) -> bool:
        """Whether the token may clear ``domain`` (given in normal form)."""
        return self.all_domains or domain in self.domains

    def describe(self) -> str:
        """A short human-readable form, for ``token list``."""
        return "all domains" if self.all_domains else ", ".join(sorted(self.domains))

    def to_stored(self) -> str:
        """The form kept in the database: ``*`` or comma-separated sorted names.

        Unambiguous because a host name can contain neither ``*`` nor ``,``.
        """
        return _ALL_DOMAINS if self.all_domains else ",".join(sorted(self.domains))

    @classmethod
    def from_stored(cls, text: str) -> Scope:
        """Inverse of ``to_stored``; raises ValueError on anything else."""
        if text == _ALL_DOMAINS:
            return cls.everything()
        return cls.only(text.split(","))


@dataclass(frozen=True, slots=True)
class NoCredentials:
    """No Authorization header at all (RFC 6750 §3.1: answer without an error code)."""


@dataclass(frozen=True, slots=True)
class MalformedCredentials:
    """An Authorization header that is not ``Bearer <token68>`` (RFC 6750 invalid_request)."""

    reason: str  # the 400 answer's detail: what is wrong with the header


@dataclass(frozen=True, slots=True)
class BearerToken:
    """A syntactically valid bearer token; whether it is known is for the database to say."""

    token: str


Credentials = NoCredentials | MalformedCredentials | BearerToken


def parse_authorization(value: str | None) -> Credentials:
    """Classify an Authorization header value. Never raises."""
    if value is None:
        return NoCredentials()
    if not value:
        return MalformedCredentials("the Authorization header is empty")
    if not value.isascii():
        return MalformedCredentials("the Authorization header has non-ASCII characters")
    scheme, _, rest = value.partition(" ")
    # RFC 9110 §11.1: the scheme is case-insensitive.
    if scheme.lower() != "bearer":
        return MalformedCredentials("the Authorization scheme must be Bearer")
    # RFC 9110 §11.4: credentials = auth-scheme [ 1*SP ( token68 / ... ) ]
    token = rest.lstrip(" ")
    if not token:
        return MalformedCredentials("the Bearer token is missing")
    if " " in token:
        return MalformedCredentials("the Authorization header has more than one token")
    if len(token) > MAX_TOKEN_LENGTH:
        return MalformedCredentials("the Bearer token is too long")
    if _TOKEN68.fullmatch(token) is None:
        return MalformedCredentials("the Bearer token has characters outside token68")
    return BearerToken(token)
