"""Web cache deception defences in core (core/cache/deception.py, decision 0042): the path
rules match (RFC 3986 §6.2.2, §5.2.4), cookie names as origins read them, and the answers a
rule's lifetime is not lent to (RFC 9111 §3, §4.2.2's Cookie rule; Cloudflare's Cache
Deception Armor)."""

from __future__ import annotations

from email.utils import formatdate
from http.cookies import CookieError, SimpleCookie
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from multidict import CIMultiDict

from proxy.core.cache.deception import (
    cookie_names,
    extension_of,
    fits_extension,
    folded_name,
    percent_normalised,
    rule_path,
)
from proxy.core.cache.policy import DontStore, Storable, assess_response
from proxy.core.cache.rules import Rule, RuleSet, never_matches

NOW = 1_700_000_000.0


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("/", "/"),
        ("/static/app.css", "/static/app.css"),
        ("/%61ccount/x.css", "/account/x.css"),  # §6.2.2.2: unreserved escapes decoded
        ("/%7Euser/%2d%2E%5F", "/~user/-._"),
        ("/a%2fb", "/a%2Fb"),  # §6.2.2.1: reserved stay escaped, in upper case
        ("/a%3bb.css", "/a%3Bb.css"),
        ("/a%3fb", "/a%3Fb"),
        ("/%zz/%4", "/%zz/%4"),  # not an escape: kept as spelt
        ("/caf\u00e9", "/caf%C3%A9"),  # outside ASCII: escaped as UTF-8
        ("/a b", "/a%20b"),
        ("/a/./b", "/a/b"),  # §5.2.4
        ("/a/b/../c", "/a/c"),
        ("/a/b/..", "/a/"),
        ("/a/b/.", "/a/b/"),
        ("/../../a", "/a"),
        ("/static/%2e%2e/account", "/account"),
        ("/static/%2E%2e/%2e/account/", "/account/"),
        ("/a/..%2fb", "/a/..%2Fb"),  # an escaped '/' is no separator
        ("//a///b//", "/a/b/"),  # repeated slashes merged
        ("/a\\b\\..\\c", "/a/c"),  # '\\' read as '/' (IIS, and Cloudflare's normalisation)
        ("/account;x.css", "/account"),  # path parameters cut (Tomcat, Jetty, Spring)
        ("/account;jsessionid=1/x.css", "/account/x.css"),
        ("/x.css;v=1", "/x.css"),
        ("/a/..;/b", "/b"),  # Tomcat's '..;' is '..'
        ("/;x.css", "/"),
        ("/a;b/", "/a/"),
        ("*", "*"),
    ],
)
def test_rules_match_the_normalised_path(raw: str, normal: str) -> None:
    assert rule_path(raw) == normal


@given(st.text(alphabet="/.;%\\2eEfFaA-_~ ", max_size=30))
def test_normalising_twice_changes_nothing(path: str) -> None:
    """A normal form is one: what rules match is stable."""
    once = rule_path("/" + path)
    assert rule_path(once) == once
    assert once.startswith("/")


@pytest.mark.parametrize(
    ("globs", "path", "matches"),
    [
        (("/account/*",), "/%61ccount/x.css", True),
        (("/account/*",), "/static/..%2F..%2Faccount/x.css", False),
        (("*.css",), "/account;x.css", False),
        (("*.css",), "/account.php/x.css", True),  # PATH_INFO: the Content-Type check's
        (("*.css",), "/x.css;v=1", True),
        (("/%7Euser/*",), "/~user/a", True),  # globs are spelt as paths are
        (("/~user/*",), "/%7euser/a", True),
        (("/a%2fb",), "/a%2Fb", True),
        (("/caf\u00e9/*",), "/caf%c3%a9/menu", True),
    ],
)
def test_globs_match_the_normalised_path(globs: tuple[str, ...], path: str, matches: bool) -> None:
    rules = RuleSet((Rule.compiled(name="r", paths=globs, cache=False),))
    assert (rules.match(path) is not None) is matches


@pytest.mark.parametrize(
    ("glob", "why"),
    [
        ("/a;b", "a path parameter (';...') is cut before rules match"),
        ("*;*", "a path parameter"),
        ("/a//b", "repeated slashes are merged"),
        ("/a/../b", "dot segments are removed"),
        ("/a/%2e/b", "dot segments are removed"),
        ("/a/..", "dot segments are removed"),
        ("/a\\b", "'\\' is read as '/'"),
    ],
)
def test_a_glob_no_normalised_path_can_match_is_refused(glob: str, why: str) -> None:
    reason = never_matches(glob)
    assert reason is not None and why in reason and "decision 0042" in reason


@pytest.mark.parametrize("glob", ["/a.b", "/a/..*", "*.css", "/a/*/b", "/static/*"])
def test_ordinary_globs_are_accepted(glob: str) -> None:
    assert never_matches(glob) is None


def test_percent_normalisation_keeps_plain_text() -> None:
    assert percent_normalised("/plain/path") == "/plain/path"


# -- cookie names (bypass_cookies) --------------------------------------------------------------


@pytest.mark.parametrize(
    ("lines", "names"),
    [
        (["sessionid=1"], ["sessionid"]),
        (["a=1; sessionid=2"], ["a", "sessionid"]),
        (["a=1, sessionid=2"], ["a", "sessionid"]),  # RFC 2965, Rack, SimpleCookie
        (["a=1", "b=2"], ["a", "b"]),  # HTTP/2 sends one field per cookie
        (["session%69d=1"], ["sessionid"]),  # PHP decodes names
        (["session+id=1"], ["session_id"]),
        (["session.id=1"], ["session_id"]),  # PHP: '.' and ' ' are '_'
        (["session id=1"], ["session_id", "session", "id"]),  # and SimpleCookie: two
        (["a=1 sessionid=2"], ["a", "a", "sessionid"]),  # SimpleCookie splits at spaces
        (["SessionID=1"], ["sessionid"]),  # case folded
        (["  padded =1"], ["padded", "padded"]),
        (['a="x;sessionid=1"'], ["a", "sessionid"]),  # a quoted ';' still splits: safe side
        ([";;, ,=1"], []),
        (["novalue"], ["novalue"]),
    ],
)
def test_cookie_names_as_origins_read_them(lines: list[str], names: list[str]) -> None:
    assert list(cookie_names(lines)) == names


@given(st.text(alphabet='aAbB=; ,"\\\t.%5f+!$:()[]x\x0b', max_size=24))
def test_every_name_simple_cookie_reads_is_found(line: str) -> None:
    """A differential check against Python's SimpleCookie (which aiohttp and others read
    cookies with): each name it parses is among ``cookie_names``'."""
    parsed: SimpleCookie = SimpleCookie()
    try:
        parsed.load(line)
    except CookieError:
        return
    assert {folded_name(name) for name in parsed} <= set(cookie_names([line]))


@pytest.mark.parametrize(
    ("globs", "cookie", "bypassed"),
    [
        (("sessionid",), "session%69d=alice", True),
        (("sessionid",), "a=1, sessionid=alice", True),
        (("sessionid",), "SESSIONID=alice", True),
        (("sessionid",), "sessionidx=1", False),
        (("session_id",), "session.id=alice", True),
        (("Session.ID",), "session_id=alice", True),  # a glob is folded as names are
        (("wordpress_logged_in_*",), "wordpress%5Flogged%5Fin%5Fabc=1", True),
        (("wordpress_logged_in_*",), "_ga=1", False),
        (("PHPSESSID",), "phpsessid=1", True),
    ],
)
def test_bypass_cookies_match_every_spelling(
    globs: tuple[str, ...], cookie: str, bypassed: bool
) -> None:
    rules = RuleSet((Rule.compiled(name="r", bypass_cookies=globs, edge_ttl=60.0),))
    applied = rules.match("/")
    assert applied is not None
    assert applied.bypassed([cookie]) is bypassed
    kind = applied.bypass_kind(CIMultiDict({"Cookie": cookie}))
    assert (kind == "bypass-cookie") is bypassed


# -- what a rule's lifetime is not lent to ------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "extension"),
    [
        ("/a/b.css", "css"),
        ("/a/B.CSS", "css"),
        ("/a.css/b", None),
        ("/a/b.html", None),
        ("/a/b.php", None),
        ("/a/b", None),
        ("/a/.woff2", "woff2"),
        ("/a/b.tar.gz", "gz"),
    ],
)
def test_extension_of(path: str, extension: str | None) -> None:
    assert extension_of(path) == extension


@pytest.mark.parametrize(
    ("extension", "content_type", "fits"),
    [
        ("css", "text/css", True),
        ("css", "TEXT/CSS; charset=utf-8", True),
        ("css", "text/html", False),
        ("css", "text/plain", False),
        ("css", None, False),
        ("css", "application/octet-stream", True),  # Cloudflare's exception: a download
        ("js", "application/javascript", True),
        ("js", "text/javascript;charset=UTF-8", True),
        ("js", "application/json", False),
        ("jpg", "image/webp", True),  # any image for an image extension
        ("png", "text/html", False),
        ("gif", "video/webm", True),
        ("svg", "image/svg+xml", True),
        ("svg", "text/html", False),
        ("woff2", "font/woff2", True),
        ("woff", "application/font-woff", True),
        ("json", "application/ld+json", True),  # RFC 6839 suffix
        ("json", "text/html", False),
        ("xml", "application/atom+xml", True),
        ("pdf", "application/pdf", True),
    ],
)
def test_content_type_fits_extension(extension: str, content_type: str | None, fits: bool) -> None:
    assert fits_extension(extension, content_type) is fits


def assessed(
    path: str,
    request: dict[str, str],
    response: dict[str, str],
    status: int = 200,
    **rule: Any,
) -> Storable | DontStore:
    rules = RuleSet((Rule.compiled(name="r", **rule),))
    return assess_response(
        method="GET",
        request=CIMultiDict(request),
        status=status,
        reason="OK",
        headers=tuple(response.items()),
        request_time=NOW,
        response_time=NOW,
        heuristic=False,
        rules=rules.match(path),
    )


CSS = {"Content-Type": "text/css"}
HTML = {"Content-Type": "text/html"}
COOKIE = {"Cookie": "PHPSESSID=alice"}
TTL = {"edge_ttl": 3600.0}


@pytest.mark.parametrize(
    ("path", "request_fields", "response", "rule", "refused"),
    [
        # §4.2.2's rule for a guessed lifetime, applied to a lent one.
        ("/a.css", COOKIE, CSS, TTL, "request-cookie"),
        ("/a.css", {}, CSS, TTL, None),
        ("/a.css", COOKIE, CSS, {**TTL, "cache_with_cookies": True}, None),
        # The origin's own shared lifetime: the rule only changes how long.
        ("/a.css", COOKIE, {**CSS, "Cache-Control": "max-age=60"}, TTL, None),
        ("/a.css", COOKIE, {**CSS, "Expires": formatdate(NOW + 60, usegmt=True)}, TTL, None),
        ("/a.css", COOKIE, {**CSS, "Cache-Control": "max-age=0"}, TTL, "request-cookie"),
        # Origin fields a rule sets aside are not the origin's consent.
        (
            "/a.css",
            COOKIE,
            {**CSS, "Cache-Control": "private, max-age=60"},
            {**TTL, "ignore_origin": frozenset({"cache-control"})},
            "request-cookie",
        ),
        (
            "/a.css",
            COOKIE,
            {**CSS, "Cache-Control": "no-store, max-age=60"},
            {"ignore_origin": frozenset({"cache-control"})},
            "request-cookie",
        ),
        # Authorization: §3.5 on the origin's own directives, whatever the rule says.
        ("/a.css", {"Authorization": "Bearer a"}, CSS, {**TTL, "cache_with_cookies": True}, "x"),
        # The Content-Type of a success under an extension.
        ("/account.php/x.css", {}, HTML, TTL, "content-type-mismatch"),
        ("/account.php/x.css", {}, {}, TTL, "content-type-mismatch"),
        ("/account.php/x.css", {}, {**HTML, "Cache-Control": "max-age=60"}, TTL, None),
        ("/account", {}, HTML, TTL, None),
        ("/a.css", {}, {"Content-Type": "application/octet-stream"}, TTL, None),
    ],
)
def test_what_a_rule_lifetime_is_not_lent_to(
    path: str,
    request_fields: dict[str, str],
    response: dict[str, str],
    rule: dict[str, Any],
    refused: str | None,
) -> None:
    verdict = assessed(path, request_fields, response, **rule)
    if refused is None:
        assert isinstance(verdict, Storable)
    elif refused == "x":  # refused by the RFC's own table
        assert isinstance(verdict, DontStore) and verdict.reason == "authorization"
    else:
        assert verdict == DontStore(refused)


@pytest.mark.parametrize("status", [404, 410, 301, 204])
def test_only_successes_with_a_body_are_checked_for_their_type(status: int) -> None:
    rule = {"edge_ttl_by_status": ((status, 60.0),)}
    assert isinstance(assessed("/gone.css", {}, HTML, status=status, **rule), Storable)
